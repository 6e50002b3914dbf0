"""Generation: cache modes, collapse, custom G and sampling against the reference (docs/spec.md §3)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from plga.kernels import PLDRModel, random_G
from plga.kernels.model import COLLAPSED_KEY
from plga.reference import decoder as R
from plga.reference.checkpoint import CheckpointError
from plga.reference.config import PLDRConfig

from .kernel_helpers import FEW, configs, model_pair, random_params
from .policy import assert_rel_close

CACHE_MODES = ("nocache", "kv", "kvg")


@pytest.mark.golden
@pytest.mark.parametrize("mode", CACHE_MODES)
def test_golden_greedy_every_mode(golden_checkpoint, golden, mode):
    params, config = golden_checkpoint
    model = PLDRModel.from_reference(params, config, dtype=torch.float64)
    out = model.generate(torch.as_tensor(golden["gen.prompt"]), 10, mode, return_step_logits=True)
    np.testing.assert_array_equal(out.tokens.numpy()[0], golden[f"gen.{mode}.tokens"])
    assert_rel_close(out.step_logits[0], golden[f"gen.{mode}.step_logits"])
    model32 = PLDRModel.from_reference(params, config, dtype=torch.float32)
    out32 = model32.generate(torch.as_tensor(golden["gen.prompt"]), 10, mode)
    np.testing.assert_array_equal(out32.tokens.numpy()[0], golden[f"gen.{mode}.tokens"])


@st.composite
def prompts(draw, vocab):
    b = draw(st.integers(1, 3), label="batch")
    s = draw(st.sampled_from([1, 2, 5, 7]), label="prompt_len")
    rng = np.random.default_rng(draw(st.integers(0, 2**16), label="prompt_seed"))
    tokens = rng.integers(1, vocab, size=(b, s))
    for row in range(1, b):  # left padding (row 0 is the longest prompt)
        tokens[row, : draw(st.integers(0, s - 1), label=f"lpad{row}")] = 0
    return tokens


@FEW
@given(data=st.data())
def test_greedy_matches_reference_every_mode(data):
    config = data.draw(configs(), label="config")
    tokens = data.draw(prompts(config.input_vocab_size), label="prompt")
    n = data.draw(st.integers(1, 6), label="new")
    params, model = model_pair(config, data.draw(st.integers(0, 99), label="seed"))
    ref_params = R.to_backend(params)
    outs = {}
    for mode in CACHE_MODES:
        want = R.generate(ref_params, config, tokens, n, mode)
        got = model.generate(torch.as_tensor(tokens), n, mode, return_step_logits=True)
        np.testing.assert_array_equal(got.tokens.numpy(), want.tokens, err_msg=mode)
        assert_rel_close(got.step_logits, want.step_logits, name=mode)
        outs[mode] = got
    # kv and kvg are the same computation on a frozen prompt operator
    assert torch.equal(outs["kv"].tokens, outs["kvg"].tokens)
    assert torch.equal(outs["kv"].step_logits, outs["kvg"].step_logits)


@FEW
@given(data=st.data())
def test_constant_G_generation_matches_reference(data):
    config = data.draw(configs(), label="config")
    tokens = data.draw(prompts(config.input_vocab_size), label="prompt")
    params, model = model_pair(config, 1)
    kind = data.draw(st.sampled_from(["identity", "random", "array"]), label="G")
    if kind == "identity":
        G, g_ref = "identity", [np.broadcast_to(np.eye(config.depth), (config.num_heads, config.depth, config.depth))] * config.num_layers
    elif kind == "random":
        G = random_G(config, seed=3)
        g_ref = list(G.double().numpy())
    else:
        G = np.random.default_rng(4).normal(size=(config.num_layers, config.num_heads, config.depth, config.depth))
        g_ref = list(G)
    ref_params = R.to_backend(params)
    for mode in ("collapsed", "nocache"):
        # nocache differs from the cached mode once a generated id is 0: the recomputed pass
        # masks it as padding, a cache never masks generated keys (both as the reference)
        want = R.generate(ref_params, config, tokens, 4, mode, constant_g=g_ref)
        got = model.generate(torch.as_tensor(tokens), 4, mode, G=G, return_step_logits=True)
        np.testing.assert_array_equal(got.tokens.numpy(), want.tokens, err_msg=mode)
        assert_rel_close(got.step_logits, want.step_logits, name=mode)


def test_collapsed_with_kvg_operator_reproduces_kvg_exactly():
    config = PLDRConfig.from_name("tiny")
    for dtype in (torch.float64, torch.float32):
        _, model = model_pair(config, 2, dtype=dtype)
        prompt = torch.tensor([[5, 9, 1, 30, 2, 7, 11]])
        with torch.no_grad():
            g_star = torch.stack([d["G_LM"][0] for d in model(prompt, deductive=True).deductive])  # the kvg cache
        kvg = model.generate(prompt, 8, "kvg", return_step_logits=True)
        collapsed = model.collapse(g_star)
        assert not any(".reslayerAs." in k or ".plgatt_layer." in k for k in collapsed.state_dict())
        got = collapsed.generate(prompt, 8, "collapsed", return_step_logits=True)
        assert torch.equal(got.tokens, kvg.tokens)
        assert torch.equal(got.step_logits, kvg.step_logits)


def test_batched_generation_equals_per_sequence():
    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 5)
    batch = torch.tensor([[5, 9, 1, 30, 2], [0, 0, 3, 4, 5], [0, 8, 8, 2, 6]])
    for mode in ("nocache", "kv", "kvg"):
        out = model.generate(batch, 6, mode, return_step_logits=True)
        for b in range(3):
            one = model.generate(batch[b : b + 1], 6, mode, return_step_logits=True)
            assert torch.equal(one.tokens[0], out.tokens[b])
            assert_rel_close(one.step_logits[0], out.step_logits[b], rtol=1e-12)


@pytest.mark.parametrize("G", [None, "identity"])
def test_nocache_generation_is_forward_on_the_ids_so_far(G):
    """``nocache`` runs its passes without forward's per-call checks and with the packed fields
    looked up once per generation; each step's logits are still bit for bit forward's
    last-position logits on the ids so far (left padding, a constant G, float32, hooks or not)."""
    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 9, dtype=torch.float32)
    prompt = torch.tensor([[5, 9, 1, 30, 2], [0, 0, 3, 4, 5]])
    for hooked in (False, True):
        handle = model.decoder.dec_layers[0].ffn.gluw1.register_forward_hook(lambda *a: None) if hooked else None
        out = model.generate(prompt, 6, "nocache", G=G, return_step_logits=True)
        with torch.no_grad():
            for n in range(6):
                want = model(out.tokens[:, : 5 + n], logits="last", G=G).logits
                assert torch.equal(out.step_logits[:, n], want), (hooked, n)
        if handle is not None:
            handle.remove()
    assert model.generate(prompt, 0, "nocache").tokens.shape == (2, 5)


def test_static_cache_is_preallocated():
    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 6)
    cache = model.new_cache(1, 10)
    ptrs = [lc.k.data_ptr() for lc in cache.layers]
    with torch.no_grad():
        model(torch.tensor([[3, 4, 5]]), logits="last", cache=cache)
        for t in range(7):
            model.step(torch.tensor([[t + 1]]), cache, "kv")
    assert cache.length == 10 and [lc.k.data_ptr() for lc in cache.layers] == ptrs
    with pytest.raises(ValueError, match="capacity"):
        model.step(torch.tensor([[1]]), cache, "kv")


def test_generation_errors():
    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 7)
    with pytest.raises(ValueError, match="max_seq_len"):
        model.generate(torch.ones(1, 60, dtype=torch.long), 10)
    with pytest.raises(ValueError, match="collapsed"):
        model.generate(torch.ones(1, 3, dtype=torch.long), 2, "collapsed")
    with pytest.raises(ValueError, match="mode"):
        model.generate(torch.ones(1, 3, dtype=torch.long), 2, "flash")
    with pytest.raises(ValueError, match="G needs one operator per layer"):
        model.generate(torch.ones(1, 3, dtype=torch.long), 2, "collapsed", G=np.zeros((3, 2, 8, 8)))


# --- sampling --------------------------------------------------------------------------------


def test_same_seed_same_tokens_on_the_reference_and_the_kernels():
    """One sampler specification (plga.reference.sampling): a float64 model samples the
    reference's tokens for the same seed, in every mode; a different seed changes them."""
    config = PLDRConfig.from_name("tiny")
    params, model = model_pair(config, 8)
    prompt = np.array([[5, 9, 1, 30], [0, 2, 3, 4]])
    ref_params = R.to_backend(params)
    for mode in ("nocache", "kv", "kvg"):
        want = R.generate(ref_params, config, prompt, 6, mode, temperature=0.9, top_k=8, top_p=0.95, seed=11)
        got = model.generate(torch.as_tensor(prompt), 6, mode, temperature=0.9, top_k=8, top_p=0.95, seed=11)
        np.testing.assert_array_equal(got.tokens.numpy(), want.tokens, err_msg=mode)
    other = R.generate(ref_params, config, prompt, 6, "kv", temperature=0.9, top_k=8, top_p=0.95, seed=12)
    assert not np.array_equal(other.tokens, want.tokens)  # the seed matters (negative control)


