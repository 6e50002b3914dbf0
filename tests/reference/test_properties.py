"""Hypothesis properties of every spec function, each paired with a broken variant it catches.

A property is a function of the implementation under test returning a Hypothesis test;
``test_<name>`` runs it on the reference, ``test_<name>_rejects_broken`` proves it can fail.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from plga.reference import spec

finite = st.floats(-8, 8, allow_nan=False, allow_subnormal=False)


SIDES = st.integers(1, 6)


def matrices(rows=SIDES, cols=SIDES, elements=finite):
    return st.tuples(rows, cols).flatmap(lambda rc: arrays(np.float64, rc, elements=elements))


def even_dim():
    return st.integers(1, 5).map(lambda m: 2 * m)


# --- properties ---------------------------------------------------------------------------


def softmax_is_a_distribution(softmax: Callable) -> Callable:
    @given(matrices())
    def prop(x):
        y = softmax(x)
        assert np.all(y >= 0)
        assert np.allclose(y.sum(axis=-1), 1.0, rtol=0, atol=1e-13)

    return prop


def softmax_is_shift_invariant(softmax: Callable) -> Callable:
    @given(matrices(), st.floats(-50, 50))
    def prop(x, c):
        assert np.allclose(softmax(x + c), softmax(x), rtol=1e-12, atol=1e-14)

    return prop


def masked_softmax_is_exact_off_support(masked_softmax: Callable) -> Callable:
    @given(st.data())
    def prop(data):
        x = data.draw(matrices(), label="x")
        support = data.draw(arrays(bool, x.shape), label="support")
        y = masked_softmax(x, support)
        assert np.all(y[~support] == 0.0), "entries off the support must be exactly 0"
        rows = support.any(axis=-1)
        assert np.allclose(y[rows].sum(axis=-1), 1.0, rtol=0, atol=1e-13)
        assert np.all(y[~rows] == 0.0), "a row with empty support is all zeros"

    return prop


def iswiglu_is_nonnegative(iswiglu: Callable) -> Callable:
    @given(matrices(elements=st.floats(-700, 700)))
    def prop(u):
        assert np.all(iswiglu(u) >= 0)

    return prop


def metric_tensor_is_at_least_eps(metric_tensor: Callable) -> Callable:
    @given(st.integers(1, 5).flatmap(lambda d: st.tuples(*(arrays(np.float64, (d, d), elements=finite) for _ in range(3)))))
    def prop(mats):
        a, w, b = mats
        assert np.all(metric_tensor(a, w, b) >= spec.EPSILON_ADJ)

    return prop


def density_is_symmetric_psd(density_operator: Callable) -> Callable:
    @given(matrices())
    def prop(q):
        d = density_operator(q)
        assert d.shape == (q.shape[1], q.shape[1])
        np.testing.assert_array_equal(d, d.T)
        scale = max(1.0, float(np.sum(q * q)))
        assert np.min(np.linalg.eigvalsh(d)) >= -1e-12 * scale

    return prop


def layer_norm_is_shift_invariant(layer_norm: Callable) -> Callable:
    @given(st.data())
    def prop(data):
        r = data.draw(matrices(cols=st.integers(2, 8)), label="r")
        gamma = data.draw(arrays(np.float64, r.shape[-1:], elements=finite), label="gamma")
        beta = data.draw(arrays(np.float64, r.shape[-1:], elements=finite), label="beta")
        c = data.draw(st.floats(-4, 4), label="c")
        assert np.allclose(layer_norm(r + c, gamma, beta), layer_norm(r, gamma, beta), rtol=1e-7, atol=1e-7)

    return prop


def rope_preserves_norms(rope: Callable) -> Callable:
    @given(st.data())
    def prop(data):
        d = data.draw(even_dim(), label="d")
        x = data.draw(arrays(np.float64, (3, d), elements=finite), label="x")
        pos = data.draw(arrays(np.int64, (3,), elements=st.integers(0, 4096)), label="positions")
        for style in ("interleaved", "rotate_half"):
            y = rope(x, pos, 10000.0, style)
            assert np.allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-12, atol=1e-12)

    return prop


def rope_scores_depend_on_offset_only(rope: Callable) -> Callable:
    @given(st.data())
    def prop(data):
        d = data.draw(even_dim(), label="d")
        q = data.draw(arrays(np.float64, (1, d), elements=finite), label="q")
        k = data.draw(arrays(np.float64, (1, d), elements=finite), label="k")
        m, n, s = (data.draw(st.integers(0, 300), label=name) for name in ("m", "n", "shift"))
        before = rope(q, [m]) @ rope(k, [n]).T
        after = rope(q, [m + s]) @ rope(k, [n + s]).T
        assert np.allclose(before, after, rtol=1e-9, atol=1e-9)

    return prop


def attention_stays_in_value_hull(plga_attention: Callable) -> Callable:
    @given(st.data())
    def prop(data):
        s, t, d = (data.draw(st.integers(1, 5), label=n) for n in ("S", "T", "d"))
        q, k = (data.draw(arrays(np.float64, (n, d), elements=finite), label=lab) for n, lab in ((s, "q"), (t, "k")))
        g = data.draw(arrays(np.float64, (d, d), elements=st.floats(-1, 1)), label="G")
        v = data.draw(arrays(np.float64, (t, 2), elements=finite), label="v")
        out = plga_attention(q, g, k, v)
        assert np.all(out <= v.max(axis=0) + 1e-12) and np.all(out >= v.min(axis=0) - 1e-12)

    return prop


def hadamard_power_adds_exponents(hadamard_power: Callable) -> Callable:
    @given(st.data())
    def prop(data):
        shape = data.draw(st.tuples(st.integers(1, 4), st.integers(1, 4)), label="shape")
        a = data.draw(arrays(np.float64, shape, elements=st.floats(1e-3, 10)), label="A")
        p, r = (data.draw(arrays(np.float64, shape, elements=st.floats(-3, 3)), label=n) for n in ("P", "R"))
        np.testing.assert_array_equal(hadamard_power(a, np.zeros(shape)), np.ones(shape))
        assert np.allclose(hadamard_power(a, p + r), hadamard_power(a, p) * hadamard_power(a, r), rtol=1e-12)

    return prop


def energy_curvature_is_left_product(energy_curvature: Callable) -> Callable:
    @given(st.integers(1, 4).flatmap(lambda d: st.tuples(*(arrays(np.float64, (d, d), elements=finite) for _ in range(3)))))
    def prop(mats):
        a_p, a, b_a = mats
        d = a.shape[0]
        expected = np.array([[sum(a[i, k] * a_p[k, j] for k in range(d)) + b_a[i, j] for j in range(d)] for i in range(d)])
        assert np.allclose(energy_curvature(a_p, a, b_a), expected, rtol=1e-12, atol=1e-12)

    return prop


def plga_at_identity_is_sdpa_bitwise(plga_attention: Callable) -> Callable:
    @given(st.data())
    def prop(data):
        s, t, d = (data.draw(st.integers(1, 9), label=n) for n in ("S", "T", "d"))
        q, k, v = (data.draw(arrays(np.float64, (n, d), elements=finite), label=lab) for n, lab in ((s, "q"), (t, "k"), (t, "v")))
        support = np.tril(np.ones((s, t), dtype=bool), k=t - s)
        for fill in (None, spec.MASK_FILL):
            np.testing.assert_array_equal(
                plga_attention(q, np.eye(d), k, v, support, None, fill),
                spec.sdpa_attention(q, k, v, support, None, fill),
            )

    return prop


# --- broken variants ----------------------------------------------------------------------


def broken_softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e)  # normalised over the whole array, not each row


def broken_masked_softmax(x, support):
    return spec.finite_mask_softmax(x, support, fill=-5.0)  # a finite mask that leaks


def broken_iswiglu(u):
    return spec.silu(u)  # SiLU goes negative


def broken_metric_tensor(a, w, b):
    return spec.silu(w @ a + b)  # no iSwiGLU, no ε floor


def broken_density(q):
    return q.T @ np.roll(q, 1, axis=0)  # not a Gram matrix


def broken_layer_norm(r, gamma, beta):
    return gamma * r / np.sqrt(spec.row_var(r) + 1e-6) + beta  # the mean is never removed


def broken_rope_norm(x, positions, base=10000.0, style="interleaved"):
    y = spec.rope(x, positions, base, style)
    return y * 1.0001


def broken_rope_offset(x, positions, base=10000.0, style="interleaved"):
    return spec.rope(x, [p * p for p in positions], base, style)  # angles not linear in position


def broken_attention(q, g, k, v, support=None, sqrt_d=None, fill=None):
    scores = spec.plga_scores(q, g, k, sqrt_d)
    return np.exp(scores - scores.max()) @ v  # unnormalised weights


def broken_hadamard_power(a, p):
    return np.power(a, np.abs(p))  # the exponent's sign is lost


def broken_energy_curvature(a_p, a, b_a):
    return a_p @ a + b_a  # right product instead of left


def broken_scaled_plga_attention(q, g, k, v, support=None, sqrt_d=None, fill=None):
    scores = (q @ g @ k.T) * (1.0 / np.sqrt(q.shape[-1]))  # multiplies by a rounded reciprocal
    weights = spec.softmax(scores) if support is None else (
        spec.masked_softmax(scores, support) if fill is None else spec.finite_mask_softmax(scores, support, fill))
    return weights @ v


CASES = [
    (softmax_is_a_distribution, spec.softmax, broken_softmax),
    (softmax_is_shift_invariant, spec.softmax, lambda x: np.exp(x) / (1 + np.exp(x).sum(axis=-1, keepdims=True))),  # an extra zero logit
    (masked_softmax_is_exact_off_support, spec.masked_softmax, broken_masked_softmax),
    (iswiglu_is_nonnegative, spec.iswiglu, broken_iswiglu),
    (metric_tensor_is_at_least_eps, spec.metric_tensor, broken_metric_tensor),
    (density_is_symmetric_psd, spec.density_operator, broken_density),
    (layer_norm_is_shift_invariant, spec.layer_norm, broken_layer_norm),
    (rope_preserves_norms, spec.rope, broken_rope_norm),
    (rope_scores_depend_on_offset_only, spec.rope, broken_rope_offset),
    (attention_stays_in_value_hull, spec.plga_attention, broken_attention),
    (hadamard_power_adds_exponents, spec.hadamard_power, broken_hadamard_power),
    (energy_curvature_is_left_product, spec.energy_curvature, broken_energy_curvature),
    (plga_at_identity_is_sdpa_bitwise, spec.plga_attention, broken_scaled_plga_attention),
]
IDS = [c[0].__name__ for c in CASES]


@pytest.mark.parametrize(("prop", "impl", "broken"), CASES, ids=IDS)
def test_property_holds(prop, impl, broken):
    prop(impl)()


def assert_rejected(run: Callable[[], None]) -> None:
    """``run`` must fail by assertion (Hypothesis groups several distinct failures)."""
    try:
        run()
    except AssertionError:
        return
    except Exception as exc:
        group = getattr(exc, "exceptions", None)
        if group is not None and all(isinstance(e, AssertionError) for e in group):
            return
        raise
    pytest.fail("the property accepted a deliberately broken implementation")


@pytest.mark.parametrize(("prop", "impl", "broken"), CASES, ids=IDS)
def test_property_rejects_broken(prop, impl, broken):
    assert_rejected(prop(broken))
