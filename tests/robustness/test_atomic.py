"""Outputs are atomic: a writer killed mid-write leaves the old file (or none), never a part."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from plga.atomic import atomic_path

WRITER = textwrap.dedent(
    """
    import sys, time
    from plga.atomic import atomic_path
    with atomic_path(sys.argv[1]) as tmp:
        with open(tmp, "wb") as fh:
            for _ in range(10_000):
                fh.write(b"x" * 4096)
                fh.flush()
                time.sleep(0.001)
    """
)


def test_a_killed_writer_leaves_the_old_file(tmp_path):
    target = tmp_path / "report.json"
    target.write_text('{"old": true}')
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)])
    deadline = time.monotonic() + 60
    while not any(p.name.startswith(".report.json.") for p in tmp_path.iterdir()):
        assert time.monotonic() < deadline and proc.poll() is None, "the writer never started"
        time.sleep(0.01)
    time.sleep(0.2)  # let it write a few hundred kilobytes
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert target.read_text() == '{"old": true}'


def test_a_killed_first_writer_leaves_no_file(tmp_path):
    target = tmp_path / "vectors.safetensors"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)])
    deadline = time.monotonic() + 60
    while not list(tmp_path.iterdir()):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.01)
    time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not target.exists()


def test_an_exception_removes_the_temporary_and_keeps_the_old_file(tmp_path):
    target = tmp_path / "out.npz"
    np.savez(target, a=np.arange(3))
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_bytes(b"partial")
        raise RuntimeError("crash mid-write")
    with np.load(target) as z:
        np.testing.assert_array_equal(z["a"], np.arange(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npz"]


def test_a_non_atomic_writer_would_be_caught(tmp_path):
    """Negative control: writing in place and killing the writer does leave a partial file."""
    target = tmp_path / "report.json"
    target.write_text('{"old": true}')
    in_place = WRITER.replace("with atomic_path(sys.argv[1]) as tmp:", "if True:\n    tmp = sys.argv[1]")
    proc = subprocess.Popen([sys.executable, "-c", in_place, str(target)])
    deadline = time.monotonic() + 60
    while target.read_text(errors="replace").startswith('{"old"'):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert target.read_text(errors="replace") != '{"old": true}'


def test_outputs_get_the_usual_permissions(tmp_path):
    """A temporary file is private (0600); the published output must not stay so."""
    target = tmp_path / "out.json"
    with atomic_path(target) as tmp:
        tmp.write_text("{}")
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask
