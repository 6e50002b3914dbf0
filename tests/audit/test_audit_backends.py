"""The torch backend (a thin adapter over ``plga.kernels.PLDRModel``) reproduces the float64
reference backend: forward, deductive tensors, decoding in every mode, layer probes, the row
map, collapsed checkpoints, and a whole audit."""

from __future__ import annotations

import numpy as np
import pytest

from plga.audit import AuditSizes, run_audit
from plga.audit.backend import ReferenceBackend, load_collapsed_backend, make_backend
from plga.audit.collapsed import write_collapsed
from plga.audit.model import random_params
from plga.reference.config import PLDRConfig

torch = pytest.importorskip("torch")

CONFIG = PLDRConfig(num_layers=2, d_model=32, num_heads=2, dff=48, A_dff=16, num_reslayerA=2, num_denseA=2, input_vocab_size=64, max_seq_len=64)


@pytest.fixture(scope="module")
def pair():
    params = random_params(CONFIG, seed=11)
    return ReferenceBackend(params, CONFIG), make_backend("torch", params, CONFIG, dtype="float64")


def test_forward_matches_reference(pair):
    ref, tb = pair
    tokens = np.array([[5, 9, 17, 3, 0, 0], [7, 8, 9, 10, 11, 12]])
    a, b = ref.forward(tokens), tb.forward(tokens)
    np.testing.assert_allclose(b.logits, a.logits, rtol=1e-10, atol=1e-10)
    for la, lb in zip(a.deductive, b.deductive, strict=True):
        for k in ("A", "A_LM", "A_P", "G_LM"):
            np.testing.assert_allclose(lb[k], la[k], rtol=1e-9, atol=1e-9, err_msg=k)


@pytest.mark.parametrize("mode", ["nocache", "kv", "kvg"])
def test_decoding_matches_reference(pair, mode):
    ref, tb = pair
    prompt = np.array([[5, 9, 17, 21]])
    ta, la = ref.generate(prompt, 4, mode)
    tb_, lb = tb.generate(prompt, 4, mode)
    assert np.array_equal(ta, tb_)
    np.testing.assert_allclose(lb, la, rtol=1e-9, atol=1e-9)
    sa, _ = ref.generate(prompt, 4, mode, temperature=1.0, top_k=10, seed=100)
    sb, _ = tb.generate(prompt, 4, mode, temperature=1.0, top_k=10, seed=100)
    assert np.array_equal(sa, sb)


def test_backend_is_the_kernels_model(pair):
    from plga.kernels import PLDRModel

    _, tb = pair
    assert isinstance(tb.model, PLDRModel) and tb.model.dtype == torch.float64 and not tb.collapsed


def _gconst(seed=5):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(CONFIG.num_heads, CONFIG.depth, CONFIG.depth)) for _ in range(CONFIG.num_layers)]


