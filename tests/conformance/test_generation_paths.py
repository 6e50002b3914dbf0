"""Generation paths a fifth audit found unjudged (2026-12-07), each with the control it missed.

* **Conversation turns.** No check gave a loaded model a prompt that extends the sequence it
  decoded last: prefix caching (reuse the caches, prefill only the new ids), exact in a
  standard transformer, passed — wrong in PLDR-LLM, where G_LM and every layer's K, V past
  the first depend on the whole prompt.
* **nocache under constant operators.** The reference defines it; no check called it, and a
  nocache loop that ran the learned chain anyway passed.
* **Left padding below float64 under a constant G.** Decoder checks drew left padding only at
  float64; under a constant G no Gram reads the padding rows, so float32 and bfloat16 judge it,
  and a float32/bfloat16 decoder counting positions from a row's first real token passed.
* **Batch past 8.** The largest generation batch was 5: a step tiled by 8 rows that indexes the
  padding mask within its tile passed.

Each control fails now and passed with the cases of before.
"""

from __future__ import annotations

import dataclasses

import pytest

from plga.conformance import check_kernel, checks
from plga.conformance import strategies as sh
from plga.conformance.controls import CONTROLS
from plga.conformance.controls.decoders import DecoderControl, NocacheIgnoresConstantG


def _verdict(control, check_names):
    return check_kernel(control, checks=list(check_names), dtypes=["float32"], profile="quick", shrink=False)


def test_conversation_turns_catch_prefix_caching(monkeypatch):
    control = CONTROLS["conversation_prefix_cache"]
    report = _verdict(control.make(), ["state_between_calls"])
    assert report.failed_checks() == {"state_between_calls"}, report.summary()
    assert "conversation turn 2" in report.failures[0].message
    monkeypatch.setattr(checks, "_conversation", lambda *a, **k: None)  # negative control: no conversation turns
    assert _verdict(control.make(), ["state_between_calls"]).verdict == "PASS"


def test_nocache_under_constant_operators_is_judged():
    report = _verdict(CONTROLS["nocache_ignores_constant_g"].make(), ["cache_nocache"])
    assert report.failed_checks() == {"cache_nocache"}, report.summary()
    assert "nocache decoding (constant random G)" in report.failures[0].message
    # negative control: the same decoder not declaring collapsed is not given constant operators
    no_constant = DecoderControl("controls.nocache_ignores_constant_g (no collapsed)", NocacheIgnoresConstantG)
    no_constant.capabilities = no_constant.capabilities - {"collapsed"}
    assert _verdict(no_constant, ["cache_nocache"]).verdict == "PASS"


def test_left_padding_under_a_constant_g_is_judged_below_float64(monkeypatch):
    control = CONTROLS["step_positions_from_first_real_token"]
    names = ("collapsed_equals_kvg", "state_between_calls", "forward_collapsed", "cache_modes")
    report = check_kernel(control.make(), checks=list(names), profile="quick", shrink=False)
    # the cache checks too, since 2026-12-07: their one-layer cases are left-padded at every dtype
    assert report.failed_checks() == {"collapsed_equals_kvg", "cache_modes", "state_between_calls"}, report.summary()
    assert {f.dtype for f in report.failures} == {"float32", "bfloat16"}
    assert any("left-padded" in f.message for f in report.failures if f.check.startswith("collapsed_equals_kvg"))
    monkeypatch.setattr(checks, "_collapsed_tokens", lambda c: c.tokens)  # negative control: right padding only
    monkeypatch.setattr(checks, "ONE_LAYER_LEFT_PADDING", False)
    assert check_kernel(control.make(), checks=list(names), profile="quick", shrink=False).verdict == "PASS"


def test_collapsed_tokens_are_the_same_prompts_left_padded():
    case = checks.DecoderCase(sh.boundary_configs()[1], 1, sh.padded_tokens(37, 0, batch=4, length=9, left_padding=False))
    left = checks._collapsed_tokens(case)  # seed 1: odd, left-padded
    assert left.shape == case.tokens.shape and (left[:, -1] > 0).all()
    for row, orig in zip(left, case.tokens, strict=True):
        assert list(row[row > 0]) == list(orig[orig > 0])
        assert (row[: row.size - (row > 0).sum()] == 0).all()
    assert checks._collapsed_tokens(dataclasses.replace(case, seed=2)) is case.tokens


