"""What a model keeps between calls: the static KV cache of cached decoding and the RoPE tables."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from ..errors import InputError
from ..reference.config import PLDRConfig
from . import functional as KF


@dataclasses.dataclass
class LayerCache:
    """One layer's static cache: rotated keys, values (preallocated to capacity) and operators."""

    k: Tensor  # [B, H, T_max, d]
    v: Tensor  # [B, H, T_max, d]
    A: Tensor | None = None  # [B, H, d, d] prompt generator (kv mode)
    A_LM: Tensor | None = None  # [B, H, d, d]
    G_LM: Tensor | None = None  # [B, H, d, d] operator used for new tokens (kvg mode)


@dataclasses.dataclass
class DecodeCache:
    """Static preallocated KV cache for all layers; ``length`` positions are filled."""

    layers: list[LayerCache]
    length: int
    capacity: int
    key_padding: Tensor | None  # [B, capacity] True at the prompt's padding keys, or None



class RopeTables:
    """cos/sin tables built in float64 up to the positions a pass needs (never the whole
    ``max_seq_len`` at once: a hostile context length must not allocate), cached per device
    and chain dtype. They are always built as normal tensors, also inside ``inference_mode``
    (:meth:`PLDRModel.generate`): an inference tensor in the cache would make every later
    forward with autograd fail ("Inference tensors cannot be saved for backward")."""

    def __init__(self, config: PLDRConfig) -> None:
        self.config = config
        self._length = 0
        self._tables: dict[Any, Any] = {}

    def clear(self) -> None:
        self._length = 0
        self._tables = {}

    def _ensure(self, end: int) -> None:
        if end > self._length:
            c = self.config
            self._length = min(c.max_seq_len, max(256, 1 << (end - 1).bit_length()))
            with torch.inference_mode(False):
                self._tables = {"f64": KF.rope_tables(self._length, c.depth, c.rope_base)}

    def slice(self, start: int, length: int, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos, sin [length, d/2] for positions start … start + length − 1, in the chain dtype."""
        end = start + length
        if end > self.config.max_seq_len:
            raise InputError(f"positions up to {end - 1} exceed the context max_seq_len={self.config.max_seq_len}")
        self._ensure(end)
        key = (device, KF.chain_dtype(dtype))
        if key not in self._tables:
            with torch.inference_mode(False):
                self._tables[key] = tuple(t.to(device=device, dtype=key[1]) for t in self._tables["f64"])
        cos, sin = self._tables[key]
        return cos[start:end], sin[start:end]

    def complex(self, start: int, length: int, device: torch.device, dtype: torch.dtype) -> Tensor:
        """cos + i·sin [length, d/2] (interleaved pairs as complex numbers), in the chain dtype."""
        self.slice(start, length, device, dtype)  # checks the positions, grows the tables
        key = (device, KF.chain_dtype(dtype), "cis")
        cis = self._tables.get(key)
        if cis is None or cis.shape[0] < self._length:
            full_cos, full_sin = self.slice(0, self._length, device, dtype)
            with torch.inference_mode(False):
                cis = self._tables[key] = torch.complex(full_cos, full_sin)
        return cis[start : start + length]



__all__ = ["DecodeCache", "LayerCache", "RopeTables"]
