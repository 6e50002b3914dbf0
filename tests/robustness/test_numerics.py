"""Numerical hazards of docs/spec.md §1.6, §2.8: detected and named, or provably stable.

- ``A_LM ** P`` overflow (tiny ``A_LM`` with negative exponents) → ``NonFiniteError`` naming
  layer and heads, in the reference and the kernels, in every cache mode;
- softmax at 1e300 (float64) and 1e30 (float32) scores: finite and exact;
- float16: the operator chain is upcast (the 1e-9 floor never underflows) and the −1e9 mask
  is clamped to float16's range;
- the DAG loss never overflows (entries up to 1e3, DAGs included).
"""

from __future__ import annotations

import numpy as np
import pytest

from plga.reference import decoder, spec
from plga.reference.checkpoint import random_params
from plga.reference.config import PLDRConfig

torch = pytest.importorskip("torch", reason="the kernel half of these tests needs torch")

from plga.kernels import PLDRModel, dag_loss, plga_attention, plga_attention_eager, power_stage  # noqa: E402
from plga.kernels.functional import finite_additive_mask  # noqa: E402

CONFIG2 = PLDRConfig(
    num_layers=2, d_model=16, num_heads=2, dff=24, A_dff=12, num_reslayerA=1, num_denseA=2,
    input_vocab_size=37, max_seq_len=64,
)
PROMPT = np.array([[3, 17, 5, 29, 8]])


def _overflowing(params, layer: int, head: int, exponent: float) -> dict:
    """A_LM = ε = 1e-9 everywhere in ``layer`` and one exponent ``exponent`` in ``head``."""
    key = f"decoder.dec_layers.{layer}.mha1.plgatt_layer."
    out = dict(params)
    out[key + "Wlst"] = np.zeros_like(params[key + "Wlst"])
    out[key + "blst"] = np.zeros_like(params[key + "blst"])
    pw = params[key + "pwlst"].copy()
    pw[head, 2, 3] = exponent
    out[key + "pwlst"] = pw
    return out


# --- A_LM ** P overflow ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["forward", "nocache", "kv", "kvg"])
def test_power_overflow_is_named_reference(mode):
    params = decoder.to_backend(_overflowing(random_params(CONFIG2, 1), layer=1, head=0, exponent=-40.0))
    message = r"layer 1: A_P is not finite in heads \[0\] \(A_LM \*\* P overflowed"
    with pytest.raises(decoder.NonFiniteError, match=message):
        if mode == "forward":
            decoder.forward(params, CONFIG2, PROMPT)
        else:
            decoder.generate(params, CONFIG2, PROMPT, 3, mode)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mode", ["forward", "deductive", "nocache", "kv", "kvg", "eager", "loglik"])
def test_power_overflow_is_named_kernels(mode, dtype):
    params = _overflowing(random_params(CONFIG2, 1), layer=1, head=0, exponent=-40.0)
    model = PLDRModel.from_reference(params, CONFIG2, dtype=dtype)
    tokens = torch.as_tensor(PROMPT)
    message = r"layer 1: A_P is not finite in heads \[0\] \(A_LM \*\* P overflowed"
    with pytest.raises(decoder.NonFiniteError, match=message), torch.no_grad():
        if mode == "forward":
            model(tokens)
        elif mode == "deductive":
            model(tokens, deductive=True)
        elif mode == "eager":
            model(tokens, backend="eager")
        elif mode == "loglik":
            model.score_loglikelihood(tokens)
        else:
            model.generate(tokens, 3, mode)


def test_power_overflow_depends_on_the_dtype():
    """(1e-9) ** −5 = 1e45: finite in float64, beyond float32's 3.4e38. The float32 kernel
    reports it; the float64 kernel and the reference compute it."""
    params = _overflowing(random_params(CONFIG2, 2), layer=0, head=1, exponent=-5.0)
    key = "decoder.dec_layers.0.mha1.plgatt_layer.alst"
    params[key] = params[key].copy()
    params[key][1, :, 2] = 0.0  # G = a A_P ignores the 1e45 entry: scores stay moderate in float64
    ref = decoder.forward(decoder.to_backend(params), CONFIG2, PROMPT)
    assert np.isfinite(ref.logits).all() and np.max(ref.deductive[0]["A_P"]) >= 1e44
    with torch.no_grad():
        out64 = PLDRModel.from_reference(params, CONFIG2, dtype=torch.float64)(torch.as_tensor(PROMPT))
    np.testing.assert_allclose(out64.logits.numpy(), ref.logits, rtol=1e-9, atol=1e-9)
    m32 = PLDRModel.from_reference(params, CONFIG2, dtype=torch.float32)
    with pytest.raises(decoder.NonFiniteError, match=r"layer 0: A_P is not finite in heads \[1\]"):
        m32(torch.as_tensor(PROMPT))


