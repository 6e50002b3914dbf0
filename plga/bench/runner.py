"""``plga bench``: plan the cases, run each in its own process (the cases of a group
interleaved, :mod:`.interleave`), judge the targets, report.

One run measures, on the same seeded weights per config: the machine's limits (matmul GFLOP/s,
read / copy bandwidth, GEMV layouts) at the start and the end; prefill and greedy decoding for
the float64 reference, the eager backend (the published algorithm), the fused path and the
collapsed model (:mod:`.plan` lists the cases); every row's derived numbers (:mod:`.rows`); the
targets (:mod:`.targets`); and the report, verdicts first (:mod:`.report`).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..allocator import freed_blocks_kept, keep_freed_blocks
from ..errors import UsageError
from ..progress import bar
from .interleave import run_group
from .machine import best_of
from .plan import (
    DEFAULT_CONFIGS,
    LONG_RUN_S,
    MIN_RUNS,
    QUICK,
    config_of,
    estimate_seconds,
    plan_cases,
    skip_reason,
)
from .report import SCHEMA, format_report, validate_document
from .rows import Row, add_ratios, derive_row, not_run
from .targets import evaluate_targets


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def add_bench_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``plga bench`` options to ``parser`` (a subparser of the ``plga`` command)."""
    parser.add_argument("--config", default=None, help=f"comma-separated presets (default {','.join(DEFAULT_CONFIGS)}; quick: {','.join(QUICK['configs'])})")
    parser.add_argument(
        "--cases", default="prefill,decode,reference,conformance,audit",
        help="comma-separated case kinds: prefill, decode, reference (the float64 rows), conformance "
        "(times the conformance quick profile once), audit (times plga audit of the built-in model on "
        "the torch and the reference backend) (default: all five)",
    )
    parser.add_argument("--runs", type=int, default=MIN_RUNS, help=f"timed runs per case after warm-up (default {MIN_RUNS}; fewer is labelled)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed warm-up runs per case (default 1)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (and OMP/MKL) per case (default 2)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--no-low-precision", action="store_true", help="skip the bfloat16 fused rows a float32 run adds")
    parser.add_argument("--only", default=None, metavar="TEXT[,TEXT…]",
                        help="run only the planned cases whose id contains one of these texts (the machine limits always run, "
                             "and a decoding group's bandwidth probe with any of its cases)")
    parser.add_argument("--no-capture", action="store_true", help="skip the captured-step decoding rows (compile_decode)")
    parser.add_argument("--no-cached-compile", action="store_true",
                        help="captured rows time only their cold compile, not also the compile from the disk cache in a fresh process")
    parser.add_argument("--out", default=None, help="write the results JSON here (atomically)")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny/small shapes, 2 runs (labelled: fewer than 5 runs)")
    parser.add_argument("--seed", type=int, default=0, help="weights and token seed (default 0)")
    parser.add_argument(
        "--reference-budget-s", type=float, default=20.0,
        help="run a float64 reference case only if its estimated time (warm-up + runs) is below this (default 20)",
    )
    parser.add_argument(
        "--conformance-cmd", default=None,
        help="command line timed by the 'conformance' case (default: python -m plga.conformance --profile quick)",
    )
    parser.add_argument("--case-timeout-s", type=float, default=1200.0,
                        help="kill a case when one step of it (its set-up, one timed run, its finish) takes longer (default 1200)")
    parser.add_argument("--no-overhead", action="store_true", help="skip profiling the decoding loop's own overhead")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


def host_info() -> dict[str, Any]:
    import numpy as np

    info: dict[str, Any] = {
        "python": platform.python_version(), "platform": platform.platform(), "machine": platform.machine(),
        "cpu_count": os.cpu_count(), "numpy": np.__version__,
        "freed_blocks_kept": freed_blocks_kept(),  # bench_main and every case call keep_freed_blocks()
    }
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:  # pragma: no cover
        info["torch"] = None
    try:
        with open("/proc/cpuinfo") as fh:
            info["cpu_model"] = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), None)
    except OSError:
        info["cpu_model"] = None
    return info


def _conformance_argv(cmd: str | None) -> list[str]:
    """The command the ``conformance`` case times: ``cmd`` split like a shell, or the suite's quick profile."""
    if cmd:
        import shlex

        return shlex.split(cmd)
    return [sys.executable, "-m", "plga.conformance", "--profile", "quick"]


