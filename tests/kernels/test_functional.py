"""Functional PLGA kernels against the float64 reference (docs/spec.md §1) and the tolerance policy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given
from hypothesis import strategies as st

from plga.kernels import functional as KF
from plga.kernels import plga_attention, plga_attention_eager
from plga.kernels.packed import pack_linear, packed_linear
from plga.reference import spec

from .kernel_helpers import FEW, attention_support_np, reference_attention
from .policy import (
    assert_rel_close,
    assert_within_policy,
    baseline_attention,
    within_policy,
)


def _inputs(seed, b, h, s, t, d, dv, g_kind, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, s, d, generator=gen, dtype=torch.float64)
    k = torch.randn(b, h, t, d, generator=gen, dtype=torch.float64)
    v = torch.randn(b, h, t, dv, generator=gen, dtype=torch.float64)
    if g_kind == "none":
        G = None
    elif g_kind == "heads":
        G = torch.randn(h, d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
    elif g_kind == "batch":
        G = torch.randn(b, h, d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
    else:  # sentinel: entries h + 0.13 i + 0.017 j catch transposes and head broadcasting
        i = torch.arange(d, dtype=torch.float64)
        G = (torch.arange(h, dtype=torch.float64)[:, None, None] + 0.13 * i[:, None] + 0.017 * i[None, :]) / d
    return q, k, v, G


shapes = st.tuples(
    st.integers(1, 3),  # B
    st.sampled_from([1, 2, 3, 5]),  # H (odd counts)
    st.sampled_from([1, 2, 3, 7, 13]),  # S
    st.sampled_from([0, 1, 4]),  # T − S
    st.sampled_from([2, 4, 8]),  # d
    st.sampled_from([2, 3, 8]),  # dv
)


@FEW
@given(
    shape=shapes,
    g_kind=st.sampled_from(["none", "heads", "batch", "sentinel"]),
    causal=st.booleans(),
    pad=st.sampled_from(["none", "left", "right"]),
    finite=st.booleans(),
    backend=st.sampled_from(["sdpa", "eager"]),
    seed=st.integers(0, 2**16),
)
@example(shape=(1, 1, 1, 0, 2, 2), g_kind="heads", causal=True, pad="none", finite=True, backend="sdpa", seed=0)
@example(shape=(2, 3, 13, 4, 8, 3), g_kind="sentinel", causal=True, pad="left", finite=True, backend="sdpa", seed=1)
def test_attention_float64_matchesreference_attention(shape, g_kind, causal, pad, finite, backend, seed):
    b, h, s, extra, d, dv = shape
    t = s + extra
    q, k, v, G = _inputs(seed, b, h, s, t, d, dv, g_kind)
    mask = None
    if pad != "none" and t > 1:
        mask = torch.zeros(b, t, dtype=torch.bool)
        if pad == "left":
            mask[:, : t // 2] = True
        else:
            mask[:, t - t // 2 :] = True
    out = plga_attention(q, k, v, G, causal=causal, key_padding_mask=mask, finite_mask=finite, backend=backend)
    allowed = attention_support_np(s, t, causal, None if mask is None else mask.numpy())
    want = reference_attention(q, k, v, G, allowed, finite)
    assert out.shape == (b, h, s, dv) and out.dtype == torch.float64
    assert_rel_close(out, want, name=f"{backend} finite={finite}")


@FEW
@given(shape=shapes, g_kind=st.sampled_from(["heads", "sentinel"]), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_attention_float32_within_policy(shape, g_kind, causal, seed):
    b, h, s, extra, d, dv = shape
    t = s + extra
    q, k, v, G = _inputs(seed, b, h, s, t, d, dv, g_kind)
    allowed = attention_support_np(s, t, causal, None)
    truth = reference_attention(q, k, v, G, allowed, True)
    f = lambda x: x.float()  # noqa: E731
    base = baseline_attention(f(q), f(k), f(v), f(G), causal=causal)
    for backend in ("sdpa", "eager"):
        out = plga_attention(f(q), f(k), f(v), f(G), causal=causal, backend=backend)
        assert out.dtype == torch.float32
        assert_within_policy(out, truth, base, name=backend)


def test_fused_equals_eager_float64():
    q, k, v, G = _inputs(3, 2, 3, 9, 13, 8, 5, "batch")
    mask = torch.zeros(2, 13, dtype=torch.bool)
    mask[1, :4] = True
    for causal in (False, True):
        for finite in (False, True):
            a = plga_attention(q, k, v, G, causal=causal, key_padding_mask=mask, finite_mask=finite)
            e = plga_attention_eager(q, k, v, G, causal=causal, key_padding_mask=mask, finite_mask=finite)
            assert_rel_close(a, e, rtol=1e-13)


def test_identity_G_is_sdpa_bit_for_bit():
    """score_sdpa_special_case: G = I gives SDPA exactly (q I is exact in floating point)."""
    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        q, k, v, _ = _inputs(5, 2, 3, 7, 7, 8, 8, "none")
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        eye = torch.eye(8, dtype=dtype).expand(3, 8, 8)
        sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert torch.equal(plga_attention(q, k, v, None, causal=True), sdpa)
        assert torch.equal(plga_attention(q, k, v, eye, causal=True), sdpa)


def test_batched_equals_per_slice():
    """A batched multi-head call equals the per-(batch, head) calls."""
    q, k, v, G = _inputs(7, 3, 5, 6, 9, 4, 3, "batch")
    mask = torch.zeros(3, 9, dtype=torch.bool)
    mask[2, :3] = True
    out = plga_attention(q, k, v, G, causal=True, key_padding_mask=mask, finite_mask=True)
    for bi in range(3):
        for hi in range(5):
            one = plga_attention(
                q[bi : bi + 1, hi : hi + 1], k[bi : bi + 1, hi : hi + 1], v[bi : bi + 1, hi : hi + 1],
                G[bi : bi + 1, hi : hi + 1], causal=True, key_padding_mask=mask[bi : bi + 1], finite_mask=True,
            )
            assert_rel_close(one[0, 0], out[bi, hi], rtol=1e-14)


def test_causal_queries_are_last_positions():
    """S < T: query i sits at position T − S + i; the last query sees every key."""
    q, k, v, G = _inputs(11, 1, 2, 3, 8, 4, 4, "heads")
    out = plga_attention(q, k, v, G, causal=True)
    full_q = torch.cat([torch.randn(1, 2, 5, 4, dtype=torch.float64), q], dim=2)  # [1, 2, 8, 4]
    full = plga_attention(full_q, k, v, G, causal=True)
    assert_rel_close(out, full[:, :, 5:], rtol=1e-13)
    nomask = plga_attention(q[:, :, -1:], k, v, G)
    assert_rel_close(out[:, :, -1:], nomask, rtol=1e-13)


def test_fully_masked_rows():
    """Ideal masking gives zero rows; the finite mask gives the published softmax of E − 1e9."""
    q, k, v, G = _inputs(13, 1, 1, 4, 4, 4, 4, "heads")
    mask = torch.tensor([[True, True, False, False]])
    ideal = plga_attention(q, k, v, G, causal=True, key_padding_mask=mask)
    assert torch.all(ideal[:, :, :2] == 0)
    finite = plga_attention(q, k, v, G, causal=True, key_padding_mask=mask, finite_mask=True)
    allowed = attention_support_np(4, 4, True, mask.numpy())
    assert_rel_close(finite, reference_attention(q, k, v, G, allowed, True))
    assert torch.all(finite[:, :, :2] != 0)


def _careless_sdpa(real):
    """A fused SDPA behaving as CUDA's bfloat16 kernels did on an H200 (torch 2.11): NaN at
    scale 0, and values left in rows whose every key is masked."""

    def sdpa(q, k, v, attn_mask=None, scale=None, **kw):
        out = real(q, k, v, attn_mask=attn_mask, scale=scale, **kw)
        if scale == 0.0:
            return torch.full_like(out, float("nan"))
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            return torch.where(attn_mask.any(-1, keepdim=True), out, torch.full_like(out, 0.25))
        return out

    return sdpa


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_result_does_not_rest_on_the_backend_at_scale_zero_and_empty_rows(monkeypatch, dtype):
    """Scale 0 (every score 0: uniform weights) and fully masked rows (zeros) hold whatever the
    fused SDPA does with them; the stand-in backend's own outputs are the negative control."""
    q, k, v, G = (x.to(dtype) for x in _inputs(21, 2, 2, 4, 6, 8, 8, "heads"))
    mask = torch.tensor([[False] * 6, [True] * 4 + [False] * 2])  # row 1: the first causal queries see no key
    careless = _careless_sdpa(F.scaled_dot_product_attention)
    assert careless(q, k, v, scale=0.0).isnan().all()  # the stand-in does misbehave
    allowed = KF.attention_support(4, 6, causal=True, key_padding_mask=mask)
    assert (careless(q, k, v, attn_mask=allowed)[1, :, :2] == 0.25).all()
    want_uniform = plga_attention_eager(q, k, v, G, scale=0.0)
    want_masked = plga_attention_eager(q, k, v, G, causal=True, key_padding_mask=mask)
    monkeypatch.setattr(KF.F, "scaled_dot_product_attention", careless)
    got = plga_attention(q, k, v, G, scale=0.0)
    torch.testing.assert_close(got, want_uniform, rtol=0, atol=1e-12 if dtype == torch.float64 else 1e-2)
    torch.testing.assert_close(got.float(), v.float().mean(-2, keepdim=True).expand_as(got), rtol=0, atol=1e-2)
    got = plga_attention(q, k, v, G, causal=True, key_padding_mask=mask)
    assert (got[1, :, :2] == 0).all()
    torch.testing.assert_close(got, want_masked, rtol=0, atol=1e-12 if dtype == torch.float64 else 2e-2)


