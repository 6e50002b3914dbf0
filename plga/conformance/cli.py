"""``plga conformance``: run the shipped suite through pytest, or write vectors.

The lead's ``plga`` console script wires :func:`add_conformance_arguments` into its
``conformance`` subcommand and calls :func:`conformance_main` (or :func:`run_from_args` with
the parsed namespace). The exit code is pytest's (0 all passed, 1 failures, 5 nothing
collected, …); ``--write-vectors`` returns 0 after writing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from collections.abc import Sequence

SUITE = "plga.conformance.suite"


def add_conformance_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``plga conformance`` options to ``parser`` (a subcommand parser)."""
    parser.add_argument("--impl", default=None, metavar="MODULE:OBJECT",
                        help="implementation under test: an Adapter, Adapter class, factory or attention callable "
                             "(default: $PLGA_IMPL, else the project's plga.kernels; aliases: default, kernels, "
                             "kernels-eager, reference, eager)")
    parser.add_argument("--profile", default=None, choices=["quick", "ci", "thorough"],
                        help="Hypothesis budget (default: $PLGA_PROFILE, ci when $CI is set, else quick)")
    parser.add_argument("-k", dest="keyword", default=None, metavar="EXPR",
                        help="pytest -k expression, e.g. 'attention_causal and float32'")
    parser.add_argument("--group", action="append", choices=["attention", "structure", "chain", "decoder", "cache"],
                        help="run only these check groups (repeatable)")
    parser.add_argument("-x", "--exitfirst", action="store_true", help="stop at the first failure")
    parser.add_argument("-n", "--numprocesses", default=None, metavar="N", help="pytest-xdist workers (at most 2 in CI)")
    parser.add_argument("--xfails-file", default=None, metavar="PATH",
                        help="test-id substrings expected to fail, one per line with '# reason'")
    parser.add_argument("--write-vectors", default=None, metavar="DIR",
                        help="write the named vector cases (safetensors + JSON) to DIR and exit")
    parser.add_argument("--vector-seed", type=int, default=0, help="seed of the vector cases (default 0)")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER,
                        help="further pytest arguments after '--'")
    return parser


def _plugin_installed() -> bool:
    from importlib.metadata import entry_points

    return any(e.value == "plga.conformance.pytest_plugin" for e in entry_points(group="pytest11"))


def pytest_args(args: argparse.Namespace) -> list[str]:
    """The pytest command line for ``args`` (without the program name)."""
    out = ["--pyargs", SUITE, "-p", "no:cacheprovider", "-ra"]
    if not _plugin_installed():
        out += ["-p", "plga.conformance.pytest_plugin"]
    if args.impl:
        out += ["--plga-impl", args.impl]
    if args.profile:
        out += ["--plga-profile", args.profile]
    if args.xfails_file:
        out += ["--plga-xfails-file", args.xfails_file]
    keyword = args.keyword
    if args.group:
        groups = " or ".join(f"test_{g}" for g in args.group)
        keyword = f"({groups})" + (f" and ({keyword})" if keyword else "")
    if keyword:
        out += ["-k", keyword]
    if args.exitfirst:
        out.append("-x")
    if args.numprocesses:
        out += ["-n", str(args.numprocesses)]
    extra = list(args.pytest_args or [])
    if extra and extra[0] == "--":
        extra = extra[1:]
    return out + extra


def run_from_args(args: argparse.Namespace) -> int:
    """Run ``plga conformance`` for an already parsed namespace; returns the exit code."""
    if args.write_vectors:
        from .vectors import write_vectors

        paths = write_vectors(args.write_vectors, seed=args.vector_seed)
        print(f"wrote {len(paths)} files to {args.write_vectors} (index.json lists the cases)")
        return 0
    if args.impl:
        os.environ["PLGA_IMPL"] = args.impl
    if args.profile:
        os.environ["PLGA_PROFILE"] = args.profile
    import pytest

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = int(pytest.main(pytest_args(args)))
    text = err.getvalue()
    if code == pytest.ExitCode.USAGE_ERROR:
        # pytest's usage error spans several lines; the CLI contract is one line
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        reason = next((ln for ln in lines if "error:" in ln and not ln.startswith("ERROR: usage")), lines[-1] if lines else "")
        sys.stderr.write(f"plga conformance: error: {reason.split('error:', 1)[-1].strip()}\n")
    else:
        sys.stderr.write(text)
    return code


def conformance_main(argv: Sequence[str] | None = None) -> int:
    """``plga conformance [options]`` → pytest's exit code."""
    parser = argparse.ArgumentParser(prog="plga conformance",
                                     description="Run the PLGA conformance suite against an implementation.")
    add_conformance_arguments(parser)
    return run_from_args(parser.parse_args(list(sys.argv[1:] if argv is None else argv)))


__all__ = ["SUITE", "add_conformance_arguments", "conformance_main", "pytest_args", "run_from_args"]
