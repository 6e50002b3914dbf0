"""Verdicts a third audit found wrong, each test beside the control that shows the old behaviour.

* **False FAIL of correct float16 kernels** under the finite −1e9 mask: −1e9 overflows
  float16, every eager float16 baseline was NaN on the fully masked rows and dropped, and the
  bound fell to the floor; a kernel that computes in float32 and rounds once (as the spec
  allows) failed. The baselines now include that upcast order.
* **float16 gradients were never checked** (``attention_backward`` ran at float32 and bfloat16).
* **Scales of 0 and below were never drawn**: ``scale or 1/√d`` (0 taken for None) and
  ``abs(scale)`` passed.
* **The chain's 1e-9 floor was judged by chance**: no chain case drove A_LM to it, so a
  float32 chain without it passed at some seeds.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from plga.conformance import Adapter, check_kernel, checks
from plga.conformance import eager as eg
from plga.conformance import strategies as sh
from plga.kernels import functional as KF
from plga.kernels import plga_attention
from plga.reference.spec import EPSILON_ADJ, LAYER_NORM_EPS

from .test_regions import _NoneGradScaled  # identity forward, the gradient × 1.5

ATTENTION = ("attention", "causal", "key_padding_mask")


def _declare(fn: Any, dtypes: tuple[str, ...], caps: tuple[str, ...]) -> Any:
    fn.plga_dtypes, fn.plga_capabilities = dtypes, frozenset(caps)
    return fn


def upcast_float16(q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                   scale: float | None = None, finite_mask: bool = False) -> Any:
    """Correct: the published mathematics in float32 (−1e9 included), rounded once to float16."""
    out = eg.plga_attention(q.float(), k.float(), v.float(), None if G is None else G.float(), causal=causal,
                            key_padding_mask=key_padding_mask, scale=scale, finite_mask=finite_mask)
    return out.to(q.dtype)


_declare(upcast_float16, ("float16",), (*ATTENTION, "finite_mask"))


def test_a_correct_float16_kernel_passes_the_finite_mask(monkeypatch):
    report = check_kernel(upcast_float16, checks=["attention_finite_mask"], profile="quick", shrink=False)
    assert report.verdict == "PASS", report.summary()
    # negative control: without the upcast baseline, the float16 baselines measure nothing on the
    # fully masked rows, and the correct kernel fails
    real = checks._baselines
    monkeypatch.setattr(checks, "_baselines", lambda t, **kw: real(t, **kw)[: len(eg.ATTENTION_ORDERS)])
    assert check_kernel(upcast_float16, checks=["attention_finite_mask"], profile="quick", shrink=False).verdict == "FAIL"


def float16_dq_scaled(q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                      scale: float | None = None) -> Any:
    """The project's attention, its gradient in q × 1.5."""
    return plga_attention(_NoneGradScaled.apply(q), k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale)


_declare(float16_dq_scaled, ("float16",), (*ATTENTION, "backward"))


def test_float16_gradients_are_checked(monkeypatch):
    report = check_kernel(float16_dq_scaled, checks=["attention_backward"], profile="quick", shrink=False)
    assert report.failed_checks() == {"attention_backward"}, report.summary()
    # negative control: registered for float32 and bfloat16 only, as before, nothing judges it
    old = dataclasses.replace(checks.CHECKS["attention_backward"], dtypes=("float32", "bfloat16"))
    monkeypatch.setitem(checks.CHECKS, "attention_backward", old)
    report = check_kernel(float16_dq_scaled, checks=["attention_backward"], profile="quick", shrink=False)
    assert report.counts()["failed"] == 0 and report.counts()["passed"] == 0, report.summary()


def scale_zero_taken_for_none(q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                              scale: float | None = None) -> Any:
    return plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale or 1 / math.sqrt(q.shape[-1]))


def scale_sign_lost(q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                    scale: float | None = None) -> Any:
    return plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=None if scale is None else abs(scale))


