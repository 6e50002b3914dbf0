"""Analytic work and traffic counts of a PLDR-LLM forward: FLOPs, weight bytes, rooflines.

Everything here is pure arithmetic on a :class:`plga.reference.config.PLDRConfig` (no torch),
so the bench's derived numbers (GFLOP/s, roofline and bandwidth fractions) are testable on
synthetic inputs. Shapes follow docs/spec.md §2 and docs/spec.md §2.1, §2.2, §2.5.
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: What each operator mode runs per layer (docs/spec.md §3).
#:   full       – a pass over the whole sequence with the learned operator: Gram, metric learner, power stage
#:   kv         – a cached step: power stage from the prompt's frozen A (no Gram, no metric learner)
#:   kvg        – a cached step reusing the prompt's A_LM, G_LM (no chain at all)
#:   collapsed  – a constant G per layer replaces the whole chain (prompt included)
OPERATOR_MODES = ("full", "kv", "kvg", "collapsed")


@dataclasses.dataclass(frozen=True)
class FlopBreakdown:
    """Matmul FLOPs (2·m·n·k per product) of one forward, by stage; ``total`` sums them."""

    projections: int = 0  # q, k, v, output projection
    gram: int = 0  # density operator A₀ = q̃ᵀ q̃
    metric_learner: int = 0  # residual SwiGLU units on the d×d rows
    power_stage: int = 0  # W A and a A_P
    apply_g: int = 0  # q' = q̃ G
    scores: int = 0  # q' kᵀ
    attention: int = 0  # softmax(E) v
    ffn: int = 0  # gated FFN, three matmuls
    vocab: int = 0  # final_layer on the positions whose logits are computed

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in dataclasses.fields(self))

    def as_dict(self) -> dict[str, int]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["total"] = self.total
        return out

    def __add__(self, other: FlopBreakdown) -> FlopBreakdown:
        return FlopBreakdown(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)})


def attention_pairs(seq: int, start: int = 0, *, causal: bool = True) -> int:
    """(query, key) pairs of S = ``seq`` new queries at positions start…start+S−1.

    Causal: query i sees start + i + 1 keys, so S·start + S(S+1)/2 pairs. Not causal (an
    eager implementation that materializes and multiplies the full S×T score block, masked
    entries included): S·(start + S).
    """
    if seq < 0 or start < 0:
        raise ValueError(f"need seq ≥ 0 and start ≥ 0, got {seq}, {start}")
    if causal:
        return seq * start + seq * (seq + 1) // 2
    return seq * (start + seq)


def forward_flops(
    config: Any,
    batch: int,
    seq: int,
    *,
    start: int = 0,
    operator: str = "full",
    logits: str | int = "all",
    causal_pairs: bool = True,
    last_row_only: bool = False,
) -> FlopBreakdown:
    """Matmul FLOPs of one forward over ``seq`` new tokens after ``start`` cached ones.

    Counts 2·m·n·k for every matrix product (a multiply and an add); elementwise work
    (RoPE, LayerNorm, softmax, SiLU, the elementwise power, biases) is not counted, so the
    count is what the matmul roofline bounds. Per layer, with D = d_model, H heads of
    d = D/H, F = dff, a = A_dff, units = num_reslayerA·num_denseA, P = attention pairs:

    - projections  4 · 2·B·S·D·D          (wq, wk, wv, dense)
    - gram         2·B·H·S·d·d            (``operator="full"`` only: A₀ = q̃ᵀ q̃ over the S rows)
    - metric       units · 6·(B·H·d)·d·a  (``full`` only: three products per SwiGLU on B·H·d rows)
    - power stage  2 · 2·B·H·d³           (``full`` and ``kv``: W A and a A_P)
    - apply_g      2·B·H·S·d·d            (q' = q̃ G, every mode)
    - scores       2·B·H·P·d, attention 2·B·H·P·d
    - ffn          3 · 2·B·S·D·F
    and once: vocab 2·B·n·D·V with n = S (``logits="all"``), 1 (``"last"``), an int, or 0 (None).

    ``causal_pairs=False`` counts the full S×(start+S) score block (what an eager
    implementation computes, masked entries included); True counts only causal pairs.

    ``last_row_only`` (with ``logits="last"``: what the kernels' fused path computes) counts the
    last layer's q, k, v, Gram, metric learner and power stage over every row but its output
    projection, q' = q̃ G, scores, attention and feed-forward at the last row alone (one query
    over start + S keys).
    """
    c = config
    if operator not in OPERATOR_MODES:
        raise ValueError(f"operator must be one of {OPERATOR_MODES}, got {operator!r}")
    if operator in ("kv", "kvg") and start == 0:
        raise ValueError(f"operator {operator!r} is a cached step: it needs start > 0")
    b, s, dm, h, d = batch, seq, c.d_model, c.num_heads, c.depth
    if logits == "all":
        n_logits = s
    elif logits == "last":
        n_logits = 1 if s else 0
    elif logits is None or logits == "none":
        n_logits = 0
    elif isinstance(logits, int) and not isinstance(logits, bool) and 0 <= logits <= s:
        n_logits = logits
    else:
        raise ValueError(f"logits must be 'all', 'last', 'none' or an int in [0, seq]; got {logits!r}")
    if last_row_only and logits != "last":
        raise ValueError(f"last_row_only counts a pass whose output is the last logits: needs logits='last', got {logits!r}")
    units = c.num_reslayerA * c.num_denseA

    def layer(rows: int) -> FlopBreakdown:  # ``rows``: the rows that attend and are fed forward
        pairs = attention_pairs(s, start, causal=causal_pairs) if rows == s else rows * (start + s)
        return FlopBreakdown(
            projections=3 * 2 * b * s * dm * dm + 2 * b * rows * dm * dm,
            gram=2 * b * h * s * d * d if operator == "full" else 0,
            metric_learner=units * 6 * (b * h * d) * d * c.A_dff if operator == "full" else 0,
            power_stage=2 * 2 * b * h * d**3 if operator in ("full", "kv") else 0,
            apply_g=2 * b * h * rows * d * d,
            scores=2 * b * h * pairs * d,
            attention=2 * b * h * pairs * d,
            ffn=3 * 2 * b * rows * dm * c.dff,
        )

    total = FlopBreakdown()
    for i in range(c.num_layers):
        total = total + layer(min(s, 1) if last_row_only and i == c.num_layers - 1 else s)
    return total + FlopBreakdown(vocab=2 * b * n_logits * dm * c.input_vocab_size)


def generate_flops(
    config: Any,
    batch: int,
    prompt: int,
    new_tokens: int,
    mode: str,
    *,
    prompt_logits: str = "last",
    step_logits: str = "last",
    causal_pairs: bool = True,
    last_row_only: bool = False,
) -> FlopBreakdown:
    """Matmul FLOPs of greedy decoding ``new_tokens`` after a ``prompt``-token prompt.

    ``nocache``: one full forward per new token over prompt + n tokens (n = 0…N−1) with
    ``step_logits`` logits ("all" is the published loop). ``kv``/``kvg``: a full prompt
    pass (``prompt_logits``) then N−1 one-token cached steps (operator ``kv``/``kvg``);
    ``collapsed``: the same with a constant G everywhere. The N-th token needs no step.
    ``last_row_only``: every pass with ``"last"`` logits trims its last layer
    (:func:`forward_flops`), as the kernels' fused path does.
    """

    def trim(logits: str) -> bool:
        return last_row_only and logits == "last"

    if new_tokens < 1:
        raise ValueError(f"new_tokens must be ≥ 1, got {new_tokens}")
    total = FlopBreakdown()
    if mode == "nocache":
        for n in range(new_tokens):
            total = total + forward_flops(config, batch, prompt + n, logits=step_logits, causal_pairs=causal_pairs,
                                          last_row_only=trim(step_logits))
        return total
    if mode not in ("kv", "kvg", "collapsed"):
        raise ValueError(f"unknown decoding mode {mode!r}")
    first = "collapsed" if mode == "collapsed" else "full"
    total = forward_flops(config, batch, prompt, operator=first, logits=prompt_logits, causal_pairs=causal_pairs,
                          last_row_only=trim(prompt_logits))
    for n in range(1, new_tokens):
        total = total + forward_flops(config, batch, 1, start=prompt + n - 1, operator=mode, logits=step_logits)
    return total


# --- parameters and bytes -------------------------------------------------------------------


def parameter_groups(config: Any) -> dict[str, int]:
    """Parameter counts by group (all layers summed), from the module definitions (docs/spec.md §2)."""
    c = config
    dm, h, d, L = c.d_model, c.num_heads, c.depth, c.num_layers
    glu_a = 2 * (c.A_dff * d + c.A_dff) + (d * c.A_dff + d)
    return {
        "embedding": c.input_vocab_size * dm,
        "input_layernorm": 2 * dm,
        "attention_projections": L * 4 * (dm * dm + dm),
        "gram_layernorm": L * 2 * d,
        "metric_learner": L * c.num_reslayerA * (c.num_denseA * glu_a + 2 * d),
        "power_stage": L * 5 * h * d * d,
        "ffn": L * (2 * (c.dff * dm + c.dff) + dm * c.dff + dm),
        "layer_layernorms": L * 4 * dm,
        "final_layer": c.input_vocab_size * dm + c.input_vocab_size,
        "collapsed_G": L * h * d * d,  # only in a collapsed model (replaces the three chain groups)
    }


def parameter_count(config: Any, *, collapsed: bool = False) -> int:
    """Parameters of the model (uncollapsed: every upstream key; collapsed: chain → collapsed_G)."""
    g = parameter_groups(config)
    drop = ("gram_layernorm", "metric_learner", "power_stage") if collapsed else ("collapsed_G",)
    return sum(v for k, v in g.items() if k not in drop)


def decode_weight_params(config: Any, mode: str, batch: int = 1) -> dict[str, int]:
    """Parameters *read* by one single-token decoding step, by group, for ``mode``.

    Every step reads the input LayerNorm, ``batch`` embedding rows (a gather, not the
    table), the attention projections, the FFN, the layer LayerNorms and the vocabulary
    projection. Per mode:

    - ``kv``: + the power-stage parameters W, b, P, a, b_a (G_LM is recomputed from the
      frozen A); the Gram LayerNorm and metric learner are *not* read.
    - ``kvg``: no chain parameters (A_LM, G_LM come from the cache, counted as cache bytes).
    - ``collapsed``: + the constant ``collapsed_G`` (one d×d per layer and head).
    - ``nocache``: every parameter of the uncollapsed model except the unused embedding
      rows (a full forward: Gram LayerNorm, metric learner, power stage).
    """
    g = parameter_groups(config)
    read = {
        "embedding_rows": batch * config.d_model,
        "input_layernorm": g["input_layernorm"],
        "attention_projections": g["attention_projections"],
        "ffn": g["ffn"],
        "layer_layernorms": g["layer_layernorms"],
        "final_layer": g["final_layer"],
    }
    if mode == "kv":
        read["power_stage"] = g["power_stage"]
    elif mode == "kvg":
        pass
    elif mode == "collapsed":
        read["collapsed_G"] = g["collapsed_G"]
    elif mode == "nocache":
        read.update(gram_layernorm=g["gram_layernorm"], metric_learner=g["metric_learner"], power_stage=g["power_stage"])
    else:
        raise ValueError(f"unknown decoding mode {mode!r}")
    return read


#: Parameter groups of the operator chain: kept in float32 by the kernels whatever the model dtype.
CHAIN_GROUPS = ("gram_layernorm", "metric_learner", "power_stage", "collapsed_G")


def decode_weight_bytes(
    config: Any, mode: str, *, bytes_per_param: int = 4, chain_bytes_per_param: int | None = None, batch: int = 1
) -> int:
    """Bytes of weights read per decoding step: bytes per parameter × :func:`decode_weight_params`.

    ``chain_bytes_per_param`` (default: ``bytes_per_param``) applies to the operator-chain
    groups, which stay float32 when the model runs in bfloat16.
    """
    chain = bytes_per_param if chain_bytes_per_param is None else chain_bytes_per_param
    read = decode_weight_params(config, mode, batch)
    return sum(n * (chain if k in CHAIN_GROUPS else bytes_per_param) for k, n in read.items())


def decode_cache_bytes(config: Any, mode: str, keys: int, *, bytes_per_value: int = 4, batch: int = 1) -> int:
    """Bytes of cache state read by one cached step attending to ``keys`` positions.

    K and V (2·L·B·H·keys·d) in every cached mode; plus the prompt's A (``kv``: L·B·H·d²) or
    G_LM (``kvg``: L·B·H·d²). ``collapsed`` reads its G as a weight; ``nocache`` has no cache.
    """
    c = config
    if mode == "nocache":
        return 0
    kv = 2 * c.num_layers * batch * c.num_heads * keys * c.depth
    op = c.num_layers * batch * c.num_heads * c.depth**2 if mode in ("kv", "kvg") else 0
    return bytes_per_value * (kv + op)


# --- rooflines ------------------------------------------------------------------------------


def achieved_gflops(flops: float, seconds: float) -> float:
    """FLOPs / seconds in GFLOP/s."""
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    return flops / seconds / 1e9


def roofline_fraction(flops: float, seconds: float, peak_gflops: float) -> float:
    """Achieved GFLOP/s as a fraction of the measured matmul peak ``peak_gflops``."""
    if peak_gflops <= 0:
        raise ValueError(f"peak_gflops must be > 0, got {peak_gflops}")
    return achieved_gflops(flops, seconds) / peak_gflops


def bandwidth_bound_s(bytes_read: float, bandwidth_gbps: float) -> float:
    """The fastest a step reading ``bytes_read`` bytes can run at ``bandwidth_gbps`` GB/s."""
    if bandwidth_gbps <= 0:
        raise ValueError(f"bandwidth must be > 0, got {bandwidth_gbps}")
    return bytes_read / (bandwidth_gbps * 1e9)


def bandwidth_fraction(bytes_read: float, step_seconds: float, bandwidth_gbps: float) -> float:
    """Bound time / measured step time: 1.0 means the step streams its bytes at full bandwidth."""
    if step_seconds <= 0:
        raise ValueError(f"step_seconds must be > 0, got {step_seconds}")
    return bandwidth_bound_s(bytes_read, bandwidth_gbps) / step_seconds


__all__ = [
    "CHAIN_GROUPS", "OPERATOR_MODES", "FlopBreakdown", "achieved_gflops", "attention_pairs", "bandwidth_bound_s",
    "bandwidth_fraction", "decode_cache_bytes", "decode_weight_bytes", "decode_weight_params",
    "forward_flops", "generate_flops", "parameter_count", "parameter_groups", "roofline_fraction",
]
