"""Foreign code under guard: the kernel gets copies, cannot exit plga, cannot hang the run.

Every call of an implementation's operation goes through :func:`call_operation`:

* **copies** — each tensor argument (also inside state dicts, layer-weight dicts, lists and
  the config) is deep-copied before the call, with its layout (strides, storage offset); truth and baselines are computed from the
  pristine originals, and after the call the copies are compared with them bit for bit. A
  difference is a failure of its own: ``kernel modified its input `G` in place``. No operation
  of the protocol has in-place semantics. A :class:`Held` argument is copied once and that
  copy passed to every call (a model kept loaded), so state an implementation carries between
  calls is exercised.
* **escapes** — ``SystemExit`` (``sys.exit(0)``), ``KeyboardInterrupt`` (not typed by the
  user), ``GeneratorExit`` and every other exception leaving the kernel are a
  :class:`KernelCrash`: a failure of the check that called it, never an exit of plga. The
  same holds for the implementation's autograd backward, which a check runs through
  :func:`guarded`.
* **outputs** — what an operation returns is taken apart inside the guard (:func:`owned_output`):
  every tensor must be a plain ``torch.Tensor`` (not a subclass, whose methods would run the
  implementation's code later, when the suite examines it — outside the guard —, nor an array
  or list) and is cloned, so the suite holds its own copy: an implementation that returns its
  static output buffers (as a captured CUDA graph does) cannot change a result after the call.
  Attention returns q's dtype; generated tokens are integers. A violation is a
  :class:`BadOutput`.

:func:`time_limit` bounds one check: a repeating ``SIGALRM`` timer (main thread; it also
interrupts ``time.sleep`` and lock waits) or, off the main thread, an asynchronous exception
injected by a watchdog thread. Both raise :class:`CheckTimeout` inside the running code —
every second until the check returns, so a kernel that swallows it once gains nothing. A
kernel stuck inside C code that never returns to the interpreter cannot be interrupted this
way, nor one that catches every exception in a loop: :data:`STUCK_GRACE` seconds past the
limit a watchdog thread prints a FAIL verdict naming the check, dumps the stacks
(``faulthandler``) and ends the process with status 1.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .tolerance import ConformanceFailure

#: Argument names of each protocol operation (for messages about modified inputs).
OPERATION_ARGS: dict[str, tuple[str, ...]] = {
    "attention": ("q", "k", "v", "G"),
    "operator_chain": ("q_rot", "layer_weights"),
    "forward": ("state_dict", "config", "tokens"),
    "generate": ("state_dict", "config", "prompt", "max_new_tokens"),
}


class CheckTimeout(BaseException): # a BaseException so `except Exception` in a kernel cannot swallow it
    """A check ran past its time limit (raised inside the running code)."""


class KernelCrash(ConformanceFailure):
    """The implementation raised (or tried to exit) inside an operation."""


class InputMutated(ConformanceFailure):
    """The implementation modified one of its inputs in place."""


class BadOutput(ConformanceFailure):
    """The implementation returned something other than the protocol's plain tensors."""


# --- user interrupts ------------------------------------------------------------------------

_user_interrupt = threading.Event()
_watch_depth = 0  # watches active on the main thread


def user_interrupted() -> bool:
    """True once the user pressed Ctrl-C (or the run got a SIGTERM) during a guarded run (a
    kernel's own ``raise KeyboardInterrupt`` does not set it)."""
    return _user_interrupt.is_set()


def stop_if_interrupted() -> None:
    """Raise KeyboardInterrupt if a stop was recorded whose own KeyboardInterrupt was swallowed
    (a gc callback, a kernel that caught it): called between checks and between parts."""
    if _user_interrupt.is_set():
        raise KeyboardInterrupt


