"""Checks in worker processes: the implementation never runs in the process that gives the verdict.

``plga conformance`` and ``plga verify`` import the implementation under test only in worker
processes (``jobs`` of them, one check at a time each); this process keeps the results, the
exit status and the report. Two things follow:

* **A kernel cannot end the run.** ``sys.exit`` and every exception were already a failure
  (:mod:`.guard`); ``os._exit(0)``, a crash or ``abort`` in native code, or the out-of-memory
  killer end only the worker: the check it was running **fails** ("the implementation ended
  its process"), a new worker takes the remaining checks, and the verdict stays this
  process's. (In one process, a kernel calling ``os._exit(0)`` ended ``plga conformance`` with
  status 0 and no output: a pass to any script that reads the status.) A check whose worker
  hangs where its own time limit cannot reach (C code holding the GIL) is ended from here
  :data:`BACKSTOP_S` seconds after its limit and its grace.
* **Checks run side by side.** Each check runs at one intra-op thread, so ``jobs`` workers
  take about ``1/jobs`` of the time on as many cores. Results, coverage and verdict do not
  depend on the number of workers: every check draws its cases from the run's seed and its own
  id, and each worker keeps its own memo of truths and baselines (:mod:`.memo`).

What the implementation prints goes to this process's stderr, so ``--json`` output on stdout
stays one JSON document. The protocol is JSON lines: tasks on the worker's stdin, replies on a
pipe of their own (:data:`FD_ENV` names its descriptor).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import selectors
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from .. import errors
from ..errors import UsageError
from ..progress import bar
from .profiles import SUITE_THREADS_ENV

#: The environment variable that tells a worker which file descriptor carries its replies.
FD_ENV = "PLGA_CONFORMANCE_WORKER_FD"
#: A worker's start: drop the working folder from the path before importing plga (``-c`` puts
#: it first, and a ``plga.py`` or ``torch.py`` there must not shadow anything), then serve.
BOOT = "import sys; del sys.path[0]; from plga.conformance.workers import worker_main; worker_main()"
#: NumPy's OpenBLAS threads in a worker: the suite's thread count (:data:`~.profiles.SUITE_THREADS_ENV`,
#: default one), as for torch's intra-op threads (:func:`~.checks.run_check`), whatever the
#: environment says (``plga bench`` gives its cases two). OpenBLAS's idle threads spin: two
#: workers with two each took 4.1 min of ``--profile quick`` on two cores, as long as one
#: process, and two with one thread each 1.9 min (the same results).
BLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"
#: Seconds past a check's limit and :data:`~.guard.STUCK_GRACE` after which this process ends a
#: worker that neither replied nor ended itself.
BACKSTOP_S = 5.0


#: The most workers a command starts (each imports torch and the implementation).
MAX_JOBS = 64


def default_jobs() -> int:
    """Workers a run uses by default: the cores this process may run on, at most 4 (the suite's
    checks are small; more workers mostly add imports)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


def jobs_option(value: int | None) -> int | None:
    """A command's ``--jobs``: the number of workers (not given: :func:`default_jobs`), or None
    for ``0``: everything in this process."""
    if value is None:
        return default_jobs()
    if not 0 <= value <= MAX_JOBS:
        raise UsageError(f"--jobs must be between 0 (0: run in this process) and {MAX_JOBS}, got {value}")
    return value or None


JOBS_HELP = ("worker processes that run the checks (default: the usable cores, at most 4); the implementation runs "
             "only in them. 0: everything in this process (for a debugger; a kernel that ends its process then ends "
             "the run)")


def check_loads(spec: str | None) -> None:
    """Load the implementation ``spec`` names in a worker and end it: its load error, if any,
    raised here (a command's bad ``--impl`` reported before its slow parts run)."""
    with Pool(spec, 1, profile="quick", seed=0, shrink=False, timeout=None) as pool:
        pool.load()


@dataclasses.dataclass
class Loaded:
    """What the first worker reports of the implementation: its name, the report header, the
    check ids it declares and one check's time limit (:func:`~.checks.check_limit`; 0: none)."""

    name: str
    header: dict[str, str]
    checks: list[tuple[str, str]]
    limit: float


