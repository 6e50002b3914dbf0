"""Decoder semantics: caches, constant G, sampling, masks and input validation (docs/spec.md §2–3)."""

from __future__ import annotations

import numpy as np
import pytest

from plga.reference import decoder
from plga.reference.checkpoint import random_params
from plga.reference.config import PLDRConfig
from plga.reference.sampling import DEFAULT_SEED, sample_next

CONFIG = PLDRConfig.from_name("tiny")
PARAMS = decoder.to_backend(random_params(CONFIG, seed=11))
PROMPT = np.array([[3, 17, 5, 29, 8]])


def test_kv_and_kvg_decode_identically():
    kv = decoder.generate(PARAMS, CONFIG, PROMPT, 8, "kv")
    kvg = decoder.generate(PARAMS, CONFIG, PROMPT, 8, "kvg")
    np.testing.assert_array_equal(kv.tokens, kvg.tokens)
    np.testing.assert_array_equal(kv.step_logits, kvg.step_logits)


def test_constant_g_equal_to_the_prompt_operator_reproduces_kvg():
    """Inference collapse at model level: the cached G as a constant gives the kvg model."""
    prompt_g = [ded["G_LM"][0] for ded in decoder.forward(PARAMS, CONFIG, PROMPT).deductive]
    kvg = decoder.generate(PARAMS, CONFIG, PROMPT, 8, "kvg")
    const = decoder.generate(PARAMS, CONFIG, PROMPT, 8, "collapsed", constant_g=prompt_g)
    np.testing.assert_array_equal(const.tokens, kvg.tokens)
    np.testing.assert_array_equal(const.step_logits, kvg.step_logits)


def test_a_different_constant_g_changes_the_logits():
    """Negative control for the test above: the comparison sees a wrong operator."""
    prompt_g = [ded["G_LM"][0] * 1.01 for ded in decoder.forward(PARAMS, CONFIG, PROMPT).deductive]
    kvg = decoder.generate(PARAMS, CONFIG, PROMPT, 3, "kvg")
    const = decoder.generate(PARAMS, CONFIG, PROMPT, 3, "collapsed", constant_g=prompt_g)
    assert not np.array_equal(const.step_logits, kvg.step_logits)


def test_cached_step_equals_full_forward_under_constant_g():
    """With G fixed, a KV-cached step and a full recomputation give the same logits."""
    g = [np.eye(CONFIG.depth)[None].repeat(CONFIG.num_heads, 0)] * CONFIG.num_layers
    cached = decoder.generate(PARAMS, CONFIG, PROMPT, 6, "collapsed", constant_g=g)
    full = decoder.generate(PARAMS, CONFIG, PROMPT, 6, "nocache", constant_g=g)
    np.testing.assert_array_equal(cached.tokens, full.tokens)
    np.testing.assert_allclose(cached.step_logits, full.step_logits, rtol=1e-12, atol=1e-12)


def test_nocache_recomputes_g_from_the_whole_sequence():
    """The Gram includes every row: appending a token changes G_LM of an uncollapsed model."""
    short = decoder.forward(PARAMS, CONFIG, PROMPT).deductive[0]["G_LM"]
    longer = decoder.forward(PARAMS, CONFIG, np.concatenate([PROMPT, [[4]]], axis=1)).deductive[0]["G_LM"]
    assert not np.allclose(short, longer)


def test_padding_keys_are_masked_and_future_rows_do_not_leak_through_attention():
    tokens = np.array([[3, 17, 5, 0, 0]])
    ded = decoder.forward(PARAMS, CONFIG, tokens).deductive[0]
    support = decoder.attention_support(tokens)[0]
    assert not support[:, 3:].any() and support[2, :3].all() and not support[0, 1]
    assert ded["scores"].shape == (1, CONFIG.num_heads, 5, 5)


def test_batched_forward_equals_per_sequence():
    tokens = np.array([[3, 17, 5, 29, 8], [0, 0, 4, 6, 9], [7, 7, 0, 0, 0]])
    batched = decoder.forward(PARAMS, CONFIG, tokens).logits
    for b in range(len(tokens)):
        single = decoder.forward(PARAMS, CONFIG, tokens[b : b + 1]).logits
        np.testing.assert_allclose(batched[b], single[0], rtol=1e-13, atol=1e-13)


def test_seeded_sampling_is_reproducible_and_greedy_limits_agree():
    a = decoder.generate(PARAMS, CONFIG, PROMPT, 6, "kv", temperature=0.8, top_k=5, seed=4)
    b = decoder.generate(PARAMS, CONFIG, PROMPT, 6, "kv", temperature=0.8, top_k=5, seed=4)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    greedy = decoder.generate(PARAMS, CONFIG, PROMPT, 6, "kv")
    top1 = decoder.generate(PARAMS, CONFIG, PROMPT, 6, "kv", temperature=1.0, top_k=1, seed=9)
    np.testing.assert_array_equal(greedy.tokens, top1.tokens)


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    rng = np.random.default_rng(0)
    draws = {int(sample_next(logits, rng, 1.0, 0, 0.7)[0]) for _ in range(400)}
    assert draws == {0, 1}  # 0.5 < 0.7 ≤ 0.8: the crossing token is kept, the rest never drawn
    draws = {int(sample_next(logits, rng, 1.0, 0, 0.5)[0]) for _ in range(200)}
    assert draws == {0}