def test_error_contract():
    q, k, v, G = _inputs(0, 1, 2, 5, 3, 4, 4, "heads")
    with pytest.raises(ValueError, match="S ≤ T"):
        plga_attention(q, k, v, G, causal=True)
    with pytest.raises(ValueError, match="G must be"):
        plga_attention(q, k, v, torch.eye(3))
    with pytest.raises(ValueError, match="key_padding_mask"):
        plga_attention(q, k, v, G, key_padding_mask=torch.zeros(1, 3))
    with pytest.raises(ValueError, match="backend"):
        plga_attention(q, k, v, G, backend="flash3")


# --- negative controls: the assertions must reject wrong kernels ---------------------------


def _broken_transposed(q, k, v, G, **kw):
    return plga_attention(q, k, v, G.transpose(-1, -2), **kw)


def _broken_no_scale(q, k, v, G, **kw):
    return plga_attention(q, k, v, G, scale=1.0, **kw)


def _broken_causal_off_by_one(q, k, v, G, **kw):
    s, t = q.shape[2], k.shape[2]
    allowed = torch.ones(s, t, dtype=torch.bool).tril(diagonal=t - s + 1)
    return F.scaled_dot_product_attention(KF.apply_g(q, G), k, v, attn_mask=allowed)


@pytest.mark.parametrize("broken", [_broken_transposed, _broken_no_scale, _broken_causal_off_by_one])
def test_negative_controls_are_rejected(broken):
    q, k, v, G = _inputs(17, 2, 3, 6, 6, 8, 4, "sentinel")
    allowed = attention_support_np(6, 6, True, None)
    truth = reference_attention(q, k, v, G, allowed, True)
    bad = broken(q, k, v, G, causal=True) if broken is not _broken_causal_off_by_one else broken(q, k, v, G)
    with pytest.raises(AssertionError):
        assert_rel_close(bad, truth)
    f = lambda x: x.float()  # noqa: E731
    base = baseline_attention(f(q), f(k), f(v), f(G), causal=True)
    bad32 = broken(f(q), f(k), f(v), f(G), causal=True) if broken is not _broken_causal_off_by_one else broken(f(q), f(k), f(v), f(G))
    assert not within_policy(bad32, truth, base)
    good32 = plga_attention(f(q), f(k), f(v), f(G), causal=True)
    assert within_policy(good32, truth, base)


