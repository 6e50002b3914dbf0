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
        (["generate", "{ckpt}", "--tokens", "{tokens}", "--out", "{out}", "--max-new-tokens", "2", "--mode", "collapsed"], "needs constant operators"),
        (["generate", "{ckpt}", "--tokens", "{tokens}", "--out", "{out}", "--max-new-tokens", "2", "--mode", "kv", "--constant-g", "{g}"], "use --mode collapsed"),
        (["generate", "{collapsed}", "--tokens", "{tokens}", "--out", "{out}", "--max-new-tokens", "2", "--mode", "kvg"], "is collapsed"),
        (["forward", "{ckpt}", "--tokens", "{tokens}", "--out", "{out}", "--dtype", "float32"], "apply to --backend torch"),
        (["generate", "{ckpt}", "--tokens", "{tokens}", "--out", "{out}", "--max-new-tokens", "2", "--compile"], "with --backend torch"),
        (["generate", "{ckpt}", "--tokens", "{tokens}", "--out", "{out}", "--max-new-tokens", "2", "--compile",
          "--backend", "torch", "--mode", "nocache"], "--mode kv, kvg or collapsed"),
        (["forward", "{ckpt}", "--tokens", "{tokens}", "--out", "{tokens}/x.npz"], "cannot write --out"),
    ],
)
def test_errors_are_one_line_and_nonzero(tmp_path, argv, message):
    pytest.importorskip("safetensors")
    from plga.audit.collapsed import write_collapsed
    from plga.reference.checkpoint import random_params, save_safetensors
    from plga.reference.config import PLDRConfig

    config = PLDRConfig.from_name("tiny")
    params = random_params(config)
    save_safetensors(params, config, tmp_path / "model")
    gs = np.stack([np.eye(config.depth)[None].repeat(config.num_heads, 0)] * config.num_layers)
    np.savez(tmp_path / "g.npz", G_LM=gs)
    write_collapsed(params, config, gs, tmp_path / "collapsed")
    (tmp_path / "tokens.json").write_text("[[1, 2, 3]]")
    (tmp_path / "bad.json").write_text("[[1, 2")
    (tmp_path / "ragged.json").write_text("[[1, 2], [3]]")
    names = {"tokens": tmp_path / "tokens.json", "bad_tokens": tmp_path / "bad.json", "ragged": tmp_path / "ragged.json",
             "out": tmp_path / "o.npz", "ckpt": tmp_path / "model", "g": tmp_path / "g.npz", "collapsed": tmp_path / "collapsed"}
    result = run(*(a.format(**names) for a in argv))
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "o.npz").exists()


@pytest.mark.parametrize(("mode", "compiled"), [("nocache", False), ("kvg", False), ("kv", True)])
def test_torch_backend_reproduces_the_golden_greedy_tokens(tmp_path, golden, mode, compiled, monkeypatch):
    """``--compile``: the captured steps (one compiled graph per step) give the same tokens."""
    pytest.importorskip("torch")
    from plga.kernels import capture

    calls = []
    step = capture.CapturedSteps.__call__
    monkeypatch.setattr(capture.CapturedSteps, "__call__", lambda self, *a: calls.append(1) or step(self, *a))
    _, _, z = golden
    ckpt = str(shared_file("golden", "small_seed0.pth"))
    np.save(tmp_path / "prompt.npy", z["gen.prompt"])
    out = tmp_path / "g.npz"
    argv = ["generate", ckpt, "--tokens", str(tmp_path / "prompt.npy"), "--max-new-tokens", "10",
            "--mode", mode, "--out", str(out), "--max-seq-len", "64", "--backend", "torch"]
    assert main(argv + (["--compile", "--no-progress"] if compiled else [])) == 0
    assert len(calls) == (9 if compiled else 0)  # every step after the first token, captured
    with np.load(out) as g:
        np.testing.assert_array_equal(g["tokens"][0], z[f"gen.{mode}.tokens"])
        np.testing.assert_allclose(g["step_logits"][0], z[f"gen.{mode}.step_logits"], rtol=0, atol=1e-12 * np.abs(z[f"gen.{mode}.step_logits"]).max())


def test_a_collapsed_checkpoint_generates_on_both_backends(tmp_path):
    """The folder ``plga audit --collapse`` / ``save_collapsed`` writes is a generate input
    (mode collapsed by default), and both backends give the reference's tokens."""
    pytest.importorskip("safetensors")
    from plga.audit.collapsed import write_collapsed
    from plga.reference import decoder
    from plga.reference.checkpoint import is_learner_key, random_params
    from plga.reference.config import PLDRConfig

    config = PLDRConfig.from_name("tiny")
    params = random_params(config, seed=3)
    gs = np.random.default_rng(0).normal(size=(config.num_layers, config.num_heads, config.depth, config.depth))
    write_collapsed(params, config, gs, tmp_path / "collapsed")  # float32 weights: G stored in float32
    kept = {k: v for k, v in params.items() if not is_learner_key(k)}
    prompt = np.array([[4, 9, 1, 30]])
    np.save(tmp_path / "p.npy", prompt)
    want = decoder.generate(decoder.to_backend(kept), config, prompt, 5, "collapsed",
                            constant_g=list(gs.astype(np.float32).astype(np.float64)))
    for backend in ("reference", "torch"):
        out = tmp_path / f"{backend}.npz"
        argv = ["generate", str(tmp_path / "collapsed"), "--tokens", str(tmp_path / "p.npy"), "--max-new-tokens", "5",
                "--out", str(out), "--backend", backend] + (["--dtype", "float64"] if backend == "torch" else [])
        assert main(argv) == 0
        with np.load(out) as z:
            np.testing.assert_array_equal(z["tokens"], want.tokens, err_msg=backend)


