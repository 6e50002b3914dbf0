"""Hypothesis strategies of the suite: shapes, G families, masks and seeded tensors.

Shapes, flags and families are drawn with labels, so a failure prints e.g. ``Draw 3 (G family):
'sentinel'``. Tensor *values* come from a drawn 32-bit seed through NumPy's PCG64 (bounded
normal magnitudes, no 1e308): cheap, replayable from the Hypothesis blob, and independent of
the dtype under test (values are drawn in float64 and rounded once to the dtype, and the
ground truth is computed from the rounded values).

Conditioning rule (stated once, applied with ``assume``): a case whose exact scaled scores
exceed :data:`MAX_ABS_SCORE` in magnitude is rejected; beyond that softmax is a hard max and
the comparison measures tie-breaking, not arithmetic.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from hypothesis import strategies as st

from ..datafiles import TRAINED_G_LM, missing_reason
from . import oracle

#: G families: None (implicit identity), explicit identity, random normal, exact rank one,
#: ill-conditioned (singular values 1 … 1e-10), the index-encoded sentinel, and the trained
#: G_LM of PLDR-LLM-v51-110M-1 (top-left d×d block of a drawn layer/head; needs shared data).
G_FAMILIES = ("none", "identity", "random", "rank_one", "ill_conditioned", "sentinel", "trained")

#: Rejection bound on |scaled score| (see the module docstring).
MAX_ABS_SCORE = 1e3

#: Awkward lengths (seq 1, primes, non-multiples of tile sizes) kept in every draw's range.
AWKWARD_LENGTHS = (1, 2, 3, 5, 7, 11, 13)


def sentinel_g(h: int, d: int) -> np.ndarray:
    """The index-encoded sentinel: G[h, i, j] = h + 0.13 i + 0.017 j → [H, d, d].

    Every entry differs, and Gᵀ, a head permutation or a broadcast mix-up each give a
    different matrix, so a kernel that reads G the wrong way cannot agree by accident.
    """
    hh, ii, jj = np.meshgrid(np.arange(h), np.arange(d), np.arange(d), indexing="ij")
    return hh + 0.13 * ii + 0.017 * jj


def make_g(family: str, lead: tuple[int, ...], d: int, rng: np.random.Generator) -> np.ndarray | None:
    """A G of ``family`` with shape ``lead + (d, d)`` (lead = (H,) or (B, H)); None for 'none'."""
    if family == "none":
        return None
    n = int(np.prod(lead))
    if family == "identity":
        g = np.broadcast_to(np.eye(d), (n, d, d)).copy()
    elif family == "random":
        g = rng.standard_normal((n, d, d)) / np.sqrt(d)
    elif family == "rank_one":
        u, v = rng.standard_normal((n, d, 1)), rng.standard_normal((n, 1, d))
        g = (u @ v) / np.sqrt(d)
    elif family == "ill_conditioned":
        sv = np.logspace(0, -10, d)
        out = []
        for _ in range(n):
            a, _r = np.linalg.qr(rng.standard_normal((d, d)))
            b, _r = np.linalg.qr(rng.standard_normal((d, d)))
            out.append((a * sv) @ b.T)
        g = np.stack(out)
    elif family == "sentinel":
        g = np.broadcast_to(sentinel_g(lead[-1], d), (*lead, d, d)).reshape(n, d, d).copy()
        if len(lead) == 2:  # per-batch sentinel: encode the batch index too
            g = g + 0.5 * np.repeat(np.arange(lead[0]), lead[-1])[:, None, None]
    elif family == "trained":
        tg = oracle.trained_g_lm()
        if tg is None:
            raise ValueError(missing_reason(TRAINED_G_LM))
        layers, heads = rng.integers(0, tg.shape[0], n), rng.integers(0, tg.shape[1], n)
        g = np.stack([tg[l_, h_, :d, :d] for l_, h_ in zip(layers, heads, strict=True)]).astype(np.float64)
        g = g / max(1.0, float(np.abs(g).max()) / 8.0)  # keep scores inside MAX_ABS_SCORE at d ≤ 64
    else:
        raise ValueError(f"unknown G family {family!r}; known: {G_FAMILIES}")
    return g.reshape(*lead, d, d)


def available_families() -> tuple[str, ...]:
    return G_FAMILIES if oracle.trained_g_lm() is not None else tuple(f for f in G_FAMILIES if f != "trained")


@dataclasses.dataclass
class AttentionCase:
    """One drawn attention problem (float64 values; :meth:`tensors` rounds them to a dtype)."""

    b: int
    h: int
    s: int
    t: int
    d: int
    dv: int
    family: str
    g_batched: bool
    causal: bool
    padding: str  # none | right | left | random
    scale: float | None
    seed: int
    q: np.ndarray = dataclasses.field(repr=False, default=None)  # type: ignore[assignment]
    k: np.ndarray = dataclasses.field(repr=False, default=None)  # type: ignore[assignment]
    v: np.ndarray = dataclasses.field(repr=False, default=None)  # type: ignore[assignment]
    g: np.ndarray | None = dataclasses.field(repr=False, default=None)
    pad: np.ndarray | None = dataclasses.field(repr=False, default=None)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        self.q = rng.standard_normal((self.b, self.h, self.s, self.d))
        self.k = rng.standard_normal((self.b, self.h, self.t, self.d))
        self.v = rng.standard_normal((self.b, self.h, self.t, self.dv))
        lead = (self.b, self.h) if self.g_batched else (self.h,)
        self.g = make_g(self.family, lead, self.d, rng)
        self.pad = padding_mask(self.padding, self.b, self.t, rng, keep_first=self.causal)

    def tensors(self, dtype: str, device: str = "cpu") -> dict[str, Any]:
        """q, k, v, G (or None), key_padding_mask (or None) as torch tensors in ``dtype``."""
        import torch

        tdt = getattr(torch, dtype)
        conv = lambda a: None if a is None else torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=tdt)  # noqa: E731
        return {
            "q": conv(self.q), "k": conv(self.k), "v": conv(self.v), "G": conv(self.g),
            "key_padding_mask": None if self.pad is None else torch.from_numpy(self.pad).to(device),
        }

    def kwargs(self) -> dict[str, Any]:
        return {"causal": self.causal, "scale": self.scale}

    def describe(self) -> str:
        g = "None" if self.g is None else f"{self.family} {'[B,H,d,d]' if self.g_batched else '[H,d,d]'}"
        return (f"case: B={self.b} H={self.h} S={self.s} T={self.t} d={self.d} dv={self.dv} G={g} causal={self.causal} "
                f"padding={self.padding} scale={self.scale} seed={self.seed}")


def padding_mask(kind: str, b: int, t: int, rng: np.random.Generator, keep_first: bool) -> np.ndarray | None:
    """[B, T] bool, True = padding. Every row keeps at least one key; ``keep_first`` keeps key 0
    (so a causal row is never empty: empty rows are outside the ideal-mask contract)."""
    if kind == "none":
        return None
    pad = np.zeros((b, t), dtype=bool)
    for i in range(b):
        n = int(rng.integers(0, t))  # 0 … T−1 padded keys
        if kind == "right":
            pad[i, t - n :] = n > 0
        elif kind == "left":
            pad[i, :n] = True
        else:
            pad[i] = rng.random(t) < 0.4
        if keep_first:
            pad[i, 0] = False
        if pad[i].all():
            pad[i, rng.integers(0, t)] = False
    return pad


@st.composite
def attention_cases(
    draw: Any, *, causal: bool | None = None, padding: tuple[str, ...] = ("none",), families: tuple[str, ...] | None = None,
    max_len: int = 13, dims: tuple[int, ...] = (2, 4, 8, 16), min_heads: int = 1, max_batch: int = 2,
) -> AttentionCase:
    """An :class:`AttentionCase`; ``causal=None`` draws it."""
    b = draw(st.integers(1, max_batch), label="batch")
    h = draw(st.integers(min_heads, max(min_heads, 3)), label="heads")
    d = draw(st.sampled_from(dims), label="d")
    awkward = [n for n in AWKWARD_LENGTHS if n <= max_len]
    t = draw(st.one_of(st.sampled_from(awkward), st.integers(1, max_len)), label="T (keys)")
    is_causal = draw(st.booleans(), label="causal") if causal is None else causal
    s = draw(st.integers(1, t) if is_causal else st.integers(1, max_len), label="S (queries)")
    dv = draw(st.integers(1, 6), label="dv")
    fams = families or available_families()
    family = draw(st.sampled_from(fams), label="G family")
    g_batched = family != "none" and draw(st.booleans(), label="G per batch [B,H,d,d]")
    pad = draw(st.sampled_from(padding), label="padding")
    scale = draw(st.one_of(st.none(), st.floats(0.0625, 1.0, width=32)), label="scale")
    seed = draw(st.integers(0, 2**32 - 1), label="values seed")
    return AttentionCase(b, h, s, t, d, dv, family, g_batched, is_causal, pad, scale, seed)


@dataclasses.dataclass
class ChainCase:
    """One drawn operator-chain problem: rotated queries and the layer's chain weights."""

    b: int
    h: int
    s: int
    d: int
    a_dff: int
    units: int
    dense: int
    q_scale: float
    seed: int

    def arrays(self) -> tuple[np.ndarray, dict[str, Any]]:
        rng = np.random.default_rng(self.seed)
        q = rng.standard_normal((self.b, self.h, self.s, self.d)) * self.q_scale
        w = oracle.random_layer_weights(self.d, self.a_dff, self.units, self.dense, self.h, self.seed + 1)
        return q, w

    def describe(self) -> str:
        return (f"case: B={self.b} H={self.h} S={self.s} d={self.d} A_dff={self.a_dff} units={self.units} "
                f"dense={self.dense} q_scale={self.q_scale} seed={self.seed}")


