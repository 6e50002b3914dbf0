"""The adapter protocol: how an implementation is plugged into the conformance suite.

An *adapter* tells the suite which operations an implementation provides and how to call
them. It is an instance of :class:`Adapter` (or anything with the same attributes). The
operations, all on torch tensors, are

``attention(q, k, v, G, *, causal, key_padding_mask, scale, finite_mask=False) -> out``
    PLGA attention given G. q [B,H,S,d], k [B,H,T,d], v [B,H,T,dv]; G [H,d,d], [B,H,d,d] or
    None (identity); ``key_padding_mask`` [B,T] bool, True = padding; ``scale`` a float or
    None (1/√d); ``causal`` bottom-right aligned (query i sees keys j ≤ i + T − S).
    Returns [B,H,S,dv] in q's dtype.
``operator_chain(q_rot, layer_weights) -> (A, A_LM, A_P, G_LM)``
    From rotated queries q_rot [B,H,S,d] and a dict with keys ``ln_weight, ln_bias, units,
    W, b, P, a, b_a`` (``units``: list of ``(blocks, gamma, beta)``, ``blocks``: list of
    ``(w1, b1, w2, b2, w3, b3)`` in torch Linear layout). Each result [B,H,d,d].
``forward(state_dict, config, tokens, *, constant_g=None) -> ForwardOutput``
    The decoder forward from an upstream-named state dict (torch tensors) and a
    :class:`plga.reference.config.PLDRConfig`; tokens [B,S] int64 (0 = padding).
    ``constant_g`` (one [H,d,d] operator per layer) replaces the metric learner. Logits
    [B,S,V] are judged at real positions only (a padding position's are left open).
``generate(state_dict, config, prompt, max_new_tokens, *, mode, constant_g=None) -> GenerateOutput``
    Greedy cached decoding, ``mode`` in ``nocache | kv | kvg | collapsed``.

What an adapter provides is declared, not probed: :attr:`Adapter.capabilities` is a set of
names from :data:`CAPABILITIES`, and :attr:`Adapter.dtypes` the dtypes it computes in. A check
that needs a capability the adapter lacks is skipped with the reason
``"<impl> does not declare capability '<name>' (<meaning>)"``.

A plain callable ``fn(q, k, v, G, *, causal, key_padding_mask, scale)`` is accepted as an
adapter providing only attention (with causal and padding masks) in float32 and float64;
attributes ``fn.plga_capabilities`` / ``fn.plga_dtypes`` / ``fn.plga_device`` refine that.
How an object is recognized is explicit (:func:`as_adapter`): an Adapter instance or
subclass, a duck-typed adapter, a factory (marked :func:`adapter_factory`, or declaring no
parameter), else an attention callable — a ``(*args, **kwargs)`` callable is attention.

Selection by one switch (array-api-tests' ``ARRAY_API_TESTS_MODULE``): ``PLGA_IMPL`` or
``--plga-impl`` or ``plga conformance --impl``, with value ``package.module:object`` or one of
the aliases in :data:`ALIASES`.
The default is the project's own kernels (:func:`plga.conformance.adapters.kernels`).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import ImplementationLoadError
from .guard import escape_text, foreign_failure, foreign_text, watch_user_interrupt

#: Capability name → what it means. Dtypes and devices are capabilities too.
CAPABILITIES: dict[str, str] = {
    "attention": "PLGA attention given G",
    "causal": "the causal (look-ahead) mask of attention",
    "key_padding_mask": "key padding masks in attention",
    "finite_mask": "the published finite additive mask (finite_mask=True: −1e9 added to masked scores)",
    "sdpa_bitwise": "at G = I (the identity or None) attention is torch SDPA, bit for bit",
    "backward": "autograd through attention (q, k, v, G)",
    "operator_chain": "the operator chain from rotated queries to (A, A_LM, A_P, G_LM)",
    "forward": "the full decoder forward from a state dict",
    "collapsed": "the decoder forward / decoding with a constant per-layer G (metric learner bypassed)",
    "cache_nocache": "greedy generation recomputing the full forward every step",
    "cache_kv": "greedy generation with the KV-cache (prompt A frozen)",
    "cache_kvg": "greedy generation with the KV- and G-cache (prompt A_LM, G_LM frozen)",
    "cuda": "runs on a CUDA device",
}

#: Dtypes the suite knows.
DTYPES = ("float64", "float32", "bfloat16", "float16")

#: Short names accepted by the switch.
ALIASES: dict[str, str] = {
    "default": "plga.conformance.adapters:kernels",
    "kernels": "plga.conformance.adapters:kernels",
    "plga.kernels": "plga.conformance.adapters:kernels",
    "kernels-eager": "plga.conformance.adapters:kernels_eager",
    "kernels-captured": "plga.conformance.adapters:kernels_captured",
    "kernels-at-scale": "plga.conformance.adapters:kernels_at_scale",
    "kernels-eager-at-scale": "plga.conformance.adapters:kernels_eager_at_scale",
    "reference": "plga.conformance.adapters:reference",
}

DEFAULT_IMPL = "default"

#: The project's kernels as shipped (their factories) → the alias of the same kernels with every
#: size threshold at its lowest: ``plga verify``'s second conformance part (:func:`at_scale_spec`).
AT_SCALE: dict[str, str] = {
    "plga.conformance.adapters:kernels": "kernels-at-scale",
    "plga.conformance.adapters:kernels_eager": "kernels-eager-at-scale",
}


class SkipCheck(Exception):
    """Raised by a check that does not apply to the implementation (the reason is the message).

    Only the suite's own skips count (:func:`skip_check`): a ``SkipCheck`` raised by an
    implementation's code fails the check wherever it surfaces — inside an operation, in its
    autograd backward, or injected from one of its threads."""


class _SuiteSkip(SkipCheck):
    """The suite's own :class:`SkipCheck`, made only by :func:`skip_check`."""


