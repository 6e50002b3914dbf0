"""Known-answer tests of every audit statistic, each with a negative control.

Each family has a ``check_<family>(impl)`` that runs the known answers against an
implementation; the real function must pass, and a deliberately wrong implementation (a
plausible bug) must be caught — so no statistic can pass vacuously.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from plga.audit import stats as st

EPS = 2.0**-23


def _fails(check, impl) -> bool:
    """True when the known-answer check rejects ``impl`` (a wrong answer or a crash)."""
    try:
        check(impl)
    except (AssertionError, ArithmeticError, ValueError, TypeError):
        return True
    return False


# --- order parameter ------------------------------------------------------------------------


def check_order_pair(f):
    x = np.arange(12.0).reshape(3, 4)
    assert f(x, x) == (0.0, 0.0), "identical tensors give (0, 0)"
    assert f(np.zeros(4), np.zeros(4)) == (0.0, 0.0), "the all-zero pair gives (0, 0), not NaN"
    r, s = f(np.ones(3), -np.ones(3))
    assert (r, s) == (2.0, 2.0), f"(1, −1) gives (2, 2), got {(r, s)}"
    r, s = f(np.array([1.0, -1.0]), np.array([2.0, -2.0]))
    assert math.isinf(s) and s > 0, "cancelling means give signed = +inf"
    assert math.isclose(r, 1 / 1.5), "rms normalization of (1,−1) vs (2,−2) is 1/1.5"
    r, s = f(np.full(4, 1.0), np.full(4, 3.0))
    assert math.isclose(r, 1.0) and math.isclose(s, 1.0), "symmetrized: 2 / ½(1 + 3) = 1 (not 2/1 = |μ₁| alone)"


def test_order_pair():
    check_order_pair(st.order_pair)


def test_order_pair_negative_control():
    def first_arg_only(x1, x2):  # the source papers' |μ₁| normalization, not the symmetrized one
        num = st.rms(np.subtract(x1, x2))
        if num == 0:
            return 0.0, 0.0
        return num / (0.5 * (st.rms(x1) + st.rms(x2))), num / abs(float(np.mean(x1)))

    def nan_on_zero(x1, x2):
        num = st.rms(np.subtract(x1, x2))
        with np.errstate(invalid="ignore", divide="ignore"):
            return float(np.float64(num) / (0.5 * (st.rms(x1) + st.rms(x2)))), 0.0

    assert _fails(check_order_pair, first_arg_only)
    assert _fails(check_order_pair, nan_on_zero)


def test_order_pair_shape_mismatch():
    with pytest.raises(ValueError):
        st.order_pair(np.zeros(3), np.zeros(4))


# --- spectra ---------------------------------------------------------------------------------


def check_numrank(f):
    alpha = np.linspace(-1, 2, 16)
    s = np.linalg.svd(np.outer(np.ones(16), alpha), compute_uv=False)
    assert f(s) == 1, "numerical rank of 1αᵀ is 1"
    assert f(np.linalg.svd(np.eye(5), compute_uv=False)) == 5
    assert f(np.array([1.0, 64 * EPS])) == 1, "s_i = 64·eps·s₁ does not count (strict)"
    assert f(np.array([1.0, 64 * EPS * 1.01])) == 2
    assert f(np.array([2.0, 64 * EPS * 1.5])) == 1, "the tolerance scales with s₁"
    assert f(np.zeros(4)) == 0, "the zero matrix has rank 0"
    batch = np.array([[3.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert list(f(batch)) == [2, 1], "batched over leading axes"


def test_numrank():
    check_numrank(st.numrank)


def test_numrank_negative_control():
    assert _fails(check_numrank, lambda s: np.sum(np.asarray(s) >= 64 * EPS * np.asarray(s)[..., :1], axis=-1))
    assert _fails(check_numrank, lambda s: np.sum(np.asarray(s) > 64 * EPS, axis=-1))  # absolute, not relative


def check_s2_cond(s2, cond):
    s = np.array([4.0, 1.0, 0.5])
    assert s2(s) == 0.25 and cond(s) == 8.0
    assert s2(np.zeros(3)) == 0.0 and cond(np.zeros(3)) == 0.0
    assert math.isinf(cond(np.array([1.0, 0.0])))


def test_s2_cond():
    check_s2_cond(st.s2_over_s1, st.condition_number)


def test_s2_cond_negative_control():
    assert _fails(lambda f: check_s2_cond(f, st.condition_number), lambda s: np.asarray(s)[..., -1] / np.asarray(s)[..., 0])


def test_svdvals_nonfinite_counted():
    m = np.stack([np.eye(3), np.full((3, 3), np.nan)])
    s, bad = st.svdvals(m)
    assert bad == 1 and np.array_equal(s[1], np.zeros(3)) and np.allclose(s[0], 1.0)
    assert np.allclose(st.svdvals(np.diag([3.0, 1.0]))[0], np.linalg.svd(np.diag([3.0, 1.0]), compute_uv=False))


def test_rank_histogram():
    assert st.rank_histogram([1, 1, 64, 3]) == {"1": 2, "3": 1, "64": 1}


def check_rowvar(f):
    rng = np.random.default_rng(0)
    alpha = rng.normal(size=8)
    assert f(np.outer(np.ones(6), alpha)) < 1e-25, "identical rows give 0 (up to the rounding of the mean row)"
    m = np.outer(np.arange(6.0), np.ones(8))  # identical columns, rows differ
    assert math.isclose(f(m), 1.0), "rows constant but distinct: all variance is across rows"
    assert f(np.full((3, 3), 2.0)) == 0.0, "a constant matrix gives 0"
    assert 0.8 < f(rng.normal(size=(64, 64))) < 1.0


def test_rowvar_ratio():
    check_rowvar(st.rowvar_ratio)


def test_rowvar_negative_control():
    def wrong_axis(a):  # subtracts the row means instead of the mean row
        a = np.asarray(a, dtype=float)
        num = np.mean((a - a.mean(axis=-1, keepdims=True)) ** 2)
        den = np.mean((a - a.mean()) ** 2)
        return num / den if den else 0.0

    assert _fails(check_rowvar, wrong_axis)


def check_crosshead(f):
    a = np.stack([np.eye(4), np.eye(4), 2 * np.eye(4)])
    rms, rel = f(a)
    assert np.allclose(rms, [0.0, 0.5]) and np.allclose(rel, [0.0, 1.0])
    rms, rel = f(np.zeros((2, 3, 3)))
    assert rms[0] == 0.0 and rel[0] == 0.0


def test_crosshead():
    check_crosshead(st.crosshead_rms)


def test_crosshead_negative_control():
    def vs_mean(a):
        d = a[1:] - a.mean(axis=0)
        r = np.sqrt(np.mean(d * d, axis=(-2, -1)))
        return r, r

    assert _fails(check_crosshead, vs_mean)


# --- RoPE structure -----------------------------------------------------------------------------


def test_eigenbasis_diagonalizes_rotations():
    u, omega = st.rope_eigenbasis(16)
    assert np.allclose(np.conj(u.T) @ u, np.eye(16), atol=1e-12)
    for n in (1, 7, 300):
        d = np.conj(u.T) @ st.rope_rotation(n, 16) @ u
        assert np.allclose(d, np.diag(np.exp(1j * n * omega)), atol=1e-12)


def _block_commuting(d, rng):
    g = np.zeros((d, d))
    for j in range(d // 2):
        a, b = rng.normal(size=2)
        g[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = [[a, -b], [b, a]]
    return g


def check_commutant(f):
    rng = np.random.default_rng(1)
    assert f(st.rope_rotation(3, 16)) < 1e-12, "a rotation is in the commutant"
    assert f(_block_commuting(16, rng)) < 1e-12, "⊕ (aI + bJ) is in the commutant"
    refl = np.diag(np.tile([1.0, -1.0], 8))
    assert math.isclose(f(refl), 1.0, rel_tol=1e-12), "the blockwise reflection has residual exactly 1"
    g = rng.normal(size=(16, 16))
    u, omega = st.rope_eigenbasis(16)
    e = st.freq_energy(g, u)
    frac = e[st.commutant_mask(omega)].sum() / e.sum()
    assert math.isclose(f(g) ** 2 + frac, 1.0, rel_tol=1e-12), "Pythagoras: residual² + commutant fraction = 1"
    assert f(np.zeros((4, 4))) == 0.0


def test_commutant_residual():
    check_commutant(st.commutant_residual)


def test_commutant_negative_control():
    def block_diagonal_mask(g):  # keeps every 2×2 diagonal block: confuses block-diagonal with the commutant
        g = np.asarray(g)
        keep = np.kron(np.eye(g.shape[-1] // 2), np.ones((2, 2))).astype(bool)
        return np.sqrt(np.sum(np.where(keep, 0, g) ** 2) / np.sum(g**2)) if np.any(g) else 0.0

    assert _fails(check_commutant, block_diagonal_mask)


def test_rope_commutator_rel():
    rng = np.random.default_rng(2)
    assert st.rope_commutator_rel(_block_commuting(8, rng), 5) < 1e-12
    refl = np.diag(np.tile([1.0, -1.0], 4))
    # R refl − refl R on one block = 2 sin(pθ) [[0,1],[1,0]] → relative norm 2|sin pθ| per block
    th = st.rope_thetas(8)
    want = np.sqrt(np.sum(8 * np.sin(th) ** 2)) / np.sqrt(8)
    assert math.isclose(float(st.rope_commutator_rel(refl, 1)), want, rel_tol=1e-12)


def check_twirl(f):
    d = 8
    _, omega = st.rope_eigenbasis(d)
    zero = st.commutant_mask(omega)
    eu = np.where(zero, 1.0, 2.0)
    er = np.where(zero, 1.0, 0.5)
    out = f(eu, er, omega)
    n_zero, n_off = zero.sum(), (~zero).sum()
    assert math.isclose(out["commutant_frac_unrot"], n_zero / (n_zero + 2 * n_off))
    assert math.isclose(out["commutant_frac_rot"], n_zero / (n_zero + 0.5 * n_off))
    assert math.isclose(out["offcomm_suppression"], 0.75), "1 − 0.5/2"


def test_twirl_stats():
    check_twirl(st.twirl_stats)


def test_twirl_negative_control():
    def swapped(eu, er, om):
        return st.twirl_stats(er, eu, om)

    assert _fails(check_twirl, swapped)


def test_twirl_energies_parseval_and_constants():
    rng = np.random.default_rng(3)
    q = rng.normal(size=(10, 16))
    eu, _, _ = st.twirl_energies(q, q)
    m = q.T @ q / 10
    assert math.isclose(eu.sum(), np.sum(m * m), rel_tol=1e-12), "Parseval"
    assert len(st.twirl_frequencies(64)) == 32 + 2 * 32 * 31
    assert math.isclose(st.twirl_constant(64) / 4.4968e4, 1.0, abs_tol=1e-3)
    w = np.array([0.3, 1.1])
    assert np.allclose(st.twirl_multiplier(w, 1), 1.0)
    assert st.twirl_multiplier(np.array([2 * np.pi / 16]), 16)[0] < 1e-12


# --- contraction --------------------------------------------------------------------------------


def check_pairs(f):
    r = np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 0.0]])
    phi = np.array([[0.0, 0.0], [0.5, 0.0], [1.0, 0.0]])
    out = f(r, phi, [[0, 1], [0, 2], [1, 0]])
    assert len(out) == 2, "the pair with ‖r − r′‖ = 0 is skipped; retained count 2"
    assert np.allclose(out, [0.1, 0.1])


def test_pairwise_ratios():
    check_pairs(st.pairwise_ratios)


def test_pairwise_negative_control():
    def inverted(r, phi, pairs):
        return st.pairwise_ratios(phi, r, pairs)

    def keeps_zero_denominators(r, phi, pairs):
        pairs = np.asarray(pairs)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.linalg.norm(phi[pairs[:, 0]] - phi[pairs[:, 1]], axis=-1) / np.linalg.norm(r[pairs[:, 0]] - r[pairs[:, 1]], axis=-1)

    assert _fails(check_pairs, inverted)
    assert _fails(check_pairs, keeps_zero_denominators)


# --- cache fidelity -----------------------------------------------------------------------------


def check_margin_ok(f):
    assert f(0.6, 1) is False
    assert f(0.49, 1) is True
    assert f(0.5, 1) is False, "the boundary 2B = margin is excluded"
    assert f(0.0, 0.0) is False


def test_margin_ok():
    check_margin_ok(st.margin_ok)


def test_margin_ok_negative_control():
    assert _fails(check_margin_ok, lambda b, m: bool(2 * b <= m))
    assert _fails(check_margin_ok, lambda b, m: bool(b < m))


def check_eps_g(f):
    gu = np.ones((2, 3, 3))
    gc = np.ones((2, 3, 3))
    assert f(gu, gc) == (0.0, 0.0)
    gc2 = gc.copy()
    gc2[0, 0, 0] = 3.0
    rel, amax = f(gu, gc2)
    assert math.isclose(rel, math.sqrt(4 / 18)) and amax == 2.0, "RMS(G_u − G_c)/RMS(G_u), max |G_u − G_c|"
    rel, _ = f(2 * gu, gu)
    assert math.isclose(rel, 0.5), "normalized by the uncached operator"


def test_eps_g():
    check_eps_g(lambda a, b: tuple(float(x) for x in st.eps_g(a, b)))


def test_eps_g_negative_control():
    def by_cached(a, b):
        rel, amax = st.eps_g(b, a)
        return float(rel), float(amax)

    assert _fails(check_eps_g, by_cached)


def check_logit_stats(dl, mg):
    a = np.array([[1.0, 5.0, 2.0, 4.5]])
    b = np.array([[1.0, 4.0, 2.5, 4.5]])
    assert dl(a, b)[0] == 1.0, "ℓ∞ deviation"
    assert mg(a)[0] == 0.5, "top-1 − top-2"
    assert mg(np.array([3.0, 3.0, 1.0])) == 0.0, "a tie has margin 0"


def test_logit_stats():
    check_logit_stats(st.dlogit, st.top2_margin)


def test_logit_stats_negative_control():
    assert _fails(lambda f: check_logit_stats(f, st.top2_margin), lambda a, b: np.linalg.norm(a - b, axis=-1))
    assert _fails(lambda f: check_logit_stats(st.dlogit, f), lambda x: np.max(x, -1) - np.min(x, -1))


# --- DAG loss -----------------------------------------------------------------------------------


def check_dag(f):
    assert math.isclose(float(f(np.eye(5))), 1.0, rel_tol=1e-12), "DL(I₅) = |log(5e/5)| = 1"
    assert float(f(np.triu(np.ones((6, 6)), 1))) == pytest.approx(0.0, abs=1e-12), "strictly upper-triangular: 0"
    v = float(f(40 * np.ones((4, 4))))
    assert math.isfinite(v) and abs(v - (4 * 1600 - math.log(4))) < 1.0, "overflow-safe ≈ 4·1600 − log 4"
    assert np.allclose(f(np.stack([np.eye(5), np.zeros((5, 5))])), [1.0, 0.0])


def test_dag_loss():
    check_dag(st.dag_loss)


def test_dag_loss_matches_reference_spec():
    from plga.reference import spec

    rng = np.random.default_rng(4)
    m = rng.normal(size=(3, 6, 6))
    assert np.allclose(st.dag_loss(m), spec.dag_loss(m), rtol=1e-12)


def test_dag_negative_control():
    def naive(m):
        n = np.asarray(m, dtype=float) ** 2
        lam = np.linalg.eigvals(n)
        with np.errstate(over="ignore"):
            return np.abs(np.log(np.sum(np.exp(lam), -1).real / n.shape[-1]))

    def no_hadamard_square(m):
        return st.dag_loss(np.sqrt(np.abs(np.asarray(m, dtype=float))))

    assert _fails(check_dag, naive)
    assert _fails(check_dag, no_hadamard_square)


# --- ε-LayerNorm scale error ----------------------------------------------------------------


def check_ln(f):
    rows = np.array([[1.0, 1.0, 1.0, 1.0], [0.0, 3.0, 6.0, 9.0]])
    out = f(rows, 40)
    assert out["direct_abs"][0] == 0.0 and out["direct_rel"][0] == 0.0 and math.isinf(out["proxy"][0]), "zero-variance row"
    v = np.var(rows[1] / 40)
    assert math.isclose(out["rowvar_DS"][1], v)
    assert math.isclose(out["direct_rel"][1], out["proxy"][1], rel_tol=0.1), "direct ≈ ε/(2v) when v ≫ ε"
    exact = abs(math.sqrt(v + 1e-6) / math.sqrt(v + 1e-6 / 1600) - 1)
    assert math.isclose(out["direct_rel"][1], exact, rel_tol=1e-6)


def test_ln_scale_error():
    check_ln(st.ln_scale_error)


def test_ln_negative_control():
    def unscaled(rows, s):  # forgets to divide by S
        return st.ln_scale_error(rows, 1)

    assert _fails(check_ln, unscaled)


# --- online-contract and operator helpers ---------------------------------------------------------


def test_delta_stats_and_log_softmax():
    d = st.delta_stats(np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 3.5]))
    assert d == {"max_abs": 2.0, "l2": math.sqrt(4.25), "nonzero": 2, "entries": 3}
    lp = st.log_softmax(np.array([1000.0, 1000.0]))
    assert np.allclose(lp, math.log(0.5))


def test_symmetry_and_spread():
    assert st.symmetry_defect(np.eye(3)) == 0.0
    assert math.isclose(float(st.symmetry_defect(np.array([[0.0, 1.0], [-1.0, 0.0]]))), 2.0)
    mean, sp = st.spread(np.stack([np.eye(2), 3 * np.eye(2)]))
    assert np.allclose(mean, 2 * np.eye(2)) and math.isclose(float(sp), 0.5)


def test_min_median_max():
    assert st.min_median_max([3, 1, 2]) == {"min": 1.0, "median": 2.0, "max": 3.0, "n": 3}
    assert st.min_median_max([])["n"] == 0


# --- entries near the float64 range ----------------------------------------------------------

#: Every figure that is a ratio of norms, as a function of (G, G') [..., d, d]: it must not change
#: when both are scaled by 1e200 (finite entries; their squares are not).
RATIOS = {
    "order_pair": lambda a, b: np.asarray(st.order_pair(a, b)),
    "eps_g": lambda a, b: st.eps_g(a, b)[0],
    "eps_g_per_operator": st.eps_g_per_operator,
    "relative_deviation": st.relative_deviation,
    "commutant_residual": lambda a, b: st.commutant_residual(a),
    "rope_commutator_rel": lambda a, b: st.rope_commutator_rel(a, 8),
    "symmetry_defect": lambda a, b: st.symmetry_defect(a),
}


def check_scale_free(f):
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(2, 3, 8, 8)), rng.normal(size=(2, 3, 8, 8))
    small = f(a, b)
    assert np.all(np.isfinite(small)) and np.any(small > 0)
    np.testing.assert_allclose(f(a * 1e200, b * 1e200), small, rtol=1e-12)


@pytest.mark.parametrize("name", sorted(RATIOS))
def test_ratios_are_scale_free_near_overflow(name):
    check_scale_free(RATIOS[name])


def test_scale_free_negative_control():
    """The unscaled formula (‖G − G'‖_F / ‖G'‖_F of the raw entries) overflows: inf/inf = NaN."""
    def unscaled(a, b):
        with np.errstate(over="ignore", invalid="ignore"):
            return np.linalg.norm(a - b, axis=(-2, -1)) / np.linalg.norm(b, axis=(-2, -1))

    assert _fails(check_scale_free, unscaled)


def test_frobenius_and_dag_loss_near_overflow():
    g = np.random.default_rng(5).normal(size=(2, 8, 8))
    np.testing.assert_allclose(st.frobenius(g * 1e200) / 1e200, np.linalg.norm(g, axis=(-2, -1)), rtol=1e-14)
    with np.errstate(over="ignore"):
        assert np.all(np.isinf(np.linalg.norm(g * 1e200, axis=(-2, -1)))), "negative control: the plain norm overflows"
    # tr e^{M⊙M} of entries 1e160 lies beyond float64: +∞, not a LinAlgError; NaN stays NaN; finite M unchanged
    m = np.stack([g[0] * 1e160, g[1]])
    m_nan = g.copy()
    m_nan[0, 1, 2] = np.nan
    assert math.isinf(st.dag_loss(m)[0]) and st.dag_loss(m)[1] == st.dag_loss(g[1])
    assert math.isnan(st.dag_loss(m_nan)[0]) and st.dag_loss(m_nan)[1] == st.dag_loss(g[1])
    assert math.isinf(st.notears_h(m)[0]) and math.isfinite(st.notears_h(m)[1])
