"""``plga conformance``: the pytest driver, the report header, vectors, and the docs' numbers."""

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from plga.conformance import profiles
from plga.conformance.cli import add_conformance_arguments, conformance_main, pytest_args
from plga.conformance.vectors import check_vector

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _args(*argv):
    return add_conformance_arguments(argparse.ArgumentParser()).parse_args(list(argv))


def test_pytest_command_line():
    cmd = pytest_args(_args("--impl", "reference", "--group", "cache", "-k", "float32", "-x", "--", "-v"))
    assert cmd[:2] == ["--pyargs", "plga.conformance.suite"]
    assert cmd[cmd.index("--plga-impl") + 1] == "reference"
    assert cmd[cmd.index("-k") + 1] == "(test_cache) and (float32)"
    assert cmd[-2:] == ["-x", "-v"]


def _run(*argv):
    env = {**os.environ, "PLGA_PROFILE": "quick"}
    return subprocess.run([sys.executable, "-m", "plga.conformance", *argv], capture_output=True, text=True, env=env,
                          timeout=300)


def test_end_to_end_exit_codes_and_header():
    ok = _run("--impl", "reference", "-k", "sentinel_g and float32")
    assert ok.returncode == 0, ok.stdout[-3000:]
    assert "plga conformance: implementation plga.reference" in ok.stdout
    assert "PLGA_* settings" in ok.stdout and "PLGA_PROFILE" in ok.stdout
    bad = _run("--impl", "plga.conformance.broken:transposed_g", "-k", "sentinel_g and float32")
    assert bad.returncode == 1, bad.stdout[-3000:]
    assert "closest mix-up: Q Gᵀ Kᵀ (G transposed)" in bad.stdout
    assert "PLGA_REPRODUCE=" in bad.stdout


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    out = tmp_path_factory.mktemp("vectors")
    assert conformance_main(["--write-vectors", str(out)]) == 0
    return out


def test_vectors_are_complete_and_self_consistent(vectors):
    index = json.loads((vectors / "index.json").read_text())
    assert index["format"] == "plga-conformance-vectors" and index["format_version"] == 1
    entries = [c for c in index["cases"] if "skipped" not in c]
    assert {c["case"] for c in entries} >= {"sdpa_identity", "sentinel_g", "finite_mask_empty_rows", "chain_small"}
    for c in entries:
        meta = json.loads((vectors / c["json"]).read_text())
        blob = (vectors / meta["tensors"]).read_bytes()
        assert hashlib.sha256(blob).hexdigest() == meta["sha256"]
        for key in ("spec_version", "dtype", "tolerance", "seed", "outputs", "expected_source"):
            assert key in meta
        if meta["dtype"] == "bfloat16":
            q = load_file(str(vectors / meta["tensors"]))["q" if meta["kind"] == "attention" else "q_rot"]
            assert np.array_equal(torch.from_numpy(q).bfloat16().float().numpy(), q)  # exactly representable
    assert not list(vectors.glob(".*.tmp"))  # atomic writes leave no temporaries


def test_kernels_reproduce_the_attention_vectors(vectors):
    import plga.kernels as K

    for js in sorted(vectors.glob("*.json")):
        meta = json.loads(js.read_text())
        if meta.get("kind") != "attention":
            continue
        t = load_file(str(vectors / meta["tensors"]))
        dt = getattr(torch, meta["dtype"])
        q, k, v, g = (torch.from_numpy(t[n]).to(dt) if n in t else None for n in ("q", "k", "v", "G"))
        pad = torch.from_numpy(t["key_padding_mask"]) if "key_padding_mask" in t else None
        inp = meta["inputs"]
        out = K.plga_attention(q, k, v, g, causal=inp["causal"], key_padding_mask=pad,
                               scale=inp["scale"], finite_mask=inp["finite_mask"])
        check_vector(js, {"expected": out.double().numpy()})


def test_docs_state_the_code_numbers():
    text = (DOCS / "conformance.md").read_text()
    assert f"| `quick` | {profiles.PROFILES['quick']} " in text
    assert f"| `ci` | {profiles.PROFILES['ci']}," in text
    assert f"| `thorough` | {profiles.PROFILES['thorough']} " in text
    from plga.conformance.broken import BROKEN

    for name, b in BROKEN.items():
        assert f"| `{name}` |" in text and f"`{b.expected_check}` |" in text
    from plga.conformance.checks import CHECKS

    for name in CHECKS:
        assert f"`{name}`" in text, f"docs/conformance.md does not list the check {name}"
    assert (DOCS / "vectors.md").exists()


def test_xfails_file_needs_reasons(tmp_path):
    from plga.conformance.pytest_plugin import _read_xfails

    good = tmp_path / "xfails.txt"
    good.write_text("# comment\ntest_chain[operator_chain-bfloat16]  # bf16 chain not tuned yet\n\n")
    assert _read_xfails(str(good)) == [("test_chain[operator_chain-bfloat16]", "bf16 chain not tuned yet")]
    bad = tmp_path / "bad.txt"
    bad.write_text("test_chain\n")
    with pytest.raises(pytest.UsageError, match="needs a reason"):
        _read_xfails(str(bad))
