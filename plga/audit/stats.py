"""The audit's statistics: pure NumPy functions, one per statistic, on float64 arrays.

Every function here is model-free and names the field of the published audit
(``burcgokden/PLDR-LLM-Math-Foundations``, ``audit/audit_lib.py`` and ``audit/audit.py``)
that it reproduces; the definitions in words are in ``docs/audit.md``. The command
(:mod:`plga.audit.runner`) only collects raw arrays from a model; everything that turns
raw arrays into reported numbers lives here or in :mod:`plga.audit.summary`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

Array = np.ndarray

#: float32 machine epsilon 2⁻²³ (the numerical-rank rule's unit).
EPS_F32 = 2.0**-23
#: numrank tolerance factor: s_i counts when s_i > 64·eps_f32·s₁ (docs/audit.md, Spectra).
NUMRANK_FACTOR = 64.0
#: frequencies closer than this are the same eigenfrequency (commutant mask; docs/audit.md, RoPE structure).
OMEGA_TOL = 1e-12
#: pair draws with ‖r − r′‖ at or below this are skipped (docs/audit.md, Row-map contraction).
PAIR_DENOM_MIN = 1e-12
#: LayerNorm ε of the model (ε-LayerNorm scale error).
LN_EPS = 1e-6


def _f64(x: Any) -> Array:
    return np.asarray(x, dtype=np.float64)


def _largest(*xs: Array, axes: tuple[int, ...]) -> Array:
    """The largest |entry| of the arrays over ``axes`` (kept as size-1 axes); 1 where it is 0 or not finite."""
    with np.errstate(invalid="ignore"):
        big = np.max([np.max(np.abs(x), axis=axes, keepdims=True) for x in xs], axis=0)
    return np.where(np.isfinite(big) & (big > 0), big, 1.0)


def _norm(x: Any, axes: tuple[int, ...]) -> Array:
    """The 2-norm over ``axes``, finite for every finite x (x divided by its largest entry first)."""
    x = _f64(x)
    big = _largest(x, axes=axes)
    return np.squeeze(big, axis=axes) * np.linalg.norm(x / big, axis=axes)


def _scaled(*arrays: Any, axes: tuple[int, ...] = (-2, -1)) -> list[Array]:
    """The arrays (broadcast together) divided by their common largest |entry| over ``axes``.

    A ratio of norms does not change, but squares of entries near the float64 range (a G_LM of
    1e188 is finite; its square is not) no longer overflow. Where that largest entry is 0 or not
    finite the arrays are left as they are, so a NaN or an infinity still shows.
    """
    xs = np.broadcast_arrays(*(_f64(a) for a in arrays))
    big = _largest(*xs, axes=axes)
    return [x / big for x in xs]


def rms(x: Any) -> float:
    """Root mean square √mean(x²) of all entries (0 for an empty array)."""
    x = _f64(x)
    return float(np.sqrt(np.mean(x * x))) if x.size else 0.0


def min_median_max(x: Any) -> dict[str, float]:
    """``{min, median, max, n}`` of the raveled values, the published audit's summary triple.

    ``np.median`` as in ``test_audit.py::assertStatsEqual``; an empty input gives NaNs, n = 0.
    """
    x = _f64(x).ravel()
    if not x.size:
        return {"min": math.nan, "median": math.nan, "max": math.nan, "n": 0}
    return {"min": float(np.min(x)), "median": float(np.median(x)), "max": float(np.max(x)), "n": int(x.size)}


# --- Order parameter (audit_lib.order_pair) ------------------------------------------------------


def order_pair(x1: Any, x2: Any) -> tuple[float, float]:
    """Order parameter of two tensors from two stochastic continuations → (rms, signed).

    Published field ``order_parameter.<T>.{rms,signed}``. num = RMS(x₁ − x₂);
    rms = num / ½(RMS x₁ + RMS x₂) (bounded by 2); signed = num / ½(|mean x₁| + |mean x₂|),
    the *symmetrized* signed-mean normalization (+∞ when the means cancel and num > 0).
    Both are 0 when num = 0 (this also covers the all-zero pair).
    """
    x1, x2 = _f64(x1), _f64(x2)
    if x1.shape != x2.shape:
        raise ValueError(f"order_pair needs equal shapes, got {x1.shape} and {x2.shape}")
    x1, x2 = _scaled(x1, x2, axes=tuple(range(x1.ndim)))  # both normalizations are ratios
    num = rms(x1 - x2)
    if num == 0.0:
        return 0.0, 0.0
    den_rms = 0.5 * (rms(x1) + rms(x2))
    den_signed = 0.5 * (abs(float(np.mean(x1))) + abs(float(np.mean(x2))))
    r = num / den_rms if den_rms > 0 else math.inf
    s = num / den_signed if den_signed > 0 else math.inf
    return r, s


# --- Spectra -------------------------------------------------------------------------------------


def svdvals(m: Any) -> tuple[Array, int]:
    """Singular values (descending, float64) of the last two axes, and the count of non-finite matrices.

    A matrix with any non-finite entry is zeroed before the SVD and counted
    (published ``spectra.nonfinite_matrices``).
    """
    m = _f64(m)
    bad = ~np.all(np.isfinite(m), axis=(-2, -1))
    if np.any(bad):
        m = np.where(bad[..., None, None], 0.0, m)
    return np.linalg.svd(m, compute_uv=False), int(np.sum(bad))


def numrank(s: Any) -> Array:
    """Numerical rank #{s_i > 64·eps_f32·s₁} over the last axis (published ``A_numrank``, ``ALM_numrank``).

    ``s`` are singular values in descending order (float64). A zero matrix has rank 0;
    the comparison is strict.
    """
    s = _f64(s)
    s1 = s[..., :1]
    return np.sum((s > NUMRANK_FACTOR * EPS_F32 * s1) & (s > 0), axis=-1)


def s2_over_s1(s: Any) -> Array:
    """s₂/s₁ over the last axis (published ``A_s2_over_s1``, ``ALM_s2_over_s1``); 0 when s₁ = 0."""
    s = _f64(s)
    s1 = s[..., 0]
    return np.divide(s[..., 1], s1, out=np.zeros_like(s1), where=s1 > 0)


def condition_number(s: Any) -> Array:
    """s₁/s_min over the last axis; +∞ for a singular matrix (s_min = 0 < s₁), 0 for the zero matrix."""
    s = _f64(s)
    s1, smin = s[..., 0], s[..., -1]
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(smin > 0, s1 / np.where(smin > 0, smin, 1.0), np.where(s1 > 0, np.inf, 0.0))
    return out


def rank_histogram(ranks: Any) -> dict[str, int]:
    """Histogram ``{"rank": count}`` (published ``spectra.A_numrank_hist``), keys sorted numerically."""
    values, counts = np.unique(np.asarray(ranks, dtype=np.int64).ravel(), return_counts=True)
    return {str(int(v)): int(c) for v, c in zip(values, counts, strict=True)}


def rowvar_ratio(a: Any) -> Array:
    """Row-identity ratio mean((A − colmean A)²) / mean((A − mean A)²) over the last two axes.

    Published ``spectra.rowvar_ratio``: ≈ 0 iff every row of A is the same row (the 1αᵀ
    form); ≈ 1 for unstructured A. ``colmean`` is the mean row (mean over the row index).
    A constant matrix (zero total variance) gives 0.
    """
    a = _f64(a)
    num = np.mean((a - a.mean(axis=-2, keepdims=True)) ** 2, axis=(-2, -1))
    den = np.mean((a - a.mean(axis=(-2, -1), keepdims=True)) ** 2, axis=(-2, -1))
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def crosshead_rms(a: Any) -> tuple[Array, Array]:
    """Cross-head differences of A [..., H, d, d] → (RMS(A[h] − A[0]), that / RMS(A[0])) for h ≥ 1.

    Published ``spectra.crosshead_rms`` and ``spectra.crosshead_rel``; shapes [..., H − 1].
    """
    a = _f64(a)
    diff = a[..., 1:, :, :] - a[..., :1, :, :]
    num = np.sqrt(np.mean(diff * diff, axis=(-2, -1)))
    ref = np.sqrt(np.mean(a[..., :1, :, :] ** 2, axis=(-2, -1)))
    rel = np.divide(num, ref, out=np.full_like(num, np.inf), where=ref > 0)
    rel = np.where((num == 0) & (ref == 0), 0.0, rel)
    return num, rel


# --- RoPE structure ------------------------------------------------------------------------------


def rope_thetas(d: int, base: float = 10000.0) -> Array:
    """θ_a = base^{−2a/d}, a < d/2 (interleaved pairs (2a, 2a+1))."""
    if d % 2:
        raise ValueError(f"RoPE needs an even dimension, got {d}")
    return base ** (-2.0 * np.arange(d // 2, dtype=np.float64) / d)


def rope_rotation(position: float, d: int, base: float = 10000.0) -> Array:
    """R_n = ⊕_a rot(n θ_a) on interleaved pairs → [d, d]."""
    th = rope_thetas(d, base) * position
    r = np.zeros((d, d))
    c, s = np.cos(th), np.sin(th)
    idx = np.arange(d // 2)
    r[2 * idx, 2 * idx], r[2 * idx, 2 * idx + 1] = c, -s
    r[2 * idx + 1, 2 * idx], r[2 * idx + 1, 2 * idx + 1] = s, c
    return r


def rope_eigenbasis(d: int, base: float = 10000.0) -> tuple[Array, Array]:
    """Complex eigenbasis U_c of every RoPE rotation and its eigenfrequencies ω → ([d, d], [d]).

    Column 2a = (e_{2a} − i e_{2a+1})/√2 with ω = +θ_a; column 2a+1 = (e_{2a} + i e_{2a+1})/√2
    with ω = −θ_a, so U_c* R_n U_c = diag(e^{i n ω}).
    """
    th = rope_thetas(d, base)
    u = np.zeros((d, d), dtype=np.complex128)
    a = np.arange(d // 2)
    h = 1.0 / math.sqrt(2.0)
    u[2 * a, 2 * a], u[2 * a + 1, 2 * a] = h, -1j * h
    u[2 * a, 2 * a + 1], u[2 * a + 1, 2 * a + 1] = h, 1j * h
    omega = np.empty(d)
    omega[0::2], omega[1::2] = th, -th
    return u, omega


def commutant_mask(omega: Any) -> Array:
    """Boolean [d, d]: True where |ω_j − ω_k| < 1e-12 (the commutant's entries in the eigenbasis)."""
    omega = _f64(omega)
    return np.abs(omega[:, None] - omega[None, :]) < OMEGA_TOL


def freq_energy(m: Any, u: Array) -> Array:
    """Entrywise energy |U_c* M U_c|² → [..., d, d] (Parseval: sums to ‖M‖_F²)."""
    c = np.conj(u.T) @ _f64(m) @ u
    return np.abs(c) ** 2


def commutant_residual(g: Any, base: float = 10000.0) -> Array:
    """‖G − Π_comm G‖_F / ‖G‖_F over the last two axes (published ``glm_commutant_residual``).

    Π_comm keeps the entries of U_c* G U_c with equal eigenfrequencies (the RoPE commutant;
    nonresonant spectrum). 0 for a matrix commuting with every rotation; a zero matrix gives 0.
    """
    (g,) = _scaled(g)
    u, omega = rope_eigenbasis(g.shape[-1], base)
    e = freq_energy(g, u)
    off = ~commutant_mask(omega)
    total = e.sum(axis=(-2, -1))
    outside = np.where(off, e, 0.0).sum(axis=(-2, -1))
    return np.sqrt(np.divide(outside, total, out=np.zeros_like(total), where=total > 0))


def rope_commutator_rel(g: Any, position: float, base: float = 10000.0) -> Array:
    """Relative RoPE commutator ‖G R(p) − R(p) G‖_F / ‖G‖_F at one position p.

    The per-position form of the commutant residual max_p ‖GR(p) − R(p)G‖/‖G‖; the
    audit reports it at fixed positions (its maximum over p ≤ S is bounded by 2·residual·√2).
    """
    (g,) = _scaled(g)
    r = rope_rotation(position, g.shape[-1], base)
    num = np.linalg.norm(g @ r - r @ g, axis=(-2, -1))
    den = np.linalg.norm(g, axis=(-2, -1))
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def twirl_energies(q_pre: Any, q_rot: Any, base: float = 10000.0) -> tuple[Array, Array, Array]:
    """Eigenbasis energies of the unrotated and rotated query aggregates → (E_unrot, E_rot, ω).

    M_unrot = q_preᵀ q_pre / S and M_rot = q_rotᵀ q_rot / S for q [..., S, d] (published raw
    arrays ``twirl_E_unrot``, ``twirl_E_rot``, ``twirl_omega``).
    """
    q_pre, q_rot = _f64(q_pre), _f64(q_rot)
    s, d = q_pre.shape[-2], q_pre.shape[-1]
    u, omega = rope_eigenbasis(d, base)
    m_unrot = np.swapaxes(q_pre, -1, -2) @ q_pre / s
    m_rot = np.swapaxes(q_rot, -1, -2) @ q_rot / s
    return freq_energy(m_unrot, u), freq_energy(m_rot, u), omega


def twirl_stats(e_unrot: Any, e_rot: Any, omega: Any) -> dict[str, Array]:
    """Twirl statistics from energies [..., d, d] (published ``twirl_empirical``).

    ``commutant_frac_unrot`` / ``commutant_frac_rot`` = E[zero].sum()/E.sum(); and
    ``offcomm_suppression`` = 1 − E_rot[off].sum()/E_unrot[off].sum() (0 when there is no
    off-commutant energy before rotation). For prompt-pooled ratios sum the energies over
    prompts first and call this on the sums.
    """
    e_unrot, e_rot = _f64(e_unrot), _f64(e_rot)
    zero = commutant_mask(omega)
    off = ~zero

    def frac(e: Array) -> Array:
        tot = e.sum(axis=(-2, -1))
        return np.divide(np.where(zero, e, 0.0).sum(axis=(-2, -1)), tot, out=np.zeros_like(tot), where=tot > 0)

    off_u = np.where(off, e_unrot, 0.0).sum(axis=(-2, -1))
    off_r = np.where(off, e_rot, 0.0).sum(axis=(-2, -1))
    supp = 1.0 - np.divide(off_r, off_u, out=np.ones_like(off_u), where=off_u > 0)
    return {"commutant_frac_unrot": frac(e_unrot), "commutant_frac_rot": frac(e_rot), "offcomm_suppression": supp}


def twirl_frequencies(d: int, base: float = 10000.0) -> Array:
    """Twirl frequency set {2θ_a} ∪ {|θ_a − θ_b|, θ_a + θ_b : a ≠ b}, nonresonant only.

    Ordered pairs a ≠ b, as the published ``build_freqs``: for d = 64 that is
    32 + 2·32·31 = 2016 values; those with sin(ω/2) = 0 are dropped.
    """
    th = rope_thetas(d, base)
    a, b = np.nonzero(~np.eye(len(th), dtype=bool))
    w = np.concatenate([2 * th, np.abs(th[a] - th[b]), th[a] + th[b]])
    return w[np.abs(np.sin(w / 2)) > 0]


def twirl_constant(d: int, base: float = 10000.0) -> float:
    """C_Θ = max_ω 1/|sin(ω/2)| over the twirl frequency set (published ``twirl_analytic.C_theta``)."""
    return float(np.max(1.0 / np.abs(np.sin(twirl_frequencies(d, base) / 2))))


def twirl_multiplier(omega: Any, s: int) -> Array:
    """Exact averaging multiplier |sin(Sω/2)| / (S |sin(ω/2)|) (published ``mult``)."""
    omega = _f64(omega)
    return np.abs(np.sin(s * omega / 2)) / (s * np.abs(np.sin(omega / 2)))


# --- Row-map contraction -------------------------------------------------------------------------


def pairwise_ratios(r: Any, phi_r: Any, pairs: Any) -> Array:
    """Empirical contraction ratios ‖φ(r_i) − φ(r_j)‖ / ‖r_i − r_j‖ for index pairs [n, 2].

    Published ``jacobians_v2.pairwise_{within,cross}``. Pairs with ‖r_i − r_j‖ ≤ 1e-12 are
    skipped: report ``len(result)`` (the retained count), never the attempted count.
    """
    r, phi_r = _f64(r), _f64(phi_r)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if not len(pairs):
        return np.zeros(0)
    den = np.linalg.norm(r[pairs[:, 0]] - r[pairs[:, 1]], axis=-1)
    num = np.linalg.norm(phi_r[pairs[:, 0]] - phi_r[pairs[:, 1]], axis=-1)
    keep = den > PAIR_DENOM_MIN
    return num[keep] / den[keep]


# --- Cache fidelity ------------------------------------------------------------------------------


def eps_g(g_uncached: Any, g_cached: Any) -> tuple[Array, Array]:
    """Cached-operator deviation over the last three axes [..., H, d, d] → (rel RMS, max abs).

    Published ``epsG_rel_rms`` = RMS(G_u − G_prompt) / RMS(G_u) (0 when both are 0) and
    ``epsG_absmax`` = max |G_u − G_prompt|, per step and layer.
    """
    gu, gc = _f64(g_uncached), _f64(g_cached)
    absmax = np.max(np.abs(gu - gc), axis=(-3, -2, -1))
    gu, gc = _scaled(gu, gc, axes=(-3, -2, -1))
    diff = gu - gc
    num = np.sqrt(np.mean(diff * diff, axis=(-3, -2, -1)))
    den = np.sqrt(np.mean(gu * gu, axis=(-3, -2, -1)))
    rel = np.divide(num, den, out=np.where(num > 0, np.inf, 0.0), where=den > 0)
    return rel, absmax


def eps_g_per_operator(g_uncached: Any, g_cached: Any) -> Array:
    """ε_G of every operator [..., H, d, d] → [..., H]: RMS(G_u − G_c) / max(RMS G_u, RMS G_c).

    One operator per (layer, head), so a head whose G is small beside the others' still counts
    in full (the published ε_G pools the heads of a layer, where it is diluted). The larger
    norm as denominator keeps it finite (≤ 2) when one of the two is 0; 0 when both are.
    """
    gu, gc = _scaled(g_uncached, g_cached)
    num = np.sqrt(np.mean((gu - gc) ** 2, axis=(-2, -1)))
    den = np.maximum(np.sqrt(np.mean(gu * gu, axis=(-2, -1))), np.sqrt(np.mean(gc * gc, axis=(-2, -1))))
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def dlogit(logits_a: Any, logits_b: Any) -> Array:
    """ℓ∞ logit deviation ‖ℓ_a − ℓ_b‖_∞ over the vocabulary (published ``dlogit_steps``)."""
    return np.max(np.abs(_f64(logits_a) - _f64(logits_b)), axis=-1)


def top2_margin(logits: Any) -> Array:
    """Decoding margin top-1 − top-2 logit over the last axis (published ``margin_steps``)."""
    x = np.sort(_f64(logits), axis=-1)
    return x[..., -1] - x[..., -2]


def margin_ok(b: float, margin: float) -> bool:
    """Sufficient argmax-preservation criterion 2B < margin, strict (published ``margin_ok``).

    The winner can drop by B while the runner-up rises by B, so equality is excluded.
    """
    return bool(2.0 * float(b) < float(margin))


# --- DAG loss ------------------------------------------------------------------------------------


def dag_loss(m: Any) -> Array:
    """Overflow-safe DAG loss |log(tr e^{M⊙M} / d)| over the last two axes (published ``dag_losses``).

    From the eigenvalues λ of N = M ⊙ M: |m + log Σ e^{λ_i − m} − log d| with m = max Re λ,
    the real part taken after summing. DL(I₅) = 1; a strictly triangular M gives 0.
    """
    n, lam = _squares_and_eigvals(m)
    d = n.shape[-1]
    shift = np.max(lam.real, axis=-1, keepdims=True)
    total = np.sum(np.exp(lam - shift), axis=-1).real
    return _where_nonfinite(n, np.abs(shift[..., 0] + np.log(total) - math.log(d)))


def _squares_and_eigvals(m: Any) -> tuple[Array, Array]:
    """(N = M ⊙ M, the eigenvalues of N); an entry past √(float64 max) squares to +∞, and a
    matrix N that is not finite gets the eigenvalues of 0 (:func:`_where_nonfinite` replaces them)."""
    with np.errstate(over="ignore"):
        n = _f64(m) ** 2
    return n, np.linalg.eigvals(np.where(_nonfinite(n)[..., None, None], 0.0, n))


def _nonfinite(n: Array) -> Array:
    return ~np.all(np.isfinite(n), axis=(-2, -1))


def _where_nonfinite(n: Array, value: Array) -> Array:
    """``value`` per matrix, +∞ where N = M ⊙ M overflowed (tr e^N is then beyond float64) and
    NaN where M held a NaN."""
    has_nan = np.any(np.isnan(n), axis=(-2, -1))
    return np.where(has_nan, np.nan, np.where(_nonfinite(n), np.inf, value))


def notears_h(m: Any) -> Array:
    """NOTEARS obstruction h(M) = tr e^{M⊙M} − d (may overflow to +∞ for large M; diagnostic only)."""
    n, lam = _squares_and_eigvals(m)
    with np.errstate(over="ignore"):
        return _where_nonfinite(n, np.sum(np.exp(lam), axis=-1).real - n.shape[-1])


# --- ε-LayerNorm scale error ---------------------------------------------------------------------


def ln_scale_error(d_rows: Any, s: int, eps: float = LN_EPS) -> dict[str, Array]:
    """ε-LayerNorm scale error of rows of D = Q̃ᵀQ̃ against the idealized D/S (published ``ln_scale_error``).

    Unit-affine LayerNorm LN_ε(r) = (r − mean r)/√(var r + ε) on each row of ``d_rows``
    [..., d]. Returns per row: ``rowvar_DS`` = var(row/S); ``direct_abs`` = max |LN(r) −
    LN(r/S)|; ``direct_rel`` = ‖LN(r) − LN(r/S)‖ / ‖LN(r/S)‖ (0 on a zero-variance row);
    ``proxy`` = ε / (2 var(row/S)) (+∞ on a zero-variance row).
    """
    r = _f64(d_rows)

    def ln(x: Array) -> Array:
        c = x - x.mean(axis=-1, keepdims=True)
        return c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + eps)

    a, b = ln(r), ln(r / s)
    diff = a - b
    v = np.var(r / s, axis=-1)
    nb = np.linalg.norm(b, axis=-1)
    nd = np.linalg.norm(diff, axis=-1)
    with np.errstate(divide="ignore"):
        proxy = np.where(v > 0, eps / (2.0 * np.where(v > 0, v, 1.0)), np.inf)
    return {
        "rowvar_DS": v,
        "direct_abs": np.max(np.abs(diff), axis=-1),
        "direct_rel": np.divide(nd, nb, out=np.zeros_like(nd), where=nb > 0),
        "proxy": proxy,
    }