@st.composite
def chain_cases(draw: Any, *, dims: tuple[int, ...] = (2, 4, 8), max_len: int = 9) -> ChainCase:
    return ChainCase(
        b=draw(st.integers(1, 2), label="batch"),
        h=draw(st.integers(1, 3), label="heads"),
        s=draw(st.integers(1, max_len), label="S"),
        d=draw(st.sampled_from(dims), label="d"),
        a_dff=draw(st.integers(2, 8), label="A_dff"),
        units=draw(st.integers(1, 2), label="residual units"),
        dense=draw(st.integers(1, 2), label="SwiGLU blocks per unit"),
        q_scale=draw(st.sampled_from([0.1, 1.0, 3.0]), label="q scale"),
        seed=draw(st.integers(0, 2**31 - 2), label="values seed"),
    )


@st.composite
def token_batches(draw: Any, *, vocab: int, max_len: int = 9, max_batch: int = 2, min_len: int = 1,
                  left_padding: bool = True) -> np.ndarray:
    """Token ids [B, S] with right or (``left_padding``) left padding (id 0); never all padding.

    Left padding leaves query rows with no allowed key, where the published −1e9 mask is
    realized by rounding: below float64, −1e9 + s rounds to a constant and the row becomes
    uniform, while the float64 truth keeps softmax(s). Decoder-level checks therefore draw left
    padding only at float64 (the golden vectors cover it at float32; attention_finite_mask
    covers it at every dtype).
    """
    b = draw(st.integers(1, max_batch), label="batch")
    s = draw(st.integers(min_len, max_len), label="S")
    seed = draw(st.integers(0, 2**32 - 1), label="tokens seed")
    kind = draw(st.sampled_from(["none", "right", "left"] if left_padding else ["none", "right"]), label="padding")
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, vocab, size=(b, s))
    if kind != "none" and s > 1:
        for i in range(b):
            n = int(rng.integers(0, s))  # keep ≥ 1 real token
            if kind == "right" and n:
                tokens[i, s - n :] = 0
            elif kind == "left" and n:
                tokens[i, :n] = 0
    return tokens.astype(np.int64)


__all__ = [
    "AWKWARD_LENGTHS", "G_FAMILIES", "MAX_ABS_SCORE", "AttentionCase", "ChainCase", "attention_cases",
    "available_families", "chain_cases", "make_g", "padding_mask", "sentinel_g", "token_batches",
]
