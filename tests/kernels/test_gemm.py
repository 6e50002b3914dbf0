"""The kernels' GEMM (:mod:`plga.kernels.gemm`): b + x Wᵀ on oneDNN where torch would call MKL,
and the SwiGLU gate silu(b₁ + x W₁ᵀ) ⊙ (b₂ + x W₂ᵀ) with its silu and product as oneDNN post-ops.

Its contract is ``F.linear``'s: products and sums in float32, one rounding to the output dtype.
Results are checked against the exact float64 product of the same inputs with the bound that
contract implies (a negative control shows the bound catches a dropped bias and a dropped K
column); the dispatch rules (CPU, float32 / bfloat16, no autograd, not compiled, the switch)
and the model's use of it are checked where oneDNN serves.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from plga.kernels import gemm

from ..large_paths import ONEDNN

needs_onednn = pytest.mark.skipif(not ONEDNN, reason="torch has no oneDNN inner product here")
OUT_U = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def _inputs(shape: tuple[int, ...], n: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    k = shape[-1]
    return tuple(torch.randn(*s, generator=g, dtype=torch.float64).to(dtype) for s in (shape, (n, k), (n,)))


def _product(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, u: float) -> tuple[torch.Tensor, torch.Tensor]:
    """t = b + x Wᵀ in float64 and the bound of F.linear's contract on it, rounded to a dtype of
    unit roundoff u: u·|t| + (K + 2)·2⁻²⁴·(Σ|x||w| + |b|)."""
    xd, wd = x.double(), w.double()
    bd = torch.zeros(w.shape[0], dtype=torch.float64) if b is None else b.double()
    truth = bd + xd @ wd.T
    return truth, u * truth.abs() + (x.shape[-1] + 2) * 2.0**-24 * (bd.abs() + xd.abs() @ wd.abs().T)


def _violations(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> int:
    """Entries outside |out − t| ≤ u_out·|t| + (K + 2)·2⁻²⁴·(Σ|x||w| + |b|), t = b + x Wᵀ in float64."""
    truth, err = _product(x, w, b, OUT_U[out.dtype])
    return int(((out.double() - truth).abs() > err + 1e-30).sum())


def _asked_inside_compiled_code(question, x, w, b) -> list[bool]:
    """What ``question(x, w, b)`` answers while Dynamo traces a function that calls gemm.linear."""
    seen = []

    def f(x):
        seen.append(question(x, w, b))
        return gemm.linear(x, w, b)

    torch.compile(f, fullgraph=True, dynamic=False)(x)
    return seen


@needs_onednn
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize(("shape", "n"), [((1, 4096, 7), 77), ((257, 64), 170), ((3, 4, 64, 170), 64), ((300, 896), 2688), ((2, 9000, 33), 9)])
def test_linear_within_the_float32_accumulation_bound(dtype, shape, n):
    """On this host's own path: oneDNN where the CPU computes the dtype, else widened to float32."""
    x, w, b = _inputs(shape, n, dtype, seed=sum(shape) + n)
    assert gemm.serves(x, w, b) is gemm.cpu_has_low_precision_gemm(dtype)
    assert gemm.widens(x, w, b) is not gemm.cpu_has_low_precision_gemm(dtype)
    out = gemm.linear(x, w, b)
    assert out.dtype == dtype and out.shape == (*shape[:-1], n)
    assert _violations(out, x, w, b) == 0
    assert _violations(gemm.linear(x, w), x, w, None) == 0  # no bias


@needs_onednn
def test_strided_operands_and_empty_rows(monkeypatch):
    monkeypatch.setattr(gemm, "MIN_MACS", 0)
    x, w, b = _inputs((40, 24), 9, torch.float32, seed=3)
    xt = x.T.contiguous().T  # the same values, column-major
    wt = w.T.contiguous().T
    assert not xt.is_contiguous() and not wt.is_contiguous() and gemm.serves(xt, wt, b)
    assert _violations(gemm.linear(xt, wt, b), x, w, b) == 0
    assert gemm.linear(x[:0], w, b).shape == (0, 9)


