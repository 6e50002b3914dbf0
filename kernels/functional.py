"""Functional PLGA kernels in torch: RoPE, attention, the metric learner and the power stage.

Every function here computes what :mod:`plga.reference.spec` computes (docs/spec.md §1), batched over
batch and heads, on any device and in float64 / float32 / bfloat16. Names and tensors follow
the published layer (``burcgokden/PLDR-LLM-with-KVG-cache``, ``power_law_attention_layer_v510``):
``A`` is the metric-learner output, ``A_LM = iSwiGLU(W A + b) + 1e-9``, ``A_P = A_LM^{⊙P}``,
``G_LM = a A_P + b_a``, and the scores are ``(Q G_LM) Kᵀ / √d``.

Precision policy of the operator chain: the density operator ``QᵀQ``, the metric learner,
the power stage and ``G_LM`` are always evaluated in float32 or wider. Activations in
bfloat16 / float16 are **upcast** to float32 for the chain (``A_LM``'s 1e-9 floor underflows
in float16, and ``A_LM^P`` amplifies rounding by orders of magnitude); the attention itself
runs in the activation dtype with ``q' = q G`` formed in the wider dtype and rounded once
(bfloat16 prefill on a CPU with bfloat16 dot products but no AMX keeps ``q'`` and the scores in float32: :func:`blocked_attention`).

Nothing here queries CUDA at import.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import InputError, InputTypeError
from ..reference.spec import EPSILON_ADJ, LAYER_NORM_EPS, MASK_FILL, causal_support
from . import native
from .gemm import cpu_has_low_precision_gemm, gated, linear

_LOW_PRECISION = (torch.float16, torch.bfloat16)

#: bfloat16 attention on a CPU with bfloat16 arithmetic but without AMX tiles, with at least this many queries and B·H·S·T
#: score entries, no key padding and no autograd runs as :func:`blocked_attention`: there torch's
#: CPU flash kernel ran bfloat16 at its float32 rate (AMD EPYC with AVX512-BF16, paper-110m b8
#: s1024, q G included: 140 → 104 ms per layer); below these sizes the flash kernel's lower fixed
#: cost wins. Where the CPU has AMX tiles (:func:`cpu_has_amx`) the flash kernel's bfloat16
#: products run on them and it is the faster one at every size (Xeon with AMX, the same layer:
#: 102 ms blocked against 49 ms flash; b1 s128: 0.55 against 0.28 ms). Where the CPU has no
#: bfloat16 arithmetic at all (:func:`~plga.kernels.gemm.cpu_has_low_precision_gemm`) the
#: blocked path's bfloat16 value product would run on torch's scalar fallback (AMD EPYC with
#: AVX2 only: 14× slower than in float32), while the flash kernel converts to float32 itself
#: (b8 s1024 causal: 196 ms against 221 ms in float32): the flash kernel runs there.
BLOCKED_MIN_QUERIES = 64
BLOCKED_MIN_SCORES = 2**16
#: Query rows per block of :func:`blocked_attention`, and its float32 score workspace (entries).
BLOCKED_QUERY_ROWS = 128
BLOCKED_WORKSPACE = 2**20


@functools.cache
def cpu_has_amx() -> bool:
    """Whether this CPU has AMX tiles, on which torch's CPU flash kernel runs its bfloat16
    products (asked once, at the first bfloat16 attention, never at import)."""
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(probe()) if probe is not None else False


def chain_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the operator chain (Gram → metric learner → G_LM) runs in for activations ``dtype``."""
    return torch.float32 if dtype in _LOW_PRECISION else dtype


# --- RoPE -----------------------------------------------------------------------------------