def test_scales_of_zero_and_below_are_judged():
    for wrong in (scale_zero_taken_for_none, scale_sign_lost):
        report = check_kernel(wrong, checks=["attention_unmasked"], dtypes=["float32"], profile="quick", shrink=False)
        assert report.verdict == "FAIL", report.summary()
    report = check_kernel(plga_attention, checks=["attention_unmasked"], dtypes=["float32"], profile="quick")
    assert {"zero", "negative"} <= set(report.coverage()["attention"]["scale"])
    assert sh.scale_region(0.0) == "zero" and sh.scale_region(-0.5) == "negative"


class _ChainWithoutFloor(Adapter):
    """The operator chain in float32 with A_LM = iSwiGLU(W A + b), the 1e-9 floor dropped."""

    name = "operator chain without the 1e-9 floor"
    dtypes = ("float32",)
    capabilities = frozenset({"operator_chain"})

    def operator_chain(self, q_rot: Any, w: Any) -> Any:
        cast = lambda t: t.to(torch.float32)  # noqa: E731
        q = q_rot.to(torch.float32)
        density = q.transpose(-1, -2) @ q
        d = density.shape[-1]
        a = F.layer_norm(density, (d,), cast(w["ln_weight"]), cast(w["ln_bias"]), LAYER_NORM_EPS)
        for blocks, gamma, beta in w["units"]:
            y = a
            for block in blocks:
                y = KF.swiglu(y, *map(cast, block))
            a = F.layer_norm(y + a, (d,), cast(gamma), cast(beta), LAYER_NORM_EPS)
        W, b, P, aa, ba = (cast(w[k]) for k in ("W", "b", "P", "a", "b_a"))
        a_lm = KF.iswiglu(W @ a + b)  # + EPSILON_ADJ dropped
        a_p = torch.pow(a_lm, P)
        return a, a_lm, a_p, aa @ a_p + ba


def test_the_floor_of_a_lm_is_judged_at_every_seed(monkeypatch):
    assert EPSILON_ADJ == 1e-9
    for seed in (1, 2, 5, 7):  # the seeds at which it passed before
        report = check_kernel(_ChainWithoutFloor(), checks=["operator_chain"], profile="quick", seed=seed, shrink=False)
        assert report.verdict == "FAIL", f"seed {seed}:\n{report.summary()}"
    # negative control: the floor case at the usual bias passes it at seed 1, the boundary cases
    # alone (drawn cases of one query row also reach the floor in some entries, and so do the
    # wide Grams of head dims 64 and 128)
    monkeypatch.setattr(sh, "FLOOR_B_SHIFT", 0.0)
    monkeypatch.setattr(sh, "CHAIN_SIZE_SHAPES", ())  # the boundary cases of that time: the floor case last
    monkeypatch.setattr(sh, "FLOOR_B_SHIFTS_BELOW", ())
    narrow = [c for c in sh.boundary_chain_cases(1) if c.d < 64]
    assert narrow[-1].label == "boundary #7"  # the floor case, at b_shift 0
    monkeypatch.setattr(sh, "boundary_chain_cases", lambda seed=0: narrow)
    monkeypatch.setattr(sh, "chain_cases", lambda **kw: st.sampled_from(narrow))
    report = check_kernel(_ChainWithoutFloor(), checks=["operator_chain"], profile="quick", seed=1, shrink=False, check_timeout=0)
    assert report.verdict == "PASS", report.summary()


def sdpa_bitwise_without_padding_only(q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                                      scale: float | None = None) -> Any:
    """Claims ``sdpa_bitwise``: torch SDPA at G = I without a padding mask, its own order with one."""
    if key_padding_mask is None and (G is None or bool((G == torch.eye(q.shape[-1], dtype=G.dtype)).all())):
        return plga_attention(q, k, v, None, causal=causal, scale=scale)
    return eg.plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale, order="reordered")


_declare(sdpa_bitwise_without_padding_only, ("float64", "float32"), (*ATTENTION, "sdpa_bitwise"))