# --- the operator chain ---------------------------------------------------------------------


def _chain_inputs(seed, b, h, s, d, f, units, dense):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(b, h, s, d))
    lin = lambda o, i: (rng.normal(size=(o, i)) / math.sqrt(i), rng.normal(size=o) * 0.1)  # noqa: E731
    us = []
    for _ in range(units):
        blocks = []
        for _ in range(dense):
            w1, b1 = lin(f, d)
            w2, b2 = lin(f, d)
            w3, b3 = lin(d, f)
            blocks.append((w1, b1, w2, b2, w3, b3))
        us.append((blocks, 1 + 0.1 * rng.normal(size=d), 0.1 * rng.normal(size=d)))
    ln = (1 + 0.1 * rng.normal(size=d), 0.1 * rng.normal(size=d))
    pw = [rng.normal(size=(h, d, d)) * s_ for s_ in (0.3, 0.05, 0.3, 0.3, 0.05)]  # W, b, P, a, b_a
    return q, ln, us, pw


def _chain_torch(q, ln, us, pw, dtype=torch.float64, requires_grad=False):
    T = lambda x: torch.tensor(x, dtype=dtype, requires_grad=requires_grad)  # noqa: E731
    return {
        "q": T(q),
        "w": {
            "ln_weight": T(ln[0]), "ln_bias": T(ln[1]),
            "units": [([tuple(T(x) for x in blk) for blk in blocks], T(g), T(bt)) for blocks, g, bt in us],
            "W": T(pw[0]), "b": T(pw[1]), "P": T(pw[2]), "a": T(pw[3]), "b_a": T(pw[4]),
        },
    }


