"""Verdicts a fifth audit found wrong, each with the control showing the old behaviour.

* **Whole numbers of tiles.** No decoder prompt, vocabulary or attention length sat exactly on
  a tile size (16, 32, 64, 128, 256): a tiled kernel that sizes its last block as n % BLOCK,
  without ``or BLOCK``, drops a whole block only there, and passed.
* **The finite mask's empty rows judged apart.** Every ``attention_finite_mask`` case holds a
  query row with no allowed key; below float64 its output is a uniform row where the float64
  truth keeps softmax(s), a baseline error of the order of |v|. In one comparison with the
  other rows it let a finite-mask path with the scale 10 % off pass.
* **Padding positions' logits.** The contract leaves the logits at padding positions open (an
  unpadded LM head may skip them); the suite judged them and failed such a decoder.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from plga.conformance import Adapter, check_kernel, checks
from plga.conformance import eager as eg
from plga.conformance import strategies as sh
from plga.conformance import tolerance as tol
from plga.conformance.adapter import ForwardOutput
from plga.conformance.adapters import kernels
from plga.conformance.controls import CONTROLS


def test_boundary_cases_hold_whole_numbers_of_tiles(monkeypatch):
    shapes = sh.BOUNDARY_SHAPES  # (B, H, S, T, d, dv, family, batched, scale)
    assert any(s == t == 128 for _, _, s, t, *_ in shapes) and any(t == 256 and s % 64 == 0 for _, _, s, t, *_ in shapes)
    configs = sh.boundary_configs()
    lengths = {length for _, _, length, _ in sh.BOUNDARY_DECODER_EXTRA}
    assert {64, 256} <= lengths and any(c.input_vocab_size == 256 for c in configs)
    assert {16, 32, 64} <= set(sh.AWKWARD_LENGTHS)
    for name, group in (("prefill_full_block_dropped", "decoder"), ("full_last_block_dropped", "attention")):
        report = check_kernel(CONTROLS[name].make(), groups=[group], dtypes=["float64"], profile="quick", shrink=False)
        assert report.verdict == "FAIL", (name, report.summary())
    # negative controls: the boundary cases before (no whole number of tiles)
    whole_shapes = {(1, 2, 128, 128, 16, 16, "random", False, None), (2, 3, 64, 256, 8, 8, "rank_one", True, None),
                    (1, 2, 16, 1024, 64, 64, "trained", False, None)}
    whole_prompts = {(9, 2, 64, 2), (6, 1, 256, 2), (6, 1, 1024, 3)}
    assert whole_shapes <= set(sh.BOUNDARY_SHAPES) and whole_prompts <= set(sh.BOUNDARY_DECODER_EXTRA)
    monkeypatch.setattr(sh, "BOUNDARY_DECODER_EXTRA", tuple(c for c in sh.BOUNDARY_DECODER_EXTRA if c not in whole_prompts))
    monkeypatch.setattr(sh, "BOUNDARY_SHAPES", tuple(c for c in sh.BOUNDARY_SHAPES if c not in whole_shapes))
    report = check_kernel(CONTROLS["full_last_block_dropped"].make(), groups=["attention"], dtypes=["float64"], profile="quick",
                          shrink=False)
    assert report.verdict == "PASS", report.summary()
    report = check_kernel(CONTROLS["prefill_full_block_dropped"].make(), checks=["forward_logits"], dtypes=["float64"],
                          profile="quick", shrink=False)
    assert report.verdict == "PASS", report.summary()


def _finite_scale_off(q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                      scale: float | None = None, finite_mask: bool = False) -> Any:
    """Right under the ideal mask; the finite-mask path applies 0.9 × the scale."""
    if not finite_mask:
        return eg.plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale)
    s = (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale) * 0.9
    return eg.plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=s, finite_mask=True)


_finite_scale_off.plga_dtypes = ("float32",)  # type: ignore[attr-defined]
_finite_scale_off.plga_capabilities = frozenset({"attention", "causal", "key_padding_mask", "finite_mask"})  # type: ignore[attr-defined]


def test_the_finite_masks_empty_rows_are_judged_apart(monkeypatch):
    report = check_kernel(_finite_scale_off, checks=["attention_finite_mask"], profile="quick", shrink=False)
    assert report.failed_checks() == {"attention_finite_mask"}, report.summary()
    assert "query rows with an allowed key" in report.failures[0].message, report.failures[0].message
    assert check_kernel("default", checks=["attention_finite_mask"], profile="quick").verdict == "PASS"
    # negative control: one comparison over the whole output
    real = tol.compare
    monkeypatch.setattr(tol, "compare", lambda *a, judged=None, **kw: real(*a, **kw))
    assert check_kernel(_finite_scale_off, checks=["attention_finite_mask"], profile="quick", shrink=False).verdict == "PASS"


class _PaddingLogitsZero(Adapter):
    """The project's decoder, returning logits 0 at padding positions (an unpadded LM head)."""

    name = "logits skipped at padding positions"
    dtypes = ("float32", "bfloat16")

    def __init__(self) -> None:
        self.inner = kernels()
        self.capabilities = self.inner.capabilities & {"forward", "collapsed"}
        self.version, self.device = self.inner.version, self.inner.device

    def forward(self, state_dict: Any, config: Any, tokens: Any, *, constant_g: Any = None) -> ForwardOutput:
        out = self.inner.forward(state_dict, config, tokens, constant_g=constant_g)
        return ForwardOutput(out.logits * (tokens != 0)[..., None].to(out.logits.dtype), out.G_LM)


def test_logits_at_padding_positions_are_not_judged(monkeypatch):
    report = check_kernel(_PaddingLogitsZero(), groups=["decoder"], profile="quick", shrink=False)
    assert report.verdict == "PASS", report.summary()
    # negative control: every position judged, as before
    real = checks.assert_conforms
    monkeypatch.setattr(checks, "assert_conforms", lambda *a, judged=None, **kw: real(*a, **kw))
    report = check_kernel(_PaddingLogitsZero(), groups=["decoder"], profile="quick", shrink=False)
    assert report.failed_checks() >= {"forward_logits", "forward_golden"}, report.summary()


def test_a_row_left_out_is_neither_judged_nor_counted():
    truth = torch.zeros(2, 3, 4, dtype=torch.float64)
    kernel = truth.clone().float()
    kernel[1, 2] = float("nan")  # a padding position
    judged = torch.tensor([[True, True, True], [True, True, False]])[..., None]  # [B, S, 1]
    cmp = tol.compare(kernel, [truth.float()], truth, k=8.0, rows=("sequence", "position"), judged=judged.numpy())
    assert cmp.passed and cmp.total == 20 and cmp.nonfinite == 0
    kernel[0, 1] = 1.0
    cmp = tol.compare(kernel, [truth.float()], truth, k=8.0, rows=("sequence", "position"), judged=judged.numpy())
    assert not cmp.passed and cmp.worst_index[:2] == (0, 1) and cmp.mismatched == 4
    baseline = truth.float().clone()
    baseline[1, 2] = 50.0  # a left-out element's baseline error loosens no bound
    kernel[0, 1], kernel[1, 1] = 0.0, 1.0
    assert not tol.compare(kernel, [baseline], truth, k=8.0, judged=judged.numpy()).passed
    assert tol.compare(kernel.nan_to_num(0.0), [baseline], truth, k=8.0).passed, "the control: pooled, 8 × 50 covers it"
