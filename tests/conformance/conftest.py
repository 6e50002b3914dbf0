"""Fixtures shared by the conformance tests."""

import pytest


@pytest.fixture
def theorem_part_passes(monkeypatch):
    """``plga verify``'s theorem part stubbed to one passing theorem, for tests of its other parts."""
    import plga.proofs_bridge as pb

    monkeypatch.setattr(pb, "run_all", lambda max_examples: [])
    monkeypatch.setattr(pb, "summary", lambda results: {"passed": 1, "theorems": 1, "derived": 1, "proved_symbolically": 0,
                                                       "algebraic_identities": 0})
