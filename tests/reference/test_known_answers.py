"""Known answers for reference definitions whose other tests are properties a wrong variant
also has (an outside mutation audit: a rotate_half RoPE turning by −θ preserves norms and
relative positions; a RoPE ignoring its base, a metric learner dropping its ε, a precision cap
in mp_eval and a weakened SDPA verdict all passed every test). Expected values are written
out by hand or computed here with Python's math and complex numbers, not by the code under test."""

from __future__ import annotations

import cmath
import math

import mpmath
import numpy as np
import pytest

from plga.reference import numerics, reduction, spec


def _rotated_pairs(x: np.ndarray, positions: list[int], base: float, pairs: list[tuple[int, int]]) -> np.ndarray:
    """Each pair (i, j) of x's features as the complex number x_i + i·x_j, times e^{i p θ_n}
    with θ_n = base^(−2n/d): the rotation RoPE is, written with complex numbers."""
    d = x.shape[-1]
    out = np.empty_like(x)
    for row, p in enumerate(positions):
        for n, (i, j) in enumerate(pairs):
            z = complex(x[row, i], x[row, j]) * cmath.exp(1j * p * base ** (-2 * n / d))
            out[row, i], out[row, j] = z.real, z.imag
    return out


@pytest.mark.parametrize("base", [10000.0, 100.0, 500000.0])
def test_rope_rotates_each_pair_by_its_angle(base):
    x = np.random.default_rng(5).standard_normal((3, 8))
    positions = [0, 1, 37]
    interleaved = _rotated_pairs(x, positions, base, [(0, 1), (2, 3), (4, 5), (6, 7)])
    rotate_half = _rotated_pairs(x, positions, base, [(0, 4), (1, 5), (2, 6), (3, 7)])
    np.testing.assert_allclose(spec.rope(x, positions, base, style="interleaved"), interleaved, rtol=0, atol=1e-14)
    np.testing.assert_allclose(spec.rope(x, positions, base, style="rotate_half"), rotate_half, rtol=0, atol=1e-14)


def test_rope_by_hand():
    """d = 4, base 100: θ = (1, 0.1). A unit vector on feature 0 at position 1 turns by 1 radian
    toward feature 1 (interleaved) or feature 2 (rotate_half); feature 1 at position 3 by 0.3."""
    e0, e1 = np.array([[1.0, 0, 0, 0]]), np.array([[0, 1.0, 0, 0]])
    c, s = math.cos(1.0), math.sin(1.0)
    np.testing.assert_allclose(spec.rope(e0, [1], 100.0, "interleaved"), [[c, s, 0, 0]], atol=1e-15)
    np.testing.assert_allclose(spec.rope(e0, [1], 100.0, "rotate_half"), [[c, 0, s, 0]], atol=1e-15)
    c3, s3 = math.cos(0.3), math.sin(0.3)
    np.testing.assert_allclose(spec.rope(e1, [3], 100.0, "rotate_half"), [[0, c3, 0, s3]], atol=1e-15)
    # interleaved pairs (0, 1): e1 is the pair's second component, turned by θ_0 · 3 = 3 radians
    np.testing.assert_allclose(spec.rope(e1, [3], 100.0, "interleaved"), [[-math.sin(3.0), math.cos(3.0), 0, 0]], atol=1e-15)


def test_rope_mpmath_path_agrees_with_the_known_answer():
    x = np.random.default_rng(6).standard_normal((2, 4))
    want = _rotated_pairs(x, [2, 9], 500000.0, [(0, 2), (1, 3)])
    got = numerics.mp_eval(spec.rope, x, [2, 9], 500000.0, style="rotate_half", dps=30)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=0, atol=1e-14)


def _layer_norm(r: np.ndarray, eps: float) -> np.ndarray:
    c = r - r.mean(-1, keepdims=True)
    return c / np.sqrt((c * c).mean(-1, keepdims=True) + eps)


@pytest.mark.parametrize("eps", [1e-6, 0.5])
def test_the_metric_learner_uses_its_eps_everywhere(eps):
    """With GLU blocks of zero weights a residual unit is LN(0 + x): the learner is LN applied
    twice (γ = 1, β = 0), each with the ε given — a large ε shows where it is dropped."""
    d, f = 4, 3
    density = np.random.default_rng(7).standard_normal((d, d)) * 3
    zero_block = (np.zeros((f, d)), np.zeros(f), np.zeros((f, d)), np.zeros(f), np.zeros((d, f)), np.zeros(d))
    units = [([zero_block], np.ones(d), np.zeros(d))]
    got = spec.metric_learner(density, np.ones(d), np.zeros(d), units, eps=eps)
    np.testing.assert_allclose(got, _layer_norm(_layer_norm(density, eps), eps), rtol=1e-13, atol=1e-14)
    if eps > 1e-3:  # negative control: the default ε in the unit is far from this answer
        assert np.abs(_layer_norm(_layer_norm(density, eps), 1e-6) - got).max() > 1e-3


@pytest.mark.parametrize("dps", [50, 100, 300])
def test_mp_eval_works_at_the_precision_asked(dps):
    third = numerics.mp_eval(lambda x: x / 3, np.array([1.0]), dps=dps)[0]
    with mpmath.workdps(dps + 20):
        assert abs(third * 3 - 1) < mpmath.mpf(10) ** (-(dps - 3))


def test_the_sdpa_verdict_needs_exact_float64_equality(monkeypatch):
    """PLGA at G = I is SDPA in the same arithmetic: one rounding of difference must fail it.
    An SDPA multiplying by 1/√d instead of dividing by √d differs in the last bit somewhere."""
    rows, verdict = reduction.sdpa_reduction(seed=0, dps=30)
    assert verdict and max(r[3] for r in rows if r[0] == "float64") == 0.0
    real = spec.sdpa_scores

    def reciprocal(q, k, sqrt_d=None):  # float64 only: the mpmath rows keep the real scores
        if q.dtype == object:
            return real(q, k, sqrt_d)
        return (q @ np.swapaxes(k, -1, -2)) * (1.0 / spec._root_d(q, sqrt_d))

    monkeypatch.setattr(spec, "sdpa_scores", reciprocal)
    rows, verdict = reduction.sdpa_reduction(seed=0, dps=30)
    assert max(r[3] for r in rows if r[0] != "float64") <= reduction.MP_BOUND  # the mpmath rows still agree
    worst = max(r[3] for r in rows if r[0] == "float64")
    assert 0.0 < worst < 1e-12 and not verdict, rows
