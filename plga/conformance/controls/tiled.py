"""A tiled PLGA attention kernel written the way fast kernels are, with switchable bugs.

:func:`tiled_attention` walks head chunks, value tiles and key blocks with an online softmax
(running max, running sum, rescaled accumulator: FlashAttention-2's forward), or combines
key splits by their log-sum-exp (split-K); :class:`FlashBackward` is FA-2's backward (P
recomputed from the saved log-sum-exp, D = rowsum(dO∘O)). It shares no code with the suite's
eager baseline or the reference. Each negative control of :mod:`.registry` turns on one
``bug`` — most of them only visible past a block, a chunk or a tile, or for one input region.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

from ..adapter import Adapter

#: Where the long-context and long-prompt bugs of the controls switch on: key lengths from 512 (a
#: flash-decoding split path; a two-pass path up to 1024), query blocks of 256 rows, launches of
#: 4096 query rows (B·H·S flattened) and a 256-wide head-dim tile.
LONG_KEYS = 512
TWO_PASS_KEYS_END = 1024
QUERY_BLOCK = 256
ROW_CHUNK = 4096
HEAD_DIM_TILE = 256
BACKWARD_FEATURE_TILE = 128  # the backward's tiles of q G / k features
GRID = 65535  # a CUDA grid's y/z dimension: rows or (batch, head) pairs past it are never launched


@dataclasses.dataclass(frozen=True)
class Tiling:
    """Block sizes and reduction choices of one kernel variant."""

    key_block: int = 64
    head_chunk: int = 4
    value_tile: int = 32
    splits: int = 1  # > 1: split-K, partial softmax per split combined with the LSE
    reverse_keys: bool = False  # walk key blocks last to first
    bug: str = ""


def _support(b: int, s: int, t: int, causal: bool, pad: Tensor | None, bug: str, device: torch.device) -> Tensor:
    """Allowed (query, key) pairs [B or 1, 1, S, T] (bottom-right causal)."""
    allowed = torch.ones(1, 1, s, t, dtype=torch.bool, device=device)
    if causal:
        diag = 0 if bug == "causal_top_left" else t - s
        allowed = allowed & torch.ones(s, t, dtype=torch.bool, device=device).tril(diagonal=diag)
    if bug == "mid_keys_padding_dropped" and LONG_KEYS <= t < TWO_PASS_KEYS_END:  # a two-pass path never handed the mask
        pad = None
    if pad is not None and not (bug == "s1_drops_padding" and s == 1):
        allowed = allowed & ~pad[:, None, None, :]
    return allowed


def _g_for(G: Tensor | None, h0: int, h1: int, bug: str) -> Tensor | None:
    if G is None:
        return None
    if bug == "d128_g_transposed" and G.shape[-1] == 128:  # a specialised d = 128 path loads G column-major
        G = G.transpose(-1, -2)
    if bug == "chunk_relative_g":
        h0, h1 = 0, h1 - h0
    if G.ndim == 4:
        return G[:1, h0:h1] if bug == "batched_g_first_only" else G[:, h0:h1]
    return G[h0:h1]


def _block_ranges(t: int, tiling: Tiling) -> list[tuple[int, int]]:
    bk = tiling.key_block
    stop = t - t % bk if tiling.bug == "tail_block_dropped" and t > bk else t
    if tiling.bug == "full_last_block_dropped" and t > bk and t % bk == 0:  # the tail sized t % bk, no "or bk"
        stop = t - bk
    blocks = [(k0, min(k0 + bk, stop)) for k0 in range(0, stop, bk)]
    return blocks[::-1] if tiling.reverse_keys else blocks


def tiled_forward(q: Tensor, k: Tensor, v: Tensor, G: Tensor | None, *, causal: bool, key_padding_mask: Tensor | None,
                  scale: float | None, tiling: Tiling) -> tuple[Tensor, Tensor]:
    """(out [B,H,S,dv], lse [B,H,S]) by online softmax over key blocks; lse = −inf on empty rows."""
    bug = tiling.bug
    b, h, s, d = q.shape
    t, dv = k.shape[2], v.shape[-1]
    if bug == "scale_given_ignored" or scale is None:
        sc = 1.0 / math.sqrt(d)
    else:
        sc = float(scale)
    if bug == "scale_none_is_one" and scale is None:
        sc = 1.0
    allowed = _support(b, s, t, causal, key_padding_mask, bug, q.device)
    feat = d  # the features each score sums over
    if bug == "odd_d_last_feature_dropped" and d % 2 and d > 1:  # loads in pairs: the odd last feature is lost
        feat = d - 1
    if bug == "wide_d_second_half_dropped" and d > HEAD_DIM_TILE:  # one 256-wide head-dim tile only
        feat = HEAD_DIM_TILE
    splits = tiling.splits
    if t >= LONG_KEYS and (bug == "long_keys_plain_average"  # a flash-decoding path for long contexts
                           or (bug == "decode_long_keys_plain_average" and s == 1)  # ... for decoding steps only
                           or (bug == "d64_long_keys_plain_average" and d == 64)):  # ... in the d = 64 kernel only
        splits = math.ceil(t / tiling.key_block)
    if bug in ("thread_splits_plain_average", "thread_splits_tree_power_of_two"):  # a key split per intra-op thread
        splits = torch.get_num_threads()
    out = torch.zeros(b, h, s, dv, dtype=q.dtype, device=q.device)
    lse = torch.full((b, h, s), -math.inf, dtype=q.dtype, device=q.device)
    hc = tiling.head_chunk
    h_stop = h - h % hc if bug == "last_head_chunk_skipped" and h > hc else h
    vt = tiling.value_tile
    dv_used = min(dv, d) if bug == "dv_assumed_d" else dv
    v_stop = dv_used - dv_used % vt if bug == "last_value_tile_dropped" and dv_used > vt else dv_used
    for h0 in range(0, h_stop, hc):
        h1 = min(h0 + hc, h)
        g = _g_for(G, h0, h1, bug)
        qg = q[:, h0:h1] if g is None else q[:, h0:h1] @ g.to(q.dtype)  # [B, hc, S, d]
        for v0 in range(0, v_stop, vt):
            v1 = min(v0 + vt, v_stop)
            m = torch.full((b, h1 - h0, s, 1), -math.inf, dtype=q.dtype, device=q.device)
            l_ = torch.zeros_like(m)
            acc = torch.zeros(b, h1 - h0, s, v1 - v0, dtype=q.dtype, device=q.device)
            parts = []
            for k0, k1 in _block_ranges(t, tiling):
                x = (qg[..., :feat] @ k[:, h0:h1, k0:k1, :feat].transpose(-1, -2)) * sc  # [B, hc, S, bk]
                ok = allowed[..., k0:k1]
                if bug == "mask_shift_in_tail" and k1 - k0 < tiling.key_block and k1 == t and t > tiling.key_block:
                    ok = torch.roll(ok, 1, dims=-1)
                x = x.masked_fill(~ok, -math.inf)
                if splits > 1:
                    parts.append((x, k0, k1))
                    continue
                m_new = torch.maximum(m, x.amax(dim=-1, keepdim=True))
                safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
                p = torch.exp(x - safe)  # [B, hc, S, bk]
                alpha = torch.ones_like(m) if bug == "running_max_not_rescaled" else torch.exp(m - safe)
                l_ = l_ * alpha + p.sum(dim=-1, keepdim=True)
                acc = acc * alpha + p @ v[:, h0:h1, k0:k1, v0:v1]
                m = m_new
            if splits > 1:
                acc, l_, m = _split_k(parts, v[:, h0:h1, :, v0:v1], dataclasses.replace(tiling, splits=splits))
            if bug == "empty_rows_nan":
                o = acc / l_
            else:
                o = torch.where(l_ > 0, acc / torch.where(l_ > 0, l_, torch.ones_like(l_)), torch.zeros_like(acc))
            if bug in ("causal_empty_rows_nan", "causal_empty_rows_uniform") and key_padding_mask is not None:
                # the kernel zeroes the rows of fully padded batch elements only; a row emptied by
                # causal ∩ padding (a left-padded prompt's first queries) keeps 0/0 or, with a
                # large finite fill, the mean of every value
                partly = (l_ == 0) & ~key_padding_mask.all(dim=-1)[:, None, None, None]  # [B, hc, S, 1]
                fill = acc / l_ if bug == "causal_empty_rows_nan" else v[:, h0:h1, :, v0:v1].mean(dim=-2, keepdim=True)
                o = torch.where(partly, fill, o)
            if bug == "query_tail_dropped" and s > QUERY_BLOCK and s % QUERY_BLOCK:
                o = o.clone()
                o[:, :, s - s % QUERY_BLOCK :] = 0  # the query-block loop stops at the last full block
            out[:, h0:h1, :, v0:v1] = o
            lse[:, h0:h1] = (m + torch.log(l_)).squeeze(-1)
    rows = out.view(-1, dv)  # [B·H·S, dv]: the rows a launch over flattened queries walks
    if bug == "row_chunks_tail_dropped" and rows.shape[0] > ROW_CHUNK and rows.shape[0] % ROW_CHUNK:
        rows[rows.shape[0] - rows.shape[0] % ROW_CHUNK :] = 0  # the partial last chunk of rows is never launched
    if bug == "causal_rows_past_grid" and causal:
        rows[GRID:] = 0  # the causal kernel's query rows on one grid dimension: rows past it never launched
    if bug == "batch_heads_past_grid":
        out.view(b * h, s, dv)[GRID:] = 0  # (batch, head) pairs on one grid dimension
    return out, lse


def _split_k(parts: list[tuple[Tensor, int, int]], v: Tensor, tiling: Tiling) -> tuple[Tensor, Tensor, Tensor]:
    """Combine per-split softmaxes: each split's (o_i, lse_i); out = Σ exp(lse_i − lse) o_i."""
    n = len(parts)
    per = max(1, math.ceil(n / tiling.splits))
    outs, lses = [], []
    for i in range(0, n, per):
        x = torch.cat([p[0] for p in parts[i : i + per]], dim=-1)
        k0, k1 = parts[i][1], parts[min(i + per, n) - 1][2]
        m = x.amax(dim=-1, keepdim=True)
        safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(x - safe)
        den = e.sum(dim=-1, keepdim=True)
        o = torch.where(den > 0, (e @ v[:, :, k0:k1]) / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(e[..., :1]))
        outs.append(o)
        lses.append(safe + torch.log(den))  # −inf for an empty split
    lse_all = torch.logsumexp(torch.stack(lses), dim=0)  # [B, hc, S, 1]
    safe_all = torch.where(torch.isfinite(lse_all), lse_all, torch.zeros_like(lse_all))
    if tiling.bug == "thread_splits_tree_power_of_two":  # a pairwise merge tree over the threads' splits that drops
        kept = 2 ** int(math.log2(tiling.splits))  # the odd one out per level: it keeps the first 2^⌊log2 n⌋ (n = 3: 2)
        outs, lses = outs[:kept], lses[:kept]
        lse_all = torch.logsumexp(torch.stack(lses), dim=0)
        safe_all = torch.where(torch.isfinite(lse_all), lse_all, torch.zeros_like(lse_all))
    if tiling.bug in ("split_k_plain_average", "long_keys_plain_average", "thread_splits_plain_average",
                      "decode_long_keys_plain_average", "d64_long_keys_plain_average"):
        weights = [torch.isfinite(x).to(o.dtype) / max(1, len(outs)) for x in lses]
    else:
        weights = [torch.exp(x - safe_all) for x in lses]
    acc = sum(w * o for w, o in zip(weights, outs, strict=True))
    l_ = torch.isfinite(lse_all).to(acc.dtype)  # 1 where the row has a key, else 0
    return acc, l_, safe_all  # lse = safe_all + log(l_): the row's LSE, −inf when empty


