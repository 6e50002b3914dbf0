"""``plga audit --collapse`` writes the project's one collapsed format (:mod:`plga.reference.checkpoint`).

The audit-written folder loads with ``plga.kernels.PLDRModel.from_pretrained`` and decodes
exactly like kvg decoding of the original model with the same constant G; the reference
reader (:func:`plga.reference.checkpoint.load_collapsed`) reads the same folder; the audit's
writer (no torch) writes the same bytes as ``PLDRModel.collapse(G).save_collapsed``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from plga.audit import AuditSizes, run_audit
from plga.audit import backend as audit_backend
from plga.audit.collapsed import write_collapsed
from plga.audit.model import random_params
from plga.reference import decoder as dec
from plga.reference.checkpoint import (
    COLLAPSED_KEY,
    FILE_METADATA,
    CheckpointError,
    collapsed_shapes,
    is_collapsed,
    load_checkpoint,
    load_collapsed,
    save_safetensors,
)
from plga.reference.config import PLDRConfig

CONFIG = PLDRConfig(num_layers=2, d_model=32, num_heads=2, dff=48, A_dff=16, num_reslayerA=2, num_denseA=2, input_vocab_size=64, max_seq_len=64)
SIZES = AuditSizes(n_decode_prompts=2, n_decode_steps=4, n_order_prompts=1, n_order_tokens=2, n_pool_rows=4,
                   n_pairs=5, o3_prompts=1, o4_contexts=1, o4_cand_len=1)
PROMPTS = [[5, 9, 17, 21, 30], [7, 8, 9, 10, 11, 12, 13], [40, 2, 33]]


WRITER = "plga.reference.checkpoint.save_safetensors"


def _has_torch() -> bool:
    return audit_backend.torch_available()


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """A random (uncollapsed) model audited with --collapse: (params, record, G [L, H, d, d], folder)."""
    out = tmp_path_factory.mktemp("audit")
    params = random_params(CONFIG, seed=21)
    rec = run_audit(checkpoint=(params, CONFIG), prompts=PROMPTS, out_dir=out, collapse=True, force=True, sizes=SIZES, progress=False, plots=False)
    with np.load(out / "audit_raw.npz") as z:
        g = z["collapse_G"]
    return params, rec, g, out / "collapsed"


def test_folder_has_the_kernels_format(audited):
    from safetensors import safe_open

    _, rec, g, folder = audited
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == ["collapse_report.json", "config.json", "model.safetensors"]
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg == {**CONFIG.to_upstream(), "collapsed": True}
    with safe_open(str(folder / "model.safetensors"), "np") as f:
        assert f.metadata() == FILE_METADATA == {"format": "pt"}
        keys = set(f.keys())
        assert keys == set(collapsed_shapes(CONFIG))
        stored = f.get_tensor(COLLAPSED_KEY)
    assert stored.dtype == np.float32 and stored.shape == (2, 2, 16, 16)
    assert np.array_equal(stored.astype(np.float64), g), "the stored G is the audited constant operator"
    assert not any(".reslayerAs." in k or ".plgatt_layer." in k or ".mha1.layernorm1." in k for k in keys)
    assert is_collapsed(folder) and is_collapsed(folder / "model.safetensors")
    assert rec["collapse"]["G_key"] == COLLAPSED_KEY and rec["collapse"]["writer"] == WRITER


def test_kernels_load_the_audit_checkpoint_and_decode_like_kvg(audited):
    """PLDRModel.from_pretrained(audit folder) decodes exactly as the full model given that G
    (constant operators: the cached modes coincide in mode collapsed)."""
    torch = pytest.importorskip("torch")
    from plga.kernels import PLDRModel

    params, _, g, folder = audited
    for dtype in (torch.float64, torch.float32):
        collapsed = PLDRModel.from_pretrained(folder, dtype=dtype)
        assert collapsed.collapsed and collapsed.config == CONFIG
        assert np.array_equal(collapsed.decoder.collapsed_G.double().numpy(), g)
        model = PLDRModel.from_reference(params, CONFIG, dtype=dtype)
        for p in PROMPTS:
            prompt = torch.tensor([p])
            a = collapsed.generate(prompt, 6, "collapsed", return_step_logits=True)
            b = model.generate(prompt, 6, "collapsed", G=g.astype(np.float32), return_step_logits=True)
            assert torch.equal(a.tokens, b.tokens)
            assert torch.equal(a.step_logits, b.step_logits)
            s = collapsed.generate(prompt, 4, "collapsed", temperature=1.0, top_k=8, seed=3)
            t = model.generate(prompt, 4, "collapsed", G=g.astype(np.float32), temperature=1.0, top_k=8, seed=3)
            assert torch.equal(s.tokens, t.tokens)


def test_reference_reads_the_audit_checkpoint(audited):
    """The reference reader gives a constant-G model equal to kvg decoding with G."""
    params, _, g, folder = audited
    cparams, config, cg = load_collapsed(folder)
    assert config == CONFIG
    assert set(cparams) == set(collapsed_shapes(CONFIG)) - {COLLAPSED_KEY}
    assert all(np.array_equal(cparams[k], params[k]) for k in cparams)
    assert np.array_equal(np.stack(cg).astype(np.float64), g)
    c64, p64 = dec.to_backend(cparams), dec.to_backend(params)
    for p in PROMPTS:
        a = dec.generate(c64, config, np.asarray([p]), 6, "collapsed", constant_g=cg)
        b = dec.generate(p64, CONFIG, np.asarray([p]), 6, "collapsed", constant_g=cg)
        assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.step_logits, b.step_logits)
    with pytest.raises(CheckpointError, match="load_collapsed"):
        load_checkpoint(folder)  # the full-model loader requires the metric learner


def test_reference_and_kernels_readers_agree(audited):
    torch = pytest.importorskip("torch")
    from plga.kernels import PLDRModel

    _, _, _, folder = audited
    cparams, config, cg = load_collapsed(folder)
    model = PLDRModel.from_pretrained(folder, dtype=torch.float64)
    for p in PROMPTS:
        want = dec.generate(dec.to_backend(cparams), config, np.asarray([p]), 5, "collapsed", constant_g=cg)
        got = model.generate(torch.tensor([p]), 5, "collapsed", return_step_logits=True)
        assert np.array_equal(got.tokens.numpy(), want.tokens)
        np.testing.assert_allclose(got.step_logits.numpy(), want.step_logits, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_audit_writer_writes_the_kernels_bytes(tmp_path, dtype):
    """``write_collapsed`` (no torch) and ``PLDRModel.collapse(G).save_collapsed`` write identical files."""
    torch = pytest.importorskip("torch")
    from plga.kernels import PLDRModel

    params = {k: v.astype(dtype) for k, v in random_params(CONFIG, seed=4).items()}
    g = np.random.default_rng(0).normal(size=(2, 2, 16, 16))
    write_collapsed(params, CONFIG, g, tmp_path / "a")
    tdtype = {np.float16: torch.float16, np.float32: torch.float32, np.float64: torch.float64}[dtype]
    model = PLDRModel.from_reference(params, CONFIG, dtype=tdtype, device="cpu")
    model.collapse(g).save_collapsed(tmp_path / "k")
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "k" / name).read_bytes(), name
    _, _, cg = load_collapsed(tmp_path / "a")
    assert cg[0].dtype == (np.float32 if dtype == np.float16 else dtype)


def test_audit_without_torch_reads_with_the_reference(tmp_path, monkeypatch):
    monkeypatch.setattr(audit_backend, "torch_available", lambda: False)
    params = random_params(CONFIG, seed=21)
    sizes = AuditSizes(n_decode_prompts=1, n_decode_steps=2, n_order_prompts=1, n_order_tokens=1, n_pool_rows=4,
                       n_pairs=5, o3_prompts=1, o4_contexts=1, o4_cand_len=1)
    rec = run_audit(checkpoint=(params, CONFIG), prompts=PROMPTS[:1], out_dir=tmp_path, collapse=True, force=True, sizes=sizes, progress=False, plots=False)
    assert rec["collapse"]["writer"] == WRITER
    assert rec["collapse"]["reader"] == "plga.reference.checkpoint.load_collapsed"
    c = rec["summary"]["collapse"]["file_check"]
    assert c["tokens_equal"] and c["max_dlogit"] == 0.0
    if _has_torch():
        import torch

        from plga.kernels import PLDRModel

        assert PLDRModel.from_pretrained(tmp_path / "collapsed", dtype=torch.float64).collapsed


def test_reader_rejects_what_is_not_a_collapsed_checkpoint(tmp_path):
    params = random_params(CONFIG, seed=1)
    save_safetensors(params, CONFIG, tmp_path / "full")
    with pytest.raises(CheckpointError, match="not a collapsed checkpoint"):
        load_collapsed(tmp_path / "full")
    write_collapsed(params, CONFIG, np.zeros((2, 2, 16, 16)), tmp_path / "c")
    from safetensors.numpy import load_file, save_file

    state = load_file(str(tmp_path / "c" / "model.safetensors"))
    state["decoder.dec_layers.0.mha1.layernorm1.weight"] = np.ones(16, dtype=np.float32)
    save_file(state, str(tmp_path / "c" / "model.safetensors"))
    with pytest.raises(CheckpointError, match="unexpected"):
        load_collapsed(tmp_path / "c")
    with pytest.raises(ValueError, match="shape"):
        write_collapsed(params, CONFIG, np.zeros((2, 16, 16)), tmp_path / "x")


def test_audit_refuses_a_collapsed_checkpoint(tmp_path):
    write_collapsed(random_params(CONFIG, seed=1), CONFIG, np.zeros((2, 2, 16, 16)), tmp_path / "c")
    with pytest.raises(ValueError, match="collapsed checkpoint"):
        run_audit(checkpoint=str(tmp_path / "c"), out_dir=tmp_path / "o", progress=False, plots=False)