@pytest.mark.parametrize(
    ("tokens", "error"),
    [
        (np.array([[1, 2, 99]]), ValueError),  # id outside the vocabulary of 37
        (np.array([[-1, 2]]), ValueError),
        (np.array([1, 2, 3]), ValueError),  # rank 1
        (np.zeros((1, 0), dtype=np.int64), ValueError),  # empty sequence
        (np.array([[1.0, 2.0]]), TypeError),  # floats are not token ids
        (np.ones((1, 65), dtype=np.int64), ValueError),  # longer than max_seq_len = 64
    ],
)
def test_bad_token_input_is_refused(tokens, error):
    with pytest.raises(error):
        decoder.forward(PARAMS, CONFIG, tokens)


def test_generation_arguments_are_validated():
    with pytest.raises(ValueError, match="unknown mode"):
        decoder.generate(PARAMS, CONFIG, PROMPT, 2, "fast")
    with pytest.raises(ValueError, match="needs constant operators"):
        decoder.generate(PARAMS, CONFIG, PROMPT, 2, "collapsed")
    with pytest.raises(ValueError, match="exceeds max_seq_len"):
        decoder.generate(PARAMS, CONFIG, PROMPT, 60, "kv")
    with pytest.raises(ValueError, match="one operator per layer"):
        decoder.generate(PARAMS, CONFIG, PROMPT, 2, "collapsed", constant_g=[])
    with pytest.raises(ValueError, match="with constant operators use mode 'collapsed'"):
        decoder.generate(PARAMS, CONFIG, PROMPT, 2, "kv", constant_g=[np.eye(CONFIG.depth)] * CONFIG.num_layers)
    unseeded = decoder.generate(PARAMS, CONFIG, PROMPT, 4, "kv", temperature=1.0)  # the documented default seed
    seeded = decoder.generate(PARAMS, CONFIG, PROMPT, 4, "kv", temperature=1.0, seed=DEFAULT_SEED)
    np.testing.assert_array_equal(unseeded.tokens, seeded.tokens)


def test_overflowing_power_stage_is_reported_with_layer_and_head():
    """A_LM ** P with tiny A_LM and a large negative exponent overflows: named, not silent."""
    params = dict(PARAMS)
    key = "decoder.dec_layers.0.mha1.plgatt_layer."
    params[key + "Wlst"] = np.zeros_like(params[key + "Wlst"])
    params[key + "blst"] = np.zeros_like(params[key + "blst"])  # A_LM = ε = 1e-9 everywhere
    pw = params[key + "pwlst"].copy()
    pw[1, 0, 0] = -40.0  # (1e-9) ** -40 = 1e360 overflows float64, in head 1 only
    params[key + "pwlst"] = pw
    with pytest.raises(decoder.NonFiniteError, match=r"layer 0: A_P is not finite in heads \[1\]"):
        decoder.forward(params, CONFIG, PROMPT)


def test_identity_constant_g_by_name():
    """``constant_g="identity"`` means SDPA in every layer, as on the kernels; other names are refused."""
    eye = [np.broadcast_to(np.eye(CONFIG.depth), (CONFIG.num_heads, CONFIG.depth, CONFIG.depth))] * CONFIG.num_layers
    named = decoder.forward(PARAMS, CONFIG, PROMPT, constant_g="identity")
    explicit = decoder.forward(PARAMS, CONFIG, PROMPT, constant_g=eye)
    np.testing.assert_array_equal(named.logits, explicit.logits)
    learner = decoder.forward(PARAMS, CONFIG, PROMPT)
    assert not np.array_equal(named.logits, learner.logits)  # the name really replaced the learner
    with pytest.raises(ValueError, match="unknown constant_g 'random'"):
        decoder.forward(PARAMS, CONFIG, PROMPT, constant_g="random")
    gen = decoder.generate(PARAMS, CONFIG, PROMPT, 3, "collapsed", constant_g="identity")
    np.testing.assert_array_equal(gen.tokens, decoder.generate(PARAMS, CONFIG, PROMPT, 3, "collapsed", constant_g=eye).tokens)


class _Terminal:
    """A stand-in stderr that says it is a terminal and keeps what is written."""

    def __init__(self) -> None:
        self.text = ""

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self.text += s
        return len(s)

    def flush(self) -> None:
        pass


def test_generation_shows_progress_on_a_terminal_only(monkeypatch):
    """``progress=True`` draws a bar of the decoding steps on a terminal, never changes the
    tokens, and stays silent when stderr is not a terminal or progress is off."""
    import sys

    quiet = decoder.generate(PARAMS, CONFIG, PROMPT, 4, "kv")
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    shown = decoder.generate(PARAMS, CONFIG, PROMPT, 4, "kv", progress=True)
    np.testing.assert_array_equal(shown.tokens, quiet.tokens)
    assert "generate:" in term.text and "/4 " in term.text  # a bar over the 4 steps (cleared at the end)
    term.text = ""
    decoder.generate(PARAMS, CONFIG, PROMPT, 4, "kv", progress=False)
    assert term.text == ""
    monkeypatch.setenv("PLGA_NO_PROGRESS", "1")
    decoder.generate(PARAMS, CONFIG, PROMPT, 4, "kv", progress=True)
    assert term.text == ""
