"""Library entry points: ``check_kernel``, ``parametrize_with_checks`` and ``quick_summary``.

sklearn's ``check_estimator`` / ``parametrize_with_checks`` pattern: a kernel
engineer runs every check from Python, or drops one decorator into their own pytest file and
selects a check with ``-k``.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import ImplementationLoadError, InputError
from ..openmp import WAIT_POLICY_ENV, waits_are_passive
from ..progress import progress
from . import memo, profiles
from .adapter import Adapter, SkipCheck, as_adapter, plga_environment, resolve_impl
from .checks import CHECKS, GROUPS, Context, check_ids, run_check
from .guard import CheckTimeout, stop_if_interrupted, user_interrupted, watch_user_interrupt


@dataclasses.dataclass
class CheckResult:
    """The outcome of one check at one dtype, with the regions its cases covered."""

    check: str
    dtype: str
    group: str
    status: str  # passed | failed | skipped | xfailed | xpassed | error (the suite's own code raised)
    message: str = ""
    seconds: float = 0.0
    cases: int = 0
    coverage: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    left_out: list[str] = dataclasses.field(default_factory=list)  # boundary cases the conditioning rules rejected

    @property
    def id(self) -> str:
        return f"{self.check}[{self.dtype}]"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "check": self.check, "dtype": self.dtype, "group": self.group, "status": self.status,
                "seconds": round(self.seconds, 3), "cases": self.cases, "coverage": self.coverage, "left_out": self.left_out,
                "message": self.message}


#: Verdicts of a run and their exit status (docs/conformance.md). A run stopped before its end
#: (Ctrl-C, SIGTERM) with no failure so far has none: ``INTERRUPTED``, the shell's status for it.
#: A run in which the suite's own code raised has none either: ``ERROR``, a bug of plga's.
VERDICTS = {"PASS": 0, "FAIL": 1, "NOTHING VERIFIED": 1, "ERROR": 3, "INTERRUPTED": 130}

#: The statuses of one check, in the order the report counts them.
STATUSES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


@dataclasses.dataclass
class ConformanceReport:
    """All results of a :func:`check_kernel` run."""

    implementation: str
    profile: str
    results: list[CheckResult]
    header: dict[str, str] = dataclasses.field(default_factory=dict)
    seed: int = profiles.DEFAULT_SEED
    seconds: float = 0.0
    planned: int | None = None  # the checks selected, where the run stopped before them all

    @property
    def interrupted(self) -> bool:
        return self.planned is not None

    @property
    def verdict(self) -> str:
        """``PASS`` (checks ran, none failed), ``FAIL`` (a failure is final, even in a run stopped
        early or one where the suite raised elsewhere), ``ERROR`` (no failure, but the suite's own
        code raised in a check: no verdict), ``INTERRUPTED`` (stopped before its end with no
        failure: no verdict), or ``NOTHING VERIFIED`` (no check ran: every one skipped or
        expected to fail — not a pass)."""
        if self.failures:
            return "FAIL"
        if self.errors:
            return "ERROR"
        if self.interrupted:
            return "INTERRUPTED"
        return "PASS" if any(r.status in ("passed", "xpassed") for r in self.results) else "NOTHING VERIFIED"

    @property
    def exit_code(self) -> int:
        return VERDICTS[self.verdict]

    @property
    def passed(self) -> bool:
        """True when checks ran and nothing failed unexpectedly (xfailed and skipped are fine)."""
        return self.verdict == "PASS"

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "failed"]

    @property
    def errors(self) -> list[CheckResult]:
        """Checks in which the suite's own code raised (a bug of plga's, not a verdict)."""
        return [r for r in self.results if r.status == "error"]

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for r in self.results:
            out[r.status] += 1
        return out

    def failed_checks(self) -> set[str]:
        return {r.check for r in self.failures}

    def result(self, check: str, dtype: str | None = None) -> list[CheckResult]:
        return [r for r in self.results if r.check == check and (dtype is None or r.dtype == dtype)]

    def coverage(self) -> dict[str, dict[str, list[str]]]:
        """Group → axis → regions exercised by the checks that ran."""
        out: dict[str, dict[str, set[str]]] = {}
        for r in self.results:
            for axis, regions in r.coverage.items():
                out.setdefault(r.group, {}).setdefault(axis, set()).update(regions)
        return {g: {a: sorted(v, key=_region_key) for a, v in axes.items()} for g, axes in out.items()}

    def verdict_line(self) -> str:
        c = self.counts()
        ran = ", ".join(f"{v} {k}" for k, v in c.items() if v) or "no checks"
        what = {"PASS": "conforms", "FAIL": "does NOT conform",
                "ERROR": "has no verdict: the suite itself raised (a bug in plga, not in the implementation; the "
                         "traceback is below — please report it)",
                "INTERRUPTED": "has no verdict: the run was stopped before its end",
                "NOTHING VERIFIED": "nothing verified: no check ran (every check was skipped; declare capabilities)"}[self.verdict]
        if self.interrupted:
            done = f"{len(self.results)} of {self.planned} checks ran before the stop"
            ran = f"{ran} — {done}" if self.results else done
        return (f"plga conformance: {self.verdict} — {self.implementation} {what} ({ran}; profile {self.profile}, "
                f"seed {self.seed}, {self.seconds:.1f} s)")

    def coverage_text(self) -> str:
        lines = ["Coverage (regions exercised per check group; the cases that ran):"]
        cov = self.coverage()
        for group in GROUPS:
            rs = [r for r in self.results if r.group == group]
            if not rs:
                continue
            ran = [r for r in rs if r.status not in ("skipped",)]
            lines.append(f"  {group}: {len(ran)}/{len(rs)} checks ran, {sum(r.cases for r in rs)} cases")
            for axis, regions in cov.get(group, {}).items():
                lines.append(f"    {axis:<16} {', '.join(regions)}")
            left = [f"{r.id} {', '.join(r.left_out)}" for r in rs if r.left_out]
            if left:  # what the boundary lists hold but this run could not judge
                lines.append(f"    {'left out':<16} boundary cases the conditioning rules reject at that dtype (not "
                             f"covered): {'; '.join(left)}")
        return "\n".join(lines)

    def summary(self, details: bool = True) -> str:
        lines = [self.verdict_line()]
        lines += [f"  {k}: {v}" for k, v in self.header.items()]
        lines.append(self.coverage_text())
        lines.append("Checks:")
        for r in self.results:
            reason = f" — {r.message.splitlines()[0]}" if r.message and r.status != "passed" else ""
            lines.append(f"  {r.status.upper():8s} {r.id} ({r.seconds:.1f}s, {r.cases} cases){reason}")
        if details:
            for r in self.failures:
                lines += ["", f"--- {r.id} failed ---", r.message]
            for r in self.errors:
                lines += ["", f"--- {r.id}: the suite raised (a bug in plga) ---", r.message]
        lines += ["", self.verdict_line()]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "exit_code": self.exit_code, "planned": self.planned, "implementation": self.implementation,
                "profile": self.profile, "seed": self.seed, "seconds": round(self.seconds, 3), "header": self.header,
                "counts": self.counts(), "coverage": self.coverage(), "results": [r.to_json() for r in self.results]}

    def __str__(self) -> str:
        return self.summary()


class ConformanceInterrupted(KeyboardInterrupt):
    """A :func:`check_kernel` run stopped by Ctrl-C or SIGTERM: ``report`` holds the checks that
    finished (verdict ``FAIL`` if one failed, else ``INTERRUPTED``)."""

    def __init__(self, report: ConformanceReport) -> None:
        super().__init__(report.verdict_line())
        self.report = report


def _region_key(region: str) -> tuple[int, str]:
    head = region.split("–")[0].split(" ")[0].rstrip("+")
    return (int(head), region) if head.isdigit() else (10**9, region)


def _select(pairs: list[tuple[str, str]], checks: Iterable[str] | None, groups: Iterable[str] | None,
            dtypes: Iterable[str] | None = None, keyword: str | None = None) -> list[tuple[str, str]]:
    """The (check, dtype) ids of ``pairs`` (an implementation's, :func:`~.checks.check_ids`) the
    selection keeps, in their order."""
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
            raise InputError(f"unknown check ids {unknown}; known: {sorted(CHECKS)}")
        pairs = [(c, d) for c, d in pairs if c in wanted or f"{c}[{d}]" in wanted]
    if keyword:
        match = keyword_matcher(keyword)
        pairs = [(c, d) for c, d in pairs if match(f"test_{CHECKS[c].group}[{c}-{d}] {c}[{d}]")]
    return pairs


def keyword_matcher(expression: str) -> Callable[[str], bool]:
    """pytest's ``-k`` grammar (``and``, ``or``, ``not``, parentheses; case-insensitive substrings)."""
    from _pytest.mark.expression import Expression

    try:
        compiled = Expression.compile(expression)
    except Exception as exc:  # pytest's ParseError
        raise InputError(f"-k {expression!r}: {exc}") from None
    return lambda ident: compiled.evaluate(lambda name, **_: name.lower() in ident.lower())


def check_kernel(
    fn: Any,
    *,
    expected_failures: Mapping[str, str] | None = None,
    profile: str | None = None,
    checks: Iterable[str] | None = None,
    groups: Iterable[str] | None = None,
    dtypes: Iterable[str] | None = None,
    keyword: str | None = None,
    shrink: bool = True,
    reproduce: str | None = None,
    seed: int | None = None,
    check_timeout: float | None = None,
    exitfirst: bool = False,
    show_progress: bool = False,
    jobs: int | None = None,
) -> ConformanceReport:
    """Run the conformance checks on ``fn`` and return a :class:`ConformanceReport` (never raises
    for a failing check; see :attr:`ConformanceReport.verdict`).

    ``fn``: an :class:`~plga.conformance.adapter.Adapter`, an attention callable
    ``fn(q, k, v, G, *, causal, key_padding_mask, scale)``, or a ``"module:object"`` string.
    ``expected_failures``: ``{check name or id: reason}``; such a check that fails is reported
    ``xfailed``, one that passes ``xpassed`` (sklearn's ``expected_failed_checks``).
    ``profile``: ``quick`` | ``ci`` | ``thorough`` (default: :func:`profiles.selected`).
    ``checks`` / ``groups`` / ``dtypes`` / ``keyword`` (pytest ``-k`` grammar over the ids)
    restrict the run; ``shrink=False`` skips Hypothesis shrinking; ``reproduce`` replays a
    ``VERSION:BLOB``; ``seed`` (default :data:`profiles.DEFAULT_SEED`) seeds every check;
    ``check_timeout`` seconds per check (default :data:`profiles.CHECK_TIMEOUT`; 0: none);
    ``exitfirst`` stops after the first failure; ``show_progress`` draws a progress bar on a
    terminal (:mod:`plga.progress`). Ctrl-C or SIGTERM stops the run with
    :class:`ConformanceInterrupted`, whose ``report`` holds the checks that finished.
    ``jobs``: run the checks in that many worker processes (:mod:`.workers`; ``fn`` must then
    be an ``--impl`` string, or None for the default); the implementation is then never imported
    into this process, and one that ends its process fails the check it was running. Without
    ``jobs`` everything runs in this process.
    """
    import os

    t_start = time.perf_counter()
    if jobs is not None and fn is not None and not isinstance(fn, str):
        raise InputError("check_kernel(jobs=…) imports the implementation in worker processes: name it as "
                         "'module:object' (or None for the default), or leave jobs out to run it in this process")
    adapter = None
    if jobs is None:
        adapter = resolve_impl(fn) if isinstance(fn, str) or fn is None else as_adapter(fn)
        refuse_baseline(adapter)
    prof = profiles.selected(profile)
    run_seed = profiles.DEFAULT_SEED if seed is None else int(seed)
    expected = dict(expected_failures or {})
    results = []
    pairs: list[tuple[str, str]] = []
    old = os.environ.get("PLGA_REPRODUCE")
    if reproduce:
        os.environ["PLGA_REPRODUCE"] = reproduce
    # the report's implementation name and header (from the workers once one has loaded it)
    who: dict[str, Any] = {} if adapter is None else {"name": adapter.name, "header": _header(adapter)}

    def select(declared: list[tuple[str, str]]) -> list[tuple[str, str]]:
        pairs[:] = _select(declared, checks, groups, dtypes, keyword)
        return pairs

    def reason(name: str, dtype: str) -> str | None:
        return expected.get(f"{name}[{dtype}]", expected.get(name))

    try:
        with watch_user_interrupt(), memo.scope():  # the truth and the baselines of a case, computed once a run
            if adapter is None:
                assert jobs is not None
                _run_in_workers(fn, jobs, select, reason, results, who, prof, shrink, run_seed, check_timeout, exitfirst,
                                show_progress)
            else:
                for name, dtype in progress(select(check_ids(adapter)), "plga conformance", show=show_progress):
                    stop_if_interrupted()

                    def stuck(message: str) -> None:
                        print(f"plga conformance: FAIL — {adapter.name} does NOT conform: {message}; the run was ended "
                              f"(profile {prof}, seed {run_seed})")

                    result = _run_one(adapter, name, dtype, prof, shrink, run_seed, check_timeout, reason(name, dtype), stuck)
                    results.append(result)
                    if exitfirst and result.status in ("failed", "error"):
                        break
    except KeyboardInterrupt as exc:
        if not user_interrupted() or not who:
            raise  # (a stop while the workers load the implementation: nothing to report yet)
        report = ConformanceReport(who["name"], prof, results, who["header"], run_seed, time.perf_counter() - t_start,
                                   len(pairs))
        raise ConformanceInterrupted(report) from exc
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
    return ConformanceReport(who["name"], prof, results, who["header"], run_seed, time.perf_counter() - t_start)


def _run_in_workers(spec: str | None, jobs: int, select: Callable[[list[tuple[str, str]]], list[tuple[str, str]]],
                    reason: Callable[[str, str], str | None], results: list[CheckResult], who: dict[str, Any],
                    profile: str, shrink: bool, seed: int, timeout: float | None, exitfirst: bool, show_progress: bool) -> None:
    """The checks of ``spec`` that ``select`` keeps, in ``jobs`` worker processes (:mod:`.workers`):
    ``who`` gets the implementation's name and report header once a worker has loaded it,
    ``results`` the finished checks in selection order (so a stop leaves what finished)."""
    from .workers import Pool

    with Pool(spec, jobs, profile=profile, seed=seed, shrink=shrink, timeout=timeout) as pool:
        loaded = pool.load()
        who.update(name=loaded.name, header=loaded.header)
        pairs = select(loaded.checks)
        finished: dict[int, CheckResult] = {}

        def on_result(index: int, fields: dict[str, Any]) -> bool:
            finished[index] = CheckResult(**{**fields, "group": CHECKS[fields["check"]].group})
            results[:] = [finished[i] for i in sorted(finished)]
            return not (exitfirst and finished[index].status in ("failed", "error"))

        pool.run([(name, dtype, reason(name, dtype)) for name, dtype in pairs], on_result, show_progress)


def _header(adapter: Adapter) -> dict[str, str]:
    """What the report's head says of the implementation and the run's PLGA_* settings."""
    return {**adapter.describe(), "PLGA_* settings": ", ".join(f"{k}={v}" for k, v in plga_environment().items()) or "(none)"}


def refuse_baseline(adapter: Adapter) -> None:
    """The suite's eager baseline cannot be the implementation under test: every check would
    compare it with itself (its own error is the baseline error)."""
    from .adapters import EagerAdapter

    impl = getattr(adapter, "obj", adapter)
    # its subclasses too (the baseline under another name), except the suite's own negative
    # controls, which subclass it to plant one bug each
    own_control = type(impl).__module__.startswith(("plga.conformance.controls", "plga.conformance.broken"))
    if isinstance(impl, EagerAdapter) and not own_control:
        raise ImplementationLoadError("plga.conformance.eager is the suite's own baseline: judged against itself it "
                                      "would pass by construction; test an independent implementation")


def _timeout_hint() -> str:
    """What else than a hang can run a check past its limit, and the remedies."""
    hint = " (a hang, or a machine too slow or too busy for the limit: --check-timeout raises it"
    if not waits_are_passive():
        hint += ("; OpenMP threads here spin while they wait, which a busy machine turns into stalls: "
                 f"{WAIT_POLICY_ENV}=PASSIVE before torch loads, as plga conformance sets it")
    return hint + ")"


def failure(message: str, xfail_reason: str | None) -> tuple[str, str]:
    """The (status, message) of a check that failed: ``xfailed`` with the reason appended where it
    was expected to fail."""
    return ("xfailed", message + f"\n(expected: {xfail_reason})") if xfail_reason else ("failed", message)


def _run_one(adapter: Adapter, name: str, dtype: str, profile: str, shrink: bool, seed: int, timeout: float | None,
             xfail_reason: str | None, on_stuck: Callable[[str], None]) -> CheckResult:
    """One check; every way foreign code can leave it (exception, exit, timeout) is its result.

    The guard turns every escape from the implementation's code into a failure
    (:class:`~plga.conformance.guard.KernelCrash`, an ``AssertionError``); any other exception
    was raised by the suite's own code: status ``error``, with its traceback, never a failure of
    the implementation (nor an expected one).
    """
    import os

    ctx = Context(adapter, dtype, profile, f"{name}[{dtype}]", shrink, os.environ.get("PLGA_REPRODUCE"), seed)
    t0 = time.perf_counter()
    try:
        run_check(adapter, name, dtype, profile=profile, shrink=shrink, seed=seed, timeout=timeout, context=ctx,
                  on_stuck=on_stuck)
        status, msg = ("xpassed", f"expected to fail ({xfail_reason}) but passed") if xfail_reason else ("passed", "")
    except SkipCheck as exc:
        status, msg = "skipped", str(exc)
    except CheckTimeout as exc:
        status, msg = "failed", f"timed out: {exc} — the implementation did not return in time{_timeout_hint()}"
    except AssertionError as exc:
        notes = "\n".join(getattr(exc, "__notes__", []))
        status, msg = "failed", f"{exc}\n{notes}".strip()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt) and user_interrupted():
            raise
        # the exception first (the report's one-line reason), then its whole traceback
        status, msg = "error", traceback.format_exception_only(exc)[0].strip() + "\n" + "".join(traceback.format_exception(exc)).rstrip()
    if status == "failed":
        status, msg = failure(msg, xfail_reason)
    return CheckResult(name, dtype, CHECKS[name].group, status, msg, time.perf_counter() - t0, ctx.cases,
                       {a: sorted(v, key=_region_key) for a, v in ctx.coverage.items()}, list(ctx.left_out))


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
        for name, dtype in _select(check_ids(adapter), None, groups):
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


