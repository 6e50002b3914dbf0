"""The power stage's elementwise power on the native kernel (``torch.ops.plga.positive_pow``,
kernels/csrc/positive_pow.cpp, dispatched by :func:`plga.kernels.native.power`).

Its contract: ``torch.pow(x, p)`` for float32 x and a p whose shape ends x's, every finite result
within 0.51 ulp of the exact power of the (float32) inputs, computed here in float64 (whose own
error, ~1e-16 relative, is far below the bound), and torch's special values (signed zeros, ∞,
NaN) elsewhere. Inputs span the whole float32 range of x, large and tiny exponents, results
overflowing and underflowing (subnormal results are measured in the subnormal ulp), the power
stage's own range (x ≥ 1e-9), every tail length of the kernel's 64- and 32-element passes, and
special values mixed into otherwise fast passes, on both codes of an AVX-512 CPU (8 and 4 double
lanes). A negative control shows the ulp check catches a result one ulp off, and another a
slightly wrong exponent.
"""

from __future__ import annotations

import pytest
import torch

from plga.kernels import functional as KF
from plga.kernels import native

from .kernel_helpers import has_avx512, native_code

BOUND_ULP = 0.51
FLT_MAX = torch.finfo(torch.float32).max

pytestmark = pytest.mark.skipif(not native.loaded(), reason="the native kernel is not loaded on this CPU")


def _ulp_error(y: torch.Tensor, x: torch.Tensor, p: torch.Tensor) -> float:
    """The largest error of ``y`` in ulps of the exact xᵖ over the entries whose exact power is a
    finite float32 number (below the smallest normal, in the subnormal ulp 2⁻¹⁴⁹); every other
    entry must equal torch.pow's (∞, 0 or NaN)."""
    exact = torch.pow(x.double(), p.double())  # [*x.shape]
    finite = exact.isfinite() & (exact.abs() <= FLT_MAX)
    magnitude = exact.abs().clamp(min=2.0**-126)
    ulp = torch.exp2(torch.floor(torch.log2(magnitude)) - 23)
    err = ((y.double() - exact).abs() / ulp)[finite]
    rest = torch.pow(x, p)[~finite]
    assert torch.equal(y[~finite].nan_to_num(nan=7.0), rest.nan_to_num(nan=7.0))
    return float(err.max()) if err.numel() else 0.0


