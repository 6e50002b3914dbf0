#!/usr/bin/env python
"""Render a ``plga bench`` JSON (final, or the ``.partial`` of an interrupted run) as Markdown.

    python benchmarks/render_results.py benchmarks/results/bench-<date>-cpu.json

Ratios and targets are recomputed from the rows present, so a partial run renders too (its
missing targets read "not measured").
"""

from __future__ import annotations

import json
import sys

from plga.bench import harness as H


def main(argv: list[str]) -> int:
    doc = json.loads(open(argv[1]).read())
    rows = doc["rows"]
    H.add_ratios(rows)
    doc.setdefault("targets", H.evaluate_targets(doc))
    print(H.format_limits(doc["limits"], doc.get("limits_end")))
    print()
    print(H.format_rows(rows))
    print()
    print(H.format_targets(doc["targets"]))
    notes = doc.get("notes") or H.closing_notes(doc)
    for n in notes:
        print(f"- {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
