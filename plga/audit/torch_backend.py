"""Torch backend of the audit: a thin adapter over :class:`plga.kernels.PLDRModel` (needs torch).

Everything model-specific is the kernels' code: the forward with deductive tensors
(``PLDRModel.forward(deductive=True)``), greedy decoding in every cache mode
(``PLDRModel.generate``), collapsed checkpoints (``PLDRModel.from_pretrained``). What the
kernels do not expose is assembled from their public pieces:

* seeded *sampled* decoding runs the kernels' cache API (``new_cache``, ``forward(cache=)``,
  ``step``) with the reference's NumPy sampler (:func:`plga.reference.decoder.sample_next`),
  so a seed draws the same continuation on both backends (``PLDRModel.generate`` samples with
  a ``torch.Generator``, a different stream);
* layer probes capture each layer's ``mha1.wq`` output with a forward hook and rebuild RoPE,
  the density operator and LN(D) with :mod:`plga.kernels.functional` (``rope_tables``,
  ``apply_rope``, ``density_operator``, ``metric_learner`` with no units);
* the metric learner's row map φ (the residual units without the input LayerNorm) is the
  loop of ``kernels.functional.metric_learner`` over ``layer_weights_of(mha1)["units"]``.

Arrays come back as NumPy float64. On the CPU, a small model (d_model ≤
:data:`SMALL_D_MODEL`) runs each call on one intra-op thread: at those shapes a second thread
gains at most 1.4× on free cores and costs 15× when the cores are shared (``docs/audit.md``).
The vocabulary projection keeps the process's threads (``PLDRModel.vocab_threads``): a
float64 GEMV over 32000 words takes a millisecond, long enough for a second core to pay.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import InputError, UsageError
from ..kernels import PLDRModel
from ..kernels import functional as KF
from ..kernels.packed import intra_op_threads
from ..reference.config import PLDRConfig
from .interface import DEDUCTIVE, MODES, ForwardOut, LayerProbe

_DT = {"float64": torch.float64, "float32": torch.float32}

#: On the CPU, models up to this width run on one intra-op thread (measured; module docstring).
SMALL_D_MODEL = 256


def _call(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A backend call: inference mode, on at most the backend's thread cap."""

    @functools.wraps(fn)
    def wrapper(self: TorchBackend, *args: Any, **kwargs: Any) -> Any:
        threads = torch.get_num_threads()
        cap = None if self.thread_cap is None else min(self.thread_cap, threads)
        self.model.vocab_threads = None if cap is None else threads  # the vocabulary keeps the process's threads
        with intra_op_threads(cap), torch.inference_mode():
            return fn(self, *args, **kwargs)

    return wrapper


def _device(device: str) -> torch.device:
    try:
        dev = torch.device(device)
        torch.empty(0, device=dev)
    except (RuntimeError, AssertionError) as exc:
        raise UsageError(f"torch device {device!r} is not available: {str(exc).splitlines()[0]}") from None
    return dev


def _dtype(dtype: str) -> torch.dtype:
    if dtype not in _DT:
        raise UsageError(f"dtype must be float64 or float32, got {dtype!r}")
    return _DT[dtype]


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().to("cpu", torch.float64).numpy()


