"""The shipped adapters: the project's kernels (the default), the reference, and eager torch.

* :func:`kernels` — :mod:`plga.kernels` (fused SDPA backend), capabilities read from what the
  package actually defines, so the suite runs against a partial build and names the gaps.
* :func:`kernels_eager` — the same package with ``backend="eager"``.
* :func:`kernels_captured` — the same package with captured decoding steps (``compile_decode``).
* :func:`kernels_at_scale` — the same package with every size threshold at its lowest
  (:mod:`plga.kernels.thresholds`): the suite's small inputs run the paths of large models.
* :func:`reference` — the float64 NumPy reference wrapped as an implementation (rounds its
  float64 result to the input dtype): the "always passes" sanity implementation.
* :class:`EagerAdapter` — :mod:`plga.conformance.eager`, the suite's baseline, as an adapter:
  the base of negative controls that change one stage; never judged itself (it would be
  compared with itself).

The device comes from ``$PLGA_DEVICE`` (default ``cpu``); CUDA is never queried at import.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import eager as eg
from . import memo, oracle
from .adapter import Adapter, ForwardOutput, GenerateOutput, NotProvided, adapter_factory

#: The most models a :class:`KernelsAdapter` keeps loaded (a quick run cycles through ~40 per dtype,
#: three dtypes in turn), and the parameter bytes they may hold
#: besides the latest one (a quick run's models are ≤ a few MB each; a real checkpoint's one).
MAX_MODELS = 160
MAX_MODEL_BYTES = 512 * 2**20

_CACHE_CAPS = frozenset({"forward", "collapsed", "cache_nocache", "cache_kv", "cache_kvg"})


def _torch() -> Any:
    import torch

    return torch


def _device() -> str:
    return os.environ.get("PLGA_DEVICE", "cpu")


def _like(x: np.ndarray, ref: Any) -> Any:
    """numpy float64 → torch tensor with ref's dtype and device."""
    torch = _torch()
    return torch.from_numpy(np.array(x, dtype=np.float64, copy=True)).to(device=ref.device, dtype=ref.dtype)