def quick_summary(impl: Any = None, *, profile: str = "quick", groups: Iterable[str] | None = None,
                  seed: int | None = None, check_timeout: float | None = None, jobs: int | None = None) -> list[dict[str, Any]]:
    """Run a profile (in this process, or in ``jobs`` workers: :func:`check_kernel`); one row per
    check group, for ``plga verify``.

    Row keys: ``suite``, ``group``, ``implementation``, ``passed``, ``failed``, ``errors`` (the
    suite raised), ``skipped``, ``seconds``, ``ok`` (checks ran, none failed, none raised),
    ``failures`` and ``raised`` (ids of the failed checks, of those where the suite raised). ``impl`` defaults to
    the switch (``$PLGA_IMPL``, else the project's kernels).
    """
    report = check_kernel(impl, profile=profile, groups=groups, shrink=False, seed=seed, check_timeout=check_timeout,
                          jobs=jobs)
    rows = []
    for group in GROUPS:
        rs = [r for r in report.results if r.group == group]
        if not rs:
            continue

        def count(status: str, rs: list[CheckResult] = rs) -> int:
            return sum(r.status == status for r in rs)

        rows.append({
            "suite": f"kernel conformance ({profile}, seed {report.seed})",
            "group": group,
            "implementation": report.implementation,
            "passed": count("passed") + count("xpassed"),
            "failed": count("failed"),
            "errors": count("error"),
            "skipped": count("skipped") + count("xfailed"),
            "seconds": round(sum(r.seconds for r in rs), 2),
            "ok": count("failed") + count("error") == 0 and count("passed") + count("xpassed") > 0,
            "failures": [r.id for r in rs if r.status == "failed"],
            "raised": [r.id for r in rs if r.status == "error"],
        })
    return rows


__all__ = ["STATUSES", "VERDICTS", "CheckResult", "ConformanceInterrupted", "ConformanceReport", "check_kernel", "failure", "keyword_matcher", "parametrize_with_checks",
           "quick_summary"]
