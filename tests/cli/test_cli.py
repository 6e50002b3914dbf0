"""The ``plga`` console script: outputs match the reference, errors are one line, exit ≠ 0."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from plga.cli import main

from ..conftest import shared_file


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "plga.cli", *argv], capture_output=True, text=True, timeout=300)


def test_version_and_check_sdpa():
    out = run("--version")
    assert out.returncode == 0 and out.stdout.startswith("plga ")
    out = run("check-sdpa")
    assert out.returncode == 0, out.stderr
    assert "float64 max difference 0.0" in out.stdout and "PASS" in out.stdout


def test_forward_and_generate_reproduce_the_golden_vectors(tmp_path, golden):
    _, _, z = golden
    ckpt = str(shared_file("golden", "small_seed0.pth"))
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(z["tokens"].tolist()))
    assert main(["forward", ckpt, "--tokens", str(tokens), "--out", str(tmp_path / "f.npz"), "--deductive", "--max-seq-len", "64"]) == 0
    with np.load(tmp_path / "f.npz") as f:
        np.testing.assert_allclose(f["logits"], z["logits"], rtol=0, atol=1e-12 * np.abs(z["logits"]).max())
        np.testing.assert_allclose(f["layer1.G_LM"], z["layer1.G_LM"], rtol=0, atol=1e-12 * np.abs(z["layer1.G_LM"]).max())
        assert {"layer0.A", "layer0.A_P", "layer0.scores"} <= set(f.files)
    np.save(tmp_path / "prompt.npy", z["gen.prompt"])
    for mode in ("nocache", "kv", "kvg"):
        out = tmp_path / f"g_{mode}.npz"
        assert main(["generate", ckpt, "--tokens", str(tmp_path / "prompt.npy"), "--max-new-tokens", "10", "--mode", mode, "--out", str(out), "--max-seq-len", "64"]) == 0
        with np.load(out) as g:
            np.testing.assert_array_equal(g["tokens"][0], z[f"gen.{mode}.tokens"])
            assert g["step_logits"].shape == (1, 10, 101)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["forward", "/nonexistent.pth", "--tokens", "{tokens}", "--out", "{out}"], "does not exist"),
        (["forward", "{ckpt}", "--tokens", "{bad_tokens}", "--out", "{out}"], "neither .npy nor valid JSON"),
        (["forward", "{ckpt}", "--tokens", "{ragged}", "--out", "{out}"], "different lengths"),
        (["generate", "{ckpt}", "--tokens", "{tokens}", "--out", "{out}", "--max-new-tokens", "2", "--mode", "constant"], "needs --constant-g"),
    ],
)
def test_errors_are_one_line_and_nonzero(tmp_path, argv, message):
    pytest.importorskip("safetensors")
    from plga.reference.checkpoint import random_params, save_safetensors
    from plga.reference.config import PLDRConfig

    config = PLDRConfig.from_name("tiny")
    save_safetensors(random_params(config), config, tmp_path / "model")
    (tmp_path / "tokens.json").write_text("[[1, 2, 3]]")
    (tmp_path / "bad.json").write_text("[[1, 2")
    (tmp_path / "ragged.json").write_text("[[1, 2], [3]]")
    names = {"tokens": tmp_path / "tokens.json", "bad_tokens": tmp_path / "bad.json", "ragged": tmp_path / "ragged.json",
             "out": tmp_path / "o.npz", "ckpt": tmp_path / "model"}
    result = run(*(a.format(**names) for a in argv))
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "o.npz").exists()


@pytest.mark.parametrize("mode", ["nocache", "kvg"])
def test_torch_backend_reproduces_the_golden_greedy_tokens(tmp_path, golden, mode):
    pytest.importorskip("torch")
    _, _, z = golden
    ckpt = str(shared_file("golden", "small_seed0.pth"))
    np.save(tmp_path / "prompt.npy", z["gen.prompt"])
    out = tmp_path / "g.npz"
    argv = ["generate", ckpt, "--tokens", str(tmp_path / "prompt.npy"), "--max-new-tokens", "10",
            "--mode", mode, "--out", str(out), "--max-seq-len", "64", "--backend", "torch"]
    assert main(argv) == 0
    with np.load(out) as g:
        np.testing.assert_array_equal(g["tokens"][0], z[f"gen.{mode}.tokens"])
        np.testing.assert_allclose(g["step_logits"][0], z[f"gen.{mode}.step_logits"], rtol=0, atol=1e-12 * np.abs(z[f"gen.{mode}.step_logits"]).max())
