"""The ``nn.Module`` tree of the PLDR-LLM v510 decoder, with the upstream state-dict names.

The tree reproduces the published ``pldr_model_v510`` names, so a released ``.pth`` state dict
loads with ``load_state_dict`` directly::

    decoder.embedding, decoder.layernorm1, final_layer,
    decoder.dec_layers.{i}.mha1.{wq,wk,wv,dense,layernorm1},
    decoder.dec_layers.{i}.mha1.plgatt_layer.{Wlst,blst,pwlst,alst,balst},
    decoder.dec_layers.{i}.mha1.reslayerAs.{j}.{denseAs.{k}.{gluw1,gluw2,gluw3},layernormA},
    decoder.dec_layers.{i}.{ffn.{gluw1,gluw2,gluw3},layernorm1,layernorm2}

A *collapsed* tree has no ``mha1.layernorm1``, ``reslayerAs`` or ``plgatt_layer`` and stores
one constant operator per layer and head in the buffer ``decoder.collapsed_G`` [L, H, d, d].
The operator chain's parameters (and ``collapsed_G``) stay float32 when the model is cast to
bfloat16 / float16 (``A_LM``'s 1e-9 floor underflows in float16).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..reference.config import PLDRConfig
from ..reference.spec import LAYER_NORM_EPS
from .functional import apply_power_g, operator_chain, power_parts, power_stage

LOW_PRECISION = (torch.float16, torch.bfloat16)
_LOW = LOW_PRECISION


class _KeepWide(nn.Module):
    """Modules whose floating tensors stay float32 when the model is cast to bf16/fp16."""

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> Any:  # type: ignore[override]
        def keep(t: Tensor) -> Tensor:
            out = fn(t)
            if t.is_floating_point() and out.dtype in _LOW and t.dtype not in _LOW:
                return t.to(device=out.device, dtype=torch.float32)
            return out

        return super()._apply(keep, recurse)


class GLUVariant(nn.Module):
    """SwiGLU ``gluw3(silu(gluw1(x)) * gluw2(x))`` (upstream ``GLUVariant``)."""

    def __init__(self, d_in: int, d_hidden: int, d_out: int) -> None:
        super().__init__()
        self.gluw1 = nn.Linear(d_in, d_hidden)
        self.gluw2 = nn.Linear(d_in, d_hidden)
        self.gluw3 = nn.Linear(d_hidden, d_out)

    def forward(self, x: Tensor) -> Tensor:
        return self.gluw3(F.silu(self.gluw1(x)) * self.gluw2(x))


class ResLayerA(_KeepWide):
    """One residual unit of the metric learner: LN(glu_k ∘ … ∘ glu_1(x) + x)."""

    def __init__(self, d: int, a_dff: int, num_dense: int) -> None:
        super().__init__()
        self.denseAs = nn.ModuleList(GLUVariant(d, a_dff, d) for _ in range(num_dense))
        self.layernormA = nn.LayerNorm(d, eps=LAYER_NORM_EPS)


class ChainLayerNorm(_KeepWide, nn.LayerNorm):
    """``mha1.layernorm1``, the row LayerNorm of the Gram, kept in float32 or wider."""


class PLGALayer(_KeepWide):
    """Per-head power-law parameters W, b, P, a, b_a (upstream ``plga_layer``), each [H, d, d]."""

    def __init__(self, num_heads: int, depth: int) -> None:
        super().__init__()
        shape = (num_heads, depth, depth)
        self.Wlst = nn.Parameter(torch.empty(shape))
        self.blst = nn.Parameter(torch.zeros(shape))
        self.pwlst = nn.Parameter(torch.empty(shape))
        self.alst = nn.Parameter(torch.empty(shape))
        self.balst = nn.Parameter(torch.zeros(shape))
        for p in (self.Wlst, self.pwlst, self.alst):
            nn.init.xavier_normal_(p)  # the upstream init (3-D fan rules)


class PLGAMultiHeadAttention(nn.Module):
    """``mha1``: projections, the metric learner and the PLGA parameters of one layer."""

    def __init__(self, config: PLDRConfig, collapsed: bool = False) -> None:
        super().__init__()
        c, d = config, config.depth
        self.wq = nn.Linear(c.d_model, c.d_model)
        self.wk = nn.Linear(c.d_model, c.d_model)
        self.wv = nn.Linear(c.d_model, c.d_model)
        self.dense = nn.Linear(c.d_model, c.d_model)
        self.collapsed = collapsed
        if not collapsed:
            self.layernorm1 = ChainLayerNorm(d, eps=LAYER_NORM_EPS)
            self.reslayerAs = nn.ModuleList(ResLayerA(d, c.A_dff, c.num_denseA) for _ in range(c.num_reslayerA))
            self.plgatt_layer = PLGALayer(c.num_heads, d)

    def chain(self, q_rot: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(A, A_LM, A_P, G_LM) from rotated queries [B, H, S, d]."""
        if self.collapsed:
            raise RuntimeError("a collapsed model has no metric learner")
        return operator_chain(q_rot, self)

    def power(self, A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(A_LM, A_P, G_LM) from the generator A [B, H, d, d]."""
        p = self.plgatt_layer
        return power_stage(A, p.Wlst, p.blst, p.pwlst, p.alst, p.balst)

    def power_parts(self, A: Tensor) -> tuple[Tensor, Tensor]:
        """(A_LM, A_P) from the generator A [B, H, d, d], without G_LM."""
        p = self.plgatt_layer
        return power_parts(A, p.Wlst, p.blst, p.pwlst)

    def apply_power_g(self, q: Tensor, a_p: Tensor) -> Tensor:
        """q G_LM for q [B, H, S, d] and this layer's G_LM = a A_P + b_a, without forming G_LM."""
        p = self.plgatt_layer
        return apply_power_g(q, p.alst, a_p, p.balst)


class PLDRDecoderLayer(nn.Module):
    def __init__(self, config: PLDRConfig, collapsed: bool = False) -> None:
        super().__init__()
        self.mha1 = PLGAMultiHeadAttention(config, collapsed)
        self.ffn = GLUVariant(config.d_model, config.dff, config.d_model)
        self.layernorm1 = nn.LayerNorm(config.d_model, eps=LAYER_NORM_EPS)
        self.layernorm2 = nn.LayerNorm(config.d_model, eps=LAYER_NORM_EPS)


class PLDRDecoder(nn.Module):
    def __init__(self, config: PLDRConfig, collapsed: bool = False) -> None:
        super().__init__()
        c = config
        self.embedding = nn.Embedding(c.input_vocab_size, c.d_model)
        self.layernorm1 = nn.LayerNorm(c.d_model, eps=LAYER_NORM_EPS)
        self.dec_layers = nn.ModuleList(PLDRDecoderLayer(c, collapsed) for _ in range(c.num_layers))
        if collapsed:
            eye = torch.eye(c.depth).expand(c.num_layers, c.num_heads, c.depth, c.depth).clone()
            self.register_buffer("collapsed_G", eye)

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> Any:  # type: ignore[override]
        g = getattr(self, "collapsed_G", None)

        def keep(t: Tensor) -> Tensor:
            out = fn(t)
            if t is g and out.dtype in _LOW:
                return t.to(device=out.device, dtype=torch.float32)
            return out

        return super()._apply(keep, recurse)


__all__ = [
    "LOW_PRECISION", "ChainLayerNorm", "GLUVariant", "PLDRDecoder", "PLDRDecoderLayer", "PLGALayer",
    "PLGAMultiHeadAttention", "ResLayerA",
]
