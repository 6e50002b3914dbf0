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
# 0. sanity: the unmodified eager decoder behind a foreign adapter (must PASS)
class Sanity(_Base):
    pass


# ---------------------------------------------------------------------------------------------
# 1. prompt of length 1 dispatched to the decode path (HF-style `if seq_len == 1: decode`):
#    the prompt pass runs as a cached step on an empty, pre-initialised cache whose generator A
#    is zeros and whose G-cache is the identity. forward() is untouched.
class _Len1PromptAsStep(eg.EagerDecoder):
    def generate(self, prompt, max_new_tokens, mode="kv", constant_g=None):
        tokens = torch.as_tensor(prompt, device=self.device).long()
        if mode == "nocache" or tokens.shape[1] != 1 or not max_new_tokens:
            return super().generate(prompt, max_new_tokens, mode, constant_g)
        b, c = tokens.shape[0], self.config
        H, d = c.num_heads, c.depth
        empty = [eg.LayerCache(k=torch.zeros(b, H, 0, d, dtype=self.dtype), v=torch.zeros(b, H, 0, d, dtype=self.dtype),
                               A=torch.zeros(b, H, d, d, dtype=self.dtype), A_LM=None,
                               G_LM=torch.eye(d, dtype=self.dtype).expand(b, H, d, d).clone(),
                               key_allowed=torch.zeros(b, 0, dtype=torch.bool)) for _ in range(c.num_layers)]
        cached_mode = "kvg" if mode == "collapsed" else mode
        out, caches = self.step(tokens, empty, cached_mode, constant_g)
        logits = out[:, -1]
        steps = []
        for n in range(max_new_tokens):
            steps.append(logits)
            nxt = logits.argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
            if n + 1 < max_new_tokens:
                out, caches = self.step(nxt, caches, cached_mode, constant_g)
                logits = out[:, -1]
        return tokens, torch.stack(steps, dim=1)


class Len1PromptAsStep(_Base):
    decoder_class = _Len1PromptAsStep


# ---------------------------------------------------------------------------------------------
# 2. cached modes mask generated keys whose id is 0 (attention_mask = tokens != 0 carried into
#    the cache, appended for each generated token) -- spec §3.5: generated keys never masked.
class _CachedMasksGeneratedZero(eg.EagerDecoder):
    def step(self, tokens, caches, mode, constant_g=None):
        out, new = super().step(tokens, caches, mode, constant_g)
        s = tokens.shape[1]
        for c in new:
            c.key_allowed = torch.cat([c.key_allowed[:, :-s], tokens != 0], dim=1)
        return out, new

    def layer(self, i, h, positions, support, cache, mode, constant_g):
        return super().layer(i, h, positions, support, cache, mode, constant_g)


class CachedMasksGeneratedZero(_Base):
    decoder_class = _CachedMasksGeneratedZero


# 2b. nocache: generated tokens are never padding (HF-style attention_mask = cat(mask, ones)) --
#     spec §3.2: a generated id 0 IS padding for the next nocache step.
class _NocacheGeneratedNeverPadding(eg.EagerDecoder):
    def generate(self, prompt, max_new_tokens, mode="kv", constant_g=None):
        if mode != "nocache":
            return super().generate(prompt, max_new_tokens, mode, constant_g)
        tokens = torch.as_tensor(prompt, device=self.device).long()
        s0 = tokens.shape[1]
        steps = []
        for _ in range(max_new_tokens):
            fake = tokens.clone()
            fake[:, s0:] = torch.where(fake[:, s0:] == 0, torch.full_like(fake[:, s0:], -1), fake[:, s0:])
            logits = self._forward_masked(tokens, (tokens != 0) | (torch.arange(tokens.shape[1]) >= s0)[None], constant_g)[:, -1]
            steps.append(logits)
            tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
        v = self.config.input_vocab_size
        return tokens, (torch.stack(steps, 1) if steps else torch.zeros(tokens.shape[0], 0, v, dtype=self.dtype))

    def _forward_masked(self, tokens, keys_ok, constant_g):
        s = tokens.shape[1]
        support = eg._causal(s, s, self.device)[None] & keys_ok[:, None, :]
        positions = torch.arange(s, device=self.device)
        h = self.embed(tokens)
        for i in range(self.config.num_layers):
            g = None if constant_g is None else torch.as_tensor(constant_g[i], device=self.device)
            h, _, _ = self.layer(i, h, positions, support, None, "nocache", g)
        return self.linear(h, "final_layer")


