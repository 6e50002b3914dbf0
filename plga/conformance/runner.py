"""Library entry points: ``check_kernel``, ``parametrize_with_checks`` and ``quick_summary``.

sklearn's ``check_estimator`` / ``parametrize_with_checks`` pattern (STYLE trait 14): a kernel
engineer runs every check from Python, or drops one decorator into their own pytest file and
selects a check with ``-k``.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import profiles
from .adapter import Adapter, SkipCheck, as_adapter, resolve_impl
from .checks import CHECKS, GROUPS, check_ids, run_check


@dataclasses.dataclass
class CheckResult:
    """The outcome of one check at one dtype."""

    check: str
    dtype: str
    group: str
    status: str  # passed | failed | skipped | xfailed | xpassed
    message: str = ""
    seconds: float = 0.0

    @property
    def id(self) -> str:
        return f"{self.check}[{self.dtype}]"


@dataclasses.dataclass
class ConformanceReport:
    """All results of a :func:`check_kernel` run."""

    implementation: str
    profile: str
    results: list[CheckResult]
    header: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True when nothing failed unexpectedly (xfailed and skipped are fine)."""
        return not self.failures

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "failed"]

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in ("passed", "failed", "skipped", "xfailed", "xpassed")}
        for r in self.results:
            out[r.status] += 1
        return out

    def failed_checks(self) -> set[str]:
        return {r.check for r in self.failures}

    def result(self, check: str, dtype: str | None = None) -> list[CheckResult]:
        return [r for r in self.results if r.check == check and (dtype is None or r.dtype == dtype)]

    def summary(self) -> str:
        lines = [f"PLGA conformance of {self.implementation} (profile {self.profile})"]
        for r in self.results:
            reason = f" — {r.message.splitlines()[0]}" if r.message and r.status != "passed" else ""
            lines.append(f"  {r.status.upper():8s} {r.id} ({r.seconds:.1f}s){reason}")
        c = self.counts()
        lines.append("  " + ", ".join(f"{v} {k}" for k, v in c.items() if v))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _select(adapter: Adapter, checks: Iterable[str] | None, groups: Iterable[str] | None,
            dtypes: Iterable[str] | None = None) -> list[tuple[str, str]]:
    pairs = check_ids(adapter)
    if dtypes is not None:
        ds = set(dtypes)
        pairs = [(c, d) for c, d in pairs if d in ds]
    if groups is not None:
        gs = set(groups)
        pairs = [(c, d) for c, d in pairs if CHECKS[c].group in gs]
    if checks is not None:
        wanted = list(checks)
        unknown = [w for w in wanted if not any(w == c or w == f"{c}[{d}]" for c, d in pairs)]
        if unknown:
            raise ValueError(f"unknown check ids {unknown}; known: {sorted(CHECKS)}")
        pairs = [(c, d) for c, d in pairs if c in wanted or f"{c}[{d}]" in wanted]
    return pairs


def check_kernel(
    fn: Any,
    *,
    expected_failures: Mapping[str, str] | None = None,
    profile: str | None = None,
    checks: Iterable[str] | None = None,
    groups: Iterable[str] | None = None,
    dtypes: Iterable[str] | None = None,
    shrink: bool = True,
    reproduce: str | None = None,
) -> ConformanceReport:
    """Run the conformance checks on ``fn`` and return a :class:`ConformanceReport` (never raises
    for a failing check).

    ``fn``: an :class:`~plga.conformance.adapter.Adapter`, an attention callable
    ``fn(q, k, v, G, *, causal, key_padding_mask, scale)``, or a ``"module:object"`` string.
    ``expected_failures``: ``{check name or id: reason}``; such a check that fails is reported
    ``xfailed``, one that passes ``xpassed`` (sklearn's ``expected_failed_checks``).
    ``profile``: ``quick`` | ``ci`` | ``thorough`` (default: :func:`profiles.selected`).
    ``checks`` / ``groups`` / ``dtypes`` restrict the run; ``shrink=False`` skips Hypothesis shrinking
    (faster failures, larger counterexamples); ``reproduce`` replays a ``VERSION:BLOB``.
    """
    import os

    adapter = resolve_impl(fn) if isinstance(fn, str) else as_adapter(fn)
    prof = profiles.selected(profile)
    expected = dict(expected_failures or {})
    results = []
    old = os.environ.get("PLGA_REPRODUCE")
    if reproduce:
        os.environ["PLGA_REPRODUCE"] = reproduce
    try:
        for name, dtype in _select(adapter, checks, groups, dtypes):
            xfail_reason = expected.get(f"{name}[{dtype}]", expected.get(name))
            t0 = time.perf_counter()
            try:
                run_check(adapter, name, dtype, profile=prof, shrink=shrink)
                status, msg = ("xpassed", f"expected to fail ({xfail_reason}) but passed") if xfail_reason else ("passed", "")
            except SkipCheck as exc:
                status, msg = "skipped", str(exc)
            except AssertionError as exc:
                notes = "\n".join(getattr(exc, "__notes__", []))
                status = "xfailed" if xfail_reason else "failed"
                msg = f"{exc}\n{notes}".strip() + (f"\n(expected: {xfail_reason})" if xfail_reason else "")
            except Exception as exc:  # an implementation crash is a failure of that check
                status = "xfailed" if xfail_reason else "failed"
                msg = f"{type(exc).__name__}: {exc}\n" + "".join(traceback.format_exception(exc)[-3:])
            results.append(CheckResult(name, dtype, CHECKS[name].group, status, msg, time.perf_counter() - t0))
    finally:
        if reproduce:
            if old is None:
                os.environ.pop("PLGA_REPRODUCE", None)
            else:
                os.environ["PLGA_REPRODUCE"] = old
    unmatched = [k for k in expected if not any(k in (r.check, r.id) for r in results)]
    if unmatched:
        import warnings

        warnings.warn(f"expected_failures entries match no check: {unmatched}", stacklevel=2)
    return ConformanceReport(adapter.name, prof, results, adapter.describe())


