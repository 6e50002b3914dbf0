"""The ``plga audit`` command line: inputs (checkpoints, prompt files, tokenizer), errors, defaults."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from plga.audit import AuditSizes, run_audit
from plga.audit.cli import add_audit_arguments, audit_main
from plga.audit.model import builtin_prompt_ids, random_params, read_prompt_file
from plga.datafiles import data_dir
from plga.reference.checkpoint import save_safetensors
from plga.reference.config import PLDRConfig

DATA = data_dir()
TOKENIZER = DATA / "upstream" / "refinedweb-tokenizer-pldrllm-kvg-cache-paper.model"
TINY = PLDRConfig(num_layers=1, d_model=16, num_heads=2, dff=24, A_dff=12, num_reslayerA=1, num_denseA=2, input_vocab_size=40, max_seq_len=64)
FAST = ["--decode-steps", "2", "--order-tokens", "2", "--no-progress", "--no-plots"]


def _run(argv):
    parser = add_audit_arguments(argparse.ArgumentParser())
    return audit_main(parser.parse_args(argv))


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt")
    save_safetensors(random_params(TINY, seed=5), TINY, folder)
    return folder


def test_default_run_without_arguments(tmp_path, capsys):
    assert _run(["--out", str(tmp_path), *FAST]) == 0
    rec = json.loads((tmp_path / "audit.json").read_text())
    assert rec["model"]["source"] == "builtin" and rec["prompts"]["texts"] is None
    assert len(rec["prompts"]["token_ids"]) == 8
    assert "audit written" in capsys.readouterr().out


def test_checkpoint_folder_and_prompt_files(tiny_ckpt, tmp_path):
    ids = builtin_prompt_ids(TINY.input_vocab_size, n=3)
    (tmp_path / "p.json").write_text(json.dumps(ids))
    assert _run([str(tiny_ckpt), "--prompts", str(tmp_path / "p.json"), "--out", str(tmp_path / "a"), *FAST]) == 0
    rec = json.loads((tmp_path / "a" / "audit.json").read_text())
    assert rec["prompts"]["token_ids"] == ids
    assert set(rec["model"]["sha256"]) == {"model.safetensors", "config.json"}
    width = max(map(len, ids))
    np.save(tmp_path / "p.npy", np.array([p + [0] * (width - len(p)) for p in ids]))
    assert read_prompt_file(tmp_path / "p.npy") == (ids, None)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["/nonexistent/ckpt.pth"], "does not exist"),
        (["--prompts", "/nonexistent.json"], "does not exist"),
        (["--dtype", "float32", "--backend", "reference"], "float64 only"),
        (["--decode-steps", "0"], "n_decode_steps"),
        (["--operators", "/nonexistent.npz"], "does not exist"),
    ],
)
def test_errors_are_one_line(argv, needle, tmp_path, capsys):
    assert _run([*argv, "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("plga audit: error:") and needle in err and "\n" not in err


def test_text_prompts_need_a_tokenizer(tmp_path):
    (tmp_path / "p.txt").write_text("hello world\n")
    with pytest.raises(ValueError, match="tokenizer"):
        run_audit(prompts=str(tmp_path / "p.txt"), out_dir=tmp_path, progress=False)


def test_bad_token_ids_rejected(tmp_path):
    with pytest.raises(ValueError, match="outside"):
        run_audit(checkpoint=(random_params(TINY), TINY), prompts=[[1, 2, 99]], out_dir=tmp_path, progress=False)


@pytest.mark.skipif(not TOKENIZER.is_file(), reason=f"tokenizer absent: {TOKENIZER} (PLGA_SHARED_DATA points at a folder without it)")
def test_default_english_prompts_with_the_real_tokenizer(tmp_path):
    sizes = AuditSizes(n_decode_prompts=1, n_decode_steps=2, n_order_prompts=1, n_order_tokens=2, o3_prompts=1, o4_contexts=1, o4_cand_len=1)
    rec = run_audit(tokenizer=str(TOKENIZER), out_dir=tmp_path, sizes=sizes, progress=False, plots=False)
    assert len(rec["prompts"]["texts"]) == 8
    ids = rec["prompts"]["token_ids"]
    assert all(3 not in p and 0 not in p for p in ids), "no EOS, no padding in encoded prompts"
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor()
    sp.Load(str(TOKENIZER))
    assert ids[0] == sp.EncodeAsIds(rec["prompts"]["texts"][0])