class FlashBackward(torch.autograd.Function):
    """FA-2: forward saves (out, lse); backward recomputes P = exp(s − lse) block by block."""

    @staticmethod
    def forward(ctx, q, k, v, G, causal, pad, scale, tiling):  # type: ignore[override]
        out, lse = tiled_forward(q, k, v, G, causal=causal, key_padding_mask=pad, scale=scale, tiling=tiling)
        ctx.save_for_backward(q, k, v, G, out, lse)
        ctx.causal, ctx.pad, ctx.scale, ctx.tiling = causal, pad, scale, tiling
        ctx.kv_shared = k.shape[1] > 1 and k.stride(1) == 0 and v.stride(1) == 0  # a multi-query caller's expanded k, v
        ctx.g_over_batch = G is not None and G.ndim == 4 and G.shape[0] > 1 and G.stride(0) == 0
        return out

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        q, k, v, G, out, lse = ctx.saved_tensors
        tiling: Tiling = ctx.tiling
        bug = tiling.bug
        as_contiguous = lambda x: torch.as_strided(x, x.shape, torch.empty(x.shape).stride(), x.storage_offset())  # noqa: E731
        if bug == "backward_dout_as_contiguous":  # a native backward handed dO's pointer, assuming a contiguous layout
            dout = as_contiguous(dout)
        if bug == "backward_saved_inputs_as_contiguous":  # ... handed the saved q, k, v's pointers the same way
            q, k, v = as_contiguous(q), as_contiguous(k), as_contiguous(v)
        b, _, s, d = q.shape
        t = k.shape[2]
        sc = 1.0 / math.sqrt(d) if ctx.scale is None else float(ctx.scale)
        allowed = _support(b, s, t, ctx.causal, ctx.pad, "", q.device)
        qg = q if G is None else q @ G
        if bug == "backward_query_tail_dropped" and s > QUERY_BLOCK and s % QUERY_BLOCK:
            dout = dout.clone()
            dout[:, :, s - s % QUERY_BLOCK :] = 0  # the backward's query-block loop stops at the last full block
        delta = (dout * out).sum(dim=-1, keepdim=True)  # D = rowsum(dO ∘ O) [B, H, S, 1]
        lse_ = torch.where(torch.isfinite(lse), lse, torch.full_like(lse, math.inf))[..., None]
        if bug == "backward_empty_rows_nan":  # P = exp(−inf − (−inf)) = NaN on rows with no key
            lse_ = lse[..., None]
        dqg = torch.zeros_like(qg)
        dk, dv = torch.zeros_like(k), torch.zeros_like(v)
        for k0 in range(0, t, tiling.key_block):
            k1 = min(k0 + tiling.key_block, t)
            x = (qg @ k[:, :, k0:k1].transpose(-1, -2)) * sc
            p = torch.exp(x.masked_fill(~allowed[..., k0:k1], -math.inf) - lse_)  # [B, H, S, bk]
            dv[:, :, k0:k1] = p.transpose(-1, -2) @ dout
            dp = dout @ v[:, :, k0:k1].transpose(-1, -2)
            ds = p * (dp - delta)
            dqg = dqg + (ds @ k[:, :, k0:k1]) * sc
            dk_scale = 1.0 if bug == "dk_missing_scale" else sc
            dk[:, :, k0:k1] = (ds.transpose(-1, -2) @ qg) * dk_scale
        if bug == "backward_head_dim_tail_dropped" and d > BACKWARD_FEATURE_TILE and d % BACKWARD_FEATURE_TILE:
            cut = d - d % BACKWARD_FEATURE_TILE  # feature tiles of 128 counted as d // 128: the partial last one is lost
            dqg[..., cut:] = 0
            dk[..., cut:] = 0
        frozen_g = G is not None and not ctx.needs_input_grad[3]
        dq = dqg if G is None or (bug == "backward_frozen_g_dropped" and frozen_g) else dqg @ G.transpose(-1, -2)
        dG = None
        if G is not None:
            dG = q.transpose(-1, -2) @ dqg  # [B, H, d, d]
            if G.ndim == 3:
                dG = dG.sum(dim=0)
            if bug == "dg_transposed":
                dG = dG.transpose(-1, -2)
            if bug == "backward_g_over_batch_summed" and ctx.g_over_batch:  # summed here, and again by autograd's expand
                dG = dG.sum(dim=0, keepdim=True).expand_as(dG)
        if bug == "backward_shared_kv_summed" and ctx.kv_shared:  # summed over heads here, and again by autograd's expand
            dk, dv = dk.sum(dim=1, keepdim=True).expand_as(dk), dv.sum(dim=1, keepdim=True).expand_as(dv)
        if bug == "backward_needs_grad_off_by_one" and not ctx.needs_input_grad[2]:
            dk = None  # dK gated on v's flag (needs_input_grad[2]) instead of k's ([1])
        return dq, dk, dv, dG, None, None, None, None


