"""``python -m plga.proofs_bridge {catalog,theorems,approve,gates,table}``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m plga.proofs_bridge", description=__doc__)
    p.add_argument("--formal-dir", default=None, help="formal/ tree to read (default: plga.formal.FORMAL_DIR)")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("catalog", help="list every declaration")
    c.add_argument("--json", action="store_true")
    t = sub.add_parser("theorems", help="run every check")
    t.add_argument("--json", action="store_true")
    t.add_argument("--max-examples", type=int, default=25)
    t.add_argument("--dps", type=int, default=50)
    t.add_argument("--no-symbolic", action="store_true")
    t.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    t.add_argument("names", nargs="*", help="only these theorems")
    a = sub.add_parser("approve", help="approve current statement fingerprints in manifest.json")
    a.add_argument("names", nargs="*")
    a.add_argument("--all", action="store_true")
    sub.add_parser("gates", help="run the gates (Lake workspace, forbidden tokens, coverage, names, manifest)")
    sub.add_parser("table", help="print the README's 'What is formalized' table")
    from ..cli import run_command

    return run_command("proofs_bridge", _run, p.parse_args(argv))


def _run(args: argparse.Namespace) -> int:
    from .catalog import Catalog
    from .runner import approve, render_formalized_table, theorems_command

    if args.cmd == "catalog":
        cat = Catalog.load(args.formal_dir)
        if args.json:
            print(cat.to_json())
        else:
            for e in cat.entries:
                print(f"{e.kind:8s} {e.full_name:50s} {e.file}:{e.line}  {e.paper or ''}")
        return 0
    if args.cmd == "theorems":
        return theorems_command(args.names, as_json=args.json, max_examples=args.max_examples, dps=args.dps,
                                symbolic=not args.no_symbolic, root=args.formal_dir,
                                show_progress=not args.no_progress)
    if args.cmd == "approve":
        if not args.all and not args.names:
            print("error: give theorem names or --all", file=sys.stderr)
            return 2
        done = approve(None if args.all else args.names, root=args.formal_dir)
        print(f"approved {len(done)} theorem(s)")
        return 0
    if args.cmd == "gates":
        from .gates import all_gates
        from .runner import Bridge
        from .workspace import check_workspace

        problems = {**check_workspace(args.formal_dir), **all_gates(Bridge(args.formal_dir))}
        bad = 0
        for gate, items in problems.items():
            print(f"{gate}: {'ok' if not items else f'{len(items)} problem(s)'}")
            for it in items:
                print(f"  {it}")
            bad += len(items)
        return 1 if bad else 0
    if args.cmd == "table":
        print(render_formalized_table(args.formal_dir))
        return 0
    return 2  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
