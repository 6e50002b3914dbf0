"""The attention PLDRModel runs is the attention the conformance suite certifies.

PLDRModel attends through ``plga.kernels.functional.plga_attention`` (looked up at call time).
Swapping one of the suite's deliberately broken attention kernels in at that one place must
make the model-level conformance checks fail; with the real function they pass.
"""

from __future__ import annotations

import pytest

from plga.conformance import broken, check_kernel
from plga.kernels import functional

CHECK = dict(checks=["forward_logits"], dtypes=["float32"], profile="quick", shrink=False)


def test_the_model_level_checks_pass_with_the_certified_attention():
    report = check_kernel("kernels", **CHECK)
    assert report.results and report.passed, report.summary()


@pytest.mark.parametrize("bug", [broken.transposed_g, broken.missing_scale, broken.causal_off_by_one])
def test_a_broken_attention_swapped_in_fails_the_model_level_checks(monkeypatch, bug):
    def swapped(q, k, v, G, *, causal, key_padding_mask, scale, finite_mask, backend, validate):
        return bug(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale)

    monkeypatch.setattr(functional, "plga_attention", swapped)
    report = check_kernel("kernels", **CHECK)
    assert report.results and not report.passed, f"{bug.__name__} went unnoticed: the model bypasses plga_attention"