def rope_tables(
    max_seq_len: int, d: int, base: float = 10000.0, *, device: Any = None
) -> tuple[Tensor, Tensor]:
    """cos, sin tables [max_seq_len, d/2] in float64, angle p·θ_j with θ_j = base^{−2j/d}.

    Built in float64 (as the reference and the golden vectors) and cast by :func:`apply_rope`
    to the activation dtype; torchtune's float32 tables differ from these by ~1e-7 relative.
    """
    if d % 2:
        raise InputError(f"RoPE needs an even head dimension, got d = {d}")
    theta = base ** (-2.0 * torch.arange(d // 2, dtype=torch.float64, device=device) / d)  # [d/2]
    angles = torch.arange(max_seq_len, dtype=torch.float64, device=device)[:, None] * theta  # [P, d/2]
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, style: str = "interleaved") -> Tensor:
    """Rotate rows of x [..., S, d] by the tables cos/sin [S, d/2] (already sliced to positions).

    ``interleaved`` pairs (2j, 2j+1) (v51 checkpoints, torchtune); ``rotate_half`` pairs
    (j, j + d/2) (v52). Low-precision inputs rotate in float32 and are cast back (torchtune).
    """
    ct = chain_dtype(x.dtype)
    xf = x.to(ct)
    cos, sin = cos.to(ct), sin.to(ct)
    d = x.shape[-1]
    if style == "interleaved":
        pairs = xf.unflatten(-1, (d // 2, 2))  # [..., S, d/2, 2]
        x0, x1 = pairs[..., 0], pairs[..., 1]
        out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
    elif style == "rotate_half":
        x0, x1 = xf[..., : d // 2], xf[..., d // 2 :]
        out = torch.cat((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    else:
        raise InputError(f"unknown RoPE style {style!r}; use 'interleaved' or 'rotate_half'")
    return out.to(x.dtype)


# --- Masks ----------------------------------------------------------------------------------


def attention_support(
    s: int,
    t: int,
    *,
    causal: bool,
    key_padding_mask: Tensor | None,
    device: Any = None,
) -> Tensor | None:
    """Allowed (query, key) pairs as a bool tensor [B or 1, 1, S, T]; None when all are allowed.

    The convention is :func:`plga.reference.spec.causal_support` (one home for every
    implementation): the S queries are the **last** S positions of the T keys, so query i sits
    at position T − S + i and sees keys j ≤ T − S + i (bottom-right alignment, as in cached
    decoding). ``key_padding_mask`` [B, T] is True at padding keys, which are ignored.
    """
    allowed: Tensor | None = None
    if causal:
        allowed = torch.from_numpy(causal_support(s, t)).to(device)[None, None]  # [1, 1, S, T]
    if key_padding_mask is not None:
        if key_padding_mask.dtype != torch.bool or key_padding_mask.ndim != 2 or key_padding_mask.shape[1] != t:
            raise InputError(
                f"key_padding_mask must be bool [B, T={t}] (True = padding), got "
                f"{key_padding_mask.dtype} {tuple(key_padding_mask.shape)}"
            )
        keys = (~key_padding_mask)[:, None, None, :]  # [B, 1, 1, T]
        allowed = keys if allowed is None else allowed & keys
    return allowed


def finite_additive_mask(allowed: Tensor, dtype: torch.dtype, fill: float = MASK_FILL) -> Tensor:
    """The upstream additive mask: 0 where allowed, ``fill`` (−1e9) elsewhere, in ``dtype``.

    ``fill`` is clamped to the dtype's finite range: −1e9 is −inf in float16 (max 65504), which
    would turn a fully masked row into 0/0 (NaN, or zeros in some fused kernels) instead of the
    published finite-mask softmax; float16 uses −65504 instead (float32/64 and bfloat16 are unchanged).
    """
    fill = max(float(fill), float(torch.finfo(dtype).min))
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, torch.full((), fill, dtype=dtype, device=allowed.device))


# --- Attention ------------------------------------------------------------------------------


def apply_g(q: Tensor, G: Tensor | None) -> Tensor:
    """q' = q G per head: q [B, H, S, d], G [H, d, d] or [B, H, d, d] → [B, H, S, d] in q's dtype.

    One batched matmul, in the wider of the two dtypes, rounded once to q's dtype.
    """
    if G is None:
        return q
    if not isinstance(G, Tensor):
        raise InputTypeError(f"G must be a torch.Tensor or None, got {type(G).__name__}")
    if not G.is_floating_point():
        raise InputError(f"G must be a floating-point tensor, got {G.dtype}")
    if G.device != q.device:
        raise InputError(f"G is on {G.device} but q is on {q.device}")
    if G.ndim not in (3, 4) or G.shape[-2:] != (q.shape[-1], q.shape[-1]) or G.shape[-3] != q.shape[1]:
        raise InputError(
            f"G must be [H, d, d] or [B, H, d, d] with H={q.shape[1]}, d={q.shape[-1]}; got {tuple(G.shape)}"
        )
    if G.ndim == 4 and G.shape[0] == 1:
        G = G[0]  # broadcast over the batch: avoids a slow 4-D batched path for decode-sized q
    ct = torch.promote_types(q.dtype, G.dtype)
    if ct == q.dtype and ct == G.dtype:
        return q @ G
    return (q.to(ct) @ G.to(ct)).to(q.dtype)


def _check_qkv(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    G: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
    scale: float | None = None,
    validate: bool = True,
) -> None:
    """Shapes, dtypes and devices of attention inputs; with ``validate`` also finiteness.

    Every problem is a ``ValueError`` (a non-tensor argument a ``TypeError``) naming the input.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor):
            raise InputTypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise InputError(f"q, k, v must be [B, H, S, d]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[:2] != k.shape[:2] or k.shape[:3] != v.shape[:3] or q.shape[-1] != k.shape[-1]:
        raise InputError(
            f"incompatible shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} "
            "(need q [B,H,S,d], k [B,H,T,d], v [B,H,T,dv])"
        )
    if 0 in q.shape or 0 in k.shape or 0 in v.shape:
        raise InputError(
            f"empty attention input: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} "
            "(every dimension must be ≥ 1: no queries, keys or features to attend over)"
        )
    if not (q.is_floating_point() and k.is_floating_point() and v.is_floating_point()):
        raise InputError(f"q, k, v must be floating point, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise InputError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise InputError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if key_padding_mask is not None:
        if not isinstance(key_padding_mask, Tensor):
            raise InputTypeError(f"key_padding_mask must be a bool torch.Tensor, got {type(key_padding_mask).__name__}")
        if key_padding_mask.device != q.device:
            raise InputError(f"key_padding_mask is on {key_padding_mask.device} but q is on {q.device}")
        if key_padding_mask.ndim == 2 and key_padding_mask.shape[0] not in (1, q.shape[0]):
            raise InputError(f"key_padding_mask has batch {key_padding_mask.shape[0]}, q has batch {q.shape[0]}")
    if scale is not None and not math.isfinite(float(scale)):
        raise InputError(f"scale must be finite, got {scale}")
    if validate:
        for name, x in (("q", q), ("k", k), ("v", v), ("G", G)):
            if x is not None and isinstance(x, Tensor) and not bool(torch.isfinite(x).all()):
                raise InputError(f"{name} has non-finite entries (NaN or inf); attention inputs must be finite")


def plga_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    G: Tensor | None = None,
    *,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    scale: float | None = None,
    finite_mask: bool = False,
    backend: str = "sdpa",
    validate: bool = True,
) -> Tensor:
    """Power law graph attention softmax((q G) kᵀ · scale + mask) v, fused via SDPA.

    Shapes: q [B, H, S, d], k [B, H, T, d], v [B, H, T, dv], ``G`` [H, d, d], [B, H, d, d] or
    None (identity: plain SDPA), ``key_padding_mask`` [B, T] bool with True = padding
    (ignored keys). ``scale`` defaults to 1/√d. ``G`` is applied *after* RoPE: the caller
    passes rotated q and k, and ``q' = q G`` is formed once, then
    ``torch.nn.functional.scaled_dot_product_attention`` runs on ``(q', k, v)`` so CPU and
    CUDA use their fused flash / memory-efficient kernels (memory O(S) when no explicit mask
    is needed: no padding, and ``causal`` with S == T).

    Inside a compiled graph (a captured decoding step) one query per row runs
    :func:`one_query_attention` instead: two float32 reductions over the keys, fused with the
    mask and the softmax.

    bfloat16 on a CPU with bfloat16 arithmetic but no AMX tiles, with G ≠ I, without key padding or autograd, from
    :data:`BLOCKED_MIN_QUERIES` queries and :data:`BLOCKED_MIN_SCORES` scores, runs
    :func:`blocked_attention` instead (``q'`` and the scores stay float32; faster than the
    flash kernel there). At G = I the result is torch SDPA's, bit for bit.

    Causal with S < T: the queries are the last S positions (query i sees keys
    j ≤ T − S + i). S > T with ``causal`` is an error.

    Masking: by default masked entries are excluded exactly (the ideal masked softmax; a
    query row with no allowed key returns zeros). ``finite_mask=True`` instead adds −1e9 to
    masked scaled scores, the published implementation's semantics — identical wherever a
    row has an allowed key, and needed for exact agreement with checkpoints on fully masked
    rows (left padding), whose outputs feed the next layer's Gram.

    ``backend="eager"`` materializes the S×T scores as the published code does
    (:func:`plga_attention_eager`).

    Input errors (ranks, shapes, empty dimensions, dtypes differing between q, k, v, devices,
    a non-floating G) are ``ValueError``; with ``validate`` (default) NaN or inf in q, k, v or
    G are refused too. ``validate=False`` skips that scan (one device sync) for benchmarks.
    """
    if backend == "eager":
        return plga_attention_eager(
            q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale, finite_mask=finite_mask,
            validate=validate,
        )
    if backend != "sdpa":
        raise InputError(f"unknown backend {backend!r}; use 'sdpa' or 'eager'")
    _check_qkv(q, k, v, G, key_padding_mask, scale, validate)
    s, t = q.shape[2], k.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if _takes_blocked_path(q, k, v, G, causal, key_padding_mask):
        return blocked_attention(apply_g(q.to(torch.float32), G), k, v, causal=causal, scale=scale)
    qg = apply_g(q, G)  # [B, H, S, d]
    if s == 1 and torch.compiler.is_compiling():  # a captured decoding step
        allowed = attention_support(s, t, causal=causal, key_padding_mask=key_padding_mask, device=q.device)
        return one_query_attention(qg, k, v, allowed, scale=scale, finite_mask=finite_mask)
    if scale == 0.0:  # every score is exactly 0: the same softmax from zero queries at scale 1
        qg, scale = torch.zeros_like(qg), 1.0  # (CUDA's fused bfloat16 kernels returned NaN at scale 0)
    # every row has a key: no mask tensor, flash-eligible. Not at a negative scale: torch's causal
    # kernels mask the scores before scaling them, and −∞ · scale turned +∞ (NaN rows, torch 2.13)
    if key_padding_mask is None and causal and s <= t and scale > 0:
        if s == t:
            return F.scaled_dot_product_attention(qg, k, v, is_causal=True, scale=scale)
        if s == 1:  # a decoding step: the last position sees every key
            return F.scaled_dot_product_attention(qg, k, v, scale=scale)
        # imported here, not at module import: it loads torch._dynamo (~0.9 s)
        from torch.nn.attention.bias import causal_lower_right

        return F.scaled_dot_product_attention(qg, k, v, attn_mask=causal_lower_right(s, t), scale=scale)
    allowed = attention_support(s, t, causal=causal, key_padding_mask=key_padding_mask, device=q.device)
    if allowed is None:
        return F.scaled_dot_product_attention(qg, k, v, scale=scale)
    if finite_mask:
        fill = finite_additive_mask(allowed, q.dtype)
        if _fused_backward_breaks(q, k, v, G, allowed):
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(SDPBackend.MATH):
                return F.scaled_dot_product_attention(qg, k, v, attn_mask=fill, scale=scale)
        return F.scaled_dot_product_attention(qg, k, v, attn_mask=fill, scale=scale)
    out = F.scaled_dot_product_attention(qg, k, v, attn_mask=allowed, scale=scale)  # [B, H, S, dv]
    # a row with no allowed key is zeros whatever the backend (CUDA's bfloat16 kernel left values there)
    return out.masked_fill(~allowed.any(-1, keepdim=True), 0.0)


def _fused_backward_breaks(q: Tensor, k: Tensor, v: Tensor, G: Tensor | None, allowed: Tensor) -> bool:
    """Whether the fused SDPA kernels' backward would be wrong for this finite-mask call: a row
    with no allowed key has every score near −1e9, and below float64 the log-sum-exp they save,
    −1e9 + log T, rounds to −1e9 (float32's spacing there is 64), so their backward recomputes
    the row's weights as exp(0) = 1 each, T times too large (torch 2.13's CPU flash kernel: dV
    4.3 and dQ 7.9 off where autograd of the same math gives 5e-7). The forward normalizes by
    its running sum and is right. Such calls take the math backend when a gradient is needed."""
    grads = torch.is_grad_enabled() and any(isinstance(x, Tensor) and x.requires_grad for x in (q, k, v, G))
    return grads and q.dtype != torch.float64 and not bool(allowed.any(-1).all())


def _takes_blocked_path(q: Tensor, k: Tensor, v: Tensor, G: Tensor | None, causal: bool, key_padding_mask: Tensor | None) -> bool:
    """Whether :func:`plga_attention` runs :func:`blocked_attention` (see :data:`BLOCKED_MIN_SCORES`).

    Never at G = I (None or the identity): there PLGA *is* SDPA (Lean
    ``plga_attention_sdpa_special_case``, paper Thm. 5.4(i)), and the flash kernel keeps that
    equality bit for bit."""
    if not (isinstance(G, Tensor) and G.device == q.device and G.ndim in (3, 4)):  # None: SDPA; else apply_g's error
        return False
    b, h, s, _ = q.shape
    t = k.shape[2]
    grads = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v, G))
    eligible = (
        q.device.type == "cpu" and q.dtype == torch.bfloat16 and key_padding_mask is None and not grads
        and (not causal or s <= t) and s >= BLOCKED_MIN_QUERIES and b * h * s * t >= BLOCKED_MIN_SCORES
        and not cpu_has_amx() and cpu_has_low_precision_gemm(torch.bfloat16)
    )
    return eligible and not bool((G == torch.eye(G.shape[-1], dtype=G.dtype, device=G.device)).all())


def blocked_attention(qg: Tensor, k: Tensor, v: Tensor, *, causal: bool, scale: float) -> Tensor:
    """softmax(q' kᵀ · scale + causal mask) v for bfloat16 k, v on the CPU, by blocks of queries.

    q' = q G [B, H, S, d] comes in float32 (formed in float32, never rounded); the scores of a
    block are one float32 batched product with k widened once, so they are as exact as the
    flash kernel's; the softmax runs in float32 and its probabilities are rounded once to
    bfloat16 for the value product, whose bf16 GEMM (AVX512-BF16 dot products) accumulates in
    float32. Causal is bottom-right aligned (query i of S sees keys j ≤ T − S + i; every row
    has a key, so the published −1e9 mask and exclusion agree); a block computes only the keys
    its last query sees. Workspace: :data:`BLOCKED_WORKSPACE` float32 scores (or one head's
    block, if that alone is larger).
    k [B, H, T, d], v [B, H, T, dv] → [B, H, S, dv] in v's dtype.
    """
    b, h, s, d = qg.shape
    t, dv = k.shape[2], v.shape[-1]
    q3 = qg.reshape(b * h, s, d)  # [BH, S, d] float32
    kt = k.to(qg.dtype, memory_format=torch.contiguous_format).reshape(b * h, t, d).transpose(1, 2)  # [BH, d, T] float32, one copy
    v3 = v.reshape(b * h, t, dv)  # [BH, T, dv]
    out = v.new_empty(b * h, s, dv)  # [BH, S, dv]
    rows = min(s, BLOCKED_QUERY_ROWS)
    heads = max(1, min(b * h, BLOCKED_WORKSPACE // (rows * t)))
    later = torch.ones(rows, rows, dtype=torch.bool, device=qg.device).triu(1)  # [rows, rows] key after query
    unused = qg.new_empty(())
    for i in range(0, b * h, heads):
        hs = slice(i, i + heads)
        for j in range(0, s, rows):
            e = min(j + rows, s)
            end = t - s + e if causal else t  # keys the block's last query sees
            scores = torch.baddbmm(unused, q3[hs, j:e], kt[hs, :, :end], beta=0, alpha=scale)  # [heads, e − j, end]
            if causal:  # the block's own diagonal: keys T − S + j … end − 1
                scores[:, :, end - (e - j) :].masked_fill_(later[: e - j, : e - j], float("-inf"))
            weights = torch.softmax(scores, dim=-1).to(v.dtype)  # [heads, e − j, end]
            torch.bmm(weights, v3[hs, :end], out=out[hs, j:e])
    return out.view(b, h, s, dv)


def plga_scores(q: Tensor, k: Tensor, G: Tensor | None = None, *, scale: float | None = None) -> Tensor:
    """The unmasked scaled scores E = (q G) kᵀ · scale → [B, H, S, T] (upstream ``Ep``)."""
    if not (isinstance(q, Tensor) and isinstance(k, Tensor)):
        raise InputTypeError("q and k must be torch tensors")
    if q.ndim != 4 or k.ndim != 4 or q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise InputError(f"q, k must be [B, H, S, d] and [B, H, T, d]; got {tuple(q.shape)}, {tuple(k.shape)}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return (apply_g(q, G) @ k.transpose(-1, -2)) * scale


def one_query_attention(qg: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None, *, scale: float, finite_mask: bool) -> Tensor:
    """One query per row, already multiplied by G: qg [B, H, 1, d], k [B, H, T, d], v [B, H, T, dv],
    ``allowed`` [B or 1, 1, 1, T] or None → [B, H, 1, dv] in qg's dtype.

    :func:`plga_attention` runs it inside a compiled graph (a captured decoding step), where the
    two products are reductions over the keys that Inductor fuses with the mask and the softmax:
    the flash kernel's per-call setup dominated such a step (bench machine: 380 µs a call at
    batch 8 in float32; in bfloat16 at paper-110m the step ran 1.5× faster without it). Scores,
    softmax and the weighted sum are float32 or wider and rounded once, as in the flash kernel;
    masking as :func:`plga_attention_eager` (:func:`_masked_softmax`).
    """
    acc = torch.promote_types(qg.dtype, torch.float32)
    scores = (qg.to(acc) * k.to(acc)).sum(-1)[:, :, None, :] * scale  # [B, H, 1, T]
    weights = _masked_softmax(scores, allowed, finite_mask)  # [B, H, 1, T]
    out = (weights.transpose(-1, -2) * v.to(acc)).sum(-2, keepdim=True)  # [B, H, 1, dv]
    return out.to(qg.dtype)


def _masked_softmax(scores: Tensor, allowed: Tensor | None, finite_mask: bool) -> Tensor:
    """softmax over the last axis of ``scores`` [..., S, T] restricted to ``allowed``: the upstream
    additive −1e9 with ``finite_mask``, else masked entries exactly 0 and an empty row all 0."""
    if allowed is None:
        return torch.softmax(scores, dim=-1)
    if finite_mask:
        return torch.softmax(scores + finite_additive_mask(allowed, scores.dtype), dim=-1)
    filled = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(filled, dim=-1).nan_to_num(0.0)  # empty rows: 0/0 → 0
    return weights.masked_fill(~allowed, 0.0)


def plga_attention_eager(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    G: Tensor | None = None,
    *,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    scale: float | None = None,
    finite_mask: bool = False,
    validate: bool = True,
) -> Tensor:
    """The explicit baseline: scores (q G) kᵀ · scale materialized [B, H, S, T], mask, softmax, · v.

    Same arguments and conventions as :func:`plga_attention`. With ``finite_mask`` the mask
    is the upstream additive −1e9; otherwise masked entries are exactly zero and an empty
    row gives zeros (the ideal masked softmax, Lean ``maskedSoftmax``).
    """
    _check_qkv(q, k, v, G, key_padding_mask, scale, validate)
    s, t = q.shape[2], k.shape[2]
    scores = plga_scores(q, k, G, scale=scale)  # [B, H, S, T]
    allowed = attention_support(s, t, causal=causal, key_padding_mask=key_padding_mask, device=q.device)
    weights = _masked_softmax(scores, allowed, finite_mask)  # [B, H, S, T]
    return weights @ v  # [B, H, S, dv]


# --- The operator chain ---------------------------------------------------------------------


def density_operator(q_rot: Tensor) -> Tensor:
    """A₀ = Q̃ᵀ Q̃ per head over *all* S rows (padding included): [B, H, S, d] → [B, H, d, d]."""
    if not isinstance(q_rot, Tensor) or q_rot.ndim < 2 or not q_rot.is_floating_point():
        raise InputError(f"the rotated queries must be a floating tensor [..., S, d], got {getattr(q_rot, 'shape', q_rot)!r}")
    # one contiguous copy in the chain dtype: a strided operand made matmul copy both sides
    q = q_rot.to(chain_dtype(q_rot.dtype), memory_format=torch.contiguous_format).contiguous()  # [B, H, S, d]
    return q.transpose(-1, -2) @ q


def iswiglu(u: Tensor) -> Tensor:
    """iSwiGLU(u) = u · silu(u) = u² σ(u) ≥ 0."""
    return u * F.silu(u)


def swiglu(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor, w3: Tensor, b3: Tensor) -> Tensor:
    """W₃(silu(W₁x + b₁) ⊙ (W₂x + b₂)) + b₃ on the last axis; weights in torch Linear layout
    (the gate on :func:`~plga.kernels.gemm.gated`, the products on :func:`~plga.kernels.gemm.linear`)."""
    return linear(gated(x, w1, b1, w2, b2), w3, b3)


#: One residual unit: (list of SwiGLU blocks (w1, b1, w2, b2, w3, b3), LN gamma, LN beta).
Unit = tuple[Sequence[Sequence[Tensor]], Tensor, Tensor]


def metric_learner(density: Tensor, ln_weight: Tensor, ln_bias: Tensor, units: Sequence[Unit]) -> Tensor:
    """A = Φ_res(LN(A₀)): row LayerNorm then the residual SwiGLU units, batched over [B, H].

    Each linear is one matmul over all B·H·d rows (weights shared across heads).
    """
    d = density.shape[-1]
    a = F.layer_norm(density, (d,), ln_weight, ln_bias, LAYER_NORM_EPS)  # [B, H, d, d]
    for blocks, gamma, beta in units:
        y = a
        for block in blocks:
            y = swiglu(y, *block)  # [B, H, d, d]
        a = F.layer_norm(y + a, (d,), gamma, beta, LAYER_NORM_EPS)
    return a


def _chain_operands(A: Tensor, **params: Tensor) -> tuple[Tensor, ...]:
    """A [..., H, d, d] and the per-head [H, d, d] power-stage parameters, checked and cast to
    the chain dtype (float32 or wider: see the module docstring)."""
    if A.ndim < 3 or A.shape[-1] != A.shape[-2]:
        raise InputError(f"A must be [..., H, d, d], got {tuple(A.shape)}")
    want = tuple(A.shape[-3:])
    for name, x in params.items():
        if tuple(x.shape) != want:
            raise InputError(f"power-stage parameter {name} must be [H, d, d] = {want} like A, got {tuple(x.shape)}")
        if not x.is_floating_point():
            raise InputError(f"power-stage parameter {name} must be floating point, got {x.dtype}")
    ct = chain_dtype(torch.promote_types(A.dtype, params["W"].dtype))
    return tuple(x.to(ct) for x in (A, *params.values()))


def power_parts(A: Tensor, W: Tensor, b: Tensor, P: Tensor) -> tuple[Tensor, Tensor]:
    """(A_LM, A_P) of the power stage, each [B, H, d, d]: ``A_LM = iSwiGLU(W A + b) + 1e-9``,
    ``A_P = A_LM^{⊙P}``, in float32 or wider (float16 / bfloat16 inputs are upcast, so the 1e-9
    floor of ``A_LM`` never underflows to 0). The float32 power runs on the native kernel where
    it is loaded (:func:`~plga.kernels.native.power`)."""
    return _cast_power_parts(*_chain_operands(A, W=W, b=b, P=P))


def _cast_power_parts(A: Tensor, W: Tensor, b: Tensor, P: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`power_parts` of operands already checked and cast by :func:`_chain_operands`."""
    a_lm = iswiglu(W @ A + b) + EPSILON_ADJ  # [B, H, d, d]
    return a_lm, native.power(a_lm, P)


def power_stage(
    A: Tensor, W: Tensor, b: Tensor, P: Tensor, a: Tensor, b_a: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """(A_LM, A_P, G_LM) from the generator A [B, H, d, d] and per-head [H, d, d] parameters:
    :func:`power_parts`, then ``G_LM = a A_P + b_a`` (left matrix products)."""
    A, W, b, P, a, b_a = _chain_operands(A, W=W, b=b, P=P, a=a, b_a=b_a)
    a_lm, a_p = _cast_power_parts(A, W, b, P)
    return a_lm, a_p, a @ a_p + b_a  # G_LM [B, H, d, d]


def apply_power_g(q: Tensor, a: Tensor, a_p: Tensor, b_a: Tensor) -> Tensor:
    """q' = q G_LM with ``G_LM = a A_P + b_a`` never formed: ``(q a) A_P + q b_a`` per head, for q
    [B, H, S, d], a and b_a [H, d, d], A_P [B, H, d, d] → [B, H, S, d] in q's dtype (computed in
    A_P's dtype, rounded once, as :func:`apply_g` does). For a few queries it is S·d² multiply-adds
    per matrix where forming G_LM takes d³: a captured ``kv`` step (one query) uses it."""
    ct = torch.promote_types(q.dtype, a_p.dtype)
    qc = q.to(ct)
    return ((qc @ a.to(ct)) @ a_p + qc @ b_a.to(ct)).to(q.dtype)  # [B, H, S, d]


def layer_weights_of(mha: Any) -> dict[str, Any]:
    """The operator-chain weights of a ``PLGAMultiHeadAttention`` module as a plain dict."""
    units = []
    for unit in mha.reslayerAs:
        blocks = [
            (g.gluw1.weight, g.gluw1.bias, g.gluw2.weight, g.gluw2.bias, g.gluw3.weight, g.gluw3.bias)
            for g in unit.denseAs
        ]
        units.append((blocks, unit.layernormA.weight, unit.layernormA.bias))
    p = mha.plgatt_layer
    return {
        "ln_weight": mha.layernorm1.weight,
        "ln_bias": mha.layernorm1.bias,
        "units": units,
        "W": p.Wlst,
        "b": p.blst,
        "P": p.pwlst,
        "a": p.alst,
        "b_a": p.balst,
    }


def operator_chain(q_rot: Tensor, layer_weights: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(A, A_LM, A_P, G_LM), each [B, H, d, d], from the rotated queries q_rot [B, H, S, d].

    ``layer_weights`` is a ``PLGAMultiHeadAttention`` module (``model.decoder.dec_layers[i].mha1``)
    or a dict with keys ln_weight, ln_bias, units, W, b, P, a, b_a (see :func:`layer_weights_of`).
    Always computed in float32 or wider (low-precision activations are upcast).
    """
    w = layer_weights if isinstance(layer_weights, dict) else layer_weights_of(layer_weights)
    density = density_operator(q_rot)  # [B, H, d, d]
    ct = density.dtype
    if w["ln_weight"].dtype != ct:
        cast = lambda t: t.to(ct)  # noqa: E731
        units = [([tuple(map(cast, blk)) for blk in blocks], cast(g), cast(bt)) for blocks, g, bt in w["units"]]
        A = metric_learner(density, cast(w["ln_weight"]), cast(w["ln_bias"]), units)
    else:
        A = metric_learner(density, w["ln_weight"], w["ln_bias"], w["units"])
    a_lm, a_p, g_lm = power_stage(A, w["W"], w["b"], w["P"], w["a"], w["b_a"])
    return A, a_lm, a_p, g_lm


# --- DAG loss -------------------------------------------------------------------------------


def dag_loss(X: Tensor) -> Tensor:
    """|log(tr exp(X ⊙ X) / d)| per matrix over the last two axes, overflow-safe and differentiable.

    With N = X ⊙ X ≥ 0, ``log tr exp N = c + log tr exp(N − cI)`` for any constant c; c is the
    largest real eigenvalue of N (the Perron root, computed without gradient), so the matrix
    exponential never overflows for a normal N and the gradient is exact (c is a constant shift).

    A strongly non-normal N (a weighted DAG: nilpotent, large entries) can still overflow
    inside the matrix exponential although its trace is small; for those matrices the value is
    taken from the eigenvalues in float64 (``Σ e^{λ−c}``, as the reference computes it), so
    the loss is always finite. Its gradient there is exp(N)ᵀ/tr exp N, which genuinely exceeds
    the dtype's range: it comes back non-finite, never silently clipped.
    """
    if not isinstance(X, Tensor) or X.ndim < 2 or X.shape[-1] != X.shape[-2] or X.shape[-1] == 0:
        raise InputError(f"dag_loss needs square matrices [..., d, d] with d ≥ 1, got {getattr(X, 'shape', X)!r}")
    if not X.is_floating_point():
        raise InputError(f"dag_loss needs a floating-point tensor, got {X.dtype}")
    n = X * X  # [..., d, d]
    d = n.shape[-1]
    with torch.no_grad():
        lam = torch.linalg.eigvals(n.detach().to(torch.float64))  # [..., d]
        c64 = lam.real.amax(dim=-1)  # [...]
        c = c64.to(n.dtype)
    eye = torch.eye(d, dtype=n.dtype, device=n.device)
    shifted = torch.linalg.matrix_exp(n - c[..., None, None] * eye)
    tr = torch.diagonal(shifted, dim1=-2, dim2=-1).sum(-1)
    loss = torch.abs(c + torch.log(tr) - math.log(d))
    bad = ~torch.isfinite(loss)
    if bool(bad.any()):
        with torch.no_grad():
            total = torch.exp(lam - c64[..., None].to(lam.dtype)).sum(-1).real  # Σ e^{λ−c} ∈ [1, d]
            exact = torch.abs(c64 + torch.log(total) - math.log(d)).to(loss.dtype)
        loss = torch.where(bad, exact, loss)
    return loss


__all__ = [
    "BLOCKED_MIN_QUERIES", "BLOCKED_MIN_SCORES", "BLOCKED_QUERY_ROWS", "BLOCKED_WORKSPACE", "EPSILON_ADJ",
    "LAYER_NORM_EPS", "MASK_FILL", "apply_g", "apply_power_g", "apply_rope", "attention_support", "blocked_attention", "chain_dtype",
    "cpu_has_amx", "dag_loss", "density_operator", "finite_additive_mask", "iswiglu", "layer_weights_of", "metric_learner",
    "operator_chain", "plga_attention", "plga_attention_eager", "plga_scores", "power_parts", "power_stage",
    "rope_tables", "swiglu",
]