def test_sampling_without_a_seed_says_which_seed_it_used(tmp_path):
    from plga.reference.checkpoint import random_params, save_safetensors
    from plga.reference.config import PLDRConfig

    config = PLDRConfig.from_name("tiny")
    save_safetensors(random_params(config), config, tmp_path / "m")
    (tmp_path / "t.json").write_text("[[1, 2, 3]]")
    base = ["generate", str(tmp_path / "m"), "--tokens", str(tmp_path / "t.json"), "--max-new-tokens", "4", "--temperature", "0.9"]
    a = run(*base, "--out", str(tmp_path / "a.npz"))
    b = run(*base, "--out", str(tmp_path / "b.npz"), "--seed", "0")
    assert a.returncode == 0 and b.returncode == 0 and "default seed" not in b.stderr
    bad = run(*base, "--out", str(tmp_path / "c.npz"), "--top-p", "2")  # a failing run: one line, no note
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "sampled with the default seed 0" in a.stderr and "pass --seed" in a.stderr
    with np.load(tmp_path / "a.npz") as za, np.load(tmp_path / "b.npz") as zb:
        np.testing.assert_array_equal(za["tokens"], zb["tokens"])


def test_compiled_sampling_says_it_compiles_and_draws_the_reference_tokens(tmp_path):
    """``--compile`` with seeded sampling: a note on stderr before the (slow) first compile, and
    the captured steps draw the reference backend's tokens for the same seed."""
    pytest.importorskip("torch")
    from plga.reference.checkpoint import random_params, save_safetensors
    from plga.reference.config import PLDRConfig

    config = PLDRConfig.from_name("tiny")
    save_safetensors(random_params(config, seed=2), config, tmp_path / "m")
    (tmp_path / "t.json").write_text("[[5, 2, 9, 14]]")
    base = ["generate", str(tmp_path / "m"), "--tokens", str(tmp_path / "t.json"), "--max-new-tokens", "6",
            "--temperature", "0.8", "--top-k", "5", "--seed", "3"]
    compiled = run(*base, "--out", str(tmp_path / "c.npz"), "--backend", "torch", "--compile")
    reference = run(*base, "--out", str(tmp_path / "r.npz"))
    assert compiled.returncode == 0 and reference.returncode == 0, compiled.stderr
    assert "compiling the decoding step" in compiled.stderr and "compiling" not in reference.stderr
    with np.load(tmp_path / "c.npz") as zc, np.load(tmp_path / "r.npz") as zr:
        np.testing.assert_array_equal(zc["tokens"], zr["tokens"])


def test_a_bug_of_ours_is_a_traceback_not_a_usage_line(monkeypatch, capsys):
    """Only plga.errors.PlgaError becomes one line with exit 2: a ValueError escaping from our
    own code is a bug and must keep its traceback (negative control of the error mapper)."""
    import plga.cli as cli
    from plga.errors import InputError

    def buggy(args):
        raise ValueError("an internal invariant broke")

    def user_mistake(args):
        raise InputError("the user's mistake")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["check-sdpa"].set_defaults(func=buggy)
    with pytest.raises(ValueError, match="internal invariant"):
        main(["check-sdpa"])
    parser._subparsers._group_actions[0].choices["check-sdpa"].set_defaults(func=user_mistake)
    assert main(["check-sdpa"]) == 2
    assert capsys.readouterr().err.strip() == "plga check-sdpa: error: the user's mistake"


_FLOOD = """
import sys
from plga.cli import run_command
def flood(args):
    for i in range(100000):
        print("line", i)
    return 0
sys.exit(run_command("flood", flood, None))
"""


def test_a_reader_that_leaves_early_is_not_a_traceback():
    """``plga … | head``: the reader closes the pipe; the command stops quietly with 141 (128 +
    SIGPIPE), not a BrokenPipeError traceback. A broken pipe that is not standard output's stays
    a bug of ours (the error mapper re-raises it: second half)."""
    proc = subprocess.Popen([sys.executable, "-c", _FLOOD], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().startswith(b"line 0")
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141 and b"Traceback" not in err, err.decode()

    import plga.cli as cli

    def internal_pipe(args):
        raise BrokenPipeError("a worker's pipe")

    with pytest.raises(BrokenPipeError, match="worker"):
        cli.run_command("x", internal_pipe, None)