def skip_check(reason: str) -> SkipCheck:
    """The :class:`SkipCheck` the suite raises when a check does not apply (``reason``)."""
    return _SuiteSkip(reason)


def is_suite_skip(exc: BaseException) -> bool:
    """Whether ``exc`` is a skip the suite made (:func:`skip_check`), not one an implementation raised."""
    return type(exc) is _SuiteSkip


class NotProvided(NotImplementedError):
    """An operation the adapter does not provide (array-api-tests' ``_UndefinedStub``)."""


@dataclasses.dataclass
class ForwardOutput:
    """What ``forward`` returns: logits [B,S,V] (judged where the token is not padding) and, when
    available, G_LM per layer [B,H,d,d]."""

    logits: Any
    G_LM: Sequence[Any] | None = None


@dataclasses.dataclass
class GenerateOutput:
    """What ``generate`` returns: tokens [B, S+N] (prompt + new) and step logits [B, N, V]."""

    tokens: Any
    step_logits: Any


#: The largest ``Adapter.time_scale`` honoured (an hour per check in the quick profile).
MAX_TIME_SCALE = 60.0


def time_scale_of(adapter: Any) -> float:
    """``adapter.time_scale`` clamped to [1, :data:`MAX_TIME_SCALE`]; 1 when it is not a finite number."""
    try:
        scale = float(getattr(adapter, "time_scale", 1.0))
    except Exception:  # a foreign attribute of any type (or a property that raises)
        return 1.0
    return min(max(scale, 1.0), MAX_TIME_SCALE) if math.isfinite(scale) else 1.0