@contextlib.contextmanager
def watch_user_interrupt(*, ignore_after_stop: bool = False) -> Iterator[None]:
    """Record a real SIGINT, or a SIGTERM (how ``timeout`` and job schedulers stop a run), and
    raise KeyboardInterrupt for the first; later ones are ignored while the run stops (``timeout``
    signals the command and then its process group: a second SIGTERM would otherwise kill the
    run before it reports what finished). Nested, an inner watch hands back to the outer one
    (the CLI keeps one around the report). ``ignore_after_stop``: a watch left after a stop
    ignores both signals from then on instead of handing back the previous handlers (a command
    that reports and exits; never in a library call, whose caller keeps its Ctrl-C). Main
    thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    global _watch_depth
    if _watch_depth == 0:  # nested, a stop the outer watch recorded (maybe swallowed) stands
        _user_interrupt.clear()

    def handler(signum: int, frame: Any) -> None:
        if _user_interrupt.is_set():  # already stopping
            return
        _user_interrupt.set()
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    _watch_depth += 1
    try:
        yield
    finally:
        _watch_depth -= 1
        stopped = ignore_after_stop and _user_interrupt.is_set()
        for sig, previous in old.items():
            signal.signal(sig, signal.SIG_IGN if stopped else previous)


# --- copies ---------------------------------------------------------------------------------


def _bits() -> dict[int, Any]:
    import torch

    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _same(a: Any, b: Any) -> bool:
    """Bitwise equality of two nested argument values (tensors: dtype, shape, and every bit of
    every element: a NaN's payload and a zero's sign count, as an in-place write leaves them)."""
    import torch

    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
            return False
        if a.is_complex():
            return _same(torch.view_as_real(a), torch.view_as_real(b))
        if a.is_floating_point():  # the bits as integers: one comparison, NaN equal to the same NaN
            bits = _bits()[a.element_size()]
            return bool(torch.equal(a.view(bits), b.view(bits)))
        return bool(torch.equal(a, b))
    if isinstance(a, Mapping):
        return isinstance(b, Mapping) and set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    try:
        return bool(a == b)
    except Exception:  # an object without a usable ==: compare what deepcopy preserved
        return type(a) is type(b)


def _dense(x: Any) -> bool:
    """Whether ``x``'s elements tile its memory without gaps or overlaps (a permutation of a
    contiguous layout), where ``clone`` keeps its strides; an expanded view (stride 0) is not."""
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(x.shape, x.stride(), strict=True) if sz > 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _same_layout_copy(x: Any) -> Any:
    """A copy of the tensor ``x`` with its sizes, strides and storage offset — for a view into a
    larger buffer (a slice of a fused QKV product, one layer of a stacked G), a copy of the whole
    buffer viewed the same way — so the implementation receives the layout the suite passed:
    ``clone`` would hand it a gapped view made contiguous and an offset of 0."""
    import torch

    if x.storage_offset() == 0 and x.untyped_storage().nbytes() == x.numel() * x.element_size() and _dense(x):
        return x.clone()  # the view is its whole buffer: clone keeps a dense tensor's strides
    buffer = x.untyped_storage().clone()
    return torch.empty(0, dtype=x.dtype, device=x.device).set_(buffer, x.storage_offset(), x.size(), x.stride())


def _copy(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return _same_layout_copy(x.detach()).requires_grad_(x.requires_grad) if x.is_leaf else x.clone()
    if isinstance(x, dict):
        return {k: _copy(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_copy(v) for v in x]
    if isinstance(x, tuple):
        return tuple(_copy(v) for v in x)
    return copy.deepcopy(x)


class Held:
    """An argument copied once and passed, as that same copy, to every call it is given to: the
    model a user keeps loaded between calls. An implementation that caches what it built from
    its arguments by their identity (a loaded model, a cache inside it) then reuses it across
    the calls, so state carried from one call to the next is seen; each call still finds the
    copy unmodified (compared with the pristine original after every call)."""

    def __init__(self, value: Any) -> None:
        self.original = value
        self.copy = _copy(value)


def call_operation(op: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*copies of args, **copies of kwargs)`` under guard (see the module docstring).

    Tensors that require grad are passed as they are (the caller owns their gradient), a
    :class:`Held` argument as its one copy, every other argument as a fresh copy.
    """
    import torch

    def keep(x: Any) -> bool:
        return isinstance(x, torch.Tensor) and x.requires_grad

    names = list(OPERATION_ARGS.get(op, ())) + [f"argument {i}" for i in range(len(OPERATION_ARGS.get(op, ())), len(args))]
    given = {**dict(zip(names, args, strict=False)), **kwargs}
    copies = {n: (x.copy if isinstance(x, Held) else x if keep(x) else _copy(x)) for n, x in given.items()}
    given = {n: (x.original if isinstance(x, Held) else x) for n, x in given.items()}
    snapshot = {n: (x.detach().clone() if keep(x) else x) for n, x in given.items()}
    pos = [copies[n] for n in names[: len(args)]]
    kw = {n: copies[n] for n in kwargs}
    out = guarded(op, lambda: fn(*pos, **kw))
    for n in given:
        after = copies[n].detach() if keep(copies[n]) else copies[n]
        if not _same(after, snapshot[n]):
            raise InputMutated(f"kernel modified its input `{n}` in place during {op} (the protocol has no in-place "
                               "operation: inputs must be left as they were passed)")
    return guarded(op, lambda: owned_output(op, out, given))


