"""Next-token selection: one specification, used by the reference and the torch kernels alike.

Temperature 0 is greedy (the first maximum on ties). Otherwise, in float64:

1. ``x = logits / temperature``; tokens are ranked by decreasing ``x`` (ties: lower id first);
2. only the ``top_k`` best are kept (``top_k = 0``: all);
3. of those, the shortest prefix whose cumulative probability reaches ``top_p`` is kept (the
   token that crosses ``top_p`` is included: standard nucleus sampling; at ``top_p = 1`` a tail
   of total mass < 1e-12 is dropped);
4. with one uniform ``u ∈ [0, 1)`` per row from ``numpy.random.default_rng(seed)`` (drawn row
   by row, step by step, in that order), the token is the first ranked one whose cumulative
   kept probability exceeds ``u`` (inverse-CDF sampling).

Because both backends draw their uniforms from the same seeded NumPy stream and pick with the
same rule, the same seed gives the same tokens on the reference and on the kernels wherever
their logits agree to within the gaps between cumulative probabilities. Sampling without a
seed uses :data:`DEFAULT_SEED`.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import InputError, InputTypeError, NonFiniteError
from .numerics import Array, as_float64

#: The seed of sampled decoding when none is given.
DEFAULT_SEED = 0


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """Finite temperature ≥ 0, integer top_k ≥ 0, 0 < top_p ≤ 1 (NaN and inf are refused)."""
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)):
        raise InputTypeError(f"top_k must be an integer, got {top_k!r}")
    for name, value in (("temperature", temperature), ("top_p", top_p)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise InputTypeError(f"{name} must be a number, got {value!r}")
    if not (math.isfinite(temperature) and temperature >= 0) or not (0 < top_p <= 1) or top_k < 0:
        raise InputError(f"need finite temperature ≥ 0, 0 < top_p ≤ 1, top_k ≥ 0; got {temperature}, {top_p}, {top_k}")


def check_seed(seed: int | None) -> int:
    """``seed`` as a non-negative int (None → :data:`DEFAULT_SEED`)."""
    if seed is None:
        return DEFAULT_SEED
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def sampling_distribution(logits: Array, temperature: float, top_k: int = 0, top_p: float = 1.0) -> tuple[Array, Array]:
    """(probs [B, R] float64 over the R best-ranked tokens, ids [B, R]) — steps 1–3 above;
    R = ``top_k`` (capped at V); with ``top_k = 0``, V, or with ``top_p < 1`` a ranked prefix
    long enough to hold every row's kept set.

    ``probs[b, r]`` is the probability of token ``ids[b, r]``; entries past the kept set are 0.
    """
    check_sampling(temperature, top_k, top_p)
    if temperature == 0:
        raise InputError("sampling_distribution needs temperature > 0 (temperature 0 is greedy)")
    x = _check_logits(logits) / temperature  # [B, V]
    v = x.shape[-1]
    reach = top_p * (1 - 1e-12)
    if top_k == 0 and top_p < 1:  # nucleus over the whole row: probabilities first, then a ranked prefix reaching top_p
        p_all = np.exp(x - x.max(-1, keepdims=True))  # [B, V]
        p_all /= p_all.sum(-1, keepdims=True)
        ids = _nucleus_prefix(x, p_all, reach)  # [B, R]
        probs = np.take_along_axis(p_all, ids, axis=-1)
    else:
        vals, ids = _best_ranked(x, v if top_k == 0 else min(top_k, v))  # [B, R] best first
        probs = np.exp(vals - vals[:, :1])
        probs /= probs.sum(-1, keepdims=True)
    r = ids.shape[-1]
    cut = (np.cumsum(probs, axis=-1) < reach).sum(-1, keepdims=True) + 1  # [B, 1]
    probs = np.where(np.arange(r) < np.clip(cut, 1, r), probs, 0.0)
    return probs / probs.sum(-1, keepdims=True), ids


def _nucleus_prefix(x: Array, p_all: Array, reach: float) -> Array:
    """Ids [B, R] of the R best-ranked tokens, for the smallest R in 64, 512, 4096, … (or V)
    whose ranked probabilities ``p_all`` sum, in rank order, to ``reach`` in every row: the
    nucleus never needs the ranking past that point."""
    v = x.shape[-1]
    r = 64
    while r * 8 < v:
        ids = _best_ranked(x, r)[1]
        if np.all(np.cumsum(np.take_along_axis(p_all, ids, axis=-1), axis=-1)[:, -1] >= reach):
            return ids
        r *= 8
    return _best_ranked(x, v)[1]


def _best_ranked(x: Array, keep: int) -> tuple[Array, Array]:
    """The ``keep`` best tokens of each row of x [B, V], ranked by decreasing value, ties by
    lower id first: (values, ids), each [B, keep].

    A short list of a long row (top-k over a vocabulary) is not a full sort: the keep-th
    largest value t is found by partition, and only the tokens ≥ t — ascending ids, so a stable
    sort ranks ties by id, with every token tied at t a candidate — are sorted. That is exactly
    the first ``keep`` of the full stable ranking (32000 tokens, k = 50: ~0.1 ms against 2 ms).
    """
    v = x.shape[-1]
    if keep * 8 >= v:  # a large share of the row: the full stable sort
        ids = np.argsort(-x, axis=-1, kind="stable")[:, :keep]  # [B, keep]
        return np.take_along_axis(x, ids, axis=-1), ids
    threshold = np.partition(x, v - keep, axis=-1)[:, v - keep]  # [B] the keep-th largest value
    ids = np.empty((x.shape[0], keep), dtype=np.int64)
    for b, (row, t) in enumerate(zip(x, threshold, strict=True)):
        candidates = np.flatnonzero(row >= t)  # ascending ids, at least keep of them
        ids[b] = candidates[np.argsort(-row[candidates], kind="stable")[:keep]]
    return np.take_along_axis(x, ids, axis=-1), ids


def sample_next(
    logits: Array,
    rng: np.random.Generator | None = None,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> Array:
    """Next token ids [B] (int64) from last-position logits [B, V] (see the module docstring).

    ``rng`` is the decoding's ``numpy.random.default_rng(seed)``; it is needed when
    ``temperature > 0`` and advances by one uniform per row.
    """
    check_sampling(temperature, top_k, top_p)
    x = _check_logits(logits)
    if temperature == 0:
        return np.argmax(x, axis=-1).astype(np.int64)
    if rng is None:
        raise InputError("sampling with temperature > 0 needs the decoding's numpy Generator (pass a seed)")
    probs, ids = sampling_distribution(x, temperature, top_k, top_p)
    u = rng.random(x.shape[0])  # [B]
    cum = np.cumsum(probs, axis=-1)  # [B, R]
    n_kept = (probs > 0).sum(-1)  # [B]
    rank = np.minimum((cum <= u[:, None]).sum(-1), n_kept - 1)  # first rank with cum > u
    return ids[np.arange(x.shape[0]), rank].astype(np.int64)


def _check_logits(logits: Array) -> Array:
    x = as_float64(logits)
    if x.ndim != 2 or x.shape[1] == 0:
        raise InputError(f"logits must have shape [batch, vocab], got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise NonFiniteError("next-token logits are not finite (NaN or inf)")
    return x


__all__ = ["DEFAULT_SEED", "check_sampling", "check_seed", "sample_next", "sampling_distribution"]
