"""The PLGA conformance suite: one suite, any implementation (docs/conformance.md).

Entry points::

    plga conformance --impl package.module:object [--profile P] [--seed N]   # verdict, coverage
    plga conformance --self-test                                             # the suite on its controls
    plga.conformance.check_kernel(fn, seed=None, ...) -> ConformanceReport
    @plga.conformance.parametrize_with_checks([fn, ...])                     # in your pytest session
    python -m pytest --pyargs plga.conformance.suite

The adapter protocol and its detection rules are :mod:`plga.conformance.adapter`; guarded
calls into foreign code (copies, escapes, time limit) :mod:`plga.conformance.guard`; the
tolerance policy :mod:`plga.conformance.tolerance`; inputs by region
:mod:`plga.conformance.strategies`; negative and positive controls
:mod:`plga.conformance.controls` and :mod:`plga.conformance.broken`; vectors for non-Python
implementations :mod:`plga.conformance.vectors`.

This package imports nothing heavy at import time (the pytest plugin lives under it and is
loaded in every pytest run of the environment); the names below load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "check_kernel": "runner",
    "parametrize_with_checks": "runner",
    "quick_summary": "runner",
    "ConformanceReport": "runner",
    "ConformanceInterrupted": "runner",
    "CheckResult": "runner",
    "Adapter": "adapter",
    "CallableAdapter": "adapter",
    "ForwardOutput": "adapter",
    "GenerateOutput": "adapter",
    "SkipCheck": "adapter",
    "NotProvided": "adapter",
    "CAPABILITIES": "adapter",
    "as_adapter": "adapter",
    "adapter_factory": "adapter",
    "resolve_impl": "adapter",
    "CHECKS": "checks",
    "CONTROLS": "controls",
    "assert_conforms": "tolerance",
    "ConformanceFailure": "tolerance",
    "write_vectors": "vectors",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
