"""Static types of the subset: enough elaboration to evaluate a statement faithfully.

Lean picks instances from types: ``*`` is a matrix product on ``Matrix`` but pointwise on
``Fin n → ℝ``; the numeral ``1`` is the identity matrix but the all-ones vector; ``^`` with a
numeral exponent is ``Monoid.npow``. :class:`Typer` infers these types bidirectionally (the
expected type flows into numerals and ``fun`` binders, as Lean's elaborator does) and records
one :class:`Ty` per node. Sizes are sympy expressions in the statement's ``ℕ`` binders, so
``Fin S`` and ``Fin T`` are distinct and an ill-typed mutant (``Q * K``) is recognised.
A term the typer does not know raises :class:`Outside`: the statement is then outside the
derived fragment and needs a hand-written check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy as sp

from . import syntax as S


class Outside(Exception):
    """The statement is outside the derived-check fragment (the message says why)."""


class IllTyped(Outside):
    """The statement does not type-check (used to discard ill-typed mutants)."""


@dataclass(frozen=True)
class Ty:
    kind: str  # Nat Int Real Prop Fin Mat Fun Finset List Option TVar Type Prod Complex
    args: tuple[Any, ...] = ()

    def __str__(self) -> str:
        if self.kind == "Fin":
            return f"Fin {self.args[0]}"
        if self.kind == "Mat":
            return f"Matrix (Fin {self.args[0]}) (Fin {self.args[1]}) ℝ"
        if self.kind == "Fun":
            return f"({self.args[0]} → {self.args[1]})"
        if self.args:
            return f"{self.kind} " + " ".join(str(a) for a in self.args)
        return {"Nat": "ℕ", "Int": "ℤ", "Real": "ℝ"}.get(self.kind, self.kind)


NAT, INT, REAL, PROP, TYPE, COMPLEX = Ty("Nat"), Ty("Int"), Ty("Real"), Ty("Prop"), Ty("Type"), Ty("Complex")
NUMERIC = ("Nat", "Int", "Real")


def fin(n: Any) -> Ty:
    return Ty("Fin", (sp.sympify(n),))


def vec(n: Any) -> Ty:
    return Ty("Fun", (fin(n), REAL))


def mat(m: Any, n: Any) -> Ty:
    return Ty("Mat", (sp.sympify(m), sp.sympify(n)))


def is_vec(t: Ty) -> bool:
    return t.kind == "Fun" and t.args[0].kind == "Fin" and t.args[1] == REAL


def is_mat_like(t: Ty) -> bool:
    """Matrix, or ``Fin m → Fin n → ℝ`` (definitionally the same data)."""
    return t.kind == "Mat" or (t.kind == "Fun" and t.args[0].kind == "Fin" and is_vec(t.args[1]))


def as_mat(t: Ty) -> tuple[Any, Any]:
    if t.kind == "Mat":
        return t.args
    return t.args[0].args[0], t.args[1].args[0].args[0]


def is_real_valued(t: Ty) -> bool:
    """ℝ, or a (curried) function from ``Fin`` indices to ℝ, or a matrix."""
    if t == REAL or t.kind == "Mat":
        return True
    return t.kind == "Fun" and t.args[0].kind == "Fin" and is_real_valued(t.args[1])


def size_eq(a: Any, b: Any) -> bool:
    return sp.expand(sp.sympify(a) - sp.sympify(b)) == 0


def ty_eq(a: Ty, b: Ty) -> bool:
    """Structural equality, sizes compared as expressions; Matrix ≡ curried Fin functions."""
    if is_mat_like(a) and is_mat_like(b):
        (m1, n1), (m2, n2) = as_mat(a), as_mat(b)
        return size_eq(m1, m2) and size_eq(n1, n2)
    if a.kind != b.kind or len(a.args) != len(b.args):
        return False
    for x, y in zip(a.args, b.args, strict=True):
        if isinstance(x, Ty):
            if not (isinstance(y, Ty) and ty_eq(x, y)):
                return False
        elif isinstance(x, (sp.Basic, int)):
            if not size_eq(x, y):
                return False
        elif x != y:
            return False
    return True


def subst(t: Ty, sub: dict[str, Any]) -> Ty:
    """Replace size symbols / type variables named in ``sub``."""
    args = []
    for a in t.args:
        if isinstance(a, Ty):
            if a.kind == "TVar" and a.args[0] in sub and isinstance(sub[a.args[0]], Ty):
                args.append(sub[a.args[0]])
            else:
                args.append(subst(a, sub))
        elif isinstance(a, sp.Basic):
            args.append(a.xreplace({sp.Symbol(k): sp.sympify(v) for k, v in sub.items() if not isinstance(v, Ty)}))
        else:
            args.append(a)
    if t.kind == "TVar" and t.args[0] in sub and isinstance(sub[t.args[0]], Ty):
        return sub[t.args[0]]
    return Ty(t.kind, tuple(args))


def size_expr(node: S.Node) -> Any:
    """A size term (``n``, ``3``, ``n + 1``) as a sympy expression."""
    if isinstance(node, S.Name):
        return sp.Symbol(node.id)
    if isinstance(node, S.Num) and node.text.isdigit():
        return sp.Integer(int(node.text))
    if isinstance(node, S.BinOp) and node.op in "+*-":
        a, b = size_expr(node.left), size_expr(node.right)
        return {"+": a + b, "*": a * b, "-": a - b}[node.op]
    raise Outside(f"size expression {S.show(node)!r} is not supported")


def to_ty(node: S.Node, tvars: frozenset[str] = frozenset()) -> Ty | None:
    """The type denoted by a binder's type term, or ``None`` when it is a proposition."""
    if isinstance(node, S.Sort):
        return TYPE if node.text != "Prop" else Ty("Type")
    if isinstance(node, S.Name):
        base = {"ℝ": REAL, "Real": REAL, "ℕ": NAT, "Nat": NAT, "ℤ": INT, "Int": INT, "ℂ": COMPLEX,
                "Prop": TYPE, "Bool": Ty("Bool")}.get(node.id)
        if base is not None:
            return base
        if node.id in tvars:
            return Ty("TVar", (node.id,))
        return None
    if isinstance(node, S.App) and isinstance(node.fn, S.Name):
        f, a = node.fn.id, node.args
        if f == "Fin" and len(a) == 1:
            return fin(size_expr(a[0]))
        if f == "Matrix" and len(a) == 3:
            r, c, e = to_ty(a[0], tvars), to_ty(a[1], tvars), to_ty(a[2], tvars)
            if r and c and r.kind == "Fin" and c.kind == "Fin" and e == REAL:
                return mat(r.args[0], c.args[0])
            raise Outside(f"matrix type {S.show(node)} is outside the fragment")
        if f in ("Finset", "List", "Option", "Set") and len(a) == 1:
            inner = to_ty(a[0], tvars)
            if inner is None:
                raise Outside(f"type {S.show(node)} is not understood")
            return Ty(f, (inner,))
        return None
    if isinstance(node, S.Logic) and node.op == "→":
        a, b = to_ty(node.left, tvars), to_ty(node.right, tvars)
        if a is not None and b is not None:
            return Ty("Fun", (a, b))
        return None
    if isinstance(node, S.BinOp) and node.op == "×":
        a, b = to_ty(node.left, tvars), to_ty(node.right, tvars)
        if a is not None and b is not None:
            if a.kind == "Fin" and b.kind == "Fin":
                # Fin a × Fin b is flattened to Fin (a*b) with (c, j) ↔ c + a·j, the layout of
                # Matrix.blockDiagonal and of the reference's interleaved RoPE blocks
                return fin(a.args[0] * b.args[0])
            return Ty("Prod", (a, b))
    return None


