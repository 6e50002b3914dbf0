"""Checks of the concrete-decoder theorems (``formal/Plga/Decoder.lean``) on the real reference decoder.

Every check runs ``plga.reference.decoder`` (``forward``, ``step``, ``decoder_layer``) on a
small seeded model in float64 and compares it with what the theorem says:

* (a) a decoder with frozen operators G* equals an SDPA decoder fed rope(q)·G*, built here from
  ``spec.sdpa_attention`` and the decoder's own projections, LayerNorms and feed-forward;
* (b) on a collapsed model, full recomputation equals prefix recomputation and cached
  incremental decoding (``step`` with ``kvg``);
* (c) the Lean counterexample recomputed with the spec functions moves row 1 when a row is
  appended, and so does the random (not collapsed) reference decoder, by a reported amount;
* (d) a model collapsed by construction (the last metric-learner unit's LayerNorm gain set to
  0, so the learner outputs its β whatever the Gram) generates the same G_LM on every input and
  runs as the frozen-operator decoder, and passes (a)–(b) end to end.

Each check has a *mutation* (``Ctx.mutation``) that breaks the computation the theorem is
about — G applied before RoPE, a cache that drops a position, a learner that is not collapsed —
and must then fail (the negative controls of ``tests/bridge/test_concrete_decoder.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from plga.reference import decoder as dec
from plga.reference import spec
from plga.reference.checkpoint import random_params
from plga.reference.config import PLDRConfig
from plga.reference.numerics import float32_sqrt

from .handwritten import CheckFailure, Ctx, HandResult, check, expect

#: float64 agreement "to rounding" for logits of a 2-layer model of width 8.
ROUNDING = 1e-10


def tiny_model(seed: int, collapsed: bool = False) -> tuple[PLDRConfig, dict[str, np.ndarray]]:
    """A 2-layer, 2-head, d = 4 model with seeded weights; ``collapsed`` zeroes the last learner
    unit's LayerNorm gain so A = β for every Gram (the collapse the theorems assume)."""
    cfg = PLDRConfig(num_layers=2, d_model=8, num_heads=2, dff=8, A_dff=4, num_reslayerA=1, num_denseA=1,
                     input_vocab_size=11, max_seq_len=16)
    params = {k: np.asarray(v, dtype=np.float64) for k, v in random_params(cfg, seed).items()}
    if collapsed:
        for layer in range(cfg.num_layers):
            key = f"decoder.dec_layers.{layer}.mha1.reslayerAs.{cfg.num_reslayerA - 1}.layernormA.weight"
            params[key] = np.zeros_like(params[key])
    return cfg, params


def _tokens(rng: np.random.Generator, cfg: PLDRConfig, length: int) -> np.ndarray:
    return rng.integers(1, cfg.input_vocab_size, size=(1, length))  # [1, S], no padding id 0


def _operators(rng: np.random.Generator, cfg: PLDRConfig) -> list[np.ndarray]:
    return [rng.normal(size=(cfg.num_heads, cfg.depth, cfg.depth)) for _ in range(cfg.num_layers)]  # [H, d, d] each


def sdpa_layer(params: Any, cfg: PLDRConfig, layer: int, h: np.ndarray, g: np.ndarray,
               g_before_rope: bool = False) -> np.ndarray:
    """One decoder layer as generalized SDPA: queries rope(q)·G, keys rope(k), operator I.

    ``g_before_rope`` is the mutation that applies G before RoPE (rope(q·G)), which is *not*
    what the theorem says and must be caught.
    """
    p = f"decoder.dec_layers.{layer}."
    positions = np.arange(h.shape[1])
    q = dec._heads(dec._linear(h, params, p + "mha1.wq"), cfg)  # [B, H, S, d]
    q = spec.rope(q @ g, positions, cfg.rope_base) if g_before_rope else spec.rope(q, positions, cfg.rope_base) @ g
    k = spec.rope(dec._heads(dec._linear(h, params, p + "mha1.wk"), cfg), positions, cfg.rope_base)
    v = dec._heads(dec._linear(h, params, p + "mha1.wv"), cfg)  # [B, H, S, d]
    support = dec.attention_support(np.ones(h.shape[:2], dtype=np.int64))[:, None]  # [B, 1, S, S]
    heads = spec.sdpa_attention(q, k, v, support, sqrt_d=float32_sqrt(cfg.depth), fill=spec.MASK_FILL)
    attn = dec._linear(dec._merge(heads), params, p + "mha1.dense")  # [B, S, D]
    h1 = dec._ln(attn + h, params, p + "layernorm1")
    return dec._ln(dec._glu(h1, params, p + "ffn.") + h1, params, p + "layernorm2")


