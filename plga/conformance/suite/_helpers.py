"""Parametrization shared by the suite modules."""

from __future__ import annotations

from typing import Any

import pytest

from ..adapter import DTYPES, SkipCheck
from ..checks import CHECKS, run_check


def params(group: str) -> list[Any]:
    """(check, dtype) pairs of ``group``, ids ``<check>-<dtype>``, marked ``plga_check``."""
    out = []
    for c in CHECKS.values():
        if c.group != group:
            continue
        for d in c.dtypes or DTYPES:
            out.append(pytest.param(c.name, d, id=f"{c.name}-{d}", marks=pytest.mark.plga_check(c.name, group)))
    assert out, f"no checks registered for group {group!r}"
    return out


def run(adapter: Any, check: str, dtype: str) -> None:
    try:
        run_check(adapter, check, dtype)
    except SkipCheck as exc:
        pytest.skip(str(exc))
