"""Symbolic evidence: prove derived equalities with sympy on symbolic matrices of small sizes.

Every ℕ size is instantiated at 1..3 (other ℕ variables at 0..3), indices and finite sets are
enumerated, and every real entry becomes a sympy symbol (positive/nonnegative when a
hypothesis says so; equality hypotheses are substituted). Project definitions are unfolded
from their Lean bodies (or from :data:`.unfold.MIRRORS`). The statement is *proved* for those
instances when every entry of LHS − RHS simplifies to 0. This is a third level of evidence,
between "numerically checked" and "kernel-checked": exact, but only at the sizes tried.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy as sp

from . import syntax as S
from .backends import Exact, FinsetV
from .elaborate import REAL, Outside
from .evaluate import Evaluator, FinsetFam, Impl
from .statement import Statement

MAX_INSTANCES = 12


@dataclass
class SymbolicResult:
    status: str  # proved | not proved | n/a
    instances: int = 0
    message: str = ""


def _zero(d: Any) -> bool:
    if d == 0:
        return True
    d = sp.sympify(d)
    steps = (
        sp.expand,
        lambda e: sp.cancel(sp.together(sp.expand(e))),
        lambda e: sp.simplify(sp.powsimp(sp.expand(e), force=True)),
        lambda e: sp.simplify(sp.expand_trig(e)),
        sp.simplify,
    )
    for f in steps:
        try:
            if f(d) == 0:
                return True
        except (TypeError, ValueError, NotImplementedError, RecursionError):
            continue
    return False


def is_equational(node: S.Node) -> bool:
    """Conclusions made of equalities under ∀ (finite) and ∧: what the prover attempts."""
    if isinstance(node, S.Rel):
        return node.op == "="
    if isinstance(node, S.Forall):
        return is_equational(node.body)
    if isinstance(node, S.Logic) and node.op == "∧":
        return is_equational(node.left) and is_equational(node.right)
    return False


class _Prover(Evaluator):
    """Evaluator whose propositions collect symbolic differences instead of deciding them."""

    def __init__(self, *a: Any, **k: Any):
        super().__init__(*a, **k)
        self.diffs: list[tuple[str, Any]] = []

    def truth(self, node: S.Node, env: dict[str, Any]) -> bool:
        if isinstance(node, S.Rel) and node.op == "=":
            lt = self.ty(node.left)
            a, b = self.value(node.left, env), self.value(node.right, env)
            if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)):
                self.diffs.append((S.show(node), sp.Integer(int(a) - int(b))))
            elif lt.kind == "Finset":
                self.diffs.append((S.show(node), sp.Integer(0 if a == b else 1)))
            else:
                a, b = self.real(a), self.real(b)
                for x, y in zip(np.asarray(a, dtype=object).flat, np.asarray(b, dtype=object).flat, strict=False):
                    self.diffs.append((S.show(node), x - y))
            return True
        if isinstance(node, S.Logic) and node.op == "∧":
            return self.truth(node.left, env) and self.truth(node.right, env)
        if isinstance(node, S.Forall):
            for a in self._assignments(node, env):
                self.truth(node.body, {**env, **a})
            return True
        raise Outside(f"not an equation: {S.show(node)}")


def _symbols_for(stmt: Statement, env: dict[str, Any], ev: Evaluator) -> dict[str, Any]:
    """Symbolic values for the real-valued variables, with assumptions from the rules."""
    assume: dict[str, dict[str, bool]] = {}
    entry_assume: dict[str, dict[str, bool]] = {}
    for h in stmt.hyps:
        r = h.rule
        if r is None or r.op not in ("lower",) or not isinstance(r.other, S.Num) or r.other.text != "0":
            continue
        key = "positive" if r.strict else "nonnegative"
        (entry_assume if r.index else assume).setdefault(r.target, {})[key] = True
    out: dict[str, Any] = {}
    for v in stmt.vars:
        if v.name in env:
            continue
        if v.ty == REAL:
            out[v.name] = np.asarray(sp.Symbol(v.name, real=True, **assume.get(v.name, {})), dtype=object)
            continue
        shape = ev.shape(v.ty, env)
        arr = np.empty(shape, dtype=object)
        kw = {"real": True, **entry_assume.get(v.name, {})}
        for idx in np.ndindex(shape):
            arr[idx] = sp.Symbol(f"{v.name}_{'_'.join(map(str, idx))}", **kw)
        out[v.name] = arr
    return out


def _discrete_instances(stmt: Statement, ev: Evaluator) -> list[dict[str, Any]]:
    """Assignments of the sizes, naturals, indices and finite sets (small, enumerated)."""
    envs: list[dict[str, Any]] = [{}]
    for name in stmt.order:
        v = stmt.var(name)
        new: list[dict[str, Any]] = []
        for env in envs:
            if v.kind == "size":
                lo = stmt.size_lower.get(name, 1)
                for h in stmt.hyps:
                    if h.rule is not None and h.rule.op == "nat_lower" and h.rule.target == name:
                        b = ev.value(h.rule.other, env)
                        lo = max(lo, int(b) + (1 if h.rule.strict else 0))
                vals = list(range(max(lo, 1), max(lo, 1) + 3))
            elif v.kind == "nat":
                vals = list(range(0, 4))
            elif v.ty.kind == "Fin":
                vals = list(range(ev.size(v.ty.args[0], env)))
            elif v.ty.kind == "Finset":
                n = ev.size(v.ty.args[0].args[0], env)
                vals = [FinsetV(n, frozenset(c)) for k in range(n + 1) for c in itertools.combinations(range(n), k)]
            elif v.ty.kind == "Fun" and v.ty.args[1].kind == "Finset":
                rows = ev.size(v.ty.args[0].args[0], env)
                n = ev.size(v.ty.args[1].args[0].args[0], env)
                full, empty = frozenset(range(n)), frozenset()
                causal = tuple(FinsetV(n, frozenset(range(min(t + 1, n)))) for t in range(rows))
                vals = [FinsetFam(tuple(FinsetV(n, full) for _ in range(rows))), FinsetFam(causal),
                        FinsetFam(tuple(FinsetV(n, empty) for _ in range(rows)))]
            else:
                new.append(env)
                continue
            for x in vals:
                new.append({**env, name: x})
        envs = new
    # keep instances satisfying the discrete hypotheses (membership, nonempty)
    kept = []
    for env in envs:
        ok = True
        for h in stmt.hyps:
            r = h.rule
            if r is None or r.op not in ("mem", "nonmem", "nonempty"):
                continue
            s = env[r.target]
            if r.op == "nonempty":
                ok = ok and bool(s.elems)
            else:
                i = env[r.other.id]
                ok = ok and ((i in s.elems) == (r.op == "mem"))
        if ok:
            kept.append(env)
    # spread the budget over sizes: smallest first, then every k-th
    if len(kept) > MAX_INSTANCES:
        step = len(kept) / MAX_INSTANCES
        kept = [kept[int(k * step)] for k in range(MAX_INSTANCES)]
    return kept


def prove(stmt: Statement, impls: dict[str, Impl]) -> SymbolicResult:
    """Try to prove ``stmt`` symbolically; ``n/a`` when it is not an equation sympy can evaluate."""
    if not is_equational(stmt.concl):
        return SymbolicResult("n/a", 0, "not an equation")
    backend = Exact("sy")
    ev = _Prover(stmt.typer, backend, impls, unfold=True)
    try:
        instances = _discrete_instances(stmt, ev)
    except (Outside, KeyError) as exc:
        return SymbolicResult("n/a", 0, f"cannot enumerate instances: {exc}")
    tried = 0
    for env in instances:
        syms = _symbols_for(stmt, env, ev)
        full = {**env, **syms}
        # equality hypotheses: substitute
        try:
            for h in stmt.hyps:
                r = h.rule
                if r is None:
                    continue
                if r.op == "copy":
                    full[r.target] = full[r.other.id]
                elif r.op == "set":
                    full[r.target] = ev.value(r.other, full)
                elif r.op == "sum":
                    arr = np.array(full[r.target], dtype=object)
                    total = ev.value(r.other, full)
                    arr[-1] = np.asarray(total, dtype=object)[()] - sum(arr[:-1], sp.Integer(0))
                    full[r.target] = arr
            ev.diffs.clear()
            ev.truth(stmt.concl, full)
        except Outside as exc:
            return SymbolicResult("n/a", tried, f"no symbolic evaluation: {exc}")
        except (TypeError, ValueError, NotImplementedError) as exc:
            return SymbolicResult("n/a", tried, f"no symbolic evaluation: {type(exc).__name__}: {exc}")
        for text, d in ev.diffs:
            if not _zero(d):
                sizes = {k: v for k, v in env.items() if isinstance(v, int)}
                return SymbolicResult("not proved", tried, f"{text}: difference {sp.sstr(sp.simplify(d))[:200]} ≠ 0 at {sizes}")
        tried += 1
    if tried == 0:
        return SymbolicResult("n/a", 0, "no instance satisfies the hypotheses")
    return SymbolicResult("proved", tried, f"difference simplifies to 0 on {tried} instances (sizes ≤ 3)")