def sdpa_logits(params: Any, cfg: PLDRConfig, tokens: np.ndarray, gs: list[np.ndarray],
                g_before_rope: bool = False) -> np.ndarray:
    """The SDPA decoder fed rope(q)·G* layer by layer → logits [B, S, V]."""
    h = dec.embed(params, cfg, tokens)
    for layer in range(cfg.num_layers):
        h = sdpa_layer(params, cfg, layer, h, gs[layer], g_before_rope)
    return dec._linear(h, params, "final_layer")


def cached_logits(params: Any, cfg: PLDRConfig, tokens: np.ndarray, prompt: int, mode: str,
                  constant_g: list[np.ndarray] | None, drop_position: bool = False) -> np.ndarray:
    """Logits of every position after the prompt, decoded one token at a time through the
    reference caches → [B, S − prompt, V]. ``drop_position`` is the mutation whose cache loses
    its first position before each step."""
    out = dec.forward(params, cfg, tokens[:, :prompt], constant_g=constant_g)
    caches, rows = out.caches, []
    for t in range(prompt, tokens.shape[1]):
        if drop_position:
            for c in caches:
                c.k, c.v, c.key_allowed = c.k[:, :, 1:], c.v[:, :, 1:], c.key_allowed[:, 1:]
        logits, caches = dec.step(params, cfg, tokens[:, t : t + 1], caches, mode, constant_g)
        rows.append(logits[:, -1])
    return np.stack(rows, axis=1)


def _worst(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b))) / max(1.0, float(np.max(np.abs(b))))


@check("headRow_eq_sdpa", evidence="concrete-decoder")
def _head_row(ctx: Ctx) -> HandResult:
    rng, worst = ctx.rng, 0.0
    for _ in range(ctx.max_examples):
        s, d = int(rng.integers(1, 7)), 2 * int(rng.integers(1, 4))
        q, k, v = (rng.normal(size=(s, d)) for _ in range(3))  # [S, d] each
        g = rng.normal(size=(d, d))
        pos = np.arange(s)
        causal = spec.causal_support(s, s)
        q_rot, k_rot = spec.rope(q, pos), spec.rope(k, pos)
        plga = spec.plga_attention(q_rot, g, k_rot, v, causal)
        fed = spec.rope(q @ g, pos) if ctx.mutation == "g before rope" else q_rot @ g
        err = _worst(spec.sdpa_attention(fed, k_rot, v, causal), plga)
        worst = max(worst, err)
        expect(err <= ROUNDING, f"s={s} d={d}: PLGA head with frozen G differs from SDPA on rope(q)·G by {err:.2e}")
    return HandResult(ctx.max_examples, worst)


