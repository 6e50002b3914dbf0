"""The interleaved cases of a group (real case processes): one step of each case in turn, the
others waiting; a failing or hanging case reported as an error while the rest finish."""

from __future__ import annotations

import sys

from plga.bench.interleave import run_group
from plga.bench.plan import plan_cases

PYTHON_PASS = [sys.executable, "-c", "pass"]


def _command(name: str, argv: list[str], runs: int) -> dict:
    return {"kind": "command", "name": name, "id": name, "argv": argv, "runs": runs, "warmup": 0, "threads": 1}


def _tiny_prefill(runs: int) -> dict:
    (spec,) = [c for c in plan_cases(["tiny"], ["prefill"], quick=True, runs=runs, threads=1)
               if c["kind"] == "prefill" and c["impl"] == "fused" and c["batch"] == 1 and c["seq"] == 32]
    return spec


def _owners(results: list[dict]) -> list[str]:
    """Which case held the permission, in time order."""
    grants = [(t, r["spec"]["id"]) for r in results for t in r["granted_s"]]
    return [who for _, who in sorted(grants)]


def test_cases_of_a_group_take_their_steps_in_turn():
    a, b = _tiny_prefill(runs=2), _command("audit/x", PYTHON_PASS, runs=2)
    results = run_group([a, b], 300, 1)
    assert [r["status"] for r in results] == ["ok", "ok"]
    assert len(results[0]["times_s"]) == 2 and len(results[1]["times_s"]) == 2
    A, B = a["id"], b["id"]
    # set-up, run 1, run 2 of each in turn; then the prefill's finish (a command has none)
    assert _owners(results) == [A, B, A, B, A, B, A]
    # negative control: the same cases run one after the other are not interleaved
    apart = run_group([a], 300, 1) + run_group([b], 300, 1)
    assert _owners(apart) == [A, A, A, A, B, B, B]


def test_a_failing_case_is_an_error_row_and_the_others_finish():
    bad = dict(_tiny_prefill(runs=2), config="no-such-config", id="bad")
    good = _command("good", PYTHON_PASS, runs=3)
    seen = []
    results = run_group([bad, good], 300, 1, done=lambda r: seen.append(r["spec"]["id"]))
    assert results[0]["status"] == "error" and "no-such-config" in results[0]["reason"]
    assert results[1]["status"] == "ok" and len(results[1]["times_s"]) == 3
    assert seen == ["bad", "good"]


def test_a_step_past_the_timeout_is_killed_and_the_others_finish():
    hang = _command("hang", [sys.executable, "-c", "import time; time.sleep(30)"], runs=2)
    good = _command("good", PYTHON_PASS, runs=2)
    results = run_group([hang, good], 8, 1)
    assert results[0]["status"] == "error" and results[0]["reason"] == "timed out after 8 s"
    assert results[1]["status"] == "ok" and len(results[1]["times_s"]) == 2
