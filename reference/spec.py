"""The executable specification of PLGA: one function per Lean definition in ``formal/``.

Every function here mirrors a ``def`` of ``formal/Plga/*.lean`` name for name (Lean
``lowerCamel`` ↔ Python ``snake_case``; :data:`LEAN_NAMES` is the table), with the explicit
arguments in the same order. Functions act on the last axis (vectors) or the last two axes
(matrices) and broadcast over leading axes, so one call covers a batch of heads.

Two numeric backends share these definitions: float64 arrays, and object arrays of
``mpmath.mpf`` (see :mod:`plga.reference.numerics`). Nothing here is optimised; it is
written to be read against the paper (B. Gokden, *Power law graph attention*, 2026) and docs/spec.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import mpmath
import numpy as np

from ..errors import InputError
from .numerics import Array, exp, is_mp, rpow, scalar, sqrt

#: Metric-tensor floor ``epsilonAdj`` (docs/spec.md §1.5).
EPSILON_ADJ = 1e-9
#: LayerNorm epsilon used everywhere in the model (docs/spec.md §1.2).
LAYER_NORM_EPS = 1e-6
#: The upstream additive mask value (docs/spec.md §1.8).
MASK_FILL = -1e9
#: What a non-finite A_P or G_LM means, in the reference's and the kernels' one message: the
#: Hadamard power A_LM ** P overflowed (A_LM below 1 with a large negative exponent, or above 1
#: with a large positive one).
POWER_OVERFLOW_HINT = " (A_LM ** P overflowed: A_LM < 1 with a large negative exponent, or A_LM > 1 with a large positive one)"

GluParams = tuple[Array, Array, Array, Array, Array, Array]


def _t(m: Array) -> Array:
    """Transpose of the last two axes."""
    return np.swapaxes(m, -1, -2)


# --- Iswiglu.lean ---------------------------------------------------------------------------


def sigmoid(u: Any) -> Any:
    """Lean ``sigmoid``: σ(u) = 1 / (1 + e^{−u}) (paper Def. 3.1)."""
    if is_mp(u):
        return 1 / (1 + exp(-u))
    u = np.asarray(u, dtype=np.float64)
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-u))  # saturates to 0 below u ≈ −745, as float64 must


def silu(u: Any) -> Any:
    """Lean ``silu``: SiLU(u) = u σ(u)."""
    return u * sigmoid(u)


def iswiglu(u: Any) -> Any:
    """Lean ``iswiglu``: iSwiGLU(u) = u · SiLU(u) = u² σ(u) ≥ 0 (paper Def. 3.1)."""
    return u * silu(u)


# --- Softmax.lean ---------------------------------------------------------------------------


def softmax(x: Any) -> Any:
    """Lean ``softmax`` over the last axis: e^{x_i} / Σ_j e^{x_j} (paper Prop. 3.12).

    The row maximum is subtracted first (exact by ``softmax_shift``) so no term overflows.
    """
    x = np.asarray(x) if is_mp(x) else np.asarray(x, dtype=np.float64)
    m = np.max(x, axis=-1, keepdims=True) if x.shape[-1] else x
    e = exp(x - m)  # [..., n]
    return e / np.sum(e, axis=-1, keepdims=True)


def masked_softmax(x: Any, support: Any) -> Any:
    """Lean ``maskedSoftmax``: the ideal masked softmax over the last axis.

    ``support`` is boolean (True = attended, the Finset J). Entries off the support are
    exactly 0; a row with empty support is all zeros (Lean's x/0 = 0 convention).
    """
    x = np.asarray(x) if is_mp(x) else np.asarray(x, dtype=np.float64)
    support = np.broadcast_to(np.asarray(support, dtype=bool), x.shape)
    zero = scalar(0.0, x)
    if is_mp(x):
        lowest = min((v for v in x.flat), default=zero)
        filled = np.where(support, x, lowest)
    else:
        filled = np.where(support, x, -np.inf)
    m = np.max(filled, axis=-1, keepdims=True) if x.shape[-1] else filled  # [..., 1]
    if not is_mp(x):
        m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(support, exp(np.where(support, x - m, zero)), zero)  # [..., n], exact zeros off J
    denom = np.sum(e, axis=-1, keepdims=True)
    safe = np.where(denom == 0, scalar(1.0, x), denom)
    return np.where(support, e / safe, zero)


def finite_mask_softmax(x: Any, support: Any, fill: float = MASK_FILL) -> Any:
    """Lean ``finiteMaskSoftmax``: softmax(x + fill·[i ∉ J]), the published additive mask.

    Realises :func:`masked_softmax` only through underflow of e^{fill} (Softmax.lean header).
    """
    x = np.asarray(x) if is_mp(x) else np.asarray(x, dtype=np.float64)
    support = np.broadcast_to(np.asarray(support, dtype=bool), x.shape)
    penalty = np.where(support, scalar(0.0, x), scalar(fill, x))  # [..., n]
    return softmax(x + penalty)


# --- DensityOperator.lean -------------------------------------------------------------------


def density_operator(q: Any) -> Any:
    """Lean ``densityOperator``: D = Qᵀ Q for Q ∈ ℝ^{S×d} (paper Prop. 3.6). → [..., d, d]."""
    return _t(q) @ q


# --- LayerNorm.lean -------------------------------------------------------------------------


def row_mean(r: Any) -> Any:
    """Lean ``rowMean``: (Σ_i r_i) / d over the last axis (0 for d = 0)."""
    d = r.shape[-1]
    return np.sum(r, axis=-1, keepdims=True) / d if d else np.sum(r, axis=-1, keepdims=True)


def row_var(r: Any) -> Any:
    """Lean ``rowVar``: the biased variance (Σ_i (r_i − mean r)²) / d over the last axis."""
    c = r - row_mean(r)
    return row_mean(c * c)


def layer_norm(r: Any, gamma: Any, beta: Any, eps: float = LAYER_NORM_EPS) -> Any:
    """Lean ``layerNorm``: γ ⊙ (r − mean r) / √(var r + ε) + β over the last axis (Lem. 5.11).

    As in Lean, √ of a negative number is 0 and x/0 = 0: a zero or negative var + ε (only
    possible at ε ≤ 0) gives β. Non-finite rows stay non-finite (never silently β).
    """
    c = r - row_mean(r)  # [..., d]
    radicand = row_var(r) + scalar(eps, r)  # [..., 1]
    zero = scalar(0.0, r)
    denom = sqrt(np.where(radicand < 0, zero, radicand))  # [..., 1]; NaN stays NaN
    safe = np.where(denom == 0, scalar(1.0, r), denom)
    normed = np.where(denom == 0, zero, c / safe)
    return normed * gamma + beta


# --- The metric learner (docs/spec.md §1.3) ---------------------------------------------------------


def swiglu(x: Any, w1: Any, b1: Any, w2: Any, b2: Any, w3: Any, b3: Any) -> Any:
    """Lean ``swiglu``: W₃(silu(W₁x + b₁) ⊙ (W₂x + b₂)) + b₃ on each row x.

    Weights use the torch ``Linear`` layout ``[out, in]``: x [..., d], w1/w2 [F, d], w3 [d, F].
    """
    gate = silu(x @ _t(w1) + b1)  # [..., F]
    lin = x @ _t(w2) + b2  # [..., F]
    return (gate * lin) @ _t(w3) + b3  # [..., d_out]


def res_unit(
    x: Any, blocks: Sequence[GluParams], gamma: Any, beta: Any, eps: float = LAYER_NORM_EPS
) -> Any:
    """Lean ``resUnit``: LN(glu_k ∘ … ∘ glu_1(x) + x), one residual unit of Φ_res (docs/spec.md §1.3)."""
    y = x
    for block in blocks:
        y = swiglu(y, *block)  # [..., d]
    return layer_norm(y + x, gamma, beta, eps)


def metric_learner(
    density: Any,
    ln_gamma: Any,
    ln_beta: Any,
    units: Sequence[tuple[Sequence[GluParams], Any, Any]],
    eps: float = LAYER_NORM_EPS,
) -> Any:
    """Lean ``metricLearner``: A = Φ_res(LN(D)), the generator (docs/spec.md §1.2–1.3, §2).

    ``density`` is D = QᵀQ [..., d, d]; the LayerNorm and every unit act on its rows.
    ``units`` is a list of ``(blocks, gamma, beta)``, one per residual unit.
    """
    a = layer_norm(density, ln_gamma, ln_beta, eps)  # [..., d, d]
    for blocks, gamma, beta in units:
        a = res_unit(a, blocks, gamma, beta, eps)  # [..., d, d]
    return a


# --- Power law stage (docs/spec.md §1.5–1.7) --------------------------------------------------------


def metric_tensor(a: Any, w: Any, b: Any, eps: float = EPSILON_ADJ) -> Any:
    """Lean ``metricTensor``: A_LM = iSwiGLU(W A + b) + ε, entrywise ≥ ε (Prop. 3.7)."""
    return iswiglu(w @ a + b) + scalar(eps, a)


def hadamard_power(a_lm: Any, p: Any) -> Any:
    """Lean ``hadamardPower``: A_P = A_LM^{⊙P}, (A_P)_ij = (A_LM)_ij^{P_ij} (Lean ``hadPow``).

    Real powers follow ``Real.rpow`` (see :func:`plga.reference.numerics.rpow`); in the model
    A_LM ≥ ε > 0, where this is the plain power.
    """
    return rpow(a_lm, p)


def energy_curvature(a_p: Any, a: Any, b_a: Any) -> Any:
    """Lean ``energyCurvature``: G_LM = a A_P + b_a, a left matrix product (docs/spec.md §1.7)."""
    return a @ a_p + b_a


# --- Attention (docs/spec.md §1.8; InferenceCollapse.lean) ------------------------------------------


def _root_d(q: Any, sqrt_d: float | None) -> Any:
    return sqrt(scalar(float(q.shape[-1]), q)) if sqrt_d is None else scalar(sqrt_d, q)


def plga_scores(q: Any, g: Any, k: Any, sqrt_d: float | None = None) -> Any:
    """Lean ``plgaScores``: E = (Q G) Kᵀ / √d  → [..., S, T] (paper Eq. for E′).

    ``sqrt_d`` overrides √d (the decoder passes float32(√d) as the published code does).
    """
    return ((q @ g) @ _t(k)) / _root_d(q, sqrt_d)


def sdpa_scores(q: Any, k: Any, sqrt_d: float | None = None) -> Any:
    """Lean ``sdpaScores``: Q Kᵀ / √d, scaled dot-product scores → [..., S, T]."""
    return (q @ _t(k)) / _root_d(q, sqrt_d)


def _attend(scores: Any, v: Any, support: Any, fill: float | None) -> Any:
    if support is None:
        weights = softmax(scores)
    elif fill is None:
        weights = masked_softmax(scores, support)
    else:
        weights = finite_mask_softmax(scores, support, fill)
    return weights @ v  # [..., S, d_v]


def plga_attention(
    q: Any,
    g: Any,
    k: Any,
    v: Any,
    support: Any = None,
    sqrt_d: float | None = None,
    fill: float | None = None,
) -> Any:
    """Lean ``plgaAttention``: softmax_J(Q G Kᵀ/√d) V (paper §3).

    ``support`` [S, T] boolean (None: every key); ``fill`` None gives the ideal masked softmax,
    a number gives the published finite additive mask.
    """
    return _attend(plga_scores(q, g, k, sqrt_d), v, support, fill)


def sdpa_attention(
    q: Any,
    k: Any,
    v: Any,
    support: Any = None,
    sqrt_d: float | None = None,
    fill: float | None = None,
) -> Any:
    """Lean ``sdpaAttention``: softmax_J(Q Kᵀ/√d) V, scaled dot-product attention."""
    return _attend(sdpa_scores(q, k, sqrt_d), v, support, fill)


# --- The mask convention (one home for every implementation) -------------------------------


def causal_support(s: int, t: int) -> Array:
    """The causal mask convention of the whole project → [S, T] bool, True = may attend.

    The S queries are the **last** S of the T key positions (bottom-right alignment, as in
    cached decoding): query i sits at position T − S + i and sees keys j ≤ T − S + i. A full
    pass is S = T (lower triangle); a decoding step is S = 1 (every key). Not a Lean definition:
    it builds the support ``J`` that ``maskedSoftmax`` / ``finiteMaskSoftmax`` take.
    """
    if s > t:
        raise InputError(f"causal attention needs S ≤ T (queries are the last S positions), got S={s}, T={t}")
    return np.tril(np.ones((s, t), dtype=bool), k=t - s)


def attention_support(s: int, t: int, *, causal: bool, key_padding: Any = None) -> Array | None:
    """Allowed (query, key) pairs → [B or 1, S, T] bool, or None when every pair is allowed.

    ``causal``: :func:`causal_support`; ``key_padding`` [B, T] bool, True at padding keys
    (token id 0), which no query attends.
    """
    allowed = causal_support(s, t)[None] if causal else None  # [1, S, T]
    if key_padding is not None:
        pad = np.asarray(key_padding, dtype=bool)
        if pad.ndim != 2 or pad.shape[1] != t:
            raise InputError(f"key_padding must be bool [B, T={t}], got shape {pad.shape}")
        keys = ~pad[:, None, :]  # [B, 1, T]
        allowed = keys if allowed is None else allowed & keys
    return allowed


# --- Rope.lean ------------------------------------------------------------------------------


def rot(theta: Any) -> Any:
    """Lean ``rot``: [[cos θ, −sin θ], [sin θ, cos θ]]."""
    if is_mp(theta):
        c, s = mpmath.cos(theta), mpmath.sin(theta)
        return np.array([[c, -s], [s, c]], dtype=object)
    c, s = np.cos(theta), np.sin(theta)
    return np.array([[c, -s], [s, c]], dtype=np.float64)


def rot_j() -> Array:
    """Lean ``rotJ``: J = [[0, −1], [1, 0]] = rot(π/2)."""
    return np.array([[0.0, -1.0], [1.0, 0.0]])


def rope_frequencies(d: int, base: float = 10000.0) -> Array:
    """Lean ``ropeFrequencies``: θ_j = base^{−2j/d}, j < d/2 (float64)."""
    if d % 2:
        raise ValueError(f"RoPE needs an even head dimension, got d = {d}")
    return rpow(base, -2.0 * np.arange(d // 2, dtype=np.float64) / d)  # Real.rpow conventions


def rope_matrix(position: Any, theta: Any) -> Any:
    """Lean ``ropeMatrix``: R(p) = ⊕_j rot(p θ_j), block diagonal on pairs (2j, 2j+1) → [d, d]."""
    m = len(theta)
    mp = is_mp(position) or is_mp(np.asarray(theta))
    out = np.zeros((2 * m, 2 * m), dtype=object if mp else np.float64)
    if mp:
        out[...] = mpmath.mpf(0)
    for j in range(m):
        out[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = rot(position * theta[j])
    return out


def rope(x: Any, positions: Any, base: float = 10000.0, style: str = "interleaved") -> Any:
    """Lean ``rope``: rotate each row x_p by R(p): x_p ↦ R(p) x_p, x [..., S, d].

    ``style="interleaved"`` pairs (2j, 2j+1) (v51 checkpoints, torchtune); ``"rotate_half"``
    pairs (j, j + d/2) (v52 checkpoints, GPT-NeoX). ``positions`` [S] integers.
    """
    d = x.shape[-1]
    theta = rope_frequencies(d, base)  # [d/2]
    pos = np.asarray(positions)
    if is_mp(x):
        angles = np.array([[mpmath.mpf(int(p)) * mpmath.mpf(t) for t in theta] for p in pos], dtype=object)
        cos = np.frompyfunc(mpmath.cos, 1, 1)(angles).astype(object)  # [S, d/2]
        sin = np.frompyfunc(mpmath.sin, 1, 1)(angles).astype(object)
    else:
        angles = pos.astype(np.float64)[:, None] * theta[None, :]  # [S, d/2]
        cos, sin = np.cos(angles), np.sin(angles)
    if style == "interleaved":
        x0, x1 = x[..., 0::2], x[..., 1::2]  # [..., S, d/2]
    elif style == "rotate_half":
        x0, x1 = x[..., : d // 2], x[..., d // 2 :]
    else:
        raise ValueError(f"unknown RoPE style {style!r}; use 'interleaved' or 'rotate_half'")
    y0 = x0 * cos - x1 * sin
    y1 = x0 * sin + x1 * cos
    out = np.empty(x.shape, dtype=x.dtype if is_mp(x) else np.float64)
    if style == "interleaved":
        out[..., 0::2], out[..., 1::2] = y0, y1
    else:
        out[..., : d // 2], out[..., d // 2 :] = y0, y1
    return out


# --- RankOne.lean ---------------------------------------------------------------------------


def row_clone(alpha: Any, n: int) -> Any:
    """Lean ``rowClone``: the n×d matrix 1 αᵀ whose rows all equal α."""
    alpha = np.asarray(alpha)
    return np.broadcast_to(alpha, (n, alpha.shape[-1])).copy()


# --- DagLoss.lean ---------------------------------------------------------------------------


def dag_loss(m: Any) -> Any:
    """Lean ``dagLoss``: DL(M) = |log(tr exp(M ⊙ M) / d)| (NOTEARS, docs/spec.md §4).

    Float64: from the eigenvalues λ of N = M ⊙ M with a log-sum-exp shift, so it never
    overflows (tr exp N = Σ e^{λ_i}). mpmath: the matrix exponential itself.
    """
    d = m.shape[-1]
    if is_mp(m):
        n = mpmath.matrix((m * m).tolist())
        return abs(mpmath.log(sum(mpmath.expm(n)[i, i] for i in range(d)) / d))
    n = np.asarray(m, dtype=np.float64) ** 2  # [..., d, d]
    lam = np.linalg.eigvals(n)  # [..., d] complex
    shift = np.max(lam.real, axis=-1, keepdims=True)
    total = np.sum(np.exp(lam - shift), axis=-1).real  # Σ e^{λ−m}, real after summing
    return np.abs(shift[..., 0] + np.log(total) - np.log(d))


# --- Names ----------------------------------------------------------------------------------

#: Lean definition name → Python function, the mirror the proofs bridge gates on.
LEAN_NAMES: dict[str, Callable[..., Any]] = {
    "sigmoid": sigmoid,
    "silu": silu,
    "iswiglu": iswiglu,
    "softmax": softmax,
    "maskedSoftmax": masked_softmax,
    "finiteMaskSoftmax": finite_mask_softmax,
    "densityOperator": density_operator,
    "rowMean": row_mean,
    "rowVar": row_var,
    "layerNorm": layer_norm,
    "swiglu": swiglu,
    "resUnit": res_unit,
    "metricLearner": metric_learner,
    "metricTensor": metric_tensor,
    "hadamardPower": hadamard_power,
    "energyCurvature": energy_curvature,
    "plgaScores": plga_scores,
    "sdpaScores": sdpa_scores,
    "plgaAttention": plga_attention,
    "sdpaAttention": sdpa_attention,
    "rot": rot,
    "rotJ": rot_j,
    "ropeFrequencies": rope_frequencies,
    "ropeMatrix": rope_matrix,
    "rope": rope,
    "rowClone": row_clone,
    "dagLoss": dag_loss,
}

__all__ = [f.__name__ for f in LEAN_NAMES.values()] + [
    "LEAN_NAMES", "EPSILON_ADJ", "LAYER_NORM_EPS", "MASK_FILL", "POWER_OVERFLOW_HINT", "attention_support", "causal_support",
]