class TiledAttention(Adapter):
    """An attention-only adapter around the tiled kernel (float32 and float64)."""

    dtypes = ("float32", "float64")
    capabilities = frozenset({"attention", "causal", "key_padding_mask", "backward"})
    dtype_policy = "tiled online softmax in the input dtype"
    mutate = ""  # "q" | "G" | "mask": the in-place mutators

    def __init__(self, name: str, tiling: Tiling, mutate: str = "") -> None:
        self.name, self.tiling, self.mutate = name, tiling, mutate
        self.version = "control"

    def attention(self, q: Tensor, k: Tensor, v: Tensor, G: Tensor | None, *, causal: bool = False,
                  key_padding_mask: Tensor | None = None, scale: float | None = None, finite_mask: bool = False) -> Tensor:
        if self.mutate == "q" and G is not None and not q.requires_grad:
            q.copy_(q @ G.to(q.dtype))  # q' = q G written back into q, then G = I
            G = torch.eye(q.shape[-1], dtype=q.dtype, device=q.device).expand_as(G)
        elif self.mutate == "G" and G is not None and not G.requires_grad:
            sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
            G.mul_(sc)  # the scale folded into G, in place
            scale = 1.0
        elif self.mutate == "mask" and key_padding_mask is not None:
            key_padding_mask[:, 0] = False  # "make sure every row has a key"
        bug = self.tiling.bug
        if bug == "batch_heads_merged_by_strides" and v.stride(-1) == 1:
            # B and H merged without a copy, the batch stride taken as H × the head stride (true for a
            # contiguous tensor or a slice of one, not for a slice of a fused [B, T, 3, H, d] buffer)
            b, h, t, dv = v.shape
            v = torch.as_strided(v, (b, h, t, dv), (h * v.stride(1), v.stride(1), v.stride(2), 1), v.storage_offset())
        if bug == "shared_kv_padding_dropped" and k.shape[1] > 1 and k.stride(1) == 0 and v.stride(1) == 0:
            key_padding_mask = None  # a multi-query fast path (keys and values shared by every head) loses the mask
        return FlashBackward.apply(q, k, v, G, causal, key_padding_mask, scale, self.tiling)


__all__ = ["FlashBackward", "TiledAttention", "Tiling", "tiled_forward"]
