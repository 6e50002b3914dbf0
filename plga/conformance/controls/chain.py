"""Operator-chain controls: the chain computed from the layer weights with one bug."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from .. import eager as eg
from ..adapter import Adapter

#: Where the size-switched chain bugs switch on: Gram rows summed in chunks of 256 queries, a
#: batched path past 16 (batch × heads) matrices, power-stage weights for heads in chunks of 16.
GRAM_ROW_CHUNK = 256
GRAM_ROW_CHUNK_WIDE = 512  # the same, in a kernel tuned for long prompts
POOLED_PAST = 16
HEAD_CHUNK = 16
WIDTH_TILE = 64  # the metric learner's SwiGLU hidden units in tiles of 64


def tiles_counted_down(n: int, tile: int) -> int:
    """The hidden units a loop over ``max(1, n // tile)`` tiles reaches (the last one takes the
    rest only when it is the only one): past two tiles a partial last tile is lost."""
    return n if n // tile <= 1 else n - n % tile


def _density(q_rot: Tensor, bug: str) -> Tensor:
    """The Gram q_rotᵀ q_rot [B, H, d, d] with the size-switched density bugs."""
    b, h, s, d = q_rot.shape
    q = q_rot
    if bug == "gram_odd_feature_dropped" and d % 2 and d > 1:  # feature pairs: the odd last one is lost
        q = torch.cat([q[..., :-1], torch.zeros_like(q[..., -1:])], dim=-1)
    chunk = {"gram_row_chunk_tail_dropped": GRAM_ROW_CHUNK, "gram_row_chunk512_tail_dropped": GRAM_ROW_CHUNK_WIDE}.get(bug)
    if chunk and s > chunk and s % chunk:
        q = q[:, :, : s - s % chunk]  # the partial last chunk of query rows never summed
    g = eg.density_operator(q)
    if bug == "gram_pooled_over_batch" and b * h > POOLED_PAST:  # a batched path that pools the batch
        g = g.mean(dim=0, keepdim=True).expand_as(g)
    return g


class ChainControl(Adapter):
    """``operator_chain`` only (float32, float64), with one ``bug``: ``first_dense_block_only``,
    ``bias_accumulated``, ``storage_read_as_contiguous``, ``iswiglu_flushed_below_minus_30``, or a size-switched one (odd d, past 256 or 512 query rows, past 16
    matrices, past 16 heads)."""

    dtypes = ("float32", "float64")
    capabilities = frozenset({"operator_chain"})

    def __init__(self, name: str, bug: str) -> None:
        self.name, self.bug, self.version = name, bug, "control"

    def operator_chain(self, q_rot: Tensor, layer_weights: Mapping[str, Any]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        if self.bug == "storage_read_as_contiguous":  # a native kernel handed data_ptr without its strides
            q_rot = torch.as_strided(q_rot, q_rot.shape, torch.empty(q_rot.shape).stride(), q_rot.storage_offset())
        w = dict(layer_weights)
        if self.bug == "first_dense_block_only":
            w["units"] = [(blocks[:1], g, b) for blocks, g, b in w["units"]]
        if self.bug == "swiglu_width_tail_dropped":  # hidden units past the last whole tile never summed
            w["units"] = [([(*blk[:4], _tail_zeroed(blk[4]), blk[5]) for blk in blocks], g, b) for blocks, g, b in w["units"]]
        cw = eg.cast_layer_weights(w, q_rot.dtype, q_rot.device)
        h = q_rot.shape[1]
        if self.bug == "power_heads_mod_16" and h > HEAD_CHUNK:  # head h reads head h mod 16's weights
            idx = torch.arange(h, device=q_rot.device) % HEAD_CHUNK
            cw.update({k: cw[k][idx] for k in ("W", "b", "P", "a", "b_a")})
        A = eg.metric_learner(_density(q_rot, self.bug), cw)
        a_lm, a_p, g_lm = eg.power_stage(A, cw["W"], cw["b"], cw["P"], cw["a"], cw["b_a"])
        if self.bug == "iswiglu_flushed_below_minus_30":  # a fast exp whose range ends there: σ(u) taken as 0
            u = cw["W"] @ A + cw["b"]  # [B, H, d, d]
            a_lm = torch.where(u < -30.0, torch.full_like(a_lm, eg.EPSILON_ADJ), a_lm)
            a_p = torch.pow(a_lm, cw["P"])
            g_lm = cw["a"] @ a_p + cw["b_a"]
        if self.bug == "bias_accumulated":
            b_a = layer_weights["b_a"]
            g_lm = b_a.add_((cw["a"] @ a_p).to(b_a.dtype))  # G_LM accumulated into the bias buffer
        return A, a_lm, a_p, g_lm


def _tail_zeroed(w3: Any) -> Any:
    """The output projection [out, n] without the columns of hidden units a tiled loop misses."""
    w3 = torch.as_tensor(w3).clone()
    w3[:, tiles_counted_down(w3.shape[1], WIDTH_TILE) :] = 0
    return w3


__all__ = ["ChainControl", "tiles_counted_down"]