def test_the_bitwise_sdpa_claim_is_checked_with_padding(monkeypatch):
    report = check_kernel(sdpa_bitwise_without_padding_only, checks=["sdpa_identity"], profile="quick", shrink=False)
    assert report.failed_checks() == {"sdpa_identity"}, report.summary()
    assert "not bit-for-bit equal" in report.failures[0].message
    assert check_kernel(plga_attention, checks=["sdpa_identity"], profile="quick").verdict == "PASS"
    # negative control: the check's cases without a padding mask, as before
    cases, boundary = sh.attention_cases, sh.boundary_attention_cases
    monkeypatch.setattr(sh, "attention_cases", lambda **kw: cases(**{**kw, "padding": ("none",)}))
    monkeypatch.setattr(sh, "boundary_attention_cases", lambda **kw: boundary(**{**kw, "paddings": ("none",)}))
    assert check_kernel(sdpa_bitwise_without_padding_only, checks=["sdpa_identity"], profile="quick").verdict == "PASS"


def test_the_bitwise_sdpa_claim_holds_at_causal_scales_of_zero_and_below(monkeypatch):
    """torch's is_causal kernels return NaN rows at a scale <= 0 (they mask before scaling): the
    check's SDPA there is the boolean-mask form, which the project's sdpa backend equals bit for bit."""
    from plga.conformance.adapters import KernelsAdapter

    q, k, v = (torch.randn(1, 2, 6, 8, dtype=torch.float64) for _ in range(3))
    assert F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=-0.5).isnan().any()  # why the form matters
    cases = [sh.AttentionCase(1, 2, 6, 6, 8, 8, "identity", False, True, "none", scale, seed=7, label=f"boundary #{i}")
             for i, scale in enumerate((-0.5, 0.0, 0.25))]
    monkeypatch.setattr(sh, "boundary_attention_cases", lambda **kw: cases)
    monkeypatch.setattr(sh, "attention_cases", lambda **kw: st.sampled_from(cases))
    adapter = KernelsAdapter(backend="sdpa")
    assert adapter.provides("sdpa_bitwise")
    report = check_kernel(adapter, checks=["sdpa_identity"], dtypes=["float64", "float32"], profile="quick", shrink=False)
    assert report.verdict == "PASS", report.summary()
    # negative control: a kernel claiming the same whose rows at these scales are its own order is caught
    report = check_kernel(own_order_below_positive_scales, checks=["sdpa_identity"], dtypes=["float64"], profile="quick",
                          shrink=False)
    assert report.failed_checks() == {"sdpa_identity"}, report.summary()
    assert "not bit-for-bit equal" in report.failures[0].message and "scale=0.25" not in report.failures[0].message


def own_order_below_positive_scales(q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                                    scale: float | None = None) -> Any:
    """Claims ``sdpa_bitwise``: torch SDPA at positive scales, its own order at a scale <= 0."""
    if scale is None or scale > 0:
        return plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale)
    return eg.plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale, order="reordered")


_declare(own_order_below_positive_scales, ("float64", "float32"), (*ATTENTION, "sdpa_bitwise"))


def zeros_for_large_score_heads(q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                                scale: float | None = None) -> Any:
    """bfloat16 only: the project's attention, but every (batch, head) whose largest scaled score
    exceeds 40 in magnitude returns zeros (a fast path gone wrong)."""
    out = plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale)
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    qg = q.float() if G is None else q.float() @ G.float()
    scores = (qg @ k.float().transpose(-1, -2)).abs() * abs(s)  # [B, H, S, T]
    big = scores.amax(dim=(-1, -2)) > 40  # [B, H]
    return out.masked_fill(big[..., None, None], 0.0)


_declare(zeros_for_large_score_heads, ("bfloat16",), ATTENTION)


