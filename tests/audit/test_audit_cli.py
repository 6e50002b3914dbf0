"""The ``plga audit`` command line: inputs, errors, defaults, and every message it prints.

The command runs through ``plga.cli.main`` (the console script): a user's mistake and a
refused ``--collapse`` are one line on stderr with exit 2.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from plga.audit import AuditSizes, run_audit
from plga.audit.model import builtin_prompt_ids, random_params, read_prompt_file
from plga.audit.runner import QUICK
from plga.cli import main
from plga.datafiles import data_dir
from plga.reference.checkpoint import save_safetensors
from plga.reference.config import PLDRConfig

DATA = data_dir()
TOKENIZER = DATA / "upstream" / "refinedweb-tokenizer-pldrllm-kvg-cache-paper.model"
TINY = PLDRConfig(num_layers=1, d_model=16, num_heads=2, dff=24, A_dff=12, num_reslayerA=1, num_denseA=2, input_vocab_size=40, max_seq_len=64)
FAST = ["--quick", "--decode-steps", "2", "--order-tokens", "2", "--no-progress", "--no-plots"]


def _run(argv):
    return main(["audit", *argv])


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt")
    save_safetensors(random_params(TINY, seed=5), TINY, folder)
    return folder


def test_default_run_without_arguments(tmp_path, capsys):
    """The built-in random model: verdict first, the last line names the verdict and the outputs."""
    assert _run(["--out", str(tmp_path), *FAST]) == 0
    rec = json.loads((tmp_path / "audit.json").read_text())
    assert rec["model"]["source"] == "builtin" and rec["prompts"]["texts"] is None
    assert len(rec["prompts"]["token_ids"]) == 8 and rec["prompts"]["eos_id"] == 3
    assert next(iter(rec)) == "verdict" and rec["verdict"]["verdict"] == "not collapsed"
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("verdict: not collapsed: G_LM changes with the input: G deviation ")
    assert "order parameter" in lines[0] and "ε_G" in lines[0] and "spread across prompts" in lines[0]
    assert lines[-1].startswith(f"not collapsed; wrote {tmp_path}/: audit.json, summary.md, audit_raw.npz")
    assert "collapsed checkpoint" not in lines[-1]
    summary = (tmp_path / "summary.md").read_text()
    assert summary.splitlines()[2].startswith("**Verdict: not collapsed.**")


def test_quick_sizes_and_published_defaults(tiny_ckpt, tmp_path):
    """Without --quick the sizes are the published protocol; --quick is the smoke-test size."""
    assert AuditSizes().n_order_tokens == 64 and AuditSizes().n_decode_steps == 48
    assert AuditSizes().n_decode_prompts == 4 and AuditSizes().n_order_prompts == 5
    assert _run([str(tiny_ckpt), "--out", str(tmp_path), "--quick", "--no-progress", "--no-plots"]) == 0
    rec = json.loads((tmp_path / "audit.json").read_text())
    assert rec["sizes"]["n_order_tokens"] == QUICK.n_order_tokens < 64
    assert rec["sizes"]["n_decode_steps"] == QUICK.n_decode_steps < 48
    assert all(d["T"] == QUICK.n_decode_steps for d in rec["summary"]["decode"])


def test_collapse_on_a_random_model_is_refused(tiny_ckpt, tmp_path, capsys):
    """One line with the verdict and the measured G spread, exit 2; the audit itself is written."""
    assert _run([str(tiny_ckpt), "--out", str(tmp_path), *FAST, "--collapse"]) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert "\n" not in err and err.startswith("plga audit: error: refusing --collapse: the model is not collapsed")
    out = cap.out.splitlines()
    assert out[0].startswith("verdict: not collapsed") and out[1].startswith("scope: measured on "), "the verdict still comes first"
    rec = json.loads((tmp_path / "audit.json").read_text())
    spread = rec["verdict"]["figures"]["G_spread"]
    assert f"spread across prompts {spread:.3g}" in err and "--force" in err
    assert rec["collapse"]["refused"] is True and not (tmp_path / "collapsed").exists()


def test_collapse_with_force_records_the_approximation_error(tiny_ckpt, tmp_path, capsys):
    assert _run([str(tiny_ckpt), "--out", str(tmp_path), *FAST, "--collapse", "--force"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("not collapsed; wrote") and f"collapsed checkpoint (forced) {tmp_path / 'collapsed'}/" in last
    report = json.loads((tmp_path / "collapsed" / "collapse_report.json").read_text())
    rec = json.loads((tmp_path / "audit.json").read_text())
    assert report["forced"] is True and report["verdict"] == "not collapsed"
    err = report["approximation_error"]
    c = rec["summary"]["collapse"]
    assert err["G_spread_rel_max"] == c["G_spread_rel"]["max"] > 1e-3
    assert err["max_dlogit_vs_model"] == c["vs_model"]["max_dlogit"] > 0
    assert err["argmax_agreement_vs_model"] == c["vs_model"]["argmax_agree_frac"] < 1
    assert "File check" in (tmp_path / "summary.md").read_text()


def test_refusal_is_its_own_error_type(tiny_ckpt, tmp_path):
    from plga.errors import CollapseRefusedError

    with pytest.raises(CollapseRefusedError, match="refusing --collapse"):
        run_audit(checkpoint=str(tiny_ckpt), out_dir=tmp_path, collapse=True, sizes=QUICK, progress=False, plots=False)


def test_force_without_collapse_is_a_usage_error(tiny_ckpt, tmp_path, capsys):
    assert _run([str(tiny_ckpt), "--out", str(tmp_path), *FAST, "--force"]) == 2
    assert "--force only applies to --collapse" in capsys.readouterr().err


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
    assert _run([*argv, "--out", str(tmp_path), "--quick", "--no-progress"]) == 2
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