@FEW
@given(
    b=st.integers(1, 2), h=st.sampled_from([1, 3, 5]), s=st.sampled_from([1, 2, 7]), d=st.sampled_from([2, 4, 6]),
    units=st.integers(1, 2), dense=st.integers(1, 2), seed=st.integers(0, 2**16),
)
def test_operator_chain_matchesreference_attention(b, h, s, d, units, dense, seed):
    q, ln, us, pw = _chain_inputs(seed, b, h, s, d, 5, units, dense)
    a_ref = spec.metric_learner(spec.density_operator(q), ln[0], ln[1], us)
    alm_ref = spec.metric_tensor(a_ref, pw[0], pw[1])
    ap_ref = spec.hadamard_power(alm_ref, pw[2])
    g_ref = spec.energy_curvature(ap_ref, pw[3], pw[4])
    t = _chain_torch(q, ln, us, pw)
    A, A_LM, A_P, G = KF.operator_chain(t["q"], t["w"])
    for name, got, want in (("A", A, a_ref), ("A_LM", A_LM, alm_ref), ("A_P", A_P, ap_ref), ("G_LM", G, g_ref)):
        assert_rel_close(got, want, name=name)


@pytest.mark.parametrize("s", [1, 3])
def test_apply_power_g_is_q_times_the_formed_g_lm(s):
    """q G_LM with G_LM = a A_P + b_a unformed ((q a) A_P + q b_a) equals q G_LM from the power
    stage's G_LM: to float64 rounding, and in float32 within the float32 sums' bound. Control:
    the product taken in the other order (q A_P a) is caught."""
    g = torch.Generator().manual_seed(7)
    A = torch.randn(2, 3, 5, 5, generator=g, dtype=torch.float64)  # [B, H, d, d]
    W, b, P, a, b_a = (torch.randn(3, 5, 5, generator=g, dtype=torch.float64) for _ in range(5))  # [H, d, d]
    q = torch.randn(2, 3, s, 5, generator=g, dtype=torch.float64)
    _, a_p, g_lm = KF.power_stage(A, W, b, P.abs(), a, b_a)
    want = KF.apply_g(q, g_lm)
    assert_rel_close(KF.apply_power_g(q, a, a_p, b_a), want, name="q G_LM")
    with pytest.raises(AssertionError):
        assert_rel_close((q @ a_p) @ a + q @ b_a, want, name="q A_P a")
    f32 = [t.float() for t in (q, a, a_p, b_a)]
    got = KF.apply_power_g(*f32).double()
    mass = (q.abs() @ a.abs()) @ a_p.abs() + q.abs() @ b_a.abs()  # Σ|q||a||A_P| + Σ|q||b_a|
    assert bool(((got - want).abs() <= 4 * 5 * 2.0**-24 * mass + 2.0**-24 * want.abs() + 1e-30).all())


def test_operator_chain_upcasts_low_precision():
    """bf16 / fp16 activations: the chain runs in float32 (A_LM's 1e-9 floor survives)."""
    q, ln, us, pw = _chain_inputs(1, 1, 2, 5, 4, 5, 1, 2)
    t = _chain_torch(q, ln, us, pw, dtype=torch.float32)
    ref = KF.operator_chain(t["q"], t["w"])
    for dt in (torch.bfloat16, torch.float16):
        out = KF.operator_chain(t["q"].to(dt), t["w"])
        assert all(x.dtype == torch.float32 for x in out)
        assert float(out[1].min()) > 0  # A_LM ≥ 1e-9 > 0, no underflow to 0
        assert torch.isfinite(out[3]).all()
    assert torch.isfinite(ref[3]).all()


