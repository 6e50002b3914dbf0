"""``plga verify``: the SDPA reduction, every theorem check and kernel conformance, one table.

For the project's own kernels the conformance part runs twice: with the size thresholds as
shipped, and at scale (:data:`AT_SCALE_GROUPS` with every threshold at its lowest, so the
suite's small models take the paths of large ones: :mod:`plga.kernels.thresholds`).

Exit status 0 only when every part ran something and passed: the conformance part counts as
passed only if checks ran and none failed (an implementation that declares nothing is
"nothing verified", a failure); 1 otherwise; 3 (``ERROR``, no verdict) when the only parts that
did not pass are conformance checks in which the suite's own code raised; 2 for usage errors.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from ..errors import UsageError
from ..openmp import passive_waits


def add_verify_arguments(p: argparse.ArgumentParser) -> None:
    from .workers import JOBS_HELP

    p.add_argument("--impl", default=None, metavar="MODULE:OBJECT",
                   help="implementation for the conformance part (default: plga.kernels); its module must be importable")
    p.add_argument("--max-examples", type=int, default=10, help="Hypothesis examples per theorem check (default 10)")
    p.add_argument("--seed", type=int, default=None, help="seed of the conformance part (default: the suite's)")
    p.add_argument("--check-timeout", type=float, default=None, metavar="SECONDS",
                   help="time limit of one conformance check (default: the quick profile's; 0 disables)")
    p.add_argument("--jobs", type=int, default=None, metavar="N", help=JOBS_HELP)
    p.add_argument("--json", action="store_true", help="print the summary rows as JSON")


def verify_main(args: argparse.Namespace) -> int:
    """Run the three parts and print one table; the verdict line first. A stop (Ctrl-C, or the
    SIGTERM of ``timeout`` and job schedulers) ends it as ``plga verify: interrupted``, exit 130
    (:func:`plga.cli.run_command`), not killed without a word."""
    from .guard import watch_user_interrupt

    passive_waits()  # before torch loads OpenMP: a busy machine must not time a correct kernel out
    with watch_user_interrupt(ignore_after_stop=True):
        return _verify(args)


def _verify(args: argparse.Namespace) -> int:
    from ..proofs_bridge import run_all, summary
    from ..reference.reduction import sdpa_reduction
    from .adapter import at_scale_spec, resolve_impl
    from .guard import stop_if_interrupted
    from .runner import VERDICTS, quick_summary
    from .workers import check_loads, jobs_option

    if args.max_examples < 1:
        raise UsageError(f"--max-examples must be ≥ 1, got {args.max_examples}")
    jobs = jobs_option(args.jobs)
    # a bad --impl is a usage error before anything runs
    impl = resolve_impl(args.impl) if jobs is None else args.impl  # --jobs 0: imported here; else by the workers
    if jobs is not None:
        check_loads(impl)
    rows: list[dict[str, Any]] = []

    t0 = time.perf_counter()
    sdpa_rows, sdpa_ok = sdpa_reduction()
    worst = max(r[3] for r in sdpa_rows if r[0] == "float64")
    worst_mp = max(r[3] for r in sdpa_rows if r[0] != "float64")
    rows.append({"check": "SDPA reduction (G = I)", "ok": sdpa_ok, "seconds": time.perf_counter() - t0,
                 "detail": f"{len(sdpa_rows)} cases; float64 max diff {worst!r} (exact), mpmath {worst_mp:.1e}"})

    stop_if_interrupted()
    t0 = time.perf_counter()
    results = run_all(max_examples=args.max_examples)
    s = summary(results)
    failed = [r.name for r in results if r.status != "pass"]
    rows.append({"check": "theorem checks (formal/)", "ok": not failed and s["theorems"] > 0,
                 "seconds": time.perf_counter() - t0,
                 "detail": f"{s['passed']}/{s['theorems']} pass; derived {s['derived']}/{s['theorems']}; "
                           f"symbolic {s['proved_symbolically']}/{s['algebraic_identities']}; kernel-checked 0 (no Lean here)"
                           + (f"; failed: {', '.join(failed[:5])}" if failed else "")})

    # (after a swallowed stop, check_kernel stops before its first check)
    conf = quick_summary(impl, seed=args.seed, check_timeout=args.check_timeout, jobs=jobs)
    if not any(r["passed"] or r["errors"] for r in conf):
        name = conf[0]["implementation"] if conf else args.impl or "the default implementation"
        rows.append({"check": "conformance", "ok": False, "seconds": sum(r["seconds"] for r in conf),
                     "detail": f"{name}: nothing verified — no check ran (declare capabilities)"})
    rows += _conformance_rows(conf, "conformance")
    at_scale = at_scale_spec(args.impl)
    if at_scale is not None:
        stop_if_interrupted()
        conf = quick_summary(at_scale, groups=AT_SCALE_GROUPS, seed=args.seed, check_timeout=args.check_timeout, jobs=jobs)
        rows += _conformance_rows(conf, "conformance at scale")
    judged = [r for r in rows if r["ok"] is not None]
    ok = all(r["ok"] for r in judged)
    # no verdict where the only parts that did not pass are the suite's own errors
    error = not ok and all(r["ok"] or r.get("error") for r in judged)
    skipped = len(rows) - len(judged)
    word = "PASS" if ok else "ERROR" if error else "FAIL"
    verdict = (f"plga verify: {word} ({sum(bool(r['ok']) for r in judged)}/{len(judged)} checks"
               + (f"; {skipped} skipped: nothing ran" if skipped else "") + ")")
    if args.json:
        print(json.dumps({"ok": ok, "verdict": word, "rows": rows}, indent=2))
    else:
        print(verdict)
        width = max(len(r["check"]) for r in rows)
        print(f"{'check':<{width}}  result  seconds  detail")
        for r in rows:
            status = "SKIP" if r["ok"] is None else "PASS" if r["ok"] else "ERROR" if r.get("error") else "FAIL"
            print(f"{r['check']:<{width}}  {status:<6}  {r['seconds']:7.1f}  {r['detail']}")
        if jobs is not None and jobs > 1:
            print(f"(a conformance row's seconds are its checks' times added up; they ran side by side in {jobs} "
                  "worker processes)")
        print(verdict)
    return VERDICTS[word]


#: Groups of the at-scale conformance part: every path a size threshold steers is reached by
#: them; the cache group's decoding steps run the same paths at every model size (its whole
#: quick profile at scale runs in the test suite and in ``plga conformance --impl kernels-at-scale``).
AT_SCALE_GROUPS = ("attention", "structure", "chain", "decoder")


def _conformance_rows(conf: list[dict[str, Any]], part: str) -> list[dict[str, Any]]:
    """One table row per group of :func:`~plga.conformance.runner.quick_summary`'s result; a
    group where nothing ran (undeclared) is skipped, never a pass."""
    rows = []
    for row in conf:
        ran = row["passed"] + row["failed"] + row["errors"] > 0
        raised = f", {row['errors']} raised in the suite (a bug in plga: run plga conformance for the traceback)"
        rows.append({"check": f"{part}: {row['group']}", "ok": row["failed"] + row["errors"] == 0 if ran else None,
                     "seconds": row["seconds"], "error": row["errors"] > 0 and not row["failed"],
                     "detail": f"{row['implementation']}: {row['passed']} passed, {row['failed']} failed"
                               + (raised if row["errors"] else "") + f", {row['skipped']} skipped"
                               + (f"; failed: {', '.join(row['failures'][:3])}" if row["failures"] else "")
                               + (f"; raised: {', '.join(row['raised'][:3])}" if row["raised"] else "")})
    return rows


__all__ = ["AT_SCALE_GROUPS", "add_verify_arguments", "verify_main"]