def _samples(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x log-uniform over the normal float32 range and around 1, p from tiny to large."""
    g = torch.Generator().manual_seed(seed)
    wide = torch.exp2(torch.empty(n, dtype=torch.float64).uniform_(-126, 127.9, generator=g))
    near_one = 1 + torch.empty(n, dtype=torch.float64).uniform_(-1e-3, 1e-3, generator=g)
    floor = 1e-9 + torch.empty(n, dtype=torch.float64).uniform_(0, 1e-8, generator=g)  # A_LM's floor
    x = torch.cat([wide, near_one, floor]).float()
    scale = torch.tensor([1e-3, 0.5, 3.0, 40.0, 1e3])[torch.randint(0, 5, (3 * n,), generator=g)]
    p = (torch.randn(3 * n, generator=g, dtype=torch.float64) * scale).float()
    return x, p


@pytest.fixture(params=["widest", "avx2"])
def lanes(request):
    """The kernel's widest code on this CPU (8 double lanes with AVX-512F), then its AVX2 code
    (4 lanes: what an AVX2-only CPU runs) where the CPU has wider; restored afterwards."""
    if request.param == "avx2" and not has_avx512():
        pytest.skip("the widest code on this CPU is the AVX2 one")
    with native_code(request.param):
        yield request.param


def test_within_half_an_ulp_of_the_exact_power_over_the_float32_range(lanes):
    x, p = _samples(40_000, seed=0)
    assert _ulp_error(torch.ops.plga.positive_pow(x, p), x, p) <= BOUND_ULP


def test_the_power_stage_shapes_and_range(lanes):
    """A_LM ≥ 1e-9 and P [H, d, d] broadcast over the batch, as the power stage calls it."""
    g = torch.Generator().manual_seed(1)
    a_lm = (torch.randn(8, 4, 64, 64, generator=g) * 3).square() * torch.rand(8, 4, 64, 64, generator=g) + 1e-9
    p = torch.rand(4, 64, 64, generator=g) * 3 - 1
    y = torch.ops.plga.positive_pow(a_lm, p)
    assert y.shape == a_lm.shape and y.is_contiguous()
    assert _ulp_error(y, a_lm, p.expand_as(a_lm)) <= BOUND_ULP


def test_negative_controls_the_ulp_check_catches_small_errors():
    x, p = _samples(2_000, seed=2)
    y = torch.ops.plga.positive_pow(x, p)
    one_ulp_off = torch.nextafter(y, torch.full_like(y, float("inf")))
    assert _ulp_error(one_ulp_off, x, p) > BOUND_ULP
    off_exponent = torch.pow(x, p * (1 + 2.0**-20))
    assert _ulp_error(off_exponent, x, p) > BOUND_ULP


SPECIAL_X = [0.0, -0.0, -2.0, -0.5, float("inf"), -float("inf"), float("nan"), 1.0, 1e-40, 1e-45, FLT_MAX, 2.0, 0.5]
SPECIAL_P = [0.0, -0.0, 1.0, 2.0, 3.0, -1.0, -3.0, 0.5, 1e30, -1e30, float("inf"), -float("inf"), float("nan")]


def test_special_values_are_torch_pow_s(lanes):
    """Every pair of special x and p, each pair placed among fast lanes of a full pass. (Where the
    power is finite, the ulp bound holds: torch's own FLT_MAX ** 0.5 is 2⁶⁴, 0.5 ulp above the
    exact 2⁶⁴·√(1 − 2⁻²⁴), which rounds down.)"""
    xs = torch.tensor(SPECIAL_X).repeat_interleave(len(SPECIAL_P))
    ps = torch.tensor(SPECIAL_P).repeat(len(SPECIAL_X))
    x = torch.full((xs.numel(), 32), 1.7)
    p = torch.full((xs.numel(), 32), 0.3)
    x[:, 5], p[:, 5] = xs, ps
    y = torch.ops.plga.positive_pow(x, p)
    assert _ulp_error(y, x, p) <= BOUND_ULP  # NaN, ∞ and overflow are torch.pow's exactly
    special, want = y[:, 5], torch.pow(xs, ps)
    signed = ~want.isnan()
    assert torch.equal(torch.signbit(special[signed]), torch.signbit(want[signed]))  # −0 and −∞


@pytest.mark.parametrize("n", [1, 7, 31, 32, 33, 63, 64, 65, 95, 96, 97, 127, 4095, 4096, 4097, 9000])
def test_every_tail_length(n, lanes):
    """Every mix of the passes: 64 floats (AVX-512), 32 (AVX2), and a padded tail."""
    x, p = _samples(n, seed=n)
    x, p = x[:n], p[:n]
    assert _ulp_error(torch.ops.plga.positive_pow(x, p), x, p) <= BOUND_ULP


@pytest.mark.parametrize("p_shape", [(7, 11), (11,), (), (5, 3, 7, 11)])
def test_broadcast_strided_and_empty(p_shape, lanes):
    g = torch.Generator().manual_seed(3)
    x = torch.rand(11, 7, 3, 5, generator=g).permute(3, 2, 1, 0) * 4  # [5, 3, 7, 11], strided
    p = torch.randn(p_shape, generator=g)
    y = torch.ops.plga.positive_pow(x, p)
    assert y.shape == x.shape
    assert _ulp_error(y, x, p.expand_as(x)) <= BOUND_ULP
    assert torch.ops.plga.positive_pow(torch.zeros(0, 7, 11), torch.zeros(7, 11)).shape == (0, 7, 11)


def test_the_widest_lanes_give_the_avx2_lanes_bits():
    """The AVX-512 code runs the AVX2 code's operations lane for lane, so the two agree bit for
    bit, special values included (a pass with one special lane takes std::pow for that lane)."""
    if not has_avx512():
        pytest.skip("no AVX-512 on this CPU: one code path")
    x, p = _samples(20_000, seed=5)
    x[::997], p[::991] = float("nan"), float("inf")
    x[3::1009] = 0.0
    widest = torch.ops.plga.positive_pow(x, p)
    with native_code("avx2"):
        narrow = torch.ops.plga.positive_pow(x, p)
    assert torch.equal(widest.nan_to_num(nan=7.0), narrow.nan_to_num(nan=7.0))
    assert torch.equal(widest.isnan(), narrow.isnan())


def test_refusals():
    op = torch.ops.plga.positive_pow
    with pytest.raises(RuntimeError, match="float32 only"):
        op(torch.ones(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="must end x's"):
        op(torch.ones(3, 4), torch.ones(3))


def test_power_dispatch_and_the_compiled_graph(monkeypatch):
    """``native.power`` runs the kernel for float32 CPU tensors without a gradient to record,
    torch.pow otherwise (float64, a gradient, a shape p does not end, the kernel withheld); a
    compiled graph calls it too, with the same bits."""
    from torch.profiler import profile

    x = torch.rand(2, 3, 8, 8) + 1e-9
    p = torch.rand(3, 8, 8) * 2

    def ran(a: torch.Tensor, b: torch.Tensor) -> bool:
        with profile() as prof:
            native.power(a, b)
        return any(e.key == "plga::positive_pow" for e in prof.key_averages())

    assert ran(x, p)
    assert not ran(x.double(), p.double())
    assert not ran(x, p[:, :1, :])
    assert not ran(x, p.clone().requires_grad_())
    with torch.no_grad():
        assert ran(x, p.clone().requires_grad_())
    monkeypatch.setattr(native, "READY_ROWS", frozenset())
    assert not ran(x, p)
    monkeypatch.undo()
    compiled = torch.compile(lambda a, b: native.power(a * 1.0, b), fullgraph=True, dynamic=False)
    compiled(x, p)
    with profile() as prof:
        assert torch.equal(compiled(x, p), torch.ops.plga.positive_pow(x, p))
    assert any(e.key == "plga::positive_pow" for e in prof.key_averages())


def test_only_a_call_it_serves_loads_the_library(monkeypatch):
    """An eager float32 CPU call loads the library first (its answer never depends on what ran
    before); a float64 call, a call with a gradient to record, and compiled code never do."""
    calls = []
    monkeypatch.setitem(native._state, "tried", False)
    monkeypatch.setattr(native, "prepare", lambda dtype, rows=1: calls.append(dtype))
    x, p = torch.rand(2, 3, 4, 4) + 1e-9, torch.rand(3, 4, 4)
    native.power(x.double(), p.double())
    native.power(x, p.clone().requires_grad_())
    assert calls == []
    native.power(x, p)
    assert calls == [torch.float32]


def test_the_power_stage_runs_it():
    """``functional.power_stage``'s A_P is the kernel's power of its own A_LM (float32)."""
    g = torch.Generator().manual_seed(4)
    A, W, b, P, a, b_a = (torch.randn(2, 4, 4, generator=g) * 0.5 for _ in range(6))
    a_lm, a_p, g_lm = KF.power_stage(A[None], W, b, P, a, b_a)
    assert torch.equal(a_p, torch.ops.plga.positive_pow(a_lm, P))
    assert torch.equal(g_lm, a @ a_p + b_a)
