"""Concrete-decoder checks on the real reference decoder, each with a negative control that fails."""

from __future__ import annotations

import pytest

from plga.proofs_bridge.concrete import lean_witness_gap, uncollapsed_drift
from plga.proofs_bridge.handwritten import EVIDENCE, HANDWRITTEN, CheckFailure, Ctx

#: Theorem → the mutation that breaks what it states (G before RoPE, a lossy cache, no collapse).
NEGATIVE = {
    "headRow_eq_sdpa": "g before rope",
    "frozenLayer_eq_sdpaLayer": "g before rope",
    "frozenDecoder_eq_sdpaDecoder": "g before rope",
    "frozenDecoder_prefixConsistentShaped": "cache drops a position",
    "plgaGenerator_const": "learner not collapsed",
    "generatedDecoder_eq_frozen": "learner not collapsed",
    "collapsed_prefixConsistentShaped": "learner not collapsed",
    "generatedLayer_not_prefixConsistent": "operator frozen at the prefix's Gram",
}


def test_every_concrete_check_has_a_negative_control():
    assert {n for n, e in EVIDENCE.items() if e == "concrete-decoder"} == set(NEGATIVE)


@pytest.mark.parametrize("name", sorted(NEGATIVE))
def test_concrete_check_passes(name):
    r = HANDWRITTEN[name](Ctx(max_examples=10))
    assert r.examples >= 1 and r.worst_error <= 1e-10


@pytest.mark.parametrize("name", sorted(NEGATIVE))
def test_concrete_check_rejects_its_mutation(name):
    with pytest.raises(CheckFailure):
        HANDWRITTEN[name](Ctx(max_examples=10, mutation=NEGATIVE[name]))


def test_cached_mutation_also_caught_on_the_collapsed_model():
    with pytest.raises(CheckFailure):
        HANDWRITTEN["collapsed_prefixConsistentShaped"](Ctx(max_examples=10, mutation="cache drops a position"))


def test_uncollapsed_decoder_is_not_prefix_consistent():
    """(c) measured: appending tokens moves earlier rows of the random model far beyond rounding,
    and not at all once its operators are frozen."""
    assert uncollapsed_drift(0) > 1e-6
    assert uncollapsed_drift(0, frozen=True) <= 1e-10


def test_the_lean_witness_moves_row_one():
    assert lean_witness_gap() > 1e-3
    assert lean_witness_gap(frozen=True) == 0.0
