"""Hand-written checks for the theorems outside the derived fragment.

Each check is registered under the exact Lean name with ``@check("lean_name")`` and tests the
statement on the reference (``plga.reference.spec`` / ``plga.reference.online``) over seeded
random instances: list-level online-contract statements on Python decoders, ranks on exact
rational instances, existential statements through their witnesses, Lipschitz/diameter
bounds on point clouds, commutant statements on constructed commuting operators. Where a
predicate quantifies over all inputs, it is checked over a finite family of inputs (see
``reference/online.py``). A failing check raises :class:`CheckFailure` with a counterexample.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mpmath
import numpy as np
import sympy as sp

from plga.reference import online as ol
from plga.reference import spec
from plga.reference.numerics import mp_eval

U = 2.0**-53


class CheckFailure(AssertionError):
    """The statement was false on an instance."""


@dataclass
class Ctx:
    """What a check may vary: sample size, mpmath digits, seed, and a named mutation that a
    negative control injects (``None``: the real computation).

    Checks reach the reference only through :attr:`spec`, :attr:`ol` and :attr:`mp`, so a
    mutation of :data:`MUTATIONS` replaces one function there and every check that uses it
    sees the broken version.
    """

    max_examples: int = 25
    dps: int = 50
    seed: int = 0
    mutation: str | None = None

    def __post_init__(self) -> None:
        if self.mutation is not None and self.mutation not in MUTATIONS and self.mutation not in LOCAL_MUTATIONS:
            raise ValueError(f"unknown mutation {self.mutation!r}")

    @property
    def rng(self) -> np.random.Generator:
        return np.random.default_rng(self.seed)

    def _module(self, key: str, module: Any) -> Any:
        m = MUTATIONS.get(self.mutation or "")
        if m is None or m[0] != key:
            return module
        return _Patched(module, m[1], m[2](getattr(module, m[1])))

    @property
    def spec(self) -> Any:
        return self._module("spec", spec)

    @property
    def ol(self) -> Any:
        return self._module("ol", ol)

    @property
    def mp(self) -> Any:
        return self._module("mp", mpmath)


class _Patched:
    """``module`` with one attribute replaced (the negative controls' mutated reference)."""

    def __init__(self, module: Any, name: str, value: Any):
        self._module, self._name, self._value = module, name, value

    def __getattr__(self, attr: str) -> Any:
        return self._value if attr == self._name else getattr(self._module, attr)


def _rows_leak_next(real: Callable) -> Callable:
    def row_map_decoder(f):
        return lambda x: [f(list(x[: r + 2])) for r in range(len(x) - 1)]

    return row_map_decoder


def _pc_off_by_one(real: Callable) -> Callable:
    def prefix_consistent(F, xs):
        return all(ol.same(ol.get_opt(F(list(x)), r), ol.get_opt(F(list(x[:r])), r)) for x in xs for r in range(len(x)))

    return prefix_consistent


def _pcs_off_by_one(real: Callable) -> Callable:
    def prefix_consistent_shaped(F, xs):
        xs = list(xs)
        return ol.length_preserving(F, xs) and _pc_off_by_one(None)(F, xs)

    return prefix_consistent_shaped


def _scaled_rot(real: Callable) -> Callable:
    return lambda t: np.array([[math.cos(t), -math.sin(2 * t)], [math.sin(2 * t), math.cos(t)]])


#: Mutation → (namespace, function, factory of the broken function from the real one). Each
#: breaks what at least one hand-written check states; :data:`NEGATIVE` names the one per check.
MUTATIONS: dict[str, tuple[str, str, Callable[[Any], Any]]] = {
    "online_out reads past t": ("ol", "online_out", lambda real: lambda F, x, t: (F(list(x)) or [None])[-1]),
    "prefix_consistent_shaped ignores lengths": ("ol", "prefix_consistent_shaped", lambda real: ol.prefix_consistent),
    "prefix_consistent needs a row": ("ol", "prefix_consistent", lambda real: lambda F, xs: all(
        ol.get_opt(F(list(x)), r) is not None for x in xs for r in range(len(x))) and real(F, xs)),
    "length_preserving always holds": ("ol", "length_preserving", lambda real: lambda F, xs: True),
    "prefix_consistent off by one": ("ol", "prefix_consistent", _pc_off_by_one),
    "prefix_consistent_shaped off by one": ("ol", "prefix_consistent_shaped", _pcs_off_by_one),
    "row_map_decoder leaks the next token": ("ol", "row_map_decoder", _rows_leak_next),
    "global_sum_decoder drops a row": ("ol", "global_sum_decoder", lambda real: lambda x: real(x)[:-1]),
    "global_sum_decoder sums prefixes": ("ol", "global_sum_decoder",
                                         lambda real: lambda x: [a + sum(x[: i + 1]) for i, a in enumerate(x)]),
    "plga_attention without causal mask": ("spec", "plga_attention",
                                           lambda real: lambda q, g, k, v, support, *a, **kw: real(q, g, k, v, np.ones_like(support), *a, **kw)),
    "energy_curvature ignores a": ("spec", "energy_curvature", lambda real: lambda a_p, a, b_a: a_p + b_a),
    "sigmoid scaled by 8": ("spec", "sigmoid", lambda real: lambda u: 8 * real(u)),
    "density_operator shifted by -2I": ("spec", "density_operator",
                                        lambda real: lambda q: real(q) - 2 * np.eye(np.shape(q)[-1])),
    "density_operator plus E00": ("spec", "density_operator", lambda real: lambda q: real(q) + np.eye(np.shape(q)[-1])[:1].T @ np.eye(np.shape(q)[-1])[:1]),
    "density_operator plus I": ("spec", "density_operator", lambda real: lambda q: real(q) + np.eye(np.shape(q)[-1])),
    "row_clone plus I": ("spec", "row_clone", lambda real: lambda alpha, n: real(alpha, n) + np.eye(n, len(alpha))),
    "row_clone is zero": ("spec", "row_clone", lambda real: lambda alpha, n: 0 * real(alpha, n)),
    "softmax unnormalized": ("spec", "softmax", lambda real: lambda x: np.exp(np.asarray(x, dtype=np.float64))),
    "masked_softmax unnormalized": ("spec", "masked_softmax",
                                    lambda real: lambda x, support: np.where(support, np.exp(np.asarray(x, dtype=np.float64)), 0.0)),
    "rot with sin at twice the angle": ("spec", "rot", _scaled_rot),
    "rope_matrix at squared positions": ("spec", "rope_matrix", lambda real: lambda p, theta: real(p * abs(p), theta)),
    "sin scaled by 4": ("mp", "sin", lambda real: lambda x: 4 * real(x)),
    "metric_learner mixes rows": ("spec", "metric_learner",
                                  lambda real: lambda d, *a, **kw: real(d + np.mean(d, axis=-2, keepdims=True) * np.arange(1, d.shape[-1] + 1)[:, None], *a, **kw)),
    "plga_attention unnormalized": ("spec", "plga_attention", lambda real: lambda q, g, k, v, support, *a, **kw: np.where(
        support, np.exp(spec.plga_scores(q, g, k)), 0.0) @ v),
}

#: Mutations a check applies to its own construction (the hypothesis it feeds), not to the reference.
LOCAL_MUTATIONS = ("hypothesis off by rounding", "g before rope", "cache drops a position", "learner not collapsed",
                   "operator frozen at the prefix's Gram")

#: Hand-written check → the mutation it must reject (its negative control; tests run them all).
NEGATIVE: dict[str, str] = {
    "online_causal": "online_out reads past t",
    "prefixConsistentShaped_getElem": "prefix_consistent_shaped ignores lengths",
    "constNil_prefixConsistent": "prefix_consistent needs a row",
    "constNil_not_prefixConsistentShaped": "length_preserving always holds",
    "prefixConsistent_of_rowLocal": "prefix_consistent off by one",
    "prefixConsistentShaped_of_rowLocal": "prefix_consistent_shaped off by one",
    "rowMapDecoder_rowLocal": "row_map_decoder leaks the next token",
    "rowMapDecoder_lengthPreserving": "row_map_decoder leaks the next token",
    "rowMapDecoder_prefixConsistent": "row_map_decoder leaks the next token",
    "rowMapDecoder_prefixConsistentShaped": "row_map_decoder leaks the next token",
    "rowMapDecoder_block_eq_online": "row_map_decoder leaks the next token",
    "globalSumDecoder_lengthPreserving": "global_sum_decoder drops a row",
    "globalSumDecoder_not_prefixConsistent": "global_sum_decoder sums prefixes",
    "globalSumDecoder_not_prefixConsistentShaped": "global_sum_decoder sums prefixes",
    "inference_collapse": "hypothesis off by rounding",
    "generator_collapse": "hypothesis off by rounding",
    "collapse_prefixConsistent": "plga_attention without causal mask",
    "collapse_converse_false": "energy_curvature ignores a",
    "diam_comp_le": "sigmoid scaled by 8",
    "diam_iterate_le": "sigmoid scaled by 8",
    "density_posSemidef": "density_operator shifted by -2I",
    "density_rank": "density_operator plus E00",
    "density_rank_le": "density_operator plus I",
    "rowClone_rank_le_one": "row_clone plus I",
    "rowClone_rank_eq_one": "row_clone is zero",
    "softmax_eq_iff_shift": "softmax unnormalized",
    "maskedSoftmax_eq_iff_shift": "masked_softmax unnormalized",
    "relative_position_of_commute": "rot with sin at twice the angle",
    "ropeMatrix_relative_position": "rope_matrix at squared positions",
    "rope_scores_relative": "rope_matrix at squared positions",
    "norm_one_sub_exp": "sin scaled by 4",
    "geom_orbit_bound": "sin scaled by 4",
    "metricLearner_row_eq": "metric_learner mixes rows",
    "metricLearner_identical_rows": "metric_learner mixes rows",
    "plgaAttention_eq_of_row_shift": "plga_attention unnormalized",
}


@dataclass
class HandResult:
    examples: int
    worst_error: float = 0.0
    message: str = ""


HANDWRITTEN: dict[str, Callable[[Ctx], HandResult]] = {}
#: Lean theorem → the evidence its check gives: ``handwritten`` (the statement on reference
#: functions over constructed instances) or ``concrete-decoder`` (on the real reference decoder).
EVIDENCE: dict[str, str] = {}


def check(name: str, evidence: str = "handwritten") -> Callable[[Callable[[Ctx], HandResult]], Callable[[Ctx], HandResult]]:
    """Register a hand-written check under the Lean theorem ``name``."""
    if evidence not in ("handwritten", "concrete-decoder"):
        raise ValueError(f"unknown evidence {evidence!r}")

    def deco(fn: Callable[[Ctx], HandResult]) -> Callable[[Ctx], HandResult]:
        if name in HANDWRITTEN:
            raise ValueError(f"two hand-written checks for {name}")
        HANDWRITTEN[name] = fn
        EVIDENCE[name] = evidence
        fn.lean_name = name  # type: ignore[attr-defined]
        return fn

    return deco


def expect(cond: bool, msg: str) -> None:
    if not cond:
        raise CheckFailure(msg)


# --- decoders for the online contract -------------------------------------------------------


def _lists(rng: np.random.Generator, n: int, max_len: int = 6, vocab: int = 7) -> list[list[int]]:
    out = [[], [0], [0, 1]]
    for _ in range(n):
        out.append([int(v) for v in rng.integers(0, vocab, size=int(rng.integers(0, max_len + 1)))])
    return out


def _attention_row(prefix: list[int]) -> float:
    """A causal 'attention' row: softmax over the prefix's scores, read at the last token."""
    x = np.asarray(prefix, dtype=np.float64)
    return float(spec.softmax(x)[-1] * x.sum()) if len(prefix) else 0.0


def _decoders(ctx: Ctx) -> dict[str, ol.Decoder]:
    return {
        "rowMap(attention)": ctx.ol.row_map_decoder(_attention_row),
        "rowMap(sum)": ctx.ol.row_map_decoder(lambda p: sum(p)),
        "globalSum": ctx.ol.global_sum_decoder,
        "constNil": lambda x: [],
        "reverse": lambda x: list(reversed(x)),
        "drop1": lambda x: list(x[1:]),
    }


def _prefix_pairs(xs: list[list[int]]) -> list[tuple[list[int], list[int]]]:
    pairs = []
    for x in xs:
        for r in range(len(x) + 1):
            pairs.append((x, x[: r + 1]))
            pairs.append((x, [*x[: r + 1], 9]))
    return pairs


@check("online_causal")
def _online_causal(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    n = 0
    for _ in range(ctx.max_examples):
        x = _lists(rng, 1)[-1]
        t = int(rng.integers(0, len(x) + 2))
        y = x[:t] + [int(v) for v in rng.integers(0, 7, size=int(rng.integers(0, 4)))]
        for name, F in _decoders(ctx).items():
            expect(x[:t] == y[:t], "construction")
            expect(ctx.ol.same(ctx.ol.online_out(F, x, t), ctx.ol.online_out(F, y, t)), f"{name}: x={x} y={y} t={t}")
            n += 1
    return HandResult(n)


@check("prefixConsistentShaped_getElem")
def _pcs_getelem(ctx: Ctx) -> HandResult:
    xs = _lists(ctx.rng, ctx.max_examples)
    n = 0
    for name, F in _decoders(ctx).items():
        if not ctx.ol.prefix_consistent_shaped(F, xs):
            continue  # hypothesis fails on the sample: nothing to check for this decoder
        for x in xs:
            for r in range(len(x)):
                a, b = ctx.ol.get_opt(F(x), r), ctx.ol.get_opt(F(x[: r + 1]), r)
                expect(a is not None and ctx.ol.same(a, b), f"{name}: x={x} r={r}: {a} vs {b}")
                n += 1
    expect(n > 0, "no decoder satisfied the hypothesis")
    return HandResult(n)


@check("constNil_prefixConsistent")
def _constnil_pc(ctx: Ctx) -> HandResult:
    xs = _lists(ctx.rng, ctx.max_examples)
    expect(ctx.ol.prefix_consistent(lambda x: [], xs), "const [] is not prefix consistent")
    return HandResult(len(xs))


@check("constNil_not_prefixConsistentShaped")
def _constnil_not_pcs(ctx: Ctx) -> HandResult:
    expect(not ctx.ol.length_preserving(lambda x: [], [[0]]), "const [] preserves the length of [0]")
    expect(not ctx.ol.prefix_consistent_shaped(lambda x: [], [[0]]), "witness [0] does not refute")
    return HandResult(1)


def _implication(ctx: Ctx, premise: Callable[[ol.Decoder, list], bool], concl: Callable[[ol.Decoder, list], bool]) -> HandResult:
    xs = _lists(ctx.rng, ctx.max_examples)
    n = held = 0
    for name, F in _decoders(ctx).items():
        n += 1
        if premise(F, xs):
            held += 1
            expect(concl(F, xs), f"{name}: premise holds but conclusion fails on {xs}")
    expect(held > 0, "premise never held: vacuous check")
    return HandResult(n)


@check("prefixConsistent_of_rowLocal")
def _pc_of_rl(ctx: Ctx) -> HandResult:
    return _implication(ctx, lambda F, xs: ctx.ol.row_local(F, _prefix_pairs(xs)), ctx.ol.prefix_consistent)


@check("prefixConsistentShaped_of_rowLocal")
def _pcs_of_rl(ctx: Ctx) -> HandResult:
    return _implication(ctx, lambda F, xs: ctx.ol.length_preserving(F, xs) and ctx.ol.row_local(F, _prefix_pairs(xs)),
                        ctx.ol.prefix_consistent_shaped)


def _row_fns() -> dict[str, Callable[[list[int]], object]]:
    return {"attention": _attention_row, "sum": lambda p: sum(p), "last": lambda p: p[-1], "len": len}


#: Lean theorem → (the property of ``rowMapDecoder f`` on the drawn lists, what failing means).
_ROW_MAP_PROPERTIES: dict[str, tuple[Callable[[Any, Any, list[list[int]]], bool], str]] = {
    "rowMapDecoder_rowLocal": (lambda o, dec, xs: o.row_local(dec, _prefix_pairs(xs)), "not row-local"),
    "rowMapDecoder_lengthPreserving": (lambda o, dec, xs: o.length_preserving(dec, xs), "changes lengths"),
    "rowMapDecoder_prefixConsistent": (lambda o, dec, xs: o.prefix_consistent(dec, xs), "not prefix consistent"),
    "rowMapDecoder_prefixConsistentShaped": (lambda o, dec, xs: o.prefix_consistent_shaped(dec, xs), "not PCS"),
}


def _row_map_check(holds: Callable[[Any, Any, list[list[int]]], bool], failure: str) -> Callable[[Ctx], HandResult]:
    def run(ctx: Ctx) -> HandResult:
        xs = _lists(ctx.rng, ctx.max_examples)
        for name, f in _row_fns().items():
            expect(holds(ctx.ol, ctx.ol.row_map_decoder(f), xs), f"rowMapDecoder({name}) {failure}")
        return HandResult(len(xs) * len(_row_fns()))

    return run


for _lean_name, (_holds, _failure) in _ROW_MAP_PROPERTIES.items():
    check(_lean_name)(_row_map_check(_holds, _failure))


@check("rowMapDecoder_block_eq_online")
def _rm_block(ctx: Ctx) -> HandResult:
    xs = _lists(ctx.rng, ctx.max_examples)
    n = 0
    for name, f in _row_fns().items():
        F = ctx.ol.row_map_decoder(f)
        for x in xs:
            for r in range(len(x)):
                expect(ctx.ol.same(ctx.ol.get_opt(F(x), r), ctx.ol.online_out(F, x, r + 1)), f"{name}: x={x} r={r}")
                n += 1
    return HandResult(n)


@check("globalSumDecoder_lengthPreserving")
def _gs_lp(ctx: Ctx) -> HandResult:
    xs = _lists(ctx.rng, ctx.max_examples)
    expect(ctx.ol.length_preserving(ctx.ol.global_sum_decoder, xs), "globalSumDecoder changes a length")
    return HandResult(len(xs))


@check("globalSumDecoder_not_prefixConsistent")
def _gs_not_pc(ctx: Ctx) -> HandResult:
    expect(ctx.ol.global_sum_decoder([0, 1])[0] == 1 and ctx.ol.global_sum_decoder([0])[0] == 0, "witness rows")
    expect(not ctx.ol.prefix_consistent(ctx.ol.global_sum_decoder, [[0, 1]]), "witness [0, 1] does not refute")
    return HandResult(1)


@check("globalSumDecoder_not_prefixConsistentShaped")
def _gs_not_pcs(ctx: Ctx) -> HandResult:
    expect(not ctx.ol.prefix_consistent_shaped(ctx.ol.global_sum_decoder, [[0, 1]]), "witness [0, 1] does not refute")
    return HandResult(1)


# --- collapse --------------------------------------------------------------------------------


def _toy_model(ctx: Ctx, rng: np.random.Generator, L: int, d: int, vocab: int = 6):
    """A small causal decoder built from the reference: F(Gs, x) = rows of Σ_l PLGA_l."""
    emb = rng.normal(size=(vocab, d))

    def F(gs: list[np.ndarray], x: list[int]) -> list[np.ndarray]:
        if not x:
            return []
        h = emb[np.asarray(x) % vocab]  # [S, d]
        S = len(x)
        causal = spec.causal_support(S, S)
        out = sum(ctx.spec.plga_attention(h, g, h, h, causal) for g in gs)
        return [row for row in out]

    return F


def _bitwise_rows(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@check("inference_collapse")
def _inference_collapse(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    L, d = 2, 3
    F = _toy_model(ctx, rng, L, d)
    gstar = [rng.normal(size=(d, d)) for _ in range(L)]

    def s(x):  # the input set
        return len(x) % 2 == 0

    def gen(x):
        if ctx.mutation == "hypothesis off by rounding":  # G(x) is G* only up to one ulp on s
            return [np.nextafter(g, np.inf) for g in gstar] if s(x) else [g + 0.1 * len(x) for g in gstar]
        return [g.copy() for g in gstar] if s(x) else [g + 0.1 * len(x) for g in gstar]

    n = 0
    for x in _lists(rng, ctx.max_examples):
        if s(x):
            expect(all(np.array_equal(a, b) for a, b in zip(gen(x), gstar, strict=True)), "hypothesis")
            expect(_bitwise_rows(F(gen(x), x), F(gstar, x)), f"x={x}: outputs differ")
            n += 1
    return HandResult(n)


@check("generator_collapse")
def _generator_collapse(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    L, d, eps = 2, 3, 1e-9
    astar = [rng.normal(size=(d, d)) for _ in range(L)]
    W, B, P, a, ba = ([rng.normal(size=(d, d)) for _ in range(L)] for _ in range(5))

    def A(x):
        if len(x) >= 4:
            return [m + 1 for m in astar]
        return [np.nextafter(m, np.inf) if ctx.mutation == "hypothesis off by rounding" else m.copy() for m in astar]

    def G(As: list[np.ndarray]) -> list[np.ndarray]:
        return [ctx.spec.energy_curvature(ctx.spec.hadamard_power(ctx.spec.metric_tensor(As[i], W[i], B[i], eps), P[i]), a[i], ba[i])
                for i in range(L)]

    n = 0
    for x in _lists(rng, ctx.max_examples):
        if len(x) < 4:
            expect(all(np.array_equal(u, v) for u, v in zip(G(A(x)), G(astar), strict=True)), f"x={x}")
            n += 1
    return HandResult(n)


@check("collapse_prefixConsistent")
def _collapse_pc(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    L, d = 2, 3
    F = _toy_model(ctx, rng, L, d)
    gstar = [rng.normal(size=(d, d)) for _ in range(L)]
    xs = [x for x in _lists(rng, ctx.max_examples) if x]
    expect(ctx.ol.prefix_consistent(lambda x: F(gstar, x), xs), "hypothesis hF fails for the causal toy model")

    def gen(x):
        return [g.copy() for g in gstar]

    expect(ctx.ol.prefix_consistent(lambda x: F(gen(x), x), xs), "collapsed model is not prefix consistent")
    return HandResult(len(xs))


@check("collapse_converse_false")
def _collapse_converse(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    for d in range(1, 5):
        gstar = rng.normal(size=(d, d))
        a1, a2 = rng.normal(size=(d, d)), rng.normal(size=(d, d))
        zero = np.zeros((d, d))
        expect(not np.array_equal(a1, a2), "witnesses equal")
        expect(np.array_equal(ctx.spec.energy_curvature(a1, zero, gstar), gstar), f"d={d}: A1 witness")
        expect(np.array_equal(ctx.spec.energy_curvature(a2, zero, gstar), gstar), f"d={d}: A2 witness")
    return HandResult(4)


# --- contraction ----------------------------------------------------------------------------


def _ediam(pts: np.ndarray) -> float:
    if len(pts) < 2:
        return 0.0
    diff = pts[:, None, :] - pts[None, :, :]
    return float(np.max(np.sqrt(np.sum(diff**2, axis=-1))))


@check("diam_comp_le")
def _diam_comp(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    worst = 0.0
    for _ in range(ctx.max_examples):
        d = int(rng.integers(1, 5))
        W1, W2 = rng.normal(size=(d, d)), rng.normal(size=(d, d))
        kf, kg = np.linalg.norm(W1, 2), np.linalg.norm(W2, 2) / 4  # σ is 1/4-Lipschitz
        s = rng.normal(size=(int(rng.integers(1, 8)), d))
        img = np.stack([ctx.spec.sigmoid(W2 @ (W1 @ x)) for x in s])
        lhs, rhs = _ediam(img), kg * kf * _ediam(s)
        worst = max(worst, lhs - rhs)
        expect(lhs <= rhs * (1 + 1e-12) + 1e-15, f"ediam {lhs} > {rhs}")
    return HandResult(ctx.max_examples, max(worst, 0.0))


@check("diam_iterate_le")
def _diam_iter(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    for _ in range(ctx.max_examples):
        d = int(rng.integers(1, 5))
        W = rng.normal(size=(d, d))
        k = np.linalg.norm(W, 2) / 4
        N = int(rng.integers(0, 5))
        s = rng.normal(size=(int(rng.integers(1, 8)), d))
        img = s.copy()
        for _ in range(N):
            img = np.stack([ctx.spec.sigmoid(W @ x) for x in img])
        expect(_ediam(img) <= k**N * _ediam(s) * (1 + 1e-12) + 1e-15, f"N={N}")
    return HandResult(ctx.max_examples)


# --- density operator and ranks (exact rational instances) ----------------------------------


def _rank_exact(mp_matrix: np.ndarray) -> int:
    return sp.Matrix([[sp.Rational(str(x)) if not isinstance(x, (int, float)) else sp.Rational(x) for x in row]
                      for row in mp_matrix.tolist()]).rank() if mp_matrix.size else 0


def _lowrank_int(rng: np.random.Generator, S: int, d: int, r: int) -> np.ndarray:
    return (rng.integers(-3, 4, size=(S, r)) @ rng.integers(-3, 4, size=(r, d))).astype(np.float64)


@check("density_posSemidef")
def _density_psd(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    worst = 0.0
    for _ in range(ctx.max_examples):
        S, d = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        Q = rng.uniform(-4, 4, size=(S, d))
        D = ctx.spec.density_operator(Q)
        expect(np.array_equal(D, D.T), "not symmetric")
        tol = 8 * d * S * U * float(np.max(np.abs(Q))) ** 2
        lam = float(np.min(np.linalg.eigvalsh(D)))
        worst = max(worst, -lam)
        expect(lam >= -tol, f"eigenvalue {lam} < -{tol}")
        with ctx.mp.workdps(ctx.dps):
            Dm = mp_eval(ctx.spec.density_operator, Q, dps=ctx.dps)
            ev = ctx.mp.eigsy(ctx.mp.matrix(Dm.tolist()))[0]
            expect(min(ev) >= -ctx.mp.mpf(10) ** (-(ctx.dps - 10)) * (1 + float(np.max(np.abs(D)))), "mp eigenvalue < 0")
    return HandResult(ctx.max_examples, worst)


@check("density_rank")
def _density_rank(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    for _ in range(ctx.max_examples):
        S, d = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        r = int(rng.integers(0, min(S, d) + 1))
        Q = _lowrank_int(rng, S, d, r)
        D = mp_eval(ctx.spec.density_operator, Q, dps=ctx.dps)  # integer entries: exact
        expect(_rank_exact(D) == _rank_exact(Q.astype(object)), f"rank(QᵀQ) ≠ rank(Q) for Q={Q.tolist()}")
    return HandResult(ctx.max_examples)


@check("density_rank_le")
def _density_rank_le(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    for _ in range(ctx.max_examples):
        S, d = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        Q = rng.integers(-3, 4, size=(S, d)).astype(np.float64)
        D = mp_eval(ctx.spec.density_operator, Q, dps=ctx.dps)
        expect(_rank_exact(D) <= min(S, d), f"rank > min(S, d) for Q={Q.tolist()}")
    return HandResult(ctx.max_examples)


@check("rowClone_rank_le_one")
def _rc_rank_le(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    for _ in range(ctx.max_examples):
        d = int(rng.integers(1, 6))
        alpha = rng.integers(-3, 4, size=d).astype(np.float64)
        expect(_rank_exact(ctx.spec.row_clone(alpha, d).astype(object)) <= 1, f"α={alpha}")
    return HandResult(ctx.max_examples)


@check("rowClone_rank_eq_one")
def _rc_rank_eq(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    for _ in range(ctx.max_examples):
        d = int(rng.integers(1, 6))
        alpha = rng.integers(-3, 4, size=d).astype(np.float64)
        if not np.any(alpha):
            alpha[0] = 1.0  # hypothesis α ≠ 0
        expect(_rank_exact(ctx.spec.row_clone(alpha, d).astype(object)) == 1, f"α={alpha}")
    return HandResult(ctx.max_examples)


# --- softmax characterizations ------------------------------------------------------------


def _close(a: np.ndarray, b: np.ndarray, scale: float = 1.0) -> bool:
    return bool(np.max(np.abs(np.asarray(a) - np.asarray(b)), initial=0.0) <= 64 * U * max(scale, 1.0))


@check("softmax_eq_iff_shift")
def _softmax_iff(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    for _ in range(ctx.max_examples):
        n = int(rng.integers(1, 6))
        x, c = rng.uniform(-4, 4, n), float(rng.uniform(-4, 4))
        y = x + c  # ⇐: a common shift gives equal outputs
        expect(_close(ctx.spec.softmax(x), ctx.spec.softmax(y), 8), f"shift: x={x} c={c}")
        # ⇒: the proof's witness c = log Σ e^y − log Σ e^x recovers the shift
        with ctx.mp.workdps(ctx.dps):
            w = ctx.mp.log(sum(ctx.mp.exp(v) for v in y)) - ctx.mp.log(sum(ctx.mp.exp(v) for v in x))
            expect(all(abs(ctx.mp.mpf(yi) - ctx.mp.mpf(xi) - w) < 1e-12 for xi, yi in zip(x, y, strict=True)), "witness")
        if n > 1:  # a non-constant change makes both sides false
            z = x.copy()
            z[0] += 1.0
            expect(not _close(ctx.spec.softmax(x), ctx.spec.softmax(z)), f"non-shift z={z} has equal softmax")
    return HandResult(ctx.max_examples)


@check("maskedSoftmax_eq_iff_shift")
def _msoftmax_iff(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    for _ in range(ctx.max_examples):
        n = int(rng.integers(1, 6))
        J = rng.random(n) < 0.6
        J[int(rng.integers(0, n))] = True  # J nonempty
        x, c = rng.uniform(-4, 4, n), float(rng.uniform(-4, 4))
        y = np.where(J, x + c, rng.uniform(-4, 4, n))  # shift on J, anything off J
        expect(_close(ctx.spec.masked_softmax(x, J), ctx.spec.masked_softmax(y, J), 8), f"J={J} x={x} y={y}")
        if J.sum() > 1:
            z = x.copy()
            z[int(np.flatnonzero(J)[0])] += 1.0
            expect(not _close(ctx.spec.masked_softmax(x, J), ctx.spec.masked_softmax(z, J)), "non-shift on J")
    return HandResult(ctx.max_examples)


# --- rope: commuting operators -------------------------------------------------------------


@check("relative_position_of_commute")
def _rel_pos(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    worst = 0.0
    for _ in range(ctx.max_examples):
        a, b, u, v = rng.uniform(-4, 4, 4)
        G = a * np.eye(2) + b * spec.rot_j()  # commutes with every rotation (hypothesis)
        for t in rng.uniform(-10, 10, 3):
            expect(_close(G @ ctx.spec.rot(t), ctx.spec.rot(t) @ G, 8), "hypothesis")
        lhs = ctx.spec.rot(-u) @ G @ ctx.spec.rot(v)
        rhs = G @ ctx.spec.rot(v - u)
        err = float(np.max(np.abs(lhs - rhs)))
        worst = max(worst, err)
        expect(err <= 64 * U * (abs(a) + abs(b) + 1), f"a={a} b={b} u={u} v={v}: {err}")
    return HandResult(ctx.max_examples, worst)


def _block_scalar(rng: np.random.Generator, m: int) -> np.ndarray:
    G = np.zeros((2 * m, 2 * m))
    for j in range(m):
        a, b = rng.uniform(-3, 3, 2)
        G[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = a * np.eye(2) + b * spec.rot_j()
    return G


@check("ropeMatrix_relative_position")
def _rope_rel(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    worst = 0.0
    for _ in range(ctx.max_examples):
        m = int(rng.integers(1, 4))
        theta = rng.uniform(-2, 2, m)
        G = _block_scalar(rng, m)
        u, v = rng.uniform(-5, 5, 2)

        def R(p, theta=theta):
            return ctx.spec.rope_matrix(p, theta)

        expect(_close(G @ R(1.3), R(1.3) @ G, 16), "hypothesis")
        err = float(np.max(np.abs(R(u).T @ G @ R(v) - G @ R(v - u))))
        worst = max(worst, err)
        expect(err <= 256 * U * (1 + np.max(np.abs(G))), f"m={m}: {err}")
    return HandResult(ctx.max_examples, worst)


@check("rope_scores_relative")
def _rope_scores(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    worst = 0.0
    for _ in range(ctx.max_examples):
        m = int(rng.integers(1, 4))
        theta = rng.uniform(-2, 2, m)
        G = _block_scalar(rng, m)
        p, p2 = rng.uniform(-5, 5, 2)
        q, k = rng.uniform(-3, 3, 2 * m), rng.uniform(-3, 3, 2 * m)

        def R(t, theta=theta):
            return ctx.spec.rope_matrix(t, theta)

        lhs = (R(p) @ q) @ (G @ (R(p2) @ k))
        rhs = q @ ((G @ R(p2 - p)) @ k)
        err = abs(lhs - rhs)
        worst = max(worst, err)
        expect(err <= 1024 * U * (1 + np.max(np.abs(G))) * 9 * m, f"m={m}: {err}")
    return HandResult(ctx.max_examples, worst)


# --- twirl bound ---------------------------------------------------------------------------


@check("norm_one_sub_exp")
def _norm_one_sub_exp(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    worst = 0.0
    with ctx.mp.workdps(ctx.dps):
        for w in [*rng.uniform(-20, 20, ctx.max_examples), 0.0, 2 * math.pi]:
            lhs = abs(1 - ctx.mp.exp(ctx.mp.mpc(0, w)))
            rhs = 2 * abs(ctx.mp.sin(ctx.mp.mpf(w) / 2))
            err = float(abs(lhs - rhs))
            worst = max(worst, abs(abs(1 - np.exp(1j * w)) - 2 * abs(math.sin(w / 2))))
            expect(err <= 1e-40, f"ω={w}: {err}")
    return HandResult(ctx.max_examples + 2, worst)


@check("geom_orbit_bound")
def _geom_orbit(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    with ctx.mp.workdps(ctx.dps):
        for _ in range(ctx.max_examples):
            w = float(rng.uniform(-7, 7))
            if math.sin(w / 2) == 0:
                continue
            S = int(rng.integers(0, 200))
            z = ctx.mp.exp(ctx.mp.mpc(0, w))
            lhs = abs(ctx.mp.fsum(z ** (n + 1) for n in range(S)))
            expect(lhs <= 1 / abs(ctx.mp.sin(ctx.mp.mpf(w) / 2)) + ctx.mp.mpf(10) ** -40, f"ω={w} S={S}")
    return HandResult(ctx.max_examples)


# --- metric learner ------------------------------------------------------------------------


def _units(rng: np.random.Generator, d: int, F: int, n_units: int = 2, n_blocks: int = 2):
    units = []
    for _ in range(n_units):
        blocks = [(rng.normal(size=(F, d)), rng.normal(size=F), rng.normal(size=(F, d)), rng.normal(size=F),
                   rng.normal(size=(d, F)), rng.normal(size=d)) for _ in range(n_blocks)]
        units.append((blocks, rng.normal(size=d), rng.normal(size=d)))
    return units


@check("metricLearner_row_eq")
def _ml_row_eq(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    for _ in range(ctx.max_examples):
        d, F = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        D, D2 = rng.normal(size=(d, d)), rng.normal(size=(d, d))
        i, j = int(rng.integers(0, d)), int(rng.integers(0, d))
        D2[j] = D[i]  # hypothesis D i = D' j
        g, b, units = rng.normal(size=d), rng.normal(size=d), _units(rng, d, F)
        eps = 1e-6
        A, A2 = ctx.spec.metric_learner(D, g, b, units, eps), ctx.spec.metric_learner(D2, g, b, units, eps)
        expect(np.array_equal(A[i], A2[j]), f"rows differ: d={d} i={i} j={j}")
    return HandResult(ctx.max_examples)


@check("metricLearner_identical_rows")
def _ml_identical(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    for _ in range(ctx.max_examples):
        d, F = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        D = np.tile(rng.normal(size=d), (d, 1))  # hypothesis: all rows equal
        g, b, units = rng.normal(size=d), rng.normal(size=d), _units(rng, d, F)
        A = ctx.spec.metric_learner(D, g, b, units, 1e-6)
        expect(all(np.array_equal(A[0], A[i]) for i in range(d)), f"d={d}: rows differ")
    return HandResult(ctx.max_examples)


# --- attention ------------------------------------------------------------------------------


@check("plgaAttention_eq_of_row_shift")
def _attn_row_shift(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    worst = 0.0
    for _ in range(ctx.max_examples):
        d = int(rng.integers(1, 5))
        S, T, dv = int(rng.integers(1, d + 1)), int(rng.integers(1, d + 1)), int(rng.integers(1, 4))
        Q, K, V = rng.normal(size=(S, d)), rng.normal(size=(T, d)), rng.normal(size=(T, dv))
        G, c = rng.normal(size=(d, d)), rng.normal(size=S)
        # G' = G + w uᵀ with Q w = √d c and K u = 1: scores shift by c_t on row t (hypothesis)
        w = np.linalg.lstsq(Q, math.sqrt(d) * c, rcond=None)[0]
        u = np.linalg.lstsq(K, np.ones(T), rcond=None)[0]
        G2 = G + np.outer(w, u)
        shift = ctx.spec.plga_scores(Q, G2, K) - ctx.spec.plga_scores(Q, G, K) - c[:, None]
        if np.max(np.abs(shift)) > 1e-9:
            continue  # least squares did not solve exactly (rank deficiency): hypothesis fails
        J = rng.random((S, T)) < 0.7
        out1 = ctx.spec.plga_attention(Q, G2, K, V, J)
        out2 = ctx.spec.plga_attention(Q, G, K, V, J)
        err = float(np.max(np.abs(out1 - out2)))
        worst = max(worst, err)
        expect(err <= 1e-8 * (1 + np.max(np.abs(V))), f"attention changed by {err}")
    return HandResult(ctx.max_examples, worst)
