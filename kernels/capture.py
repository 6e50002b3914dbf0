"""Captured decoding steps: a whole cached step of :class:`~plga.kernels.model.PLDRModel` as
one compiled graph (opt-in, ``model.compile_decode = True``).

An uncaptured step runs a few hundred small operations from Python, and at batch 1 the time
between them is a large part of the step (12–38 % on the bench machine's CPU; on a GPU the
launches dominate). A captured step runs the same stages (:meth:`PLDRModel._layer`, the same
:func:`~plga.kernels.functional.plga_attention` call) on **static shapes**: the new token's
position is a tensor, its key and value are written into the cache at that position, and the
query attends over the whole preallocated cache with the keys not yet written masked like
padding keys (the published finite −1e9 mask: a masked key's weight is exactly 0, and the
query's own key is always allowed). Shapes then never change between steps, so one compilation
serves a whole generation. The step reads its token from a token buffer of the cache's width,
writes its greedy choice into the next column and advances the position tensor itself, so a
greedy generation runs no tensor operation between two steps (each one cost 10–25 µs there, with
the caches cold after the step: together 8 % of a ``small`` step):

- CPU: ``torch.compile`` (Inductor, ``fullgraph=True``, :data:`CPU_OPTIONS`): no Python between operations; the
  one-row products are the row-layout GEMV fused into the graph (or the native kernel, an
  opaque call, for large weights: :data:`~plga.kernels.packed.NATIVE_ONE_ROW_MIN`).
- CUDA: ``mode="reduce-overhead"``: the step replays as a CUDA graph. What it updates in
  place (:class:`StepBuffers`), the packed fields it reads, and what the prompt pass sets for
  it (held in the step buffers: :meth:`StepBuffers.hold`) are static addresses, so the
  updates are part of the graph and nothing is copied before a replay; the model's
  :class:`BufferPool` keeps the step buffers between generations, so a new generation replays
  the recorded graph instead of recording another.

Compilation happens once per (model, batch, cache capacity, mode, dtype, device) and is
cached on disk by Inductor across processes; its cost and break-even are measured in
``plga bench`` (the ``fused+compile`` rows).
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

#: Compiled entries kept for the step function (Dynamo's default, 8, is too few for a process
#: that decodes several models, batches and modes). When a new shape finds them all taken, the
#: step's entries are dropped before it compiles (Dynamo would log a warning, then — with
#: ``fullgraph=True`` — raise rather than run eagerly): a dropped shape compiles again on its
#: next use (from Inductor's disk cache). Dynamo's lifetime cap on the step's compilations is
#: lifted for the same reason.
RECOMPILE_LIMIT = 64
#: Inductor options of plga's compilations on the CPU:
#:
#: - ``cpp.enable_kernel_profile``: each generated C++ kernel records a profiler event
#:   (``graph_<id>_cpp_fused_…``; a no-op without an active profiler), so that a profile tells the
#:   kernels from the graph's Python wrapper around them (``plga bench``'s loop-overhead split,
#:   :data:`plga.bench.case.GENERATED_KERNEL`).
#: - ``size_asserts`` off: the wrapper's check of every input's sizes and strides repeats what
#:   Dynamo's guards check before an entry is chosen (static shapes: sizes, strides, dtype,
#:   device), and a captured generation passes the same tensors to every step (:class:`CapturedSteps`).
#:   The checks took 45–55 µs of the wrapper's ~230 µs per ``small`` step on the bench machine
#:   (40 inputs, the caches cold after the step's kernel); without them the graph call ran 4–6 %
#:   faster in alternating A/B runs.
CPU_OPTIONS = {"cpp.enable_kernel_profile": True, "size_asserts": False}
_LIFETIME_COMPILATIONS = 1 << 30
_COMPILED: dict[str, Callable[..., Tensor]] = {}


def _step(model: Any, tokens: Tensor, position: Tensor, flags: Tensor, cache: Any, mode: str, operators: Any,
          fields: dict[str, Any]) -> Tensor:
    return model._captured_body(tokens, position, flags, cache, mode, operators, fields)


def compiled_step(device: torch.device) -> Callable[..., Tensor]:
    """The compiled step function for ``device`` (built on first use; one per device type)."""
    fn = _COMPILED.get(device.type)
    if fn is None:
        how: dict[str, Any] = {"mode": "reduce-overhead"} if device.type == "cuda" else {"options": CPU_OPTIONS}
        fn = _COMPILED[device.type] = torch.compile(_step, fullgraph=True, dynamic=False, **how)
    return fn


def bucket(capacity: int, max_seq_len: int) -> int:
    """The cache capacity a captured generation allocates: the next power of two ≥ 64 (at most
    ``max_seq_len``), so that prompts of every length share a few compilations (the shapes are
    static; the keys past the written ones are masked, so a larger cache changes no result)."""
    return max(capacity, min(max_seq_len, max(64, 1 << (capacity - 1).bit_length())))


class CapturedSteps:
    """The captured steps of one generation, as a context manager: ``steps(model, *args)`` runs
    ``model._captured_body(*args)`` compiled.

    The first step looks for the entry Dynamo would run (:func:`entry_function`: the first of
    the step function's compiled entries whose guards accept the first step's arguments,
    exactly Dynamo's lookup and check); where none accepts them, it goes through Dynamo, which
    compiles (every (batch, capacity, mode, dtype, shapes) is one entry, up to
    :data:`RECOMPILE_LIMIT`; then the entries are dropped and compiled again as they are used),
    and the entry is looked up again. Every later step of the generation passes the same model,
    cache, mode, operators and packed fields — the same objects, shapes and strides; only the
    values of the token and position tensors differ — so no guard can reject it, and Dynamo
    would pick the same entry again. Every step therefore calls that entry's code directly,
    which skips Dynamo's frame evaluation — about 0.15 ms a step on the bench CPU even with the
    guards skipped, a sixth of a ``small`` step, and ~0.7 ms more on the first step of each
    generation. Where the entry cannot be found (a torch without the
    cache-entry introspection), the rest of the generation runs under
    ``torch.compiler.set_stance(skip_guard_eval_unsafe=True)`` instead (entered once: the
    stance costs hundreds of microseconds to set, the guards about 0.1 ms per call at
    paper-110m). Under a caller's own stance (``force_eager``) or with Dynamo disabled, every
    step goes through Dynamo as the caller asked.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.fn = compiled_step(device)
        self._stack = contextlib.ExitStack()
        self._warm = False
        self.direct: Callable[..., Tensor] | None = None  # the entry's code, once found

    def __enter__(self) -> CapturedSteps:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def __call__(self, model: Any, *args: Any) -> Tensor:
        begin_step(self.device)
        if not self._warm and _default_stance():  # an entry compiled earlier may accept this step
            self.direct = entry_function(_step, (model, *args))
            self._warm = self.direct is not None
        if self.direct is not None:
            return self.direct(model, *args)
        if self._warm:
            return self.fn(model, *args)
        skips = cuda_graph_skips()
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT, accumulated_recompile_limit=_LIFETIME_COMPILATIONS):
            if len(_entries(_step) or ()) >= RECOMPILE_LIMIT:  # no entry accepts this step: make room
                torch._dynamo.eval_frame.remove_from_cache(_step)
            try:
                out = self.fn(model, *args)
            except torch._dynamo.exc.FailOnRecompileLimitHit:  # a torch that cannot list its entries
                torch._dynamo.eval_frame.remove_from_cache(_step)  # raised before the step ran: nothing written
                out = self.fn(model, *args)
        warn_if_graph_skipped(self.device, skips)
        if _default_stance():  # not under a user's stance (force_eager runs every step eagerly)
            self.direct = entry_function(_step, (model, *args))
            if self.direct is None:
                self._stack.enter_context(torch.compiler.set_stance(skip_guard_eval_unsafe=True))
        self._warm = True
        return out


