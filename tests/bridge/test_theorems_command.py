"""`plga theorems` and `python -m plga.proofs_bridge theorems` are one code path (issue #15)."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from plga.errors import InputError
from plga.proofs_bridge.runner import run_all

ONE = "headRow_eq_sdpa"  # a fast check


@pytest.mark.parametrize("argv", [["-m", "plga.cli", "theorems"], ["-m", "plga.proofs_bridge", "theorems"]])
def test_unknown_theorem_is_named_in_one_line_exit_2(argv):
    out = subprocess.run([sys.executable, *argv, "--no-progress", "noSuchTheorem"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "noSuchTheorem" in lines[0]
    assert out.stdout == ""


@pytest.mark.parametrize("argv", [["-m", "plga.cli", "theorems"], ["-m", "plga.proofs_bridge", "theorems"]])
def test_both_entry_points_check_a_named_theorem(argv):
    out = subprocess.run([sys.executable, *argv, "--no-progress", "--json", ONE],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f'"name": "{ONE}"' in out.stdout and '"kind": "concrete-decoder"' in out.stdout


def test_run_all_refuses_unknown_names():
    with pytest.raises(InputError, match="noSuchTheorem"):
        run_all(names=["noSuchTheorem", ONE])


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal_and_off_on_request(monkeypatch):
    monkeypatch.delenv("PLGA_NO_PROGRESS", raising=False)
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    run_all(names=[ONE], show_progress=True)
    assert "theorem checks" in tty.getvalue()
    quiet = _Tty()
    monkeypatch.setattr(sys, "stderr", quiet)
    run_all(names=[ONE], show_progress=False)
    monkeypatch.setenv("PLGA_NO_PROGRESS", "1")
    run_all(names=[ONE], show_progress=True)
    assert quiet.getvalue() == ""
