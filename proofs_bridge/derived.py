"""Run the derived check of a statement: Hypothesis draws, float64 and mpmath evaluation.

Each example is evaluated twice on the same inputs: in float64 with error bounds (equalities
pass within the derived tolerance, inequalities within the same slack) and in mpmath at
``dps`` digits (equalities within 10^-(dps-10) of the magnitudes; strict inequalities
strictly). The example passes only if both do. Properties in the style of array-api-tests:
one property per declaration, inputs from a strategy, a readable counterexample on failure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import mpmath
import numpy as np
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from plga.draws import seed_alone_decides

from .backends import F64, Exact, FinsetV, NonReal, lift
from .elaborate import Outside
from .evaluate import Evaluator, Impl
from .statement import Statement


class CheckFailed(AssertionError):
    """The conclusion was false on an example (message: the counterexample)."""


@dataclass
class Outcome:
    status: str  # pass | fail | error
    examples: int = 0
    worst_error: float = 0.0
    message: str = ""
    rejected: int = 0
    details: dict[str, Any] = field(default_factory=dict)


def describe(env: dict[str, Any]) -> str:
    parts = []
    for k, v in env.items():
        if isinstance(v, np.ndarray):
            parts.append(f"{k}={np.array2string(v, precision=6, separator=',')}")
        elif isinstance(v, FinsetV):
            parts.append(f"{k}={sorted(v.elems)}")
        else:
            parts.append(f"{k}={v}")
    return ", ".join(parts)


def evaluate_example(stmt: Statement, impls: dict[str, Impl], env: dict[str, Any], dps: int) -> tuple[bool, float, str]:
    """Evaluate hypotheses (mpmath) and conclusion (float64 and mpmath) on one raw input.

    Returns (conclusion holds, worst float64 residual, description of the failure).
    Calls ``assume(False)`` when a hypothesis fails (filter hypotheses, or a construction that
    rounding defeated).
    """
    with mpmath.workdps(dps):
        mp_ev = Evaluator(stmt.typer, Exact("mp", dps), impls)
        mp_env = lift(env, mp_ev.b)
        for h in stmt.hyps:
            if not mp_ev.truth(h.node, mp_env):
                assume(False)
        mp_ev.records.clear()
        ok_mp = mp_ev.truth(stmt.concl, mp_env)
    f_ev = Evaluator(stmt.typer, F64(dps), impls)
    ok_64 = f_ev.truth(stmt.concl, lift(env, f_ev.b))
    worst = max((r.residual for r in f_ev.records if r.ok and math.isfinite(r.residual)), default=0.0)
    msg = ""
    if not (ok_mp and ok_64):
        bad = [r for r in (mp_ev.records if not ok_mp else f_ev.records) if not r.ok]
        which = "mpmath" if not ok_mp else "float64"
        first = bad[0] if bad else None
        detail = f"{first.text}: residual {first.residual:.3g} > tol {first.tol:.3g}" if first else ""
        msg = f"{which}: {detail}; counterexample {describe(env)}"
    return ok_mp and ok_64, worst, msg


def run_derived(stmt: Statement, impls: dict[str, Impl], max_examples: int = 25, dps: int = 50,
                derandomize: bool = True, shrink: bool = False) -> Outcome:
    """Check ``stmt`` on ``max_examples`` drawn inputs; never raises."""
    state = {"examples": 0, "worst": 0.0, "failure": None}

    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])

    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=derandomize,
              phases=phases, suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
              print_blob=False)
    @given(data=st.data())
    def prop(data: Any) -> None:
        env = stmt.draw(data.draw)
        try:
            ok, worst, msg = evaluate_example(stmt, impls, env, dps)
        except NonReal as exc:
            ok, worst, msg = False, 0.0, f"{exc}; counterexample {describe(env)}"
        state["examples"] += 1
        state["worst"] = max(state["worst"], worst)
        if not ok:
            state["failure"] = msg
            raise CheckFailed(msg)

    try:
        with seed_alone_decides():
            prop()
    except CheckFailed as exc:
        return Outcome("fail", state["examples"], state["worst"], str(exc))
    except Unsatisfiable:
        return Outcome("error", state["examples"], state["worst"],
                       "could not draw inputs satisfying the hypotheses")
    except Outside as exc:
        return Outcome("error", state["examples"], state["worst"], f"outside the fragment at run time: {exc}")
    except (ArithmeticError, ValueError, TypeError, KeyError, IndexError) as exc:
        return Outcome("error", state["examples"], state["worst"], f"{type(exc).__name__}: {exc}")
    if state["examples"] == 0:
        return Outcome("error", 0, 0.0, "no example satisfied the hypotheses")
    return Outcome("pass", state["examples"], state["worst"], "")