@needs_onednn
def test_negative_controls_the_bound_catches_a_dropped_bias_and_a_dropped_column(monkeypatch):
    monkeypatch.setattr(gemm, "MIN_MACS", 0)
    x, w, b = _inputs((6, 35), 11, torch.float32, seed=7)
    b = b + 3.0
    x[:, -1], w[:, -1] = 2.0, 4.0
    out = gemm.linear(x, w, b)
    assert _violations(out, x, w, b) == 0
    assert _violations(out - b, x, w, b) > 0  # the bias dropped
    assert _violations(gemm.linear(x[:, :-1], w[:, :-1], b), x, w, b) > 0  # the last K column dropped


@needs_onednn
def test_dispatch_rules():
    """oneDNN for float32 / bfloat16 CPU products of at least MIN_MACS multiply-adds without
    autograd; F.linear otherwise (smaller, float64, a mixed dtype, operands that need gradients,
    inside a compiled graph, the switch off)."""
    x, w, b = _inputs((64, 256), 128, torch.float32, seed=1)
    assert x.numel() * w.shape[0] == gemm.MIN_MACS
    assert gemm.serves(x, w, b)
    assert gemm.serves(x.bfloat16(), w.bfloat16(), None) is gemm.cpu_has_low_precision_gemm(torch.bfloat16)
    assert not gemm.serves(x[:63], w, b)
    assert not gemm.serves(x.double(), w.double(), b.double())
    assert not gemm.serves(x, w.bfloat16(), b)
    assert not gemm.serves(x, w, b.double())
    wg = w.clone().requires_grad_()
    assert not gemm.serves(x, wg, b)
    out = gemm.linear(x, wg, b)  # falls back to F.linear: differentiable
    out.sum().backward()
    assert wg.grad is not None and torch.allclose(wg.grad, x.sum(0).expand(128, 256), rtol=1e-5, atol=1e-4)
    with torch.no_grad():
        assert gemm.serves(x, wg, b)
    assert _asked_inside_compiled_code(gemm.serves, x, w, b) == [False]
    old = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        assert not gemm.serves(x, w, b)
    finally:
        torch.backends.mkldnn.enabled = old


def test_the_switch_keeps_f_linear(monkeypatch):
    monkeypatch.setattr(gemm, "_AVAILABLE", False)
    x, w, b = _inputs((5, 8), 3, torch.float32, seed=2)
    assert not gemm.serves(x, w, b)
    assert torch.equal(gemm.linear(x, w, b), F.linear(x, w, b))


@needs_onednn
def test_prefill_products_and_the_metric_learner_run_on_onednn(monkeypatch):
    """A float32 prefill without autograd runs the metric learner's products through oneDNN, and
    its projections too where the packed copies keep the row layout (the native kernel serves
    float32 on this CPU; elsewhere they are column blocks, one GEMM per block), the SwiGLU gates
    with their silu inside the GEMMs. The tiny model's products are below the size threshold,
    lowered here. With autograd on, none runs on oneDNN."""
    from torch.profiler import profile

    monkeypatch.setattr(gemm, "MIN_MACS", 0)
    from plga.kernels import PLDRModel
    from plga.reference.config import PLDRConfig

    from .kernel_helpers import model_pair

    _, model = model_pair(PLDRConfig.from_name("tiny"), 5, dtype=torch.float32)
    assert isinstance(model, PLDRModel)
    tokens = torch.randint(1, model.config.input_vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))

    def calls(grad: bool, op: str = "mkldnn::_linear_pointwise") -> int:
        with torch.set_grad_enabled(grad), profile() as prof:  # every row of every layer (logits="last" trims the last layer)
            model(tokens, logits="all")
        return sum(e.count for e in prof.key_averages() if e.key == op)

    from plga.kernels.packed import uses_rows

    rows = uses_rows(model.device, torch.float32)
    learner = 3 * model.config.num_reslayerA * model.config.num_denseA  # the learner's SwiGLUs
    projections = 5 if rows else 0  # QKV, dense, the gate's two halves, gluw3
    layers = model.config.num_layers
    assert calls(False) >= layers * (learner + projections)
    assert calls(True) == 0
    # silu of its own: the power stage's iSwiGLU, and the feed-forward's where its copies are column blocks;
    # the learner's and (row layout) the feed-forward's gates run it inside their GEMMs
    assert calls(False, "aten::silu") == layers * (1 if rows else 2)
    monkeypatch.setattr(gemm, "serves", lambda *a: False)  # negative control: the gates run unfused
    assert calls(False, "aten::silu") > layers * (1 if rows else 2)