def test_functional_power_stage_check():
    """The kernels' finiteness guard names layer and heads with the reference's message."""
    from plga.kernels.finite import FiniteGuard

    a = torch.zeros(1, 3, 4, 4)
    w, b = torch.zeros(3, 4, 4), torch.zeros(3, 4, 4)
    p = torch.zeros(3, 4, 4)
    p[2, 0, 1] = -40.0
    a_lm, a_p, _ = power_stage(a, w, b, p, torch.eye(4).expand(3, 4, 4), b)
    guard = FiniteGuard()
    guard.add(4, "A_LM", a_lm)
    guard.check()  # finite: no error
    guard.add(4, "A_P", a_p)
    with pytest.raises(decoder.NonFiniteError, match=r"layer 4: A_P is not finite in heads \[2\]"):
        guard.check()


# --- softmax at huge scores --------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1.0, 1e10, 1e100, 1e300, 1.7e308])
@pytest.mark.filterwarnings("ignore:overflow encountered in subtract:RuntimeWarning")  # x − max → −inf: exp = 0, exact
def test_reference_softmax_is_stable(scale):
    x = np.array([[0.3, -1.0, 0.9, 0.5], [-0.2, -0.2, -0.7, -0.1]]) * scale
    for out in (spec.softmax(x), spec.masked_softmax(x, np.array([True, True, False, True]))):
        assert np.all(np.isfinite(out))
        np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-15)
    if scale >= 1e10:  # the row maximum takes all the weight
        np.testing.assert_array_equal(spec.softmax(x), np.eye(4)[[2, 3]])


def test_finite_mask_stops_masking_at_scores_beyond_1e9():
    """Documented, upstream semantics: the published mask adds −1e9, so a masked score of
    magnitude ≥ ~1e9 is no longer suppressed. The ideal masked softmax is exact at any scale."""
    x = np.array([[1e12, 0.0]])
    support = np.array([[False, True]])
    assert spec.finite_mask_softmax(x, support)[0, 0] == 1.0  # the masked key wins
    assert spec.masked_softmax(x, support)[0, 0] == 0.0


def _huge_qkv(dtype, magnitude):
    """Scores of magnitude ~``magnitude`` (q·k/√d), one dominant key per query."""
    gen = torch.Generator().manual_seed(5)
    d = 4
    q = torch.randn(1, 2, 3, d, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 2, 5, d, generator=gen, dtype=torch.float64)
    v = torch.randn(1, 2, 5, d, generator=gen, dtype=torch.float64)
    root = float(np.sqrt(magnitude))
    return (q * root).to(dtype), (k * root).to(dtype), v.to(dtype)


@pytest.mark.parametrize(
    ("dtype", "magnitude"),
    [(torch.float64, 1e300), (torch.float64, 1e30), (torch.float32, 1e30), (torch.float32, 1e15)],
    ids=["f64-1e300", "f64-1e30", "f32-1e30", "f32-1e15"],
)
@pytest.mark.parametrize("causal", [False, True])
def test_kernel_attention_is_stable_for_huge_scores(dtype, magnitude, causal):
    q, k, v = _huge_qkv(dtype, magnitude)
    t = k.shape[2]
    support = np.tril(np.ones((3, t), dtype=bool), k=t - 3) if causal else np.ones((3, t), dtype=bool)
    want = spec.plga_attention(q.double().numpy(), np.eye(4), k.double().numpy(), v.double().numpy(), support)
    for out in (
        plga_attention(q, k, v, causal=causal),
        plga_attention_eager(q, k, v, causal=causal),
        plga_attention(q, k, v, causal=causal, key_padding_mask=torch.tensor([[False, False, False, False, True]])),
    ):
        assert torch.isfinite(out).all()
    for out in (plga_attention(q, k, v, causal=causal), plga_attention_eager(q, k, v, causal=causal)):
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        np.testing.assert_allclose(out.double().numpy(), want, rtol=tol, atol=tol)


def test_reference_attention_is_stable_for_huge_scores():
    q, k, v = (x.numpy() for x in _huge_qkv(torch.float64, 1e300))
    out = spec.plga_attention(q, np.eye(4), k, v)
    scores = spec.plga_scores(q, np.eye(4), k)
    np.testing.assert_array_equal(out, np.take_along_axis(v, scores.argmax(-1)[..., None], axis=-2))


# --- float16 ----------------------------------------------------------------------------------


def test_float16_power_stage_is_upcast():
    """1e-9 is 0 in float16 and (0) ** P is inf for P < 0: the chain runs in float32 instead."""
    assert float(torch.tensor(1e-9, dtype=torch.float16)) == 0.0
    a = torch.full((1, 2, 4, 4), -30.0, dtype=torch.float16)  # iSwiGLU(−30) ≈ 8e-11: A_LM at the floor
    eye = torch.eye(4, dtype=torch.float16).expand(2, 4, 4)
    zeros = torch.zeros(2, 4, 4, dtype=torch.float16)
    p = torch.full((2, 4, 4), -2.0, dtype=torch.float16)
    a_lm, a_p, g_lm = power_stage(a, eye, zeros, p, eye, zeros)
    assert a_lm.dtype == a_p.dtype == g_lm.dtype == torch.float32
    assert float(a_lm.min()) >= 1e-9 and torch.isfinite(a_p).all()


