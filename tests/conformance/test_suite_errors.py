"""The suite's own exceptions are no verdict: status ``error``, verdict ERROR (exit 3).

Before, any exception that reached the runner was a failure of the implementation: a bug of the
suite made a correct kernel FAIL, and the self-test counted a wrong control as caught when the
suite raised on it. The guard turns every escape from the implementation's code into a
``KernelCrash`` (a failure); everything else is the suite's.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import sys
from typing import Any

import pytest

from plga.conformance import Adapter, check_kernel, checks
from plga.conformance import strategies as sh
from plga.conformance.cli import conformance_main
from plga.conformance.runner import VERDICTS
from plga.kernels import plga_attention

CHAIN = ["operator_chain"]


def _suite_bug(monkeypatch: Any) -> None:
    """The chain check's boundary cases raise IndexError: a planted bug in the suite's code."""

    def broken(seed: int = 0) -> list[Any]:
        return [][seed]

    monkeypatch.setattr(sh, "boundary_chain_cases", broken)


def test_a_suite_bug_is_an_error_not_a_failure_of_the_kernel(monkeypatch):
    # negative control: the check passes the project's kernels without the planted bug
    assert check_kernel("default", checks=CHAIN, dtypes=["float32"], profile="quick").verdict == "PASS"
    _suite_bug(monkeypatch)
    report = check_kernel("default", checks=CHAIN, dtypes=["float32"], profile="quick")
    assert report.verdict == "ERROR" and report.exit_code == VERDICTS["ERROR"] == 3, report.summary()
    (r,) = report.results
    assert r.status == "error" and not report.failures and report.failed_checks() == set()
    first, second = r.message.splitlines()[:2]
    assert first.startswith("IndexError") and second.startswith("Traceback") and "a bug in plga" in r.message
    text = report.summary()
    assert text.splitlines()[0].startswith("plga conformance: ERROR") and "a bug in plga" in text.splitlines()[0]
    assert "--- operator_chain[float32]: the suite raised (a bug in plga) ---" in text
    assert "ERROR    operator_chain[float32] (" in text and "— IndexError" in text
    assert report.counts()["error"] == 1 and report.to_json()["results"][0]["status"] == "error"


def test_an_exception_of_the_kernel_is_still_a_failure():
    def raises_index_error(q: Any, k: Any, v: Any, G: Any, **kw: Any) -> Any:
        return [][1]

    report = check_kernel(raises_index_error, checks=["attention_unmasked"], dtypes=["float32"], profile="quick", shrink=False)
    assert report.verdict == "FAIL" and not report.errors, report.summary()
    assert "attention raised IndexError" in report.failures[0].message


def test_a_failure_elsewhere_stays_final_and_an_expected_failure_hides_no_error(monkeypatch):
    _suite_bug(monkeypatch)

    class OffByOne(Adapter):
        """Attention off by one everywhere; its chain check errors (the planted suite bug)."""

        name = "attention off by one"
        dtypes = ("float32",)
        capabilities = frozenset({"attention", "operator_chain"})

        def attention(self, q: Any, k: Any, v: Any, G: Any, **kw: Any) -> Any:
            return plga_attention(q, k, v, G, **kw) + 1.0

        def operator_chain(self, q_rot: Any, w: Any) -> Any:
            raise AssertionError("never called: the planted bug raises before")

    report = check_kernel(OffByOne(), checks=[*CHAIN, "attention_unmasked"], profile="quick", shrink=False)
    assert report.verdict == "FAIL" and [r.status for r in report.results] == ["failed", "error"], report.summary()
    report = check_kernel("default", checks=[*CHAIN, "attention_unmasked"], dtypes=["float32"], profile="quick")
    assert report.verdict == "ERROR" and {r.status for r in report.results} == {"passed", "error"}
    report = check_kernel("default", checks=CHAIN, dtypes=["float32"], profile="quick",
                          expected_failures={"operator_chain": "known"})
    assert [r.status for r in report.results] == ["error"] and report.verdict == "ERROR"


def test_the_command_exits_3_and_its_json_names_the_error(monkeypatch):
    _suite_bug(monkeypatch)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = conformance_main(["--impl", "default", "-k", "operator_chain and float32", "--json", "--no-progress",
                                 "--jobs", "0"])  # in this process, where the bug is planted
    data = json.loads(out.getvalue())
    assert code == 3 and data["verdict"] == "ERROR" and data["exit_code"] == 3 and data["counts"]["error"] == 1


def test_the_self_test_does_not_count_a_suite_error_as_a_catch(monkeypatch):
    from plga.conformance import selftest
    from plga.conformance.controls import CONTROLS

    def raising(ctx: Any) -> None:
        raise IndexError("planted")

    for name, check in list(checks.CHECKS.items()):
        monkeypatch.setitem(checks.CHECKS, name, dataclasses.replace(check, fn=raising))
    # a wrong control whose name no other contains (the keyword selects by substring)
    wrong = next(n for n, c in CONTROLS.items() if not c.correct and sum(n in m for m in CONTROLS) == 1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = selftest.run_self_test(profile="quick", keyword=wrong)
    text = out.getvalue()
    assert code == 1 and "caught 0/1 wrong kernels" in text.splitlines()[0], text
    assert "the suite raised on 1 (a bug in plga)" in text.splitlines()[0] and " ERR " in text


def test_verify_reports_a_suite_error_as_error(monkeypatch, capsys, theorem_part_passes):
    from plga.conformance.verify import add_verify_arguments, verify_main

    _suite_bug(monkeypatch)
    from plga.conformance import runner

    real = runner.quick_summary
    monkeypatch.setattr(runner, "quick_summary", lambda adapter, groups=None, **kw: real(adapter, groups=["chain"]))
    parser = argparse.ArgumentParser()
    add_verify_arguments(parser)
    assert verify_main(parser.parse_args(["--jobs", "0"])) == 3  # in this process, where the bug is planted
    out = capsys.readouterr().out.splitlines()
    chain = next(line for line in out if line.startswith("conformance: chain"))
    assert " ERROR " in chain and "raised in the suite" in chain and out[0].startswith("plga verify: ERROR")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes need Python 3.11")
def test_under_pytest_a_suite_error_says_whose_it_is(monkeypatch):
    from plga.conformance.adapter import resolve_impl

    _suite_bug(monkeypatch)
    with pytest.raises(IndexError) as info:
        checks.run_check(resolve_impl("default"), "operator_chain", "float32", profile="quick")
    assert any("a bug in plga, not a failure of the implementation" in n for n in getattr(info.value, "__notes__", []))
