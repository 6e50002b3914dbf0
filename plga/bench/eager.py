"""The published algorithm, eager: the baseline every bench ratio is measured against.

What the published v510 code (``burcgokden/PLDR-LLM-with-KVG-cache``) does at inference,
written on the *same* ``PLDRModel`` modules and weights as the fused path:

- scores materialized as a [B, H, S, T] tensor, the −1e9 additive mask, softmax, · v
  (:func:`plga.kernels.plga_attention_eager`);
- full-vocabulary logits at every position of every forward (``final_layer`` on [B, S, D]);
- a KV cache that grows by ``torch.cat`` each step (a new [B, H, T+1, d] tensor per layer);
- the sampling loop in Python: take the last row, argmax, ``torch.cat`` onto the tokens.

Prefill in the eager path is the kernels' own ``PLDRModel.forward(backend="eager",
logits="all")``; decoding needs a concatenating cache, which the kernels do not offer (their
cache is static and preallocated), so it is written here.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import Tensor

from ..kernels import functional as KF


@dataclasses.dataclass
class EagerLayerCache:
    """Upstream ``kvcache`` [k, v, A] + ``Gcache`` [A_LM, G_LM] of one layer."""

    k: Tensor  # [B, H, T, d] rotated keys
    v: Tensor  # [B, H, T, d]
    A: Tensor | None
    A_LM: Tensor | None
    G_LM: Tensor


class EagerDecoder:
    """Published-algorithm decoding on a ``PLDRModel`` (collapsed or not)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        c = model.config
        self.config = c
        self.scale = 1.0 / float(np.sqrt(np.float32(c.depth)))  # 1/√d with √d in float32
        self.emb_scale = float(np.sqrt(np.float32(c.d_model)))
        cos, sin = KF.rope_tables(c.max_seq_len, c.depth, c.rope_base)
        ct = KF.chain_dtype(model.dtype)
        self.cos = cos.to(device=model.device, dtype=ct)
        self.sin = sin.to(device=model.device, dtype=ct)
        self.constant_G = list(model.decoder.collapsed_G.unbind(0)) if getattr(model, "collapsed", False) else None

    def _heads(self, x: Tensor) -> Tensor:
        b, s, _ = x.shape
        return x.view(b, s, self.config.num_heads, self.config.depth).transpose(1, 2)  # [B, H, S, d]

    def layer(self, i: int, h: Tensor, start: int, past: EagerLayerCache | None, mode: str) -> tuple[Tensor, EagerLayerCache]:
        layer = self.model.decoder.dec_layers[i]
        mha = layer.mha1
        b, s, dm = h.shape
        cos, sin = self.cos[start : start + s], self.sin[start : start + s]
        style = self.config.rope_style
        q = KF.apply_rope(self._heads(mha.wq(h)), cos, sin, style)  # [B, H, S, d]
        k = KF.apply_rope(self._heads(mha.wk(h)), cos, sin, style)
        v = self._heads(mha.wv(h))
        A = a_lm = None
        if self.constant_G is not None:
            g = self.constant_G[i]
        elif past is None:
            A, a_lm, _, g = mha.chain(q)
        elif mode == "kv":
            A = past.A
            a_lm, _, g = mha.power(A)
        else:  # kvg
            A, a_lm, g = past.A, past.A_LM, past.G_LM
        if past is not None:
            k = torch.cat([past.k, k], dim=2)  # [B, H, T+S, d]: a new tensor every step
            v = torch.cat([past.v, v], dim=2)
        out = KF.plga_attention_eager(q, k, v, g, causal=True, scale=self.scale, finite_mask=True)
        attn = mha.dense(out.transpose(1, 2).reshape(b, s, dm))  # [B, S, D]
        h1 = layer.layernorm1(attn + h)
        h2 = layer.layernorm2(layer.ffn(h1) + h1)
        return h2, EagerLayerCache(k=k, v=v, A=A, A_LM=a_lm, G_LM=g)

    def forward(
        self, tokens: Tensor, caches: list[EagerLayerCache] | None = None, mode: str = "kv"
    ) -> tuple[Tensor, list[EagerLayerCache]]:
        """All-position logits [B, S, V] and the grown caches."""
        start = 0 if caches is None else caches[0].k.shape[2]
        m = self.model
        h = m.decoder.layernorm1(m.decoder.embedding(tokens) * self.emb_scale)
        new = []
        for i in range(self.config.num_layers):
            h, lc = self.layer(i, h, start, None if caches is None else caches[i], mode)
            new.append(lc)
        return m.final_layer(h), new  # full vocabulary at every position

    @torch.inference_mode()
    def generate(self, prompt: Tensor, max_new_tokens: int, mode: str = "kv") -> Tensor:
        """Greedy decoding → tokens [B, S + N]; ``mode`` nocache / kv / kvg / collapsed."""
        tokens = prompt
        if mode == "nocache":
            for _ in range(max_new_tokens):
                logits = self.model(tokens, logits="all", backend="eager").logits[:, -1]  # published: all logits
                tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
            return tokens
        if mode == "collapsed" and self.constant_G is None:
            raise ValueError("mode 'collapsed' needs a collapsed model")
        if mode not in ("kv", "kvg", "collapsed"):
            raise ValueError(f"unknown mode {mode!r}")
        logits, caches = self.forward(tokens)
        for n in range(max_new_tokens):
            nxt = logits[:, -1].argmax(-1, keepdim=True)  # [B, 1]
            tokens = torch.cat([tokens, nxt], dim=1)
            if n + 1 < max_new_tokens:
                logits, caches = self.forward(nxt, caches, mode)
        return tokens


__all__ = ["EagerDecoder", "EagerLayerCache"]
