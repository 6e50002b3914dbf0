"""Decoder-level controls: one bug each in a decoder, its caches or its configuration handling.

They subclass the suite's eager decoder (:class:`plga.conformance.eager.EagerDecoder`) and
change one stage; a bug that ignores a configuration knob shows only when the knob is not 1
(``num_denseA`` > 1, ``num_reslayerA`` > 1, ``rope_style`` = rotate_half), a cache bug only
with batch > 1 or padding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from .. import eager as eg
from .. import memo
from ..adapters import EagerAdapter
from .chain import tiles_counted_down


class _ConfigBugDecoder(eg.EagerDecoder):
    """Builds the layers from a wrongly read configuration (``misread(config)``)."""

    def __init__(self, state: Mapping[str, Any], config: Any, **kw: Any) -> None:
        super().__init__(state, config, **kw)
        self.config = self.misread(config)

    @staticmethod
    def misread(config: Any) -> Any:
        return config


class RotateHalfAsInterleaved(_ConfigBugDecoder):
    @staticmethod
    def misread(config: Any) -> Any:
        return dataclasses.replace(config, rope_style="interleaved")


class FirstDenseBlockOnly(_ConfigBugDecoder):
    @staticmethod
    def misread(config: Any) -> Any:
        return dataclasses.replace(config, num_denseA=1)


class LastResidualUnitSkipped(_ConfigBugDecoder):
    @staticmethod
    def misread(config: Any) -> Any:
        return dataclasses.replace(config, num_reslayerA=max(1, config.num_reslayerA - 1))


class LastLayerSkippedPastTwo(_ConfigBugDecoder):
    """Loops over ``min(num_layers, 2)`` layers (a hard-coded two-layer test config)."""

    @staticmethod
    def misread(config: Any) -> Any:
        return dataclasses.replace(config, num_layers=min(config.num_layers, 2))


class PaddingIgnoredAfterPrompt(eg.EagerDecoder):
    """Cached steps attend to the prompt's padding keys (the padding mask is dropped after the prompt)."""

    def step(self, tokens: Tensor, caches: list[eg.LayerCache], mode: str, constant_g: Sequence[Tensor] | None = None) -> Any:
        for c in caches:
            c.key_allowed = torch.ones_like(c.key_allowed)
        return super().step(tokens, caches, mode, constant_g)


class RowLengthsMixed(eg.EagerDecoder):
    """Cached steps use the first row's padding for every row of the batch."""

    def step(self, tokens: Tensor, caches: list[eg.LayerCache], mode: str, constant_g: Sequence[Tensor] | None = None) -> Any:
        for c in caches:
            c.key_allowed = c.key_allowed[:1].expand_as(c.key_allowed).clone()
        return super().step(tokens, caches, mode, constant_g)


class StepPositionsOffByOne(eg.EagerDecoder):
    """Cached steps rotate the new token at position T − 1 instead of T (RoPE offset bug)."""

    def step_positions(self, offset: int, n: int) -> Tensor:
        return super().step_positions(offset - 1, n)


class StepPositionTableOfEight(eg.EagerDecoder):
    """Cached steps read their RoPE positions from a table of 8 built at the first step: from the
    9th cached step on, every new token is rotated at the 8th step's position."""

    TABLE = 8
    first_step: int | None = None

    def step_positions(self, offset: int, n: int) -> Tensor:
        if self.first_step is None:
            self.first_step = offset
        return super().step_positions(min(offset, self.first_step + self.TABLE - 1), n)


class StepPositionTableOf32(StepPositionTableOfEight):
    """As :class:`StepPositionTableOfEight` with a table of 32: from the 33rd cached step on."""

    TABLE = 32


class VocabBlocksReversedPerThread(eg.EagerDecoder):
    """The vocabulary product in one column block per intra-op thread, the blocks' outputs put
    back in reverse order (a per-thread split joined wrongly): exact at one thread."""

    def linear(self, x: Tensor, name: str) -> Tensor:
        if name != "final_layer":
            return super().linear(x, name)
        n = torch.get_num_threads()
        w, b = self.p["final_layer.weight"], self.p["final_layer.bias"]  # [V, D], [V]
        blocks = [x @ wb.transpose(0, 1) + bb for wb, bb in zip(w.chunk(n), b.chunk(n), strict=True)]
        return torch.cat(blocks[::-1], dim=-1)  # [B, S, V], columns permuted when n > 1