def test_availability_needs_x86_64_and_the_switch_on(monkeypatch):
    import platform

    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    assert not gemm._onednn_available()
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setenv(gemm.ENV_SWITCH, "0")
    assert not gemm._onednn_available()
    monkeypatch.delenv(gemm.ENV_SWITCH)
    assert gemm._onednn_available() == (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


@pytest.fixture
def no_low_precision_arithmetic(monkeypatch):
    """A CPU taken to have no bfloat16 / float16 arithmetic (an AVX2-only x86-64), whatever this host has."""
    monkeypatch.setattr(gemm, "cpu_has_low_precision_gemm", lambda dtype: dtype not in (torch.bfloat16, torch.float16))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_without_low_precision_arithmetic_many_rows_widen_within_the_bound(dtype, no_low_precision_arithmetic):
    """More than WIDEN_MIN_ROWS rows: one float32 product on widened operands, rounded once (never
    oneDNN, which refuses the dtype there); within F.linear's float32 accumulation bound, with and
    without bias, and differentiable."""
    rows = gemm.WIDEN_MIN_ROWS + 1
    x, w, b = _inputs((rows, 300), 130, dtype, seed=11)
    assert gemm.widens(x, w, b) and not gemm.serves(x, w, b)
    out = gemm.linear(x, w, b)
    assert out.dtype == dtype and out.shape == (rows, 130)
    assert _violations(out, x, w, b) == 0 and _violations(gemm.linear(x, w), x, w, None) == 0
    assert _violations(out - b, x, w, b) > 0  # negative control: a dropped bias is caught
    x3 = x.reshape(1, rows, 300)  # leading axes count as rows
    assert gemm.widens(x3, w, b) and _violations(gemm.linear(x3, w, b), x3, w, b) == 0
    wg = w.clone().requires_grad_()
    gemm.linear(x, wg, b).float().sum().backward()
    assert wg.grad is not None and wg.grad.dtype == dtype


@pytest.mark.parametrize("change", ["few rows", "float32", "mixed dtypes", "compiled", "has the arithmetic"])
def test_what_does_not_widen(change, no_low_precision_arithmetic, monkeypatch):
    """One change from a widened product keeps F.linear: decoding-sized products (torch's
    low-precision GEMV is vectorized and reads half the bytes), float32, mixed dtypes, compiled
    code (Inductor chooses there), and a CPU with the arithmetic (oneDNN)."""
    x, w, b = _inputs((gemm.WIDEN_MIN_ROWS + 1, 64), 40, torch.bfloat16, seed=5)
    assert gemm.widens(x, w, b)  # control
    if change == "few rows":
        x = x[: gemm.WIDEN_MIN_ROWS]
    elif change == "float32":
        x, w, b = x.float(), w.float(), b.float()
    elif change == "mixed dtypes":
        b = b.float()
    elif change == "has the arithmetic":
        monkeypatch.setattr(gemm, "cpu_has_low_precision_gemm", lambda dtype: True)
    if change == "compiled":
        assert _asked_inside_compiled_code(gemm.widens, x, w, b) == [False]
        return
    assert not gemm.widens(x, w, b)
    if change == "few rows":
        assert _violations(gemm.linear(x, w, b), x, w, b) == 0


def test_the_low_precision_question_matches_the_cpu_flags():
    """:func:`cpu_has_low_precision_gemm` answers what the CPU flags say where they decide it:
    bfloat16 with AVX-512 (F, BW, VL, DQ: oneDNN's avx512_core) or AMX; none on an x86-64 with
    neither nor AVX-NE-CONVERT (AVX2 only). float32 and float64: always."""
    import platform

    assert gemm.cpu_has_low_precision_gemm(torch.float32) and gemm.cpu_has_low_precision_gemm(torch.float64)
    if platform.machine().lower() not in ("x86_64", "amd64") or not hasattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported"):
        pytest.skip("the flags decide it on x86-64 with torch's oneDNN check")
    try:
        with open("/proc/cpuinfo") as fh:
            flags = set(next(line for line in fh if line.startswith("flags")).split())
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags on this host")
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags or "amx_bf16" in flags:
        assert gemm.cpu_has_low_precision_gemm(torch.bfloat16)
    elif not flags & {"avx512f", "avx_ne_convert", "amx_tile"}:
        assert not gemm.cpu_has_low_precision_gemm(torch.bfloat16)
    else:
        pytest.skip(f"flags between the two rules: {sorted(f for f in flags if f.startswith(('avx', 'amx')))}")


# --- the SwiGLU gate ------------------------------------------------------------------------


def _gate_inputs(shape: tuple[int, ...], n: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    x, w1, b1 = _inputs(shape, n, dtype, seed)
    _, w2, b2 = _inputs(shape, n, dtype, seed + 1)
    return x, w1, b1, w2, b2


def _gate_violations(out: torch.Tensor, x, w1, b1, w2, b2) -> int:
    """Entries outside |out − s(t₁)t₂| ≤ 3u'|s(t₁)t₂| + 1.2 e₁(|t₂| + e₂) + 1.1|s(t₁)| e₂ with
    t_i = b_i + x W_iᵀ in float64, s = silu (|s'| ≤ 1.1), e_i the bound of one product rounded to
    the output dtype (:func:`_product`: u|t_i| + (K + 2)·2⁻²⁴·(Σ|x||w_i| + |b_i|)), and u' the
    output dtype's unit roundoff plus 8·2⁻²⁴ for silu's own error (its result, and the product,
    may each be rounded to the output dtype)."""
    u = OUT_U[out.dtype]
    (t1, e1), (t2, e2) = _product(x, w1, b1, u), _product(x, w2, b2, u)
    s1 = F.silu(t1)
    truth = s1 * t2
    bound = 3 * (u + 8 * 2.0**-24) * truth.abs() + 1.2 * e1 * (t2.abs() + e2) + 1.1 * s1.abs() * e2 + 1e-30
    return int(((out.double() - truth).abs() > bound).sum())


def _ops_run(fn) -> dict[str, int]:
    from torch.profiler import profile

    with profile() as prof:
        fn()
    return {e.key: e.count for e in prof.key_averages()}


@needs_onednn
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize(("shape", "n"), [((3, 4, 64, 64), 170), ((300, 896), 240), ((2, 9000, 33), 9)])
def test_gate_runs_its_silu_and_product_inside_the_two_gemms_within_the_bound(dtype, shape, n):
    """Where oneDNN serves both products: two oneDNN calls and no silu or product of their own,
    within the bound of two float32-accumulated products, a silu and a product."""
    x, w1, b1, w2, b2 = _gate_inputs(shape, n, dtype, seed=sum(shape) + n)
    if not gemm.serves(x, w1, b1):
        pytest.skip(f"oneDNN does not serve {dtype} products on this CPU")
    out = gemm.gated(x, w1, b1, w2, b2)
    assert out.dtype == dtype and out.shape == (*shape[:-1], n)
    assert _gate_violations(out, x, w1, b1, w2, b2) == 0
    ops = _ops_run(lambda: gemm.gated(x, w1, b1, w2, b2))
    assert ops.get("mkldnn::_linear_pointwise") == 2
    assert not {"aten::silu", "aten::mul", "aten::mul_"} & set(ops), ops


@pytest.mark.parametrize("case", ["float64", "below the size threshold", "autograd"])
def test_gate_off_onednn_is_two_products_a_silu_and_a_product(case):
    """Where oneDNN does not serve (float64, small products, operands that need gradients): the
    same gate from :func:`gemm.linear`, within the same bound, differentiable."""
    dtype = torch.float64 if case == "float64" else torch.float32
    shape, n = ((5, 8), 3) if case == "below the size threshold" else ((64, 256), 128)
    x, w1, b1, w2, b2 = _gate_inputs(shape, n, dtype, seed=4)
    if case == "autograd":
        w1.requires_grad_()
    assert not gemm.serves(x, w1, b1)
    out = gemm.gated(x, w1, b1, w2, b2)
    assert _gate_violations(out.detach(), x, w1.detach(), b1, w2, b2) == 0
    if case == "autograd":
        out.sum().backward()
        t2 = (b2.double() + x.double() @ w2.double().T)
        t1 = (b1.double() + x.double() @ w1.detach().double().T)
        ds = torch.sigmoid(t1) * (1 + t1 * (1 - torch.sigmoid(t1)))  # silu'
        expected = ((ds * t2).T @ x.double()).float()  # ∂ Σ out / ∂ W₁
        assert w1.grad is not None and torch.allclose(w1.grad, expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("served", [True, False], ids=["onednn", "F.linear"])
def test_negative_controls_the_gate_bound_catches_a_swapped_gate_a_dropped_bias_and_a_sigmoid(served, monkeypatch):
    if served and not ONEDNN:
        pytest.skip("torch has no oneDNN inner product here")
    monkeypatch.setattr(gemm, "MIN_MACS", 0)
    if not served:
        monkeypatch.setattr(gemm, "_AVAILABLE", False)
    x, w1, b1, w2, b2 = _gate_inputs((300, 64), 40, torch.float32, seed=9)
    b2 = b2 + 2.0
    assert gemm.serves(x, w1, b1) is served
    assert _gate_violations(gemm.gated(x, w1, b1, w2, b2), x, w1, b1, w2, b2) == 0
    assert _gate_violations(gemm.gated(x, w2, b2, w1, b1), x, w1, b1, w2, b2) > 0  # silu on the other factor
    assert _gate_violations(gemm.gated(x, w1, b1, w2, b2 - 2.0), x, w1, b1, w2, b2) > 0  # a bias dropped
    sig = torch.sigmoid(gemm.linear(x, w1, b1)) * gemm.linear(x, w2, b2)
    assert _gate_violations(sig, x, w1, b1, w2, b2) > 0  # sigmoid for silu


@needs_onednn
def test_gate_takes_strided_operands_no_bias_and_empty_rows(monkeypatch):
    monkeypatch.setattr(gemm, "MIN_MACS", 0)
    x, w1, b1, w2, b2 = _gate_inputs((40, 24), 9, torch.float32, seed=3)
    xt, w1t = x.T.contiguous().T, w1.T.contiguous().T  # the same values, column-major
    assert not xt.is_contiguous() and not w1t.is_contiguous() and gemm.serves(xt, w1t, b1)
    assert _gate_violations(gemm.gated(xt, w1t, b1, w2, b2), x, w1, b1, w2, b2) == 0
    zero = torch.zeros(9)
    assert _gate_violations(gemm.gated(x, w1, None, w2, None), x, w1, zero, w2, zero) == 0
    assert gemm.gated(x[:0], w1, b1, w2, b2).shape == (0, 9)