# --- DAG loss --------------------------------------------------------------------------------


def test_dag_loss_matchesreference_attention(real_G):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 6, 6))
    assert_rel_close(KF.dag_loss(torch.tensor(x)), spec.dag_loss(x), rtol=1e-12)
    g = real_G[2:4, :3].astype(np.float64)  # large entries: the naive trace overflows
    got = KF.dag_loss(torch.tensor(g))
    assert torch.isfinite(got).all()
    assert_rel_close(got, spec.dag_loss(g), rtol=1e-10)
    naive = torch.linalg.matrix_exp(torch.tensor(g * g)).diagonal(dim1=-2, dim2=-1).sum(-1)
    assert not torch.isfinite(naive).all()  # the direct form overflows on the trained G


def test_dag_loss_gradcheck():
    x = torch.randn(2, 4, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(KF.dag_loss, (x,))


# --- gradients -------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sdpa", "eager"])
def test_attention_gradcheck(backend):
    q, k, v, G = _inputs(21, 1, 2, 3, 4, 4, 3, "heads")
    args = tuple(x.clone().requires_grad_(True) for x in (q, k, v, G))
    mask = torch.tensor([[True, False, False, False]])
    fn = lambda q, k, v, G: plga_attention(q, k, v, G, causal=True, key_padding_mask=mask, finite_mask=True, backend=backend)  # noqa: E731
    assert torch.autograd.gradcheck(fn, args)


def test_metric_learner_gradcheck():
    q, ln, us, pw = _chain_inputs(2, 1, 2, 3, 2, 3, 1, 2)
    t = _chain_torch(q, ln, us, pw, requires_grad=True)
    w = t["w"]
    flat = [t["q"], w["ln_weight"], w["ln_bias"], w["W"], w["P"], w["a"], *w["units"][0][0][0]]

    def fn(q, lw, lb, W, P, a, *blk):
        ww = dict(w, ln_weight=lw, ln_bias=lb, W=W, P=P, a=a, units=[([tuple(blk), *w["units"][0][0][1:]], *w["units"][0][1:])])
        return KF.operator_chain(q, ww)[3]

    assert torch.autograd.gradcheck(fn, tuple(flat))


# --- packed projections ------------------------------------------------------------------------


@pytest.mark.parametrize("parts", [1, 2, 3, 4])
@pytest.mark.parametrize("m", [1, 3, 16, 17, 40])
@pytest.mark.parametrize("n", [37, 64])
def test_packed_linear_equals_addmm(parts, m, n):
    """Any block count, row count (batched and per-block paths) and unaligned width."""
    gen = torch.Generator().manual_seed(parts * 100 + m + n)
    k = 11
    wt = torch.randn(k, n, generator=gen, dtype=torch.float64)
    b = torch.randn(n, generator=gen, dtype=torch.float64)
    x = torch.randn(m, k, generator=gen, dtype=torch.float64)
    w, bp, width = pack_linear(wt, b, parts)
    assert w.shape[0] == parts and width == n and (w.shape[0] * w.shape[2]) % (16 * parts) == 0
    got = packed_linear(x, w, bp, width)
    assert got.shape == (m, n)
    assert_rel_close(got, torch.addmm(b, x, wt), rtol=1e-14)
    assert_rel_close(packed_linear(x[:, :].t().contiguous().t(), w, bp, width), torch.addmm(b, x, wt), rtol=1e-14)


def test_packed_linear_negative_control_block_order():
    """Swapping two blocks (a wrong column order) is caught by the equality above."""
    wt, b, x = torch.randn(5, 64, dtype=torch.float64), torch.randn(64, dtype=torch.float64), torch.randn(1, 5, dtype=torch.float64)
    w, bp, n = pack_linear(wt, b, 2)
    with pytest.raises(AssertionError):
        assert_rel_close(packed_linear(x, w.flip(0), bp.flip(0), n), torch.addmm(b, x, wt), rtol=1e-14)


def _gate_halves(k: int, f: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    """gluw1 | gluw2 as one weight [2F, K] and bias [2F] (the packed layer's layout), in float64 and ``dtype``."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(2 * f, k, generator=gen, dtype=torch.float64) / k**0.5
    b = torch.randn(2 * f, generator=gen, dtype=torch.float64)
    return w, b, w.to(dtype), b.to(dtype)


@pytest.mark.parametrize("layout", ["rows", "column blocks"])
@pytest.mark.parametrize("m", [1, 3, 16, 17, 40])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_packed_gate_is_silu_of_the_first_half_times_the_second(layout, m, dtype, monkeypatch):
    """:func:`packed_gated` = silu(x W₁ᵀ + b₁) ⊙ (x W₂ᵀ + b₂) for either layout and any row count:
    past PACKED_SMALL_M rows in the row layout the two halves run on gemm.gated (oneDNN where it
    serves: the size threshold lowered here), else packed_linear then silu and the product."""
    from plga.kernels import gemm
    from plga.kernels.packed import PACKED_SMALL_M, pack_linear, pack_rows, packed_gated

    monkeypatch.setattr(gemm, "MIN_MACS", 0)
    k, f = 24, 40
    w, b, wd, bd = _gate_halves(k, f, dtype, seed=m)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(100 + m), dtype=torch.float64)
    packed = pack_rows(wd, bd) if layout == "rows" else pack_linear(wd.t().contiguous(), bd, 2)
    assert packed[2] == 2 * f
    fused = []
    monkeypatch.setattr(gemm, "gated", lambda *a, _g=gemm.gated: fused.append(1) or _g(*a))
    got = packed_gated(x.to(dtype), *packed)
    assert bool(fused) == (layout == "rows" and m > PACKED_SMALL_M)
    truth = torch.nn.functional.silu(x @ w[:f].T + b[:f]) * (x @ w[f:].T + b[f:])
    assert got.shape == (m, f) and got.dtype == dtype
    assert_rel_close(got.double(), truth, rtol=1e-13 if dtype == torch.float64 else 2e-6)


def test_packed_gate_negative_control_swapped_halves():
    """The same check catches the halves taken the wrong way round (silu on gluw2)."""
    from plga.kernels.packed import pack_rows, packed_gated

    k, f, m = 24, 40, 20
    w, b, _, _ = _gate_halves(k, f, torch.float64, seed=1)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    truth = torch.nn.functional.silu(x @ w[:f].T + b[:f]) * (x @ w[f:].T + b[f:])
    assert_rel_close(packed_gated(x, *pack_rows(w, b)), truth, rtol=1e-13)  # control
    swapped = pack_rows(torch.cat([w[f:], w[:f]]), torch.cat([b[f:], b[:f]]))
    with pytest.raises(AssertionError):
        assert_rel_close(packed_gated(x, *swapped), truth, rtol=1e-13)


@pytest.mark.parametrize("finite_mask", [True, False], ids=["finite", "exact"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_one_query_attention_inside_a_compiled_graph(finite_mask, dtype):
    """A single query per row inside a compiled graph (a captured decoding step) runs
    :func:`~plga.kernels.functional.one_query_attention`: against the float64 reference of the
    same rounded inputs, with key padding and a row whose keys are all masked, within the policy
    (baselines: the suite's eager attention in the dtype). Negative control: the same call with
    the padding dropped is caught."""
    q, k, v, G = _inputs(41, 3, 2, 1, 9, 8, 5, "heads")
    pad = torch.zeros(3, 9, dtype=torch.bool)
    pad[1, :4] = True
    # every key of row 2 masked: finite → the mean of v, exact → zeros. Not for finite masks in
    # low precision: there score − 1e9 rounds to −1e9, so the baselines' error is O(1) and the
    # policy would pass anything on that row
    pad[2, : 9 if (dtype == torch.float64 or not finite_mask) else 8] = True
    q, k, v, G = (x.to(dtype) for x in (q, k, v, G))

    def attend(q, k, v, G, pad):
        return plga_attention(q, k, v, G, causal=False, key_padding_mask=pad, finite_mask=finite_mask, validate=False)

    got = torch.compile(attend, fullgraph=True, dynamic=False)(q, k, v, G, pad)
    assert got.dtype == dtype and got.shape == (3, 2, 1, 5)
    truth = plga_attention_eager(*(x.double() for x in (q, k, v, G)), key_padding_mask=pad, finite_mask=finite_mask)
    if dtype == torch.float64:
        assert_rel_close(got, truth, rtol=1e-13, name="one query")
    else:
        base = [plga_attention_eager(q, k, v, G, key_padding_mask=pad, finite_mask=finite_mask)]
        assert_within_policy(got, truth, base, name="one query")
    direct = KF.one_query_attention(KF.apply_g(q, G), k, v, None, scale=1 / math.sqrt(8), finite_mask=finite_mask)
    assert (direct.double() - truth).abs().max() > 0.1  # negative control: padding ignored


def _finite_mask_grads(q, k, v, G, pad, dtype, w, **kw):
    leaves = [x.to(dtype).clone().requires_grad_(True) for x in (q, k, v, G)]
    out = plga_attention(*leaves, causal=True, key_padding_mask=pad, finite_mask=True, **kw)
    (out * w.to(dtype)).sum().backward()
    return [x.grad.double() for x in leaves]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_finite_mask_gradients_on_query_rows_without_a_key(dtype, monkeypatch):
    """Causal left padding under the −1e9 mask: the first queries of row 0 see only padding and
    average every value. The fused kernels' backward recomputes their weights from a saved
    log-sum-exp, −1e9 + log T, rounded to −1e9 below float64: each weight comes out 1, not 1/T.
    The kernel takes the math backend there; its gradients are autograd's of the eager path."""
    gen = torch.Generator().manual_seed(5)
    b, h, s, t, d = 2, 2, 6, 9, 8
    q, k, v = (torch.randn(b, h, n, d, generator=gen) for n in (s, t, t))
    G = torch.randn(h, d, d, generator=gen) / math.sqrt(d)
    w = torch.randn(b, h, s, d, generator=gen)
    pad = torch.zeros(b, t, dtype=torch.bool)
    pad[0, :6] = True  # queries 0–2 of row 0 (positions 3–5) see keys 0–5: all padding
    eager = _finite_mask_grads(q, k, v, G, pad, dtype, w, backend="eager")
    tol = 1e-5 if dtype == torch.float32 else 5e-2
    fused = _finite_mask_grads(q, k, v, G, pad, dtype, w)
    for name, a, e in zip("qkvG", fused, eager, strict=True):
        assert (a - e).abs().max() <= tol * e.abs().max(), name
    monkeypatch.setattr(KF, "_fused_backward_breaks", lambda *a: False)  # negative control: the fused backward
    broken = _finite_mask_grads(q, k, v, G, pad, dtype, w)
    if all((a - e).abs().max() <= tol * e.abs().max() for a, e in zip(broken, eager, strict=True)):
        pytest.skip("this torch's fused backward is right on rows without a key: the negative control cannot show it")
    assert (broken[2] - eager[2]).abs().max() > 0.1 * eager[2].abs().max()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("s", "t"), [(6, 6), (4, 9), (1, 7)])
def test_causal_attention_at_a_negative_scale(dtype, s, t):
    """A negative scale flips which key wins; it must not meet torch's causal kernels, which mask
    the scores before scaling them (−∞ · scale = +∞: NaN rows at S = T, torch 2.13). Negative
    control: that causal path itself, where torch still takes it."""
    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(2, 3, n, 8, generator=gen, dtype=torch.float64) for n in (s, t, t))
    G = torch.randn(3, 8, 8, generator=gen, dtype=torch.float64) / math.sqrt(8)
    want = plga_attention_eager(q, k, v, G, causal=True, scale=-0.5)
    got = plga_attention(*(x.to(dtype) for x in (q, k, v, G)), causal=True, scale=-0.5)
    assert torch.isfinite(got).all()
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 5e-2}[dtype]
    torch.testing.assert_close(got.double(), want, rtol=0, atol=tol)
    if s == t:
        qg = (q @ G).to(dtype)
        direct = F.scaled_dot_product_attention(qg, k.to(dtype), v.to(dtype), is_causal=True, scale=-0.5)
        if torch.isfinite(direct).all():
            pytest.skip("this torch's causal kernel scales before masking: the negative control cannot show it")
        assert torch.isnan(direct).any()
