"""A theorem as a checkable statement: variables, hypotheses (with construction rules) and a
typed conclusion, plus the Hypothesis strategy that builds inputs satisfying the hypotheses.

Hypotheses become *construction rules* where their shape allows (``0 < ε`` → draw ε positive;
``G = Gc`` → reuse the array; ``v ∈ J`` → draw J containing v; ``∀ i j, 0 ≤ N i j`` → draw N
entrywise nonnegative; ``∑ j, α j = 0`` → fix the last entry), otherwise a *filter*
(``hypothesis.assume``), always re-checked in mpmath before the conclusion is evaluated.
Reals are drawn as dyadic rationals k/4096 in [−8, 8]: bounded (no float64 overflow in exp of
a few of them), exactly representable, and closed under the exact sums the rules need.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from . import syntax as S
from .elaborate import INT, NAT, PROP, REAL, TYPE, Env, IllTyped, Outside, Sig, Ty, Typer, to_ty

SCALE = 4096
BOUND = 8 * SCALE  # |k| ≤ BOUND: reals in [-8, 8]
#: Awkward values drawn one time in five (0 makes sin θ = 0, rows constant, products vanish).
SPECIAL = (0, SCALE, -SCALE, BOUND, -BOUND, SCALE // 2)


def real_ints() -> st.SearchStrategy[int]:
    """k for a real k/SCALE: mostly uniform in [-BOUND, BOUND], sometimes a special value."""
    return st.integers(0, 4).flatmap(lambda r: st.sampled_from(SPECIAL) if r == 0 else st.integers(-BOUND, BOUND))
MAX_SIZE = 5


@dataclass
class Var:
    name: str
    ty: Ty
    kind: str  # "size" | "nat" | "data"


@dataclass
class Hyp:
    name: str
    node: S.Node
    rule: Rule | None = None


@dataclass
class Rule:
    """How a hypothesis is satisfied by construction.

    ``op``: ``lower``/``upper`` (scalar or entrywise bound, ``strict``), ``ne``, ``nonzero``,
    ``copy``, ``set``, ``sum``, ``mem``, ``nonmem``, ``nonempty``, ``nat_lower``.
    """

    op: str
    target: str
    other: S.Node | None = None
    strict: bool = False
    index: tuple[str, ...] = ()  # entrywise: the ∀-bound names addressing the target's entry
    quant: S.Forall | None = None
    deps: frozenset[str] = frozenset()


@dataclass
class Statement:
    """A parsed theorem ready to check."""

    name: str
    vars: list[Var]
    hyps: list[Hyp]
    concl: S.Node
    sigs: dict[str, Sig]
    size_lower: dict[str, int] = field(default_factory=dict)
    typer: Typer | None = None
    order: list[str] = field(default_factory=list)

    # -- construction --
    @classmethod
    def build(cls, name: str, binders: tuple[S.Binder, ...], concl: S.Node, sigs: dict[str, Sig]) -> Statement:
        tvars = frozenset(n for b in binders for n in b.names if to_ty(b.type) == TYPE)
        if tvars:
            raise Outside(f"type-polymorphic statement (binders {sorted(tvars)})")
        vars_: list[Var] = []
        hyps: list[Hyp] = []
        lower: dict[str, int] = {}
        for b in binders:
            if b.kind == "inst":
                if isinstance(b.type, S.App) and isinstance(b.type.fn, S.Name) and b.type.fn.id == "NeZero" \
                        and isinstance(b.type.args[0], S.Name):
                    n = b.type.args[0].id
                    lower[n] = max(lower.get(n, 0), 1)
                    continue
                raise Outside(f"instance binder {S.show_binder(b)}")
            t = to_ty(b.type, tvars)
            for n in b.names:
                if t is None:
                    hyps.append(Hyp(n, b.type))
                else:
                    vars_.append(Var(n, t, "data"))
        # intro: leading ∀ over non-enumerable types and → premises of the conclusion
        k = 0
        while True:
            if isinstance(concl, S.Logic) and concl.op == "→":
                hyps.append(Hyp(f"h_intro{k}", concl.left))
                concl, k = concl.right, k + 1
                continue
            if isinstance(concl, S.Forall):
                probe = Typer(sigs)
                env = Env({v.name: v.ty for v in vars_}, sigs)
                try:
                    probe._bind_quant(concl, env)
                except Outside:
                    break
                intro = []
                for b in concl.binders:
                    bt = probe.binder_types[(id(concl), b.name)]
                    if bt.kind in ("Fin", "Finset") or b.domain is not None:
                        break
                    intro.append((b, bt))
                if not intro:
                    break
                for b, bt in intro:
                    vars_.append(Var(b.name, bt, "data"))
                rest = concl.binders[len(intro):]
                concl = S.Forall(rest, concl.body) if rest else concl.body
                continue
            break
        sizes = set()
        for v in vars_:
            sizes |= {s.name for s in _ty_sizes(v.ty)}
        for v in vars_:
            if v.ty == NAT:
                v.kind = "size" if v.name in sizes else "nat"
            elif v.ty.kind in ("Fun", "Prod", "List", "Option", "Set", "TVar") and not _arrayish(v.ty):
                raise Outside(f"variable {v.name} : {v.ty} cannot be drawn")
            elif v.ty in (INT,) or v.ty.kind == "Complex":
                raise Outside(f"variable {v.name} : {v.ty} is outside the fragment")
        st_ = cls(name, vars_, hyps, concl, sigs, lower)
        st_.retype()
        for node in [h.node for h in st_.hyps] + [st_.concl]:
            st_.check_decidable(node)
        for h in st_.hyps:
            h.rule = st_.classify(h.node)
            if h.rule is None and _is_equation(h.node):
                raise Outside(f"hypothesis {h.name} : {S.show(h.node)} is an equation no rule constructs "
                              "(a filter would reject almost every draw)")
        st_.order = st_._order()
        return st_

    def check_decidable(self, node: S.Node) -> None:
        """Quantifiers must range over finite index types (enumerated at run time)."""
        for n in S.walk(node):
            if isinstance(n, (S.Forall, S.Exists)):
                for b in n.binders:
                    if b.domain is not None:
                        continue
                    t = self.typer.binder_types.get((id(n), b.name))
                    if t is None or not (t.kind == "Fin" or (t.kind == "Finset" and t.args[0].kind == "Fin")):
                        raise Outside(f"quantifier over {t} in {S.show(n)}")

    def retype(self) -> None:
        """Type hypotheses and conclusion (raises :class:`Outside` / :class:`IllTyped`)."""
        typer = Typer(self.sigs)
        env = Env({v.name: v.ty for v in self.vars}, self.sigs)
        for h in self.hyps:
            if typer.infer(h.node, env, PROP) != PROP:
                raise IllTyped(f"hypothesis {h.name} is not a proposition")
        if typer.infer(self.concl, env, PROP) != PROP:
            raise IllTyped("conclusion is not a proposition")
        self.typer = typer

    def with_changes(self, concl: S.Node | None = None, hyps: list[Hyp] | None = None) -> Statement:
        """A copy with another conclusion and/or hypotheses (for mutants); re-typed."""
        new = Statement(self.name, list(self.vars), [Hyp(h.name, h.node) for h in (hyps if hyps is not None else self.hyps)],
                        concl if concl is not None else self.concl, self.sigs, dict(self.size_lower))
        new.retype()
        for h in new.hyps:
            h.rule = new.classify(h.node)
        new.order = new._order()
        return new

    # -- rules --
    def var(self, name: str) -> Var | None:
        return next((v for v in self.vars if v.name == name), None)

    def classify(self, node: S.Node) -> Rule | None:
        names = {v.name for v in self.vars}

        def deps(n: S.Node | None) -> frozenset[str]:
            return frozenset(S.free_names(n) & names) if n is not None else frozenset()

        if isinstance(node, S.Rel):
            op, lhs, rhs = node.op, node.left, node.right
            if op in (">", "≥"):
                op, lhs, rhs = {">": "<", "≥": "≤"}[op], rhs, lhs
            if op in ("<", "≤"):
                if isinstance(rhs, S.Name) and rhs.id in names and rhs.id not in deps(lhs) and self._scalar(rhs.id):
                    if self.var(rhs.id).ty == NAT:
                        return Rule("nat_lower", rhs.id, lhs, op == "<", deps=deps(lhs))
                    return Rule("lower", rhs.id, lhs, op == "<", deps=deps(lhs))
                if isinstance(lhs, S.Name) and lhs.id in names and lhs.id not in deps(rhs) and self._scalar(lhs.id):
                    if self.var(lhs.id).ty == NAT:
                        return None
                    return Rule("upper", lhs.id, rhs, op == "<", deps=deps(rhs))
            if op == "≠":
                for me, other in ((lhs, rhs), (rhs, lhs)):
                    if isinstance(me, S.Name) and me.id in names and me.id not in deps(other):
                        if self._scalar(me.id) and self.var(me.id).ty == REAL:
                            return Rule("ne", me.id, other, deps=deps(other))
                        if isinstance(other, S.Num) and other.text == "0" and self._array(me.id):
                            return Rule("nonzero", me.id)
            if op == "=":
                if isinstance(lhs, S.Name) and isinstance(rhs, S.Name) and lhs.id in names and rhs.id in names:
                    order = [v.name for v in self.vars]
                    a, b = sorted([lhs.id, rhs.id], key=order.index)
                    return Rule("copy", b, S.Name(a), deps=frozenset({a}))
                for me, other in ((lhs, rhs), (rhs, lhs)):
                    if isinstance(me, S.BigSum) and len(me.binders) == 1 and me.binders[0].domain is None:
                        body = me.body
                        j = me.binders[0].name
                        if isinstance(body, S.App) and isinstance(body.fn, S.Name) and body.fn.id in names \
                                and body.args == (S.Name(j),) and body.fn.id not in deps(other):
                            return Rule("sum", body.fn.id, other, deps=deps(other))
                    if isinstance(me, S.Name) and me.id in names and me.id not in deps(other):
                        return Rule("set", me.id, other, deps=deps(other))
            if op in ("∈", "∉") and isinstance(rhs, S.Name) and rhs.id in names and isinstance(lhs, S.Name):
                return Rule("mem" if op == "∈" else "nonmem", rhs.id, lhs, deps=deps(lhs))
        if isinstance(node, S.Forall) and all(b.domain is None for b in node.binders):
            bound = [b.name for b in node.binders]
            body = node.body
            if isinstance(body, S.Rel) and body.op in ("<", "≤", ">", "≥"):
                op, lhs, rhs = body.op, body.left, body.right
                if op in (">", "≥"):
                    op, lhs, rhs = {">": "<", "≥": "≤"}[op], rhs, lhs
                for me, other, kind in ((rhs, lhs, "lower"), (lhs, rhs, "upper")):
                    if isinstance(me, S.App) and isinstance(me.fn, S.Name) and me.fn.id in names \
                            and all(isinstance(a, S.Name) and a.id in bound for a in me.args) \
                            and me.fn.id not in deps(other) and self._array(me.fn.id):
                        idx = tuple(a.id for a in me.args)
                        return Rule(kind, me.fn.id, other, op == "<", idx, node, deps=deps(other))
        if isinstance(node, S.App) and isinstance(node.fn, S.Name) and node.fn.id in ("Finset.Nonempty", "Nonempty") \
                and isinstance(node.args[0], S.Name) and node.args[0].id in names:
            return Rule("nonempty", node.args[0].id)
        if isinstance(node, S.Proj) and node.field == "Nonempty" and isinstance(node.body, S.Name):
            return Rule("nonempty", node.body.id)
        if isinstance(node, S.Name) and node.id.endswith(".Nonempty") and node.id.split(".")[0] in names:
            return Rule("nonempty", node.id.split(".")[0])
        return None

    def _scalar(self, name: str) -> bool:
        v = self.var(name)
        return v is not None and v.ty in (REAL, NAT)

    def _array(self, name: str) -> bool:
        v = self.var(name)
        return v is not None and _arrayish(v.ty)

    def _order(self) -> list[str]:
        """Drawing order: sizes, naturals, then the rest topologically by rule dependencies."""
        names = [v.name for v in self.vars]
        edges: dict[str, set[str]] = {n: set() for n in names}
        for h in self.hyps:
            if h.rule is not None:
                edges[h.rule.target] |= set(h.rule.deps) - {h.rule.target}
        # sizes implicitly come before everything typed by them
        rank = {"size": 0, "nat": 1, "data": 2}
        out: list[str] = []
        pending = sorted(names, key=lambda n: (rank[self.var(n).kind], names.index(n)))
        guard = 0
        while pending:
            guard += 1
            for n in pending:
                if edges[n] <= set(out):
                    out.append(n)
                    pending.remove(n)
                    break
            else:  # a cycle: demote the rules of the first pending variable to filters
                n = pending[0]
                for h in self.hyps:
                    if h.rule is not None and h.rule.target == n:
                        h.rule = None
                edges[n] = set()
            if guard > 10_000:  # pragma: no cover
                raise RuntimeError("variable ordering did not converge")
        return out

    # -- the strategy --
    def strategy(self) -> st.SearchStrategy[dict[str, Any]]:
        """A Hypothesis strategy of raw inputs (float64 arrays, ints, Finsets) satisfying the
        rule-hypotheses by construction."""

        @st.composite
        def draw_inputs(draw: Any) -> dict[str, Any]:
            return self.draw(draw)

        return draw_inputs()

    def draw(self, draw: Any) -> dict[str, Any]:
        from .backends import F64, FinsetV
        from .evaluate import Evaluator

        env: dict[str, Any] = {}
        ev = Evaluator(self.typer, F64(), _impls(self.sigs))
        for name in self.order:
            v = self.var(name)
            rules = [h.rule for h in self.hyps if h.rule is not None and h.rule.target == name]
            if v.kind in ("size", "nat"):
                lo = self.size_lower.get(name, 1 if v.kind == "size" else 0)
                hi = MAX_SIZE
                for r in rules:
                    if r.op == "nat_lower":
                        b = ev.value(r.other, env)
                        b = int(b) if isinstance(b, (int, np.integer)) else int(np.ceil(float(np.max(b.v))))
                        lo = max(lo, b + (1 if r.strict else 0))
                hi = max(hi, lo + 2) if lo > hi else hi
                env[name] = draw(st.integers(lo, hi), label=name)
                continue
            fam = v.ty.kind == "Fun" and v.ty.args[1].kind == "Finset"
            shape = ev.shape(v.ty, env) if (_arrayish(v.ty) and v.ty.kind not in ("Fin", "Finset") and not fam) or v.ty == REAL else None
            if v.ty.kind == "Fin":
                n = ev.size(v.ty.args[0], env)
                assume(n > 0)
                env[name] = draw(st.integers(0, n - 1), label=name)
            elif v.ty.kind == "Fun" and v.ty.args[0].kind == "Fin" and v.ty.args[1].kind == "Finset":
                from .evaluate import FinsetFam

                rows_n = ev.size(v.ty.args[0].args[0], env)
                n = ev.size(v.ty.args[1].args[0].args[0], env)
                rows = []
                for k in range(rows_n):
                    elems = draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=n) if n else st.just(set()), label=f"{name}[{k}]")
                    rows.append(FinsetV(n, frozenset(elems)))
                env[name] = FinsetFam(tuple(rows))
            elif v.ty.kind == "Finset":
                n = ev.size(v.ty.args[0].args[0], env)
                env[name] = FinsetV(n, frozenset(draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=n) if n else st.just(set()), label=name)))
            elif shape is not None:
                count = int(np.prod(shape)) if shape else 1
                zero = count > 1 and draw(st.integers(0, 3), label=f"{name}:all-zero?") == 0
                ks = [0] * count if zero else draw(st.lists(real_ints(), min_size=count, max_size=count), label=name)
                env[name] = np.asarray(np.asarray(ks, dtype=np.float64).reshape(shape) / SCALE)
            else:
                raise Outside(f"cannot draw {name} : {v.ty}")
            first_full = True
            for r in rules:
                env[name] = self._apply(r, env, ev, draw, first_full)
                first_full = False
        return env

    def _apply(self, r: Rule, env: dict[str, Any], ev: Any, draw: Any, first: bool) -> Any:
        from .backends import FinsetV, lift

        cur = env[r.target]
        def off(strict: bool, count: int = 1) -> np.ndarray:
            lo = 1 if strict else 0
            k_st = st.integers(0, 4).flatmap(lambda q: st.just(lo) if q == 0 else st.integers(lo, BOUND))
            ks = draw(st.lists(k_st, min_size=count, max_size=count), label=f"{r.target}:offset")
            return np.asarray(ks, dtype=np.float64) / SCALE

        def fval(node: S.Node, extra: dict[str, Any] | None = None) -> Any:
            val = ev.value(node, {**lift(env, ev.b), **(extra or {})})
            if isinstance(val, (int, np.integer)):
                return float(val)
            return val.v

        if r.op in ("lower", "upper") and not r.index:
            b = float(fval(r.other))
            o = float(off(r.strict)[0])
            return np.asarray(b + o if r.op == "lower" else b - o)
        if r.op in ("lower", "upper"):
            arr = np.array(cur, dtype=np.float64)
            dom_nodes = r.quant.binders
            typer = self.typer
            # enumerate the quantified indices; set/repair the addressed entries
            full = first and len(set(r.index)) == arr.ndim == len(r.index)
            sizes = []
            for b in dom_nodes:
                t = typer.binder_types[(id(r.quant), b.name)]
                sizes.append(ev.size(t.args[0], env))
            offs = off(r.strict, int(np.prod(sizes)) if sizes else 1)
            for k, assign in enumerate(np.ndindex(*sizes)):
                a = dict(zip([b.name for b in dom_nodes], assign, strict=True))
                pos = tuple(a[i] for i in r.index)
                bound = float(fval(r.other, a))
                want = bound + offs[k] if r.op == "lower" else bound - offs[k]
                if full:
                    arr[pos] = want
                else:
                    bad = arr[pos] < bound or (r.strict and arr[pos] == bound) if r.op == "lower" else \
                        arr[pos] > bound or (r.strict and arr[pos] == bound)
                    if bad:
                        arr[pos] = want
            return arr
        if r.op == "ne":
            b = float(fval(r.other))
            return np.asarray(b + 1.0) if float(cur) == b else cur
        if r.op == "nonzero":
            arr = np.array(cur, dtype=np.float64)
            if not np.any(arr):
                k = draw(st.integers(0, arr.size - 1), label=f"{r.target}:nonzero")
                arr.flat[k] = 1.0
            return arr
        if r.op == "copy":
            src = env[r.other.id]
            return src.copy() if isinstance(src, np.ndarray) else src
        if r.op == "set":
            val = fval(r.other)
            return np.array(val, dtype=np.float64) if not isinstance(cur, (int, np.integer)) else int(val)
        if r.op == "sum":
            arr = np.array(cur, dtype=np.float64)
            target = Fraction(float(fval(r.other)))
            rest = sum((Fraction(float(x)) for x in arr[:-1]), Fraction(0))
            assume(arr.size > 0)
            arr[-1] = float(target - rest)
            assume(Fraction(float(arr[-1])) == target - rest)
            return arr
        if r.op in ("mem", "nonmem"):
            i = env[r.other.id] if isinstance(r.other, S.Name) else int(ev.value(r.other, env))
            s = set(cur.elems)
            (s.add if r.op == "mem" else s.discard)(i)
            return FinsetV(cur.n, frozenset(s))
        if r.op == "nonempty":
            if not cur.elems:
                assume(cur.n > 0)
                k = draw(st.integers(0, cur.n - 1), label=f"{r.target}:nonempty")
                return FinsetV(cur.n, frozenset({k}))
            return cur
        raise ValueError(f"unknown rule {r.op}")


def _is_equation(node: S.Node) -> bool:
    while isinstance(node, S.Forall):
        node = node.body
    return isinstance(node, S.Rel) and node.op == "="


def _arrayish(t: Ty) -> bool:
    from .elaborate import is_real_valued

    if t.kind == "Fun" and t.args[0].kind == "Fin" and t.args[1].kind == "Finset":
        return True
    return t.kind in ("Mat", "Fin", "Finset") or (t.kind == "Fun" and is_real_valued(t))


def _ty_sizes(t: Ty) -> set[Any]:
    import sympy as sp

    out: set[Any] = set()
    for a in t.args:
        if isinstance(a, Ty):
            out |= _ty_sizes(a)
        elif isinstance(a, sp.Basic):
            out |= a.free_symbols
    return out


_IMPLS_CACHE: dict[int, Any] = {}


def _impls(sigs: dict[str, Sig]) -> Any:
    from .library import implementations

    key = id(sigs)
    hit = _IMPLS_CACHE.get(key)
    if hit is None or hit[0] is not sigs:  # ids are reused after garbage collection
        hit = (sigs, implementations(sigs))
        _IMPLS_CACHE[key] = hit
    return hit[1]