def _audit_argv(backend: str, out: str) -> list[str]:
    """``plga audit`` of the built-in model on ``backend`` (float64, the CPU), writing to ``out``."""
    script = "import sys; from plga.cli import main; sys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", script, "audit", "--backend", backend, "--out", out, "--no-progress", "--no-plots"]


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _write_json(path: str | Path, doc: dict[str, Any]) -> None:
    from ..atomic import atomic_path

    with atomic_path(path) as tmp:
        Path(tmp).write_text(json.dumps(doc, indent=1) + "\n")


def bench_main(args: argparse.Namespace) -> int:
    """Run the bench described by ``args`` (from :func:`add_bench_arguments`); 0 on success.

    Exit status 1 when a case failed (its row says why); missed targets do not fail the run.
    """
    t0 = time.perf_counter()
    keep_freed_blocks()  # as every case process does: the header's allocator line is theirs (any entry point)
    configs = _csv(args.config) if args.config else list(QUICK["configs"] if args.quick else DEFAULT_CONFIGS)
    for name in configs:
        config_of(name)  # unknown presets fail here, before anything runs
    kinds = _csv(args.cases)
    runs = QUICK["runs"] if args.quick and args.runs == MIN_RUNS else args.runs
    if runs < 1 or args.warmup < 0 or args.threads < 1:
        raise UsageError("need --runs ≥ 1, --warmup ≥ 0, --threads ≥ 1")
    cases = plan_cases(configs, kinds, quick=args.quick, runs=runs, warmup=args.warmup, threads=args.threads,
                       device=args.device, dtype=args.dtype, seed=args.seed, overhead=not args.no_overhead,
                       low_precision=not args.no_low_precision, capture=not args.no_capture,
                       cached_compile=not args.no_cached_compile)
    if args.only:
        wanted = _csv(args.only)
        kept = [c for c in cases if c["kind"] == "limits" or any(w in c["id"] for w in wanted)]
        groups = {c["group"] for c in kept if c["kind"] == "decode"}  # a kept decoding group keeps its bandwidth probe
        cases = [c for c in cases if c in kept or (c["kind"] == "bandwidth" and c["group"] in groups)]
    argv = {"conformance/quick": _conformance_argv(args.conformance_cmd) if "conformance" in kinds else None}
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():  # SIGTERM still cleans up the weights
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    weights_dir = tempfile.mkdtemp(prefix="plga-bench-weights-")
    for backend in ("torch", "reference"):
        argv[f"audit/{backend}"] = _audit_argv(backend, os.path.join(weights_dir, f"audit-{backend}"))
    for c in cases:
        c["weights_cache"] = weights_dir
        if c["kind"] == "command":
            c["argv"] = argv[c.get("name", "conformance/quick")]
    try:
        return _run_and_report(args, cases, configs, kinds, runs, t0)
    finally:
        shutil.rmtree(weights_dir, ignore_errors=True)