def test_float16_model_keeps_the_chain_wide_and_masks_finitely():
    params = random_params(CONFIG2, 4)
    tokens = torch.tensor([[0, 0, 0, 5, 9], [1, 2, 3, 4, 6], [0, 0, 0, 0, 0]])  # left padding, all padding
    m16 = PLDRModel.from_reference(params, CONFIG2).to(torch.float16)
    m32 = PLDRModel.from_reference(params, CONFIG2, dtype=torch.float32)
    with torch.no_grad():
        out16 = m16(tokens, deductive=True)
        out32 = m32(tokens)
    for layer in out16.deductive:
        assert layer["A_LM"].dtype == torch.float32 and float(layer["A_LM"].min()) >= 1e-9
    assert torch.isfinite(out16.logits).all()
    # the unpadded row does not depend on how fully masked rows are handled
    np.testing.assert_allclose(out16.logits[1].double().numpy(), out32.logits[1].double().numpy(), atol=0.05)
    mask = finite_additive_mask(torch.tensor([[True, False]]), torch.float16)
    assert float(mask[0, 1]) == -65504.0 and torch.isfinite(mask).all()
    assert float(finite_additive_mask(torch.tensor([[False]]), torch.float32)[0, 0]) == -1e9


@pytest.mark.parametrize("fn", [plga_attention, plga_attention_eager], ids=["fused", "eager"])
def test_float16_fully_masked_rows_use_the_finite_mask(fn):
    """−1e9 is −inf in float16: unclamped, a fully masked row became zeros (fused CPU SDPA) or NaN
    (eager). Clamped to −65504 it is the published softmax(E + fill) over the masked keys: a
    finite convex combination of the values (all in [10, 11] here, so never 0)."""
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 1, 4, 8, generator=gen).half() for _ in range(2))
    v = (10 + torch.rand(1, 1, 4, 8, generator=gen)).half()
    pad = torch.tensor([[True, True, False, False]])
    out = fn(q, k, v, causal=True, key_padding_mask=pad, finite_mask=True)
    assert torch.isfinite(out).all()
    assert float(out[0, 0, :2].min()) >= 9.99 and float(out[0, 0, :2].max()) <= 11.01


def test_reference_upcasts_low_precision_weights():
    """The reference never computes in low precision: float16/float32 weights become float64."""
    params = random_params(PLDRConfig.from_name("tiny"), 5)
    half = {k: v.astype(np.float16) for k, v in params.items()}
    config = PLDRConfig.from_name("tiny")
    direct = decoder.forward(half, config, PROMPT)
    upcast = decoder.forward({k: v.astype(np.float64) for k, v in half.items()}, config, PROMPT)
    np.testing.assert_array_equal(direct.logits, upcast.logits)
    assert direct.deductive[0]["A_LM"].dtype == np.float64 and direct.deductive[0]["A_LM"].min() >= 1e-9


# --- DAG loss ---------------------------------------------------------------------------------


def _dag_inputs(d: int, kind: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = rng.uniform(0, 1e3, (d, d))
    if kind == "dag":  # strictly upper triangular: acyclic, N nilpotent, exp(N) astronomically large
        m = np.triu(m, 1)
    elif kind == "near-dag":
        m = np.triu(m, 1) + np.tril(rng.uniform(0, 1e-2, (d, d)), -1)
    elif kind == "signed":
        m = m * rng.choice([-1.0, 1.0], size=(d, d))
    return m


@pytest.mark.parametrize("d", [4, 16, 64, 128])
@pytest.mark.parametrize("kind", ["dense", "dag", "near-dag", "signed"])
def test_dag_loss_never_overflows(d, kind):
    m = _dag_inputs(d, kind, seed=d)
    ref = spec.dag_loss(m)
    assert np.isfinite(ref)
    if kind == "dag":
        assert ref == 0.0  # tr exp(N) = d exactly for a nilpotent N
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-4)):
        got = dag_loss(torch.tensor(m, dtype=dtype))
        assert torch.isfinite(got), (d, kind, dtype)
        assert abs(float(got) - ref) <= tol * max(1.0, ref), (d, kind, dtype, float(got), ref)


def test_dag_loss_batched_and_differentiable_where_representable():
    m = torch.tensor(np.stack([_dag_inputs(8, "dense", 1), _dag_inputs(8, "dag", 2)]) / 100, requires_grad=True)
    loss = dag_loss(m)
    assert loss.shape == (2,) and torch.isfinite(loss).all()
    loss[0].backward()
    assert torch.isfinite(m.grad).all()


def test_dag_loss_refuses_non_square_input():
    with pytest.raises(ValueError, match="square"):
        dag_loss(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="floating"):
        dag_loss(torch.zeros(3, 3, dtype=torch.long))
