"""Negative controls: mutate parsed statements and show the derived check rejects each mutant.

Operators (applied to the parsed tree, one site at a time): drop a transpose, swap the factors
of a product, flip an inequality of the conclusion, weaken a hypothesis (drop it, or make a
strict one non-strict). A mutant that no longer type-checks is not a statement (Lean would
reject it) and is skipped; one that sympy proves is an equivalent mutant and is skipped too.
As in array-api-tests' meta-tests, every remaining mutant must make the check fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from . import syntax as S
from .elaborate import Outside
from .statement import Hyp, Statement

FLIP = {"≤": "≥", "≥": "≤", "<": ">", ">": "<"}


@dataclass
class Mutant:
    theorem: str
    operator: str
    site: str
    stmt: Statement | None  # None: the mutant is ill-typed
    reason: str = ""


def _conclusion_mutants(stmt: Statement) -> Iterator[tuple[str, str, S.Node]]:
    concl = stmt.concl
    nodes = list(S.walk(concl))
    for k, n in enumerate(nodes):
        if isinstance(n, S.Postfix) and n.op == "ᵀ":
            yield "drop transpose", S.show(n), S.replace_at(concl, k, lambda m: m.body)
        if isinstance(n, S.BinOp) and n.op == "*" and _noncommutative(stmt, n):
            yield "swap product", S.show(n), S.replace_at(concl, k, lambda m: S.BinOp("*", m.right, m.left))
        if isinstance(n, S.Rel) and n.op in FLIP:
            yield "flip inequality", S.show(n), S.replace_at(concl, k, lambda m: S.Rel(FLIP[m.op], m.left, m.right))


def _noncommutative(stmt: Statement, n: S.BinOp) -> bool:
    """Only matrix products can change when swapped (ℝ and pointwise products commute)."""
    from .elaborate import is_mat_like

    t = stmt.typer.types.get(id(n))
    return t is not None and t.kind == "Mat" and is_mat_like(stmt.typer.types[id(n.left)])


def mutants(stmt: Statement) -> Iterator[Mutant]:
    for op, site, concl in _conclusion_mutants(stmt):
        try:
            yield Mutant(stmt.name, op, site, stmt.with_changes(concl=concl))
        except Outside as exc:
            yield Mutant(stmt.name, op, site, None, str(exc))
    for k, h in enumerate(stmt.hyps):
        rest = [x for j, x in enumerate(stmt.hyps) if j != k]
        try:
            yield Mutant(stmt.name, "drop hypothesis", f"{h.name} : {S.show(h.node)}", stmt.with_changes(hyps=rest))
        except Outside as exc:
            yield Mutant(stmt.name, "drop hypothesis", h.name, None, str(exc))
        weak = _non_strict(h.node)
        if weak is not None:
            hyps = [Hyp(x.name, weak if j == k else x.node) for j, x in enumerate(stmt.hyps)]
            try:
                yield Mutant(stmt.name, "weaken hypothesis", f"{h.name} : {S.show(weak)}", stmt.with_changes(hyps=hyps))
            except Outside as exc:
                yield Mutant(stmt.name, "weaken hypothesis", h.name, None, str(exc))


def _non_strict(node: S.Node) -> S.Node | None:
    if isinstance(node, S.Rel) and node.op in ("<", ">"):
        return S.Rel({"<": "≤", ">": "≥"}[node.op], node.left, node.right)
    if isinstance(node, S.Forall):
        inner = _non_strict(node.body)
        return S.Forall(node.binders, inner) if inner is not None else None
    return None
