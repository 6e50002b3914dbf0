"""Negative controls: deliberately wrong PLGA implementations the suite must reject.

Each entry of :data:`BROKEN` is a :class:`BrokenKernel` naming the bug, the factory of the
implementation and the check that must catch it. Attention-level bugs are plain callables
(exercising the callable-adapter path); chain- and decoder-level bugs subclass the eager
implementation (:mod:`plga.conformance.eager`) and change exactly one thing.
``tests/conformance/test_meta.py`` runs :func:`plga.conformance.check_kernel` on every one
and asserts a failure in ``expected_check``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from . import eager as eg
from .adapter import Adapter
from .adapters import EagerAdapter


def _attention_callable(name: str, body: Callable[..., Tensor]) -> Callable[..., Tensor]:
    def fn(q: Tensor, k: Tensor, v: Tensor, G: Tensor | None, *, causal: bool = False,
           key_padding_mask: Tensor | None = None, scale: float | None = None) -> Tensor:
        return body(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale)

    fn.__name__ = fn.__qualname__ = name
    fn.plga_name = f"broken.{name}"  # type: ignore[attr-defined]
    return fn


def _masked_softmax_attention(x: Tensor, v: Tensor, allowed: Tensor | None, dim: int = -1, fill: float | None = None) -> Tensor:
    if allowed is not None:
        x = x.masked_fill(~allowed, float("-inf") if fill is None else 0.0) + (0.0 if fill is None else (~allowed) * fill)
    return torch.softmax(x, dim=dim).nan_to_num(0.0) @ v


def _scores(q: Tensor, k: Tensor, G: Tensor | None, scale: float | None) -> Tensor:
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    qg = q if G is None else q @ G.to(q.dtype)
    return (qg @ k.transpose(-1, -2)) * s


def transposed_g(q: Tensor, k: Tensor, v: Tensor, G: Tensor | None, *, causal: bool = False,
                 key_padding_mask: Tensor | None = None, scale: float | None = None) -> Tensor:
    """Uses Q Gᵀ Kᵀ instead of Q G Kᵀ."""
    g = None if G is None else G.transpose(-1, -2)
    return eg.plga_attention(q, k, v, g, causal=causal, key_padding_mask=key_padding_mask, scale=scale)


def missing_scale(q: Tensor, k: Tensor, v: Tensor, G: Tensor | None, *, causal: bool = False,
                  key_padding_mask: Tensor | None = None, scale: float | None = None) -> Tensor:
    """Forgets 1/√d (and any explicit scale)."""
    return eg.plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=1.0)


def softmax_wrong_axis(q: Tensor, k: Tensor, v: Tensor, G: Tensor | None, *, causal: bool = False,
                       key_padding_mask: Tensor | None = None, scale: float | None = None) -> Tensor:
    """Normalizes over the query axis instead of the key axis."""
    allowed = eg.attention_support(q.shape[2], k.shape[2], causal=causal, key_padding_mask=key_padding_mask, device=q.device)
    return _masked_softmax_attention(_scores(q, k, G, scale), v, allowed, dim=-2)


def causal_off_by_one(q: Tensor, k: Tensor, v: Tensor, G: Tensor | None, *, causal: bool = False,
                      key_padding_mask: Tensor | None = None, scale: float | None = None) -> Tensor:
    """Lets every query see one future key (tril diagonal shifted by one)."""
    s, t = q.shape[2], k.shape[2]
    allowed = eg.attention_support(s, t, causal=False, key_padding_mask=key_padding_mask, device=q.device)
    if causal:
        c = torch.ones(s, t, dtype=torch.bool, device=q.device).tril(diagonal=t - s + 1)[None, None]
        allowed = c if allowed is None else allowed & c
    return _masked_softmax_attention(_scores(q, k, G, scale), v, allowed)


def padding_ignored(q: Tensor, k: Tensor, v: Tensor, G: Tensor | None, *, causal: bool = False,
                    key_padding_mask: Tensor | None = None, scale: float | None = None) -> Tensor:
    """Drops the key padding mask."""
    return eg.plga_attention(q, k, v, G, causal=causal, key_padding_mask=None, scale=scale)


def finite_mask_leak(q: Tensor, k: Tensor, v: Tensor, G: Tensor | None, *, causal: bool = False,
                     key_padding_mask: Tensor | None = None, scale: float | None = None) -> Tensor:
    """Masks with a finite −1e2 instead of −1e9 / −∞: large masked scores leak through."""
    allowed = eg.attention_support(q.shape[2], k.shape[2], causal=causal, key_padding_mask=key_padding_mask, device=q.device)
    x = _scores(q, k, G, scale)
    if allowed is not None:
        x = x + (~allowed).to(x.dtype) * -1e2
    return torch.softmax(x, dim=-1) @ v


def heads_permuted(q: Tensor, k: Tensor, v: Tensor, G: Tensor | None, *, causal: bool = False,
                   key_padding_mask: Tensor | None = None, scale: float | None = None) -> Tensor:
    """Applies the G of head h+1 to head h (a broadcast / layout mix-up)."""
    g = None if G is None else torch.roll(G, shifts=-1, dims=-3)
    return eg.plga_attention(q, k, v, g, causal=causal, key_padding_mask=key_padding_mask, scale=scale)


# --- chain- and decoder-level bugs (subclasses of the eager implementation) -----------------


class _ChainBug(EagerAdapter):
    """An eager adapter whose chain / decoder has one bug; attention stays correct."""

    capabilities = frozenset({"operator_chain", "forward", "collapsed", "cache_kv", "cache_kvg", "cache_nocache"})

    def __init__(self) -> None:
        super().__init__()
        self.name = f"broken.{type(self).__name__}"


def _fp16_power(A: Tensor, W: Tensor, b: Tensor, P: Tensor, a: Tensor, b_a: Tensor, order: str = "natural") -> tuple[Tensor, Tensor, Tensor]:
    a_lm, _, _ = eg.power_stage(A, W, b, P, a, b_a, order)
    a_p = torch.pow(a_lm.to(torch.float16), P.to(torch.float16)).to(A.dtype)  # A_LM's 1e-9 floor underflows
    return a_lm, a_p, a @ a_p + b_a


def _no_bias_power(A: Tensor, W: Tensor, b: Tensor, P: Tensor, a: Tensor, b_a: Tensor, order: str = "natural") -> tuple[Tensor, Tensor, Tensor]:
    a_lm, a_p, _ = eg.power_stage(A, W, b, P, a, b_a, order)
    return a_lm, a_p, a @ a_p  # b_a dropped


class _PowerDecoder(eg.EagerDecoder):
    power_fn: Callable[..., tuple[Tensor, Tensor, Tensor]] = staticmethod(eg.power_stage)

    def chain(self, i: int, q_rot: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        w = self.layer_weights(i)
        A = eg.metric_learner(eg.density_operator(q_rot, self.order), w, self.order)
        return (A, *self.power(i, A))

    def power(self, i: int, A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        w = self.layer_weights(i)
        return type(self).power_fn(A, w["W"], w["b"], w["P"], w["a"], w["b_a"], self.order)


class _PowerBug(_ChainBug):
    """A chain bug confined to the power stage: ``power_fn`` replaces it in the chain and decoder."""

    power_fn: Callable[..., tuple[Tensor, Tensor, Tensor]] = staticmethod(eg.power_stage)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.decoder_class = type(f"{cls.__name__}Decoder", (_PowerDecoder,), {"power_fn": staticmethod(cls.power_fn)})

    def operator_chain(self, q_rot: Tensor, layer_weights: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        w = eg.cast_layer_weights(layer_weights, q_rot.dtype, q_rot.device)
        A = eg.metric_learner(eg.density_operator(q_rot), w)
        return (A, *type(self).power_fn(A, w["W"], w["b"], w["P"], w["a"], w["b_a"]))


class Fp16PowerStage(_PowerBug):
    """Evaluates A_LM^P in float16 (A_LM's 1e-9 floor underflows; 3 digits of precision)."""

    power_fn = staticmethod(_fp16_power)


class GBiasDropped(_PowerBug):
    """Computes G_LM = a A_P, dropping the bias b_a."""

    power_fn = staticmethod(_no_bias_power)


class _GBeforeRopeDecoder(eg.EagerDecoder):
    """Absorbs a constant G into the query projection *before* RoPE: RoPE(Q G) instead of RoPE(Q) G."""

    def rotate_queries(self, i: int, h: Tensor, positions: Tensor, constant_g: Tensor | None) -> Tensor:
        q = self.heads(self.linear(h, f"decoder.dec_layers.{i}.mha1.wq"))  # [B, H, S, d]
        if constant_g is not None:
            q = q @ constant_g.to(q.dtype)  # W_q G: exact without RoPE, wrong with it
        return self.rotate(q, positions)

    def constant_operator(self, constant_g: Tensor) -> Tensor:
        d = constant_g.shape[-1]
        return torch.eye(d, dtype=constant_g.dtype, device=constant_g.device).expand_as(constant_g)


class GBeforeRope(_ChainBug):
    """Collapsed inference with G absorbed into W_q before RoPE (exact only if G commutes with RoPE)."""

    capabilities = frozenset({"forward", "collapsed", "cache_kvg"})
    decoder_class = _GBeforeRopeDecoder


class StaleGCache(_ChainBug):
    """Keeps the G-cache of the first prompt it decoded (never invalidated for a new prompt)."""

    capabilities = frozenset({"forward", "cache_kv", "cache_kvg"})

    def __init__(self) -> None:
        super().__init__()
        self._stale: list[Tensor] | None = None

    def generate(self, state_dict: Any, config: Any, prompt: Any, max_new_tokens: int, *, mode: str,
                 constant_g: Any = None) -> Any:
        if mode != "kvg":
            return super().generate(state_dict, config, prompt, max_new_tokens, mode=mode, constant_g=constant_g)
        dec = self._decoder(state_dict, config)
        if self._stale is None:
            _, deds, _ = dec.forward(prompt)
            self._stale = [d["G_LM"] for d in deds]
        stale = self._stale
        original = dec.cached_operator

        def cached(i: int, cache: eg.LayerCache, m: str) -> Any:
            a, a_lm, _ = original(i, cache, m)
            return a, a_lm, stale[i][: cache.k.shape[0]]

        dec.cached_operator = cached  # type: ignore[method-assign]
        from .adapter import GenerateOutput

        tokens, steps = dec.generate(prompt, max_new_tokens, "kvg")
        return GenerateOutput(tokens, steps)


@dataclasses.dataclass(frozen=True)
class BrokenKernel:
    name: str
    bug: str
    factory: Callable[[], Any]
    expected_check: str

    def make(self) -> Adapter | Callable[..., Any]:
        return self.factory()


class LoadedModelLeak(_ChainBug):
    """Keeps one model per state dict it was given (by identity, as a library keeps a loaded
    model) and lets that model carry state into later calls: kv decoding reuses the frozen A of
    the model's first kv prompt, and decoding with a constant G reuses the model's first G.
    Invisible while every call gets a fresh copy of the state dict."""

    capabilities = frozenset({"forward", "collapsed", "cache_kv"})

    def __init__(self) -> None:
        super().__init__()
        self._models: list[tuple[Any, dict[str, Any]]] = []  # (state dict, what its model carries); held, as a loaded model is

    def _carried(self, state_dict: Any) -> dict[str, Any]:
        for sd, carried in self._models:
            if sd is state_dict:
                return carried
        self._models.append((state_dict, {}))
        return self._models[-1][1]

    def generate(self, state_dict: Any, config: Any, prompt: Any, max_new_tokens: int, *, mode: str,
                 constant_g: Any = None) -> Any:
        from .adapter import GenerateOutput

        carried = self._carried(state_dict)
        if mode == "collapsed":
            constant_g = carried.setdefault("G", constant_g)
            return super().generate(state_dict, config, prompt, max_new_tokens, mode=mode, constant_g=constant_g)
        dec = self._decoder(state_dict, config)
        if "A" not in carried:
            _, deds, _ = dec.forward(prompt)
            carried["A"] = [d["A"] for d in deds]
        first = carried["A"]
        original = dec.cached_operator

        def cached(i: int, cache: eg.LayerCache, m: str) -> Any:
            if first[i].shape == cache.A.shape:
                cache.A = first[i]
            return original(i, cache, m)

        dec.cached_operator = cached  # type: ignore[method-assign]
        tokens, steps = dec.generate(prompt, max_new_tokens, mode)
        return GenerateOutput(tokens, steps)


def _fn(f: Callable[..., Tensor]) -> Callable[[], Callable[..., Tensor]]:
    return lambda: _attention_callable(f.__name__, f)


#: Every negative control, with the check that must reject it.
BROKEN: dict[str, BrokenKernel] = {
    b.name: b
    for b in [
        BrokenKernel("transposed_g", "Q Gᵀ Kᵀ instead of Q G Kᵀ", _fn(transposed_g), "sentinel_g"),
        BrokenKernel("g_before_rope", "G absorbed into W_q before RoPE in collapsed inference", GBeforeRope, "forward_collapsed"),
        BrokenKernel("missing_scale", "no 1/√d", _fn(missing_scale), "attention_unmasked"),
        BrokenKernel("softmax_wrong_axis", "softmax over queries", _fn(softmax_wrong_axis), "attention_unmasked"),
        BrokenKernel("causal_off_by_one", "each query sees one future key", _fn(causal_off_by_one), "attention_causal"),
        BrokenKernel("padding_ignored", "key padding mask dropped", _fn(padding_ignored), "attention_padding"),
        BrokenKernel("finite_mask_leak", "masked scores get −1e2, not −1e9", _fn(finite_mask_leak), "attention_mask_dominance"),
        BrokenKernel("stale_gcache", "G-cache kept from the first prompt", StaleGCache, "gcache_invalidated"),
        BrokenKernel("loaded_model_leak", "a model kept loaded carries the first kv prompt's A and the first constant G into later calls",
                     LoadedModelLeak, "state_between_calls"),
        BrokenKernel("fp16_power_stage", "A_LM^P evaluated in float16", Fp16PowerStage, "operator_chain"),
        BrokenKernel("heads_permuted", "G of head h+1 applied to head h", _fn(heads_permuted), "sentinel_g"),
        BrokenKernel("g_bias_dropped", "G_LM = a A_P without b_a", GBiasDropped, "operator_chain"),
    ]
}


__all__ = [
    "BROKEN",
    "BrokenKernel",
    "Fp16PowerStage",
    "GBeforeRope",
    "GBiasDropped",
    "LoadedModelLeak",
    "StaleGCache",
    "causal_off_by_one",
    "finite_mask_leak",
    "heads_permuted",
    "missing_scale",
    "padding_ignored",
    "softmax_wrong_axis",
    "transposed_g",
]