def parametrize_with_checks(impls: Sequence[Any], *, expected_failures: Mapping[str, str] | None = None,
                            groups: Iterable[str] | None = None) -> Any:
    """A ``pytest.mark.parametrize("impl, check", ...)`` over every (implementation, check, dtype).

    Use in a third-party test file::

        from plga.conformance import parametrize_with_checks

        @parametrize_with_checks([my_attention])
        def test_plga(impl, check):
            check(impl)

    Ids read ``<impl>-<check>[<dtype>]`` so ``-k attention_causal`` selects one check. A missing
    capability skips; ``expected_failures`` ``{check: reason}`` become (non-strict) xfails.
    """
    import pytest

    params = []
    expected = dict(expected_failures or {})
    for obj in impls:
        adapter = as_adapter(obj)
        short = adapter.name.split(" ")[0]
        for name, dtype in _select(adapter, None, groups):
            marks = []
            reason = expected.get(f"{name}[{dtype}]", expected.get(name))
            if reason:
                marks.append(pytest.mark.xfail(reason=reason, strict=False))
            params.append(pytest.param(adapter, _CheckCallable(name, dtype), id=f"{short}-{name}[{dtype}]", marks=marks))
    return pytest.mark.parametrize("impl, check", params)


class _CheckCallable:
    """``check(impl)`` runs one check at one dtype under pytest (skips become pytest skips)."""

    def __init__(self, name: str, dtype: str) -> None:
        self.name, self.dtype = name, dtype

    def __call__(self, impl: Any) -> None:
        import pytest

        try:
            run_check(as_adapter(impl), self.name, self.dtype)
        except SkipCheck as exc:
            pytest.skip(str(exc))

    def __repr__(self) -> str:
        return f"{self.name}[{self.dtype}]"


def quick_summary(impl: Any = None, *, profile: str = "quick", groups: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Run the quick profile in-process; one row per check group, for ``plga verify``.

    Row keys: ``suite``, ``group``, ``implementation``, ``passed``, ``failed``, ``skipped``,
    ``seconds``, ``ok`` (no failures), ``failures`` (ids). ``impl`` defaults to the switch
    (``$PLGA_IMPL``, else the project's kernels).
    """
    report = check_kernel(impl if impl is not None else resolve_impl(), profile=profile, groups=groups, shrink=False)
    rows = []
    for group in GROUPS:
        rs = [r for r in report.results if r.group == group]
        if not rs:
            continue
        def count(status: str, rs: list[CheckResult] = rs) -> int:
            return sum(r.status == status for r in rs)

        rows.append({
            "suite": "kernel conformance (quick)" if profile == "quick" else f"kernel conformance ({profile})",
            "group": group,
            "implementation": report.implementation,
            "passed": count("passed") + count("xfailed"),
            "failed": count("failed"),
            "skipped": count("skipped"),
            "seconds": round(sum(r.seconds for r in rs), 2),
            "ok": count("failed") == 0,
            "failures": [r.id for r in rs if r.status == "failed"],
        })
    return rows


__all__ = ["CheckResult", "ConformanceReport", "check_kernel", "parametrize_with_checks", "quick_summary"]
