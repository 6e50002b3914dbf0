"""The audit's backends: the float64 reference, and the choice between it and torch.

* :class:`ReferenceBackend` — the float64 NumPy reference (:mod:`plga.reference.decoder`),
  exact; the only one that needs no torch, and on the CPU in float64 as fast per core as torch.
* :class:`plga.audit.torch_backend.TorchBackend` (imported lazily) — a thin adapter over
  :class:`plga.kernels.PLDRModel` on any device and dtype.

Both implement :class:`plga.audit.interface.Backend`. Either can wrap a *collapsed*
checkpoint (:func:`load_collapsed_backend`): its stored constant G is then used whenever no
other G is given. :func:`choose_backend` is the ``--backend auto`` rule (``docs/audit.md``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError, UsageError
from ..reference import decoder as dec
from ..reference import spec
from ..reference.config import PLDRConfig
from .interface import DEDUCTIVE, MODES, ForwardOut, LayerProbe


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
            raise UsageError(f"the reference backend computes in float64 only (got --dtype {dtype}); use --backend torch")
        if device != "cpu":
            raise UsageError(f"the reference backend runs on the CPU only (got --device {device}); use --backend torch")
        self.config = config
        self.params64 = dec.to_backend(params)
        self.dtype, self.device = dtype, device
        self.collapsed_g = None if collapsed_g is None else [np.asarray(g, dtype=np.float64) for g in collapsed_g]

    @property
    def collapsed(self) -> bool:
        return self.collapsed_g is not None

    def _g(self, constant_g: Sequence[np.ndarray] | None) -> Sequence[np.ndarray] | None:
        return self.collapsed_g if constant_g is None else constant_g

    def forward(
        self, tokens: np.ndarray, constant_g: Sequence[np.ndarray] | None = None, *, last_only: bool = False,
        key_padding: np.ndarray | None = None,
    ) -> ForwardOut:
        """The reference forward (all logits; ``last_only`` keeps the last position, [B, 1, V])."""
        r = dec.forward(self.params64, self.config, np.asarray(tokens, dtype=np.int64), constant_g=self._g(constant_g),
                        key_padding=key_padding)
        ded = [{k: np.asarray(d[k]) for k in DEDUCTIVE if k in d} for d in r.deductive]
        return ForwardOut(logits=r.logits[:, -1:] if last_only else r.logits, deductive=ded)

    def generate(
        self, prompt: np.ndarray, n: int, mode: str, *, constant_g: Sequence[np.ndarray] | None = None,
        temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Decode ``n`` tokens; ``mode`` one of :data:`~plga.audit.interface.MODES`."""
        if mode not in MODES:
            raise InputError(f"unknown mode {mode!r}; use one of {MODES}")
        r = dec.generate(
            self.params64, self.config, np.asarray(prompt, dtype=np.int64), n, mode,
            constant_g=self._g(constant_g), temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
        )
        return r.tokens, r.step_logits

    def _need_learner(self) -> None:
        if self.collapsed:
            raise InputError("a collapsed model has no metric learner to probe")

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
        """φ = the composition of the layer's residual units on single rows [..., d]."""
        self._need_learner()
        x = np.asarray(rows, dtype=np.float64)
        for blocks, gamma, beta in dec.metric_learner_units(self.params64, self.config, layer):
            x = spec.res_unit(x, blocks, gamma, beta)
        return x


def torch_available() -> bool:
    """True when torch can be imported (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def choose_backend(name: str, config: PLDRConfig, *, device: str = "cpu", dtype: str = "float64") -> str:
    """The backend ``--backend name`` runs: ``reference`` or ``torch``.

    ``auto``: torch where the reference cannot run (a device other than the CPU, or float32);
    the reference otherwise. Measured on the CPU in float64 (``docs/audit.md``, "Choosing a
    backend"): from d_model 64 to 896 the torch backend is 0.75–0.85× the reference's speed on
    one thread and at most 1.4× on two free threads, and 15× slower when its threads share busy
    cores, so there is no model size at which it reliably wins on the CPU.
    """
    if name not in ("auto", "reference", "torch"):
        raise UsageError(f"unknown backend {name!r}; use auto, reference or torch")
    if name == "auto":
        return "torch" if device != "cpu" or dtype != "float64" else "reference"
    return name


def make_backend(
    name: str, params: Mapping[str, np.ndarray], config: PLDRConfig, *, device: str = "cpu", dtype: str = "float64"
) -> Any:
    """The backend :func:`choose_backend` picks, on ``params``."""
    name = choose_backend(name, config, device=device, dtype=dtype)
    if name == "reference":
        return ReferenceBackend(params, config, dtype=dtype, device=device)
    if not torch_available():
        raise UsageError("--backend torch needs torch (pip install 'plga[torch]')")
    from .torch_backend import TorchBackend

    return TorchBackend.from_params(params, config, device=device, dtype=dtype)


def load_collapsed_backend(name: str, folder: Any, *, device: str = "cpu", dtype: str = "float64") -> Any:
    """A backend on the collapsed checkpoint in ``folder`` (:mod:`plga.reference.checkpoint`).

    ``torch``: ``plga.kernels.PLDRModel.from_pretrained(folder)``; ``reference``:
    :func:`plga.reference.checkpoint.load_collapsed` with the stored G as ``collapsed_g``.
    Its ``collapsed_g`` attribute holds the stored operators (float64 NumPy, one per layer).
    """
    if name == "torch":
        if not torch_available():
            raise UsageError("--backend torch needs torch (pip install 'plga[torch]')")
        from .torch_backend import TorchBackend

        return TorchBackend.from_pretrained(folder, device=device, dtype=dtype)
    if name == "reference":
        from ..reference.checkpoint import load_collapsed

        params, config, g = load_collapsed(folder)
        return ReferenceBackend(params, config, dtype=dtype, device=device, collapsed_g=g)
    raise UsageError(f"unknown backend {name!r}; use reference or torch")
