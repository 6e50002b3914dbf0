"""plga.openmp: the conformance entry points make the OpenMP that torch loads wait passively
(spin count 0), so a busy machine cannot stall a multi-threaded check into a time-out.

The evidence is libgomp's own: with ``OMP_DISPLAY_ENV=VERBOSE`` it prints its settings when
torch loads it, ``GOMP_SPINCOUNT`` among them (300000 by default, 0 when passive). Each case
runs in a fresh interpreter, as the setting is read once per process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")


def _run(args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PLGA_", "PYTEST_", "OMP_", "GOMP_"))}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**base, "OMP_DISPLAY_ENV": "VERBOSE", **(env or {})})


def _spin_count(run: subprocess.CompletedProcess[str]) -> int:
    """libgomp's spin count as it printed it at load (skips where torch's OpenMP is not libgomp)."""
    found = re.findall(r"GOMP_SPINCOUNT = '(\d+)'", run.stderr + run.stdout)
    if not found:
        pytest.skip("torch's OpenMP runtime does not print GOMP_SPINCOUNT (not libgomp)")
    return int(found[-1])


def _python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-c", code], env=env)


def test_passive_waits_before_torch_sets_spin_count_zero():
    run = _python("from plga.openmp import passive_waits; print(passive_waits()); import torch; torch.ones(2) + 1")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[0] == "True"
    assert _spin_count(run) == 0


def test_negative_control_torch_alone_spins():
    # what the check above would see if passive_waits did nothing: libgomp's default spin count
    run = _python("import torch; torch.ones(2) + 1")
    assert _spin_count(run) > 0


def test_after_torch_it_is_too_late_and_says_so():
    run = _python("import os, torch; from plga.openmp import passive_waits; "
                  "print(passive_waits(), os.environ.get('OMP_WAIT_POLICY'))")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-2:] == ["False", "None"]  # not shown as in effect
    assert _spin_count(run) > 0


@pytest.mark.parametrize(("policy", "passive"), [("active", False), ("ACTIVE", False), ("passive", True)])
def test_a_policy_in_the_environment_is_kept(policy, passive):
    run = _python("import os; from plga.openmp import passive_waits; "
                  "print(passive_waits(), os.environ['OMP_WAIT_POLICY']); import torch",
                  env={"OMP_WAIT_POLICY": policy})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-2:] == [str(passive), policy]
    assert (_spin_count(run) == 0) is passive


def test_conformance_command_waits_passively():
    # the check selection is refused after the implementation (and torch) loaded
    run = _run([sys.executable, "-m", "plga.cli", "conformance", "-k", "no_such_check_anywhere"])
    assert run.returncode == 2 and "no check matches" in run.stderr, run.stderr[-2000:]
    assert _spin_count(run) == 0


def test_verify_command_waits_passively(tmp_path):
    (tmp_path / "loads_torch_then_fails.py").write_text("import torch\nraise ImportError('on purpose')\n")
    run = _run([sys.executable, "-m", "plga.cli", "verify", "--impl", "loads_torch_then_fails:impl"], cwd=tmp_path,
               env={"PYTHONPATH": str(tmp_path)})
    assert run.returncode == 2 and "on purpose" in run.stderr, run.stderr[-2000:]
    assert _spin_count(run) == 0


def test_shipped_suite_under_pytest_waits_passively(tmp_path):
    run = _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs", "plga.conformance.suite",
                "-k", "operator_chain and float32", "--plga-profile", "quick"], cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert _spin_count(run) == 0


def test_this_test_run_waits_passively():
    # tests/conftest.py set it before any test module imported torch (unset: it came too late)
    policy = os.environ.get("OMP_WAIT_POLICY")
    if policy is not None and policy.strip().upper() != "PASSIVE":
        pytest.skip(f"the environment chose OMP_WAIT_POLICY={policy}")
    assert policy is not None