# --- Online-contract comparisons ----------------------------------------------------------------


def delta_stats(a: Any, b: Any) -> dict[str, float | int]:
    """Published ``delta_stats``: max_abs, l2, nonzero and entries of a − b in float64."""
    diff = _f64(a) - _f64(b)
    return {
        "max_abs": float(np.max(np.abs(diff))) if diff.size else 0.0,
        "l2": float(_norm(diff.ravel(), axes=(0,))) if diff.size else 0.0,
        "nonzero": int(np.count_nonzero(diff)),
        "entries": int(diff.size),
    }


def log_softmax(x: Any) -> Array:
    """Numerically stable log-softmax over the last axis, in float64."""
    x = _f64(x)
    m = np.max(x, axis=-1, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


# --- Constant-operator audit ----------------------------------------------------------------------


def frobenius(g: Any) -> Array:
    """‖G‖_F over the last two axes, finite for every finite G (scaled by its largest entry first)."""
    return _norm(g, axes=(-2, -1))


def symmetry_defect(g: Any) -> Array:
    """‖G − Gᵀ‖_F / ‖G‖_F over the last two axes (0 for symmetric G, √2 for antisymmetric)."""
    (g,) = _scaled(g)
    num = np.linalg.norm(g - np.swapaxes(g, -1, -2), axis=(-2, -1))
    den = np.linalg.norm(g, axis=(-2, -1))
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def spread(gs: Any, axis: int = 0) -> tuple[Array, Array]:
    """Spread of operators around their mean along ``axis`` → (mean, max relative deviation).

    max_x ‖G(x) − mean G‖_F / ‖mean G‖_F over the last two axes (the spread across prompts; docs/audit.md);
    +∞ where the mean is 0 but the operators are not.
    """
    gs = _f64(gs)
    mean = gs.mean(axis=axis)
    return mean, relative_deviation(gs, np.expand_dims(mean, axis)).max(axis=axis)


def relative_deviation(g: Any, ref: Any) -> Array:
    """‖G − ref‖_F / ‖ref‖_F over the last two axes (broadcasting): +∞ where ref is 0 and G is
    not, NaN where G is NaN (an overflowed probe)."""
    g, ref = _scaled(g, ref)
    dev = np.linalg.norm(g - ref, axis=(-2, -1))
    den = np.broadcast_to(np.linalg.norm(ref, axis=(-2, -1)), dev.shape)
    with np.errstate(invalid="ignore"):
        return np.divide(dev, den, out=np.where(dev > 0, np.inf, np.where(np.isnan(dev), np.nan, 0.0)), where=den > 0)


def rep_stats(tokens: Sequence[int]) -> dict[str, float | int]:
    """Repetition of a continuation: n_tokens, distinct1 and dup4_frac (published ``rep_stats``).

    A neutral record, not a quality claim.
    """
    t = [int(x) for x in tokens]
    grams = [tuple(t[i : i + 4]) for i in range(len(t) - 3)]
    dup = sum(1 for i, g in enumerate(grams) if g in set(grams[:i])) / len(grams) if grams else 0.0
    return {"n_tokens": len(t), "distinct1": len(set(t)) / len(t) if t else 0.0, "dup4_frac": dup}
