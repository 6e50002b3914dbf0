"""Negative controls: every well-typed, non-equivalent mutant of a derived statement fails."""

from __future__ import annotations

from plga.proofs_bridge.derived import run_derived
from plga.proofs_bridge.mutants import mutants
from plga.proofs_bridge.runner import Bridge
from plga.proofs_bridge.symbolic import prove

#: Mutants that are still theorems, with the reason (a redundant hypothesis).
EQUIVALENT = {
    ("maskedSoftmax_nonneg", "drop hypothesis"): "empty J gives the zero vector, which is still ≥ 0",
    ("maskedSoftmax_pos", "drop hypothesis"): "hi : i ∈ J already makes J nonempty",
}


def _check_all(bridge: Bridge, max_examples: int = 60) -> tuple[dict, dict]:
    survivors, counts = {}, {"rejected": 0, "ill-typed": 0, "equivalent": 0, "documented": 0}
    for e in bridge.catalog.theorems():
        if bridge.kind(e) != "derived":
            continue
        for m in mutants(bridge.statement(e)):
            if m.stmt is None:
                counts["ill-typed"] += 1
                continue
            if prove(m.stmt, bridge.impls).status == "proved":
                counts["equivalent"] += 1
                continue
            if (m.theorem, m.operator) in EQUIVALENT and m.site.startswith("h"):
                counts["documented"] += 1
                continue
            out = run_derived(m.stmt, bridge.impls, max_examples=max_examples)
            if out.status != "fail":  # a hard-to-reach counterexample: search longer
                out = run_derived(m.stmt, bridge.impls, max_examples=10 * max_examples)
            if out.status == "fail":
                counts["rejected"] += 1
            else:
                survivors[(m.theorem, m.operator, m.site)] = f"{out.status}: {out.message[:200]}"
    return survivors, counts


def test_fixture_mutants_rejected(good_tree):
    survivors, counts = _check_all(Bridge(good_tree))
    assert survivors == {}
    assert counts["rejected"] >= 5


def test_real_mutants_rejected(real_bridge):
    survivors, counts = _check_all(real_bridge)
    assert survivors == {}
    assert counts["rejected"] > 50
