"""Decoders an independent audit wrote against the suite (:mod:`.redteam_decoders`). Each wrong one
got PASS before — one-token prompts, 5+ layers, 4+ residual units, more than 8 heads, a vocabulary
past 256, the last position of the context, head dimension 64, kv declared without kvg,
collapsed decoding with a G other than the prompt's — and must FAIL now; the correct ones
(a float64 chain, no G_LM returned) must still PASS."""

from __future__ import annotations

import pytest

from plga.conformance import check_kernel

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
