"""The backward is judged with its inputs laid out as callers pass them (an eighth outside audit:
six backward bugs, each in one layout, passed every profile while the check called the kernel
one way only — four contiguous leaves, each requiring grad, a contiguous output gradient)."""

from __future__ import annotations

import pytest

from plga.conformance import check_kernel, checks
from plga.conformance import strategies as sh
from plga.conformance.controls import CONTROLS

#: control → the layout whose explicit case shows its bug
LAYOUT_BUGS = {
    "backward_shared_kv_summed": "shared_kv",
    "backward_g_over_batch_summed": "g_over_batch",
    "backward_frozen_g_dropped": "frozen_g",
    "backward_needs_grad_off_by_one": "frozen_v",
    "backward_dout_as_contiguous": "strided_dout",
    "backward_saved_inputs_as_contiguous": "shared_kv",  # reads past the expanded keys' storage; `permuted` shows it too
}


@pytest.mark.parametrize("name", sorted(LAYOUT_BUGS))
def test_a_backward_wrong_in_one_layout_fails(name):
    report = check_kernel(CONTROLS[name].make(), checks=["attention_backward"], profile="quick", shrink=False)
    assert report.failed_checks() == {"attention_backward"}, report.summary()
    assert f"inputs {LAYOUT_BUGS[name]}" in report.failures[0].message, report.failures[0].message


def test_the_backward_layouts_were_what_caught_them(monkeypatch):
    """Negative control: with the plain layout only (the check as it was), all six pass."""
    monkeypatch.setattr(checks, "BACKWARD_LAYOUTS", ("plain",))
    for name in LAYOUT_BUGS:
        report = check_kernel(CONTROLS[name].make(), checks=["attention_backward"], profile="quick", shrink=False)
        assert report.verdict == "PASS", (name, report.summary())


def test_saved_inputs_read_as_contiguous_fail_in_the_permuted_layout(monkeypatch):
    monkeypatch.setattr(checks, "BACKWARD_LAYOUTS", ("plain", "permuted"))
    report = check_kernel(CONTROLS["backward_saved_inputs_as_contiguous"].make(), checks=["attention_backward"], profile="quick",
                          shrink=False)
    assert "inputs permuted" in report.failures[0].message, report.summary()


def test_every_layout_has_an_explicit_case_that_means_something():
    """Each layout's explicit case has what the layout needs (heads to share, batch rows to
    expand over, a G to freeze), and a drawn case takes only layouts that fit it."""
    for i, layout in enumerate(checks.BACKWARD_LAYOUTS[1:]):
        shape = checks.BACKWARD_LAYOUT_SHAPES[i % len(checks.BACKWARD_LAYOUT_SHAPES)]
        case = sh.AttentionCase(*shape, None, seed=1, label=checks.LAYOUT_LABEL + layout)
        assert layout in checks.backward_layouts(case), layout
        assert checks._backward_layout(case) == layout
    one_head = sh.AttentionCase(1, 1, 3, 4, 4, 4, "none", False, False, "none", None, seed=2)
    assert checks.backward_layouts(one_head) == ("plain", "permuted", "strided_dout", "frozen_q", "frozen_k", "frozen_v")
