"""``plga conformance --self-test``: the suite judged on its own controls.

Runs :func:`plga.conformance.check_kernel` on every control of
:data:`plga.conformance.controls.CONTROLS` and prints, per control, the verdict and the
checks that failed, then ``caught W/W wrong kernels, F false positives among C correct
ones``. A wrong control is *caught* when the verdict is FAIL; a correct one is a *false
positive* when it is not PASS. A control on which the suite's own code raised (status
``error``) counts as neither: it is listed with its traceback. Exit status 0 only with
everything caught, no false positive and no error of the suite.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from ..progress import progress
from .controls import CONTROLS, Control
from .runner import ConformanceReport, check_kernel, keyword_matcher


@dataclasses.dataclass
class ControlOutcome:
    control: Control
    report: ConformanceReport

    @property
    def ok(self) -> bool:
        """Caught (wrong control) or accepted (correct control), and the suite raised nowhere (a
        wrong control "caught" by the suite's own exception is not caught)."""
        if self.report.errors:
            return False
        return self.report.verdict == "PASS" if self.control.correct else self.report.verdict == "FAIL"

    def row(self) -> dict[str, Any]:
        c = self.control
        return {"control": c.name, "correct": c.correct, "verdict": self.report.verdict, "ok": self.ok,
                "failed_checks": sorted(self.report.failed_checks()), "suite_errors": [r.id for r in self.report.errors], "seconds": round(self.report.seconds, 2),
                "description": c.description}


def run_controls(*, profile: str = "quick", seed: int | None = None, check_timeout: float | None = None,
                 names: list[str] | None = None, show_progress: bool = False) -> list[ControlOutcome]:
    """Every (or the named) control through the suite; a wrong one stops at its first failure."""
    out = []
    chosen = [c for n, c in CONTROLS.items() if names is None or n in names]
    for control in progress(chosen, "plga conformance --self-test", show=show_progress):
        report = check_kernel(control.make(), profile=profile, shrink=False, seed=seed, check_timeout=check_timeout,
                              exitfirst=not control.correct)
        out.append(ControlOutcome(control, report))
    return out


def run_self_test(*, profile: str = "quick", seed: int | None = None, check_timeout: float | None = None,
                  as_json: bool = False, keyword: str | None = None, show_progress: bool = False) -> int:
    """Print the self-test and return its exit status (0: all caught, no false positive)."""
    t0 = time.perf_counter()
    names = None
    if keyword:
        match = keyword_matcher(keyword)
        names = [n for n in CONTROLS if match(n)]
    outcomes = run_controls(profile=profile, seed=seed, check_timeout=check_timeout, names=names, show_progress=show_progress)
    wrong = [o for o in outcomes if not o.control.correct]
    right = [o for o in outcomes if o.control.correct]
    caught = sum(o.ok for o in wrong)
    false_pos = sum(not o.ok and not o.report.errors for o in right)
    raised = sum(bool(o.report.errors) for o in outcomes)
    ok = caught == len(wrong) and false_pos == 0 and not raised
    line = (f"plga conformance --self-test: {'PASS' if ok else 'FAIL'} — caught {caught}/{len(wrong)} wrong kernels, "
            f"{false_pos} false positives among {len(right)} correct ones"
            + (f", the suite raised on {raised} (a bug in plga)" if raised else "") + f" (profile {profile}, "
            f"seed {outcomes[0].report.seed if outcomes else seed}, {time.perf_counter() - t0:.1f} s)")
    if as_json:
        print(json.dumps({"ok": ok, "caught": caught, "wrong": len(wrong), "false_positives": false_pos, "suite_errors": raised,
                          "correct": len(right), "profile": profile, "controls": [o.row() for o in outcomes]}, indent=2,
                         ensure_ascii=False))
        return 0 if ok else 1
    print(line)
    for o in outcomes:
        kind = "correct" if o.control.correct else "wrong"
        mark = "ok  " if o.ok else "ERR " if o.report.errors else "MISS" if not o.control.correct else "FP  "
        failed = ", ".join(sorted(o.report.failed_checks())) or "-"
        print(f"  {mark} {kind:7s} {o.control.name:<30} {o.report.verdict:<16} failed: {failed}")
    for o in outcomes:
        for r in o.report.errors:
            print(f"\n--- {o.control.name}: the suite raised in {r.id} (a bug in plga) ---\n{r.message}")
        if o.control.correct and not o.ok and not o.report.errors:
            print(f"\n--- false positive {o.control.name} ---")
            for r in o.report.failures:
                print(f"{r.id}: {r.message}")
    print(line)
    return 0 if ok else 1


__all__ = ["ControlOutcome", "run_controls", "run_self_test"]
