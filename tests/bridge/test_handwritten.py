"""Hand-written checks: each passes on the reference, each fails on its negative control, and
the registry is exact."""

from __future__ import annotations

import pytest

from plga.proofs_bridge.handwritten import EVIDENCE, HANDWRITTEN, NEGATIVE, CheckFailure, Ctx, check

HAND = sorted(n for n, e in EVIDENCE.items() if e == "handwritten")


def test_every_handwritten_check_has_a_negative_control():
    assert set(NEGATIVE) == set(HAND)


@pytest.mark.parametrize("name", HAND)
def test_handwritten_check_passes(name):
    r = HANDWRITTEN[name](Ctx(max_examples=8))
    assert r.examples >= 1 and r.worst_error >= 0.0


@pytest.mark.parametrize("name", HAND)
def test_handwritten_check_rejects_its_mutation(name):
    with pytest.raises(CheckFailure):
        HANDWRITTEN[name](Ctx(max_examples=8, mutation=NEGATIVE[name]))


def test_a_mutation_changes_only_the_named_function():
    from plga.reference import spec

    ctx = Ctx(mutation="softmax unnormalized")
    assert ctx.spec.softmax is not spec.softmax and ctx.spec.rot is spec.rot
    assert Ctx().spec is spec


def test_unknown_mutation_is_refused():
    with pytest.raises(ValueError):
        Ctx(mutation="no such mutation")


def test_duplicate_registration_rejected():
    with pytest.raises(ValueError):
        check("online_causal")(lambda ctx: None)