@dataclasses.dataclass
class _Worker:
    proc: subprocess.Popen[bytes]
    replies: Any  # the read end of its reply pipe (unbuffered bytes)
    loaded: bool = False
    task: int | None = None  # index of the check it runs
    started: float = 0.0
    stuck: str = ""  # the message its watchdog sent before ending it
    buffer: bytes = b""

    def send(self, message: dict[str, Any]) -> bool:
        """Whether ``message`` reached it (not where it has ended)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            return False
        return True


def _spawn(config: dict[str, Any]) -> _Worker:
    read_fd, write_fd = os.pipe()
    env = {**os.environ, FD_ENV: str(write_fd)}
    env[BLAS_THREADS_ENV] = os.environ.get(SUITE_THREADS_ENV, "1")
    try:
        proc = subprocess.Popen([sys.executable, "-c", BOOT], stdin=subprocess.PIPE, stdout=2,
                                pass_fds=(write_fd,), env=env, start_new_session=True)
    finally:
        os.close(write_fd)
    worker = _Worker(proc, os.fdopen(read_fd, "rb", buffering=0))
    worker.send(config)
    return worker


def _stop(worker: _Worker) -> None:
    with contextlib.suppress(OSError):
        if worker.proc.stdin:
            worker.proc.stdin.close()
    if worker.proc.poll() is None:
        worker.proc.kill()
    worker.proc.wait()
    with contextlib.suppress(OSError):
        worker.replies.close()


def _ended(proc: subprocess.Popen[bytes]) -> str:
    """How a worker whose reply pipe closed ended (one that closed it and lives on is killed)."""
    try:
        rc = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    if rc < 0:
        try:
            return f"killed by signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


def _load_error(message: dict[str, Any]) -> BaseException:
    kind = getattr(errors, message.get("kind", ""), None)
    if isinstance(kind, type) and issubclass(kind, errors.PlgaError):
        return kind(message["message"])
    return RuntimeError(f"plga conformance: loading the implementation in a worker raised (a bug in plga):\n{message['message']}")


class Pool:
    """``jobs`` workers running the checks of one implementation (``spec``: an ``--impl`` value,
    or None for the default); one check each at a time."""

    def __init__(self, spec: str | None, jobs: int, *, profile: str, seed: int, shrink: bool, timeout: float | None) -> None:
        # sys.path too: the workers import the implementation as this process would (a caller's additions included)
        self.config = {"spec": spec, "profile": profile, "seed": seed, "shrink": shrink, "timeout": timeout,
                       "sys_path": list(sys.path)}
        self.jobs = max(1, int(jobs))
        self.workers: list[_Worker] = []
        self.selector = selectors.DefaultSelector()
        self.loaded: Loaded | None = None

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        for w in self.workers:
            _stop(w)
        self.workers.clear()
        self.selector.close()

    def _add(self) -> _Worker:
        w = _spawn(self.config)
        self.workers.append(w)
        self.selector.register(w.replies, selectors.EVENT_READ, w)
        return w

    def _remove(self, w: _Worker) -> None:
        self.selector.unregister(w.replies)
        self.workers.remove(w)
        _stop(w)

    def load(self) -> Loaded:
        """Start the first worker and wait until it has loaded the implementation; a load failure
        is raised here as the error the loading raised (one line, exit 2, on the command line)."""
        w = self._add()
        while self.loaded is None:
            messages = self._messages(w)
            if not messages:  # it ended before loading
                spec = self.config["spec"] or os.environ.get("PLGA_IMPL") or "default"
                raise errors.ImplementationLoadError(f"--impl {spec!r}: loading it ended the process ({_ended(w.proc)})")
            for message in messages:
                if message["type"] == "loaded":
                    w.loaded = True
                    self.loaded = Loaded(message["name"], message["header"], [tuple(p) for p in message["checks"]],
                                         float(message["limit"]))
                elif message["type"] == "load_error":
                    raise _load_error(message)
        return self.loaded

    @staticmethod
    def _messages(w: _Worker) -> list[dict[str, Any]]:
        """The next complete reply lines ``w`` sent (waits for one); [] at its end of file."""
        out: list[dict[str, Any]] = []
        while not out:
            chunk = os.read(w.replies.fileno(), 1 << 16)
            if not chunk:
                return []
            w.buffer += chunk
            *lines, w.buffer = w.buffer.split(b"\n")
            out = [json.loads(line) for line in lines if line.strip()]
        return out

    def run(self, tasks: Sequence[tuple[str, str, str | None]], on_result: Callable[[int, dict[str, Any]], bool],
            show_progress: bool = False) -> None:
        """Run ``tasks`` (check, dtype, expected-failure reason) in the workers; ``on_result(index,
        result fields)`` for each finished check, which returns False to stop the run
        (``--exitfirst``). A worker that ends during a check is replaced; that check fails."""
        assert self.loaded is not None, "load() first"
        pending = list(range(len(tasks)))
        busy = 0
        for _ in range(min(self.jobs, len(tasks)) - len(self.workers)):
            self._add()
        # a worker that ends outside a check is replaced too, but not without end: past this many
        # starts the checks left fail (an implementation whose workers keep ending)
        starts_left = len(tasks) + self.jobs
        from .guard import STUCK_GRACE, stop_if_interrupted

        limit = self.loaded.limit
        backstop = None if limit <= 0 else limit + STUCK_GRACE + BACKSTOP_S

        with bar(len(tasks), "plga conformance", show=show_progress) as progress:
            while pending or busy:
                stop_if_interrupted()  # a stop whose KeyboardInterrupt was swallowed still stops the run
                for w in self.workers:
                    if w.loaded and w.task is None and pending:
                        name, dtype, reason = tasks[pending[0]]
                        if w.send({"index": pending[0], "check": name, "dtype": dtype, "xfail": reason}):
                            w.task, w.started, w.stuck = pending.pop(0), time.monotonic(), ""
                            busy += 1
                        else:
                            w.loaded = False  # it ended: its end of file removes it below
                for key, _ in self.selector.select(timeout=1.0):
                    w = key.data
                    messages = self._messages(w)
                    if not messages:  # its end of file: the worker ended
                        if w.task is not None:
                            busy -= 1
                            if not on_result(w.task, self._ended_result(w, tasks[w.task])):
                                return
                            progress.update(1)
                        how = _ended(w.proc)
                        self._remove(w)
                        if pending and starts_left > 0:
                            starts_left -= 1
                            self._add()
                        elif pending and not self.workers:
                            for index in pending:  # nothing left to run them
                                if not on_result(index, self._unrun_result(tasks[index], how)):
                                    return
                                progress.update(1)
                            pending.clear()
                        continue
                    for message in messages:
                        if message["type"] == "loaded":
                            w.loaded = True
                        elif message["type"] == "load_error":
                            raise _load_error(message)
                        elif message["type"] == "stuck":
                            w.stuck = message["message"]
                        elif message["type"] == "result":
                            index, w.task = w.task, None
                            busy -= 1
                            progress.update(1)
                            if not on_result(index, message["result"]):
                                return
                now = time.monotonic()
                for w in self.workers:
                    if backstop is not None and w.task is not None and now - w.started > backstop:
                        w.stuck = w.stuck or (f"the check did not return within {backstop:g} s and its process did not "
                                              "end itself (C code holding the interpreter?); it was killed")
                        w.proc.kill()  # its end of file comes next, as a failure of the check

    @staticmethod
    def _unrun_result(task: tuple[str, str, str | None], how: str) -> dict[str, Any]:
        from .runner import failure

        name, dtype, reason = task
        status, message = failure(f"not run: the implementation's worker processes kept ending outside any check (the "
                                  f"last: {how}); a kernel must not end its process", reason)
        return {"check": name, "dtype": dtype, "status": status, "message": message}

    def _ended_result(self, w: _Worker, task: tuple[str, str, str | None]) -> dict[str, Any]:
        from .runner import failure

        name, dtype, reason = task
        how = _ended(w.proc)
        if w.stuck:
            message = f"timed out: {w.stuck}"
        else:
            message = (f"the implementation ended the process it ran in during this check ({how}): os._exit, a crash "
                       "or abort in native code, or the system's out-of-memory killer; a kernel must return (or raise)")
        status, message = failure(message, reason)
        return {"check": name, "dtype": dtype, "status": status, "message": message,
                "seconds": time.monotonic() - w.started}


# --- the worker's side ----------------------------------------------------------------------


def _die_with_parent() -> None:
    """Linux: this worker gets SIGKILL when the process that started it ends (it runs in its own
    session, so a Ctrl-C or a SIGTERM to the run's process group does not reach it)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def worker_main() -> None:
    """Serve one run: load the implementation named by the first line of stdin, then run the
    checks the following lines name, one at a time, replying on the descriptor :data:`FD_ENV`."""
    out = os.fdopen(int(os.environ.pop(FD_ENV)), "w", encoding="utf-8")
    _die_with_parent()

    def reply(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    config = json.loads(sys.stdin.readline())
    sys.path[:] = config["sys_path"]
    from . import memo
    from .adapter import resolve_impl
    from .checks import check_ids, check_limit
    from .runner import _header, _run_one, refuse_baseline

    try:
        adapter = resolve_impl(config["spec"])
        refuse_baseline(adapter)
    except errors.PlgaError as exc:
        reply({"type": "load_error", "kind": type(exc).__name__, "message": str(exc)})
        return
    except Exception:
        reply({"type": "load_error", "kind": "", "message": traceback.format_exc()})
        return
    reply({"type": "loaded", "name": adapter.name, "header": _header(adapter), "checks": check_ids(adapter),
           "limit": check_limit(adapter, config["profile"], config["timeout"])})

    def stuck(message: str) -> None:
        reply({"type": "stuck", "message": message})

    with memo.scope():
        for line in sys.stdin:
            task = json.loads(line)
            result = _run_one(adapter, task["check"], task["dtype"], config["profile"], config["shrink"], config["seed"],
                              config["timeout"], task["xfail"], stuck)
            reply({"type": "result", "result": dataclasses.asdict(result)})


__all__ = ["BACKSTOP_S", "BLAS_THREADS_ENV", "FD_ENV", "JOBS_HELP", "MAX_JOBS", "Loaded", "Pool", "check_loads", "default_jobs", "jobs_option",
           "worker_main"]