def test_large_scores_are_judged_at_bfloat16(monkeypatch):
    """The floor's score factor is in float32 units (where scores and log-sum-exp are kept), not
    bfloat16's: at bfloat16's it spanned the whole output once scores passed ~60, and this
    kernel passed."""
    report = check_kernel(zeros_for_large_score_heads, checks=["attention_unmasked"], profile="quick", shrink=False)
    assert report.failed_checks() == {"attention_unmasked"}, report.summary()
    assert check_kernel("default", checks=["attention_unmasked[bfloat16]"], profile="quick").verdict == "PASS"
    # negative control: the score factor in bfloat16 units, as before
    real = checks.attention_magnitude

    def old(t: Any, causal: bool, scale: Any, values: Any = None, scores: Any = None) -> float:
        v = t["v"].abs().max().item() if values is None else float(abs(values).max())
        return v * (1.0 + checks.ExactScores.of(t, causal, scale).max_abs()[1])

    monkeypatch.setattr(checks, "attention_magnitude", old)
    assert check_kernel(zeros_for_large_score_heads, checks=["attention_unmasked"], profile="quick", shrink=False).verdict == "PASS"
    assert real(*_unit_case()) < old(*_unit_case()), "the new magnitude is the smaller"


def _unit_case() -> tuple[Any, bool, None]:
    """bfloat16 tensors with one scaled score of 64 and max|v| = 1."""
    q = torch.zeros(1, 1, 1, 4, dtype=torch.bfloat16)
    q[..., 0] = 8.0
    k = torch.zeros(1, 1, 2, 4, dtype=torch.bfloat16)
    k[..., 0, 0] = 16.0
    v = torch.ones(1, 1, 2, 4, dtype=torch.bfloat16)
    return {"q": q, "k": k, "v": v, "G": None, "key_padding_mask": None}, False, None


def halved_past_1024_keys(q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                          scale: float | None = None) -> Any:
    """Wrong at bfloat16 over more than 1024 keys: the output halved (a long-context path's bug)."""
    out = plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale)
    return out * 0.5 if k.shape[2] > 1024 else out


_declare(halved_past_1024_keys, ("bfloat16",), ATTENTION)


def test_a_long_context_output_is_judged_at_its_own_size(monkeypatch):
    """The floor's magnitude is Σⱼ Pⱼ|vⱼ| (|P||V|), not max|v|: over 1100 keys the output is an
    average of ~0.16 while 4 bfloat16 ulp of max|v| ≈ 4.3 are 0.13, so a halved output passed."""
    checks_ = ["attention_unmasked", "attention_causal", "attention_padding"]
    report = check_kernel(halved_past_1024_keys, checks=checks_, profile="quick", shrink=False)
    assert report.failed_checks() == set(checks_), report.summary()
    assert check_kernel("default", checks=checks_, dtypes=["bfloat16"], profile="quick").verdict == "PASS"
    # negative control: the magnitude max|v| · (score factor), as before
    def old(t: Any, causal: bool, scale: Any, values: Any = None, scores: Any = None) -> float:
        r = 2.0**-16  # float32's unit roundoff in bfloat16's
        v = t["v"].abs().max().item() if values is None else float(abs(values).max())
        return v * (1.0 + r * checks.ExactScores.of(t, causal, scale).max_abs()[1])

    monkeypatch.setattr(checks, "attention_magnitude", old)
    assert check_kernel(halved_past_1024_keys, checks=checks_, profile="quick", shrink=False).verdict == "PASS"


def test_a_negative_scale_is_sized_by_its_scores_absolute_value():
    """|scale · q G kᵀ|, not |q G kᵀ| · scale: before, a negative scale made the "largest
    |scaled score|" ≤ 0, so the 1e3 conditioning bound never rejected a negative-scale case and
    the floor's score factor shrank below 1."""
    t, causal, _ = _unit_case()  # one scaled score of 64 at scale 1/√4
    for scale in (0.5, -0.5):
        assert checks.ExactScores.of(t, causal, scale).max_abs() == (64.0, 64.0)
    assert checks.attention_magnitude(t, causal, -0.5) == checks.attention_magnitude(t, causal, 0.5)
    assert checks.attention_magnitude(t, causal, -0.5) > checks.attention_magnitude(t, causal, 0.0)
    # the gradients' magnitudes too: keys orthogonal to the query (scores 0, the same P at either
    # sign) give the same magnitudes at ±scale (before: ≤ 0 for dq, dk and dG at a negative scale)
    k = torch.zeros(1, 1, 2, 4, dtype=torch.bfloat16)
    k[..., 0, 1] = k[..., 1, 2] = 16.0
    w = torch.ones(1, 1, 1, 4, dtype=torch.bfloat16)  # the output's cotangent
    ortho = dict(t, k=k)
    pos, neg = (checks.backward_magnitudes(ortho, w, checks.ExactScores.of(ortho, causal, s)) for s in (0.5, -0.5))
    assert pos == neg and min(pos) > 0, (pos, neg)
    huge = dict(t, q=t["q"] * 32)  # a scaled score of ±2048 (past the 1e3 conditioning bound) at either sign
    for scale in (0.5, -0.5):
        assert checks.ExactScores.of(huge, causal, scale).max_abs()[0] > sh.MAX_ABS_SCORE


