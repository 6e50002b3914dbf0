"""The audit's small backend interface: a forward with deductive tensors, decoding and layer probes.

Two implementations:

* :class:`ReferenceBackend` — the float64 NumPy reference (:mod:`plga.reference.decoder`),
  exact and slow; the default for small models and the only one that needs no torch.
* :class:`TorchBackend` (:mod:`plga.audit.torch_backend`, imported lazily) — a thin adapter
  over the project's torch implementation :class:`plga.kernels.PLDRModel` (fused kernels,
  static caches) on a device and dtype, for large checkpoints.

Both return NumPy float64 arrays, and both compute their layer probes (pre/post-RoPE
queries, the metric learner's input rows and its row map) on their own model. Either can
wrap a *collapsed* checkpoint (:func:`plga.reference.checkpoint.load_collapsed`, :func:`load_collapsed_backend`):
its stored constant G is then used whenever no other G is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ..reference import decoder as dec
from ..reference import spec
from ..reference.config import PLDRConfig

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

    def forward(self, tokens: np.ndarray, constant_g: Sequence[np.ndarray] | None = None) -> ForwardOut: ...

    def generate(
        self, prompt: np.ndarray, n: int, mode: str, *, constant_g: Sequence[np.ndarray] | None = None,
        temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def probe(self, tokens: np.ndarray) -> list[LayerProbe]: ...

    def row_map(self, layer: int, rows: np.ndarray) -> np.ndarray: ...


class ReferenceBackend:
    """The float64 reference decoder (exact; the default for small models).

    ``collapsed_g`` (one [H, d, d] per layer, e.g. from :func:`plga.reference.checkpoint.load_collapsed`)
    makes it the collapsed model: that G replaces the metric learner whenever no ``constant_g``
    is passed, and ``params`` need no metric-learner tensors.
    """

    name = "reference"

    def __init__(
        self, params: Mapping[str, np.ndarray], config: PLDRConfig, dtype: str = "float64", device: str = "cpu",
        *, collapsed_g: Sequence[np.ndarray] | None = None,
    ) -> None:
        if dtype != "float64":
            raise ValueError(f"the reference backend computes in float64 only (got --dtype {dtype}); use --backend torch")
        if device != "cpu":
            raise ValueError(f"the reference backend runs on the CPU only (got --device {device}); use --backend torch")
        self.config = config
        self.params64 = dec.to_backend(params)
        self.dtype, self.device = dtype, device
        self.collapsed_g = None if collapsed_g is None else [np.asarray(g, dtype=np.float64) for g in collapsed_g]

    @property
    def collapsed(self) -> bool:
        return self.collapsed_g is not None

    def _g(self, constant_g: Sequence[np.ndarray] | None) -> Sequence[np.ndarray] | None:
        return self.collapsed_g if constant_g is None else constant_g

    def forward(self, tokens: np.ndarray, constant_g: Sequence[np.ndarray] | None = None) -> ForwardOut:
        r = dec.forward(self.params64, self.config, np.asarray(tokens, dtype=np.int64), constant_g=self._g(constant_g))
        ded = [{k: np.asarray(d[k]) for k in DEDUCTIVE if k in d} for d in r.deductive]
        return ForwardOut(logits=r.logits, deductive=ded)

    def generate(
        self, prompt: np.ndarray, n: int, mode: str, *, constant_g: Sequence[np.ndarray] | None = None,
        temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Decode ``n`` tokens; ``mode`` nocache, kv, kvg or constant (alias collapsed)."""
        r = dec.generate(
            self.params64, self.config, np.asarray(prompt, dtype=np.int64), n, "constant" if mode == "collapsed" else mode,
            constant_g=self._g(constant_g), temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
        )
        return r.tokens, r.step_logits

    def _need_learner(self) -> None:
        if self.collapsed:
            raise ValueError("a collapsed model has no metric learner to probe")

    def probe(self, tokens: np.ndarray) -> list[LayerProbe]:
        """Per layer: q before and after RoPE, D = Q̃ᵀQ̃ and LN(D), from one reference forward."""
        self._need_learner()
        params, config = self.params64, self.config
        tokens = np.asarray(tokens, dtype=np.int64)
        support = dec.attention_support(tokens)
        positions = np.arange(tokens.shape[1])
        h = dec.embed(params, config, tokens)
        out = []
        for i in range(config.num_layers):
            p = f"decoder.dec_layers.{i}.mha1."
            q_pre = dec._heads(dec._linear(h, params, p + "wq"), config)  # [B, H, S, d]
            q_rot = spec.rope(q_pre, positions, config.rope_base, config.rope_style)
            density = spec.density_operator(q_rot)
            x0 = spec.layer_norm(density, params[p + "layernorm1.weight"], params[p + "layernorm1.bias"])
            out.append(LayerProbe(q_pre=q_pre, q_rot=q_rot, density=density, learner_input=x0))
            if i + 1 < config.num_layers:
                h, _, _ = dec.decoder_layer(params, config, i, h, positions, support)
        return out

    def row_map(self, layer: int, rows: np.ndarray) -> np.ndarray:
        """φ = the composition of the layer's residual units on single rows [..., d] (§3.11)."""
        self._need_learner()
        x = np.asarray(rows, dtype=np.float64)
        for blocks, gamma, beta in dec.metric_learner_units(self.params64, self.config, layer):
            x = spec.res_unit(x, blocks, gamma, beta)
        return x


def torch_available() -> bool:
    """True when torch can be imported (without importing it twice)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def make_backend(
    name: str, params: Mapping[str, np.ndarray], config: PLDRConfig, *, device: str = "cpu", dtype: str = "float64"
) -> Any:
    """``reference``, ``torch`` or ``auto`` (torch when importable and d_model ≥ 512, else reference)."""
    if name == "auto":
        name = "torch" if (torch_available() and config.d_model >= 512) or device != "cpu" or dtype != "float64" else "reference"
    if name == "reference":
        return ReferenceBackend(params, config, dtype=dtype, device=device)
    if name == "torch":
        if not torch_available():
            raise ValueError("--backend torch needs torch (pip install 'plga[torch]')")
        from .torch_backend import TorchBackend

        return TorchBackend.from_params(params, config, device=device, dtype=dtype)
    raise ValueError(f"unknown backend {name!r}; use auto, reference or torch")


def load_collapsed_backend(name: str, folder: Any, *, device: str = "cpu", dtype: str = "float64") -> Any:
    """A backend on the collapsed checkpoint in ``folder`` (:mod:`plga.reference.checkpoint`).

    ``torch``: ``plga.kernels.PLDRModel.from_pretrained(folder)``; ``reference``:
    :func:`plga.reference.checkpoint.load_collapsed` with the stored G as ``collapsed_g``.
    Its ``collapsed_g`` attribute holds the stored operators (float64 NumPy, one per layer).
    """
    if name == "torch":
        if not torch_available():
            raise ValueError("--backend torch needs torch (pip install 'plga[torch]')")
        from .torch_backend import TorchBackend

        return TorchBackend.from_pretrained(folder, device=device, dtype=dtype)
    if name == "reference":
        from ..reference.checkpoint import load_collapsed

        params, config, g = load_collapsed(folder)
        return ReferenceBackend(params, config, dtype=dtype, device=device, collapsed_g=g)
    raise ValueError(f"unknown backend {name!r}; use reference or torch")
