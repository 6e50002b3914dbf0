"""The mpmath backend: the SDPA identity to 1e-40 and agreement with float64 (docs/spec.md §1)."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from plga.reference import decoder, spec
from plga.reference.checkpoint import random_params
from plga.reference.config import PLDRConfig
from plga.reference.numerics import as_float64, mp_eval

pytestmark = pytest.mark.mpmath
DPS = 50  # 50 digits: ~34 digits of headroom over float64 for these shallow chains


@pytest.mark.parametrize(("s", "t", "d"), [(1, 1, 2), (3, 4, 2), (4, 4, 4)])
def test_sdpa_identity_in_mpmath(s, t, d):
    rng = np.random.default_rng(s * 100 + t * 10 + d)
    q, k, v = rng.standard_normal((s, d)), rng.standard_normal((t, d)), rng.standard_normal((t, d))
    support = np.tril(np.ones((s, t), dtype=bool), k=t - s)
    plga = mp_eval(spec.plga_attention, q, np.eye(d), k, v, support, dps=DPS)
    sdpa = mp_eval(spec.sdpa_attention, q, k, v, support, dps=DPS)
    with mpmath.workdps(DPS):
        assert max(abs(a - b) for a, b in zip(plga.flat, sdpa.flat, strict=True)) <= mpmath.mpf("1e-40")


def test_mpmath_detects_a_perturbed_identity():
    """Negative control: G = I + 1e-30 E₀₀ is seen at 50 digits, invisible in float64."""
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((3, 2)), rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
    with mpmath.workdps(DPS):
        g = np.array([[mpmath.mpf(1) + mpmath.mpf("1e-30"), 0], [0, 1]], dtype=object)
        plga = mp_eval(spec.plga_attention, q, g, k, v, dps=DPS)
        sdpa = mp_eval(spec.sdpa_attention, q, k, v, dps=DPS)
        assert max(abs(a - b) for a, b in zip(plga.flat, sdpa.flat, strict=True)) > mpmath.mpf("1e-40")


def _rel(mp_value, f64_value) -> float:
    ref = as_float64(mp_value)
    return float(np.max(np.abs(ref - f64_value)) / max(np.max(np.abs(ref)), 1e-300))


CHAIN = [
    ("softmax", lambda r: (r.standard_normal((3, 5)),)),
    ("iswiglu", lambda r: (r.standard_normal((3, 5)),)),
    ("density_operator", lambda r: (r.standard_normal((5, 4)),)),
    ("layer_norm", lambda r: (r.standard_normal((4, 4)), r.standard_normal(4), r.standard_normal(4))),
    ("metric_tensor", lambda r: tuple(r.standard_normal((4, 4)) for _ in range(3))),
    ("hadamard_power", lambda r: (r.uniform(0.1, 3, (4, 4)), r.standard_normal((4, 4)))),
    ("energy_curvature", lambda r: tuple(r.standard_normal((4, 4)) for _ in range(3))),
    ("plga_scores", lambda r: (r.standard_normal((3, 4)), r.standard_normal((4, 4)), r.standard_normal((5, 4)))),
    ("rope", lambda r: (r.standard_normal((3, 4)), np.array([0, 5, 1000]))),
    ("dag_loss", lambda r: (r.standard_normal((4, 4)),)),
]


@pytest.mark.parametrize(("name", "make"), CHAIN, ids=[c[0] for c in CHAIN])
def test_float64_agrees_with_mpmath(name, make):
    args = make(np.random.default_rng(7))
    fn = getattr(spec, name)
    assert _rel(mp_eval(fn, *args, dps=DPS), fn(*args)) <= 1e-12


def test_tiny_decoder_float64_agrees_with_mpmath():
    """The whole decoder at 50 digits versus float64, on a well-conditioned random model."""
    config = PLDRConfig.from_name("tiny")
    params = random_params(config, seed=3)
    tokens = np.array([[5, 9, 2, 0, 7]])
    f64 = decoder.forward(decoder.to_backend(params), config, tokens)
    with mpmath.workdps(DPS):
        mp = decoder.forward(decoder.to_backend(params, dps=DPS), config, tokens)
        assert _rel(mp.logits, f64.logits) <= 1e-11
        assert _rel(mp.deductive[0]["G_LM"], f64.deductive[0]["G_LM"]) <= 1e-11



def test_real_powers_follow_mathlib_rpow():
    """Lean's Real.rpow: x^0 = 1, 0^y = 0 (y ≠ 0), x < 0 ↦ |x|^y cos(yπ) — both backends."""
    base = np.array([-8.0, 0.0, 0.0, 2.0, -2.0])
    expo = np.array([1 / 3, -1.5, 0.0, -1.0, 2.0])
    expected = [2.0 * np.cos(np.pi / 3), 0.0, 1.0, 0.5, 4.0]
    np.testing.assert_allclose(spec.hadamard_power(base, expo), expected, rtol=1e-15, atol=1e-15)
    assert _rel(mp_eval(spec.hadamard_power, base, expo, dps=DPS), np.array(expected)) <= 1e-15


def test_layer_norm_with_negative_radicand_returns_beta():
    """√ of a negative is 0 in Lean and x/0 = 0, so LN_ε with var + ε < 0 is exactly β."""
    r, gamma, beta = np.array([1.0, 1.0 + 1e-9]), np.array([2.0, 3.0]), np.array([0.5, -0.5])
    np.testing.assert_array_equal(spec.layer_norm(r, gamma, beta, -1.0), beta)
    np.testing.assert_array_equal(as_float64(mp_eval(spec.layer_norm, r, gamma, beta, -1.0, dps=DPS)), beta)