class NocacheGeneratedNeverPadding(_Base):
    decoder_class = _NocacheGeneratedNeverPadding


# ---------------------------------------------------------------------------------------------
# 3. layers past the fourth skipped (a hard-coded 4-layer loop / cache list; the released
#    models have 5 layers). The suite's own control is the same bug at two.
class _LayersPastFourSkipped(eg.EagerDecoder):
    def __init__(self, state, config, **kw):
        super().__init__(state, config, **kw)
        self.config = dataclasses.replace(config, num_layers=min(config.num_layers, 4))


class LayersPastFourSkipped(_Base):
    decoder_class = _LayersPastFourSkipped

    def forward(self, state_dict, config, tokens, *, constant_g=None):
        out = super().forward(state_dict, config, tokens, constant_g=constant_g)
        return ForwardOutput(out.logits, None)  # G_LM is optional


# 3b. residual units past the third skipped (released models: num_reslayerA = 8)
class _UnitsPastThreeSkipped(eg.EagerDecoder):
    def __init__(self, state, config, **kw):
        super().__init__(state, config, **kw)
        self.config = dataclasses.replace(config, num_reslayerA=min(config.num_reslayerA, 3))


class UnitsPastThreeSkipped(_Base):
    decoder_class = _UnitsPastThreeSkipped


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
    def _clamp(self, positions):
        return positions.clamp(max=self.config.max_seq_len - 2)

    def rotate_queries(self, i, h, positions, constant_g):
        return super().rotate_queries(i, h, self._clamp(positions), constant_g)

    def layer(self, i, h, positions, support, cache, mode, constant_g):
        # keys rotated through the same table
        orig = eg.rope

        def rope(x, pos, base=10000.0, style="interleaved"):
            return orig(x, self._clamp(pos), base, style)

        eg.rope = rope
        try:
            return super().layer(i, h, positions, support, cache, mode, constant_g)
        finally:
            eg.rope = orig


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


# C3. upstream (torchtune) float32 RoPE tables, at float32 only: bit-compatible with the published code
class _TorchtuneRope(eg.EagerDecoder):
    def layer(self, i, h, positions, support, cache, mode, constant_g):
        orig = eg.rope

        def rope(x, pos, base=10000.0, style="interleaved"):
            d = x.shape[-1]
            theta = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32)[: d // 2] / d))
            ang = pos.to(torch.float32)[:, None] * theta
            cos, sin = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
            if style == "interleaved":
                x0, x1 = x[..., 0::2], x[..., 1::2]
                return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
            x0, x1 = x[..., : d // 2], x[..., d // 2:]
            return torch.cat((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)

        eg.rope = rope
        try:
            return super().layer(i, h, positions, support, cache, mode, constant_g)
        finally:
            eg.rope = orig

    def rotate_queries(self, i, h, positions, constant_g):
        c = self.config
        return eg.rope(self.heads(self.linear(h, f"decoder.dec_layers.{i}.mha1.wq")), positions, c.rope_base, c.rope_style)


class TorchtuneRope32(_Base):
    decoder_class = _TorchtuneRope
    dtypes = ("float32",)


# C4. a kv/kvg-only decoder that returns step_logits=None when max_new_tokens == 0 and tokens int32
class _Int32Tokens(eg.EagerDecoder):
    pass


class Int32Tokens(_Base):
    decoder_class = _Int32Tokens

    def generate(self, state_dict, config, prompt, max_new_tokens, *, mode, constant_g=None):
        out = super().generate(state_dict, config, prompt, max_new_tokens, mode=mode, constant_g=constant_g)
        return GenerateOutput(out.tokens.to(torch.int32), None if max_new_tokens == 0 else out.step_logits)


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
