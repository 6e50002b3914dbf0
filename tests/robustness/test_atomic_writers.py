"""The project's real writers are atomic: a crash or a kill mid-write keeps the old file.

tests/robustness/test_atomic.py kills a generic writer of :func:`plga.atomic.atomic_path`; here
the actual output paths are exercised: the CLI's ``.npz`` (forward / generate vectors), the
safetensors export of the reference, and ``PLDRModel.save_collapsed`` (collapsed checkpoints),
with the serializer made to crash halfway, and a child process killed while it writes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from plga.reference.checkpoint import random_params, save_safetensors
from plga.reference.config import PLDRConfig

CONFIG = PLDRConfig.from_name("tiny")


class _Crash(RuntimeError):
    pass


def _no_temporaries(folder):
    return [p.name for p in folder.rglob("*") if p.name.endswith(".tmp")]


def test_cli_npz_output_survives_a_crash(tmp_path, monkeypatch):
    from plga import cli

    out = tmp_path / "logits.npz"
    np.savez(out, logits=np.arange(3.0))
    def crash(fh, **arrays):
        fh.write(b"PK\x03\x04partial")
        raise _Crash("crash")

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(_Crash):
        cli._save_npz(str(out), {"logits": np.zeros(5)})
    monkeypatch.undo()
    with np.load(out) as z:
        np.testing.assert_array_equal(z["logits"], np.arange(3.0))
    assert _no_temporaries(tmp_path) == []


def test_safetensors_export_survives_a_crash(tmp_path, monkeypatch):
    pytest.importorskip("safetensors")
    import safetensors.numpy

    params = random_params(CONFIG, seed=0)
    save_safetensors(params, CONFIG, tmp_path)
    before = (tmp_path / "model.safetensors").read_bytes()

    def crash(tensors, filename, metadata=None):
        with open(filename, "wb") as fh:
            fh.write(before[: len(before) // 2])
        raise _Crash("crash")

    monkeypatch.setattr(safetensors.numpy, "save_file", crash)
    changed = {k: v + 1 for k, v in params.items()}
    with pytest.raises(_Crash):
        save_safetensors(changed, CONFIG, tmp_path)
    assert (tmp_path / "model.safetensors").read_bytes() == before
    assert _no_temporaries(tmp_path) == []


def test_collapsed_checkpoint_survives_a_crash(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    import safetensors.numpy

    from plga.kernels import PLDRModel

    model = PLDRModel.from_reference(random_params(CONFIG, seed=1), CONFIG)
    collapsed = model.collapse_from(torch.tensor([[3, 4, 5, 6]]))
    collapsed.save_collapsed(tmp_path)
    before = (tmp_path / "model.safetensors").read_bytes()

    def crash(tensors, filename, metadata=None):
        with open(filename, "wb") as fh:
            fh.write(b"\x00" * 100)
        raise _Crash("crash")

    monkeypatch.setattr(safetensors.numpy, "save_file", crash)
    with pytest.raises(_Crash):
        model.collapse_from(torch.tensor([[7, 8, 9]])).save_collapsed(tmp_path)
    monkeypatch.undo()
    assert (tmp_path / "model.safetensors").read_bytes() == before
    reloaded = PLDRModel.from_pretrained(tmp_path)
    assert reloaded.collapsed
    assert _no_temporaries(tmp_path) == []


SLOW_SAVE = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import safetensors.numpy
    from plga.reference.checkpoint import random_params, save_safetensors
    from plga.reference.config import PLDRConfig

    def slow(tensors, filename, metadata=None):  # the real format, written slowly
        data = safetensors.numpy.save(tensors, metadata=metadata)
        with open(filename, "wb") as fh:
            for i in range(0, len(data), 512):
                fh.write(data[i:i + 512]); fh.flush(); time.sleep(0.01)

    safetensors.numpy.save_file = slow
    config = PLDRConfig.from_name("tiny")
    save_safetensors({k: v + 1 for k, v in random_params(config, 0).items()}, config, sys.argv[1])
    """
)


def test_a_killed_safetensors_export_leaves_the_old_checkpoint(tmp_path):
    pytest.importorskip("safetensors")
    from plga.reference.checkpoint import load_checkpoint

    params = random_params(CONFIG, seed=0)
    save_safetensors(params, CONFIG, tmp_path)
    before = (tmp_path / "model.safetensors").read_bytes()
    proc = subprocess.Popen([sys.executable, "-c", SLOW_SAVE, str(tmp_path)])
    deadline = time.monotonic() + 60
    while not [p for p in tmp_path.iterdir() if p.name.startswith(".model.safetensors.") and p.stat().st_size > 2048]:
        assert time.monotonic() < deadline and proc.poll() is None, "the writer never started"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (tmp_path / "model.safetensors").read_bytes() == before
    loaded, _ = load_checkpoint(tmp_path)
    np.testing.assert_array_equal(loaded["final_layer.bias"], params["final_layer.bias"])