def test_seeded_generation_is_reproducible():
    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 8, dtype=torch.float32)
    prompt = torch.tensor([[5, 9, 1], [0, 2, 3]])
    a = model.generate(prompt, 8, "kvg", temperature=0.9, top_k=5, top_p=0.9, seed=11)
    b = model.generate(prompt, 8, "kvg", temperature=0.9, top_k=5, top_p=0.9, seed=11)
    assert torch.equal(a.tokens, b.tokens)
    c = model.generate(prompt, 8, "kv", temperature=0.9, top_k=5, top_p=0.9, seed=11)
    assert torch.equal(a.tokens, c.tokens)


# --- collapse --------------------------------------------------------------------------------


def test_collapse_from_prompts_and_save(tmp_path):
    config = PLDRConfig.from_name("tiny")
    params, model = model_pair(config, 9)
    prompts = [[5, 9, 1, 30], [2, 2, 7], [11, 4, 4, 4, 8]]
    collapsed = model.collapse_from(prompts)
    rep = collapsed.collapse_report
    assert rep is not None and rep.fluctuation.shape == (3, 1, 2) and rep.max > 0
    with torch.no_grad():
        gs = [torch.stack([d["G_LM"][0] for d in model(torch.tensor([p]), deductive=True).deductive]) for p in prompts]
    g_star = torch.stack(gs).mean(0)
    assert_rel_close(collapsed.decoder.collapsed_G, g_star, rtol=1e-14)
    want = R.forward(R.to_backend(params), config, np.array([[3, 1, 4, 1, 5]]), constant_g=list(g_star.numpy()))
    with torch.no_grad():
        assert_rel_close(collapsed(torch.tensor([[3, 1, 4, 1, 5]])).logits, want.logits)
    single = model.collapse_from([[5, 9, 1, 30]]).collapse_report
    assert single.max == 0.0  # one prompt: no spread
    # saved without metric-learner weights; from_pretrained recognises the folder
    collapsed.save_collapsed(tmp_path / "c")
    cfg = json.loads((tmp_path / "c" / "config.json").read_text())
    assert cfg["collapsed"] is True
    from safetensors.numpy import load_file

    keys = set(load_file(str(tmp_path / "c" / "model.safetensors")))
    assert COLLAPSED_KEY in keys and not any("reslayerAs" in k or "plgatt_layer" in k or "mha1.layernorm1" in k for k in keys)
    loaded = PLDRModel.from_pretrained(tmp_path / "c", dtype=torch.float64)
    assert loaded.collapsed
    a = loaded.generate(torch.tensor([[5, 9, 1]]), 6, "collapsed", return_step_logits=True)
    b = collapsed.generate(torch.tensor([[5, 9, 1]]), 6, "collapsed", return_step_logits=True)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.step_logits, b.step_logits)
    with pytest.raises(ValueError):
        model.save_collapsed(tmp_path / "x")


