"""Typed syntax tree of the Lean subset: declaration headers, binders and terms.

Nodes are frozen dataclasses, so a statement can be hashed, compared and mutated by building a
new tree (:func:`replace_at`). ``pos`` fields (offset into the header text) are kept out of
equality so that two statements compare equal when their structure does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from typing import Any


@dataclass(frozen=True)
class Node:
    """Base class of every term node."""

    def children(self) -> Iterator[Node]:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Node):
                yield v
            elif isinstance(v, tuple):
                for w in v:
                    if isinstance(w, Node):
                        yield w
                    elif isinstance(w, QBinder):
                        if w.type is not None:
                            yield w.type
                        if w.domain is not None:
                            yield w.domain


@dataclass(frozen=True)
class Name(Node):
    """An identifier, possibly dotted (``Real.exp``, ``x.take``)."""

    id: str


@dataclass(frozen=True)
class Num(Node):
    """A numeric literal, kept as written (``2``, ``1e-9``, ``0.5``)."""

    text: str


@dataclass(frozen=True)
class Sort(Node):
    """``Type``, ``Type*``, ``Prop``."""

    text: str


@dataclass(frozen=True)
class App(Node):
    """Application ``fn a₁ … aₖ`` (curried applications are flattened)."""

    fn: Node
    args: tuple[Node, ...]


@dataclass(frozen=True)
class BinOp(Node):
    """Arithmetic/algebraic infix: ``+ - * / ^ • ⊙ *ᵥ ᵥ* ⬝ᵥ ×``."""

    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Rel(Node):
    """Relation: ``= ≠ ≤ ≥ < > ∈ ∉``."""

    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Logic(Node):
    """Connective: ``∧ ∨ → ↔``."""

    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Not(Node):
    body: Node


@dataclass(frozen=True)
class Neg(Node):
    body: Node


@dataclass(frozen=True)
class Postfix(Node):
    """``ᵀ`` or ``⁻¹``."""

    op: str
    body: Node


@dataclass(frozen=True)
class Proj(Node):
    """Field projection ``(e).f`` (also ``x.take`` once ``x`` is known to be bound)."""

    body: Node
    field: str


@dataclass(frozen=True)
class GetOpt(Node):
    """``l[r]?``, the Option-valued list read."""

    body: Node
    index: Node


@dataclass(frozen=True)
class Abs(Node):
    body: Node


@dataclass(frozen=True)
class Norm(Node):
    body: Node


@dataclass(frozen=True)
class ListLit(Node):
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Ascribe(Node):
    """``(e : T)``."""

    body: Node
    type: Node


@dataclass(frozen=True)
class Ite(Node):
    cond: Node
    then: Node
    orelse: Node


@dataclass(frozen=True)
class QBinder:
    """One variable bound by ``fun``/``∀``/``∃``/``∑``: name, optional type, optional ``∈`` domain."""

    name: str
    type: Node | None = None
    domain: Node | None = None


@dataclass(frozen=True)
class Lam(Node):
    binders: tuple[QBinder, ...]
    body: Node


@dataclass(frozen=True)
class Forall(Node):
    binders: tuple[QBinder, ...]
    body: Node


@dataclass(frozen=True)
class Exists(Node):
    binders: tuple[QBinder, ...]
    body: Node


@dataclass(frozen=True)
class BigSum(Node):
    binders: tuple[QBinder, ...]
    body: Node


# --- Declarations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Binder:
    """A declaration binder: ``(x y : T)`` explicit, ``{n : ℕ}`` implicit, ``[NeZero n]`` instance."""

    names: tuple[str, ...]
    type: Node
    kind: str  # "explicit" | "implicit" | "strict" | "inst"

    @property
    def explicit(self) -> bool:
        return self.kind == "explicit"


@dataclass(frozen=True)
class Header:
    """A parsed ``def``/``theorem``/``lemma`` header (statement without proof)."""

    kind: str
    name: str
    binders: tuple[Binder, ...]
    type: Node | None
    text: str = field(default="", compare=False)


# --- Generic traversal ----------------------------------------------------------------------


def walk(node: Node) -> Iterator[Node]:
    """Pre-order traversal of a term."""
    yield node
    for c in node.children():
        yield from walk(c)


def free_names(node: Node) -> set[str]:
    """Identifier heads occurring in a term (bound or not; dotted names give their first part)."""
    out: set[str] = set()
    for n in walk(node):
        if isinstance(n, Name):
            out.add(n.id.split(".")[0])
            out.add(n.id)
    return out


def map_children(node: Node, fn: Callable[[Node], Node]) -> Node:
    """A copy of ``node`` with ``fn`` applied to each direct child term."""
    changes: dict[str, Any] = {}
    for f in fields(node):
        v = getattr(node, f.name)
        if isinstance(v, Node):
            changes[f.name] = fn(v)
        elif isinstance(v, tuple) and v and isinstance(v[0], Node):
            changes[f.name] = tuple(fn(w) for w in v)
        elif isinstance(v, tuple) and v and isinstance(v[0], QBinder):
            changes[f.name] = tuple(
                QBinder(b.name, fn(b.type) if b.type else None, fn(b.domain) if b.domain else None)
                for b in v
            )
    return replace(node, **changes) if changes else node


def positions(node: Node, pred: Callable[[Node], bool]) -> list[int]:
    """Pre-order indices of the nodes satisfying ``pred`` (stable addresses for mutation)."""
    return [k for k, n in enumerate(walk(node)) if pred(n)]


def replace_at(node: Node, index: int, fn: Callable[[Node], Node]) -> Node:
    """A copy of ``node`` whose pre-order node number ``index`` is replaced by ``fn(it)``."""
    counter = [0]

    def go(n: Node) -> Node:
        k = counter[0]
        counter[0] += 1
        if k == index:
            # skip the numbering of the replaced subtree
            counter[0] += sum(1 for _ in walk(n)) - 1
            return fn(n)
        return map_children(n, go)

    return go(node)


def show(node: Node | None) -> str:
    """Lean-like rendering of a term (fully parenthesised where precedence could matter)."""
    if node is None:
        return ""
    if isinstance(node, Name):
        return node.id
    if isinstance(node, Num):
        return node.text
    if isinstance(node, Sort):
        return node.text
    if isinstance(node, App):
        return " ".join([_atom(node.fn)] + [_atom(a) for a in node.args])
    if isinstance(node, (BinOp, Rel, Logic)):
        return f"{_atom(node.left)} {node.op} {_atom(node.right)}"
    if isinstance(node, Not):
        return f"¬{_atom(node.body)}"
    if isinstance(node, Neg):
        return f"-{_atom(node.body)}"
    if isinstance(node, Postfix):
        return f"{_atom(node.body)}{node.op}"
    if isinstance(node, Proj):
        return f"{_atom(node.body)}.{node.field}"
    if isinstance(node, GetOpt):
        return f"{_atom(node.body)}[{show(node.index)}]?"
    if isinstance(node, Abs):
        return f"|{show(node.body)}|"
    if isinstance(node, Norm):
        return f"‖{show(node.body)}‖"
    if isinstance(node, ListLit):
        return "[" + ", ".join(show(i) for i in node.items) + "]"
    if isinstance(node, Ascribe):
        return f"({show(node.body)} : {show(node.type)})"
    if isinstance(node, Ite):
        return f"if {show(node.cond)} then {show(node.then)} else {show(node.orelse)}"
    if isinstance(node, (Lam, Forall, Exists, BigSum)):
        head = {Lam: "fun", Forall: "∀", Exists: "∃", BigSum: "∑"}[type(node)]
        bs = " ".join(_qb(b) for b in node.binders)
        sep = " =>" if isinstance(node, Lam) else ","
        return f"{head} {bs}{sep} {show(node.body)}"
    raise TypeError(f"cannot show {node!r}")


def _qb(b: QBinder) -> str:
    if b.domain is not None:
        return f"{b.name} ∈ {show(b.domain)}"
    if b.type is not None:
        return f"({b.name} : {show(b.type)})"
    return b.name


def _atom(node: Node) -> str:
    s = show(node)
    if isinstance(node, (Name, Num, Sort, Abs, Norm, ListLit, Ascribe)) or (
        isinstance(node, (Postfix, Proj, GetOpt))
    ):
        return s
    return f"({s})"


def show_binder(b: Binder) -> str:
    names = " ".join(b.names)
    if b.kind == "inst":
        return f"[{show(b.type)}]" if not b.names else f"[{names} : {show(b.type)}]"
    open_, close = {"explicit": "()", "implicit": "{}", "strict": "⦃⦄"}[b.kind]
    return f"{open_}{names} : {show(b.type)}{close}"


def show_header(h: Header) -> str:
    parts = [h.kind, h.name] + [show_binder(b) for b in h.binders]
    s = " ".join(parts)
    return f"{s} : {show(h.type)}" if h.type is not None else s