# --- Signatures -----------------------------------------------------------------------------


@dataclass
class Sig:
    """A definition's signature: pattern variables (implicit ℕ and type binders), explicit
    parameters and result type."""

    name: str
    implicits: list[str]
    params: list[tuple[str, Ty]]
    result: Ty
    header: S.Header | None = None
    body: S.Node | None = None  # the definition's body when it parses in the subset


def sig_of(header: S.Header, body: S.Node | None = None) -> Sig:
    tvars = frozenset(n for b in header.binders for n in b.names if to_ty(b.type) == TYPE)
    implicits: list[str] = []
    params: list[tuple[str, Ty]] = []
    for b in header.binders:
        t = to_ty(b.type, tvars)
        if b.kind == "inst":
            continue
        if t is None:
            raise Outside(f"binder {S.show_binder(b)} of {header.name} is a hypothesis")
        for n in b.names:
            if b.kind == "explicit":
                params.append((n, t))
            else:
                implicits.append(n)
    if header.type is None:
        raise Outside(f"definition {header.name} has no result type")
    res = to_ty(header.type, tvars)
    if res is None or (isinstance(header.type, S.Sort) and header.type.text == "Prop"):
        res = PROP  # a predicate (PrefixConsistent, …)
    return Sig(header.name, implicits, params, res, header, body)


