"""What the audit needs from a model: the backend protocol and the arrays it returns.

Both backends (:class:`plga.audit.backend.ReferenceBackend`, the float64 reference, and
:class:`plga.audit.torch_backend.TorchBackend`, over ``plga.kernels.PLDRModel``) implement
:class:`Backend` and return NumPy float64 arrays. This module imports neither, so each
backend depends on it and not on the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..reference.config import PLDRConfig

#: Generation modes, the project's names: no cache, KV cache, KV + G cache, a constant
#: per-layer operator (the metric learner never runs).
MODES = ("nocache", "kv", "kvg", "collapsed")

#: Deductive tensors every backend returns per layer (scores are not kept).
DEDUCTIVE = ("A", "A_LM", "A_P", "G_LM")


@dataclasses.dataclass
class ForwardOut:
    """Logits [B, S, V] and per-layer deductive tensors {A, A_LM, A_P, G_LM} [B, H, d, d]."""

    logits: np.ndarray
    deductive: list[dict[str, np.ndarray]]


@dataclasses.dataclass
class LayerProbe:
    """One layer's internals for one forward: queries before/after RoPE and the learner input."""

    q_pre: np.ndarray  # [B, H, S, d]
    q_rot: np.ndarray  # [B, H, S, d]
    density: np.ndarray  # [B, H, d, d] D = Q̃ᵀQ̃
    learner_input: np.ndarray  # [B, H, d, d] LN(D) with the layer's affine (rows enter φ)


class Backend(Protocol):
    """What the audit needs from a model implementation."""

    name: str
    config: PLDRConfig

    def forward(
        self, tokens: np.ndarray, constant_g: Sequence[np.ndarray] | None = None, *, last_only: bool = False,
        key_padding: np.ndarray | None = None,
    ) -> ForwardOut:
        """Logits [B, S, V] (``last_only``: [B, 1, V], the last position) and the deductive tensors.

        ``key_padding`` [B, S] bool names the padding keys instead of the ids 0 (all False: a
        generated id 0 is a token, as in cached decoding)."""
        ...

    def generate(
        self, prompt: np.ndarray, n: int, mode: str, *, constant_g: Sequence[np.ndarray] | None = None,
        temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def probe(self, tokens: np.ndarray) -> list[LayerProbe]: ...

    def row_map(self, layer: int, rows: np.ndarray) -> np.ndarray: ...


__all__ = ["DEDUCTIVE", "MODES", "Backend", "ForwardOut", "LayerProbe"]
