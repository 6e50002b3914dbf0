#!/usr/bin/env python
"""Render a ``plga bench`` JSON (final, or the ``.partial`` of an interrupted run) as Markdown.

    python benchmarks/render_results.py benchmarks/results/bench-<date>-cpu.json

Ratios and targets are recomputed from the rows present, so a partial run renders too (its
missing targets read "not measured"). Rows of the older ``plga-bench/1`` files take the run's
dtype. Rows of a run whose cases took their runs in turn (``settings.interleaved``, since
2026-12-02) but that predates the rows' ``group`` field get their group from the plan, so their
ratios are paired by round as a new run's are.
"""

from __future__ import annotations

import json
import sys

from plga.bench.plan import group_of
from plga.bench.report import format_in_turn_bandwidth, format_limits, format_rows, format_targets
from plga.bench.rows import Row, add_ratios
from plga.bench.targets import evaluate_targets


def main(argv: list[str]) -> int:
    doc = json.loads(open(argv[1]).read())
    dtype = (doc.get("settings") or {}).get("dtype", "float32")
    interleaved = (doc.get("settings") or {}).get("interleaved", False)
    rows = [Row.from_json({"dtype": dtype, **({"group": group_of({"name": r["id"], **r})} if interleaved else {}), **r})
            for r in doc["rows"]]
    add_ratios(rows)
    print(format_targets(evaluate_targets(rows, limits=doc.get("limits"))))
    print()
    print(format_limits(doc["limits"], doc.get("limits_end"), doc.get("limits_used")))
    in_turn = format_in_turn_bandwidth(rows)
    if in_turn:
        print(in_turn)
    print()
    print(format_rows(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
