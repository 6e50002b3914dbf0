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
    negative control injects (``None``: the real computation)."""

    max_examples: int = 25
    dps: int = 50
    seed: int = 0
    mutation: str | None = None

    @property
    def rng(self) -> np.random.Generator:
        return np.random.default_rng(self.seed)


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


def _decoders() -> dict[str, ol.Decoder]:
    return {
        "rowMap(attention)": ol.row_map_decoder(_attention_row),
        "rowMap(sum)": ol.row_map_decoder(lambda p: sum(p)),
        "globalSum": ol.global_sum_decoder,
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
        for name, F in _decoders().items():
            expect(x[:t] == y[:t], "construction")
            expect(ol.same(ol.online_out(F, x, t), ol.online_out(F, y, t)), f"{name}: x={x} y={y} t={t}")
            n += 1
    return HandResult(n)


@check("prefixConsistentShaped_getElem")
def _pcs_getelem(ctx: Ctx) -> HandResult:
    xs = _lists(ctx.rng, ctx.max_examples)
    n = 0
    for name, F in _decoders().items():
        if not ol.prefix_consistent_shaped(F, xs):
            continue  # hypothesis fails on the sample: nothing to check for this decoder
        for x in xs:
            for r in range(len(x)):
                a, b = ol.get_opt(F(x), r), ol.get_opt(F(x[: r + 1]), r)
                expect(a is not None and ol.same(a, b), f"{name}: x={x} r={r}: {a} vs {b}")
                n += 1
    expect(n > 0, "no decoder satisfied the hypothesis")
    return HandResult(n)


@check("constNil_prefixConsistent")
def _constnil_pc(ctx: Ctx) -> HandResult:
    xs = _lists(ctx.rng, ctx.max_examples)
    expect(ol.prefix_consistent(lambda x: [], xs), "const [] is not prefix consistent")
    return HandResult(len(xs))


@check("constNil_not_prefixConsistentShaped")
def _constnil_not_pcs(ctx: Ctx) -> HandResult:
    expect(not ol.length_preserving(lambda x: [], [[0]]), "const [] preserves the length of [0]")
    expect(not ol.prefix_consistent_shaped(lambda x: [], [[0]]), "witness [0] does not refute")
    return HandResult(1)


def _implication(ctx: Ctx, premise: Callable[[ol.Decoder, list], bool], concl: Callable[[ol.Decoder, list], bool]) -> HandResult:
    xs = _lists(ctx.rng, ctx.max_examples)
    n = held = 0
    for name, F in _decoders().items():
        n += 1
        if premise(F, xs):
            held += 1
            expect(concl(F, xs), f"{name}: premise holds but conclusion fails on {xs}")
    expect(held > 0, "premise never held: vacuous check")
    return HandResult(n)


@check("prefixConsistent_of_rowLocal")
def _pc_of_rl(ctx: Ctx) -> HandResult:
    return _implication(ctx, lambda F, xs: ol.row_local(F, _prefix_pairs(xs)), ol.prefix_consistent)


@check("prefixConsistentShaped_of_rowLocal")
def _pcs_of_rl(ctx: Ctx) -> HandResult:
    return _implication(ctx, lambda F, xs: ol.length_preserving(F, xs) and ol.row_local(F, _prefix_pairs(xs)),
                        ol.prefix_consistent_shaped)


def _row_fns() -> dict[str, Callable[[list[int]], object]]:
    return {"attention": _attention_row, "sum": lambda p: sum(p), "last": lambda p: p[-1], "len": len}


#: Lean theorem → (the property of ``rowMapDecoder f`` on the drawn lists, what failing means).
_ROW_MAP_PROPERTIES: dict[str, tuple[Callable[[Any, list[list[int]]], bool], str]] = {
    "rowMapDecoder_rowLocal": (lambda dec, xs: ol.row_local(dec, _prefix_pairs(xs)), "not row-local"),
    "rowMapDecoder_lengthPreserving": (ol.length_preserving, "changes lengths"),
    "rowMapDecoder_prefixConsistent": (ol.prefix_consistent, "not prefix consistent"),
    "rowMapDecoder_prefixConsistentShaped": (ol.prefix_consistent_shaped, "not PCS"),
}


def _row_map_check(holds: Callable[[Any, list[list[int]]], bool], failure: str) -> Callable[[Ctx], HandResult]:
    def run(ctx: Ctx) -> HandResult:
        xs = _lists(ctx.rng, ctx.max_examples)
        for name, f in _row_fns().items():
            expect(holds(ol.row_map_decoder(f), xs), f"rowMapDecoder({name}) {failure}")
        return HandResult(len(xs) * len(_row_fns()))

    return run


for _lean_name, (_holds, _failure) in _ROW_MAP_PROPERTIES.items():
    check(_lean_name)(_row_map_check(_holds, _failure))


@check("rowMapDecoder_block_eq_online")
def _rm_block(ctx: Ctx) -> HandResult:
    xs = _lists(ctx.rng, ctx.max_examples)
    n = 0
    for name, f in _row_fns().items():
        F = ol.row_map_decoder(f)
        for x in xs:
            for r in range(len(x)):
                expect(ol.same(ol.get_opt(F(x), r), ol.online_out(F, x, r + 1)), f"{name}: x={x} r={r}")
                n += 1
    return HandResult(n)


@check("globalSumDecoder_lengthPreserving")
def _gs_lp(ctx: Ctx) -> HandResult:
    xs = _lists(ctx.rng, ctx.max_examples)
    expect(ol.length_preserving(ol.global_sum_decoder, xs), "globalSumDecoder changes a length")
    return HandResult(len(xs))


@check("globalSumDecoder_not_prefixConsistent")
def _gs_not_pc(ctx: Ctx) -> HandResult:
    expect(ol.global_sum_decoder([0, 1])[0] == 1 and ol.global_sum_decoder([0])[0] == 0, "witness rows")
    expect(not ol.prefix_consistent(ol.global_sum_decoder, [[0, 1]]), "witness [0, 1] does not refute")
    return HandResult(1)


@check("globalSumDecoder_not_prefixConsistentShaped")
def _gs_not_pcs(ctx: Ctx) -> HandResult:
    expect(not ol.prefix_consistent_shaped(ol.global_sum_decoder, [[0, 1]]), "witness [0, 1] does not refute")
    return HandResult(1)


# --- collapse --------------------------------------------------------------------------------


def _toy_model(rng: np.random.Generator, L: int, d: int, vocab: int = 6):
    """A small causal decoder built from the reference: F(Gs, x) = rows of Σ_l PLGA_l."""
    emb = rng.normal(size=(vocab, d))

    def F(gs: list[np.ndarray], x: list[int]) -> list[np.ndarray]:
        if not x:
            return []
        h = emb[np.asarray(x) % vocab]  # [S, d]
        S = len(x)
        causal = np.tril(np.ones((S, S), dtype=bool))
        out = sum(spec.plga_attention(h, g, h, h, causal) for g in gs)
        return [row for row in out]

    return F


def _bitwise_rows(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@check("inference_collapse")
def _inference_collapse(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    L, d = 2, 3
    F = _toy_model(rng, L, d)
    gstar = [rng.normal(size=(d, d)) for _ in range(L)]

    def s(x):  # the input set
        return len(x) % 2 == 0

    def gen(x):
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
        return [m.copy() for m in astar] if len(x) < 4 else [m + 1 for m in astar]

    def G(As: list[np.ndarray]) -> list[np.ndarray]:
        return [spec.energy_curvature(spec.hadamard_power(spec.metric_tensor(As[i], W[i], B[i], eps), P[i]), a[i], ba[i])
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
    F = _toy_model(rng, L, d)
    gstar = [rng.normal(size=(d, d)) for _ in range(L)]
    xs = [x for x in _lists(rng, ctx.max_examples) if x]
    expect(ol.prefix_consistent(lambda x: F(gstar, x), xs), "hypothesis hF fails for the causal toy model")

    def gen(x):
        return [g.copy() for g in gstar]

    expect(ol.prefix_consistent(lambda x: F(gen(x), x), xs), "collapsed model is not prefix consistent")
    return HandResult(len(xs))


@check("collapse_converse_false")
def _collapse_converse(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    for d in range(1, 5):
        gstar = rng.normal(size=(d, d))
        a1, a2 = rng.normal(size=(d, d)), rng.normal(size=(d, d))
        zero = np.zeros((d, d))
        expect(not np.array_equal(a1, a2), "witnesses equal")
        expect(np.array_equal(spec.energy_curvature(a1, zero, gstar), gstar), f"d={d}: A1 witness")
        expect(np.array_equal(spec.energy_curvature(a2, zero, gstar), gstar), f"d={d}: A2 witness")
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
        img = np.stack([spec.sigmoid(W2 @ (W1 @ x)) for x in s])
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
            img = np.stack([spec.sigmoid(W @ x) for x in img])
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
        D = spec.density_operator(Q)
        expect(np.array_equal(D, D.T), "not symmetric")
        tol = 8 * d * S * U * float(np.max(np.abs(Q))) ** 2
        lam = float(np.min(np.linalg.eigvalsh(D)))
        worst = max(worst, -lam)
        expect(lam >= -tol, f"eigenvalue {lam} < -{tol}")
        with mpmath.workdps(ctx.dps):
            Dm = mp_eval(spec.density_operator, Q, dps=ctx.dps)
            ev = mpmath.eigsy(mpmath.matrix(Dm.tolist()))[0]
            expect(min(ev) >= -mpmath.mpf(10) ** (-(ctx.dps - 10)) * (1 + float(np.max(np.abs(D)))), "mp eigenvalue < 0")
    return HandResult(ctx.max_examples, worst)


@check("density_rank")
def _density_rank(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    for _ in range(ctx.max_examples):
        S, d = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        r = int(rng.integers(0, min(S, d) + 1))
        Q = _lowrank_int(rng, S, d, r)
        D = mp_eval(spec.density_operator, Q, dps=ctx.dps)  # integer entries: exact
        expect(_rank_exact(D) == _rank_exact(Q.astype(object)), f"rank(QᵀQ) ≠ rank(Q) for Q={Q.tolist()}")
    return HandResult(ctx.max_examples)


@check("density_rank_le")
def _density_rank_le(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    for _ in range(ctx.max_examples):
        S, d = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        Q = rng.integers(-3, 4, size=(S, d)).astype(np.float64)
        D = mp_eval(spec.density_operator, Q, dps=ctx.dps)
        expect(_rank_exact(D) <= min(S, d), f"rank > min(S, d) for Q={Q.tolist()}")
    return HandResult(ctx.max_examples)


@check("rowClone_rank_le_one")
def _rc_rank_le(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    for _ in range(ctx.max_examples):
        d = int(rng.integers(1, 6))
        alpha = rng.integers(-3, 4, size=d).astype(np.float64)
        expect(_rank_exact(spec.row_clone(alpha, d).astype(object)) <= 1, f"α={alpha}")
    return HandResult(ctx.max_examples)


@check("rowClone_rank_eq_one")
def _rc_rank_eq(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    for _ in range(ctx.max_examples):
        d = int(rng.integers(1, 6))
        alpha = rng.integers(-3, 4, size=d).astype(np.float64)
        if not np.any(alpha):
            alpha[0] = 1.0  # hypothesis α ≠ 0
        expect(_rank_exact(spec.row_clone(alpha, d).astype(object)) == 1, f"α={alpha}")
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
        expect(_close(spec.softmax(x), spec.softmax(y), 8), f"shift: x={x} c={c}")
        # ⇒: the proof's witness c = log Σ e^y − log Σ e^x recovers the shift
        with mpmath.workdps(ctx.dps):
            w = mpmath.log(sum(mpmath.exp(v) for v in y)) - mpmath.log(sum(mpmath.exp(v) for v in x))
            expect(all(abs(mpmath.mpf(yi) - mpmath.mpf(xi) - w) < 1e-12 for xi, yi in zip(x, y, strict=True)), "witness")
        if n > 1:  # a non-constant change makes both sides false
            z = x.copy()
            z[0] += 1.0
            expect(not _close(spec.softmax(x), spec.softmax(z)), f"non-shift z={z} has equal softmax")
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
        expect(_close(spec.masked_softmax(x, J), spec.masked_softmax(y, J), 8), f"J={J} x={x} y={y}")
        if J.sum() > 1:
            z = x.copy()
            z[int(np.flatnonzero(J)[0])] += 1.0
            expect(not _close(spec.masked_softmax(x, J), spec.masked_softmax(z, J)), "non-shift on J")
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
            expect(_close(G @ spec.rot(t), spec.rot(t) @ G, 8), "hypothesis")
        lhs = spec.rot(-u) @ G @ spec.rot(v)
        rhs = G @ spec.rot(v - u)
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
            return spec.rope_matrix(p, theta)

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
            return spec.rope_matrix(t, theta)

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
    with mpmath.workdps(ctx.dps):
        for w in [*rng.uniform(-20, 20, ctx.max_examples), 0.0, 2 * math.pi]:
            lhs = abs(1 - mpmath.exp(mpmath.mpc(0, w)))
            rhs = 2 * abs(mpmath.sin(mpmath.mpf(w) / 2))
            err = float(abs(lhs - rhs))
            worst = max(worst, abs(abs(1 - np.exp(1j * w)) - 2 * abs(math.sin(w / 2))))
            expect(err <= 1e-40, f"ω={w}: {err}")
    return HandResult(ctx.max_examples + 2, worst)


@check("geom_orbit_bound")
def _geom_orbit(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    with mpmath.workdps(ctx.dps):
        for _ in range(ctx.max_examples):
            w = float(rng.uniform(-7, 7))
            if math.sin(w / 2) == 0:
                continue
            S = int(rng.integers(0, 200))
            z = mpmath.exp(mpmath.mpc(0, w))
            lhs = abs(mpmath.fsum(z ** (n + 1) for n in range(S)))
            expect(lhs <= 1 / abs(mpmath.sin(mpmath.mpf(w) / 2)) + mpmath.mpf(10) ** -40, f"ω={w} S={S}")
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
        A, A2 = spec.metric_learner(D, g, b, units, eps), spec.metric_learner(D2, g, b, units, eps)
        expect(np.array_equal(A[i], A2[j]), f"rows differ: d={d} i={i} j={j}")
    return HandResult(ctx.max_examples)


@check("metricLearner_identical_rows")
def _ml_identical(ctx: Ctx) -> HandResult:
    rng = ctx.rng
    for _ in range(ctx.max_examples):
        d, F = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        D = np.tile(rng.normal(size=d), (d, 1))  # hypothesis: all rows equal
        g, b, units = rng.normal(size=d), rng.normal(size=d), _units(rng, d, F)
        A = spec.metric_learner(D, g, b, units, 1e-6)
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
        shift = spec.plga_scores(Q, G2, K) - spec.plga_scores(Q, G, K) - c[:, None]
        if np.max(np.abs(shift)) > 1e-9:
            continue  # least squares did not solve exactly (rank deficiency): hypothesis fails
        J = rng.random((S, T)) < 0.7
        out1 = spec.plga_attention(Q, G2, K, V, J)
        out2 = spec.plga_attention(Q, G, K, V, J)
        err = float(np.max(np.abs(out1 - out2)))
        worst = max(worst, err)
        expect(err <= 1e-8 * (1 + np.max(np.abs(V))), f"attention changed by {err}")
    return HandResult(ctx.max_examples, worst)
