"""``operator_chain`` judged with the rotated queries in three memory layouts, and with A_LM at
its floor where iSwiGLU(u) is far below it: two kernels of a ninth outside audit (2026-12-07)
that passed every check — a chain reading the queries' storage as if contiguous, and one whose
fast exp flushes σ(u) to 0 below u = −30 — fail now, as the suite's controls with the same
faults show; negative controls: the suite as it was (contiguous queries only, the floor case at
a bias shift of −27 only) passes both."""

import pytest

pytest.importorskip("torch")

from plga.conformance import check_kernel, checks
from plga.conformance import strategies as sh
from plga.conformance.controls import CONTROLS

BUGS = {"chain_storage_read_as_contiguous": ("CHAIN_LAYOUTS", checks, ("contiguous",)),
        "chain_iswiglu_flushed_below_minus_30": ("FLOOR_B_SHIFTS_BELOW", sh, ())}


@pytest.mark.parametrize("control", sorted(BUGS))
def test_a_chain_kernel_wrong_only_in_that_region_fails(monkeypatch, control):
    impl = CONTROLS[control].make()
    for seed in (20260, 3, 5):
        report = check_kernel(impl, profile="quick", seed=seed, shrink=False, checks=["operator_chain"])
        assert report.failed_checks() == {"operator_chain"}, f"seed {seed}:\n{report.summary()}"
    name, module, as_it_was = BUGS[control]
    monkeypatch.setattr(module, name, as_it_was)
    report = check_kernel(impl, profile="quick", seed=20260, shrink=False, checks=["operator_chain"])
    assert report.passed, report.summary()


def test_each_layout_holds_the_same_values():
    """The strided and offset views hold q's values, with other strides than q's."""
    import torch

    q = torch.randn(2, 3, 5, 4, dtype=torch.float64)
    for layout in checks.CHAIN_LAYOUTS:
        view = checks._chain_layout(q, layout)
        assert torch.equal(view, q) and view.shape == q.shape
        assert view.is_contiguous() == (layout == "contiguous")
