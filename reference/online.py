"""The online-generation contract (``formal/Plga/OnlineContract.lean``) on Python decoders.

A decoder is any function ``F(x: list) -> list`` (Lean ``F : List σ → List ρ``). Lean's
predicates quantify over *all* inputs; here each predicate takes a finite collection of inputs
and checks the same condition on each of them, so a ``False`` is a genuine counterexample and a
``True`` is evidence on those inputs only (paper Rem. 4.7, Def. 4.8, Rem. 4.9).

List conventions follow Lean: indices are zero-based, ``x.take t`` is the length-t prefix
(all of x when t > len(x)), ``l[r]?`` is ``None`` out of range, ``getLast?`` of [] is ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

Decoder = Callable[[list[Any]], list[Any]]


def get_opt(xs: Sequence[Any], r: int) -> Any:
    """Lean ``l[r]?``: the element at ``r``, or ``None`` when out of range."""
    return xs[r] if 0 <= r < len(xs) else None


def same(a: Any, b: Any) -> bool:
    """Equality of two rows (``None`` aware; arrays compared exactly, bit for bit)."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    return bool(a == b)


def online_out(F: Decoder, x: Sequence[Any], t: int) -> Any:
    """Lean ``onlineOut F x t``: the last row of ``F (x.take t)`` (``None`` if that is [])."""
    out = F(list(x[:t]))
    return out[-1] if out else None


def prefix_consistent(F: Decoder, xs: Iterable[Sequence[Any]]) -> bool:
    """Lean ``PrefixConsistent F`` on the inputs ``xs``:
    for every x and r < |x|, ``F x [r]? = F (x.take (r+1)) [r]?``."""
    for x in xs:
        full = F(list(x))
        for r in range(len(x)):
            if not same(get_opt(full, r), get_opt(F(list(x[: r + 1])), r)):
                return False
    return True


def length_preserving(F: Decoder, xs: Iterable[Sequence[Any]]) -> bool:
    """Lean ``LengthPreserving F`` on the inputs ``xs``: ``|F x| = |x|``."""
    return all(len(F(list(x))) == len(x) for x in xs)


def prefix_consistent_shaped(F: Decoder, xs: Iterable[Sequence[Any]]) -> bool:
    """Lean ``PrefixConsistentShaped F`` (paper Def. 4.8): length preserving and prefix
    consistent, on the inputs ``xs``."""
    xs = [list(x) for x in xs]
    return length_preserving(F, xs) and prefix_consistent(F, xs)


def row_local(F: Decoder, pairs: Iterable[tuple[Sequence[Any], Sequence[Any]]]) -> bool:
    """Lean ``RowLocal F`` on the input pairs ``pairs``: for every (x, y) and every r,
    ``x.take (r+1) = y.take (r+1) → F x [r]? = F y [r]?``."""
    for x, y in pairs:
        fx, fy = F(list(x)), F(list(y))
        for r in range(max(len(x), len(y), len(fx), len(fy)) + 1):
            if list(x[: r + 1]) == list(y[: r + 1]) and not same(get_opt(fx, r), get_opt(fy, r)):
                return False
    return True


def row_map_decoder(f: Callable[[list[Any]], Any]) -> Decoder:
    """Lean ``rowMapDecoder f``: x ↦ [f (x.take 1), f (x.take 2), …, f (x.take |x|)], the shape
    of causal masked attention (row r sees tokens ≤ r)."""

    def decoder(x: list[Any]) -> list[Any]:
        return [f(list(x[: r + 1])) for r in range(len(x))]

    return decoder


def global_sum_decoder(x: Sequence[int]) -> list[int]:
    """Lean ``globalSumDecoder``: x ↦ [a + Σx for a in x], the scalar shadow of a global Gram."""
    s = sum(x)
    return [a + s for a in x]


#: Lean definition name → Python function (the online half of the mirror the bridge gates on).
LEAN_NAMES: dict[str, Callable[..., Any]] = {
    "onlineOut": online_out,
    "PrefixConsistent": prefix_consistent,
    "LengthPreserving": length_preserving,
    "PrefixConsistentShaped": prefix_consistent_shaped,
    "RowLocal": row_local,
    "rowMapDecoder": row_map_decoder,
    "globalSumDecoder": global_sum_decoder,
}

__all__ = [f.__name__ for f in LEAN_NAMES.values()] + ["LEAN_NAMES", "get_opt", "same"]
