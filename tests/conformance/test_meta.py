"""The suite has teeth and no false alarms: every negative control fails, every correct
implementation passes.

* the twelve kernels of :mod:`plga.conformance.broken` fail the check named for each, with a
  conformance failure carrying a reproduction (quick profile);
* the controls of :mod:`plga.conformance.controls` (tiled kernels, FA-2 backward, split-K,
  in-place mutators, configuration and cache bugs, and correct alternative algorithms): in
  ``quick`` and ``ci`` every wrong one is caught (in one of the checks it names) and every
  correct one passes; ``thorough`` too with ``PLGA_SLOW=1``;
* the project's kernels and the reference pass; the suite's own eager baseline is refused
  (it would be compared with itself).
"""

import contextlib
import io
import os

import pytest

from plga.conformance import check_kernel, resolve_impl
from plga.conformance.broken import BROKEN
from plga.conformance.checks import CHECKS
from plga.conformance.cli import conformance_main
from plga.conformance.controls import CONTROLS

SLOW = bool(os.environ.get("PLGA_SLOW"))


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
    wrong = [c for c in CONTROLS.values() if not c.correct]
    assert len(wrong) >= 25 and sum(c.correct for c in CONTROLS.values()) >= 4
    assert all(c.caught_by for c in wrong)


_PROFILES = ["quick", "ci"] + (["thorough"] if SLOW else [])


@pytest.mark.parametrize("profile", _PROFILES)
@pytest.mark.parametrize("name", list(CONTROLS))
def test_control(name, profile):
    control = CONTROLS[name]
    # a wrong control runs the checks that must catch it (any failure makes the full run FAIL too)
    checks = None if control.correct else [c for c in control.caught_by if c in CHECKS]
    report = check_kernel(control.make(), profile=profile, shrink=False, exitfirst=not control.correct, checks=checks)
    if control.correct:
        assert report.verdict == "PASS", report.summary()
    else:
        assert report.verdict == "FAIL", f"{name} ({control.description}) was not caught:\n{report.summary()}"
        assert report.failed_checks() & set(control.caught_by), report.summary()


def test_self_test_prints_caught_total_and_false_positives():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = conformance_main(["--self-test", "-k", "(tail_block_dropped and not vocab) or (empty_rows_nan and not causal and not backward) or split_k"])
    text = out.getvalue()
    assert code == 0, text
    assert "caught 3/3 wrong kernels, 0 false positives among 1 correct ones" in text.splitlines()[0]


def test_self_test_counts_a_missed_control(monkeypatch):
    """Negative control of the self-test: a 'wrong' control that is in fact correct is a miss."""
    import dataclasses

    from plga.conformance import selftest

    fake = {"looks_wrong": dataclasses.replace(CONTROLS["split_k"], name="looks_wrong", correct=False, caught_by=("x",))}
    monkeypatch.setattr(selftest, "CONTROLS", fake)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = selftest.run_self_test(profile="quick")
    assert code == 1 and "caught 0/1 wrong kernels" in out.getvalue()


@pytest.mark.parametrize(("impl", "dtypes"), [
    ("default", None),                      # the project's kernels, every declared dtype
    ("kernels-eager", ("float32",)),        # the project's kernels with scores materialized
    ("kernels-at-scale", None),             # every size threshold at its lowest: the paths of large models
    ("reference", ("float32",)),            # float64 rounding to float32: always passes
])
def test_correct_kernels_pass(impl, dtypes):
    report = check_kernel(resolve_impl(impl), dtypes=dtypes, profile="quick", shrink=False)
    assert report.passed, report.summary() + "\n\n" + "\n\n".join(r.message for r in report.failures)
    assert report.counts()["passed"] > 0


def test_captured_decoding_passes_the_generation_checks():
    """The opt-in captured steps (``compile_decode``) under the suite's generation checks; the
    rest of the suite does not touch them (tests/kernels/test_capture.py covers bfloat16 and
    float64 against the reference)."""
    checks = ["cache_modes", "collapsed_equals_kvg", "gcache_invalidated", "decoder_thread_counts"]
    report = check_kernel(resolve_impl("kernels-captured"), dtypes=("float32",), profile="quick", shrink=False, checks=checks)
    assert report.passed, report.summary() + "\n\n" + "\n\n".join(r.message for r in report.failures)
    assert report.counts()["passed"] > 0


def test_an_adapter_time_scale_widens_the_time_limit_within_bounds(monkeypatch):
    """``time_scale`` multiplies the profile's limit (clamped to [1, 60]; nonsense is 1), and an
    explicit timeout still wins: with a 1 s profile limit a check sleeping 1.5 s fails at scale 1
    and passes at scale 3."""
    import time

    from plga.conformance import profiles
    from plga.conformance.adapter import MAX_TIME_SCALE, Adapter, time_scale_of
    from plga.conformance.checks import Check, run_check
    from plga.conformance.guard import CheckTimeout

    class Sleepy(Adapter):
        name = "sleepy"
        capabilities = frozenset({"attention"})

    for value, want in ((5, 5.0), (0.2, 1.0), (1e9, MAX_TIME_SCALE), (float("nan"), 1.0), ("x", 1.0), (None, 1.0)):
        a = Sleepy()
        a.time_scale = value
        assert time_scale_of(a) == want
    monkeypatch.setitem(CHECKS, "_sleep", Check("_sleep", "attention", lambda ctx: time.sleep(1.5), ("attention",), "", ("float32",)))
    monkeypatch.setitem(profiles.CHECK_TIMEOUT, "quick", 1.0)
    a = Sleepy()
    with pytest.raises(CheckTimeout):
        run_check(a, "_sleep", "float32", profile="quick")
    a.time_scale = 3.0
    run_check(a, "_sleep", "float32", profile="quick")
    with pytest.raises(CheckTimeout):
        run_check(a, "_sleep", "float32", profile="quick", timeout=1.0)
    assert resolve_impl("kernels-captured").time_scale > 1 and time_scale_of(resolve_impl("kernels")) == 1.0
