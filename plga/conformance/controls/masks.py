"""A mask-semantics control: the published finite mask confused with the ideal one."""

from __future__ import annotations

from typing import Any

from .. import eager as eg
from ..adapter import Adapter


class FiniteMaskAsIdeal(Adapter):
    """``finite_mask=True`` computed as the ideal mask: right wherever a row has an allowed key,
    but a fully masked row gives zeros instead of the published softmax over every key."""

    dtypes = ("float32", "float64")
    capabilities = frozenset({"attention", "causal", "key_padding_mask", "finite_mask"})
    dtype_policy = "eager, in the input dtype"

    def __init__(self, name: str) -> None:
        self.name, self.version = name, "control"

    def attention(self, q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                  scale: float | None = None, finite_mask: bool = False) -> Any:
        return eg.plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale,
                                 finite_mask=False)


__all__ = ["FiniteMaskAsIdeal"]