class Adapter:
    """Base class of adapters. Override the operations you provide and declare them.

    Attributes: ``name``, ``version``, ``device`` (``"cpu"``, ``"cuda"``), ``dtypes``,
    ``capabilities``, ``dtype_policy`` (one line for the report header) and ``time_scale``.
    """

    name: str = "unnamed"
    version: str = "unknown"
    device: str = "cpu"
    dtypes: tuple[str, ...] = ("float32",)
    capabilities: frozenset[str] = frozenset()
    dtype_policy: str = "computes in the input dtype"
    #: The string that selected this adapter (set by :func:`resolve_impl`).
    spec: str = ""
    #: The multiple of the profile's time limit per check this implementation needs, 1 to
    #: :data:`MAX_TIME_SCALE` (one that compiles every new shape pays those compilations inside
    #: the checks); ``--check-timeout`` overrides the limit whatever the adapter declares.
    time_scale: float = 1.0

    def provides(self, capability: str) -> bool:
        return capability in self.capabilities or capability in self.dtypes

    def require(self, *needed: str | tuple[str, ...]) -> None:
        """Raise :class:`SkipCheck` naming the first requirement the adapter does not meet: a
        capability, or a tuple of capabilities of which any one suffices."""
        def meaning(cap: str) -> str:
            return CAPABILITIES.get(cap, f"computation in {cap}" if cap in DTYPES else cap)

        for need in needed:
            if isinstance(need, str):
                if not self.provides(need):
                    raise skip_check(f"{self.name} does not declare capability {need!r} ({meaning(need)})")
            elif not any(self.provides(cap) for cap in need):
                named = " nor ".join(f"{cap!r} ({meaning(cap)})" for cap in need)
                raise skip_check(f"{self.name} declares neither capability {named}: any one of them is needed")

    def attention(self, q: Any, k: Any, v: Any, G: Any, *, causal: bool = False,
                  key_padding_mask: Any = None, scale: float | None = None, finite_mask: bool = False) -> Any:
        raise NotProvided(f"attention is not provided by {self.name}")

    def operator_chain(self, q_rot: Any, layer_weights: Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
        raise NotProvided(f"operator_chain is not provided by {self.name}")

    def forward(self, state_dict: Mapping[str, Any], config: Any, tokens: Any, *, constant_g: Sequence[Any] | None = None) -> ForwardOutput:
        raise NotProvided(f"forward is not provided by {self.name}")

    def generate(self, state_dict: Mapping[str, Any], config: Any, prompt: Any, max_new_tokens: int, *,
                 mode: str, constant_g: Sequence[Any] | None = None) -> GenerateOutput:
        raise NotProvided(f"generate is not provided by {self.name}")

    def describe(self) -> dict[str, str]:
        """The fields of the report header."""
        return {
            "implementation": f"{self.name} ({self.spec or type(self).__module__ + ':' + type(self).__qualname__})",
            "version": self.version,
            "device": self.device,
            "dtype policy": f"{self.dtype_policy}; dtypes {', '.join(self.dtypes)}",
            "capabilities": ", ".join(sorted(self.capabilities)) or "(none)",
        }

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class CallableAdapter(Adapter):
    """A plain attention callable ``fn(q, k, v, G, *, causal, key_padding_mask, scale)``."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "plga_name", None) or f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
        self.version = str(getattr(fn, "plga_version", getattr(inspect.getmodule(fn), "__version__", "unknown")))
        self.device = getattr(fn, "plga_device", "cpu")
        self.dtypes = _names(fn, "plga_dtypes", DTYPES, ("float32", "float64"))
        caps = set(_names(fn, "plga_capabilities", tuple(CAPABILITIES), ("attention", "causal", "key_padding_mask")))
        self._takes_finite = "finite_mask" in _kwargs_of(fn)
        if self._takes_finite and not hasattr(fn, "plga_capabilities"):
            caps.add("finite_mask")
        self.capabilities = frozenset(caps | {"attention"})
        self.dtype_policy = getattr(fn, "plga_dtype_policy", "plain callable: assumed to compute in the input dtype")

    def attention(self, q: Any, k: Any, v: Any, G: Any, *, causal: bool = False,
                  key_padding_mask: Any = None, scale: float | None = None, finite_mask: bool = False) -> Any:
        kw: dict[str, Any] = dict(causal=causal, key_padding_mask=key_padding_mask, scale=scale)
        if finite_mask:
            if not self._takes_finite:
                raise NotProvided(f"{self.name} takes no finite_mask argument")
            kw["finite_mask"] = True
        return self.fn(q, k, v, G, **kw)


class Declared(Adapter):
    """What the suite runs: an implementation's declarations read once and checked, its
    operations delegated to it (``obj``).

    Every adapter becomes one (:func:`as_adapter`), so the header prints what the checks
    enforced — a ``capabilities`` property cannot answer one way for the header and another
    for the checks —, nothing is read from the implementation after the checks, and a
    declaration the suite cannot honour is an :class:`~plga.errors.ImplementationLoadError`
    (exit 2), never a verdict: a string where a collection belongs (``dtypes = "bfloat16"``
    would match ``float16`` as a substring), an unknown capability or dtype name (a typo
    would silently skip its checks), an attribute that raises when read."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        for attr in ("name", "version", "dtype_policy"):
            setattr(self, attr, foreign_text(_read(obj, attr, getattr(Adapter, attr))))
        self.device = _device(_read(obj, "device", Adapter.device))
        self.spec = str(_read(obj, "spec", "") or "")
        self.time_scale = time_scale_of(obj)
        self.dtypes = _names(obj, "dtypes", DTYPES)
        self.capabilities = frozenset(_names(obj, "capabilities", tuple(CAPABILITIES)))
        self.source = f"{type(obj).__module__}:{type(obj).__qualname__}"

    def _op(self, op: str) -> Callable[..., Any]:
        fn = getattr(self.obj, op, None)
        if fn is None:
            raise NotProvided(f"{op} is not provided by {self.name}")
        return fn

    def attention(self, *args: Any, **kwargs: Any) -> Any:
        return self._op("attention")(*args, **kwargs)

    def operator_chain(self, *args: Any, **kwargs: Any) -> Any:
        return self._op("operator_chain")(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._op("forward")(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        return self._op("generate")(*args, **kwargs)

    def describe(self) -> dict[str, str]:
        return {**super().describe(), "implementation": f"{self.name} ({self.spec or self.source})"}

    def __repr__(self) -> str:
        return f"<Declared {self.name}: {self.source}>"


def _read(obj: Any, attr: str, default: Any) -> Any:
    try:
        return getattr(obj, attr, default)
    except BaseException as exc:
        if not foreign_failure(exc):
            raise
        raise ImplementationLoadError(f"reading the adapter's {attr!r} raised {escape_text(exc)}") from None


def _device(value: Any) -> str:
    """The declared device as torch spells it (``"cuda:0"``), or one load error: a name torch
    does not know (``"gpu"``, ``None``) would have failed every check as the suite's own error."""
    import torch

    if not isinstance(value, (str, torch.device)):
        raise ImplementationLoadError(f"the adapter's device must be a torch device name such as 'cpu' or 'cuda', "
                                      f"got {foreign_text(value, repr)}")
    try:
        return str(torch.device(value))
    except (RuntimeError, ValueError, TypeError):
        raise ImplementationLoadError(f"the adapter's device {str(value)!r} is not a torch device name; "
                                      "declare e.g. 'cpu', 'cuda' or 'cuda:1'") from None


def _names(obj: Any, attr: str, known: tuple[str, ...], default: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The declared ``attr`` (dtypes or capabilities) as a tuple of known names, or one load error."""
    value = _read(obj, attr, default)
    listing = ", ".join(known)
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        # a mapping {"causal": True, "key_padding_mask": False} would declare its False keys too
        raise ImplementationLoadError(f"the adapter's {attr} must be a collection of names (a tuple or set), "
                                      f"got {foreign_text(value, repr)}; known: {listing}")
    try:
        names = list(value)
    except BaseException as exc:
        if not foreign_failure(exc):
            raise
        raise ImplementationLoadError(f"iterating the adapter's {attr} raised {escape_text(exc)}") from None
    unknown = [n for n in names if not isinstance(n, str) or n not in known]
    if unknown:
        raise ImplementationLoadError(f"the adapter declares unknown {attr} {unknown!r}; known: {listing}")
    return tuple(dict.fromkeys(names))


def _kwargs_of(fn: Callable[..., Any]) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def adapter_factory(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Mark ``fn`` as a factory: :func:`as_adapter` calls it with no arguments and uses the result."""
    fn.plga_factory = True  # type: ignore[attr-defined]
    return fn


def _is_factory(obj: Any) -> bool:
    """A factory is marked (:func:`adapter_factory`) or declares no parameter at all."""
    if getattr(obj, "plga_factory", False):
        return True
    try:
        return len(inspect.signature(obj).parameters) == 0
    except (TypeError, ValueError):
        return False


def as_adapter(obj: Any, name: str | None = None) -> Adapter:
    """Turn ``obj`` into the :class:`Declared` adapter the suite runs (:func:`_detect`); an
    exception or exit from the implementation's code on the way (a factory, a constructor, an
    attribute) is an :class:`~plga.errors.ImplementationLoadError`, as is a declaration the
    suite cannot honour."""
    if isinstance(obj, Declared):
        return obj
    try:
        return Declared(_detect(obj, name))
    except ImplementationLoadError:
        raise
    except BaseException as exc:
        if not foreign_failure(exc):
            raise
        raise ImplementationLoadError(f"building the adapter from {foreign_text(obj, repr)} raised {escape_text(exc)}") from None


def _detect(obj: Any, name: str | None = None) -> Any:
    """The implementation behind ``obj``, by these rules in order (docs/conformance.md):

    1. an :class:`Adapter` instance is used as it is;
    2. an :class:`Adapter` subclass is instantiated with no arguments;
    3. any other object with ``capabilities`` and ``dtypes`` attributes (not a class) is a
       duck-typed adapter (its operations are delegated to);
    4. a *factory* — a callable marked with :func:`adapter_factory`, or one that declares no
       parameter at all (``def make(): ...``) — is called with no arguments and its result
       goes through these rules again;
    5. any other callable is an attention callable ``fn(q, k, v, G, *, causal,
       key_padding_mask, scale)`` — whatever its signature, ``(*args, **kwargs)`` included.

    Anything else raises :class:`~plga.errors.ImplementationLoadError`.
    """
    if isinstance(obj, Declared):
        return obj.obj
    if isinstance(obj, Adapter):
        return obj
    if inspect.isclass(obj) and issubclass(obj, Adapter):
        return obj()
    if not inspect.isclass(obj) and hasattr(obj, "capabilities") and hasattr(obj, "dtypes"):
        return obj
    if callable(obj) and not inspect.isclass(obj):
        if _is_factory(obj):
            produced = obj()
            if produced is obj or _is_factory(produced):
                raise ImplementationLoadError(f"the factory {obj!r} returned {produced!r}, not an adapter or attention callable")
            return _detect(produced, name)
        return CallableAdapter(obj, name)
    raise ImplementationLoadError(f"cannot use {obj!r} as a PLGA implementation: need an Adapter (instance or subclass), "
                                  "a factory, or an attention callable")


def _import_module(spec: str, module_name: str) -> Any:
    """Import ``module_name``; when it is not found on sys.path but lies in the working folder
    (``plga`` run as a console script does not put the folder on the path), import it from
    there — that module only, searched after everything else."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".")[0]
        cwd = os.getcwd()
        here = os.path.exists(os.path.join(cwd, top + ".py")) or os.path.isdir(os.path.join(cwd, top))
        if exc.name != top or not here or cwd in sys.path:
            raise ImplementationLoadError(f"--impl {spec!r}: cannot import module {module_name!r}: {exc} "
                                          "(is it importable? set PYTHONPATH to its folder)") from None
        sys.path.append(cwd)
        return _import_module(spec, module_name)
    except BaseException as exc:  # the module raised or exited while importing
        if not foreign_failure(exc):
            raise
        raise ImplementationLoadError(f"--impl {spec!r}: importing {module_name!r} failed: {escape_text(exc)}") from None


def _import_object(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise ImplementationLoadError(f"--impl {spec!r}: give it as package.module:object")
    module = _import_module(spec, module_name)
    if not attr:
        for candidate in ("plga_adapter", "adapter", "plga_attention"):
            if _lookup(spec, module, candidate) is not _MISSING:
                attr = candidate
                break
        else:
            raise ImplementationLoadError(f"--impl {spec!r}: give the object as {module_name}:NAME "
                                          "(no plga_adapter/adapter/plga_attention found)")
    obj: Any = module
    for part in attr.split("."):
        obj = _lookup(spec, obj, part)
        if obj is _MISSING:
            raise ImplementationLoadError(f"--impl {spec!r}: {module_name} has no attribute {attr!r}")
    return obj


_MISSING = object()


def _lookup(spec: str, obj: Any, attr: str) -> Any:
    """``getattr(obj, attr)``, :data:`_MISSING` when absent; a module ``__getattr__`` that
    raises anything else (or exits) is a load error."""
    try:
        return getattr(obj, attr)
    except AttributeError:
        return _MISSING
    except BaseException as exc:
        if not foreign_failure(exc):
            raise
        raise ImplementationLoadError(f"--impl {spec!r}: looking up {attr!r} raised {escape_text(exc)}") from None


def resolve_impl(spec: str | None = None) -> Adapter:
    """The adapter named by ``spec``, else ``$PLGA_IMPL``, else the project's kernels.

    Raises :class:`~plga.errors.ImplementationLoadError` when the module cannot be imported,
    the object does not exist, or it cannot be made an adapter (its constructor raised).
    """
    spec = spec or os.environ.get("PLGA_IMPL") or DEFAULT_IMPL
    target = ALIASES.get(spec, spec)
    with watch_user_interrupt():  # a KeyboardInterrupt the module raises is its failure, a typed Ctrl-C stops
        obj = _import_object(target)
        try:
            adapter = as_adapter(obj)
        except ImplementationLoadError as exc:
            raise ImplementationLoadError(f"--impl {spec!r}: {exc}") from None
    adapter.spec = spec if spec == target else f"{spec} → {target}"
    return adapter


def at_scale_spec(spec: str | None = None) -> str | None:
    """The ``--impl`` of the at-scale variant of the implementation ``spec`` names (as
    :func:`resolve_impl` reads it) when that is the project's kernels as shipped, uncaptured
    (:data:`AT_SCALE`); None for anything else: another implementation's thresholds are its
    own, and a captured variant would compile every drawn shape. Decided from the name alone,
    so the implementation need not be imported here."""
    spec = spec or os.environ.get("PLGA_IMPL") or DEFAULT_IMPL
    return AT_SCALE.get(ALIASES.get(spec, spec))


def plga_environment() -> dict[str, str]:
    """Every ``PLGA_*`` environment variable (the report header prints them to catch typos)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("PLGA_")}


def available_dtypes(adapter: Adapter, wanted: Iterable[str] = DTYPES) -> list[str]:
    return [d for d in wanted if d in adapter.dtypes]


__all__ = [
    "ALIASES", "AT_SCALE", "CAPABILITIES", "DEFAULT_IMPL", "DTYPES", "Adapter", "CallableAdapter", "Declared", "ForwardOutput",
    "GenerateOutput", "NotProvided", "SkipCheck", "adapter_factory", "as_adapter", "at_scale_spec", "available_dtypes", "is_suite_skip",
    "plga_environment", "resolve_impl", "skip_check",
]