def foreign_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised by an implementation's code, is its own failure: everything but
    a Ctrl-C the user typed (:func:`user_interrupted`)."""
    return not (isinstance(exc, KeyboardInterrupt) and user_interrupted())


def foreign_text(x: Any, show: Callable[[Any], str] = str) -> str:
    """``show(x)`` of an object the implementation made, for a message: its ``__str__`` or
    ``__repr__`` is foreign code and may itself raise (an exception class that formats a field
    only some paths set); then a placeholder names what failed, and the message still reaches
    the user as a verdict, not as the suite's own error."""
    try:
        return show(x)
    except BaseException as exc:  # foreign code, as in guarded
        if not foreign_failure(exc):
            raise
        return f"<{show.__name__}() of its {type(x).__name__} raised {type(exc).__name__}>"


def escape_text(exc: BaseException) -> str:
    """``SystemExit(0)`` / ``RuntimeError: message``: how an escape is named in a message."""
    if isinstance(exc, SystemExit):
        return f"{type(exc).__name__}({foreign_text(exc.code, repr)})"
    return f"{type(exc).__name__}: {foreign_text(exc)}"


#: numpy's floating-point error handling as the suite's own numerics expect it (numpy's default):
#: an implementation that sets ``np.seterr(all="raise")`` for itself made the suite's exact
#: softmax raise on an underflow, reported as a bug in plga.
NUMPY_ERRORS = {"divide": "warn", "over": "warn", "under": "ignore", "invalid": "warn"}


def _numerics() -> tuple[Any, ...]:
    import numpy as np
    import torch

    return np.geterr(), torch.is_grad_enabled(), torch.get_default_dtype()


def _restore_numerics(state: tuple[Any, ...]) -> None:
    import numpy as np
    import torch

    errors, grad, default_dtype = state
    np.seterr(**errors)
    torch.set_grad_enabled(grad)
    torch.set_default_dtype(default_dtype)


@contextlib.contextmanager
def suite_numerics() -> Iterator[None]:
    """One check's process-wide numeric settings: numpy's default error handling, autograd on,
    float32 as torch's default dtype — whatever an implementation set when it was imported (an
    inference library that turns autograd off, a kernel that makes numpy raise on underflow);
    the settings of before are restored on exit. :func:`guarded` puts back the check's
    settings after every call into the implementation."""
    import numpy as np
    import torch

    before = _numerics()
    np.seterr(**NUMPY_ERRORS)
    torch.set_grad_enabled(True)
    torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        _restore_numerics(before)


def guarded(op: str, run: Callable[[], Any]) -> Any:
    """``run()``, every escape from the implementation's code a :class:`KernelCrash`; the
    process-wide numeric settings of before the call restored after it (:func:`suite_numerics`)."""
    state = _numerics()
    try:
        return run()
    except (CheckTimeout, BadOutput):
        raise
    except AssertionError as exc:
        raise KernelCrash(f"{op} raised {escape_text(exc)}") from exc
    except BaseException as exc: # foreign code: every escape is a failure of the check
        if not foreign_failure(exc):
            raise
        raise KernelCrash(f"{op} raised {escape_text(exc)} — an implementation's exception or exit is a failure of the "
                          "check, not a verdict") from None
    finally:
        _restore_numerics(state)


# --- outputs --------------------------------------------------------------------------------


def _plain(op: str, what: str, x: Any) -> Any:
    """The suite's own copy of one returned tensor (autograd kept), or :class:`BadOutput`."""
    import torch

    if type(x) is not torch.Tensor:
        kind = type(x).__module__ + "." + type(x).__qualname__
        raise BadOutput(f"{op} returned {what} as a {kind}: the protocol asks for a plain torch.Tensor "
                        "(not a subclass, an array or a list)")
    if x.layout != torch.strided or x.device.type == "meta" or x.is_nested:
        kind = ("a meta tensor (no values)" if x.device.type == "meta" else "a nested tensor" if x.is_nested
                else f"a {x.layout} tensor")
        raise BadOutput(f"{op} returned {what} as {kind}: the protocol asks for a dense tensor holding its values")
    return x.clone()


