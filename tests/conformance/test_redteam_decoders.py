"""Decoders an independent audit wrote against the suite (:mod:`.redteam_decoders`). Each wrong one
got PASS before — one-token prompts, 5+ layers, 4+ residual units, more than 8 heads, a vocabulary
past 256, the last position of the context, head dimension 64, kv declared without kvg,
collapsed decoding with a G other than the prompt's — and must FAIL now; the correct ones
(a float64 chain, no G_LM returned) must still PASS."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from plga.conformance import check_kernel
from plga.conformance import strategies as sh

from . import redteam_decoders as rt

GROUPS = ["decoder", "cache", "chain"]
WRONG = ["Len1PromptAsStep", "LayersPastFourSkipped", "UnitsPastThreeSkipped", "HeadChunkTail", "VocabChunkArgmax",
         "RopeTableShort", "KvOnlyUnchecked", "CollapsedPromptLearned", "ChainD64"]


@pytest.mark.parametrize("name", WRONG)
def test_a_decoder_wrong_past_the_old_ranges_fails(name):
    report = check_kernel(getattr(rt, name)(), groups=GROUPS, dtypes=["float64"], profile="quick", shrink=False,
                          exitfirst=True)
    assert report.verdict == "FAIL", report.summary()


@pytest.mark.parametrize("name", ["WideChain", "NoGLM"])
def test_an_unusual_correct_decoder_passes(name):
    report = check_kernel(getattr(rt, name)(), groups=GROUPS, dtypes=["float32"], profile="quick", shrink=False)
    assert report.verdict == "PASS", report.summary()


def test_greedy_tokens_are_maximisers_of_their_own_step_logits(monkeypatch):
    """A third audit: at bfloat16 a decoder that took the second-best token within 0.5 of the best
    passed, its step logits right and its token changes within 2 × a bfloat16 logit bound. Every
    new token must now be a maximiser of its own step's returned logits, at every step."""
    from plga.conformance import checks
    from plga.conformance.controls import CONTROLS

    def wrong():
        control = CONTROLS["second_best_near_tie"].make()
        control.dtypes = ("bfloat16",)
        return control

    # seed 2: without the rule its token changes pass there (at 20260, 1 and 3 to 6 cache_modes
    # has caught it without the rule since the boundary cases grew)
    report = check_kernel(wrong(), checks=["cache_modes"], profile="quick", shrink=False, seed=2)
    assert report.failed_checks() == {"cache_modes"}, report.summary()
    assert "is not a maximiser of that step's returned logits" in report.summary()
    # negative control: without the argmax check the bfloat16 bound absorbs the changed tokens, on
    # the boundary cases of that time (the seventh audit's longer and wider cases catch it there too)
    monkeypatch.setattr(checks, "_assert_greedy", lambda *a, **k: None)
    later = {(1, 2, 5, 40), (1, 20, 9, 3), (6, 1, 1024, 3)}
    assert later <= set(sh.BOUNDARY_DECODER_EXTRA)
    monkeypatch.setattr(sh, "BOUNDARY_DECODER_EXTRA", tuple(c for c in sh.BOUNDARY_DECODER_EXTRA if c not in later))
    monkeypatch.setattr(sh, "BOUNDARY_CONFIGS", tuple(c for i, c in enumerate(sh.BOUNDARY_CONFIGS) if i not in sh.WIDTH_CONFIGS))
    assert check_kernel(wrong(), checks=["cache_modes"], profile="quick", shrink=False, seed=2).verdict == "PASS"


def test_no_new_tokens_means_no_step_logits():
    """``max_new_tokens = 0`` must return step logits [B, 0, V]: the shape was checked only when
    some step agreed with the reference, and with no step none did."""
    from plga.conformance import checks
    from plga.conformance.adapter import GenerateOutput
    from plga.conformance.tolerance import ConformanceFailure

    class Truth:
        tokens = np.array([[5, 6]])
        step_logits = np.zeros((1, 0, 7))

    ctx = checks.Context.__new__(checks.Context)
    one_step = GenerateOutput(torch.tensor([[5, 6]]), torch.zeros(1, 1, 7))
    with pytest.raises(ConformanceFailure, match=r"step logits shape \(1, 1, 7\)"):
        checks._generation_compare(ctx, one_step, Truth, [], what="kv decoding", note="")
    checks._generation_compare(ctx, GenerateOutput(torch.tensor([[5, 6]]), torch.zeros(1, 0, 7)), Truth, [],
                               what="kv decoding", note="")


def test_caches_grow_past_page_sizes_while_decoding(monkeypatch):
    """A third audit: no case grew a KV cache past 32, 64, 128 or 256 keys during decoding (only
    in the prompt pass), so a paged cache whose decoding steps allocate the wrong page passed."""
    from plga.conformance.controls import CONTROLS

    report = check_kernel(CONTROLS["kv_page_aliased"].make(), checks=["cache_modes"], dtypes=["float32"], profile="quick",
                          shrink=False)
    assert report.failed_checks() == {"cache_modes"}, report.summary()
    # negative control: the boundary cases before (none crosses a page while decoding)
    monkeypatch.setattr(sh, "BOUNDARY_DECODER_EXTRA", sh.BOUNDARY_DECODER_EXTRA[:7])
    report = check_kernel(CONTROLS["kv_page_aliased"].make(), checks=["cache_modes"], dtypes=["float32"], profile="quick",
                          shrink=False)
    assert report.verdict == "PASS", report.summary()