def test_probes_and_row_map_match_reference(pair):
    ref, tb = pair
    tokens = np.array([[5, 9, 17, 3, 21, 8, 30]])
    for pa, pb in zip(ref.probe(tokens), tb.probe(tokens), strict=True):
        for name in ("q_pre", "q_rot", "density", "learner_input"):
            np.testing.assert_allclose(getattr(pb, name), getattr(pa, name), rtol=1e-9, atol=1e-9, err_msg=name)
    rows = np.random.default_rng(2).normal(size=(10, CONFIG.depth))
    for layer in range(CONFIG.num_layers):
        np.testing.assert_allclose(tb.row_map(layer, rows), ref.row_map(layer, rows), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("mode", ["nocache", "collapsed"])
def test_constant_g_matches_reference(pair, mode):
    ref, tb = pair
    g = _gconst()
    prompt = np.array([[5, 9, 17, 21]])
    a, b = ref.forward(prompt, constant_g=g), tb.forward(prompt, constant_g=g)
    np.testing.assert_allclose(b.logits, a.logits, rtol=1e-10, atol=1e-10)
    assert all(set(d) == {"G_LM"} for d in b.deductive)
    ta, la = ref.generate(prompt, 3, mode, constant_g=g)
    tb_, lb = tb.generate(prompt, 3, mode, constant_g=g)
    assert np.array_equal(ta, tb_)
    np.testing.assert_allclose(lb, la, rtol=1e-9, atol=1e-9)
    sa, _ = ref.generate(prompt, 3, mode, constant_g=g, temperature=1.0, top_k=10, seed=7)
    sb, _ = tb.generate(prompt, 3, mode, constant_g=g, temperature=1.0, top_k=10, seed=7)
    assert np.array_equal(sa, sb)


def test_collapsed_backends_agree(tmp_path):
    """Both readers of one collapsed folder decode with its stored G, like kvg with that G."""
    params = random_params(CONFIG, seed=11)
    g = [x.astype(np.float32) for x in _gconst(6)]
    write_collapsed(params, CONFIG, g, tmp_path)
    rc = load_collapsed_backend("reference", tmp_path)
    tc = load_collapsed_backend("torch", tmp_path, dtype="float64")
    assert rc.collapsed and tc.collapsed
    for a, b, want in zip(rc.collapsed_g, tc.collapsed_g, g, strict=True):
        assert np.array_equal(a, want) and np.array_equal(b, want)
    prompt = np.array([[5, 9, 17, 21]])
    ta, la = rc.generate(prompt, 4, "collapsed")
    tb_, lb = tc.generate(prompt, 4, "collapsed")
    assert np.array_equal(ta, tb_)
    np.testing.assert_allclose(lb, la, rtol=1e-9, atol=1e-9)
    tk, lk = ReferenceBackend(params, CONFIG).generate(prompt, 4, "collapsed", constant_g=g)
    assert np.array_equal(tk, ta) and np.array_equal(lk, la)
    with pytest.raises(ValueError, match="no metric learner"):
        tc.probe(prompt)
    with pytest.raises(ValueError, match="no metric learner"):
        rc.row_map(0, np.zeros((1, CONFIG.depth)))


def test_whole_audit_agrees_between_backends(tmp_path):
    """Every raw array of a torch-backend audit (with --collapse) matches the reference audit."""
    sizes = AuditSizes(n_decode_prompts=2, n_decode_steps=3, n_order_prompts=2, n_order_tokens=3, n_pool_rows=8,
                       n_pairs=20, o3_prompts=1, o4_contexts=1, o4_cand_len=2)
    params = random_params(CONFIG, seed=3)
    kw = dict(checkpoint=(params, CONFIG), collapse=True, force=True, sizes=sizes, progress=False, plots=False)
    ra = run_audit(out_dir=tmp_path / "ref", backend="reference", **kw)
    rb = run_audit(out_dir=tmp_path / "torch", backend="torch", **kw)
    assert rb["environment"]["backend"] == "torch" and rb["collapse"]["reader"] == "plga.kernels.PLDRModel.from_pretrained"
    assert ra["collapse"]["reader"] == "plga.reference.checkpoint.load_collapsed"
    assert ra["stochastic_continuations"] == rb["stochastic_continuations"]
    assert ra["decode_continuations"] == rb["decode_continuations"]
    assert ra["collapse"]["tensors_sha256"] == rb["collapse"]["tensors_sha256"], "one checkpoint, whatever the backend"
    files = ("config.json", "model.safetensors")  # the checkpoint; collapse_report.json holds measured floats
    assert [ra["collapse"]["sha256"][f] for f in files] == [rb["collapse"]["sha256"][f] for f in files], "byte-identical, whatever the backend"
    with np.load(tmp_path / "ref" / "audit_raw.npz") as za, np.load(tmp_path / "torch" / "audit_raw.npz") as zb:
        assert sorted(za.files) == sorted(zb.files)
        for k in za.files:
            a, b = za[k], zb[k]
            if a.dtype.kind in "biu":
                assert np.array_equal(a, b), k
            else:
                np.testing.assert_allclose(b, a, rtol=1e-7, atol=1e-9, err_msg=k)
    c = rb["summary"]["collapse"]["file_check"]
    assert c["tokens_equal"] and c["max_dlogit"] == 0.0


def test_auto_rule():
    """auto: torch only where the reference cannot run (measured rule, docs/audit.md)."""
    from plga.audit.backend import choose_backend

    big = PLDRConfig(num_layers=1, d_model=896, num_heads=14, dff=64, A_dff=8, num_reslayerA=1, num_denseA=1, input_vocab_size=32, max_seq_len=16)
    for cfg in (CONFIG, big):
        assert choose_backend("auto", cfg) == "reference"
        assert choose_backend("auto", cfg, dtype="float32") == "torch"
        assert choose_backend("auto", cfg, device="cuda") == "torch"
        assert choose_backend("torch", cfg) == "torch" and choose_backend("reference", cfg) == "reference"
    assert make_backend("auto", random_params(CONFIG), CONFIG).name == "reference"
    with pytest.raises(ValueError, match="unknown backend"):
        make_backend("jax", random_params(CONFIG), CONFIG)


def test_small_cpu_models_run_on_one_thread(pair):
    """Inside a call the torch backend of a small CPU model uses one intra-op thread, but for the
    vocabulary projection, which keeps the process's threads; the setting is restored."""
    from plga.audit.torch_backend import SMALL_D_MODEL

    _, tb = pair
    assert CONFIG.d_model <= SMALL_D_MODEL and tb.thread_cap == 1
    seen: dict[str, list[int]] = {"layer": [], "vocab": []}
    hooks = [m.register_forward_hook(lambda *_, k=k: seen[k].append(torch.get_num_threads()))
             for k, m in (("layer", tb.model.decoder.dec_layers[0].mha1.wq), ("vocab", tb.model.final_layer))]
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        tb.forward(np.array([[5, 9, 17]]))
        tb.generate(np.array([[5, 9, 17]]), 2, "kv", temperature=1.0, top_k=5, seed=1)
        assert seen["layer"] and set(seen["layer"]) == {1}
        assert seen["vocab"] and set(seen["vocab"]) == {2}
        assert torch.get_num_threads() == 2, "the process setting is restored after each call"
    finally:
        for h in hooks:
            h.remove()
        torch.set_num_threads(before)


def test_wide_models_keep_torch_threads():
    """Negative control of the cap: above SMALL_D_MODEL the backend leaves the threads alone."""
    from plga.audit.torch_backend import SMALL_D_MODEL

    wide = PLDRConfig(num_layers=1, d_model=SMALL_D_MODEL + 64, num_heads=(SMALL_D_MODEL + 64) // 64, dff=32, A_dff=8,
                      num_reslayerA=1, num_denseA=1, input_vocab_size=16, max_seq_len=16)
    assert make_backend("torch", random_params(wide), wide).thread_cap is None


def test_backends_do_not_import_each_other():
    """The torch backend depends on the interface, not on the reference backend module (no cycle)."""
    import ast
    from pathlib import Path

    import plga.audit.torch_backend as tbm

    tree = ast.parse(Path(tbm.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "backend" not in imported and "interface" in imported


def test_last_only_forward_is_the_last_row(pair):
    """``forward(last_only=True)`` on both backends: the last row of the full logits (to the
    float64 tolerance), shape [B, 1, V], the same deductive tensors."""
    tokens = np.array([[5, 9, 17, 3, 0, 0], [7, 8, 9, 10, 11, 12]])
    for backend in pair:
        full, last = backend.forward(tokens), backend.forward(tokens, last_only=True)
        assert last.logits.shape == (2, 1, full.logits.shape[-1])
        np.testing.assert_allclose(last.logits[:, 0], full.logits[:, -1], rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(last.deductive[0]["G_LM"], full.deductive[0]["G_LM"])
