"""The suite's two pytest routes, end to end in a fresh pytest process: the shipped suite
(``python -m pytest --pyargs plga.conformance.suite``, the plugin's ``--plga-impl`` and
``--plga-xfails-file``) and ``parametrize_with_checks`` in a user's own test file. Each route
passes a correct implementation and fails a wrong one; the shipped suite keeps its own
results per module (the ``plga_suite_memo`` fixture), as ``plga conformance`` keeps them for a run.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

WRONG = "plga.conformance.broken:GBiasDropped"  # drops b_a from G_LM: caught by operator_chain


def _pytest(args: list[str], cwd: Path, extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A fresh ``python -m pytest`` in ``cwd`` (quick profile, no cache folder written)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLGA_", "PYTEST_"))}
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--plga-profile", "quick", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def _shipped(tmp_path: Path, *args: str, extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    return _pytest(["--pyargs", "plga.conformance.suite", *args], tmp_path, extra_path)


def test_the_shipped_suite_under_pytest_passes_a_correct_kernel_and_fails_a_wrong_one(tmp_path):
    select = ["-k", "operator_chain and float32"]
    good = _shipped(tmp_path, *select)
    assert good.returncode == 0, good.stdout[-3000:] + good.stderr[-3000:]
    assert "1 passed" in good.stdout and "plga conformance: implementation" in good.stdout  # the report header
    bad = _shipped(tmp_path, *select, "--plga-impl", WRONG)
    assert bad.returncode == 1, bad.stdout[-3000:] + bad.stderr[-3000:]
    assert "FAILED test_chain.py::test_chain[operator_chain-float32]" in bad.stdout
    xfails = tmp_path / "xfails.txt"
    xfails.write_text("test_chain[operator_chain-float32]  # b_a dropped on purpose\n")
    expected = _shipped(tmp_path, *select, "--plga-impl", WRONG, "--plga-xfails-file", str(xfails))
    assert expected.returncode == 0, expected.stdout[-3000:] + expected.stderr[-3000:]
    assert "1 xfailed" in expected.stdout


def test_parametrize_with_checks_in_a_users_test_file(tmp_path):
    (tmp_path / "test_mine.py").write_text(textwrap.dedent(f"""
        from plga.conformance import parametrize_with_checks
        from plga.conformance.adapter import resolve_impl

        @parametrize_with_checks([resolve_impl("default"), resolve_impl({WRONG!r})], groups=["chain"])
        def test_plga(impl, check):
            check(impl)
    """))
    run = _pytest(["test_mine.py", "-k", "operator_chain and float32", "-rA"], tmp_path)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert "1 failed, 1 passed" in run.stdout
    failed = [line for line in run.stdout.splitlines() if line.startswith("FAILED")]
    passed = [line for line in run.stdout.splitlines() if line.startswith("PASSED")]
    assert len(failed) == 1 and "GBiasDropped" in failed[0] and "operator_chain[float32]" in failed[0], failed
    assert len(passed) == 1 and "plga.kernels" in passed[0], passed


PROBE = '''
import json, os
import pytest
from plga.conformance import memo

RECORDS = []

@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    before = None if memo._store is None else len(memo._store)
    try:
        return (yield)
    finally:
        after = None if memo._store is None else len(memo._store)
        RECORDS.append({"test": item.nodeid, "before": before, "after": after})

def pytest_sessionfinish(session):
    RECORDS.append({"test": "session end", "before": None if memo._store is None else len(memo._store), "after": None})
    with open(os.environ["MEMO_PROBE_OUT"], "w") as fh:
        json.dump(RECORDS, fh)
'''


def test_the_shipped_suite_keeps_its_own_results_per_module(tmp_path, monkeypatch):
    """Inside one module of the suite the memo persists from check to check (the second check
    starts with what the first kept); the next module starts a fresh one; nothing outlives the
    modules. (Without the fixture every ``before`` is None: checked by hand on removing it.)"""
    (tmp_path / "memo_probe.py").write_text(PROBE)
    out = tmp_path / "records.json"
    monkeypatch.setenv("MEMO_PROBE_OUT", str(out))
    # test_chain.py runs before test_decoder.py (collection order)
    run = _shipped(tmp_path, "-p", "memo_probe", "-k", "(operator_chain and float64) or forward_golden", extra_path=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    records = json.loads(out.read_text())
    chain = [r for r in records if "test_chain" in r["test"]]
    golden = [r for r in records if "forward_golden" in r["test"]]
    assert len(chain) == 1 and len(golden) >= 3, records  # float64, float32, bfloat16 (float16 where declared)
    assert chain[0]["before"] == 0  # a scope of its own
    assert golden[0]["before"] == 0  # the chain module's scope ended, a new one began
    assert golden[0]["after"] > 0  # the golden case's truth and baselines were kept
    for prev, nxt in itertools.pairwise(golden):
        assert nxt["before"] == prev["after"]  # kept from one check to the next
    assert records[-1] == {"test": "session end", "before": None, "after": None}