def _run_cases(
    args: argparse.Namespace, cases: list[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None, list[Row]]:
    """Run every case, group by group (:mod:`.interleave`) → (limits at start, limits at end,
    the limits the fractions divide by, rows in plan order). Rows are derived as their cases
    finish (for the partial file), and again at the end against :func:`.machine.best_of` the
    two limit measurements, a decoding row's bandwidth bound against its group's in-turn probe
    (the limits' read bandwidth where the probe did not run)."""
    limits: dict[str, Any] = {}
    limits_end: dict[str, Any] | None = None
    rows: dict[int, Row] = {}
    raws: dict[int, dict[str, Any]] = {}
    index = {spec["id"]: i for i, spec in enumerate(cases)}
    groups: dict[str, list[dict[str, Any]]] = {}
    for spec in cases:
        groups.setdefault(spec.get("group", spec["id"]), []).append(spec)
    progress = bar(len(cases), "plga bench", show=not args.no_progress)

    def log(spec: dict[str, Any], msg: str) -> None:
        progress.update(1)
        print(f"[{index[spec['id']] + 1}/{len(cases)}] {spec['id']}: {msg}", file=sys.stderr, flush=True)

    def done(raw: dict[str, Any], started: float, group_size: int) -> None:
        nonlocal limits, limits_end
        spec = cases[index[raw["spec"]["id"]]]
        took = f"{time.perf_counter() - started:.1f} s"
        if spec["kind"] == "limits":
            if raw.get("status") != "ok":
                raise RuntimeError(f"measuring the machine limits failed: {raw.get('reason')}")
            if spec["when"] == "start":
                limits = raw["limits"]
            else:
                limits_end = raw["limits"]
            log(spec, took)
            return
        raws[index[spec["id"]]] = raw
        row = rows[index[spec["id"]]] = derive_row(raw, limits)
        if args.out:  # rows so far, so an interrupted run leaves its measurements behind
            _write_json(str(args.out) + ".partial",
                        {"schema": SCHEMA, "limits": limits, "rows": [rows[i].to_json() for i in sorted(rows)]})
        msg = f"median {1e3 * row.median_s:.1f} ms" if row.ok else f"{row.status}: {row.reason}"  # type: ignore[operator]
        together = f", with {group_size - 1} other case(s)" if group_size > 1 else ""
        log(spec, f"{msg} ({took}{together})")

    with progress:
        for specs in groups.values():
            runnable = []
            for spec in specs:
                reason = skip_reason(spec, limits, args.reference_budget_s)
                if reason:
                    rows[index[spec["id"]]] = not_run(spec, "skipped", reason)
                    log(spec, f"skipped ({reason})")
                    continue
                if spec["kind"] in ("prefill", "decode") and spec.get("impl") != "reference":
                    spec["warmup_shape"] = "reduced" if estimate_seconds(spec, limits) > LONG_RUN_S else "full"
                runnable.append(spec)
            if runnable and all(spec["kind"] == "bandwidth" for spec in runnable):  # a probe with nothing to divide
                for spec in runnable:
                    rows[index[spec["id"]]] = not_run(spec, "skipped", "no decoding case of its group runs")
                    log(spec, "skipped (no decoding case of its group runs)")
                runnable = []
            if runnable:
                started = time.perf_counter()
                run_group(runnable, args.case_timeout_s, args.threads,
                          functools.partial(done, started=started, group_size=len(runnable)),
                          step=lambda spec: progress.set_postfix_str(spec["id"]))
    used = best_of(limits, limits_end) if limits else None
    in_turn = {cases[i]["group"]: r.read_gbps for i, r in rows.items() if r.kind == "bandwidth" and r.ok}
    for i, raw in raws.items():  # against the higher limits, and each decoding group's own bandwidth
        lim = used or limits
        if cases[i]["kind"] == "decode" and cases[i]["group"] in in_turn:
            lim = {**lim, "bandwidth_gbps": in_turn[cases[i]["group"]], "bandwidth_source": "in turn"}
        rows[i] = derive_row(raw, lim)
    return limits, limits_end, used, [rows[i] for i in sorted(rows)]


def _run_and_report(
    args: argparse.Namespace, cases: list[dict[str, Any]], configs: list[str], kinds: list[str], runs: int, t0: float
) -> int:
    load_start = _loadavg()
    print(f"plga bench: {len(cases)} cases, configs {','.join(configs)}, load average {load_start}", file=sys.stderr, flush=True)
    limits, limits_end, used, rows = _run_cases(args, cases)
    add_ratios(rows)
    verdicts = evaluate_targets(rows, limits=used or limits)
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": host_info(),
        "load_avg": {"start": load_start, "end": _loadavg()},
        "settings": {"configs": configs, "cases": kinds, "runs": runs, "warmup": args.warmup, "threads": args.threads,
                     "device": args.device, "dtype": args.dtype, "quick": bool(args.quick), "seed": args.seed,
                     "reference_budget_s": args.reference_budget_s, "meets_runs_rule": runs >= MIN_RUNS,
                     "only": args.only, "interleaved": True},
        "targets": [v.to_json() for v in verdicts],
        "limits": limits,
        "limits_end": limits_end,
        "limits_used": used,
        "rows": [r.to_json() for r in rows],
        "wall_s": time.perf_counter() - t0,
    }
    errors = validate_document(doc)
    if errors:
        doc["schema_errors"] = errors
    if args.out:
        _write_json(args.out, doc)
        Path(str(args.out) + ".partial").unlink(missing_ok=True)
    print(format_report(doc, rows, verdicts))
    if args.out:
        print(f"\nwrote {args.out}")
    return 1 if any(r.status == "error" for r in rows) or errors else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m plga.bench``: the same as ``plga bench``."""
    from ..cli import run_command

    parser = add_bench_arguments(argparse.ArgumentParser(prog="plga bench", description=__doc__.splitlines()[0]))
    return run_command("bench", bench_main, parser.parse_args(argv))


__all__ = ["add_bench_arguments", "bench_main", "main"]
