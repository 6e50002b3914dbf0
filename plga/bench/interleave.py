"""The cases of one group, each in its own process, taking their timed runs in turn.

The machines this bench runs on drift by tens of percent between minutes (shared hosts,
clock and cache contention from neighbours), so the ratio of two cases timed one after the
other — five runs of one, then five of the other a minute later — measures the drift as much
as the code. The cases whose ratios are targets form a group (:func:`.plan.group_of`: the
implementations of one prefill shape, every case of one decoding mode). The group's cases
start side by side in their own processes (``python -m plga.bench.case --gated``), and
exactly one of them works at any time:

1. each sets up in turn (imports, weights, warm-up, compilation);
2. rounds of timed runs: one run of every case, in plan order, per round, so each case's
   runs are spread over the same minutes as the others';
3. each finishes in turn (the prompt-pass timing and the overhead profile) and reports.

A waiting process holds its memory but no CPU. Each case keeps its own process, so its peak
resident memory is still its own. A case that fails, exits or times out is reported as an
error row; the others go on.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from .protocol import MARKER, READY


@dataclasses.dataclass
class _Case:
    spec: dict[str, Any]
    proc: subprocess.Popen[str]
    lines: queue.Queue[str | None]
    stderr: IO[str]
    result: dict[str, Any] | None = None


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _start(spec: dict[str, Any], threads: int) -> _Case:
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    cmd = [sys.executable, "-m", "plga.bench.case", "--gated", "--json", json.dumps(spec)]
    err = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, env=env, bufsize=1)
    lines: queue.Queue[str | None] = queue.Queue()
    assert proc.stdout is not None
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    return _Case(spec, proc, lines, err)


def _fail(case: _Case, reason: str) -> None:
    if case.proc.poll() is None:
        case.proc.kill()
    case.proc.wait()
    case.result = {"spec": case.spec, "status": "error", "reason": reason}


def _advance(case: _Case, timeout_s: float, go: bool = True) -> bool:
    """Let ``case`` work (``go``: answer its wait) until it waits again (True) or has ended
    (False; ``case.result`` holds its result, or an error after ``timeout_s`` seconds)."""
    if go:
        try:
            assert case.proc.stdin is not None
            case.proc.stdin.write("go\n")
            case.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it has exited: its last lines (or their absence) say why
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            line = case.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            _fail(case, f"timed out after {timeout_s:.0f} s")
            return False
        if line is None:
            code = case.proc.wait()
            case.stderr.seek(0)
            tail = " ".join(case.stderr.read().strip().splitlines()[-3:])[-400:]
            _fail(case, f"case exited {code} without a result: {tail}")
            return False
        if line.startswith(READY):
            return True
        if line.startswith(MARKER):
            case.result = json.loads(line[len(MARKER):])
            case.proc.wait()
            return False


def run_group(
    specs: list[dict[str, Any]], timeout_s: float, threads: int, done: Callable[[dict[str, Any]], None] | None = None,
    step: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run ``specs`` interleaved (the module docstring) → their raw results, in order.
    ``timeout_s`` bounds each step of a case (its set-up, one timed run, its finish); ``done``
    is called with each result as its case ends, ``step`` with a case's spec before each of
    its steps (progress)."""
    cases: list[_Case] = []
    try:
        for spec in specs:  # started one at a time: each imports Python while the others wait
            case = _start(spec, threads)
            cases.append(case)
            if not _advance(case, timeout_s, go=False) and done:
                done(case.result)  # type: ignore[arg-type]
        active = [c for c in cases if c.result is None]
        while active:  # one round: one step of every case still running
            for case in active:
                if step:
                    step(case.spec)
                if not _advance(case, timeout_s) and done:
                    done(case.result)  # type: ignore[arg-type]
            active = [c for c in active if c.result is None]
    finally:
        for case in cases:
            if case.proc.poll() is None:
                case.proc.kill()
                case.proc.wait()
            case.stderr.close()
    return [c.result for c in cases]  # type: ignore[misc]


__all__ = ["run_group"]