def _upcast_bf16(drop_dk_tail: bool) -> Any:
    """bfloat16 attention computed in float32 by autograd (a sound kernel's precision), rounded
    once; with ``drop_dk_tail`` the backward leaves dK of the keys past the last full block of
    128 at zero (a key-block loop that drops its partial tail, only in the backward)."""

    def attn(q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
             scale: float | None = None) -> Any:
        kf = k.float()
        t = kf.shape[2]
        if drop_dk_tail and t > 128 and t % 128 and kf.requires_grad:
            keep = (torch.arange(t) < t - t % 128).to(kf)[:, None]
            kf.register_hook(lambda grad: grad * keep)
        out = eg.plga_attention(q.float(), kf, v.float(), None if G is None else G.float(), causal=causal,
                                key_padding_mask=key_padding_mask, scale=scale)
        return out.to(q.dtype)

    return _declare(attn, ("bfloat16",), (*ATTENTION, "backward"))


def test_bfloat16_gradients_are_judged_at_their_own_size(monkeypatch):
    """The backward's floor counts float32 accumulation in float32 ulp and the intermediates a
    kernel rounds to bfloat16 (P, dS, q G) at their exact size: the absolute-value chain in
    bfloat16 ulp ran to 7–700× the gradients, and a backward that dropped dK's last key block
    passed."""
    report = check_kernel(_upcast_bf16(drop_dk_tail=True), checks=["attention_backward"], profile="quick", shrink=False)
    assert report.failed_checks() == {"attention_backward"}, report.summary()
    assert check_kernel(_upcast_bf16(drop_dk_tail=False), checks=["attention_backward"], profile="quick").verdict == "PASS"
    # negative control: the whole chain in bfloat16 ulp, as before
    real = checks.backward_magnitudes

    def old(t: dict[str, Any], w: Any, scores: Any, finite_mask: bool = False) -> list[float]:
        wide = dict(t, q=t["q"].float())  # at float32 the chain is the magnitude (r = 1)
        return real(wide, w, scores, finite_mask)

    monkeypatch.setattr(checks, "backward_magnitudes", old)
    # and the cases of that time: 600 keys (a later shape) leave a partial 128-key block large
    # enough to fail even the old floor; so do the later backward size and finite-mask cases
    monkeypatch.setattr(sh, "BOUNDARY_SHAPES", sh.BOUNDARY_SHAPES[:23])
    monkeypatch.setattr(checks, "BACKWARD_SIZE_SHAPES", ())
    monkeypatch.setattr(checks, "BACKWARD_FINITE_SHAPES", ())
    assert check_kernel(_upcast_bf16(drop_dk_tail=True), checks=["attention_backward"], profile="quick",
                        shrink=False).verdict == "PASS"


def test_a_float16_decoder_with_its_softmax_in_float32_passes(monkeypatch):
    """−1e9 overflows float16: every baseline decoder but one with its attention weights in
    float32 is NaN on a left-padded sequence, its baseline error was taken as 0, and a sound
    float16 decoder (an outside audit's) was failed at the floor. Without that baseline (the
    negative control) it is failed again."""
    from plga.conformance.controls import CONTROLS

    control = CONTROLS["fp16_softmax_in_float32"]
    names = ["forward_golden", "forward_collapsed"]
    report = check_kernel(control.make(), checks=names, profile="quick")
    assert report.verdict == "PASS", report.summary()
    full = checks._baseline_decoders
    monkeypatch.setattr(checks, "_baseline_decoders", lambda state, config: [d for d in full(state, config)
                                                                              if d.softmax_dtype == d.dtype])
    assert check_kernel(control.make(), checks=names, profile="quick").verdict == "FAIL"


