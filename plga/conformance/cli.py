"""``plga conformance``: run the suite on an implementation, print the verdict, then the numbers.

The suite runs through :func:`plga.conformance.check_kernel`, not through pytest: nothing of
the working folder takes part (no ``conftest.py``, no ``pytest.ini`` / ``pyproject`` options, no
plugins of the environment, no ``.hypothesis/`` example database). The only thing imported is
the module ``--impl`` names, and only in the worker processes that run the checks
(:mod:`plga.conformance.workers`; ``--jobs 0``: in this process).

Exit status: **0** the implementation conforms (checks ran, none failed); **1** it does not
conform, or nothing was verified (every check skipped); **2** a usage error — a bad option, or
an ``--impl`` that cannot be imported or is not an implementation (one line on stderr).
``--write-vectors`` returns 0 after writing; ``--self-test`` returns 0 when every negative
control is caught and no correct control is rejected.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ..errors import UsageError
from ..openmp import passive_waits


def add_conformance_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``plga conformance`` options to ``parser`` (a subcommand parser)."""
    from .profiles import CHECK_TIMEOUT, DEFAULT_SEED, GROUPS
    from .workers import JOBS_HELP

    parser.add_argument("--impl", default=None, metavar="MODULE:OBJECT",
                        help="implementation under test: an Adapter (instance or subclass), a factory, or an attention "
                             "callable (default: $PLGA_IMPL, else the project's plga.kernels; aliases: default, kernels, "
                             "kernels-eager, kernels-captured, kernels-at-scale, reference); the module must be importable (PYTHONPATH)")
    parser.add_argument("--profile", default=None, choices=["quick", "ci", "thorough"],
                        help="example budget (default: $PLGA_PROFILE, ci when $CI is set, else quick)")
    parser.add_argument("--seed", type=int, default=None,
                        help=f"seed of the drawn cases (default {DEFAULT_SEED}; the same seed gives the same verdict)")
    parser.add_argument("-k", dest="keyword", default=None, metavar="EXPR",
                        help="select checks with pytest's -k grammar over their ids, e.g. 'attention_causal and float32'")
    parser.add_argument("--group", action="append", choices=list(GROUPS), help="run only these check groups (repeatable)")
    parser.add_argument("-x", "--exitfirst", action="store_true", help="stop at the first failing check")
    parser.add_argument("--no-shrink", action="store_true",
                        help="report the first failing case without shrinking it (faster failures)")
    parser.add_argument("--check-timeout", type=float, default=None, metavar="SECONDS",
                        help="time limit of one check; a check past it fails (default: "
                             + ", ".join(f"{p} {s:g}" for p, s in CHECK_TIMEOUT.items()) + "; 0 disables)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N", help=JOBS_HELP)
    parser.add_argument("--json", action="store_true", help="print the report (verdict, coverage, results) as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (also PLGA_NO_PROGRESS=1)")
    parser.add_argument("--xfails-file", default=None, metavar="PATH",
                        help="checks expected to fail: one id substring per line with '# reason'")
    parser.add_argument("--self-test", action="store_true",
                        help="run the suite on its own negative and positive controls and print caught/total")
    parser.add_argument("--write-vectors", default=None, metavar="DIR",
                        help="write the named vector cases (safetensors + JSON) to DIR and exit")
    parser.add_argument("--vector-seed", type=int, default=0, help="seed of the vector cases (default 0)")
    return parser


def read_xfails(path: str) -> list[tuple[str, str]]:
    """``id-substring  # reason`` lines (blank lines and ``#`` comments skipped); a reason is required."""
    out = []
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.readlines()
    except OSError as exc:
        raise UsageError(f"--xfails-file {path}: {exc.strerror or exc}") from None
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        ident, sep, reason = line.partition("#")
        if not sep or not reason.strip():
            raise UsageError(f"{path}:{n}: every expected failure needs a reason after '#': {line!r}")
        out.append((ident.strip(), reason.strip()))
    return out


