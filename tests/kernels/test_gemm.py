"""The kernels' GEMM (:mod:`plga.kernels.gemm`): b + x Wᵀ on oneDNN where torch would call MKL.

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

ONEDNN = gemm.serves(torch.ones(gemm.MIN_MACS, 1), torch.ones(1, 1), None)
needs_onednn = pytest.mark.skipif(not ONEDNN, reason="torch has no oneDNN inner product here")
OUT_U = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8}


def _inputs(shape: tuple[int, ...], n: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    k = shape[-1]
    return tuple(torch.randn(*s, generator=g, dtype=torch.float64).to(dtype) for s in (shape, (n, k), (n,)))


def _violations(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> int:
    """Entries outside |out − t| ≤ u_out·|t| + (K + 2)·2⁻²⁴·(Σ|x||w| + |b|), t = b + x Wᵀ in float64."""
    xd, wd = x.double(), w.double()
    bd = torch.zeros(w.shape[0], dtype=torch.float64) if b is None else b.double()
    truth = bd + xd @ wd.T
    mass = bd.abs() + xd.abs() @ wd.abs().T
    bound = OUT_U[out.dtype] * truth.abs() + (x.shape[-1] + 2) * 2.0**-24 * mass + 1e-30
    return int(((out.double() - truth).abs() > bound).sum())


@needs_onednn
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize(("shape", "n"), [((1, 4096, 7), 77), ((257, 64), 170), ((3, 4, 64, 170), 64), ((300, 896), 2688), ((2, 9000, 33), 9)])
def test_linear_within_the_float32_accumulation_bound(dtype, shape, n):
    x, w, b = _inputs(shape, n, dtype, seed=sum(shape) + n)
    assert gemm.serves(x, w, b)
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
    assert gemm.serves(x, w, b) and gemm.serves(x.bfloat16(), w.bfloat16(), None)
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
    seen = []

    def f(x):
        seen.append(gemm.serves(x, w, b))
        return gemm.linear(x, w, b)

    torch.compile(f, fullgraph=True, dynamic=False)(x)
    assert seen == [False]
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
    """A float32 prefill without autograd runs its projections (packed, more than 16 rows) and the
    metric learner's products through oneDNN (the tiny model's products are below the size
    threshold, lowered here); with autograd on, none does."""
    from torch.profiler import profile

    monkeypatch.setattr(gemm, "MIN_MACS", 0)
    from plga.kernels import PLDRModel
    from plga.reference.config import PLDRConfig

    from .kernel_helpers import model_pair

    _, model = model_pair(PLDRConfig.from_name("tiny"), 5, dtype=torch.float32)
    assert isinstance(model, PLDRModel)
    tokens = torch.randint(1, model.config.input_vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))

    def onednn_calls(grad: bool) -> int:
        with torch.set_grad_enabled(grad), profile() as prof:
            model(tokens, logits="last")
        return sum(e.count for e in prof.key_averages() if e.key == "mkldnn::_linear_pointwise")

    per_layer = 4 + 3 * model.config.num_reslayerA * model.config.num_denseA  # QKV, dense, gates, gluw3; the learner's SwiGLUs
    assert onednn_calls(False) >= model.config.num_layers * per_layer
    assert onednn_calls(True) == 0


def test_availability_needs_x86_64_and_the_switch_on(monkeypatch):
    import platform

    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    assert not gemm._onednn_available()
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setenv(gemm.ENV_SWITCH, "0")
    assert not gemm._onednn_available()
    monkeypatch.delenv(gemm.ENV_SWITCH)
    assert gemm._onednn_available() == (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"))