def test_a_batch_past_eight_rows_is_judged(monkeypatch):
    control = CONTROLS["step_mask_tile_of_8"]
    report = _verdict(control.make(), ["cache_modes"])
    assert report.failed_checks() == {"cache_modes"}, report.summary()
    assert (1, 20, 9, 3) in sh.BOUNDARY_DECODER_EXTRA
    monkeypatch.setattr(sh, "BOUNDARY_DECODER_EXTRA", tuple(x for x in sh.BOUNDARY_DECODER_EXTRA if x[1] <= 8))
    assert _verdict(control.make(), ["cache_modes"]).verdict == "PASS"


@pytest.mark.parametrize("seed", [20260, 1])
def test_kv_and_kvg_are_not_held_to_each_others_tokens(seed):
    """A sound bfloat16 decoder whose kv step recomputes the power stage in bfloat16 while kvg
    keeps the prompt's float32 G_LM: each conforms to the reference; they split near ties apart."""
    report = check_kernel(CONTROLS["kv_power_bf16_kvg_float32"].make(), checks=["cache_modes"], profile="quick", seed=seed)
    assert report.verdict == "PASS", report.summary()


def test_baselines_follow_the_reference_tokens():
    """Teacher forcing: a baseline decodes in the reference's context at every step, so a near
    tie it would split otherwise no longer ends the comparison of the implementation's later
    steps (before, the first baseline divergence left every later step unjudged)."""
    import numpy as np
    import torch

    from plga.conformance import oracle

    config = sh.boundary_configs()[1]
    state = checks._state(oracle.random_state_dict(config, 3), torch.float32, "cpu")
    prompt = sh.padded_tokens(config.input_vocab_size, 3, batch=2, length=5, left_padding=False)
    truth = oracle.truth_generate(state, config, prompt, 4, "nocache")
    forced = np.asarray(truth.tokens).copy()
    forced[:, 5] = (forced[:, 5] % (config.input_vocab_size - 1)) + 1  # another first token than any argmax
    after = oracle.truth_generate(state, config, forced[:, :6], 1, "nocache")  # the reference in the forced context
    for tokens, steps in checks._baseline_gen(state, config, prompt, 4, "nocache", forced=forced):
        assert np.array_equal(tokens.numpy(), forced)
        assert np.abs(steps[:, 1].double().numpy() - np.asarray(after.step_logits)[:, 0]).max() < 1e-4
    # negative control: decoding freely, the baseline takes its own argmax at the first step
    free = checks._baseline_decoders(state, config)[0].generate(torch.from_numpy(prompt), 4, "nocache")[0]
    assert not np.array_equal(free.numpy(), forced)


def test_left_padded_generation_is_judged_below_float64_in_one_layer(monkeypatch):
    """A decoder whose cached steps rebuild the padding mask as if every prompt were right-padded,
    declared in float32 and bfloat16 only (a ninth outside audit's), passed every check: left
    padding was drawn at float64 alone. One-layer cases now draw it at every dtype and fail it;
    negative control: without them (the suite as it was) it passes these two checks (at some seeds
    a conversation turn of ``state_between_calls`` catches it, through a generated id 0 amid
    its tokens)."""
    from plga.conformance import check_kernel, checks
    from plga.conformance.controls import CONTROLS

    impl = CONTROLS["step_mask_from_lengths"].make()
    cache = ["cache_modes", "gcache_invalidated"]
    for seed in (20260, 1):
        report = check_kernel(impl, profile="quick", seed=seed, shrink=False, checks=cache)
        assert report.verdict == "FAIL" and report.failed_checks() <= set(cache), f"seed {seed}:\n{report.summary()}"
    monkeypatch.setattr(checks, "ONE_LAYER_LEFT_PADDING", False)
    report = check_kernel(impl, profile="quick", seed=20260, shrink=False, checks=cache)
    assert report.passed, report.summary()
