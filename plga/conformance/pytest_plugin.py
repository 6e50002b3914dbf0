"""The pytest plugin of the conformance suite (entry point ``pytest11: plga``).

Import-light on purpose: it is loaded in every pytest run of the environment, so it imports
neither torch nor the kernels until a test asks for the ``plga_impl`` fixture or the session
runs the shipped suite. It provides ``--plga-impl`` (the one switch, also ``$PLGA_IMPL``),
``--plga-profile`` (``quick`` | ``ci`` | ``thorough``, also ``$PLGA_PROFILE``; ``$CI`` → ci),
``--plga-xfails-file`` (test-id substrings with reasons, one per line: ``substring  # reason``),
the ``plga_impl`` fixture, the shipped suite's ``plga_suite_memo`` fixture, and the report
header (implementation, version, device, dtype policy, capabilities, profile and every
``PLGA_*`` variable). A session that runs the shipped suite makes OpenMP's idle threads sleep
(:func:`plga.openmp.passive_waits`) before anything imports torch.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import pytest


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("plga", "PLGA conformance suite")
    group.addoption("--plga-impl", default=None, metavar="MODULE:OBJECT",
                    help="implementation under test (default: $PLGA_IMPL, else the project's plga.kernels); "
                         "aliases: default, kernels, kernels-eager, kernels-captured, kernels-at-scale, reference")
    group.addoption("--plga-profile", default=None, choices=["quick", "ci", "thorough"],
                    help="Hypothesis budget of the conformance checks (default: $PLGA_PROFILE, ci when $CI is set, else quick)")
    group.addoption("--plga-xfails-file", default=None, metavar="PATH",
                    help="file of test-id substrings expected to fail, one per line, each with '# reason'")


def pytest_configure(config: Any) -> None:
    impl = config.getoption("--plga-impl", default=None)
    if impl:
        os.environ["PLGA_IMPL"] = impl
    profile = config.getoption("--plga-profile", default=None)
    if profile:
        os.environ["PLGA_PROFILE"] = profile
    config.addinivalue_line("markers", "plga_check(name, group): a PLGA conformance check")
    if _running_suite(config):
        from ..openmp import passive_waits

        passive_waits()  # before the suite imports torch: a busy machine must not time a correct kernel out


def _running_suite(config: Any) -> bool:
    args = " ".join(str(a) for a in config.args)
    return bool(config.getoption("--plga-impl", default=None)) or "conformance" in args


def pytest_report_header(config: Any) -> list[str] | None:
    if not _running_suite(config):
        return None
    from .adapter import plga_environment, resolve_impl
    from .profiles import selected

    lines = []
    try:
        adapter = resolve_impl()
        info = adapter.describe()
        lines.append(f"plga conformance: implementation {info['implementation']}, version {info['version']}")
        lines.append(f"  device {info['device']}; dtype policy: {info['dtype policy']}")
        lines.append(f"  capabilities: {info['capabilities']}")
    except Exception as exc:  # the header must never hide the test run
        lines.append(f"plga conformance: cannot resolve the implementation: {type(exc).__name__}: {exc}")
    lines.append(f"  profile {selected()}; PLGA_* settings: {plga_environment() or '(none)'}")
    return lines


def _read_xfails(path: str) -> list[tuple[str, str]]:
    from ..errors import UsageError
    from .cli import read_xfails

    try:
        return read_xfails(path)
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    path = config.getoption("--plga-xfails-file", default=None)
    if not path:
        return
    entries = _read_xfails(path)
    used = set()
    for item in items:
        for ident, reason in entries:
            if ident in item.nodeid:
                item.add_marker(pytest.mark.xfail(reason=reason, strict=False))
                used.add(ident)
    for ident, _ in entries:
        if ident not in used:
            warnings.warn(f"--plga-xfails-file entry {ident!r} matches no collected test", stacklevel=1)


@pytest.fixture(scope="session")
def plga_impl() -> Any:
    """The implementation under test, as an :class:`~plga.conformance.adapter.Adapter`."""
    from .adapter import resolve_impl

    return resolve_impl()


@pytest.fixture(scope="module")
def plga_suite_memo() -> Any:
    """The suite's own results (the float64 truth, the eager baselines) kept while one module of
    the shipped suite runs (:func:`plga.conformance.memo.scope`), as ``plga conformance`` keeps
    them for a run: the checks of a group repeat the same boundary cases. Per module, so that
    no other test of the session runs inside the scope."""
    from .memo import scope

    with scope():
        yield