def _agree(ctx: Ctx, draw: Callable[[np.random.Generator, PLDRConfig, Any], tuple[np.ndarray, np.ndarray, str]],
           what: str) -> HandResult:
    """``max_examples // 5`` cases on the tiny model: each drawn (got, reference, label) must
    agree to rounding."""
    rng, worst = ctx.rng, 0.0
    cfg, params = tiny_model(ctx.seed)
    n = max(1, ctx.max_examples // 5)
    for _ in range(n):
        got, ref, label = draw(rng, cfg, params)
        err = _worst(got, ref)
        worst = max(worst, err)
        expect(err <= ROUNDING, f"{label}: {what} by {err:.2e}")
    return HandResult(n, worst)


@check("frozenLayer_eq_sdpaLayer", evidence="concrete-decoder")
def _frozen_layer(ctx: Ctx) -> HandResult:
    def draw(rng: np.random.Generator, cfg: PLDRConfig, params: Any) -> tuple[np.ndarray, np.ndarray, str]:
        gs = _operators(rng, cfg)
        tokens = _tokens(rng, cfg, int(rng.integers(2, 8)))
        h = dec.embed(params, cfg, tokens)
        layer = int(rng.integers(0, cfg.num_layers))
        ref, _, _ = dec.decoder_layer(params, cfg, layer, h, np.arange(tokens.shape[1]), dec.attention_support(tokens),
                                      constant_g=gs[layer])
        got = sdpa_layer(params, cfg, layer, h, gs[layer], ctx.mutation == "g before rope")
        return got, ref, f"layer {layer}, {tokens.shape[1]} tokens"

    return _agree(ctx, draw, "decoder_layer(constant_g) ≠ SDPA layer fed rope(q)·G")


@check("frozenDecoder_eq_sdpaDecoder", evidence="concrete-decoder")
def _frozen_decoder(ctx: Ctx) -> HandResult:
    def draw(rng: np.random.Generator, cfg: PLDRConfig, params: Any) -> tuple[np.ndarray, np.ndarray, str]:
        gs = _operators(rng, cfg)
        tokens = _tokens(rng, cfg, int(rng.integers(1, 8)))
        ref = dec.forward(params, cfg, tokens, constant_g=gs).logits
        return sdpa_logits(params, cfg, tokens, gs, ctx.mutation == "g before rope"), ref, f"{tokens.shape[1]} tokens"

    return _agree(ctx, draw, "forward(constant_g) ≠ SDPA decoder fed rope(q)·G")


def _prefix_and_cache(ctx: Ctx, params: Any, cfg: PLDRConfig, gs: list[np.ndarray] | None, mode: str) -> float:
    """Worst gap between the full pass and (i) each prefix recomputed, (ii) cached decoding."""
    rng, worst = ctx.rng, 0.0
    for _ in range(max(1, ctx.max_examples // 5)):
        tokens = _tokens(rng, cfg, int(rng.integers(3, 9)))
        full = dec.forward(params, cfg, tokens, constant_g=gs).logits  # [1, S, V]
        for r in range(tokens.shape[1]):
            row = dec.forward(params, cfg, tokens[:, : r + 1], constant_g=gs).logits[:, r]
            err = _worst(row, full[:, r])
            worst = max(worst, err)
            expect(err <= ROUNDING, f"row {r} of {tokens.shape[1]}: full pass ≠ prefix recomputation by {err:.2e}")
        prompt = int(rng.integers(1, tokens.shape[1]))
        cached = cached_logits(params, cfg, tokens, prompt, mode, gs, ctx.mutation == "cache drops a position")
        err = _worst(cached, full[:, prompt:])
        worst = max(worst, err)
        expect(err <= ROUNDING, f"prompt {prompt} of {tokens.shape[1]}: cached decoding ({mode}) ≠ full pass by {err:.2e}")
    return worst


@check("frozenDecoder_prefixConsistentShaped", evidence="concrete-decoder")
def _frozen_prefix(ctx: Ctx) -> HandResult:
    cfg, params = tiny_model(ctx.seed)
    gs = _operators(np.random.default_rng(ctx.seed + 1), cfg)
    return HandResult(max(1, ctx.max_examples // 5), _prefix_and_cache(ctx, params, cfg, gs, "collapsed"))


def collapsed_model(ctx: Ctx) -> tuple[PLDRConfig, dict[str, np.ndarray]]:
    """The model of the (d) checks: collapsed by construction, unless the mutation says not."""
    return tiny_model(ctx.seed, collapsed=ctx.mutation != "learner not collapsed")


def _reached_operators(params: Any, cfg: PLDRConfig, tokens: np.ndarray) -> list[np.ndarray]:
    return [d["G_LM"][0] for d in dec.forward(params, cfg, tokens).deductive]  # per layer [H, d, d]


@check("plgaGenerator_const", evidence="concrete-decoder")
def _generator_const(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    cfg, params = collapsed_model(ctx)
    first = _reached_operators(params, cfg, _tokens(rng, cfg, 3))
    n = max(1, ctx.max_examples // 5)
    for _ in range(n):
        tokens = _tokens(rng, cfg, int(rng.integers(1, 9)))
        for layer, (a, b) in enumerate(zip(_reached_operators(params, cfg, tokens), first, strict=True)):
            expect(np.array_equal(a, b), f"layer {layer}: G_LM differs between inputs by {_worst(a, b):.2e}")
    return HandResult(n)


@check("generatedDecoder_eq_frozen", evidence="concrete-decoder")
def _generated_eq_frozen(ctx: Ctx) -> HandResult:
    rng, worst = ctx.rng, 0.0
    cfg, params = collapsed_model(ctx)
    gstar = _reached_operators(params, cfg, _tokens(rng, cfg, 2))
    n = max(1, ctx.max_examples // 5)
    for _ in range(n):
        tokens = _tokens(rng, cfg, int(rng.integers(1, 9)))
        err = _worst(dec.forward(params, cfg, tokens).logits, dec.forward(params, cfg, tokens, constant_g=gstar).logits)
        worst = max(worst, err)
        expect(err <= ROUNDING, f"{tokens.shape[1]} tokens: PLGA forward ≠ frozen-operator forward by {err:.2e}")
    return HandResult(n, worst)


@check("collapsed_prefixConsistentShaped", evidence="concrete-decoder")
def _collapsed_prefix(ctx: Ctx) -> HandResult:
    cfg, params = collapsed_model(ctx)
    worst = _prefix_and_cache(ctx, params, cfg, None, "kv")
    gstar = _reached_operators(params, cfg, _tokens(ctx.rng, cfg, 2))
    tokens = _tokens(ctx.rng, cfg, 6)
    err = _worst(sdpa_logits(params, cfg, tokens, gstar), dec.forward(params, cfg, tokens).logits)
    expect(err <= ROUNDING, f"collapsed PLGA decoder ≠ SDPA decoder fed rope(q)·G* by {err:.2e}")
    moved = uncollapsed_drift(ctx.seed)
    return HandResult(max(1, ctx.max_examples // 5), max(worst, err),
                      f"control: on the same model with its learner not collapsed, appending tokens moves earlier rows' logits by up to {moved:.2e}")


def lean_witness_gap(frozen: bool = False, base: float = 10000.0) -> float:
    """Row 1 of the Lean counterexample, full input minus its two-row prefix: G = D (the whole
    input's Gram), one head, d = 2, identity projections, rows [0, v, R(−1) v] with v = (1, 1).
    ``frozen`` is the mutation that gives both calls the prefix's Gram (then the gap is 0)."""
    v = np.ones(2)
    x = np.stack([np.zeros(2), v, spec.rope_matrix(-1.0, spec.rope_frequencies(2, base)) @ v])  # [3, 2]

    def row1(rows: np.ndarray, gram_rows: np.ndarray) -> np.ndarray:
        q = spec.rope(rows, np.arange(len(rows)), base)  # [S, 2] rotated queries = keys
        g = spec.density_operator(spec.rope(gram_rows, np.arange(len(gram_rows)), base))  # [2, 2]
        causal = spec.causal_support(len(rows), len(rows))
        return spec.plga_attention(q, g, q, rows, causal)[1]

    full = row1(x, x[:2] if frozen else x)
    return float(np.max(np.abs(full - row1(x[:2], x[:2]))))


@check("generatedLayer_not_prefixConsistent", evidence="concrete-decoder")
def _not_prefix_consistent(ctx: Ctx) -> HandResult:
    frozen = ctx.mutation == "operator frozen at the prefix's Gram"
    gap = lean_witness_gap(frozen)
    expect(gap > 1e-6, f"the Lean witness does not move row 1 (gap {gap:.2e})")
    drift = uncollapsed_drift(ctx.seed, frozen=frozen)
    expect(drift > 1e-6, f"the reference decoder (not collapsed) kept earlier rows within {drift:.2e}")
    return HandResult(2, 0.0, f"Lean witness: row 1 moves by {gap:.3g}; reference decoder: earlier rows move by up to {drift:.2e}")


def uncollapsed_drift(seed: int, length: int = 6, frozen: bool = False) -> float:
    """(c) measured: the largest change of an earlier row's logits when tokens are appended, on
    the random (not collapsed) model — what the Lean counterexample is about."""
    cfg, params = tiny_model(seed)
    tokens = _tokens(np.random.default_rng(seed + 7), cfg, length)
    gs = _reached_operators(params, cfg, tokens) if frozen else None  # the mutation: operators frozen
    full = dec.forward(params, cfg, tokens, constant_g=gs).logits
    return max(_worst(dec.forward(params, cfg, tokens[:, : r + 1], constant_g=gs).logits[:, r], full[:, r])
               for r in range(length - 1))


__all__ = ["ROUNDING", "CheckFailure", "cached_logits", "lean_witness_gap", "sdpa_layer", "sdpa_logits", "tiny_model",
           "uncollapsed_drift"]