def _expected_failures(path: str | None) -> dict[str, str]:
    """Expand the xfails file's substrings to the check ids they match (pytest-style ids too)."""
    if not path:
        return {}
    from .checks import CHECKS, check_ids

    out = {}
    for ident, reason in read_xfails(path):
        for name, dtype in check_ids():
            if ident in f"{name}[{dtype}]" or ident in f"test_{CHECKS[name].group}[{name}-{dtype}]":
                out[f"{name}[{dtype}]"] = reason
    return out


def run_from_args(args: argparse.Namespace) -> int:
    """Run ``plga conformance`` for an already parsed namespace; returns the exit status."""
    passive_waits()  # before torch loads OpenMP: a busy machine must not time a correct kernel out
    if args.write_vectors:
        from .vectors import write_vectors

        paths = write_vectors(args.write_vectors, seed=args.vector_seed)
        print(f"wrote {len(paths)} files to {args.write_vectors} (index.json lists the cases)")
        return 0
    if args.check_timeout is not None and args.check_timeout < 0:
        raise UsageError(f"--check-timeout must be ≥ 0 seconds, got {args.check_timeout:g}")
    if args.self_test:
        from .selftest import run_self_test

        return run_self_test(profile=args.profile or "quick", seed=args.seed, check_timeout=args.check_timeout,
                             as_json=args.json, keyword=args.keyword, show_progress=not args.no_progress)
    from .workers import jobs_option

    jobs = jobs_option(args.jobs)
    from .guard import user_interrupted, watch_user_interrupt

    # from the implementation's import to the report, a stop is reported (a repeated one waits,
    # and once stopped the process ignores them until it exits)
    with watch_user_interrupt(ignore_after_stop=True):
        from .runner import ConformanceInterrupted, check_kernel

        try:
            if jobs is None:  # --jobs 0: the implementation is imported here
                from .adapter import resolve_impl

                impl = resolve_impl(args.impl)  # ImplementationLoadError → one line, exit 2
            else:
                impl = args.impl  # imported by the workers (a load error: the same line, exit 2)
            report = check_kernel(impl, profile=args.profile, groups=args.group, keyword=args.keyword,
                                  expected_failures=_expected_failures(args.xfails_file), shrink=not args.no_shrink,
                                  seed=args.seed, check_timeout=args.check_timeout, exitfirst=args.exitfirst,
                                  show_progress=not args.no_progress, jobs=jobs)
        except ConformanceInterrupted as stop:  # what finished is reported: a failure stays a FAIL
            report = stop.report
        except KeyboardInterrupt:
            if not user_interrupted():
                raise
            return _stopped_while_loading(args)
        if not report.results and not report.interrupted:
            raise UsageError("no check matches the selection (-k / --group)")
        if args.json:
            print(json.dumps(report.to_json(), indent=2, ensure_ascii=False), flush=True)
        else:
            print(report.summary(), flush=True)
    return report.exit_code


def _stopped_while_loading(args: argparse.Namespace) -> int:
    """Report a run stopped (Ctrl-C, SIGTERM) before its first check: no verdict, exit 130."""
    from .runner import VERDICTS

    impl = args.impl or "the default implementation"
    line = f"plga conformance: INTERRUPTED — stopped while loading {impl}, before any check ran: no verdict"
    if args.json:
        print(json.dumps({"verdict": "INTERRUPTED", "exit_code": VERDICTS["INTERRUPTED"], "implementation": impl,
                          "stopped": "while loading the implementation", "results": []}, indent=2), flush=True)
    else:
        print(line, flush=True)
    return VERDICTS["INTERRUPTED"]


def conformance_main(argv: Sequence[str] | None = None) -> int:
    """``plga conformance [options]`` → exit status (usage errors: one line, 2)."""
    from ..cli import _Parser, run_command

    parser = _Parser(prog="plga conformance", description="Run the PLGA conformance suite against an implementation.")
    add_conformance_arguments(parser)
    return run_command("conformance", run_from_args, parser.parse_args(list(sys.argv[1:] if argv is None else argv)))


__all__ = ["add_conformance_arguments", "conformance_main", "read_xfails", "run_from_args"]
