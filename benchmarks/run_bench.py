#!/usr/bin/env python
"""Run ``plga bench`` and keep its results under ``benchmarks/results/``.

    python benchmarks/run_bench.py                 # full run: tiny, small, paper-110m, 5 runs, 2 threads
    python benchmarks/run_bench.py --quick         # smoke run (tiny/small shapes, 2 runs; labelled)
    python benchmarks/run_bench.py --device cuda   # the same cases on a CUDA GPU

Writes ``results/bench-<date>-<device>.json`` (the full JSON: every row, the machine limits,
the targets table) and ``results/bench-<date>-<device>.md`` (the printed report, ready to paste
into README.md). Any other ``plga bench`` option is passed through. It refuses to start a
full run while the 1-minute load average exceeds ``--max-load`` (default 0.5 per core):
timings on a shared, busy machine measure the other jobs (``--max-load inf`` overrides).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import os
import sys
from pathlib import Path

from plga.atomic import atomic_path
from plga.bench import add_bench_arguments, bench_main

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = add_bench_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--max-load", type=float, default=0.5 * (os.cpu_count() or 1),
                        help="refuse a full run above this 1-minute load average (default 0.5 per core)")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    if not args.quick and load > args.max_load:
        print(f"run_bench: load average {load:.2f} > --max-load {args.max_load:.2f}; timings would be noise. "
              "Wait for a quiet machine or pass --max-load inf.", file=sys.stderr)
        return 3
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M")
    stem = f"bench-{stamp}-{args.device}{'-quick' if args.quick else ''}"
    if args.out is None:
        args.out = str(HERE / "results" / f"{stem}.json")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = bench_main(args)
    text = buf.getvalue()
    sys.stdout.write(text)
    md = Path(args.out).with_suffix(".md")
    with atomic_path(md) as tmp:
        tmp.write_text(text)
    print(f"wrote {md}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