def key_side_g_float16(q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                       scale: float | None = None) -> Any:
    """Correct (an outside audit's): G applied on the key side, k Gᵀ, then torch SDPA with the
    boolean mask — the same scores in another association."""
    k_g = k if G is None else k @ G.transpose(-1, -2)  # [B, H, T, d]
    allowed = KF.attention_support(q.shape[2], k.shape[2], causal=causal, key_padding_mask=key_padding_mask, device=q.device)
    out = F.scaled_dot_product_attention(q, k_g, v, attn_mask=allowed, scale=scale)  # [B, H, S, dv]
    return out if allowed is None else out.masked_fill(~allowed.any(-1, keepdim=True), 0.0)


_declare(key_side_g_float16, ("float16",), ATTENTION)


def test_a_kernel_applying_g_on_the_key_side_passes_mask_dominance_in_float16(monkeypatch):
    """The masked keys are placed to score +300 through q G; k Gᵀ of those keys passed
    float16's range under the 700-head sentinel G, and a sound key-side kernel failed. Such a
    case is now not judged at that dtype (named in the coverage's left-out list)."""
    report = check_kernel(key_side_g_float16, checks=["attention_mask_dominance"], profile="quick", shrink=False)
    assert report.verdict == "PASS", report.summary()
    assert "boundary #27" in report.results[0].left_out
    monkeypatch.setattr(checks, "KEY_SIDE_ROOM", math.inf)  # negative control: judged as before
    report = check_kernel(key_side_g_float16, checks=["attention_mask_dominance"], profile="quick", shrink=False)
    assert report.failed_checks() == {"attention_mask_dominance"} and "non-finite" in report.failures[0].message, report.summary()


def float16_accumulator(q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                        scale: float | None = None) -> Any:
    """float16 only (an outside audit's): an online softmax over 64-key blocks whose scores,
    running max and sum are float32 but whose unnormalised Σ e·v stays in float16."""
    sc = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    qg = q.float() if G is None else q.float() @ G.float()  # [B, H, S, d]
    allowed = KF.attention_support(q.shape[2], k.shape[2], causal=causal, key_padding_mask=key_padding_mask, device=q.device)
    m = torch.full((*q.shape[:3], 1), -math.inf)
    total, acc = torch.zeros_like(m), torch.zeros(*q.shape[:3], v.shape[-1], dtype=torch.float16)
    for k0 in range(0, k.shape[2], 64):
        x = sc * (qg @ k[:, :, k0 : k0 + 64].float().transpose(-1, -2))  # [B, H, S, 64]
        if allowed is not None:
            x = x.masked_fill(~allowed[..., k0 : k0 + 64], -math.inf)
        m_new = torch.maximum(m, x.amax(-1, keepdim=True))
        safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        p, alpha = torch.exp(x - safe), torch.exp(m - safe)
        total = total * alpha + p.sum(-1, keepdim=True)
        acc = (acc.float() * alpha + p @ v[:, :, k0 : k0 + 64].float()).half()  # the bug: kept in float16
        m = m_new
    return torch.where(total > 0, acc.float() / total.clamp_min(1e-30), 0.0).half()


_declare(float16_accumulator, ("float16",), ATTENTION)


def test_a_float16_accumulator_overflows_on_large_values_over_long_keys(monkeypatch):
    report = check_kernel(float16_accumulator, checks=["attention_unmasked"], profile="quick", shrink=False)
    assert report.failed_checks() == {"attention_unmasked"}, report.summary()
    assert "values=+100" in report.failures[0].message and "non-finite" in report.failures[0].message
    # negative control: without the large-values case (values of mean 0 only) it passes
    monkeypatch.setattr(sh, "LARGE_VALUES_SHAPE", (*sh.LARGE_VALUES_SHAPE[:-1], 0.0))
    assert check_kernel(float16_accumulator, checks=["attention_unmasked"], profile="quick").verdict == "PASS"
