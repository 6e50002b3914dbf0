"""Hand-written checks: each passes on the reference, and the registry is exact."""

from __future__ import annotations

import pytest

from plga.proofs_bridge.handwritten import HANDWRITTEN, Ctx, check


@pytest.mark.parametrize("name", sorted(HANDWRITTEN))
def test_handwritten_check_passes(name):
    r = HANDWRITTEN[name](Ctx(max_examples=8))
    assert r.examples > 0


def test_duplicate_registration_rejected():
    with pytest.raises(ValueError):
        check("online_causal")(lambda ctx: None)