def cuda_graph_skips() -> int:
    """How many compiled graphs of this process Inductor left without the CUDA graph that
    ``mode="reduce-overhead"`` asked for (its ``cudagraph_skips`` counter; 0 where this torch
    keeps none)."""
    return int(torch._dynamo.utils.counters["inductor"].get("cudagraph_skips", 0))


def warn_if_graph_skipped(device: torch.device, skips_before: int) -> None:
    """Warn when a compilation on CUDA since the count ``skips_before`` left its graph without
    the CUDA graph (a silent fallback of Inductor's otherwise: every step would launch its
    kernels from Python, several times slower on a GPU)."""
    if device.type == "cuda" and cuda_graph_skips() > skips_before:
        warnings.warn(
            "plga: Inductor compiled a captured decoding step without a CUDA graph: each step launches its "
            "kernels from Python (TORCH_LOGS=cudagraphs names the reason)", RuntimeWarning, stacklevel=4,
        )


def _default_stance() -> bool:
    """Whether Dynamo runs with its default stance and is enabled (a caller's ``set_stance``, e.g.
    ``force_eager``, or ``torch._dynamo.config.disable`` is left to act on every step)."""
    stance = getattr(torch._dynamo.eval_frame, "_stance", None)
    return not torch._dynamo.config.disable and getattr(stance, "stance", None) == "default"


def entry_function(fn: Callable[..., Any], args: tuple[Any, ...]) -> Callable[..., Any] | None:
    """The code Dynamo runs for ``fn(*args)`` — the first of ``fn``'s cache entries whose guards
    accept ``args``, Dynamo's own lookup order and check — as a plain function of the same
    arguments (it calls the compiled graph with the tensors it reads from them), or None when
    no entry accepts them or this torch cannot list the entries."""
    code = fn.__code__
    entries = _entries(fn)
    if entries is None:
        return None
    f_locals = dict(zip(code.co_varnames[: code.co_argcount], args, strict=True))
    for entry in entries:
        if entry.code.co_argcount == code.co_argcount and not entry.code.co_freevars and entry.guard_manager.check(f_locals):
            return types.FunctionType(entry.code, fn.__globals__, f"{fn.__name__}_compiled")
    return None


