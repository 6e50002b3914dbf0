"""Derived checks: the statement itself, evaluated over the reference in float64 and mpmath."""

from __future__ import annotations

import math

import mpmath
from hypothesis import given, settings
from hypothesis import strategies as st

from plga.proofs_bridge.backends import Exact
from plga.proofs_bridge.derived import lift, run_derived
from plga.proofs_bridge.evaluate import Evaluator
from plga.proofs_bridge.parser import parse_header
from plga.proofs_bridge.runner import (
    Bridge,
    render_formalized_table,
    render_table,
    run_all,
    summary,
)
from plga.proofs_bridge.statement import Statement


def _fixture_bridge(tree):
    return Bridge(tree)


def test_fixture_theorems_all_derived_and_pass(good_tree):
    b = _fixture_bridge(good_tree)
    for e in b.catalog.theorems():
        assert b.kind(e) == "derived", e.name
        out = run_derived(b.statement(e), b.impls, max_examples=15)
        assert out.status == "pass", (e.name, out.message)
        assert math.isfinite(out.worst_error)


def _statement(b, text):
    h = parse_header(text)
    return Statement.build(h.name, h.binders, h.type, b.sigs)


def test_false_statements_fail(good_tree):
    b = _fixture_bridge(good_tree)
    for text in [
        "theorem f1 {n : ℕ} [NeZero n] (x : Fin n → ℝ) : ∑ i, softmax x i = 2",
        "theorem f2 {S d : ℕ} (Q K : Matrix (Fin S) (Fin d) ℝ) : Q * Kᵀ = K * Qᵀ",
        "theorem f3 (u : ℝ) : iswiglu u ≤ 0",
        "theorem f4 {d : ℕ} (M : Matrix (Fin d) (Fin d) ℝ) (ε : ℝ) (i j : Fin d) : 0 < iswiglu (M i j) + ε",
    ]:
        out = run_derived(_statement(b, text), b.impls, max_examples=50)
        assert out.status == "fail", (text, out)


def test_lean_semantics_division_by_zero(good_tree):
    b = _fixture_bridge(good_tree)
    # rowMean of a size-0 row is 0 by x / 0 = 0; here: the Lean convention on a real division
    out = run_derived(_statement(b, "theorem z (x : ℝ) : x / 0 = 0"), b.impls, max_examples=10)
    assert out.status == "pass"


def test_strategy_satisfies_hypotheses_by_construction(good_tree):
    b = _fixture_bridge(good_tree)
    stmt = _statement(b, "theorem h {d : ℕ} (N : Matrix (Fin d) (Fin d) ℝ) (ε : ℝ) (hN : ∀ i j, 0 ≤ N i j) "
                         "(hd : ∀ i, ε ≤ N i i) (G Gc : Matrix (Fin d) (Fin d) ℝ) (hG : G = Gc) "
                         "(J : Finset (Fin d)) (v : Fin d) (hv : v ∈ J) (α : Fin d → ℝ) (hα : ∑ j, α j = 0) : "
                         "0 ≤ Matrix.trace (N ^ 2)")
    assert all(h.rule is not None for h in stmt.hyps)

    @settings(max_examples=30, database=None)
    @given(st.data())
    def prop(data):
        env = stmt.draw(data.draw)
        with mpmath.workdps(50):
            ev = Evaluator(stmt.typer, Exact("mp"), b.impls)
            menv = lift(env, ev.b)
            for h in stmt.hyps:
                assert ev.truth(h.node, menv), h.name

    prop()


def test_real_formal_all_checks(real_bridge):
    res = run_all(max_examples=8, symbolic=False)
    s = summary(res)
    assert s["derived_fraction"] >= 0.6
    bad = {r.name: r.message for r in res if r.status != "pass"}
    assert bad == {}
    table = render_table(res)
    assert "derived:" in table and "algebraic identities proved symbolically" in table


def test_formalized_table(real_bridge):
    t = render_formalized_table()
    assert t.startswith("| File | Paper result | Theorems | Python check |")
    assert "`Plga/Attention.lean`" in t or "Attention.lean" in t