def owned_output(op: str, out: Any, given: Mapping[str, Any]) -> Any:
    """``out`` of operation ``op`` rebuilt from plain, cloned tensors (the module docstring);
    ``given`` holds the call's arguments by name. Runs inside the guard: whatever the
    implementation's objects do while they are read counts as the operation's own."""
    import torch

    from .adapter import ForwardOutput, GenerateOutput

    if op == "attention":
        res = _plain(op, "its output", out)
        q, v = given.get("q"), given.get("v")
        if q is not None and res.dtype != q.dtype:
            raise BadOutput(f"attention returned {res.dtype} for {q.dtype} inputs: the output must be in q's dtype")
        if q is not None and v is not None and q.ndim == v.ndim == 4:
            want = (*q.shape[:3], v.shape[-1])  # [B, H, S, dv]
            if tuple(res.shape) != want:  # before any comparison: a squeezed [S, dv] would broadcast or fail in a cat
                raise BadOutput(f"attention returned shape {tuple(res.shape)} for q {tuple(q.shape)} and v {tuple(v.shape)}: "
                                f"the output is [B, H, S, dv] = {want}")
        return res
    if op == "operator_chain":
        if not isinstance(out, (tuple, list)) or len(out) != 4:
            raise BadOutput(f"operator_chain returned {type(out).__name__}, not the four tensors (A, A_LM, A_P, G_LM)")
        return tuple(_plain(op, name, x) for name, x in zip(("A", "A_LM", "A_P", "G_LM"), out, strict=True))
    if op == "forward":
        if not isinstance(out, ForwardOutput):
            raise BadOutput(f"forward returned {type(out).__name__}, not a ForwardOutput(logits, G_LM)")
        logits, g = out.logits, out.G_LM
        if g is not None and not isinstance(g, (list, tuple)):
            raise BadOutput(f"forward returned G_LM as {type(g).__name__}: a list of per-layer tensors, or None")
        return ForwardOutput(_plain(op, "logits", logits),
                             None if g is None else [_plain(op, f"G_LM[{i}]", x) for i, x in enumerate(g)])
    if op == "generate":
        if not isinstance(out, GenerateOutput):
            raise BadOutput(f"generate returned {type(out).__name__}, not a GenerateOutput(tokens, step_logits)")
        tokens, steps = _plain(op, "tokens", out.tokens), out.step_logits
        if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
            raise BadOutput(f"generate returned tokens of dtype {tokens.dtype}: token ids must be integers")
        return GenerateOutput(tokens, None if steps is None else _plain(op, "step_logits", steps))
    return out


# --- time limit -----------------------------------------------------------------------------


def _async_raise(thread_id: int) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(CheckTimeout))


#: Seconds past the limit after which a check that swallows every interrupt ends the process.
STUCK_GRACE = 10.0


def _default_stuck(message: str) -> None:
    sys.stdout.write(f"plga conformance: FAIL — {message}; the run was ended\n")


@contextlib.contextmanager
def time_limit(seconds: float | None, what: str, on_stuck: Callable[[str], None] | None = None) -> Iterator[None]:
    """Raise :class:`CheckTimeout` in the running code after ``seconds`` (None or ≤ 0: no limit),
    again every second; if the code is still running :data:`STUCK_GRACE` seconds later (it
    swallowed every interrupt, or sits in C code), ``on_stuck(message)`` reports it (default: a
    FAIL verdict line on stdout), the stacks are dumped to stderr and the process ends with
    status 1."""
    if not seconds or seconds <= 0:
        yield
        return
    message = f"{what} exceeded its time limit of {seconds:g} s (--check-timeout)"
    done = threading.Event()
    tid = threading.get_ident()
    main = threading.current_thread() is threading.main_thread()

    def watchdog() -> None:
        if done.wait(seconds):
            return
        deadline = seconds + STUCK_GRACE
        waited = seconds
        while not done.is_set() and waited < deadline:
            if not main:
                _async_raise(tid)
            done.wait(1.0)
            waited += 1.0
        if done.is_set():
            return
        (on_stuck or _default_stuck)(f"{message} and could not be interrupted (it swallows interrupts or never "
                                     "returns to Python)")
        sys.stdout.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        os._exit(1)

    w = threading.Thread(target=watchdog, daemon=True, name="plga-check-watchdog")
    w.start()
    old = None
    if main:
        def handler(signum: int, frame: Any) -> None:
            raise CheckTimeout(message)

        old = signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    except CheckTimeout as exc:
        raise CheckTimeout(message) from exc
    finally:
        done.set()
        if main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


__all__ = [
    "OPERATION_ARGS", "STUCK_GRACE", "BadOutput", "CheckTimeout", "InputMutated", "KernelCrash", "call_operation",
    "escape_text", "foreign_failure", "foreign_text", "guarded", "owned_output", "stop_if_interrupted", "suite_numerics",
    "time_limit", "user_interrupted", "watch_user_interrupt",
]
