"""Evaluate a typed statement over the reference, in float64, mpmath or sympy.

The evaluator walks the syntax tree itself: the statement *is* the check. Project definitions
are calls into :data:`plga.reference.spec.LEAN_NAMES` (and ``online.LEAN_NAMES``) in float64
and mpmath; in sympy they are unfolded from their Lean bodies (or from the subset bodies of
:mod:`.unfold`). Propositions evaluate to booleans; every comparison is recorded with its
residual and tolerance so that the runner can report the worst error.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import sympy as sp

from . import syntax as S
from .backends import FinsetV, Tr
from .elaborate import INT, NAT, REAL, Outside, Sig, Ty, Typer, is_mat_like, is_real_valued


@dataclass
class Record:
    """One comparison made while evaluating a proposition."""

    text: str
    ok: bool
    residual: float
    tol: float


@dataclass
class Impl:
    """How to evaluate a signature: a Python reference function and/or an unfoldable body."""

    sig: Sig
    python: Callable[..., Any] | None = None
    body: S.Node | None = None
    typer: Typer | None = None  # typed body
    extra: dict[str, str] = field(default_factory=dict)  # python kwarg ← Lean implicit name


BUILTINS = {"Real.exp", "Real.log", "Real.sqrt", "Real.sin", "Real.cos", "Real.pi", "Matrix.trace",
            "Matrix.det", "Matrix.transpose", "Matrix.diagonal", "Matrix.dotProduct", "Matrix.mulVec",
            "Matrix.blockDiagonal", "NormedSpace.exp", "Finset.univ"}
PREDICATES = {"Matrix.IsSymm", "Finset.Nonempty"}


@dataclass(frozen=True)
class FinsetFam:
    """A value of ``Fin S → Finset (Fin T)`` (per-row supports); the reference takes the mask."""

    rows: tuple[FinsetV, ...]

    def mask(self) -> np.ndarray:
        return np.stack([r.mask() for r in self.rows]) if self.rows else np.zeros((0, 0), dtype=bool)


class Evaluator:
    """Evaluates nodes typed by ``typer`` with ``backend`` (see :mod:`.backends`)."""

    def __init__(self, typer: Typer, backend: Any, impls: dict[str, Impl], unfold: bool = False):
        self.t = typer
        self.b = backend
        self.impls = impls
        self.unfold = unfold or backend.kind == "sy"
        self.records: list[Record] = []

    # -- sizes and types --
    def size(self, expr: Any, env: dict[str, Any]) -> int:
        expr = sp.sympify(expr)
        if expr.is_Integer:
            return int(expr)
        if expr.is_Symbol:
            return int(env[expr.name])
        return int(expr.subs({s: env[s.name] for s in expr.free_symbols}))

    def ty(self, node: S.Node) -> Ty:
        try:
            return self.t.types[id(node)]
        except KeyError:
            raise Outside(f"untyped node {S.show(node)}") from None

    def shape(self, t: Ty, env: dict[str, Any]) -> tuple[int, ...]:
        if t == REAL:
            return ()
        if t.kind == "Mat":
            return (self.size(t.args[0], env), self.size(t.args[1], env))
        if t.kind == "Fun" and t.args[0].kind == "Fin":
            return (self.size(t.args[0].args[0], env), *self.shape(t.args[1], env))
        raise Outside(f"no array shape for {t}")

    def reshape(self, v: Any, shape: tuple[int, ...]) -> Any:
        if isinstance(v, Tr):
            return Tr(np.asarray(v.v).reshape(shape), v.e)
        a = np.asarray(v, dtype=object).reshape(shape)
        return a

    def real(self, v: Any) -> Any:
        """Promote an ℕ/ℤ value to a real backend constant."""
        if isinstance(v, (int, np.integer)):
            return self.b.const(Fraction(int(v)))
        return v

    # -- values --
    def value(self, node: S.Node, env: dict[str, Any]) -> Any:
        t = self.ty(node)
        if isinstance(node, S.Num):
            return self.numeral(node.text, t, env)
        if isinstance(node, S.Name):
            if node.id in env:
                return env[node.id]
            name = self.t.resolved.get(id(node))
            if name is None:
                raise Outside(f"unknown name {node.id}")
            return self.apply(name, node, [], env)
        if isinstance(node, S.App):
            name = self.t.resolved.get(id(node))
            if name == "Matrix.of":
                return self.value(node.args[0], env)
            if name is not None:
                return self.apply(name, node, list(node.args), env)
            f = self.value(node.fn, env)
            return self.index(f, [self.value(a, env) for a in node.args])
        if isinstance(node, S.Ascribe):
            v = self.value(node.body, env)
            if t.kind in ("Real",) or is_real_valued(t):
                return self.real(v)
            return v
        if isinstance(node, S.BinOp):
            return self.binop(node, t, env)
        if isinstance(node, S.Neg):
            v = self.value(node.body, env)
            return -v if isinstance(v, int) else self.b.neg(v)
        if isinstance(node, S.Postfix):
            v = self.value(node.body, env)
            return self.b.transpose(v) if node.op == "ᵀ" else self.b.inv(self.real(v))
        if isinstance(node, S.Abs):
            v = self.value(node.body, env)
            return abs(v) if isinstance(v, int) else self.b.abs(v)
        if isinstance(node, S.Ite):
            return self.value(node.then if self.truth(node.cond, env) else node.orelse, env)
        if isinstance(node, S.BigSum):
            return self.bigsum(node, t, env)
        if isinstance(node, S.Lam):
            return self.lam(node, env)
        raise Outside(f"cannot evaluate {S.show(node)}")

    def numeral(self, text: str, t: Ty, env: dict[str, Any]) -> Any:
        q = Fraction(text)
        if t in (NAT, INT):
            return int(q)
        if t.kind == "Fin":
            return int(q) % self.size(t.args[0], env)
        if t == REAL:
            return self.b.const(q)
        if t.kind == "Mat":
            m, n = self.shape(t, env)
            return self.b.const(q, (m, n)) if q == 0 else self.b.eye(m, q, n)
        if is_real_valued(t):
            return self.b.const(q, self.shape(t, env))
        raise Outside(f"numeral of type {t}")

    def index(self, f: Any, idx: list[Any]) -> Any:
        if not idx:
            return f
        if isinstance(f, FinsetFam):
            return self.index(f.rows[int(idx[0])], idx[1:])
        if not all(isinstance(i, (int, np.integer)) for i in idx):
            raise Outside("application of a value to non-index arguments")
        return self.b.index(f, tuple(int(i) for i in idx))

    def binop(self, node: S.BinOp, t: Ty, env: dict[str, Any]) -> Any:
        op = node.op
        lt, rt = self.ty(node.left), self.ty(node.right)
        a = self.value(node.left, env)
        b = self.value(node.right, env)
        if t in (NAT, INT) or t.kind == "Fin":
            if op == "+":
                r = a + b
            elif op == "-":
                r = a - b if t != NAT else max(a - b, 0)
            elif op == "*":
                r = a * b
            elif op == "/":
                r = 0 if b == 0 else (a // b if t == NAT else int(a / b))
            elif op == "^":
                r = a**b
            else:
                raise Outside(f"{op} on integers")
            return r % self.size(t.args[0], env) if t.kind == "Fin" else r
        if op == "^":
            if rt == NAT:
                return self.power(a, int(b), t, env)
            return self.b.rpow(self.real(a), self.real(b))
        a, b = self.real(a), self.real(b)
        if op == "+":
            return self.b.add(a, b)
        if op == "-":
            return self.b.sub(a, b)
        if op == "*":
            if t.kind == "Mat" or (is_mat_like(lt) and is_mat_like(rt) and (lt.kind == "Mat" or rt.kind == "Mat")):
                return self.b.matmul(a, b)
            return self.b.mul(a, b)
        if op in ("•", "⊙"):
            return self.b.mul(a, b)
        if op == "/":
            return self.b.div(a, b)
        if op == "*ᵥ":
            n = self.shape(rt, env)[0]
            return self.reshape(self.b.matmul(a, self.reshape(b, (n, 1))), self.shape(t, env))
        if op == "ᵥ*":
            m = self.shape(lt, env)[0]
            return self.reshape(self.b.matmul(self.reshape(a, (1, m)), b), self.shape(t, env))
        if op == "⬝ᵥ":
            n = self.shape(lt, env)[0]
            return self.reshape(self.b.matmul(self.reshape(a, (1, n)), self.reshape(b, (n, 1))), ())
        raise Outside(f"operator {op}")

    def power(self, a: Any, k: int, t: Ty, env: dict[str, Any]) -> Any:
        if t.kind == "Mat":
            n = self.shape(t, env)[0]
            acc = self.b.eye(n, Fraction(1))
            for _ in range(k):
                acc = self.b.matmul(acc, a)
            return acc
        acc = self.b.const(Fraction(1), self.shape(t, env))
        for _ in range(k):
            acc = self.b.mul(acc, a)
        return acc

    def domain(self, t: Ty, env: dict[str, Any]) -> list[Any]:
        if t.kind == "Fin":
            return list(range(self.size(t.args[0], env)))
        if t.kind == "Finset" and t.args[0].kind == "Fin":
            n = self.size(t.args[0].args[0], env)
            return [FinsetV(n, frozenset(c)) for r in range(n + 1) for c in itertools.combinations(range(n), r)]
        raise Outside(f"cannot enumerate {t}")

    def binder_values(self, node: S.Node, b: S.QBinder, env: dict[str, Any], key: str) -> list[Any]:
        if b.domain is not None:
            s = self.value(b.domain, env)
            return sorted(s.elems)
        return self.domain(self.t.binder_types[(id(node), key)], env)

    def bigsum(self, node: S.BigSum, t: Ty, env: dict[str, Any]) -> Any:
        items = []
        for vals in self._assignments(node, env):
            items.append(self.value(node.body, {**env, **vals}))
        if t in (NAT, INT):
            return sum(items)
        return self.b.sum([self.real(i) for i in items], self.shape(t, env))

    def _assignments(self, node: S.Forall | S.Exists | S.BigSum, env: dict[str, Any]):
        def rec(k: int, acc: dict[str, Any]):
            if k == len(node.binders):
                yield dict(acc)
                return
            b = node.binders[k]
            for v in self.binder_values(node, b, {**env, **acc}, b.name):
                acc[b.name] = v
                yield from rec(k + 1, acc)
            acc.pop(b.name, None)

        yield from rec(0, {})

    def lam(self, node: S.Lam, env: dict[str, Any], k: int = 0) -> Any:
        if k == len(node.binders):
            return self.real(self.value(node.body, env))
        b = node.binders[k]
        t = self.t.binder_types[(id(node), f"{k}:{b.name}")]
        if t.kind != "Fin":
            raise Outside(f"fun over {t} cannot be materialised")
        items = [self.lam(node, {**env, b.name: i} if b.name != "_" else env, k + 1) for i in self.domain(t, env)]
        if not items:
            return self.b.stack([])
        return self.b.stack(items)

    # -- definitions and builtins --
    def apply(self, name: str, at: S.Node, args: list[S.Node], env: dict[str, Any]) -> Any:
        sub = self.t.binder_types.get((id(at), "__sub__"), {})
        if name in BUILTINS:
            return self.builtin(name, at, args, env, sub)
        impl = self.impls.get(name)
        if impl is None:
            raise Outside(f"no implementation of {name}")
        sig = impl.sig
        n = len(sig.params)
        vals = [self.value(a, env) for a in args[:n]]
        sizes = {k: self.size(v, env) for k, v in sub.items() if not isinstance(v, Ty)}
        if (self.unfold or impl.python is None) and impl.body is not None and impl.typer is not None:
            inner = dict(sizes)
            for (pname, pt), v in zip(sig.params, vals, strict=False):
                inner[pname] = self.real(v) if pt == REAL else v
            sub_eval = Evaluator(impl.typer, self.b, self.impls, self.unfold)
            body = impl.body
            rest = [self.value(a, env) for a in args[n:]]
            # beta-reduce `fun i j => e` (also under Matrix.of) against the index arguments
            while rest:
                if isinstance(body, S.App) and impl.typer.resolved.get(id(body)) == "Matrix.of":
                    body = body.args[0]
                    continue
                if not isinstance(body, S.Lam):
                    break
                for _k, b in enumerate(body.binders):
                    if not rest:
                        raise Outside("partial application of a fun body")
                    if b.name != "_":
                        inner[b.name] = rest[0]
                    rest = rest[1:]
                body = body.body
            out = sub_eval.value(body, inner)
            return self.index(out, rest)
        elif impl.python is not None and self.b.kind != "sy":
            res_t = self.t.types[id(at)] if not args[n:] else None
            py_args = [self.real(v) if pt == REAL else v for (pname, pt), v in zip(sig.params, vals, strict=False)]
            py_args += [sizes[lean] for lean in impl.extra.values()]
            out = self.b.call(impl.python, py_args)
            full_t = _result_type(self.t, at, sig, sub)
            out = self.coerce(out, full_t, env)
            del res_t
        else:
            raise Outside(f"{name} has no unfoldable body for the {self.b.kind} backend")
        rest = [self.value(a, env) for a in args[n:]]
        return self.index(out, rest)

    def coerce(self, out: Any, t: Ty, env: dict[str, Any]) -> Any:
        if t == REAL or is_real_valued(t):
            return self.reshape(out, self.shape(t, env))
        return out

    def builtin(self, name: str, at: S.Node, args: list[S.Node], env: dict[str, Any], sub: dict) -> Any:
        vals = [self.value(a, env) for a in args]
        b = self.b
        if name == "Finset.univ":
            t = self.ty(at)
            n = self.size(t.args[0].args[0], env)
            return FinsetV(n, frozenset(range(n)))
        if name == "Matrix.blockDiagonal":
            blocks = vals[0]
            arr = blocks.v if isinstance(blocks, Tr) else blocks
            m, bsz = arr.shape[0], arr.shape[1]
            out = b.const(Fraction(0), (bsz * m, bsz * m))
            for j in range(m):
                for i1 in range(bsz):
                    for i2 in range(bsz):
                        if isinstance(out, Tr):
                            out.v[i1 + bsz * j, i2 + bsz * j] = arr[j, i1, i2]
                        else:
                            out[i1 + bsz * j, i2 + bsz * j] = arr[j, i1, i2]
            if isinstance(out, Tr):
                out = Tr(out.v, blocks.e)
            return self.index(out, [])
        if name == "NormedSpace.exp":
            return self.index(b.expm(self.real(vals[0])), vals[1:])
        if name == "Real.pi":
            out = b.const(Fraction(0))
            if b.kind == "f64":
                out = Tr(np.asarray(np.pi), 2.0**-53 * np.pi)
            elif b.kind == "mp":
                import mpmath

                out = b._wrap(+mpmath.pi)
            else:
                out = b._wrap(sp.pi)
            return out
        fn = {"Real.exp": b.exp, "Real.log": b.log, "Real.sqrt": b.sqrt, "Real.sin": b.sin,
              "Real.cos": b.cos, "Matrix.trace": b.trace, "Matrix.det": b.det,
              "Matrix.transpose": b.transpose}.get(name)
        if fn is not None:
            out = fn(self.real(vals[0]))
            return self.index(out, vals[1:])
        if name == "Matrix.dotProduct":
            n = np.shape(vals[0].v if isinstance(vals[0], Tr) else vals[0])[0]
            return self.reshape(b.matmul(self.reshape(vals[0], (1, n)), self.reshape(vals[1], (n, 1))), ())
        if name == "Matrix.mulVec":
            shp = np.shape(vals[0].v if isinstance(vals[0], Tr) else vals[0])
            return self.reshape(b.matmul(vals[0], self.reshape(vals[1], (shp[1], 1))), (shp[0],))
        if name == "Matrix.diagonal":
            v = vals[0]
            n = np.shape(v.v if isinstance(v, Tr) else v)[0]
            return b.mul(b.eye(n, Fraction(1)), self.reshape(v, (1, n)))
        raise Outside(f"builtin {name}")

    # -- propositions --
    def truth(self, node: S.Node, env: dict[str, Any]) -> bool:
        if isinstance(node, S.Logic):
            if node.op == "∧":
                return self.truth(node.left, env) and self.truth(node.right, env)
            if node.op == "∨":
                return self.truth(node.left, env) or self.truth(node.right, env)
            if node.op == "→":
                return (not self.truth(node.left, env)) or self.truth(node.right, env)
            if node.op == "↔":
                return self.truth(node.left, env) == self.truth(node.right, env)
        if isinstance(node, S.Not):
            return not self.truth(node.body, env)
        if isinstance(node, S.Forall):
            return all(self.truth(node.body, {**env, **a}) for a in self._assignments(node, env))
        if isinstance(node, S.Exists):
            return any(self.truth(node.body, {**env, **a}) for a in self._assignments(node, env))
        if isinstance(node, S.Rel):
            return self.relation(node, env)
        if isinstance(node, S.App) and self.t.resolved.get(id(node)) in PREDICATES:
            name = self.t.resolved[id(node)]
            v = self.value(node.args[0], env)
            if name == "Finset.Nonempty":
                return bool(v.elems)
            ok, res, tol = self.b.equal(self.b.transpose(v), v)
            self.records.append(Record(S.show(node), ok, res, tol))
            return ok
        if isinstance(node, S.Proj) and node.field == "Nonempty":
            return bool(self.value(node.body, env).elems)
        if isinstance(node, S.Name) and node.id.endswith(".Nonempty"):
            return bool(env[node.id.split(".")[0]].elems)
        raise Outside(f"cannot decide {S.show(node)}")

    def relation(self, node: S.Rel, env: dict[str, Any]) -> bool:
        op = node.op
        if op in ("∈", "∉"):
            x, s = self.value(node.left, env), self.value(node.right, env)
            return (x in s.elems) == (op == "∈")
        lt = self.ty(node.left)
        self.ty(node.right)  # kept for the Outside it raises on an untyped right side
        a, b = self.value(node.left, env), self.value(node.right, env)
        text = S.show(node)
        if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)):
            ok = {"=": a == b, "≠": a != b, "<": a < b, "≤": a <= b, ">": a > b, "≥": a >= b}[op]
            self.records.append(Record(text, ok, 0.0, 0.0))
            return bool(ok)
        if isinstance(a, FinsetV) or lt.kind == "Finset":
            ok = (a == b) == (op == "=")
            self.records.append(Record(text, ok, 0.0, 0.0))
            return ok
        a, b = self.real(a), self.real(b)
        if op in ("=", "≠"):
            ok, res, tol = self.b.equal(a, b)
            if op == "≠":
                self.records.append(Record(text, not ok, 0.0, tol))
                return not ok
            self.records.append(Record(text, ok, res, tol))
            return ok
        if op in (">", "≥"):
            a, b = b, a
        ok, res, tol = self.b.less(a, b, strict=op in ("<", ">"))
        self.records.append(Record(text, ok, res, tol))
        return ok


def _result_type(t: Typer, at: S.Node, sig: Sig, sub: dict[str, Any]) -> Ty:
    from .elaborate import subst

    return subst(sig.result, sub)