def test_collapsed_folder_with_learner_keys_is_rejected(tmp_path):
    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 10, dtype=torch.float32)
    collapsed = model.collapse("identity")
    collapsed.save_collapsed(tmp_path / "c")
    from safetensors.numpy import load_file, save_file

    state = load_file(str(tmp_path / "c" / "model.safetensors"))
    state["decoder.dec_layers.0.mha1.layernorm1.weight"] = np.ones(8, dtype=np.float32)
    save_file(state, str(tmp_path / "c" / "model.safetensors"))
    with pytest.raises(CheckpointError, match="unexpected"):
        PLDRModel.from_pretrained(tmp_path / "c")


def test_collapsed_bfloat16_keeps_G_wide():
    config = PLDRConfig.from_name("tiny")
    params = random_params(config, 11)
    model = PLDRModel.from_reference(params, config, dtype=torch.bfloat16).collapse("identity")
    assert model.decoder.collapsed_G.dtype == torch.float32 and model.dtype == torch.bfloat16
    out = model.generate(torch.tensor([[5, 9, 1]]), 4, "collapsed")
    assert out.tokens.shape == (1, 7)


def test_kernels_generation_progress_keeps_the_tokens(monkeypatch):
    """The kernels' progress bar (the reference's ``steps_of``) changes nothing but stderr."""
    import sys

    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 8, dtype=torch.float32)
    prompt = torch.tensor([[5, 9, 1, 30]])
    quiet = model.generate(prompt, 5, "kvg")

    class Terminal:
        text = ""

        def isatty(self):
            return True

        def write(self, s):
            Terminal.text += s

        def flush(self):
            pass

    monkeypatch.setattr(sys, "stderr", Terminal())
    shown = model.generate(prompt, 5, "kvg", progress=True)
    assert torch.equal(shown.tokens, quiet.tokens) and "generate:" in Terminal.text and "/5 " in Terminal.text