def _entries(fn: Callable[..., Any]) -> list[Any] | None:
    """Dynamo's cache entries for ``fn``'s code, in its lookup order; None when this torch cannot
    list them."""
    try:
        return list(torch._dynamo.eval_frame._debug_get_cache_entry_list(fn.__code__))
    except (AttributeError, RuntimeError):
        return None


@dataclasses.dataclass
class StepBuffers:
    """What a captured generation's steps update in place: the KV cache tensors of every
    layer (k, v [B, H, C, d] each), the token buffer ids [B, C + 1], the position [1] and the
    non-finite flags [B, C + 1]; and what they only read but a generation sets (the prompt's
    cached operators, the constant ones, the padding keys), held by :meth:`hold`."""

    kv: list[tuple[Tensor, Tensor]]
    ids: Tensor
    position: Tensor
    flags: Tensor
    held: dict[str, Tensor] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:  # static by construction (CUDA): the graph updates them in place
        prepare_static(*(t for kv in self.kv for t in kv), self.ids, self.position, self.flags)

    def hold(self, name: str, t: Tensor) -> Tensor:
        """``t``'s values in this set's static tensor ``name`` (contiguous), reused by every
        generation whose ``t`` has the same shape and dtype: one copy per generation, where an
        input the CUDA graph does not know as static is copied before every replay, and a new
        static address re-records the graph."""
        have = self.held.get(name)
        if have is None or have.shape != t.shape or have.dtype != t.dtype:
            have = self.held[name] = torch.empty(t.shape, dtype=t.dtype, device=t.device)
            prepare_static(have)
        return have.copy_(t)

    def reset(self) -> None:
        """Zeros everywhere (a captured step reads the unwritten cache rows, masked: they must
        be finite), before a new generation."""
        for k, v in self.kv:
            k.zero_()
            v.zero_()
        self.ids.zero_()
        self.position.zero_()
        self.flags.zero_()


def reuses_buffers(device: torch.device) -> bool:
    """Whether captured generations on ``device`` reuse their :class:`StepBuffers` (CUDA: the
    CUDA graph records their addresses, and a new address re-records the graph — a warm-up
    and a capture at the first step of every generation)."""
    return device.type == "cuda"


class BufferPool:
    """A model's idle :class:`StepBuffers` by (batch, cache capacity, dtype, device). A
    generation leases a set and gives it back when it ends, so two generations at once never
    share one; the pool keeps one idle set per key (a few capacities: :func:`bucket`)."""

    def __init__(self) -> None:
        self._idle: dict[tuple[Any, ...], StepBuffers] = {}

    @contextlib.contextmanager
    def lease(self, key: tuple[Any, ...], make: Callable[[], StepBuffers], *, keep: bool) -> Iterator[StepBuffers]:
        """An idle set for ``key`` reset to zeros, else ``make()``; given back at the end when
        ``keep`` (:func:`reuses_buffers`), also after an error (the next lease resets it)."""
        bufs = self._idle.pop(key, None)
        if bufs is None:
            bufs = make()
        else:
            bufs.reset()
        try:
            yield bufs
        finally:
            if keep:
                self._idle[key] = bufs

    def clear(self) -> None:
        self._idle = {}


def prepare_fields(fields: dict[str, Any]) -> None:
    """On CUDA, mark the packed fields of a captured step (rotation tables, packed weights)
    as static addresses: they persist between steps and generations, and a CUDA graph would
    otherwise copy every input it does not know to be static into its own buffers before
    each replay (at paper-110m, 300 MB of float32 weights and some 40 copies a step)."""
    prepare_static(*tensors_in(fields))


def tensors_in(obj: Any) -> list[Tensor]:
    """Every tensor in ``obj``, a tensor or nested dicts, lists and tuples (other leaves skipped)."""
    if isinstance(obj, Tensor):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in tensors_in(item)]
    return []


def prepare_static(*tensors: Tensor) -> None:
    """On CUDA, mark ``tensors`` as static addresses: inputs a step updates in place (the
    update is then part of the replayed graph) and inputs that persist between replays (not
    copied before each). Unguarded: a tensor at a new address re-records the CUDA graph rather
    than recompiling the step."""
    for t in tensors:
        if t.device.type == "cuda":
            torch._dynamo.mark_static_address(t, guard=False)


def begin_step(device: torch.device) -> None:
    """Before each replay on CUDA: the previous step's outputs may be overwritten from now on."""
    if device.type == "cuda":
        torch.compiler.cudagraph_mark_step_begin()


__all__ = [
    "CPU_OPTIONS", "BufferPool", "CapturedSteps", "StepBuffers", "begin_step", "bucket", "compiled_step", "cuda_graph_skips",
    "entry_function", "prepare_fields", "prepare_static", "reuses_buffers", "tensors_in", "warn_if_graph_skipped",
]