def unify(pattern: Ty, actual: Ty, sub: dict[str, Any], pvars: set[str]) -> bool:
    """Match ``pattern`` (with variables ``pvars``) against ``actual``, extending ``sub``."""
    if pattern.kind == "TVar" and pattern.args[0] in pvars:
        name = pattern.args[0]
        if name in sub:
            return ty_eq(sub[name], actual)
        sub[name] = actual
        return True
    if is_mat_like(pattern) and is_mat_like(actual):
        pa, aa = as_mat(pattern), as_mat(actual)
        return all(_unify_size(p, a, sub, pvars) for p, a in zip(pa, aa, strict=True))
    if pattern.kind != actual.kind or len(pattern.args) != len(actual.args):
        return False
    for p, a in zip(pattern.args, actual.args, strict=True):
        if isinstance(p, Ty):
            if not (isinstance(a, Ty) and unify(p, a, sub, pvars)):
                return False
        elif isinstance(p, sp.Basic):
            if not _unify_size(p, a, sub, pvars):
                return False
        elif p != a:
            return False
    return True


def _unify_size(p: Any, a: Any, sub: dict[str, Any], pvars: set[str]) -> bool:
    p = sp.sympify(p)
    free = [s for s in p.free_symbols if s.name in pvars and s.name not in sub]
    p2 = p.xreplace({sp.Symbol(k): sp.sympify(v) for k, v in sub.items() if not isinstance(v, Ty)})
    if not free:
        return size_eq(p2, a)
    if p2.is_Symbol:
        sub[p2.name] = sp.sympify(a)
        return True
    if len(free) == 1 and sp.expand(p2 - sp.sympify(a)) == 0:
        sub[free[0].name] = free[0]  # same-named size on both sides: n ↦ n
        return True
    if len(free) == 1:
        sol = sp.solve(sp.Eq(p2, a), free[0])
        if len(sol) == 1:
            sub[free[0].name] = sp.sympify(sol[0])
            return True
    return False


# --- Builtins ---------------------------------------------------------------------------------

#: Mathlib functions the evaluator implements, with their signatures in the subset.
BUILTIN_HEADERS = {
    "Real.exp": "def Real.exp (x : ℝ) : ℝ",
    "Real.log": "def Real.log (x : ℝ) : ℝ",
    "Real.sqrt": "def Real.sqrt (x : ℝ) : ℝ",
    "Real.sin": "def Real.sin (x : ℝ) : ℝ",
    "Real.cos": "def Real.cos (x : ℝ) : ℝ",
    "Real.pi": "def Real.pi : ℝ",
    "Matrix.trace": "def Matrix.trace {n : ℕ} (M : Matrix (Fin n) (Fin n) ℝ) : ℝ",
    "Matrix.det": "def Matrix.det {n : ℕ} (M : Matrix (Fin n) (Fin n) ℝ) : ℝ",
    "Matrix.transpose": "def Matrix.transpose {m n : ℕ} (M : Matrix (Fin m) (Fin n) ℝ) : Matrix (Fin n) (Fin m) ℝ",
    "Matrix.diagonal": "def Matrix.diagonal {n : ℕ} (v : Fin n → ℝ) : Matrix (Fin n) (Fin n) ℝ",
    "Matrix.dotProduct": "def Matrix.dotProduct {n : ℕ} (v w : Fin n → ℝ) : ℝ",
    "Matrix.mulVec": "def Matrix.mulVec {m n : ℕ} (M : Matrix (Fin m) (Fin n) ℝ) (v : Fin n → ℝ) : Fin m → ℝ",
    "Matrix.blockDiagonal": "def Matrix.blockDiagonal {b m : ℕ} (M : Fin m → Matrix (Fin b) (Fin b) ℝ) : Matrix (Fin b × Fin m) (Fin b × Fin m) ℝ",
    "NormedSpace.exp": "def NormedSpace.exp {n : ℕ} (M : Matrix (Fin n) (Fin n) ℝ) : Matrix (Fin n) (Fin n) ℝ",
    "Matrix.IsSymm": "def Matrix.IsSymm {n : ℕ} (M : Matrix (Fin n) (Fin n) ℝ) : Prop",
    "Finset.Nonempty": "def Finset.Nonempty {n : ℕ} (J : Finset (Fin n)) : Prop",
}
#: Opened namespaces (``open Matrix Real``) resolve unqualified names through these prefixes.
OPEN_PREFIXES = ("", "Matrix.", "Real.", "Finset.")