class ReferenceAdapter(Adapter):
    """The float64 reference (:mod:`plga.reference`) as an implementation: exact up to one rounding."""

    name = "plga.reference (float64 NumPy)"
    dtypes = ("float64", "float32", "bfloat16", "float16")
    capabilities = frozenset({"attention", "causal", "key_padding_mask", "finite_mask", "operator_chain"}) | _CACHE_CAPS
    dtype_policy = "computes in float64, rounds once to the input dtype"

    def __init__(self) -> None:
        from .. import __version__

        self.version = __version__

    def attention(self, q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                  scale: float | None = None, finite_mask: bool = False) -> Any:
        out = oracle.truth_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale,
                                     finite_mask=finite_mask)
        return _like(out, q)

    def operator_chain(self, q_rot: Any, layer_weights: Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
        out = oracle.truth_chain(q_rot, layer_weights)
        return tuple(_like(x, q_rot) for x in out)  # type: ignore[return-value]

    def forward(self, state_dict: Mapping[str, Any], config: Any, tokens: Any, *, constant_g: Sequence[Any] | None = None) -> ForwardOutput:
        res = oracle.truth_forward(state_dict, config, tokens, constant_g)
        ref = next(iter(state_dict.values()))
        return ForwardOutput(_like(res.logits, ref), [_like(np.asarray(d["G_LM"]), ref) for d in res.deductive])

    def generate(self, state_dict: Mapping[str, Any], config: Any, prompt: Any, max_new_tokens: int, *,
                 mode: str, constant_g: Sequence[Any] | None = None) -> GenerateOutput:
        torch = _torch()
        res = oracle.truth_generate(state_dict, config, prompt, max_new_tokens, mode, constant_g)
        ref = next(iter(state_dict.values()))
        return GenerateOutput(torch.from_numpy(res.tokens), _like(res.step_logits, ref))


class EagerAdapter(Adapter):
    """:mod:`plga.conformance.eager` in the published operation order, in the input dtype."""

    name = "plga.conformance.eager (eager torch)"
    dtypes = ("float64", "float32", "bfloat16")
    capabilities = frozenset({"attention", "causal", "key_padding_mask", "finite_mask", "backward", "operator_chain"}) | _CACHE_CAPS
    dtype_policy = "computes in the input dtype, published operation order"
    decoder_class: type[eg.EagerDecoder] = eg.EagerDecoder

    def __init__(self) -> None:
        torch = _torch()
        self.version = f"torch {torch.__version__}"
        self.device = _device()
        if self.device.startswith("cuda"):
            self.capabilities = self.capabilities | {"cuda"}

    def attention(self, q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                  scale: float | None = None, finite_mask: bool = False) -> Any:
        return eg.plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale,
                                 finite_mask=finite_mask)

    def operator_chain(self, q_rot: Any, layer_weights: Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
        return eg.operator_chain(q_rot, layer_weights)

    def _decoder(self, state_dict: Mapping[str, Any], config: Any) -> eg.EagerDecoder:
        ref = next(iter(state_dict.values()))
        return self.decoder_class(state_dict, config, dtype=ref.dtype, device=ref.device)

    def forward(self, state_dict: Mapping[str, Any], config: Any, tokens: Any, *, constant_g: Sequence[Any] | None = None) -> ForwardOutput:
        logits, deds, _ = self._decoder(state_dict, config).forward(tokens, constant_g)
        return ForwardOutput(logits, [d["G_LM"] for d in deds])

    def generate(self, state_dict: Mapping[str, Any], config: Any, prompt: Any, max_new_tokens: int, *,
                 mode: str, constant_g: Sequence[Any] | None = None) -> GenerateOutput:
        tokens, steps = self._decoder(state_dict, config).generate(prompt, max_new_tokens, mode, constant_g)
        return GenerateOutput(tokens, steps)


class KernelsAdapter(Adapter):
    """The project's kernels, :mod:`plga.kernels`.

    Mapping: ``attention`` → ``plga.kernels.plga_attention(q, k, v, G, causal=…,
    key_padding_mask=…, scale=…, finite_mask=…, backend=<backend>)``; ``operator_chain`` →
    ``plga.kernels.operator_chain(q_rot, layer_weights)`` (same dict layout);
    ``forward`` → ``PLDRModel.from_reference(params, config, dtype=…, device=…)`` then
    ``model(tokens, logits="all", deductive=True, G=constant_g)`` (G_LM read from the
    deductive dicts); ``generate`` → ``model.generate(prompt, n, mode, G=constant_g,
    return_step_logits=True)`` with modes nocache | kv | kvg | collapsed. One model per weights
    content and config, kept loaded (:meth:`_model`). Only what the package defines is declared.
    """

    def __init__(self, backend: str | None = None, *, captured: bool = False, at_scale: bool = False) -> None:
        torch = _torch()
        self.captured = captured
        self.at_scale = at_scale
        import plga.kernels as K

        self.K = K
        self.device = _device()
        fn = getattr(K, "plga_attention", None)
        if fn is None:
            fn = getattr(getattr(K, "functional", None), "plga_attention", None)
        self._attention = fn
        params = inspect.signature(fn).parameters if fn is not None else {}
        default_backend = params["backend"].default if "backend" in params else None
        self.backend = backend or default_backend
        self.name = f"plga.kernels (backend={self.backend})" if self.backend else "plga.kernels"
        if captured:
            self.name = "plga.kernels (captured decoding steps)"
            # each new model shape compiles a step: seconds each with a cold cache, tens of seconds on a
            # slow host (AMD EPYC with AVX2 only, two xdist workers: one check took 300–500 s)
            self.time_scale = 20.0
        if at_scale:
            self.name += ", at scale (every size threshold at its lowest)"
        from .. import __version__

        self.version = f"plga {getattr(K, '__version__', __version__)}, torch {torch.__version__}"
        caps: set[str] = set()
        if fn is not None:
            caps |= {"attention", "causal", "key_padding_mask", "backward"}
            if "finite_mask" in params:
                caps.add("finite_mask")
            if self.backend in ("sdpa", "fused"):
                caps.add("sdpa_bitwise")
        self._chain = getattr(K, "operator_chain", None) or getattr(getattr(K, "functional", None), "operator_chain", None)
        if self._chain is not None:
            caps.add("operator_chain")
        self._model_cls = getattr(K, "PLDRModel", None)
        if self._model_cls is not None and hasattr(self._model_cls, "from_reference"):
            caps.add("forward")
            if "G" in inspect.signature(self._model_cls.forward).parameters:
                caps.add("collapsed")
            gen = getattr(self._model_cls, "generate", None)
            if gen is not None:
                caps |= {"cache_nocache", "cache_kv", "cache_kvg"}
        if self.device.startswith("cuda"):
            caps.add("cuda")
        self.capabilities = frozenset(caps)
        self.dtypes = ("float64", "float32", "bfloat16")
        self.dtype_policy = ("attention in the input dtype (q' = q G rounded once); operator chain in float32 or wider "
                             "(bf16/fp16 upcast)")
        # content digest → (model, parameter bytes), least recently used first
        self._models: OrderedDict[bytes, tuple[Any, int]] = OrderedDict()
        self._set_up_native()

    def _set_up_native(self) -> None:
        """Build (once per machine) and load the native CPU kernels now, while the
        implementation loads: a first build takes 10–30 s, and inside the first decoder check it
        counted against that check's time limit (150 s in the quick profile) and could fail it."""
        if self.device != "cpu" or self._model_cls is None:
            return
        native = getattr(self.K, "native", None)
        if native is not None and hasattr(native, "prepare"):
            native.prepare(_torch().float32)

    def attention(self, q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
                  scale: float | None = None, finite_mask: bool = False) -> Any:
        if self._attention is None:
            raise NotProvided("plga.kernels defines no plga_attention")
        kw: dict[str, Any] = dict(causal=causal, key_padding_mask=key_padding_mask, scale=scale)
        if finite_mask:
            kw["finite_mask"] = True
        if self.backend is not None:
            kw["backend"] = self.backend
        with self._paths():
            return self._attention(q, k, v, G, **kw)

    def operator_chain(self, q_rot: Any, layer_weights: Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
        if self._chain is None:
            raise NotProvided("plga.kernels defines no operator_chain")
        with self._paths():
            return tuple(self._chain(q_rot, dict(layer_weights)))  # type: ignore[return-value]

    def _paths(self) -> Any:
        """The block every operation runs in: all of :mod:`plga.kernels.thresholds` at their
        lowest values for ``kernels-at-scale``, else nothing changed."""
        if not self.at_scale:
            return contextlib.nullcontext()
        from plga.kernels.thresholds import smallest

        return smallest()

    def _model(self, state_dict: Mapping[str, Any], config: Any) -> Any:
        """The model of these weights and this config, built once and kept loaded: the suite hands
        every call fresh copies of its weights (:mod:`.guard`), and a run asks for ~126 distinct
        models ~965 times; building one costs 6–230 ms (a deep metric learner is up to ~1000
        ``nn.Module``s). Models are keyed by content (values, dtypes, shapes, device, config), so
        weights changed in place get a model of their own, and reused as a user reuses a loaded
        model (state kept between calls is exercised). At most :data:`MAX_MODELS` are kept, and
        those of at most :data:`MAX_MODEL_BYTES` of parameters besides the latest one."""
        ref = next(iter(state_dict.values()))
        key = memo.digest(state_dict, config, str(ref.device))
        if key in self._models:
            self._models.move_to_end(key)
            return self._models[key][0]
        if self._model_cls is None:
            raise NotProvided("plga.kernels defines no PLDRModel")
        params = {k: v.detach().to("cpu").double().numpy() for k, v in state_dict.items()}
        model = self._model_cls.from_reference(params, config, dtype=ref.dtype, device=ref.device)
        if self.captured:
            model.compile_decode = True
        self._models[key] = (model.eval(), sum(v.numel() * v.element_size() for v in state_dict.values()))
        while len(self._models) > 1 and (len(self._models) > MAX_MODELS or sum(n for _, n in self._models.values()) > MAX_MODEL_BYTES):
            self._models.popitem(last=False)
        return model

    def forward(self, state_dict: Mapping[str, Any], config: Any, tokens: Any, *, constant_g: Sequence[Any] | None = None) -> ForwardOutput:
        torch = _torch()
        model = self._model(state_dict, config)
        with torch.no_grad(), self._paths():
            out = model(tokens, logits="all", deductive=True, G=None if constant_g is None else list(constant_g))
        return _forward_output(out)

    def generate(self, state_dict: Mapping[str, Any], config: Any, prompt: Any, max_new_tokens: int, *,
                 mode: str, constant_g: Sequence[Any] | None = None) -> GenerateOutput:
        model = self._model(state_dict, config)
        with self._paths():
            out = model.generate(prompt, max_new_tokens, mode, G=None if constant_g is None else list(constant_g),
                                 return_step_logits=True)
        return _generate_output(out)


def _forward_output(out: Any) -> ForwardOutput:
    """Normalise a model's forward result (object with .logits, tuple, or dict) to ForwardOutput."""
    if isinstance(out, ForwardOutput):
        return out
    logits = getattr(out, "logits", None)
    deductive = getattr(out, "deductive", None)
    if logits is None and isinstance(out, Mapping):
        logits, deductive = out.get("logits"), out.get("deductive")
    if logits is None and isinstance(out, (tuple, list)):
        logits = out[0]
        deductive = out[1] if len(out) > 1 else None
    g = None
    if deductive is not None:
        try:
            g = [d["G_LM"] if isinstance(d, Mapping) else d.G_LM for d in deductive]
        except (KeyError, AttributeError, TypeError):
            g = None
    return ForwardOutput(logits, g)


def _generate_output(out: Any) -> GenerateOutput:
    if isinstance(out, GenerateOutput):
        return out
    tokens = getattr(out, "tokens", None)
    steps = getattr(out, "step_logits", None)
    if tokens is None and isinstance(out, Mapping):
        tokens, steps = out.get("tokens"), out.get("step_logits")
    if tokens is None and isinstance(out, (tuple, list)):
        tokens, steps = out[0], out[1]
    return GenerateOutput(tokens, steps)


@adapter_factory
def kernels() -> Adapter:
    """The default implementation under test: :mod:`plga.kernels` with its default backend."""
    return KernelsAdapter()


@adapter_factory
def kernels_eager() -> Adapter:
    """:mod:`plga.kernels` with ``backend="eager"`` (scores materialized)."""
    return KernelsAdapter(backend="eager")


@adapter_factory
def kernels_captured() -> Adapter:
    """:mod:`plga.kernels` with ``PLDRModel.compile_decode = True``: generation's cached steps
    run captured (one compiled graph per step shape, :mod:`plga.kernels.capture`)."""
    return KernelsAdapter(captured=True)


@adapter_factory
def kernels_at_scale() -> Adapter:
    """:mod:`plga.kernels` with every size threshold of :mod:`plga.kernels.thresholds` at its
    lowest value during each operation: the suite's small inputs run the paths a large model
    runs (oneDNN products, the feed-forward gate inside its GEMMs, blocked bfloat16 attention,
    …), which the shipped thresholds keep for large inputs only."""
    return KernelsAdapter(at_scale=True)


@adapter_factory
def kernels_eager_at_scale() -> Adapter:
    """:func:`kernels_at_scale` with ``backend="eager"``."""
    return KernelsAdapter(backend="eager", at_scale=True)


@adapter_factory
def reference() -> Adapter:
    return ReferenceAdapter()


__all__ = [
    "EagerAdapter", "KernelsAdapter", "ReferenceAdapter", "kernels", "kernels_at_scale", "kernels_captured", "kernels_eager",
    "kernels_eager_at_scale",
    "reference",
]
