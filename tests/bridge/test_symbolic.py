"""Symbolic evidence: sympy proves the algebraic identities at sizes ≤ 3."""

from __future__ import annotations

from plga.proofs_bridge.parser import parse_header
from plga.proofs_bridge.runner import Bridge
from plga.proofs_bridge.statement import Statement
from plga.proofs_bridge.symbolic import prove


def _stmt(b, text):
    h = parse_header(text)
    return Statement.build(h.name, h.binders, h.type, b.sigs)


def test_fixture_identities_proved(good_tree):
    b = Bridge(good_tree)
    for name in ("score_sdpa_special_case", "softmax_sum_one", "lnEps_shift_pos", "absorb_operator_affine"):
        r = prove(b.statement(b.catalog.get(name)), b.impls)
        assert r.status == "proved", (name, r.message)
    assert prove(b.statement(b.catalog.get("iswiglu_nonneg")), b.impls).status == "n/a"


def test_false_identity_not_proved(good_tree):
    b = Bridge(good_tree)
    r = prove(_stmt(b, "theorem w {S d : ℕ} (X : Matrix (Fin S) (Fin d) ℝ) (W G : Matrix (Fin d) (Fin d) ℝ) : "
                       "X * W * G = X * (G * W)"), b.impls)
    assert r.status == "not proved"


def test_every_attempted_real_identity_is_proved(real_bridge):
    bad = {}
    for e in real_bridge.catalog.theorems():
        if real_bridge.kind(e) != "derived":
            continue
        r = prove(real_bridge.statement(e), real_bridge.impls)
        if r.status == "not proved":
            bad[e.name] = r.message
    assert bad == {}
