"""Third-party decoders from an independent audit of the suite (2026-12-04): one planted bug or
one unusual-but-correct choice each, built on the suite's eager decoder as an outside author
would. Every wrong one got PASS before the suite reached its region (test_redteam_decoders.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from plga.conformance import Adapter
from plga.conformance import eager as eg
from plga.conformance.adapter import ForwardOutput, GenerateOutput

DEC_CAPS = frozenset({"forward", "collapsed", "cache_nocache", "cache_kv", "cache_kvg"})


class _Base(Adapter):
    """An independent-looking adapter around a (subclassed) eager decoder."""

    version = "rt2"
    dtypes = ("float64", "float32")
    capabilities = DEC_CAPS
    decoder_class: type[eg.EagerDecoder] = eg.EagerDecoder
    return_g = True

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"rt2.{type(self).__name__}"

    def _decoder(self, state_dict: Mapping[str, Any], config: Any) -> eg.EagerDecoder:
        ref = next(iter(state_dict.values()))
        return self.decoder_class(state_dict, config, dtype=ref.dtype, device=ref.device)

    def forward(self, state_dict, config, tokens, *, constant_g=None):
        logits, deds, _ = self._decoder(state_dict, config).forward(tokens, constant_g)
        return ForwardOutput(logits, [d["G_LM"] for d in deds] if self.return_g else None)

    def generate(self, state_dict, config, prompt, max_new_tokens, *, mode, constant_g=None):
        tokens, steps = self._decoder(state_dict, config).generate(prompt, max_new_tokens, mode, constant_g)
        return GenerateOutput(tokens, steps)


# ---------------------------------------------------------------------------------------------
# 1. prompt of length 1 dispatched to the decode path (HF-style `if seq_len == 1: decode`):
#    the prompt pass runs as a cached step on an empty, pre-initialised cache whose generator A
#    is zeros and whose G-cache is the identity. forward() on its own is untouched.
class _Len1PromptAsStep(eg.EagerDecoder):
    cached_mode: str | None = None  # set while generate runs a cached mode

    def generate(self, prompt, max_new_tokens, mode="kv", constant_g=None):
        self.cached_mode = None if mode == "nocache" else "kvg" if mode == "collapsed" else mode
        try:
            return super().generate(prompt, max_new_tokens, mode, constant_g)
        finally:
            self.cached_mode = None

    def forward(self, tokens, constant_g=None):
        tokens = torch.as_tensor(tokens, device=self.device).long()
        if self.cached_mode is None or tokens.shape[1] != 1:
            return super().forward(tokens, constant_g)
        b, c = tokens.shape[0], self.config
        H, d = c.num_heads, c.depth
        empty = [eg.LayerCache(k=torch.zeros(b, H, 0, d, dtype=self.dtype), v=torch.zeros(b, H, 0, d, dtype=self.dtype),
                               A=torch.zeros(b, H, d, d, dtype=self.dtype), A_LM=None,
                               G_LM=torch.eye(d, dtype=self.dtype).expand(b, H, d, d).clone(),
                               key_allowed=torch.zeros(b, 0, dtype=torch.bool)) for _ in range(c.num_layers)]
        logits, caches = self.step(tokens, empty, self.cached_mode, constant_g)
        return logits, [], caches


class Len1PromptAsStep(_Base):
    decoder_class = _Len1PromptAsStep


# ---------------------------------------------------------------------------------------------
# 3. a count cut at a hard-coded size: layers past the fourth skipped (a 4-layer loop / cache
#    list; the released models have 5 layers; the suite's own control cuts at two), residual
#    units past the third (released models: num_reslayerA = 8).
class _CappedConfig(eg.EagerDecoder):
    field = ""
    most = 0

    def __init__(self, state, config, **kw):
        super().__init__(state, config, **kw)
        self.config = dataclasses.replace(config, **{self.field: min(getattr(config, self.field), self.most)})


class LayersPastFourSkipped(_Base):
    decoder_class = type("_LayersPastFour", (_CappedConfig,), {"field": "num_layers", "most": 4})
    return_g = False  # G_LM is optional


class UnitsPastThreeSkipped(_Base):
    decoder_class = type("_UnitsPastThree", (_CappedConfig,), {"field": "num_reslayerA", "most": 3})


# ---------------------------------------------------------------------------------------------
# 4. the metric learner processes heads in chunks of 8; the partial last chunk (H > 8, H % 8 != 0)
#    reuses the previous chunk's G_LM. The paper's model has 14 heads.
def _chunked_chain(q_rot, w, order="natural"):
    H = q_rot.shape[1]
    outs = [eg.operator_chain(q_rot[:, h0:h0 + 8], {**w, **{k: w[k][h0:h0 + 8] for k in ("W", "b", "P", "a", "b_a")}}, order)
            for h0 in range(0, H, 8)]
    if H > 8 and H % 8:
        prev = outs[-2]
        n = H % 8
        outs[-1] = tuple(x[:, :n] for x in prev)
    return tuple(torch.cat([o[i] for o in outs], dim=1) for i in range(4))


class _HeadChunkTail(eg.EagerDecoder):
    def chain(self, i, q_rot):
        return _chunked_chain(q_rot.to(self.chain_dtype), self.layer_weights(i), self.order)


class HeadChunkTail(_Base):
    decoder_class = _HeadChunkTail
    capabilities = DEC_CAPS | {"operator_chain"}

    def operator_chain(self, q_rot, layer_weights):
        return _chunked_chain(q_rot, layer_weights)


# ---------------------------------------------------------------------------------------------
# 5. the LM head / greedy argmax tiled over 256-id vocabulary chunks, the chunk offset forgotten
#    when comparing chunk maxima past the first chunk (only V > 256 differs).
class _VocabChunkArgmax(eg.EagerDecoder):
    def generate(self, prompt, max_new_tokens, mode="kv", constant_g=None):
        orig = torch.Tensor.argmax

        def chunked(x, dim=None, keepdim=False):
            if dim != -1 or x.shape[-1] <= 256:
                return orig(x, dim=dim, keepdim=keepdim)
            best_v, best_i = None, None
            for c0 in range(0, x.shape[-1], 256):
                part = x[..., c0:c0 + 256]
                v, i = part.max(dim=-1, keepdim=keepdim)  # index local to the chunk (offset c0 forgotten)
                if best_v is None:
                    best_v, best_i = v, i
                else:
                    take = v > best_v
                    best_v, best_i = torch.where(take, v, best_v), torch.where(take, i, best_i)
            return best_i

        torch.Tensor.argmax = chunked
        try:
            return super().generate(prompt, max_new_tokens, mode, constant_g)
        finally:
            torch.Tensor.argmax = orig


class VocabChunkArgmax(_Base):
    decoder_class = _VocabChunkArgmax


# ---------------------------------------------------------------------------------------------
# 6. RoPE table with max_seq_len - 1 rows, index clamped (defensive gather): only position
#    max_seq_len - 1 is rotated wrongly (at max_seq_len - 2).
class _RopeTableShort(eg.EagerDecoder):
    def rotate(self, x, positions):  # queries and keys through the same table
        return super().rotate(x, positions.clamp(max=self.config.max_seq_len - 2))


class RopeTableShort(_Base):
    decoder_class = _RopeTableShort


# ---------------------------------------------------------------------------------------------
# 7. capability combination: kv declared, kvg not; kv mode freezes G_LM = b_a + a·A_LM (power
#    stage skipped). With {collapsed, cache_kv, cache_nocache} no check ever runs kv.
class _KvSkipsPower(eg.EagerDecoder):
    def cached_operator(self, i, cache, mode):
        if mode == "kv":
            w = eg.cast_layer_weights(self.layer_weights(i), self.chain_dtype, self.device)
            a_lm, _, _ = self.power(i, cache.A)
            return cache.A, a_lm, w["a"] @ a_lm + w["b_a"]
        return super().cached_operator(i, cache, mode)


class KvOnlyUnchecked(_Base):
    decoder_class = _KvSkipsPower
    capabilities = frozenset({"collapsed", "cache_kv", "cache_nocache"})


# 7b. collapsed decoding runs the learner on the prompt pass; declared {collapsed, cache_kvg} only:
#     collapsed_equals_kvg uses G* = the prompt's own G_LM, where the bug is invisible.
class _CollapsedPromptLearned(eg.EagerDecoder):
    def generate(self, prompt, max_new_tokens, mode="kv", constant_g=None):
        if mode != "collapsed" or not max_new_tokens:
            return super().generate(prompt, max_new_tokens, mode, constant_g)
        tokens = torch.as_tensor(prompt, device=self.device).long()
        logits_all, _, caches = self.forward(tokens, None)  # learner runs on the prompt
        logits = logits_all[:, -1]
        steps = []
        for n in range(max_new_tokens):
            steps.append(logits)
            nxt = logits.argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
            if n + 1 < max_new_tokens:
                out, caches = self.step(nxt, caches, "kvg", constant_g)
                logits = out[:, -1]
        return tokens, torch.stack(steps, 1)


class CollapsedPromptLearned(_Base):
    decoder_class = _CollapsedPromptLearned
    capabilities = frozenset({"collapsed", "cache_kvg"})


# ---------------------------------------------------------------------------------------------
# Correct-but-unusual
# C1. operator chain (and its q G) in float64 whatever the activation dtype
class _WideChain(eg.EagerDecoder):
    def chain(self, i, q_rot):
        out = eg.operator_chain(q_rot.double(), self.layer_weights(i), self.order)
        return tuple(x.to(self.dtype) for x in out)


class WideChain(_Base):
    decoder_class = _WideChain


# C2. forward returns G_LM = None
class NoGLM(_Base):
    return_g = False


# ---------------------------------------------------------------------------------------------
# 8. a specialised path for the released head dimension (d >= 64): the power stage computes
#    A W instead of W A (the parameter on the wrong side). Decoder depth is at most 32 and the
#    chain's d at most 16 in the suite; 64 is the paper's.
def _power_d64(A, W, b, P, a, b_a, order="natural"):
    if A.shape[-1] >= 64:
        W = W.transpose(-1, -2)
        A = A.transpose(-1, -2)  # (Wᵀ Aᵀ)ᵀ = A W : a "row-major" fast path gone wrong
        u = (W @ A).transpose(-1, -2) + b
        a_lm = u * torch.nn.functional.silu(u) + eg.EPSILON_ADJ
        a_p = torch.pow(a_lm, P)
        return a_lm, a_p, a @ a_p + b_a
    return eg.power_stage(A, W, b, P, a, b_a, order)


def _chain_d64(q_rot, layer_weights, order="natural"):
    w = eg.cast_layer_weights(layer_weights, q_rot.dtype, q_rot.device)
    A = eg.metric_learner(eg.density_operator(q_rot, order), w, order)
    return (A, *_power_d64(A, w["W"], w["b"], w["P"], w["a"], w["b_a"], order))


class _ChainD64(eg.EagerDecoder):
    def chain(self, i, q_rot):
        return _chain_d64(q_rot.to(self.chain_dtype), self.layer_weights(i), self.order)

    def power(self, i, A):
        w = eg.cast_layer_weights(self.layer_weights(i), self.chain_dtype, self.device)
        return _power_d64(A.to(self.chain_dtype), w["W"], w["b"], w["P"], w["a"], w["b_a"], self.order)


class ChainD64(_Base):
    decoder_class = _ChainD64
    capabilities = DEC_CAPS | {"operator_chain"}

    def operator_chain(self, q_rot, layer_weights):
        return _chain_d64(q_rot, layer_weights)
