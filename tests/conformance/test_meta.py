"""The suite has teeth: every negative control fails its named check; correct kernels pass.

Each broken kernel of ``plga.conformance.broken`` is run through the whole ``check_kernel``
(quick profile, no shrinking: ~1 s each) and must fail the check named for it, with a
conformance failure carrying a reproduction, not a crash.
"""

import pytest

from plga.conformance import check_kernel, resolve_impl
from plga.conformance.broken import BROKEN


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_kernel_is_rejected(name):
    broken = BROKEN[name]
    report = check_kernel(broken.make(), profile="quick", shrink=False)
    failed = report.failed_checks()
    assert broken.expected_check in failed, (
        f"the suite did not reject {name} ({broken.bug}) in {broken.expected_check}:\n{report.summary()}")
    messages = [r.message for r in report.result(broken.expected_check) if r.status == "failed"]
    assert any("Reproduce" in m for m in messages), f"failure of {name} lacks a reproduction note:\n{messages[0]}"
    assert not any(m.startswith(("TypeError", "AttributeError", "NameError")) for m in messages), (
        f"{name} was caught by a crash, not by the check:\n{messages[0]}")


def test_every_bug_family_of_the_brief_is_covered():
    assert len(BROKEN) >= 10
    assert {"transposed_g", "g_before_rope", "missing_scale", "softmax_wrong_axis", "causal_off_by_one",
            "padding_ignored", "finite_mask_leak", "stale_gcache", "fp16_power_stage", "heads_permuted",
            "g_bias_dropped"} <= set(BROKEN)


@pytest.mark.parametrize(("impl", "dtypes"), [
    ("default", None),                      # the project's kernels, every declared dtype
    ("eager", ("bfloat16",)),               # float32 eager is the baseline itself
    ("reference", ("float32",)),            # float64 rounding to float32: always passes
])
def test_correct_kernels_pass(impl, dtypes):
    report = check_kernel(resolve_impl(impl), dtypes=dtypes, profile="quick", shrink=False)
    assert report.passed, report.summary() + "\n\n" + "\n\n".join(r.message for r in report.failures)
    assert report.counts()["passed"] > 0
