"""``kernels-at-scale``: the suite's small drawn models run the paths of large ones, and a fault
in one of those paths fails the suite.

At the shipped thresholds (:mod:`plga.kernels.thresholds`) the suite's models, d_model up to
80 and a few dozen tokens, never reach oneDNN's fused feed-forward gate nor, in bfloat16, the
blocked attention: those run only for large inputs. ``kernels-at-scale`` lowers every
threshold during each operation. Here: it reaches each such path (counted by spies on the
functions that take it), and each broken path below is caught by it (negative controls). The
whole quick profile passes on it in every dtype (tests/conformance/test_meta.py).
"""


import pytest

torch = pytest.importorskip("torch")

from plga.conformance import check_kernel, resolve_impl  # noqa: E402
from plga.kernels import finite, gemm  # noqa: E402

from ..large_paths import (  # noqa: E402
    BREAKS,
    expected_paths,
    gate_on_swapped_factors,
    skip_unless_here,
    spy,
    spy_on_large_paths,
    taken,
)

CHECKS = ["forward_logits", "operator_chain", "attention_causal"]


def test_at_scale_reaches_the_paths_of_large_models(monkeypatch):
    counts = spy_on_large_paths(monkeypatch)
    spy(monkeypatch, counts, finite, "row_extremes", "split row extremes",
         lambda t: t.numel() > 0 and t.reshape(t.shape[0], t.shape[1], -1).shape[-1] >= finite.SPLIT_MIN_ROW)
    report = check_kernel(resolve_impl("kernels-at-scale"), dtypes=("float32", "bfloat16"), profile="quick", shrink=False,
                          checks=CHECKS)
    assert report.passed, report.summary()
    want = {"split row extremes"} | expected_paths(torch.float32) | expected_paths(torch.bfloat16)
    assert want <= taken(counts), dict(counts)


@BREAKS
def test_at_scale_catches_a_broken_large_path(monkeypatch, module, name, break_it, dtype, needs):
    skip_unless_here(needs)
    monkeypatch.setattr(module, name, break_it(getattr(module, name)))
    report = check_kernel(resolve_impl("kernels-at-scale"), dtypes=(dtype,), profile="quick", shrink=False, checks=CHECKS)
    assert not report.passed, f"kernels-at-scale passed with {name} broken"
    assert report.counts()["failed"] > 0


def _verify_decoder_only(monkeypatch, argv):
    """plga verify's verdict and lines, each conformance part run on the decoder group only (the
    parts under test here; the callers stub the theorem part: ``theorem_part_passes``)."""
    import argparse
    import contextlib
    import io

    from plga.conformance import runner
    from plga.conformance.verify import add_verify_arguments, verify_main

    real = runner.quick_summary
    monkeypatch.setattr(runner, "quick_summary", lambda adapter, groups=None, **kw: real(adapter, groups=["decoder"], **kw))
    parser = argparse.ArgumentParser()
    add_verify_arguments(parser)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = verify_main(parser.parse_args(argv))
    return code, out.getvalue().splitlines()


def test_verify_certifies_the_project_kernels_at_scale_too(monkeypatch, theorem_part_passes):
    code, lines = _verify_decoder_only(monkeypatch, [])
    assert code == 0 and lines[0].startswith("plga verify: PASS")
    row = next(line for line in lines if line.startswith("conformance at scale: decoder"))
    assert " PASS " in row and "(backend=sdpa), at scale (every size threshold at its lowest)" in row


def test_verify_has_no_at_scale_part_for_another_implementation(monkeypatch, theorem_part_passes):
    code, lines = _verify_decoder_only(monkeypatch, ["--impl", "kernels-at-scale"])
    assert code == 0 and not any(line.startswith("conformance at scale") for line in lines)


def test_verify_fails_the_project_kernels_with_a_broken_large_path(monkeypatch, theorem_part_passes):
    """Negative control: the fused feed-forward gate with silu on the wrong factor fails plga verify."""
    skip_unless_here("onednn")
    monkeypatch.setattr(gemm, "gated", gate_on_swapped_factors(gemm.gated))
    code, lines = _verify_decoder_only(monkeypatch, ["--jobs", "0"])  # in this process, where the path is broken
    assert code == 1 and lines[0].startswith("plga verify: FAIL")
    assert " FAIL " in next(line for line in lines if line.startswith("conformance at scale: decoder"))


def test_verify_runs_the_at_scale_part_on_the_backend_it_verifies(monkeypatch, theorem_part_passes):
    code, lines = _verify_decoder_only(monkeypatch, ["--impl", "kernels-eager"])
    row = next(line for line in lines if line.startswith("conformance at scale: decoder"))
    assert code == 0 and " PASS " in row and "(backend=eager), at scale" in row