class TorchBackend:
    """The audit backend over a :class:`PLDRModel` (full or collapsed) on any device and dtype."""

    name = "torch"

    def __init__(self, model: PLDRModel) -> None:
        self.model = model.eval()
        self.config: PLDRConfig = model.config
        self.dtype, self.device = model.dtype, model.device
        self.collapsed_g: list[np.ndarray] | None = (
            [_np(g) for g in model.decoder.collapsed_G] if model.collapsed else None
        )
        small_cpu = model.device.type == "cpu" and self.config.d_model <= SMALL_D_MODEL
        self.thread_cap: int | None = 1 if small_cpu else None

    @classmethod
    def from_params(
        cls, params: Mapping[str, np.ndarray], config: PLDRConfig, device: str = "cpu", dtype: str = "float64"
    ) -> TorchBackend:
        """``PLDRModel.from_reference(params, config)`` in ``dtype`` on ``device``."""
        return cls(PLDRModel.from_reference(params, config, dtype=_dtype(dtype), device=_device(device)))

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str = "cpu", dtype: str = "float64") -> TorchBackend:
        """``PLDRModel.from_pretrained(path)``: a checkpoint, or a collapsed folder."""
        return cls(PLDRModel.from_pretrained(path, dtype=_dtype(dtype), device=_device(device)))

    @property
    def collapsed(self) -> bool:
        return self.model.collapsed

    def _tokens(self, tokens: Any) -> torch.Tensor:
        return torch.as_tensor(np.asarray(tokens, dtype=np.int64), device=self.model.device)

    # -- forward and decoding ---------------------------------------------------------------

    @_call
    def forward(
        self, tokens: np.ndarray, constant_g: Sequence[np.ndarray] | None = None, *, last_only: bool = False,
        key_padding: np.ndarray | None = None,
    ) -> ForwardOut:
        """Logits [B, S, V] (``last_only``: [B, 1, V], only the last position projected) and per-layer
        A, A_LM, A_P, G_LM (only G_LM under a constant G)."""
        pad = None if key_padding is None else torch.as_tensor(np.asarray(key_padding))
        out = self.model(self._tokens(tokens), logits="last" if last_only else "all", deductive=True, G=constant_g,
                         key_padding=pad)
        ded = [{k: _np(d[k]) for k in DEDUCTIVE if k in d} for d in out.deductive or []]
        logits = out.logits[:, None] if last_only else out.logits
        return ForwardOut(logits=_np(logits), deductive=ded)

    @_call
    def generate(
        self, prompt: np.ndarray, n: int, mode: str, *, constant_g: Sequence[np.ndarray] | None = None,
        temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(tokens [B, S + n], step logits [B, n, V]); ``mode`` one of :data:`~plga.audit.interface.MODES`."""
        if mode not in MODES:
            raise InputError(f"unknown mode {mode!r}; use one of {MODES}")
        if mode == "collapsed" and constant_g is None and not self.model.collapsed:
            raise InputError("mode 'collapsed' needs constant_g (one operator per layer) or a collapsed model")
        r = self.model.generate(
            self._tokens(prompt), n, mode, G=constant_g, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
            return_step_logits=True,
        )  # sampling: the one sampler of plga.reference.sampling, as the reference backend
        assert r.step_logits is not None
        return r.tokens.cpu().numpy().astype(np.int64), _np(r.step_logits)

    # -- probes -------------------------------------------------------------------------------

    def _need_learner(self) -> None:
        if self.model.collapsed:
            raise InputError("a collapsed model has no metric learner to probe")

    @_call
    def probe(self, tokens: np.ndarray) -> list[LayerProbe]:
        """Per layer: q before and after RoPE, D = Q̃ᵀQ̃ and LN(D), from one kernels forward."""
        self._need_learner()
        m, c = self.model, self.config
        t = self._tokens(tokens)
        b, s = t.shape
        layers = m.decoder.dec_layers
        q_pre: dict[int, torch.Tensor] = {}
        hooks = [
            layer.mha1.wq.register_forward_hook(lambda _mod, _inp, out, i=i: q_pre.__setitem__(i, out))
            for i, layer in enumerate(layers)
        ]
        try:
            m(t, logits=None)
        finally:
            for h in hooks:
                h.remove()
        cos, sin = KF.rope_tables(s, c.depth, c.rope_base, device=m.device)
        out = []
        for i, layer in enumerate(layers):
            mha = layer.mha1
            q = q_pre[i].view(b, s, c.num_heads, c.depth).transpose(1, 2)  # [B, H, S, d]
            q_rot = KF.apply_rope(q, cos, sin, c.rope_style)
            density = KF.density_operator(q_rot)  # [B, H, d, d] in the chain dtype
            x0 = KF.metric_learner(density, mha.layernorm1.weight, mha.layernorm1.bias, [])  # LN(D) only
            out.append(LayerProbe(q_pre=_np(q), q_rot=_np(q_rot), density=_np(density), learner_input=_np(x0)))
        return out

    @_call
    def row_map(self, layer: int, rows: np.ndarray) -> np.ndarray:
        """φ = the composition of the layer's residual units on single rows [..., d]."""
        self._need_learner()
        mha = self.model.decoder.dec_layers[layer].mha1
        units = KF.layer_weights_of(mha)["units"]
        x = torch.as_tensor(np.asarray(rows, dtype=np.float64), device=self.model.device).to(mha.layernorm1.weight.dtype)
        d = x.shape[-1]
        for blocks, gamma, beta in units:  # the unit loop of kernels.functional.metric_learner
            y = x
            for block in blocks:
                y = KF.swiglu(y, *block)
            x = F.layer_norm(y + x, (d,), gamma, beta, KF.LAYER_NORM_EPS)
        return _np(x)
