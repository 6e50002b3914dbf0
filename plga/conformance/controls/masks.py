"""Mask-semantics controls: the published finite mask confused with the ideal one, forward or
backward (wrong), and the finite mask through a log-sum-exp normalization in float64 (correct)."""

from __future__ import annotations

import math
from typing import Any

import torch

from .. import eager as eg
from ..adapter import Adapter


class _MaskControl(Adapter):
    """An attention-only control that declares the finite mask."""

    capabilities = frozenset({"attention", "causal", "key_padding_mask", "finite_mask"})

    def __init__(self, name: str) -> None:
        self.name, self.version = name, "control"


class FiniteMaskAsIdeal(_MaskControl):
    """``finite_mask=True`` computed as the ideal mask: right wherever a row has an allowed key,
    but a fully masked row gives zeros instead of the published softmax over every key."""

    dtypes = ("float32", "float64")
    dtype_policy = "eager, in the input dtype"

    def attention(self, q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                  scale: float | None = None, finite_mask: bool = False) -> Any:
        return eg.plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale,
                                 finite_mask=False)


class FiniteMaskBackwardIdeal(_MaskControl):
    """The published finite mask forward (a row with no allowed key averages every value), its
    backward taken from the ideal mask: those rows pass no gradient to the values."""

    dtypes = ("float32",)
    capabilities = _MaskControl.capabilities | {"backward"}
    dtype_policy = "eager, in the input dtype"

    def attention(self, q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                  scale: float | None = None, finite_mask: bool = False) -> Any:
        kw: dict[str, Any] = dict(causal=causal, key_padding_mask=key_padding_mask, scale=scale)
        ideal = eg.plga_attention(q, k, v, G, **kw)
        if not finite_mask:
            return ideal
        return ideal + (eg.plga_attention(q, k, v, G, finite_mask=True, **kw) - ideal).detach()


class LogSumExpFiniteMask(_MaskControl):
    """Sound, float64: P = exp(x − logsumexp(x)) over the scaled scores x, the finite mask added
    as −1e9 (or −∞ for the ideal mask, rows with no key zeroed), then P V. On a row with no
    allowed key x is about −1e9 and the log-sum-exp is rounded at that magnitude: every weight
    carries u · 1e9 ≈ 1e-7 relative, which the log-sum-exp baseline of float64 measures."""

    dtypes = ("float64",)
    dtype_policy = "float64, softmax as exp(x − logsumexp(x))"

    def attention(self, q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                  scale: float | None = None, finite_mask: bool = False) -> Any:
        s, t = q.shape[2], k.shape[2]
        sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        qg = q if G is None else q @ G
        x = (qg @ k.transpose(-1, -2)) * sc  # [B, H, S, T]
        allowed = eg.attention_support(s, t, causal=causal, key_padding_mask=key_padding_mask, device=q.device)
        if allowed is None:
            allowed = torch.ones(1, 1, s, t, dtype=torch.bool, device=q.device)
        if finite_mask:
            return eg.finite_softmax_lse(x, allowed) @ v
        x = x.masked_fill(~allowed, -math.inf)
        p = torch.exp(x - torch.logsumexp(x, dim=-1, keepdim=True))
        return torch.nan_to_num(p, nan=0.0) @ v  # an ideal-mask row with no key: exp(−∞ + ∞) → 0


__all__ = ["FiniteMaskAsIdeal", "FiniteMaskBackwardIdeal", "LogSumExpFiniteMask"]