@dataclass
class Env:
    """Static context: variable types and known signatures."""

    vars: dict[str, Ty] = field(default_factory=dict)
    sigs: dict[str, Sig] = field(default_factory=dict)

    def bind(self, name: str, t: Ty) -> Env:
        if name == "_":
            return self
        return Env({**self.vars, name: t}, self.sigs)


class Typer:
    """Infers and records the type of every node of a statement (``types[id(node)]``)."""

    def __init__(self, sigs: dict[str, Sig]):
        self.sigs = sigs
        self.types: dict[int, Ty] = {}
        self.binder_types: dict[tuple[int, str], Ty] = {}  # (id(node), name) → type
        self.resolved: dict[int, str] = {}  # id(Name/App head) → signature name
        self.keep: list[S.Node] = []  # keep typed nodes alive so ids stay unique

    # -- helpers --
    def lookup_sig(self, name: str) -> Sig | None:
        for p in OPEN_PREFIXES:
            if p + name in self.sigs:
                return self.sigs[p + name]
        return None

    def rec(self, node: S.Node, t: Ty) -> Ty:
        self.types[id(node)] = t
        self.keep.append(node)
        return t

    def infer(self, node: S.Node, env: Env, expected: Ty | None = None) -> Ty:
        t = self._infer(node, env, expected)
        return self.rec(node, t)

    # -- main dispatch --
    def _infer(self, node: S.Node, env: Env, expected: Ty | None) -> Ty:
        if isinstance(node, S.Num):
            return self._numeral(node, expected)
        if isinstance(node, S.Name):
            return self._name(node, env, expected)
        if isinstance(node, S.App):
            return self._app(node, env, expected)
        if isinstance(node, S.Ascribe):
            t = to_ty(node.type, frozenset(k for k, v in env.vars.items() if v == TYPE))
            if t is None:
                raise Outside(f"ascription to {S.show(node.type)} is not a type")
            if (isinstance(node.body, S.Num) and node.body.text.isdigit()) or isinstance(node.body, S.Neg):
                self.infer(node.body, env, t)
                return t
            got = self.infer(node.body, env, t)
            if ty_eq(got, t):
                return t
            if got in (NAT, INT) and t in (INT, REAL):
                return t  # coercion ↑
            raise IllTyped(f"({S.show(node.body)} : {t}) but it has type {got}")
        if isinstance(node, S.BinOp):
            return self._binop(node, env, expected)
        if isinstance(node, S.Neg):
            t = self.infer(node.body, env, expected)
            if t.kind in ("Nat",):
                raise Outside("negation of a natural number")
            return t
        if isinstance(node, S.Postfix):
            t = self.infer(node.body, env, None)
            if node.op == "ᵀ":
                if not is_mat_like(t):
                    raise IllTyped(f"transpose of a {t}")
                m, n = as_mat(t)
                return mat(n, m)
            if t == REAL:
                return REAL
            raise Outside(f"inverse of a {t}")
        if isinstance(node, S.Abs):
            t = self.infer(node.body, env, REAL if expected is None else expected)
            if t not in (REAL, INT):
                raise Outside(f"|·| of a {t}")
            return t
        if isinstance(node, S.Norm):
            t = self.infer(node.body, env, None)
            if t == REAL:
                return REAL
            raise Outside(f"norm of a {t} (the norm depends on instances)")
        if isinstance(node, S.Rel):
            return self._rel(node, env)
        if isinstance(node, S.Logic):
            self.infer(node.left, env, PROP)
            self.infer(node.right, env, PROP)
            return PROP
        if isinstance(node, S.Not):
            self.infer(node.body, env, PROP)
            return PROP
        if isinstance(node, S.Ite):
            self.infer(node.cond, env, PROP)
            a = self.infer(node.then, env, expected)
            self.infer(node.orelse, env, a)
            return a
        if isinstance(node, (S.Forall, S.Exists)):
            env2 = self._bind_quant(node, env)
            self.infer(node.body, env2, PROP)
            return PROP
        if isinstance(node, S.BigSum):
            env2 = self._bind_quant(node, env)
            t = self.infer(node.body, env2, expected)
            if not (t.kind in NUMERIC or is_real_valued(t)):
                raise Outside(f"sum of {t}")
            return t
        if isinstance(node, S.Lam):
            return self._lam(node, env, expected)
        if isinstance(node, S.Proj):
            t = self.infer(node.body, env, None)
            if t.kind == "Finset" and node.field == "Nonempty":
                return PROP
            raise Outside(f"field .{node.field} on {t} (list-level notation)")
        raise Outside(f"{type(node).__name__} {S.show(node)!r} is outside the derived fragment")

    def _numeral(self, node: S.Num, expected: Ty | None) -> Ty:
        is_int = node.text.isdigit()
        if expected is None:
            return NAT if is_int else REAL
        if expected.kind in ("Real", "Mat") or is_real_valued(expected):
            return expected
        if expected.kind in ("Nat", "Int", "Fin") and is_int:
            return expected
        raise IllTyped(f"numeral {node.text} where {expected} is expected")

    def _name(self, node: S.Name, env: Env, expected: Ty | None) -> Ty:
        if node.id in env.vars:
            return env.vars[node.id]
        head = node.id.split(".")[0]
        if head in env.vars and "." in node.id:
            base = env.vars[head]
            fieldname = node.id.split(".", 1)[1]
            if base.kind == "Finset" and fieldname == "Nonempty":
                return PROP
            raise Outside(f"field .{fieldname} of {head} : {base} (list-level notation)")
        if node.id in ("Finset.univ", "univ") and expected is not None and expected.kind == "Finset":
            self.resolved[id(node)] = "Finset.univ"
            return expected
        sig = self.lookup_sig(node.id)
        if sig is not None:
            self.resolved[id(node)] = sig.name
            if sig.params:
                raise Outside(f"{node.id} used without arguments (higher-order use)")
            return self._apply_sig(sig, [], env, expected, node)
        raise Outside(f"unknown identifier {node.id!r}")

    def _apply_sig(self, sig: Sig, args: list[S.Node], env: Env, expected: Ty | None, at: S.Node) -> Ty:
        pvars = set(sig.implicits)
        sub: dict[str, Any] = {}
        n = len(sig.params)
        if len(args) < n:
            raise Outside(f"partial application of {sig.name}")
        pairs = list(zip(sig.params, args[:n], strict=True))
        # arguments that fix the implicit sizes first; fun and numerals then get their types
        late = [p for p in pairs if isinstance(p[1], (S.Lam, S.Num, S.Neg))]
        for (_pname, ptype), arg in [p for p in pairs if p not in late] + late:
            want = subst(ptype, sub)
            unresolved = bool({s.name for s in _sizes(want)} & (pvars - set(sub)))
            got = self.infer(arg, env, None if unresolved and isinstance(arg, S.Lam) else want)
            if not unify(ptype, got, sub, pvars) and not (got in (NAT, INT) and ptype == REAL):
                raise IllTyped(f"argument {S.show(arg)} : {got} of {sig.name} expects {want}")
        for (pname, ptype), arg in pairs:
            if ptype == NAT and sp.Symbol(pname) in _sizes(sig.result):
                sub[pname] = size_expr(arg)  # a dependent result type: rowClone α n : Matrix (Fin n) …
        res = subst(sig.result, sub)
        if expected is not None and len(args) == n:
            unify(res, expected, sub, pvars)
            res = subst(sig.result, sub)
        self.resolved[id(at)] = sig.name
        self.rec_subst(at, sub)
        return self._index_into(res, args[n:], env)

    def rec_subst(self, at: S.Node, sub: dict[str, Any]) -> None:
        self.binder_types[(id(at), "__sub__")] = sub  # type: ignore[assignment]

    def _index_into(self, t: Ty, args: list[S.Node], env: Env) -> Ty:
        for a in args:
            if t.kind == "Mat":
                self.infer(a, env, fin(t.args[0]))
                t = vec(t.args[1])
            elif t.kind == "Fun":
                got = self.infer(a, env, t.args[0] if t.args[0] != NAT else None)
                if got.kind == "Fin" and t.args[0] == NAT:
                    pass  # the coercion Fin n → ℕ
                elif not ty_eq(got, t.args[0]):
                    raise IllTyped(f"index {S.show(a)} : {got} where {t.args[0]} is expected")
                t = t.args[1]
            else:
                raise IllTyped(f"cannot apply a {t} to {S.show(a)}")
        return t

    def _app(self, node: S.App, env: Env, expected: Ty | None) -> Ty:
        f = node.fn
        if isinstance(f, S.Name) and f.id not in env.vars:
            if f.id == "Matrix.of" and len(node.args) == 1:
                t = self.infer(node.args[0], env, expected)
                if not is_mat_like(t):
                    raise Outside("Matrix.of of a non-matrix function")
                m, n = as_mat(t)
                self.resolved[id(node)] = "Matrix.of"
                return mat(m, n)
            sig = self.lookup_sig(f.id)
            if sig is None:
                head = f.id.split(".")[0]
                if head in env.vars:
                    raise Outside(f"method call {f.id} (list-level notation)")
                raise Outside(f"unknown function {f.id!r}")
            self.rec(f, TYPE)
            return self._apply_sig(sig, list(node.args), env, expected, node)
        t = self.infer(f, env, None)
        return self._index_into(t, list(node.args), env)

    def _binop(self, node: S.BinOp, env: Env, expected: Ty | None) -> Ty:
        op = node.op
        if op == "^":
            base = self.infer(node.left, env, expected)
            if isinstance(node.right, S.Num) and node.right.text.isdigit():
                self.infer(node.right, env, NAT)
                e = NAT
            else:
                e = self.infer(node.right, env, None)
            if e == NAT:
                if base.kind == "Mat" and not size_eq(*base.args):
                    raise IllTyped("power of a non-square matrix")
                return base
            if e == REAL and base == REAL:
                return REAL
            raise Outside(f"power {base} ^ {e}")
        if op == "•":
            self.infer(node.left, env, REAL)
            return self.infer(node.right, env, expected)
        if op == "*ᵥ":
            m = self.infer(node.left, env, None)
            if not is_mat_like(m):
                raise IllTyped("*ᵥ needs a matrix on the left")
            r, c = as_mat(m)
            self._expect(node.right, env, vec(c))
            return vec(r)
        if op == "ᵥ*":
            m = self.infer(node.right, env, None)
            if not is_mat_like(m):
                raise IllTyped("ᵥ* needs a matrix on the right")
            r, c = as_mat(m)
            self._expect(node.left, env, vec(r))
            return vec(c)
        if op == "⬝ᵥ":
            a = self.infer(node.left, env, None)
            if not is_vec(a):
                raise IllTyped("⬝ᵥ of non-vectors")
            self._expect(node.right, env, a)
            return REAL
        if op == "×":
            raise Outside("product types in a statement")
        # + - * / ⊙ : infer the non-numeral side first so numerals get its type
        lhs, rhs = node.left, node.right
        first, second = (rhs, lhs) if _is_numeral(lhs) and not _is_numeral(rhs) else (lhs, rhs)
        pass_exp = expected if not (op == "*" and expected is not None and is_mat_like(expected)) else None
        t1 = self.infer(first, env, pass_exp)
        if op == "*" and is_mat_like(t1) and first is lhs:
            t2 = self.infer(second, env, mat(as_mat(t1)[1], as_mat(t1)[1]) if _is_numeral(second) else None)
        elif op == "*" and is_mat_like(t1) and first is rhs:
            t2 = self.infer(second, env, mat(as_mat(t1)[0], as_mat(t1)[0]))
        else:
            t2 = self.infer(second, env, t1 if (_is_numeral(second) or op != "*") else None)
        tl, tr = (t1, t2) if first is lhs else (t2, t1)
        if op == "*" and is_mat_like(tl) and is_mat_like(tr) and (tl.kind == "Mat" or tr.kind == "Mat"):
            (a, b), (c, d) = as_mat(tl), as_mat(tr)
            if not size_eq(b, c):
                raise IllTyped(f"matrix product of {tl} and {tr}")
            return mat(a, d)
        if op == "⊙":
            if not (is_mat_like(tl) and ty_eq(tl, tr)):
                raise IllTyped("⊙ of mismatched matrices")
            return mat(*as_mat(tl))
        return self._promote(tl, tr, op)

    def _promote(self, a: Ty, b: Ty, op: str) -> Ty:
        if ty_eq(a, b):
            if a.kind in NUMERIC or is_real_valued(a) or a.kind == "Fin":
                if op == "/" and a.kind not in NUMERIC:
                    raise Outside(f"division of {a}")
                return a
            raise Outside(f"{op} on {a}")
        order = {"Nat": 0, "Int": 1, "Real": 2}
        if a.kind in order and b.kind in order:
            return a if order[a.kind] > order[b.kind] else b
        raise IllTyped(f"{a} {op} {b}")

    def _expect(self, node: S.Node, env: Env, t: Ty) -> None:
        got = self.infer(node, env, t)
        if not ty_eq(got, t):
            raise IllTyped(f"{S.show(node)} : {got} where {t} is expected")

    def _rel(self, node: S.Rel, env: Env) -> Ty:
        lhs, rhs = node.left, node.right
        if node.op in ("∈", "∉"):
            s = self.infer(rhs, env, None)
            if s.kind != "Finset":
                raise Outside(f"membership in {s}")
            self._expect(lhs, env, s.args[0])
            return PROP
        first, second = (rhs, lhs) if _is_numeral(lhs) and not _is_numeral(rhs) else (lhs, rhs)
        t1 = self.infer(first, env, None)
        t2 = self.infer(second, env, t1)
        if not ty_eq(t1, t2):
            if t1.kind in NUMERIC and t2.kind in NUMERIC:
                return PROP
            raise IllTyped(f"{S.show(node)} compares {t1} with {t2}")
        if node.op in ("<", "≤", ">", "≥") and t1.kind not in NUMERIC:
            raise Outside(f"order on {t1}")
        return PROP

    def _bind_quant(self, node: S.Forall | S.Exists | S.BigSum, env: Env) -> Env:
        env2 = env
        for k, b in enumerate(node.binders):
            if b.domain is not None:
                d = self.infer(b.domain, env2, None)
                if d.kind != "Finset":
                    raise Outside(f"binder over {d}")
                t = d.args[0]
            elif b.type is not None:
                t = to_ty(b.type, frozenset(n for n, v in env.vars.items() if v == TYPE))
                if t is None:
                    raise Outside(f"binder type {S.show(b.type)}")
            else:
                rest = node.binders[k + 1 :]
                t = self._guess(b.name, node.body, env2, rest)
            self.binder_types[(id(node), b.name)] = t
            env2 = env2.bind(b.name, t)
        return env2

    def _guess(self, name: str, body: S.Node, env: Env, later: tuple[S.QBinder, ...] = ()) -> Ty:
        """The type of an unannotated bound variable, from its uses as an index or element."""
        later_names = {b.name for b in later}
        probe = Env(dict(env.vars), env.sigs)
        for n in later_names:  # later binders are unknown yet: hide them behind guesses
            probe.vars.pop(n, None)
        for n in S.walk(body):
            if isinstance(n, S.App):
                for k, a in enumerate(n.args):
                    if isinstance(a, S.Name) and a.id == name:
                        t = self._slot_type(n, k, probe, later_names)
                        if t is not None:
                            return t
            if isinstance(n, S.BinOp) and n.op == "^" and isinstance(n.right, S.Name) and n.right.id == name:
                return NAT
            if isinstance(n, S.BinOp) and n.op in ("+", "-", "*", "/", "•"):
                for me, other in ((n.left, n.right), (n.right, n.left)):
                    if isinstance(me, S.Name) and me.id == name and not (n.op == "•" and me is n.right):
                        try:
                            ot = Typer(self.sigs).infer(other, probe)
                        except Outside:
                            continue
                        if ot in (REAL, NAT, INT) and n.op != "•":
                            return ot
                        if n.op == "•":
                            return REAL
            if isinstance(n, S.Rel) and n.op in ("∈", "∉") and isinstance(n.left, S.Name) and n.left.id == name:
                try:
                    s = Typer(self.sigs).infer(n.right, probe)
                except Outside:
                    continue
                if s.kind == "Finset":
                    return s.args[0]
        raise Outside(f"cannot infer the type of bound variable {name}")

    def _slot_type(self, app: S.App, k: int, env: Env, hidden: set[str]) -> Ty | None:
        sub = Typer(self.sigs)
        f = app.fn
        try:
            if isinstance(f, S.Name) and f.id not in env.vars and f.id not in hidden:
                sig = self.lookup_sig(f.id)
                if sig is None:
                    return None
                if k < len(sig.params):
                    t = sig.params[k][1]
                    if _sizes(t) & {sp.Symbol(v) for v in sig.implicits}:
                        # resolve the implicit sizes from the other (typable) arguments
                        s: dict[str, Any] = {}
                        for (_, pt), a in zip(sig.params, app.args, strict=False):
                            if a is app.args[k]:
                                continue
                            try:
                                unify(pt, sub.infer(a, env, None), s, set(sig.implicits))
                            except Outside:
                                pass
                        t = subst(t, s)
                        if _sizes(t) & {sp.Symbol(v) for v in sig.implicits}:
                            return None
                    return t
                head_t = sub._apply_sig(sig, list(app.args[: len(sig.params)]), env, None, app)
                rest = list(app.args[len(sig.params) : k])
                t = sub._index_into(head_t, rest, env)
            else:
                t = sub.infer(f, env, None)
                t = sub._index_into(t, list(app.args[:k]), env)
        except Outside:
            return None
        if t.kind == "Mat":
            return fin(t.args[0])
        if t.kind == "Fun":
            return t.args[0]
        return None

    def _lam(self, node: S.Lam, env: Env, expected: Ty | None) -> Ty:
        exp_t = expected
        env2 = env
        doms: list[Ty] = []
        for k, b in enumerate(node.binders):
            if exp_t is not None and is_mat_like(exp_t) and exp_t.kind == "Mat":
                m, n = exp_t.args
                exp_t = Ty("Fun", (fin(m), vec(n)))
            if b.type is not None:
                t = to_ty(b.type, frozenset(n for n, v in env.vars.items() if v == TYPE))
                if t is None:
                    raise Outside(f"fun binder type {S.show(b.type)}")
            elif exp_t is not None and exp_t.kind == "Fun":
                t = exp_t.args[0]
            elif b.name == "_":
                raise Outside("cannot infer the domain of fun _ =>")
            else:
                t = self._guess(b.name, node.body, env2, node.binders[k + 1 :])
            self.binder_types[(id(node), f"{k}:{b.name}")] = t
            doms.append(t)
            env2 = env2.bind(b.name, t)
            exp_t = exp_t.args[1] if exp_t is not None and exp_t.kind == "Fun" else None
        cod = self.infer(node.body, env2, exp_t)
        t = cod
        for d in reversed(doms):
            t = Ty("Fun", (d, t))
        if expected is not None and expected.kind == "Mat" and is_mat_like(t):
            return expected
        return t


def _is_numeral(n: S.Node) -> bool:
    return isinstance(n, S.Num) or (isinstance(n, S.Neg) and isinstance(n.body, S.Num))


def _sizes(t: Ty) -> set[Any]:
    out: set[Any] = set()
    for a in t.args:
        if isinstance(a, Ty):
            out |= _sizes(a)
        elif isinstance(a, sp.Basic):
            out |= a.free_symbols
    return out