def _thread_spans(n: int) -> list[tuple[int, int]]:
    """``n`` items split into one span per intra-op thread, as a CPU decoder splits its work."""
    size = -(-n // torch.get_num_threads())
    return [(i, min(n, i + size)) for i in range(0, n, size)]


class KvgOperatorRowsPerThread(eg.EagerDecoder):
    """kvg's cached G_LM read in one span of batch rows per intra-op thread, each span indexing
    from row 0 (a span-relative index): exact at one thread, and at one row."""

    def cached_operator(self, i: int, cache: eg.LayerCache, mode: str) -> Any:
        a, a_lm, g = super().cached_operator(i, cache, mode)
        if mode == "kvg":
            g = torch.cat([g[: r1 - r0] for r0, r1 in _thread_spans(g.shape[0])], dim=0)  # [B, H, d, d]
        return a, a_lm, g


class ConstantOperatorHeadsPerThread(eg.EagerDecoder):
    """A constant (collapsed) G read in one span of heads per intra-op thread, each span indexing
    from head 0: exact at one thread, and with one head."""

    def constant_operator(self, constant_g: Tensor) -> Tensor:
        h = constant_g.shape[-3]
        return torch.cat([constant_g[..., : h1 - h0, :, :] for h0, h1 in _thread_spans(h)], dim=-3)  # [.., H, d, d]


_SHARED_G: dict[tuple[Any, ...], list[Tensor]] = {}  # GCacheSharedByPrompt's table, one for every model


class GCacheSharedByPrompt(eg.EagerDecoder):
    """kvg's prompt operators kept in one table shared by every model, keyed by the configuration
    and the prompt's ids: a second model of the same configuration decoding the same prompt
    gets the first one's G_LM. Right for one model."""

    def generate(self, prompt: Tensor, max_new_tokens: int, mode: str = "kv", constant_g: Any = None, forced: Any = None) -> Any:
        p = torch.as_tensor(prompt)
        self._key = (repr(self.config), tuple(p.shape), tuple(p.reshape(-1).tolist())) if mode == "kvg" else None
        try:
            return super().generate(prompt, max_new_tokens, mode, constant_g, forced)
        finally:
            self._key = None

    def forward(self, tokens: Tensor, constant_g: Any = None) -> Any:
        logits, deds, caches = super().forward(tokens, constant_g)
        key = getattr(self, "_key", None)
        if key is not None and constant_g is None:
            kept = _SHARED_G.setdefault(key, [c.G_LM.clone() for c in caches])
            caches = [eg.LayerCache(c.k, c.v, c.A, c.A_LM, g.to(c.G_LM.dtype), c.key_allowed) for c, g in zip(caches, kept, strict=True)]
        return logits, deds, caches


class StepMaskFromLengths(eg.EagerDecoder):
    """Cached steps rebuild the prompt's key padding from each row's count of real tokens, key j
    allowed iff j < that count (a varlen / context-lengths convention that assumes right
    padding): exact for unpadded and right-padded rows, wrong for left-padded ones."""

    prompt_len = 0

    def generate(self, prompt: Tensor, max_new_tokens: int, mode: str = "kv", constant_g: Any = None, forced: Any = None) -> Any:
        self.prompt_len = torch.as_tensor(prompt).shape[1]
        return super().generate(prompt, max_new_tokens, mode, constant_g, forced)

    def step(self, tokens: Tensor, caches: list[eg.LayerCache], mode: str, constant_g: Sequence[Tensor] | None = None) -> Any:
        s0, fixed = self.prompt_len, []
        for c in caches:
            allowed = c.key_allowed.clone()  # [B, T]
            real = allowed[:, :s0].sum(1, keepdim=True)  # [B, 1]
            allowed[:, :s0] = torch.arange(s0, device=allowed.device)[None] < real
            fixed.append(eg.LayerCache(c.k, c.v, c.A, c.A_LM, c.G_LM, allowed))
        return super().step(tokens, fixed, mode, constant_g)


class KvRecomputesFromNewRows(eg.EagerDecoder):
    """kv mode recomputes A from the new token's rows only (instead of the frozen prompt A)."""

    def cached_operator(self, i: int, cache: eg.LayerCache, mode: str) -> Any:
        if mode == "kv":
            a = cache.A * 0.5  # a stale half-weighted generator
            a_lm, _, g = self.power(i, a)
            return a, a_lm, g
        return super().cached_operator(i, cache, mode)


class GeneratedZerosMasked(eg.EagerDecoder):
    """Cached steps mask every generated token of id 0 as padding (the padding mask rebuilt from
    ``tokens != 0`` over the generated tokens too); right whenever id 0 is not generated."""

    def step(self, tokens: Tensor, caches: list[eg.LayerCache], mode: str, constant_g: Sequence[Tensor] | None = None) -> Any:
        logits, new = super().step(tokens, caches, mode, constant_g)
        for c in new:
            c.key_allowed[:, -tokens.shape[1]:] &= tokens != 0
        return logits, new


class SecondBestNearTie(eg.EagerDecoder):
    """Greedy decoding that takes the second-best token when it is within 0.5 of the best (a
    sampler's top-2 left on): the step logits are right, the choices are not."""

    def choose(self, logits: Tensor) -> Tensor:
        top = logits.topk(2, dim=-1)
        near = (top.values[:, 0] - top.values[:, 1]) < 0.5
        return torch.where(near, top.indices[:, 1], top.indices[:, 0])[:, None]


class KvPageAliased(eg.EagerDecoder):
    """A paged KV cache of 64-key pages whose page table is off by one for the pages a decoding
    step allocates: each key written there also overwrites the key 64 positions earlier. Right
    until decoding crosses a page boundary (the prompt's own pages are right)."""

    PAGE = 64
    prompt_len: int | None = None

    def step(self, tokens: Tensor, caches: list[eg.LayerCache], mode: str, constant_g: Sequence[Tensor] | None = None) -> Any:
        t_old = caches[0].k.shape[2]
        if self.prompt_len is None:
            self.prompt_len = t_old
        logits, new = super().step(tokens, caches, mode, constant_g)
        first_new_page = -(-self.prompt_len // self.PAGE)  # pages the prompt pass allocated: 0 … first_new_page − 1
        aliased = [p for p in range(t_old, new[0].k.shape[2]) if p // self.PAGE >= first_new_page]
        for c in new if aliased else []:
            c.k, c.v = c.k.clone(), c.v.clone()
            for p in aliased:
                c.k[:, :, p - self.PAGE] = c.k[:, :, p]
                c.v[:, :, p - self.PAGE] = c.v[:, :, p]
        return logits, new


class CollapsedStepsPlainSdpa(eg.EagerDecoder):
    """Collapsed decoding's cached steps attend with G = I (a fused-SDPA step path that forgets
    the constant G); the prompt pass and every other mode are right."""

    def step(self, tokens: Tensor, caches: list[eg.LayerCache], mode: str, constant_g: Sequence[Tensor] | None = None) -> Any:
        if constant_g is not None:
            constant_g = [torch.eye(g.shape[-1], dtype=g.dtype, device=g.device).expand_as(g) for g in constant_g]
        return super().step(tokens, caches, mode, constant_g)


class PositionsRoundedToBf16(eg.EagerDecoder):
    """Holds the RoPE positions in bfloat16 (8 significant bits: from 257 on, 257 → 256,
    259 → 260, …); everything else right, the operator chain in float32."""

    def layer(self, i: int, h: Tensor, positions: Tensor, support: Tensor | None, cache: eg.LayerCache | None, mode: str,
              constant_g: Tensor | None) -> Any:
        return super().layer(i, h, positions.to(torch.bfloat16).to(positions.dtype), support, cache, mode, constant_g)


class FullLastQueryBlockDropped(eg.EagerDecoder):
    """A prefill tiled in blocks of 32 query rows sizes its last block as S % 32 (without
    ``or 32``): when S is a whole number of blocks, the last 32 rows' attention is never
    computed (left zero). Other lengths, and every cached step, are right."""

    BLOCK = 32

    def attention_weights(self, x: Tensor, support: Tensor) -> Tensor:
        w = super().attention_weights(x, support)  # [B, H, S, T]
        s = w.shape[-2]
        if s > self.BLOCK and s % self.BLOCK == 0:
            w = w.clone()
            w[..., s - self.BLOCK :, :] = 0.0
        return w


class VocabTailBlockDropped(eg.EagerDecoder):
    """The vocabulary product in blocks of 512 columns, counted as V // 512: past 512 columns the
    partial last block is never computed (its logits stay 0)."""

    BLOCK = 512

    def linear(self, x: Tensor, name: str) -> Tensor:
        if name != "final_layer":
            return super().linear(x, name)
        w, b = self.p["final_layer.weight"], self.p["final_layer.bias"]  # [V, D], [V]
        v = w.shape[0]
        stop = v if v <= self.BLOCK else v - v % self.BLOCK
        out = torch.zeros(*x.shape[:-1], v, dtype=x.dtype, device=x.device)  # [B, S, V]
        out[..., :stop] = x @ w[:stop].transpose(0, 1) + b[:stop]
        return out


class VocabTailBlockOf1024(VocabTailBlockDropped):
    """As :class:`VocabTailBlockDropped` with blocks of 1024 columns: past 2048 columns."""

    BLOCK = 1024


class ChunkedPrefillFrozenA(eg.EagerDecoder):
    """Prompts past 512 tokens are prefilled in chunks of 512, every chunk after the first through
    the cached ``kv`` step: its G_LM comes from the first chunk's frozen A, not the whole prompt's."""

    CHUNK = 512

    def forward(self, tokens: Tensor, constant_g: Sequence[Tensor] | None = None) -> Any:
        tokens = torch.as_tensor(tokens, device=self.device).long()
        if tokens.shape[1] <= self.CHUNK:
            return super().forward(tokens, constant_g)
        logits, deds, caches = super().forward(tokens[:, : self.CHUNK], constant_g)
        parts = [logits]
        for lo in range(self.CHUNK, tokens.shape[1], self.CHUNK):
            out, caches = self.step(tokens[:, lo : lo + self.CHUNK], caches, "kv", constant_g)
            parts.append(out)
        return torch.cat(parts, dim=1), deds, caches


class RingKvCache(eg.EagerDecoder):
    """A KV cache of 512 keys kept as a ring: past 512, a decoding step drops the oldest keys
    (the new tokens' positions stay right)."""

    CAPACITY = 512
    written: int | None = None

    def step(self, tokens: Tensor, caches: list[eg.LayerCache], mode: str, constant_g: Sequence[Tensor] | None = None) -> Any:
        if self.written is None:
            self.written = caches[0].k.shape[2]
        logits, new = super().step(tokens, caches, mode, constant_g)
        self.written += tokens.shape[1]
        for c in new:
            if c.k.shape[2] > self.CAPACITY:
                c.k, c.v = c.k[:, :, -self.CAPACITY :], c.v[:, :, -self.CAPACITY :]
                c.key_allowed = c.key_allowed[:, -self.CAPACITY :]
        return logits, new

    def step_positions(self, offset: int, n: int) -> Tensor:
        start = offset if self.written is None else self.written  # the ring's length is not the position
        return torch.arange(start, start + n, device=self.device)


class RingKvCacheOf1024(RingKvCache):
    """As :class:`RingKvCache` with 1024 keys: past 1024 keys decoding drops the oldest."""

    CAPACITY = 1024


class PaddingMaskKeptByShape(eg.EagerDecoder):
    """Keeps the prompt's padding mask on the loaded model and rebuilds it only when the prompt's
    shape changes (a static buffer): a later prompt of the same shape with other padding decodes
    with the first prompt's padding."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.masks: dict[tuple[int, ...], Tensor] = {}
        self.mask: Tensor | None = None

    def generate(self, prompt: Tensor, max_new_tokens: int, mode: str = "kv", constant_g: Sequence[Tensor] | None = None) -> Any:
        p = torch.as_tensor(prompt, device=self.device).long()
        self.mask = self.masks.setdefault(tuple(p.shape), p != 0)  # [B, S]
        return super().generate(prompt, max_new_tokens, mode, constant_g)

    def step(self, tokens: Tensor, caches: list[eg.LayerCache], mode: str, constant_g: Sequence[Tensor] | None = None) -> Any:
        assert self.mask is not None
        for c in caches:
            c.key_allowed = c.key_allowed.clone()
            c.key_allowed[:, : self.mask.shape[1]] = self.mask
        return super().step(tokens, caches, mode, constant_g)


class ConversationPrefixCache(eg.EagerDecoder):
    """Prefix caching, as a chat server does: a prompt that extends the sequence the loaded model
    decoded last (its prompt and the tokens it generated) reuses that sequence's caches and
    prefills only the new ids through the cached step. Exact in a standard transformer; in
    PLDR-LLM the prompt's G_LM, and every layer's K and V past the first, depend on the whole
    prompt."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.last: tuple[Tensor, list[eg.LayerCache]] | None = None  # (the decoded sequence, its caches)

    def generate(self, prompt: Tensor, max_new_tokens: int, mode: str = "kv", constant_g: Sequence[Tensor] | None = None) -> Any:
        if mode not in ("kv", "kvg") or constant_g is not None or not max_new_tokens:
            return super().generate(prompt, max_new_tokens, mode, constant_g)
        tokens = torch.as_tensor(prompt, device=self.device).long()
        caches = None
        if self.last is not None:
            seq, old = self.last
            n = seq.shape[1]
            if seq.shape[0] == tokens.shape[0] and tokens.shape[1] > n and torch.equal(tokens[:, :n], seq):
                out, caches = self.step(tokens[:, n:], old, mode)  # only the new turn through the cached step
                logits = out[:, -1]
        if caches is None:
            logits_all, _, caches = self.forward(tokens)
            logits = logits_all[:, -1]
        steps = []
        for i in range(max_new_tokens):
            steps.append(logits)
            nxt = self.choose(logits)
            tokens = torch.cat([tokens, nxt], dim=1)
            if i + 1 < max_new_tokens:
                out, caches = self.step(nxt, caches, mode)
                logits = out[:, -1]
        self.last = (tokens[:, :-1].clone(), caches)  # every token but the last has its K, V cached
        return tokens, torch.stack(steps, dim=1)


class NocacheIgnoresConstantG(eg.EagerDecoder):
    """nocache decoding runs the learned metric learner every step even when constant operators
    are given (they reach the prompt pass and the cached path, not the nocache loop)."""

    def generate(self, prompt: Tensor, max_new_tokens: int, mode: str = "kv", constant_g: Sequence[Tensor] | None = None) -> Any:
        return super().generate(prompt, max_new_tokens, mode, None if mode == "nocache" else constant_g)


class StepPositionsFromFirstRealToken(eg.EagerDecoder):
    """Cached steps rotate each row's new token at its position counted from the row's first real
    token (column − the row's leading padding, a common left-padding convention) where the
    contract keeps the column: exact for unpadded and right-padded rows."""

    lead = 0

    def step(self, tokens: Tensor, caches: list[eg.LayerCache], mode: str, constant_g: Sequence[Tensor] | None = None) -> Any:
        leads = (caches[0].key_allowed.long().cumsum(1) == 0).sum(1)  # [B]: each row's leading padding
        if not bool((leads > 0).any()):
            return super().step(tokens, caches, mode, constant_g)
        outs, rows = [], []
        for r in range(tokens.shape[0]):  # one row at a time, each at its own offset
            self.lead = int(leads[r])
            try:
                out, new = super().step(tokens[r : r + 1], [_row_cache(c, r) for c in caches], mode, constant_g)
            finally:
                self.lead = 0
            outs.append(out)
            rows.append(new)
        merged = [eg.LayerCache(**{f.name: _cat([getattr(n[i], f.name) for n in rows]) for f in dataclasses.fields(eg.LayerCache)})
                  for i in range(len(caches))]
        return torch.cat(outs, 0), merged

    def step_positions(self, offset: int, n: int) -> Tensor:
        return super().step_positions(offset - self.lead, n)


def _row_cache(c: eg.LayerCache, r: int) -> eg.LayerCache:
    return eg.LayerCache(**{f.name: None if getattr(c, f.name) is None else getattr(c, f.name)[r : r + 1]
                            for f in dataclasses.fields(eg.LayerCache)})


def _cat(xs: list[Any]) -> Any:
    return None if xs[0] is None else torch.cat(xs, 0)


class StepMaskTileOf8(eg.EagerDecoder):
    """The decoding step in tiles of 8 batch rows, the padding mask indexed by the row within its
    tile: rows 8, 9, … decode with the padding of rows 0, 1, …"""

    TILE = 8

    def step(self, tokens: Tensor, caches: list[eg.LayerCache], mode: str, constant_g: Sequence[Tensor] | None = None) -> Any:
        b = caches[0].key_allowed.shape[0]
        if b > self.TILE:
            for c in caches:
                c.key_allowed = c.key_allowed[[r % self.TILE for r in range(b)]].clone()
        return super().step(tokens, caches, mode, constant_g)


class StepMaskTileOf16(StepMaskTileOf8):
    """As :class:`StepMaskTileOf8` with tiles of 16 rows: rows 16, 17, … decode with rows 0, 1, …'s padding."""

    TILE = 16


class KvPowerInActivationDtype(eg.EagerDecoder):
    """Sound (a correct control, for bfloat16): the prompt pass runs the chain in float32 and kvg
    keeps its G_LM, while kv's step recomputes the power stage from the cached A in the
    activation dtype, as the eager bfloat16 baseline does: kv and kvg may split a near tie
    differently."""

    def cached_operator(self, i: int, cache: eg.LayerCache, mode: str) -> Any:
        if mode != "kv":
            return super().cached_operator(i, cache, mode)
        w = eg.cast_layer_weights(self.layer_weights(i), self.dtype, self.device)
        a_lm, _, g = eg.power_stage(cache.A.to(self.dtype), w["W"], w["b"], w["P"], w["a"], w["b_a"], self.order)
        return cache.A, a_lm, g


class KvStepPowerWithoutFloor(eg.EagerDecoder):
    """kv's step re-implements the power stage to recompute G_LM from the cached A and forgets
    the floor: A_LM = iSwiGLU(W A + b), without + ε (the prompt pass and kvg are right). Off by
    (1 + ε/iSwiGLU(u))^P, which below float64 shows only where A_LM is near its floor."""

    def cached_operator(self, i: int, cache: eg.LayerCache, mode: str) -> Any:
        if mode != "kv":
            return super().cached_operator(i, cache, mode)
        assert cache.A is not None
        w = eg.cast_layer_weights(self.layer_weights(i), self.chain_dtype, self.device)
        u = w["W"] @ cache.A.to(self.chain_dtype) + w["b"]  # [B, H, d, d]
        a_lm = u * torch.nn.functional.silu(u)  # the floor forgotten
        return cache.A, a_lm, w["a"] @ torch.pow(a_lm, w["P"]) + w["b_a"]


class FeedForwardTailDropped(eg.EagerDecoder):
    """The feed-forward's hidden units in tiles of 128, counted as ``max(1, dff // 128)``: past
    256 units a partial last tile is never summed (the gate's output projection without it)."""

    TILE = 128

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        for name, w in list(self.p.items()):
            if name.endswith("ffn.gluw3.weight"):  # [d_model, dff]
                w = w.clone()
                w[:, tiles_counted_down(w.shape[1], self.TILE) :] = 0
                self.p[name] = w


class FeedForwardTileOf512(FeedForwardTailDropped):
    """As :class:`FeedForwardTailDropped` with tiles of 512 hidden units: past 1024 units (the
    released model's dff is 2389)."""

    TILE = 512


class LayerNormChunksOf512(eg.EagerDecoder):
    """The decoder's LayerNorms over d_model in chunks of 512 features, the chunks' means and
    variances averaged with equal weights and no between-chunk term: exact up to 512 features
    (the released model's d_model is 896)."""

    CHUNK = 512

    def ln(self, x: Tensor, name: str) -> Tensor:
        n = x.shape[-1]
        if n <= self.CHUNK:
            return super().ln(x, name)
        parts = x.split(self.CHUNK, dim=-1)
        mean = torch.stack([p.mean(-1) for p in parts]).mean(0)[..., None]  # [..., 1]
        var = torch.stack([p.var(-1, unbiased=False) for p in parts]).mean(0)[..., None]
        return (x - mean) / torch.sqrt(var + eg.LAYER_NORM_EPS) * self.p[name + ".weight"] + self.p[name + ".bias"]


class RopeTableOf768(eg.EagerDecoder):
    """RoPE tables of 768 rows, positions past them clamped to the last row (queries and keys):
    right through position 767 of a 1024-token context."""

    ROWS = 768

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        return super().rotate(x, positions.clamp(max=self.ROWS - 1))


class RopeTableOf1024(RopeTableOf768):
    """RoPE tables of 1024 rows whatever the context: positions past 1023 clamped to the last row."""

    ROWS = 1024


class TorchtuneRopeCache(eg.EagerDecoder):
    """Sound (a correct control below float64): RoPE as the upstream implementation builds it,
    torchtune's ``RotaryPositionalEmbeddings`` — one cache of ``max_seq_len`` rows, θ, the angles
    and cos/sin all in float32 — its rows gathered by position. The angle rounding grows with the
    position (~1e-5 at 200) where the contract's float64 tables have none."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        c, d = self.config, self.config.depth
        theta = 1.0 / (c.rope_base ** (torch.arange(0, d, 2)[: d // 2].float() / d))  # [d/2] float32
        seq = torch.arange(c.max_seq_len, dtype=theta.dtype)
        idx_theta = torch.einsum("i, j -> ij", seq, theta).float()  # [L, d/2]
        self.cache = torch.stack([torch.cos(idx_theta), torch.sin(idx_theta)], dim=-1).to(self.device)  # [L, d/2, 2]

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        rows = self.cache[positions.to(self.device).long()].to(x.dtype)  # [S, d/2, 2]
        return eg.rotate_pairs(x, rows[..., 0], rows[..., 1], self.config.rope_style)


class LogSumExpFiniteMaskDecoder(eg.EagerDecoder):
    """Sound (a correct control): attention weights under the finite −1e9 mask as
    exp(x − logsumexp(x)). On the query rows of a left-padded prompt that see only padding, lse
    is rounded at 1e9 and every weight carries u · 1e9 ≈ 1e-7 (float64) that the published order
    does not; the next layer's Gram carries it to every logit."""

    def attention_weights(self, x: Tensor, support: Tensor) -> Tensor:
        return eg.finite_softmax_lse(x, support[:, None])  # [B, H, S, T]


class DecoderControl(EagerAdapter):
    """An eager-decoder adapter with one decoder bug (``decoder_class``); no attention or chain."""

    capabilities = frozenset({"forward", "collapsed", "cache_nocache", "cache_kv", "cache_kvg"})
    dtypes = ("float64", "float32")

    def __init__(self, name: str, decoder_class: type[eg.EagerDecoder], mutate_state: bool = False) -> None:
        super().__init__()
        self.name, self.decoder_class, self.mutate_state = name, decoder_class, mutate_state

    def _decoder(self, state_dict: Mapping[str, Any], config: Any) -> eg.EagerDecoder:
        ref = next(iter(state_dict.values()))
        # wide_chain: the chain in float32 at bfloat16/float16 (the precision policy); no change at float32/64
        dec = self.decoder_class(state_dict, config, dtype=ref.dtype, device=ref.device, wide_chain=True)
        if not self.mutate_state:
            return dec
        # folds √d_model into the embedding table in place (the result is right, the input is not)
        emb = state_dict["decoder.embedding.weight"]
        emb.mul_(dec.sqrt_d_model)
        dec.p["decoder.embedding.weight"] = emb.to(dec.dtype).clone()
        dec.sqrt_d_model = 1.0
        return dec


class LoadedDecoderControl(DecoderControl):
    """A decoder control that keeps one decoder per weights and configuration between calls, as a
    library keeps a loaded model: state it carries from one call into the next is seen."""

    def __init__(self, name: str, decoder_class: type[eg.EagerDecoder]) -> None:
        super().__init__(name, decoder_class)
        self.loaded: dict[bytes, eg.EagerDecoder] = {}

    def _decoder(self, state_dict: Mapping[str, Any], config: Any) -> eg.EagerDecoder:
        ref = next(iter(state_dict.values()))
        key = memo.digest(dict(state_dict), config, str(ref.device))
        if key not in self.loaded:
            self.loaded[key] = super()._decoder(state_dict, config)
        return self.loaded[key]


class Float64DecoderControl(DecoderControl):
    """A decoder control declared in float64 only."""

    dtypes = ("float64",)


class BelowFloat64DecoderControl(DecoderControl):
    """A decoder control declared in float32 and bfloat16, as a serving library may be: where a
    float64 run would catch a padding bug, these dtypes must."""

    dtypes = ("float32", "bfloat16")


class Bf16DecoderControl(DecoderControl):
    """A decoder control declared in bfloat16 only."""

    dtypes = ("bfloat16",)


class GramOverRealRowsOnly(eg.EagerDecoder):
    """The metric learner's Gram summed over the prompt's real rows only (padding rows' queries
    zeroed), where the contract sums every query row, padding included."""

    real: Tensor | None = None

    def forward(self, tokens: Tensor, constant_g: Sequence[Tensor] | None = None) -> Any:
        self.real = torch.as_tensor(tokens, device=self.device) != 0  # [B, S]
        return super().forward(tokens, constant_g)

    def chain(self, i: int, q_rot: Tensor) -> Any:
        if self.real is None or self.real.shape[1] != q_rot.shape[2]:
            return super().chain(i, q_rot)
        return super().chain(i, q_rot * self.real[:, None, :, None].to(q_rot.dtype))


class SoftmaxInFloat32(eg.EagerDecoder):
    """Sound (a correct control, for float16): the attention weights computed in float32, the
    −1e9 mask included, and rounded once — where float16 overflows −1e9 to −∞."""

    def attention_weights(self, x: Tensor, support: Tensor) -> Tensor:
        fill = (~support[:, None]).float() * -1e9  # [B, 1, S, T]
        return torch.softmax(x.float() + fill, dim=-1).to(x.dtype)


class ForwardOnlyFp16Control(DecoderControl):
    """A float16 prefill/scoring implementation (``forward`` and ``collapsed`` only)."""

    capabilities = frozenset({"forward", "collapsed"})
    dtypes = ("float16",)


class ForwardOnlyBf16Control(DecoderControl):
    """A bfloat16 prefill/scoring implementation (``forward`` and ``collapsed`` only) with one
    decoder bug; the chain in float32 as the precision policy asks."""

    capabilities = frozenset({"forward", "collapsed"})
    dtypes = ("bfloat16",)


class LogitsOnlyBf16Control(ForwardOnlyBf16Control):
    """As :class:`ForwardOnlyBf16Control`, returning logits only (no G_LM, which the protocol
    leaves optional): its bug is judged through the logits alone."""

    def forward(self, state_dict: Mapping[str, Any], config: Any, tokens: Any, *,
                constant_g: Sequence[Any] | None = None) -> Any:
        return dataclasses.replace(super().forward(state_dict, config, tokens, constant_g=constant_g), G_LM=None)


__all__ = [
    "BelowFloat64DecoderControl",
    "Bf16DecoderControl",
    "ChunkedPrefillFrozenA",
    "CollapsedStepsPlainSdpa",
    "ConversationPrefixCache",
    "DecoderControl",
    "FeedForwardTailDropped",
    "FeedForwardTileOf512",
    "FirstDenseBlockOnly",
    "Float64DecoderControl",
    "ForwardOnlyBf16Control",
    "ForwardOnlyFp16Control",
    "FullLastQueryBlockDropped",
    "GeneratedZerosMasked",
    "GramOverRealRowsOnly",
    "KvPageAliased",
    "KvPowerInActivationDtype",
    "KvRecomputesFromNewRows",
    "LastLayerSkippedPastTwo",
    "LastResidualUnitSkipped",
    "LayerNormChunksOf512",
    "LoadedDecoderControl",
    "LogSumExpFiniteMaskDecoder",
    "LogitsOnlyBf16Control",
    "NocacheIgnoresConstantG",
    "PaddingIgnoredAfterPrompt",
    "PaddingMaskKeptByShape",
    "PositionsRoundedToBf16",
    "RingKvCache",
    "RingKvCacheOf1024",
    "RopeTableOf768",
    "RopeTableOf1024",
    "RotateHalfAsInterleaved",
    "RowLengthsMixed",
    "SecondBestNearTie",
    "SoftmaxInFloat32",
    "StepMaskTileOf8",
    "StepMaskTileOf16",
    "StepPositionTableOf32",
    "StepPositionTableOfEight",
    "StepPositionsFromFirstRealToken",
    "StepPositionsOffByOne",
    "TorchtuneRopeCache",
    "VocabTailBlockDropped",
    "VocabTailBlockOf1024",
]
