"""The conformance checks: one function per property, registered in :data:`CHECKS`.

Each check takes a :class:`Context` (adapter, dtype, profile) and either returns (pass),
raises :class:`~plga.conformance.adapter.SkipCheck` (does not apply: a capability or shared
data is missing) or raises ``AssertionError`` (a conformance failure, with the tolerance
policy's three errors and a reproduction note). The pytest suite
(:mod:`plga.conformance.suite`), :func:`plga.conformance.check_kernel` and
:func:`plga.conformance.parametrize_with_checks` all run these same functions.

Groups: ``attention`` (differential against the reference over drawn shapes, dtypes, masks,
padding and G families), ``structure`` (sentinel G, batched = per-slice, SDPA at G = I,
non-contiguous inputs),
``chain`` (queries → G_LM), ``decoder`` (forward from a state dict), ``cache`` (decoding
modes and their fidelity).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from hypothesis import given, reproduce_failure, seed
from hypothesis import strategies as st
from hypothesis.errors import FlakyFailure, UnsatisfiedAssumption

from ..datafiles import GOLDEN_CHECKPOINT, TRAINED_G_LM, missing_reason
from ..draws import seed_alone_decides
from . import eager as eg
from . import memo, oracle, profiles
from . import strategies as sh
from .adapter import Adapter, SkipCheck, is_suite_skip, skip_check, time_scale_of
from .guard import (
    Held,
    KernelCrash,
    call_operation,
    foreign_text,
    guarded,
    suite_numerics,
    time_limit,
)
from .profiles import GROUPS, SUITE_THREADS_ENV
from .tolerance import (
    DECODER_ROWS,
    SMALLEST_NORMAL,
    UNIT_ROUNDOFF,
    ConformanceFailure,
    assert_bitwise_equal,
    assert_conforms,
    compare,
    dtype_name,
    k_for,
    score_unit_roundoff,
)

# --- Context and registry -------------------------------------------------------------------


@dataclasses.dataclass
class Context:
    """What a check runs against: the adapter, one dtype, the profile, the seed, and what the
    check has covered so far (axis → regions visited)."""

    adapter: Adapter
    dtype: str
    profile: str = "quick"
    check_id: str = ""
    shrink: bool = True
    reproduce: str | None = None  # "VERSION:BLOB" of a failure to replay
    seed: int = profiles.DEFAULT_SEED
    coverage: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    cases: int = 0
    left_out: list[str] = dataclasses.field(default_factory=list)  # boundary cases the conditioning rules rejected

    @property
    def device(self) -> str:
        return getattr(self.adapter, "device", "cpu")

    @property
    def mp(self) -> bool:
        """mpmath ground truth when the kernel computes in float64."""
        return self.dtype == "float64"

    @property
    def torch_dtype(self) -> Any:
        import torch

        return getattr(torch, self.dtype)

    @property
    def name(self) -> str:
        return self.check_id.split("[")[0]

    def settings(self, factor: float = 1.0) -> Any:
        return profiles.hypothesis_settings(self.profile, factor, shrink=self.shrink)

    def cover(self, regions: Mapping[str, str]) -> None:
        """Record one executed case's regions (axis → region)."""
        self.cases += 1
        for axis, region in regions.items():
            self.coverage.setdefault(axis, set()).add(region)

    def check_seed(self) -> int:
        """This check's Hypothesis seed: a function of the run's seed and the check id."""
        return zlib.crc32(f"{self.seed}:{self.check_id}".encode())


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    group: str
    fn: Callable[[Context], None]
    requires: tuple[str | tuple[str, ...], ...]  # capabilities; a tuple: any one of them
    doc: str
    dtypes: tuple[str, ...] | None  # None: every dtype the adapter declares


CHECKS: dict[str, Check] = {}


def register(name: str, group: str, *, requires: Sequence[str | tuple[str, ...]] = (),
             dtypes: Sequence[str] | None = None) -> Callable[[Callable[[Context], None]], Callable[[Context], None]]:
    def deco(fn: Callable[[Context], None]) -> Callable[[Context], None]:
        doc = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else name
        CHECKS[name] = Check(name, group, fn, tuple(requires), doc, None if dtypes is None else tuple(dtypes))
        return fn

    return deco


def check_ids(adapter: Adapter | None = None, group: str | None = None) -> list[tuple[str, str]]:
    """(check name, dtype) pairs in registry order; all suite dtypes when ``adapter`` is None."""
    from .adapter import DTYPES

    out = []
    for c in CHECKS.values():
        if group is not None and c.group != group:
            continue
        dts = c.dtypes if c.dtypes is not None else DTYPES
        if adapter is not None:
            dts = tuple(d for d in dts if d in adapter.dtypes) or dts[:1]  # keep one id to report the skip
        for d in dts:
            out.append((c.name, d))
    return out


def check_limit(adapter: Adapter, profile: str, timeout: float | None) -> float:
    """Seconds one check of ``adapter`` may run: ``timeout`` where given (0: no limit), else the
    profile's (:data:`profiles.CHECK_TIMEOUT`) times the adapter's ``time_scale``."""
    return profiles.CHECK_TIMEOUT[profile] * time_scale_of(adapter) if timeout is None else timeout


def run_check(adapter: Adapter, name: str, dtype: str, *, profile: str | None = None, shrink: bool = True,
              seed: int | None = None, timeout: float | None = None, context: Context | None = None,
              on_stuck: Callable[[str], None] | None = None) -> Context:
    """Run one registered check (raises SkipCheck / AssertionError / CheckTimeout as the check
    does) under its time limit; returns the context with the coverage it recorded.

    ``timeout``: seconds for the whole check (default: the profile's, :data:`profiles.CHECK_TIMEOUT`,
    times the adapter's ``time_scale``);
    ``on_stuck``: reports a check that cannot be interrupted before the process ends
    (:func:`plga.conformance.guard.time_limit`).
    """
    check = CHECKS[name]
    prof = profiles.selected(profile)
    ctx = context or Context(adapter, dtype, prof, f"{name}[{dtype}]", shrink, os.environ.get("PLGA_REPRODUCE"),
                             profiles.DEFAULT_SEED if seed is None else seed)
    adapter.require(*check.requires)
    if dtype not in adapter.dtypes:
        adapter.require(dtype)
    import torch

    missing = device_missing(ctx.device)
    if missing:
        raise skip_check(f"{adapter.name} runs on {ctx.device} but {missing}")
    # The suite's tensors are small: one intra-op thread is fastest and immune to the OpenMP
    # spin-wait stalls of an oversubscribed machine. $PLGA_NUM_THREADS overrides; restored after.
    with threads_restored(), suite_numerics():
        torch.set_num_threads(int(os.environ.get(SUITE_THREADS_ENV, "1")))
        limit = check_limit(adapter, prof, timeout)
        try:
            with time_limit(limit, f"check {ctx.check_id}", on_stuck):
                check.fn(ctx)
        except SkipCheck as exc:
            if not is_suite_skip(exc):  # from the implementation's code outside an operation's guard
                raise KernelCrash(f"the implementation raised SkipCheck({foreign_text(exc)!r}) outside an operation (its autograd backward, "
                                  "a thread): only the suite decides that a check does not apply") from None
            raise
        except AssertionError:  # a failure of the implementation (KernelCrash included)
            raise
        except Exception as exc:  # the guard makes every escape from the implementation a KernelCrash: this is ours
            if hasattr(exc, "add_note"):  # Python ≥ 3.11
                exc.add_note(f"plga conformance: the suite's own code raised in {ctx.check_id} — a bug in plga, not a "
                             "failure of the implementation (please report it)")
            raise
    return ctx


def device_missing(device: str) -> str | None:
    """Why this process cannot place tensors on ``device`` (a CUDA device without CUDA, ``mps``
    on a build without it), or None: the checks on it skip with that reason."""
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        return "no CUDA device is available"
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError, ValueError) as exc:  # torch says "not linked with support for mps" and so on
        return f"this process cannot use it ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    return None


def run_property(ctx: Context, strategy: Any, body: Callable[[Any], None], factor: float = 1.0,
                 boundary: Sequence[Any] = ()) -> None:
    """Run ``body(case)`` on every explicit ``boundary`` case, then over ``strategy`` under the
    context's profile and seed; failures carry a reproduction note.

    The boundary cases run first (:func:`run_boundary`: a rejected one retried or left out).
    """
    run_boundary(ctx, body, boundary)

    @given(st.data())
    def prop(data: Any) -> None:
        _run_case(ctx, body, data.draw(strategy, label="case"))

    prop._hypothesis_internal_add_digest = ctx.check_id.encode()  # type: ignore[attr-defined]
    test = seed(ctx.check_seed())(ctx.settings(factor)(prop))
    if ctx.reproduce:
        version, _, blob = ctx.reproduce.partition(":")
        test = reproduce_failure(version, blob.encode())(test)
    try:
        with seed_alone_decides():
            test()
    except AssertionError as exc:
        _add_repro(exc, ctx)
        raise
    except FlakyFailure as exc:  # a wrong result that replaying the case did not give again
        failure = next((e for e in exc.exceptions if isinstance(e, AssertionError)), None)
        if failure is None:
            raise
        failure.add_note("Not reproducible: this case failed when it was drawn and passed when Hypothesis replayed it. "
                         "The implementation's result depends on what ran before (a plan or cache built per shape, a "
                         "race, uninitialised memory); the wrong result above is the verdict.")
        _add_repro(failure, ctx)
        raise failure from None


#: Times a decoder boundary case whose seeded weights the conditioning rules reject is tried
#: again with other weights (its configuration and tokens, what it is there for, kept): at
#: bfloat16 the 4-layer, 5-head case was rejected, and with it the only case that showed a
#: bfloat16 decoder's padding bug at some seeds.
BOUNDARY_RESEEDS = 3


def run_boundary(ctx: Context, body: Callable[[Any], None], boundary: Sequence[Any]) -> None:
    """``body(case)`` on each explicit case (none while a drawn case is replayed). A decoder case
    whose conditioning ``assume`` fails is tried with other weights (:data:`BOUNDARY_RESEEDS`);
    a case still rejected is left out and named in ``ctx.left_out`` (the coverage report lists
    it: a region it alone reached is not covered at that dtype)."""
    for case in boundary if not ctx.reproduce else ():
        if getattr(case, "dtypes", ()) and ctx.dtype not in case.dtypes:
            continue  # a case meant for other dtypes (its own docstring says why)
        for attempt in range(BOUNDARY_RESEEDS + 1):
            try:
                _run_case(ctx, body, case)
            except UnsatisfiedAssumption:
                if isinstance(case, DecoderCase) and attempt < BOUNDARY_RESEEDS:  # the shape matters, not the weights
                    case = dataclasses.replace(case, seed=(case.seed * 31 + 7) % 2**31,
                                               label=case.label.split(" (")[0] + f" (weights reseeded {attempt + 1}×)")
                    continue
                ctx.left_out.append(getattr(case, "label", "a boundary case"))
            except AssertionError as exc:
                _add_repro(exc, ctx, boundary=True)
                raise
            break


def _assume(condition: bool) -> None:
    """Reject a case (Hypothesis draws another; a boundary case is left out)."""
    if not condition:
        raise UnsatisfiedAssumption()


def _within_declared(ctx: Context, case: Any) -> Any:
    """``case`` without the masks the implementation does not declare: a check that does not
    require ``causal`` or ``key_padding_mask`` (the structure checks, trained G) draws them only
    for an implementation that declares them — one without is judged unmasked, not failed for
    refusing a mask it never offered."""
    if not isinstance(case, sh.AttentionCase):
        return case
    causal = case.causal and ctx.adapter.provides("causal")
    padding = case.padding if ctx.adapter.provides("key_padding_mask") else "none"
    if (causal, padding) == (case.causal, case.padding):
        return case
    return dataclasses.replace(case, causal=causal, padding=padding)  # the same seeded values, regenerated


def _run_case(ctx: Context, body: Callable[[Any], None], case: Any) -> None:
    case = _within_declared(ctx, case)
    try:
        body(case)
    except AssertionError as exc:  # a failure raised before the body described its case (an exception of the kernel's)
        if hasattr(case, "describe") and "case (" not in str(exc) and not any("case (" in n for n in getattr(exc, "__notes__", ())):
            exc.add_note(case.describe())
        raise
    regions = case.regions() if hasattr(case, "regions") else getattr(case, "covered", None)
    if regions:
        ctx.cover(regions)


def _add_repro(exc: BaseException, ctx: Context, boundary: bool = False) -> None:
    import re

    blob = None
    for note in getattr(exc, "__notes__", []):
        m = re.search(r"@reproduce_failure\('([^']+)', b'([^']+)'\)", note)
        if m:
            blob = f"{m.group(1)}:{m.group(2)}"
    impl = (ctx.adapter.spec or os.environ.get("PLGA_IMPL") or "<module:object of your adapter>").split(" → ")[0]
    lines = [f"Reproduce ({ctx.check_id}, profile {ctx.profile}, seed {ctx.seed}"
             + (", an explicit boundary case" if boundary else "") + "):"]
    lines.append(f"  plga conformance --impl '{impl}' --profile {ctx.profile} --seed {ctx.seed} -k '{ctx.name} and {ctx.dtype}'")
    if blob:
        lines.append(f"  or replay the drawn case: PLGA_REPRODUCE='{blob}' plus the line above")
    lines.append("  (your module must be importable there: run from its folder or set PYTHONPATH)")
    exc.add_note("\n".join(lines))


def _call(ctx: Context, op: str, *args: Any, **kwargs: Any) -> Any:
    """The adapter's ``op`` on copies of the arguments, under guard (:mod:`plga.conformance.guard`)."""
    return call_operation(op, getattr(ctx.adapter, op), *args, **kwargs)


# --- Attention ------------------------------------------------------------------------------


def _baselines(t: dict[str, Any], **kw: Any) -> list[Any]:
    """The suite's own eager attention in every legitimate order (never the adapter's code);
    for bfloat16 / float16 inputs also computed in float32 and rounded once (a kernel that
    upcasts: where −1e9 overflows float16 it is the only baseline that measures anything)."""
    out = [eg.plga_attention(t["q"], t["k"], t["v"], t["G"], order=o, **kw) for o in eg.ATTENTION_ORDERS]
    q = t["q"]
    if str(q.dtype) in ("torch.bfloat16", "torch.float16"):
        wide = [None if x is None else x.float() for x in (t["q"], t["k"], t["v"], t["G"])]
        out.append(eg.plga_attention(*wide, order="natural", **kw).to(q.dtype))
    return out


@dataclasses.dataclass(frozen=True)
class ExactScores:
    """One attention case's exact scaled scores in float64, computed once: the conditioning
    assumption and the floors' magnitudes (forward and backward) read them."""

    x: np.ndarray  # scale · q G kᵀ [B, H, S, T]
    allowed: np.ndarray | None  # the allowed pairs, broadcastable to x; None: all
    scale: float  # the scale applied (1/√d when the case gives None)

    @classmethod
    def of(cls, t: dict[str, Any], causal: bool, scale: float | None) -> ExactScores:
        q, k = oracle.to_np(t["q"]), oracle.to_np(t["k"])
        d = q.shape[-1]
        g = np.eye(d) if t["G"] is None else oracle.to_np(t["G"])
        s = 1 / math.sqrt(d) if scale is None else scale
        x = ((q @ g) @ np.swapaxes(k, -1, -2)) * s  # [B, H, S, T]
        allowed = oracle.support_np(q.shape[0], q.shape[2], k.shape[2], causal=causal, key_padding_mask=t["key_padding_mask"])
        return cls(x, allowed, s)

    def max_abs(self) -> tuple[float, float]:
        """(max |scaled score| over all pairs, over the allowed pairs); 0 where there are none."""
        a = np.abs(self.x)  # the absolute value of the scaled score: a negative scale flips signs, not sizes
        on = a if self.allowed is None else np.where(self.allowed, a, 0.0)
        return (float(a.max()) if a.size else 0.0), (float(on.max()) if on.size else 0.0)

    def softmax(self, finite_mask: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(P [B, H, S, T], the exact softmax over the allowed keys, 0 on a row with none — under
        the finite mask, uniform there, the rows' scores taken equal as the backward's cases make
        them; that row's flag [B, H, S, 1])."""
        allowed = np.ones(self.x.shape, dtype=bool) if self.allowed is None else np.broadcast_to(self.allowed, self.x.shape)
        x = np.where(allowed, self.x, -np.inf)
        top = x.max(axis=-1, keepdims=True) if x.size else np.zeros((*x.shape[:-1], 1))  # [B, H, S, 1]
        empty = ~np.isfinite(top)
        w = np.where(allowed, np.exp(x - np.where(empty, 0.0, top)), 0.0)
        p = w / np.where(empty, 1.0, w.sum(axis=-1, keepdims=True))
        if finite_mask and x.shape[-1]:
            p = np.where(empty, 1.0 / x.shape[-1], p)
        return p, empty


def score_precision_ratio(dtype: str) -> float:
    """r = u(the precision a sound kernel keeps scores, log-sum-exp and accumulators in: float32
    or wider) / u(its inputs' dtype): 1 for float32 and float64, 2⁻¹⁶ for bfloat16, 2⁻¹³ for
    float16. Terms rounded only at that precision enter a floor in the inputs' ulp times r."""
    return score_unit_roundoff(dtype) / UNIT_ROUNDOFF[dtype]


def attention_magnitude(t: dict[str, Any], causal: bool, scale: float | None, values: np.ndarray | None = None,
                        scores: ExactScores | None = None) -> float:
    """Magnitude of the terms entering attention out, in units of the inputs' dtype:
    max over outputs of Σⱼ Pⱼ |vⱼ| · (1 + r · max|allowed scaled score|).

    Σⱼ Pⱼ |vⱼ| is |P||V|, the γ·|A||B| scale of the product out = P V (P the exact softmax
    weights over the allowed keys): max|v| where P is peaked, the mean |v| where it is spread
    over a long context — where max|v| would let a floor of a few of its ulp exceed the output
    itself (bfloat16 at 1100 keys: 0.13 against outputs of ~0.16, so an output halved passed).
    A row with no allowed key (its finite-mask value averages every key) counts max|v| of its
    keys. ``values`` replaces |v| (e.g. with masked values zeroed); ``scores``: the case's
    :class:`ExactScores` where the caller has them.

    The score factor is the softmax's own error scale: P = exp(s − lse) recomputed from a saved
    log-sum-exp (FA-2, two-pass kernels) carries a relative error ≈ u·|s|, since lse is rounded
    at the scores' magnitude; out = Σ P v inherits it times Σ P |v|. The u there is that of the
    precision scores and lse are kept in — float32 or wider in a sound kernel, whatever its
    inputs (bfloat16 and float16 kernels accumulate in float32) — so r = u(score precision) /
    u(inputs): 1 for float32 and float64, 2⁻¹⁶ for bfloat16, 2⁻¹³ for float16. Kernels that
    keep scores in bfloat16 or float16 are judged by the baselines, which do the same.
    """
    r = score_precision_ratio(dtype_name(t["q"]))
    v = np.abs(oracle.to_np(t["v"]) if values is None else values)  # [B, H, T, dv]
    if not v.size:
        return 0.0
    scores = scores or ExactScores.of(t, causal, scale)
    p, empty = scores.softmax()  # [B, H, S, T], [B, H, S, 1]
    weighted = p @ v  # Σⱼ Pⱼ |vⱼ| [B, H, S, dv]
    weighted = np.where(empty, v.max(axis=(-2, -1), keepdims=True), weighted)
    return float(weighted.max()) * (1.0 + r * scores.max_abs()[1])


def _attention_case_check(ctx: Context, case: sh.AttentionCase, *, what: str, finite_mask: bool = False) -> None:
    """One attention case against the truth and the baselines. Under the finite mask, the query
    rows with no allowed key are judged apart from the others: below float64 such a row rounds
    −1e9 + s to a uniform row where the float64 truth keeps softmax(s), a baseline error of the
    order of |v| that, in one comparison, let a finite-mask path with the scale 10 % off pass."""
    t = case.tensors(ctx.dtype, ctx.device)
    kw = dict(causal=case.causal, key_padding_mask=t["key_padding_mask"], scale=case.scale, finite_mask=finite_mask)
    scores = ExactScores.of(t, case.causal, case.scale)
    _assume(scores.max_abs()[0] <= sh.MAX_ABS_SCORE)
    truth = oracle.truth_attention(t["q"], t["k"], t["v"], t["G"], mp=ctx.mp and case.small, **kw)
    out = _call(ctx, "attention", t["q"], t["k"], t["v"], t["G"], **kw)
    base, mag = _baselines(t, **kw), attention_magnitude(t, case.causal, case.scale, scores=scores)
    parts: list[tuple[str, Any]] = [("", None)]
    if finite_mask and scores.allowed is not None:
        has_key = scores.allowed.any(axis=-1, keepdims=True)  # [B or 1, 1, S, 1]
        parts = [(", query rows with an allowed key", has_key), (", query rows with no allowed key", ~has_key)]
    for part, judged in parts:
        assert_conforms(out, base, truth, dtype=ctx.dtype, k=k_for(ctx.name), what=what + part, note=case.describe(),
                        magnitude=mag, judged=judged)


def _attention_check(ctx: Context, *, what: str, causal: bool | None, paddings: tuple[str, ...],
                     families: tuple[str, ...] | None = None, factor: float = 1.0) -> None:
    run_property(ctx, sh.attention_cases(causal=causal, padding=paddings, families=families),
                 lambda c: _attention_case_check(ctx, c, what=what), factor=factor,
                 boundary=sh.boundary_attention_cases(causal=causal, paddings=paddings, families=families, seed=ctx.seed))


@register("attention_unmasked", "attention", requires=("attention",))
def check_attention_unmasked(ctx: Context) -> None:
    """Unmasked PLGA attention equals the reference over every shape region, scale and G family."""
    _attention_check(ctx, what="attention (no mask)", causal=False, paddings=("none",))


@register("attention_causal", "attention", requires=("attention", "causal"))
def check_attention_causal(ctx: Context) -> None:
    """Causal attention (bottom-right aligned for S ≤ T) equals the ideal masked reference."""
    _attention_check(ctx, what="attention (causal)", causal=True, paddings=("none",))


def _empty_first_queries(c: sh.AttentionCase) -> None:
    """Causal left padding as a decoder's: batch row 0 padded past the first query's position, so
    its first queries see only padding keys (their rows are zeros, their gradients 0) while its
    last query keeps a real key."""
    if c.causal and c.padding == "left" and c.s > 1:
        assert c.pad is not None
        n = int(np.random.default_rng(c.seed + 11).integers(c.t - c.s + 1, c.t))  # T−S+1 … T−1 padded keys
        c.pad[0] = np.arange(c.t) < n  # query 0 (position T−S) sees only padding; the last query a real key


@register("attention_padding", "attention", requires=("attention", "key_padding_mask"))
def check_attention_padding(ctx: Context) -> None:
    """Key padding (right, left, scattered, fully padded rows; with and without causal) is excluded exactly.

    Causal left padding is the decoder's: the first queries of batch row 0 see only padding keys
    and their rows are zeros (the ideal mask), while its later queries and the other batch rows
    keep keys — a kernel that zeroes only fully padded batch rows leaves NaN or a mean there."""

    def body(c: sh.AttentionCase) -> None:
        _empty_first_queries(c)
        _attention_case_check(ctx, c, what="attention (key padding)")

    paddings = ("right", "left", "random", "full_rows")
    run_property(ctx, sh.attention_cases(causal=None, padding=paddings), body,
                 boundary=sh.boundary_attention_cases(causal=None, paddings=paddings, seed=ctx.seed))


@register("attention_finite_mask", "attention", requires=("attention", "finite_mask", "causal", "key_padding_mask"))
def check_attention_finite_mask(ctx: Context) -> None:
    """finite_mask=True reproduces the published −1e9 additive mask, fully masked rows included
    (judged apart from the rows with an allowed key)."""

    def body(c: sh.AttentionCase) -> None:
        # every case holds a query row with no allowed key, the regime where the finite mask
        # differs from the ideal one (softmax over all keys instead of zeros): causal, query 0
        # of batch row 0 sees only padding; otherwise the last batch row is all padding
        assert c.pad is not None  # every padding kind of this check pads
        if c.causal:
            c.pad[0, : c.t - c.s + 1] = True
        else:
            c.pad[-1] = True
        _attention_case_check(ctx, c, what="attention (finite −1e9 mask)", finite_mask=True)

    paddings = ("left", "right", "random", "full_rows")
    run_property(ctx, sh.attention_cases(causal=None, padding=paddings), body,
                 boundary=sh.boundary_attention_cases(causal=None, paddings=paddings, seed=ctx.seed))


#: The masked keys of ``attention_mask_dominance`` keep k Gᵀ below this fraction of the dtype's
#: largest value (room for a key-side kernel's sums).
KEY_SIDE_ROOM = 1 / 8


@register("attention_mask_dominance", "attention", requires=("attention", "key_padding_mask"))
def check_attention_mask_dominance(ctx: Context) -> None:
    """Masked keys with scores ~300 above the rest and values ~100 still get exactly zero weight."""
    import torch

    def body(c: sh.AttentionCase) -> None:
        _assume(c.pad is not None and c.pad.any())
        _assume(c.scale is None or c.scale >= 0.01)  # masked keys are placed to score +300 after scaling
        rng = np.random.default_rng(c.seed + 7)
        common = rng.standard_normal((c.b, c.h, 1, c.d))
        q = common + 0.3 * rng.standard_normal((c.b, c.h, c.s, c.d))
        g = np.broadcast_to(np.eye(c.d), (c.h, c.d, c.d)) if c.g is None else c.g
        qg = common @ g  # [B, H, 1, d]
        direction = qg / np.maximum(np.sum(qg * qg, axis=-1, keepdims=True), 1e-12)
        scale = c.scale if c.scale is not None else 1 / math.sqrt(c.d)
        k, v = c.k.copy(), c.v.copy()
        padded = c.pad[:, None, :, None]  # [B, 1, T, 1]
        k = np.where(padded, 300.0 / scale * direction, k)
        v = np.where(padded, 100.0, v)
        c.q, c.k, c.v = q, k, v
        # a sound kernel may apply G on the key side (k Gᵀ, the same scores): the masked keys'
        # k Gᵀ must fit the dtype too (a sentinel G of 700 heads took it past float16's range)
        _assume(float(np.abs(k @ np.swapaxes(g, -1, -2)).max()) <= torch.finfo(getattr(torch, ctx.dtype)).max * KEY_SIDE_ROOM)
        t = c.tensors(ctx.dtype, ctx.device)
        kw = dict(causal=c.causal, key_padding_mask=t["key_padding_mask"], scale=c.scale)
        truth = oracle.truth_attention(t["q"], t["k"], t["v"], t["G"], mp=ctx.mp and c.small, **kw)
        out = _call(ctx, "attention", t["q"], t["k"], t["v"], t["G"], **kw)
        unmasked_v = np.where(padded, 0.0, c.v)  # masked values never enter the result
        assert_conforms(out, _baselines(t, **kw), truth, dtype=ctx.dtype, what="attention (masked keys dominate the scores)",
                        note=c.describe() + "\n  masked keys score ≈ +300 and carry values 100: any leak through the mask shows",
                        magnitude=attention_magnitude(t, c.causal, c.scale, unmasked_v))

    fams = ("none", "identity", "random", "sentinel")
    run_property(ctx, sh.attention_cases(causal=None, padding=("right", "random"), families=fams), body,
                 boundary=[c for c in sh.boundary_attention_cases(causal=None, paddings=("right", "random"), families=fams,
                                                                  seed=ctx.seed) if c.scale is None or c.scale >= 0.01])


@register("attention_trained_g", "attention", requires=("attention",))
def check_attention_trained_g(ctx: Context) -> None:
    """The real trained G_LM of PLDR-LLM-v51-110M-1 (ill-conditioned ~1e10) at d = 64, 14 heads."""
    if oracle.trained_g_lm() is None:
        raise skip_check(missing_reason(TRAINED_G_LM))
    paper = [sh.AttentionCase(1, 14, 5, 70, 64, 64, "trained", False, True, "right", None, ctx.seed, label="boundary: paper shape"),
             sh.AttentionCase(2, 3, 1, 9, 64, 48, "trained", True, False, "none", None, ctx.seed + 1, label="boundary: S=1")]
    run_property(ctx, sh.attention_cases(causal=None, padding=("none", "right"), families=("trained",), dims=(64,), max_len=9),
                 lambda c: _attention_case_check(ctx, c, what="attention (trained G_LM)"), factor=0.5, boundary=paper)


def backward_magnitudes(t: dict[str, Any], w: Any, scores: ExactScores, finite_mask: bool = False) -> list[float]:
    """Magnitudes of the terms entering dQ, dK, dV, dG, in units of the inputs' dtype (float64).

    Two sources of rounding in a sound kernel, whichever is larger:

    * **intermediates rounded to the inputs' dtype** — P, dS = P∘(dP − D), q G (FA-2 feeds
      them to its products in bfloat16 / float16): u times the products of their *exact*
      absolute values, dV: Pᵀ|dO|; dQ': scale · P∘(|dO Vᵀ| + |D|) |K|, dQ: |dQ'| |G|ᵀ;
      dK: scale · (P∘(|dO Vᵀ| + |D|))ᵀ |q G|; dG: |q|ᵀ |dQ'|;
    * **accumulation in float32**: u(float32) times the absolute-value chain of the backward
      products (|dO||V|ᵀ for dO Vᵀ, Σ|dO||O| for D, |q||G| for q G), i.e. r times it in the
      inputs' ulp (r = :func:`score_precision_ratio`; 1 for float32 kernels, where the chain,
      the larger, is the whole magnitude).

    Both times the softmax's score factor (1 + r · max|allowed scaled score|), P being
    recomputed from a log-sum-exp kept in float32. The chain alone, in the inputs' ulp, ran to
    7–700× the gradients at bfloat16 (their sums cancel), above max|gradient| in 52 of 89
    comparisons: a backward that dropped a block of dK or dQ passed. ``w``: the output's
    cotangent dO; ``scores``: the case's :class:`ExactScores`.
    """
    q, k, v, do = (oracle.to_np(x) for x in (t["q"], t["k"], t["v"], w))  # do: [B, H, S, dv]
    g = np.eye(q.shape[-1]) if t["G"] is None else oracle.to_np(t["G"])
    tr = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
    p, _ = scores.softmax(finite_mask)  # [B, H, S, T]
    o = p @ v  # [B, H, S, dv]
    qg = q @ g  # [B, H, S, d]
    ds_exact = p * (np.abs(do @ tr(v)) + np.abs((do * o).sum(-1, keepdims=True)))  # [B, H, S, T]
    ds_chain = p * (np.abs(do) @ tr(np.abs(v)) + (np.abs(do) * np.abs(o)).sum(-1, keepdims=True))
    r = score_precision_ratio(dtype_name(t["q"]))

    scale = abs(scores.scale)  # a negative scale flips the gradients' signs, not their sizes

    def grads(ds: np.ndarray, qg_abs: np.ndarray) -> list[float]:
        dqg = scale * ds @ np.abs(k)  # [B, H, S, d]
        dq = dqg @ tr(np.abs(g))
        dk = scale * tr(ds) @ qg_abs
        dv = tr(p) @ np.abs(do)
        dg = tr(np.abs(q)) @ dqg  # [B, H, d, d]
        return [float(m.max()) if m.size else 0.0 for m in (dq, dk, dv, dg)]

    exact, chain = grads(ds_exact, np.abs(qg)), grads(ds_chain, np.abs(q) @ np.abs(g))
    score_max = scores.max_abs()[1]
    return [max(e, r * c) * (1.0 + r * score_max) for e, c in zip(exact, chain, strict=True)]


#: Backward cases past the sizes the B·H·S·T budget of the boundary shapes keeps out: 300 query
#: rows (partial 128- and 256-row query blocks; #19's 300 × 300 is over the budget) and 4 × 700
#: heads × 2 rows past 4096 query rows, with a G that has a gradient (B, H, S, T, d, dv, family,
#: G batched, causal, padding).
BACKWARD_SIZE_SHAPES = ((1, 1, 300, 130, 16, 16, "random", False, False, "right"),
                        (3, 700, 2, 2, 4, 4, "rank_one", True, True, "none"))

#: Finite-mask backward cases (same fields): a fully padded batch row, and causal left padding
#: whose first queries see only padding — the rows where the −1e9 mask averages every value.
BACKWARD_FINITE_SHAPES = ((2, 3, 5, 7, 4, 3, "random", True, False, "full_rows"),
                          (2, 2, 6, 9, 8, 8, "random", False, True, "left"),
                          (1, 2, 4, 70, 16, 16, "random", False, False, "full_rows"))


#: The explicit cases of the backward's layouts (same fields), taken in turn: two batch rows
#: and four heads (a sum over heads or batch rows counted twice shows), causal with S < T and
#: right padding, then S > T unpadded.
BACKWARD_LAYOUT_SHAPES = ((2, 4, 5, 9, 8, 8, "random", False, True, "right"),
                          (2, 3, 7, 4, 8, 6, "random", True, False, "none"))


#: How the backward's inputs reach the kernel (the gradients' values are the same; a backward
#: written for one layout can be wrong in another): ``plain`` — four contiguous leaves, each
#: requiring grad; ``shared_kv`` — keys and values of one head expanded over every head (head
#: stride 0, a multi-query caller: their gradient is the sum over heads, once); ``g_over_batch``
#: — one per-head G expanded over the batch (batch stride 0); ``permuted`` — q, k, v stored
#: [B, S, H, d] and G transposed (a forward that honours strides and a backward that reads its
#: saved inputs as contiguous disagree); ``strided_dout`` — the output's gradient reaches the
#: backward as a transposed view (the loss reads the output as [B, S, H, dv]); ``frozen_*`` —
#: that input does not require grad (a frozen G, a constant key), the others' gradients judged.
BACKWARD_LAYOUTS = ("plain", "shared_kv", "g_over_batch", "permuted", "strided_dout", "frozen_q", "frozen_k", "frozen_v", "frozen_g")


def backward_layouts(c: sh.AttentionCase) -> tuple[str, ...]:
    """The layouts of :data:`BACKWARD_LAYOUTS` that mean something for case ``c``: sharing keys
    needs two heads, expanding G two batch rows, and both G layouts a G."""
    unfit = set()
    if c.h == 1:
        unfit.add("shared_kv")
    if c.b == 1:
        unfit.add("g_over_batch")
    if c.g is None:
        unfit |= {"g_over_batch", "frozen_g"}
    return tuple(lay for lay in BACKWARD_LAYOUTS if lay not in unfit)


def _frozen(layout: str, name: str) -> bool:
    """Whether input ``name`` (q, k, v, G) does not require grad in ``layout``."""
    return layout == f"frozen_{name.lower()}"


#: The label of the explicit case of each backward layout, before the layout's name.
LAYOUT_LABEL = "boundary: inputs "


def _backward_layout(c: sh.AttentionCase) -> str:
    """The layout case ``c`` is run in: its explicit case's, one by its seed for a drawn case
    (among :func:`backward_layouts`), else ``plain``."""
    if c.label.startswith(LAYOUT_LABEL):
        return c.label.removeprefix(LAYOUT_LABEL)
    if c.label == "drawn":
        layouts = backward_layouts(c)
        return layouts[c.seed % len(layouts)]
    return "plain"


def _prepare_layout(c: sh.AttentionCase, layout: str) -> None:
    """Make the case's values fit ``layout``: one head's keys and values for every head
    (``shared_kv``), one per-head G for every batch row (``g_over_batch``)."""
    if layout == "shared_kv":
        c.k[:, 1:], c.v[:, 1:] = c.k[:, :1], c.v[:, :1]
    elif layout == "g_over_batch" and c.g_batched:
        c.g, c.g_batched = c.g[0], False


def _backward_inputs(t: dict[str, Any], names: Sequence[str], dtype: Any, layout: str) -> tuple[list[Any], list[Any], list[Any]]:
    """(leaves, the attention call's q, k, v, G, how to read each judged gradient back as [B, H, …])
    for ``layout`` (:data:`BACKWARD_LAYOUTS`); a frozen input is passed but not a leaf."""
    leaves, args, reads = [], [], []
    for n in names:
        x = t[n].detach().to(dtype)
        frozen = _frozen(layout, n)
        if layout == "shared_kv" and n in ("k", "v"):
            leaf = x[:, :1].clone().requires_grad_(True)  # [B, 1, T, d]
            arg, read = leaf.expand(-1, x.shape[1], -1, -1), (lambda g: g)
        elif layout == "g_over_batch" and n == "G":
            leaf = x.clone().requires_grad_(True)  # [H, d, d]
            arg, read = leaf.expand(t["q"].shape[0], -1, -1, -1), (lambda g: g)  # [B, H, d, d], batch stride 0
        elif layout == "permuted":
            dims = (-1, -2) if n == "G" else (1, 2)
            leaf = x.transpose(*dims).contiguous().requires_grad_(not frozen)
            arg, read = leaf.transpose(*dims), (lambda g, dims=dims: g.transpose(*dims))
        else:
            leaf = x.requires_grad_(not frozen)
            arg, read = leaf, (lambda g: g)
        args.append(arg)
        if not frozen:
            leaves.append(leaf)
            reads.append(read)
    return leaves, args, reads


@register("attention_backward", "attention", requires=("attention", "backward"), dtypes=("float32", "bfloat16", "float16"))
def check_attention_backward(ctx: Context) -> None:
    """Gradients with respect to q, k, v and G (G given, or None: q, k, v only) match float64 autograd.

    The truth is float64 autograd of the eager math (there is no mpmath gradient), so float64
    kernels are not checked here: their truth would be no more precise than they are. Fully
    padded batch rows and causal ∩ left padding's queries with no allowed key are drawn as in
    ``attention_padding``: their output is the constant 0, so their gradients are 0 (a backward
    that recomputes P as exp(s − lse) with lse = −inf there returns NaN). G = None (the
    identity, no dG) runs in two explicit cases and in the draws: a kernel may take a separate
    path for it. The inputs reach the kernel in each of :data:`BACKWARD_LAYOUTS` (one explicit
    case each; a drawn case takes one by its seed), truth and baselines taking them the same
    way. Where the implementation declares ``finite_mask``, explicit cases run under it:
    a query row with no allowed key then averages every value and passes gradient to all of
    them (a backward that recomputes P under the ideal mask drops it). Such a row's query is
    zero there, so its scores are equal and the row uniform in every precision: below float64,
    −1e9 + s rounds to −1e9 and the row is uniform whatever s, where the float64 truth keeps
    softmax(s).
    """
    import torch

    def body(c: sh.AttentionCase, finite_mask: bool = False) -> None:
        _empty_first_queries(c)
        if finite_mask:
            c.zero_queries_without_key()  # equal scores: those rows are uniform in every precision
        layout = _backward_layout(c)
        _prepare_layout(c, layout)
        t = c.tensors(ctx.dtype, ctx.device)
        scores = ExactScores.of(t, c.causal, c.scale)
        w = torch.from_numpy(np.random.default_rng(c.seed + 3).standard_normal((c.b, c.h, c.s, c.dv))).to(t["q"])
        kw = dict(causal=c.causal, key_padding_mask=t["key_padding_mask"], scale=c.scale,
                  **({"finite_mask": True} if finite_mask else {}))
        _assume(scores.max_abs()[0] <= sh.MAX_ABS_SCORE)

        names = ("q", "k", "v") if t["G"] is None else ("q", "k", "v", "G")  # G = None has no gradient
        judged_names = [n for n in names if not _frozen(layout, n)]

        def grads(fn: Callable[..., Any], dtype: Any, foreign: bool = False, **extra: Any) -> list[Any]:
            leaves, args, reads = _backward_inputs(t, names, dtype, layout)
            out = fn(*args[:3], args[3] if len(args) == 4 else None, **kw, **extra)
            if layout == "strided_dout":  # the loss reads out as [B, S, H, dv]: dO arrives transposed
                loss = (out.transpose(1, 2) * w.to(dtype).transpose(1, 2).contiguous()).sum()
            else:
                loss = (out * w.to(dtype)).sum()
            if foreign:  # the implementation's autograd backward runs here: guarded like an operation
                guarded("attention backward", loss.backward)
            else:
                loss.backward()
            return [read(x.grad) if x.grad is not None else read(torch.zeros_like(x)) for x, read in zip(leaves, reads, strict=True)]

        truth = grads(eg.plga_attention, torch.float64)
        kern = grads(lambda *a, **k: _call(ctx, "attention", *a, **k), t["q"].dtype, foreign=True)
        base = [grads(eg.plga_attention, t["q"].dtype, order=o) for o in eg.ATTENTION_ORDERS]
        mags = dict(zip(names, backward_magnitudes(t, w, scores, finite_mask), strict=False))
        sums = {"shared_kv": {"k": c.h, "v": c.h}, "g_over_batch": {"G": c.b}}.get(layout, {})  # a leaf's gradient sums these
        mask = ", finite mask" if finite_mask else ""
        how = "" if layout == "plain" else f", inputs {layout}"
        for i, name in enumerate(judged_names):
            judged = None
            if finite_mask and name == "q" and scores.allowed is not None:
                # a row with no key is uniform below float64 whatever its q: autograd of the eager
                # math still passes it the softmax Jacobian, a kernel that averages the values there
                # passes 0 — both sound; its dq is left open (its q = 0 adds nothing to dk, dG)
                judged = scores.allowed.any(axis=-1, keepdims=True)  # [B or 1, 1, S, 1]
            assert_conforms(kern[i], [b[i] for b in base], truth[i], dtype=ctx.dtype, k=k_for("attention_backward"),
                            what=f"attention backward d{name}{mask}{how}", note=c.describe() + (f"; inputs {layout}" if how else ""),
                            magnitude=mags[name] * sums.get(name, 1), judged=judged)

    def case(i: int, shape: tuple[Any, ...], label: str) -> sh.AttentionCase:
        b, h, s, t_len, d, dv, fam, batched, causal, pad = shape
        return sh.AttentionCase(b, h, s, t_len, d, dv, fam, batched, causal, pad, None, (ctx.seed * 7919 + 110 + i) % 2**32,
                                label=label)

    fams = ("random", "sentinel", "rank_one")  # the boundary shapes keep a G with a gradient
    boundary = [c for c in sh.boundary_attention_cases(causal=None, paddings=("none", "right", "left", "random", "full_rows"), families=fams,
                                                       seed=ctx.seed)
                if c.t * c.s * c.h * c.b <= 40000]
    boundary += [  # G = None: small odd sizes with left padding; batch 4, 8 heads, 48 keys, causal
        sh.AttentionCase(2, 3, 5, 7, 4, 3, "none", False, False, "left", 0.3, (ctx.seed * 7919 + 101) % 2**32,
                         label="boundary: G=None"),
        sh.AttentionCase(4, 8, 7, 48, 32, 32, "none", False, True, "right", None, (ctx.seed * 7919 + 102) % 2**32,
                         label="boundary: G=None, causal"),
    ]
    boundary += [case(i, shape, "boundary: backward sizes") for i, shape in enumerate(BACKWARD_SIZE_SHAPES)]
    boundary += [case(20 + i, BACKWARD_LAYOUT_SHAPES[i % len(BACKWARD_LAYOUT_SHAPES)], LAYOUT_LABEL + lay)
                 for i, lay in enumerate(BACKWARD_LAYOUTS[1:])]
    if ctx.adapter.provides("finite_mask"):
        finite = [case(10 + i, shape, "boundary: finite mask") for i, shape in enumerate(BACKWARD_FINITE_SHAPES)]
        run_boundary(ctx, lambda c: body(c, finite_mask=True), finite)
    run_property(ctx, sh.attention_cases(causal=None, padding=("none", "right", "left", "random", "full_rows"),
                                         families=("none", *fams)),
                 body, factor=0.5, boundary=boundary)


# --- Structure ------------------------------------------------------------------------------


def _diagnose_sentinel(out: Any, case: sh.AttentionCase, t: dict[str, Any]) -> str:
    """Name the mix-up a wrong sentinel output matches (Gᵀ, rolled or reversed heads)."""
    g = oracle.to_np(t["G"])
    candidates = {"Q Gᵀ Kᵀ (G transposed)": np.swapaxes(g, -1, -2)}
    if case.h > 1:
        candidates["G of head h+1 used for head h (heads permuted)"] = np.roll(g, -1, axis=-3)
        candidates["G of head h−1 used for head h (heads permuted)"] = np.roll(g, 1, axis=-3)
        candidates["heads reversed"] = np.flip(g, axis=-3)
    o = oracle.to_np(out)
    kw = dict(causal=case.causal, key_padding_mask=t["key_padding_mask"], scale=case.scale)
    best = min(candidates.items(), key=lambda kv: float(np.max(np.abs(o - oracle.truth_attention(t["q"], t["k"], t["v"], kv[1], **kw)))))
    err = float(np.max(np.abs(o - oracle.truth_attention(t["q"], t["k"], t["v"], best[1], **kw))))
    return f"  closest mix-up: {best[0]} (max |diff| {err:.3e})"


@register("sentinel_g", "structure", requires=("attention",))
def check_sentinel_g(ctx: Context) -> None:
    """The index-encoded sentinel G (h + 0.13 i + 0.017 j) exposes Gᵀ and head mix-ups."""

    def body(c: sh.AttentionCase) -> None:
        t = c.tensors(ctx.dtype, ctx.device)
        kw = dict(causal=c.causal, key_padding_mask=t["key_padding_mask"], scale=c.scale)
        truth = oracle.truth_attention(t["q"], t["k"], t["v"], t["G"], mp=ctx.mp and c.small, **kw)
        out = _call(ctx, "attention", t["q"], t["k"], t["v"], t["G"], **kw)
        cmp = compare(out, _baselines(t, **kw), truth, dtype=ctx.dtype, what="attention (sentinel G)",
                      magnitude=attention_magnitude(t, c.causal, c.scale))
        if not cmp.passed:
            raise ConformanceFailure(cmp.message() + "\n" + _diagnose_sentinel(out, c, t) + "\n" + c.describe(), cmp)

    run_property(ctx, sh.attention_cases(causal=False, padding=("none",), families=("sentinel",), min_heads=2, dims=(2, 4, 8)), body,
                 boundary=sh.boundary_attention_cases(causal=False, paddings=("none",), families=("sentinel",), seed=ctx.seed,
                                                      max_dims=16, min_heads=2))


@register("batched_equals_slices", "structure", requires=("attention",))
def check_batched_equals_slices(ctx: Context) -> None:
    """A batched multi-head call equals the per-(batch, head) calls stacked (within rounding)."""
    import torch

    def body(c: sh.AttentionCase) -> None:
        t = c.tensors(ctx.dtype, ctx.device)
        pad = t["key_padding_mask"]
        kw = dict(causal=c.causal, scale=c.scale)
        full = _call(ctx, "attention", t["q"], t["k"], t["v"], t["G"], key_padding_mask=pad, **kw)
        rows = []
        for bi in range(c.b):
            heads = []
            for hi in range(c.h):
                g = t["G"]
                if g is not None:
                    g = g[bi : bi + 1, hi : hi + 1] if g.ndim == 4 else g[hi : hi + 1]
                q1, k1, v1 = (t[n][bi : bi + 1, hi : hi + 1] for n in ("q", "k", "v"))
                heads.append(_call(ctx, "attention", q1, k1, v1, g,
                                   key_padding_mask=None if pad is None else pad[bi : bi + 1], **kw))
            rows.append(torch.cat(heads, dim=1))
        sliced = torch.cat(rows, dim=0)
        truth = oracle.truth_attention(t["q"], t["k"], t["v"], t["G"], key_padding_mask=pad, **kw)
        b_err = max(compare(b, [], truth, dtype=ctx.dtype).kernel_error for b in _baselines(t, key_padding_mask=pad, **kw))
        cmp = compare(full, [sliced], oracle.to_np(sliced), dtype=ctx.dtype, what="batched vs per-slice",
                      magnitude=attention_magnitude(t, c.causal, c.scale))
        bound = k_for("batched_equals_slices") * b_err + cmp.floor
        if not (cmp.nonfinite == 0 and cmp.kernel_error <= bound):
            raise ConformanceFailure(
                f"batched call differs from the stacked per-(batch, head) calls by {cmp.kernel_error:.3e} "
                f"> k·baseline + floor = {bound:.3e} (baseline error {b_err:.3e}, floor {cmp.floor:.3e})\n"
                f"  worst index {cmp.worst_index}: batched {cmp.kernel_value!r}, sliced {cmp.truth_value!r}\n{c.describe()}", cmp)

    fams = ("none", "random", "sentinel")
    boundary = [c for c in sh.boundary_attention_cases(causal=None, paddings=("none", "right", "random", "full_rows"), families=fams,
                                                       seed=ctx.seed, min_heads=2) if c.b * c.h <= 20]
    run_property(ctx, sh.attention_cases(causal=None, padding=("none", "right", "random"), min_heads=2, families=fams), body,
                 boundary=boundary)


@register("sdpa_identity", "structure", requires=("attention",))
def check_sdpa_identity(ctx: Context) -> None:
    """At G = I (and G = None) PLGA is torch SDPA: bit for bit when the adapter declares sdpa_bitwise."""
    import torch
    import torch.nn.functional as F

    bitwise = ctx.adapter.provides("sdpa_bitwise")

    def body(c: sh.AttentionCase) -> None:
        t = c.tensors(ctx.dtype, ctx.device)
        eye = torch.eye(c.d, dtype=t["q"].dtype, device=t["q"].device).expand(c.h, c.d, c.d)
        pad = t["key_padding_mask"]
        kw = dict(causal=c.causal, key_padding_mask=pad, scale=c.scale)
        out_i = _call(ctx, "attention", t["q"], t["k"], t["v"], eye, **kw)
        out_none = _call(ctx, "attention", t["q"], t["k"], t["v"], None, **kw)
        allowed = oracle.support_np(c.b, c.s, c.t, causal=c.causal, key_padding_mask=pad)  # [B or 1, 1, S, T] or None
        # torch's is_causal kernels mask before scaling: at a scale <= 0, -inf * scale gave NaN rows
        # (torch 2.13); SDPA's meaning there is its boolean-mask form below
        if pad is None and c.causal and c.s == c.t and (c.scale is None or c.scale > 0):
            ref = F.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=True, scale=c.scale)
        elif allowed is not None:  # SDPA's boolean mask: True = may attend
            mask = torch.from_numpy(np.broadcast_to(allowed, (c.b, 1, c.s, c.t)).copy()).to(t["q"].device)  # a writable copy
            ref = F.scaled_dot_product_attention(t["q"], t["k"], t["v"], attn_mask=mask, scale=c.scale)
        else:
            ref = F.scaled_dot_product_attention(t["q"], t["k"], t["v"], scale=c.scale)
        # rows with no allowed key are 0 by the ideal-mask convention, NaN in SDPA: not bitwise comparable
        if bitwise and (allowed is None or np.asarray(allowed).any(axis=-1).all()):
            assert_bitwise_equal(out_i, ref, what="PLGA at G = I vs torch SDPA on the same q", note=c.describe())
            assert_bitwise_equal(out_none, ref, what="PLGA at G = None vs torch SDPA on the same q", note=c.describe())
        truth = oracle.truth_attention(t["q"], t["k"], t["v"], None, mp=ctx.mp and c.small, **kw)
        base = [ref, *_baselines({**t, "G": None}, **kw)]
        mag = attention_magnitude(t, c.causal, c.scale)
        assert_conforms(out_i, base, truth, dtype=ctx.dtype, what="PLGA at G = I vs SDPA ground truth", note=c.describe(), magnitude=mag)
        assert_conforms(out_none, base, truth, dtype=ctx.dtype, what="PLGA at G = None vs SDPA ground truth", note=c.describe(),
                        magnitude=mag)

    paddings = ("none", "right", "left", "random")
    run_property(ctx, sh.attention_cases(causal=None, padding=paddings, families=("identity",)), body,
                 boundary=sh.boundary_attention_cases(causal=None, paddings=paddings, families=("identity",), seed=ctx.seed))


#: Storage orders of the strided inputs (a permutation of the dims; the view permutes back):
#: q and k as [B, S, H, d] (the layout of a fused QKV projection), v as [B, H, dv, T], G stored
#: transposed, the padding mask as [T, B].
STRIDED_LAYOUTS: dict[str, dict[int, tuple[int, ...]]] = {
    "q": {4: (0, 2, 1, 3)}, "k": {4: (0, 2, 1, 3)}, "v": {4: (0, 1, 3, 2)},
    "G": {3: (0, 2, 1), 4: (1, 0, 3, 2)}, "key_padding_mask": {2: (1, 0)},
}


def _strided(x: Any, order: Sequence[int]) -> Any:
    """``x``'s values as a non-contiguous view: stored with its dims in ``order``, permuted back.

    The view is dense and non-overlapping, so the guard's copies (``clone``) keep its strides
    and the kernel receives it as laid out here. Where dims of size 1 make ``order`` contiguous
    after all, the reversed order is used (non-contiguous whenever two dims exceed 1).
    """
    for o in (tuple(order), tuple(range(x.ndim))[::-1]):
        inv = [o.index(i) for i in range(x.ndim)]
        view = x.permute(*o).contiguous().permute(*inv)
        if not view.is_contiguous():
            return view
    return x


def _embedded(x: Any) -> Any:
    """``x``'s values as a view into a larger buffer, as a slice of a fused QKV product or one
    layer of a stacked G is: a block of ``x``'s size before it (a storage offset) and 3 more
    elements after each innermost row (a gap). The memory around the view holds NaN (True in a
    bool mask), so a kernel that ignores the offset or reads past a row reads it."""
    import torch

    fill = True if x.dtype == torch.bool else float("nan")
    buffer = torch.full((2, *x.shape[:-1], x.shape[-1] + 3), fill, dtype=x.dtype, device=x.device)
    view = buffer[1, ..., : x.shape[-1]]
    view.copy_(x)
    return view


def _fused_qkv(t: dict[str, Any]) -> dict[str, Any]:
    """q, k and v as slices of one fused projection's output [B, L, 3, H, D] (L = max(S, T), D =
    max(d, dv)), each permuted to [B, H, ·, ·]: batch stride 3·L·H·D, head stride D, row stride
    3·H·D — a batch stride that is not H × the head stride, which a kernel merging B and H
    without a copy gets wrong. The rest of the buffer holds NaN."""
    import torch

    q, k, v = t["q"], t["k"], t["v"]
    (b, h, s, d), t_len, dv = q.shape, k.shape[2], v.shape[3]
    buffer = torch.full((b, max(s, t_len), 3, h, max(d, dv)), float("nan"), dtype=q.dtype, device=q.device)
    out = dict(t)
    for i, (n, x) in enumerate((("q", q), ("k", k), ("v", v))):
        view = buffer[:, : x.shape[2], i, :, : x.shape[3]].transpose(1, 2)  # [B, H, rows, width]
        view.copy_(x)
        out[n] = view
    return out


def _shared_keys(t: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(values, views): every head attending to head 0's keys and values, passed as
    ``k[:, :1].expand(B, H, T, d)`` (head stride 0), as a multi- or grouped-query caller does;
    a per-head G ``[H, d, d]`` passed as ``G.expand(B, H, d, d)`` (batch stride 0, the same
    operator). ``values`` holds the same numbers in contiguous tensors, for the truth."""
    k0, v0 = t["k"][:, :1], t["v"][:, :1]  # [B, 1, T, ·]
    views = dict(t, k=k0.expand_as(t["k"]), v=v0.expand_as(t["v"]))
    values = dict(t, k=views["k"].contiguous(), v=views["v"].contiguous())
    g = t["G"]
    if g is not None and g.ndim == 3:
        views["G"] = g.expand(t["q"].shape[0], *g.shape)
    return values, views


def strided_layouts(t: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(name, values, views) of every layout :func:`check_strided_inputs` passes; ``values`` are
    the contiguous tensors the views hold, from which truth and baselines are computed."""
    out = []
    permuted = {n: None if x is None else _strided(x, STRIDED_LAYOUTS[n][x.ndim]) for n, x in t.items()}
    if all(not permuted[n].is_contiguous() for n in ("q", "k", "v")):  # all-but-one dims of size 1: no such view
        out.append(("permuted views", t, permuted))
    out.append(("views into larger buffers", t, {n: None if x is None else _embedded(x) for n, x in t.items()}))
    out.append(("slices of one fused QKV buffer", t, _fused_qkv(t)))
    if t["k"].shape[1] > 1:  # one head: nothing is shared
        out.append(("keys and values shared by the heads (stride 0)", *_shared_keys(t)))
    return out


@register("strided_inputs", "structure", requires=("attention",))
def check_strided_inputs(ctx: Context) -> None:
    """Non-contiguous q, k, v, G and padding mask give the contiguous result: permuted views (same
    values), views into larger buffers (a storage offset, gaps between rows), slices of one
    fused QKV buffer, and keys and values expanded over the heads (stride 0)."""

    def body(c: sh.AttentionCase) -> None:
        judged: dict[int, tuple[Any, list[Any], float]] = {}  # id(values) → truth, baselines, magnitude
        for how, t, views in strided_layouts(c.tensors(ctx.dtype, ctx.device)):
            kw = dict(causal=c.causal, key_padding_mask=t["key_padding_mask"], scale=c.scale)
            if id(t) not in judged:  # most layouts hold the case's own values: their truth is computed once
                scores = ExactScores.of(t, c.causal, c.scale)
                _assume(scores.max_abs()[0] <= sh.MAX_ABS_SCORE)
                truth = oracle.truth_attention(t["q"], t["k"], t["v"], t["G"], mp=ctx.mp and c.small, **kw)
                judged[id(t)] = truth, _baselines(t, **kw), attention_magnitude(t, c.causal, c.scale, scores=scores)
            truth, base, mag = judged[id(t)]
            out = _call(ctx, "attention", views["q"], views["k"], views["v"], views["G"], causal=c.causal,
                        key_padding_mask=views["key_padding_mask"], scale=c.scale)
            layout = ", ".join(f"{n} strides {tuple(x.stride())} offset {x.storage_offset()}" for n, x in views.items()
                               if x is not None)
            assert_conforms(out, base, truth, dtype=ctx.dtype, k=k_for(ctx.name), what=f"attention (non-contiguous inputs: {how})",
                            note=f"{c.describe()}\n  inputs passed as {how}: {layout}", magnitude=mag)

    paddings = ("none", "right", "random", "full_rows")
    run_property(ctx, sh.attention_cases(causal=None, padding=paddings[:3], min_heads=2), body,
                 boundary=sh.boundary_attention_cases(causal=None, paddings=paddings, seed=ctx.seed))


def thread_counts() -> tuple[int, ...]:
    """Intra-op thread counts of :func:`check_thread_counts` and :func:`check_decoder_thread_counts`,
    besides the one thread every other check runs with ($PLGA_NUM_THREADS): 2 and 3 — an odd
    count, where a pairwise merge of per-thread partials that assumes a power of two drops the
    last one (an outside kernel exact at 1, 2, 4 and 8 threads was 0.66 off at 3 and 6) —, and 4
    where the process may use 4 cores. Three threads on two cores cost little once idle threads
    sleep (``OMP_WAIT_POLICY=PASSIVE``, which ``plga conformance`` sets); more threads than cores
    spinning stalled a slow correct kernel past its time limit."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return (2, 3, 4) if cores >= 4 else (2, 3)


@contextlib.contextmanager
def threads_restored() -> Iterator[None]:
    """torch's intra-op thread setting on entry, restored on exit (also after an error): every
    check runs at the suite's setting (:func:`run_check`), the thread-count checks at each count
    of :func:`thread_counts`."""
    import torch

    before = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(before)


@register("thread_counts", "structure", requires=("attention",))
def check_thread_counts(ctx: Context) -> None:
    """Attention at 2 (and, with 4 cores, 4) intra-op threads conforms as at one: a kernel that
    splits its work per thread (key splits, query or head blocks, as CPU kernels do) is judged
    with several splits."""
    import torch

    counts = thread_counts()

    def body(c: sh.AttentionCase) -> None:
        with threads_restored():
            for n in counts:
                torch.set_num_threads(n)
                _attention_case_check(ctx, c, what=f"attention at {n} intra-op threads")

    paddings = ("none", "right", "left", "random")
    run_property(ctx, sh.attention_cases(causal=None, padding=paddings), body, factor=0.5,
                 boundary=sh.boundary_attention_cases(causal=None, paddings=paddings, seed=ctx.seed))


# --- Operator chain -------------------------------------------------------------------------


def _chain_inputs(c: sh.ChainCase, dtype: Any, device: str) -> tuple[Any, dict[str, Any]]:
    import torch

    q, w = c.arrays()
    conv = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=dtype)  # noqa: E731
    return conv(q), eg.cast_layer_weights({**w, "units": [([tuple(map(conv, b)) for b in bl], conv(g), conv(be)) for bl, g, be in w["units"]],
                                           **{k: conv(w[k]) for k in ("ln_weight", "ln_bias", "W", "b", "P", "a", "b_a")}}, dtype, device)


@register("operator_chain", "chain", requires=("operator_chain",))
def check_operator_chain(ctx: Context) -> None:
    """(A, A_LM, A_P, G_LM) from rotated queries match the reference chain, b_a ≠ 0, P of both signs."""
    import torch

    def body(c: sh.ChainCase) -> None:
        q, w = _chain_inputs(c, ctx.torch_dtype, ctx.device)
        layout = CHAIN_LAYOUTS[c.seed % len(CHAIN_LAYOUTS)]
        out = _call(ctx, "operator_chain", _chain_layout(q, layout), w)
        # the chain runs in float32 or wider whatever the activations' dtype: judged in that
        # dtype, never in the (possibly narrower) dtype the kernel chose to return
        chain = torch.float64 if ctx.torch_dtype == torch.float64 else torch.float32
        truth = oracle.truth_chain(q, w, mp=ctx.mp and c.d <= 4)
        qb, wb = q.to(chain), eg.cast_layer_weights(w, chain)
        base = [eg.operator_chain(qb, wb, order=o) for o in eg.ORDERS]
        for i, name in enumerate(("A", "A_LM", "A_P", "G_LM")):
            assert_conforms(out[i], [b[i] for b in base], truth[i], dtype=dtype_name(chain), k=k_for("operator_chain"),
                            what=f"operator chain {name}", note=f"{c.describe()}; rotated queries passed {layout}")

    run_property(ctx, sh.chain_cases(), body, boundary=sh.boundary_chain_cases(ctx.seed))


#: How :func:`check_operator_chain` passes the rotated queries, by case seed (the boundary cases'
#: seeds are consecutive: each layout takes every third): as a contiguous tensor, as a view with
#: the last two axes' strides swapped (queries stored [B, H, d, S], as a kernel that keeps them
#: transposed hands them on), and as a view at an offset into a larger buffer. A native chain
#: kernel that read the storage as if contiguous passed every check while every case was contiguous.
CHAIN_LAYOUTS = ("contiguous", "transposed (strides of [B, H, d, S])", "at an offset into a larger buffer")


def _chain_layout(q: Any, layout: str) -> Any:
    """``q`` [B, H, S, d] with the same values in the memory layout ``layout`` (:data:`CHAIN_LAYOUTS`)."""
    import torch

    if layout.startswith("transposed"):
        return q.transpose(-1, -2).contiguous().transpose(-1, -2)  # [B, H, S, d], strides of [B, H, d, S]
    if layout.startswith("at an offset"):
        b, h, s, d = q.shape
        buf = torch.zeros(b, h, s + 1, d + 3, dtype=q.dtype, device=q.device)
        view = buf[:, :, 1:, 2 : 2 + d]  # [B, H, S, d] at an offset, rows d + 3 apart
        view.copy_(q)
        return view
    return q


# --- Decoder --------------------------------------------------------------------------------


def tiny_config() -> Any:
    """Two layers, d_model 16, 2 heads (d = 8): every code path of the decoder, in milliseconds."""
    return sh.make_config(*sh.BOUNDARY_CONFIGS[1])


@dataclasses.dataclass
class DecoderCase:
    """One decoder problem: a configuration, seeded weights, token ids (a prompt) and the number
    of new tokens to decode."""

    config: Any
    seed: int
    tokens: np.ndarray
    new_tokens: int = 0
    label: str = "drawn"
    q_scale: float = 1.0  # the query projections' scale (oracle.random_state_dict)
    w_scale: float = 1.0  # the power stage W's scale (oracle.random_state_dict)
    b_shift: float = 0.0  # the power stage b's shift (oracle.random_state_dict): A_LM at its floor
    p_scale: float = 0.15  # P's scale (oracle.random_state_dict)

    def regions(self) -> dict[str, str]:
        n = self.new_tokens
        return {**sh.config_regions(self.config), **sh.token_regions(self.tokens),
                "new tokens": "0" if n == 0 else "1" if n == 1 else "several",
                "last position": sh.size_region(self.tokens.shape[1] + n),
                "Gram LayerNorm": "variance near its ε" if self.q_scale != 1.0 else "variance far above its ε",
                "A_LM": "at its 1e-9 floor" if self.b_shift else "far above its floor"}

    def state(self, ctx: Context) -> dict[str, Any]:
        """The case's seeded weights in the check's dtype, on its device."""
        weights = oracle.random_state_dict(self.config, self.seed, self.q_scale, self.w_scale, self.b_shift, self.p_scale)
        return _state(weights, ctx.torch_dtype, ctx.device)

    def note(self) -> str:
        c = self.config
        return (f"case ({self.label}): config layers={c.num_layers} heads={c.num_heads} depth={c.depth} dff={c.dff} "
                f"A_dff={c.A_dff} num_reslayerA={c.num_reslayerA} num_denseA={c.num_denseA} vocab={c.input_vocab_size} "
                f"rope_style={c.rope_style} rope_base={c.rope_base:g} max_seq_len={c.max_seq_len}; weights seed {self.seed}; "
                f"tokens {self.tokens.tolist()}; {self.new_tokens} new tokens"
                + (f"; query projections × {self.q_scale:g}" if self.q_scale != 1.0 else "")
                + (f"; power-stage W × {self.w_scale:g}" if self.w_scale != 1.0 else "")
                + (f"; power-stage b shifted by {self.b_shift:g}, P ~ {self.p_scale:g} (A_LM at its 1e-9 floor)"
                   if self.b_shift else ""))


#: Whether decoder cases of one layer draw left-padded prompts below float64 (:func:`_decoder_boundary`).
ONE_LAYER_LEFT_PADDING = True


def _decoder_boundary(ctx: Context, *, min_len: int = 1, generation: bool = False, widths: bool = True) -> list[DecoderCase]:
    """One explicit case per boundary configuration, then :data:`~.strategies.BOUNDARY_DECODER_EXTRA`
    (a 40-token prompt; a batch of 4 padded rows — on the left at float64, where left padding
    can be judged in every configuration, else on the right; a batch of 5; a 300-token prompt; 20 new tokens after a
    short prompt; caches grown past 32, 64, 128 and 256 keys while decoding), then one case
    whose Gram rows have a variance near the LayerNorm ε (:data:`~.strategies.NEAR_EPSILON_Q_SCALE`)
    and one whose A_LM is at its 1e-9 floor (:data:`~.strategies.DECODER_FLOOR_B_SHIFT`);
    generation cases decode 0 to 12 tokens, and 20 in one. Below float64 the one-layer
    configurations but the first take a left-padded batch (:func:`_decoder_cases` draws left
    padding for them too): rows with no key to attend to are uniform below float64, where the
    truth keeps softmax(s), and in two layers or more they feed the next layer's Gram; in one
    layer they feed nothing the logits of real rows read, so left padding is judged at every
    dtype there (a decoder whose cached steps rebuilt the padding mask as if every prompt were
    right-padded passed every check below float64). ``widths=False`` leaves out the
    configurations of the released model's widths (:data:`~.strategies.WIDTH_CONFIGS`): the
    checks of how state is kept between calls and steps judge no width, and a reference step at
    those widths reads ~0.1 GB of float64 weights."""
    out = []
    configs = sh.boundary_configs()
    for i, config in enumerate(configs):
        if not widths and i in sh.WIDTH_CONFIGS:
            continue
        one_layer_left = ONE_LAYER_LEFT_PADDING and not ctx.mp and config.num_layers == 1 and i > 0  # config 0: one token
        batches = sh.boundary_tokens(config.input_vocab_size, ctx.seed + i, left_padding=ctx.mp or one_layer_left,
                                     min_len=min_len, max_len=6 if generation else 9)
        n = (0, 1, 4, 3, 2, 5, 1, 3, 2, 2, 1)[i] if generation else 0  # one count per boundary config
        tokens = batches[-1] if one_layer_left else batches[i % len(batches)]
        out.append(DecoderCase(config, (ctx.seed * 7919 + i) % 2**31, tokens, n, label=f"boundary #{i}",
                               w_scale=0.5 if i in sh.WIDTH_CONFIGS else 1.0))
    for j, (ci, batch, length, new) in enumerate(sh.BOUNDARY_DECODER_EXTRA, start=len(configs)):
        config = configs[ci]
        if generation:  # room for the new tokens (at least one: gcache_invalidated, state_between_calls)
            length = min(length, config.max_seq_len - max(new, 1))
        tokens = sh.padded_tokens(config.input_vocab_size, ctx.seed + j, batch=batch, length=max(length, min_len),
                                  left_padding=ctx.mp)
        out.append(DecoderCase(config, (ctx.seed * 7919 + j) % 2**31, tokens, new if generation else 0, label=f"boundary #{j}"))
    # the metric learner's LayerNorm where its ε counts: rows of the Gram with variance ~1e-6
    j, config = len(out), configs[1]
    tokens = sh.padded_tokens(config.input_vocab_size, ctx.seed + j, batch=2, length=max(7, min_len), left_padding=False)
    out.append(DecoderCase(config, (ctx.seed * 7919 + j) % 2**31, tokens, 2 if generation else 0, label=f"boundary #{j}",
                           q_scale=sh.NEAR_EPSILON_Q_SCALE))
    # A_LM at its 1e-9 floor in every layer, a batch of 2 (right-padded) decoding 3 tokens
    j = len(out)
    tokens = sh.padded_tokens(config.input_vocab_size, ctx.seed + j, batch=2, length=max(6, min_len), left_padding=ctx.mp)
    out.append(DecoderCase(config, (ctx.seed * 7919 + j) % 2**31, tokens, 3 if generation else 0, label=f"boundary #{j}",
                           b_shift=sh.DECODER_FLOOR_B_SHIFT, p_scale=sh.DECODER_FLOOR_P_SCALE))
    return out


@st.composite
def _decoder_cases(draw: Any, *, left_padding: bool, min_len: int = 1, generation: bool = False) -> DecoderCase:
    config = draw(sh.decoder_configs(), label="config")
    tokens = draw(sh.token_batches(vocab=config.input_vocab_size, max_len=6 if generation else 20, max_batch=4,
                                   min_len=min_len, left_padding=left_padding or (ONE_LAYER_LEFT_PADDING and config.num_layers == 1)),
                       label="tokens")
    n = draw(st.integers(0, 6), label="new tokens") if generation else 0
    return DecoderCase(config, draw(st.integers(0, 2**31 - 1), label="weights seed"), tokens, n)


def _state(params: dict[str, np.ndarray], dtype: Any, device: str) -> dict[str, Any]:
    import torch

    return {k: torch.from_numpy(np.ascontiguousarray(v)).to(device=device, dtype=dtype) for k, v in params.items()}


#: The perturbation of the generator A in the float64 baseline decoder that carries one: 16 unit
#: roundoffs of each row's largest entry, random signs. The other float64 baselines run the reference's products
#: in the reference's order on the same BLAS, so their rounding of A can nearly coincide with
#: the reference's; where an entry of W A + b lies near 0, iSwiGLU's u² σ(u) and then the power
#: |P| amplify the rounding of A, and a sound float64 kernel whose own A differed by ~12 unit
#: roundoffs (the released model's widths: 14 heads of 64, A_dff 170) read 14 times the others'
#: error there. A is the metric learner's LayerNorm output: its rounding scales with its rows.
FLOAT64_A_JITTER = 16 * 2.0**-53


def _baseline_decoders(state: dict[str, Any], config: Any) -> list[eg.EagerDecoder]:
    """Eager decoders in the published order, reordered, in float64 with its generator A jittered
    (:data:`FLOAT64_A_JITTER`), below float64 with the upstream
    implementation's float32 RoPE tables (torchtune's: the angle p·θ rounded in float32, ~1e-5 at
    position 200, which a faithful float32 port has and the float64 tables do not), (bf16/fp16)
    with a float32 chain, and (fp16) with the attention weights in float32 too: −1e9 overflows
    float16, every other baseline was NaN on a left-padded sequence, its baseline error taken
    as 0, and a sound float16 decoder that keeps its softmax in float32 was failed at the floor."""
    import torch

    ref = next(iter(state.values()))
    out = [eg.EagerDecoder(state, config, dtype=ref.dtype, device=ref.device, order=o) for o in eg.ORDERS]
    if ref.dtype != torch.float64:
        out.append(eg.EagerDecoder(state, config, dtype=ref.dtype, device=ref.device, rope_tables="float32"))
    else:
        out.append(eg.EagerDecoder(state, config, dtype=ref.dtype, device=ref.device, jitter=FLOAT64_A_JITTER))
    if ref.dtype in (torch.bfloat16, torch.float16):
        out.append(eg.EagerDecoder(state, config, dtype=ref.dtype, device=ref.device, wide_chain=True))
    if ref.dtype == torch.float16:
        out.append(eg.EagerDecoder(state, config, dtype=ref.dtype, device=ref.device, wide_chain=True, wide_softmax=True))
    return out


#: Conditioning rule of decoder-level checks: the power stage turns a relative perturbation ρ of
#: an entry of A_LM into a relative change |P|·ρ of A_P; a case with max |P|·ρ >
#: POWER_CONDITION_BOUND is rejected (every comparison of it, kernel and baseline alike, measures
#: amplified noise). ρ is estimated per entry by :func:`a_lm_rounding`.
POWER_CONDITION_BOUND = 0.25


#: C in :func:`a_lm_rounding`'s δu = C u_r (|W| |A| + |b|): the eager decoders' u = W A + b, from
#: their own A, differed from the truth's by up to 29 u_r (|W| |A| + |b|) in float32 and 13 in
#: bfloat16 on the first ten boundary configurations (2026-12-07); twice that.
A_ROUNDING_FACTOR = 64.0


def a_lm_rounding(A: np.ndarray, a_lm: np.ndarray, W: np.ndarray, b: np.ndarray, dtype: str) -> np.ndarray:
    """Estimated relative rounding ρ of each entry of A_LM = iSwiGLU(u) + ε, u = W A + b, in ``dtype``.

    Two estimates; an entry takes the smaller.

    - Absolute: ρ = u_r / A_LM, one unit roundoff u_r of a quantity of size 1 (A_LM's size where
      the weights keep it, u ≈ 3; the rule was calibrated there on the project's kernels and the
      controls).
    - Through u: u is rounded by δu = C u_r (|W| |A| + |b|) — its products' rounding and A's,
      which carries the rounding of the layers below it and of the metric learner
      (C = :data:`A_ROUNDING_FACTOR`) — and A_LM by 3 u_r of itself (ε's own rounding, the sum's,
      iSwiGLU's evaluation): ρ = |iSwiGLU′(u)| δu / A_LM + 3 u_r.

    The first is pessimistic at the floor: where u ≪ 0, iSwiGLU(u) = u² σ(u) is exponentially
    small (iSwiGLU′/iSwiGLU ≈ 1 + 2/u) and A_LM is ε plus a tiny part, which rounding moves by
    a relative δu, not by u_r/ε; the second is then ~3 u_r. Near u = 0, where iSwiGLU(u) ≈ u²/2
    is small too, both are large (2δu/u and 2u_r/u²). Below ``dtype``'s smallest normal number
    (float16's, 6e-5, is far above the floor) A_LM's rounding is absolute, and the second does
    not apply.
    """
    u = W @ A + b  # [B, H, d, d]
    sig = 0.5 * (1.0 + np.tanh(0.5 * u))  # σ(u), without overflow
    slope = np.abs(2.0 * u * sig + u * u * sig * (1.0 - sig))  # |iSwiGLU′(u)|
    unit = UNIT_ROUNDOFF[dtype]
    du = A_ROUNDING_FACTOR * unit * (np.abs(W) @ np.abs(A) + np.abs(b))  # [B, H, d, d]
    through_u = np.where(a_lm >= SMALLEST_NORMAL[dtype], slope * du / a_lm + 3 * unit, np.inf)
    return np.minimum(unit / a_lm, through_u)


def _assume_power_conditioned(ctx: Context, state: dict[str, Any], config: Any, tokens: np.ndarray) -> None:
    res = oracle.truth_forward(state, config, tokens)
    worst = 0.0
    for i, ded in enumerate(res.deductive):
        layer = eg.layer_weights_from_state(state, config.num_reslayerA, config.num_denseA, i)
        W, b, P = (oracle.to_np(layer[k]).astype(np.float64) for k in ("W", "b", "P"))
        A, a_lm = (np.asarray(ded[k], dtype=np.float64) for k in ("A", "A_LM"))
        worst = max(worst, float(np.max(np.abs(P) * a_lm_rounding(A, a_lm, W, b, ctx.dtype))))
    _assume(worst <= POWER_CONDITION_BOUND)


def _forward_compare(ctx: Context, state: dict[str, Any], config: Any, tokens: np.ndarray, *, what: str,
                     constant_g: Sequence[Any] | None = None, truth_logits: Any = None, note: str = "",
                     held: tuple[Held, Held] | None = None) -> None:
    """The adapter's forward against the truth and the baselines; ``held``: the (state, config)
    passed as one kept model (:class:`~.guard.Held`) instead of fresh copies."""
    import torch

    tok = torch.from_numpy(tokens).to(ctx.device)
    if constant_g is None and truth_logits is None:  # drawn cases only (the golden case is fixed)
        _assume_power_conditioned(ctx, state, config, tokens)
    model = held or (state, config)
    out = _call(ctx, "forward", *model, tok, constant_g=constant_g)
    truth = None
    if truth_logits is None or out.G_LM is not None:
        truth = oracle.truth_forward(state, config, tokens, constant_g)
    if truth_logits is None:
        assert truth is not None
        truth_logits = truth.logits
    base = _baseline_forward(state, config, tokens, constant_g)
    note = note or f"tokens {tokens.tolist()}"
    # logits are judged at real positions (the contract leaves a padding position's logits open:
    # an unpadded LM head may skip them); the padding rows still enter each layer's Gram, so
    # their hidden states are judged through the real positions and G_LM. Each position has its
    # own bound, except under a constant G: the drawn ones (sentinel, ill-conditioned) make the
    # scores cancel, and one position's baseline error is too small a sample of that noise (the
    # project's float64 kernels reached 1.21 of a position's bound, seed 2), so one per sequence
    rows = DECODER_ROWS if constant_g is None else ("sequence",)
    assert_conforms(out.logits, [b[0] for b in base], truth_logits, dtype=ctx.dtype, k=k_for(ctx.name), what=what, note=note,
                    rows=rows, judged=(tokens != 0)[..., None])
    if out.G_LM is None:  # the protocol lets a forward return no operators
        return
    if len(out.G_LM) != config.num_layers:
        raise ConformanceFailure(f"{what}: forward returned G_LM for {len(out.G_LM)} layers, the config has "
                                 f"{config.num_layers}\n{note}")
    assert truth is not None
    for i, g in enumerate(out.G_LM):  # each [B, H, d, d], downstream of the power stage
        want = np.broadcast_to(truth.deductive[i]["G_LM"], (tokens.shape[0], *np.shape(truth.deductive[i]["G_LM"])[-3:]))
        assert_conforms(g, [b[1][i]["G_LM"].expand(*want.shape) for b in base], want, dtype=ctx.dtype,
                        k=k_for("operator_chain"), what=f"{what}: G_LM of layer {i}", note=note, rows=("sequence",))


@register("forward_logits", "decoder", requires=("forward",))
def check_forward_logits(ctx: Context) -> None:
    """Decoder logits over varied configurations and seeded weights match the reference (padding either side)."""

    def body(c: DecoderCase) -> None:
        state = c.state(ctx)
        _forward_compare(ctx, state, c.config, c.tokens, what="decoder logits", note=c.note() + "\n")

    run_property(ctx, _decoder_cases(left_padding=ctx.mp), body, factor=0.5, boundary=_decoder_boundary(ctx))


@register("forward_golden", "decoder", requires=("forward",))
def check_forward_golden(ctx: Context) -> None:
    """The golden checkpoint small_seed0 reproduces the upstream logits (right and left padding)."""
    gold = oracle.golden_small()
    if gold is None:
        raise skip_check(missing_reason(GOLDEN_CHECKPOINT))
    params, config, arrays = gold
    state = _state(params, ctx.torch_dtype, ctx.device)
    _forward_compare(ctx, state, config, arrays["tokens"], what="golden small_seed0 logits", truth_logits=arrays["logits"])
    ctx.cover({**sh.config_regions(config), **sh.token_regions(arrays["tokens"])})


def _collapsed_sentinel(h: int, d: int) -> np.ndarray:
    """I + the index-encoded sentinel scaled to entries ≤ 1/d → [H, d, d]: every entry still
    differs (Gᵀ or a head permutation gives another matrix), and the scores do not cancel. The
    sentinel itself (rank two, entries up to ~9) made a decoder's scores cancel, a noise that two
    baseline samples do not bound: the project's float64 kernels reached 1.21 of the bound."""
    s = sh.sentinel_g(h, d)  # [H, d, d]
    return np.eye(d) + s / (d * max(1.0, float(s.max())))


@register("forward_collapsed", "decoder", requires=("collapsed",))
def check_forward_collapsed(ctx: Context) -> None:
    """With a constant per-layer G the decoder is generalized SDPA on RoPE(Q) G (G after rotation)."""
    import torch

    def body(c: DecoderCase) -> None:
        _assume(c.tokens.shape[1] >= 2)  # position 0 has R(0) = I: G before/after RoPE agree there
        rng = np.random.default_rng(c.seed)
        family = ("random", "sentinel", "ill_conditioned")[c.seed % 3]
        state = c.state(ctx)
        h, d = c.config.num_heads, c.config.depth
        gs = [torch.from_numpy(_collapsed_sentinel(h, d) if family == "sentinel" else sh.make_g(family, (h,), d, rng))
              .to(device=ctx.device, dtype=ctx.torch_dtype) for _ in range(c.config.num_layers)]
        tokens = _collapsed_tokens(c)
        _forward_compare(ctx, state, c.config, tokens, constant_g=gs, what=f"collapsed decoder logits (constant {family} G)",
                         note=c.note() + ("" if tokens is c.tokens else f"; left-padded: {tokens.tolist()}") + "\n")

    run_property(ctx, _decoder_cases(left_padding=ctx.mp, min_len=2), body, factor=0.5, boundary=_decoder_boundary(ctx, min_len=2))


# --- Caches ---------------------------------------------------------------------------------


def _generation_compare(ctx: Context, got: Any, truth: Any, baselines: Sequence[Any], *, what: str, note: str) -> None:
    """Tokens equal up to a near-tie of the truth; step logits within the policy on the common prefix."""
    tokens = np.asarray(oracle.to_np(got.tokens)).astype(np.int64)
    t_tokens = np.asarray(truth.tokens)
    t_steps = np.asarray(truth.step_logits)  # [B, N, V]
    n = t_steps.shape[1]
    if tokens.shape != t_tokens.shape:
        raise ConformanceFailure(f"{what}: tokens shape {tokens.shape} != expected {t_tokens.shape}\n{note}")
    s0 = t_tokens.shape[1] - n
    if not np.array_equal(tokens[:, :s0], t_tokens[:, :s0]):
        raise ConformanceFailure(f"{what}: the returned tokens do not start with the prompt\n{note}")
    steps = got.step_logits
    if steps is None or tuple(steps.shape) != tuple(t_steps.shape):
        raise ConformanceFailure(f"{what}: step logits shape {None if steps is None else tuple(steps.shape)} "
                                 f"!= expected {t_steps.shape}\n{note}")
    _assert_greedy(tokens[:, s0:], oracle.to_np(steps), what=what, note=note)
    # the steps up to the first where the implementation's tokens leave the truth's (that step's
    # logits are comparable, its token may differ); the baselines follow the truth's tokens
    # (teacher-forced, :func:`_baseline_gen`), so only the implementation's divergence ends it
    diff = np.nonzero((tokens[:, s0:] != t_tokens[:, s0:]).any(axis=0))[0]
    agree = int(diff[0]) + 1 if diff.size else n
    bounds = np.zeros((tokens.shape[0], agree))  # each (sequence, step)'s logit tolerance
    if agree:
        cmp = assert_conforms(steps[:, :agree], [x[1][:, :agree] for x in baselines], t_steps[:, :agree], dtype=ctx.dtype,
                              k=k_for(ctx.name), what=f"{what} step logits", note=note, rows=("sequence", "step"))
        assert cmp.row_bounds is not None
        bounds[:] = cmp.row_bounds
    if diff.size:
        step = agree - 1
        rows = np.nonzero(tokens[:, s0 + step] != t_tokens[:, s0 + step])[0]
        top2 = np.sort(t_steps[rows, step], axis=-1)[:, -2:]
        margins = top2[:, 1] - top2[:, 0]
        tol = bounds[:, step]  # the step's own logit tolerance
        clear = [(int(r), float(m)) for r, m in zip(rows, margins, strict=True) if not m <= 2 * tol[r]]
        if clear:
            r, margin = clear[0]
            raise ConformanceFailure(
                f"{what}: token at step {step} of sequence {r} differs from the reference ({int(tokens[r, s0 + step])} vs "
                f"{int(t_tokens[r, s0 + step])}) although the reference margin {margin:.3e} exceeds 2 × the "
                f"step's logit tolerance {tol[r]:.3e} (criterion 2B < margin ⇒ identical greedy tokens)\n{note}")


def _assert_greedy(new_tokens: np.ndarray, steps: np.ndarray, *, what: str, note: str) -> None:
    """Greedy decoding: every new token is a maximiser of its own step's returned logits
    (rounding is monotone, so a choice made on wider logits stays a maximiser of the rounded
    ones). Holds at every step, also after the tokens part from the reference's."""
    steps = np.asarray(steps, dtype=np.float64)  # [B, N, V]
    if not steps.size:
        return
    chosen = np.take_along_axis(steps, new_tokens[..., None].clip(0, steps.shape[-1] - 1), axis=-1)[..., 0]  # [B, N]
    bad = np.argwhere((chosen < steps.max(axis=-1)) | (new_tokens < 0) | (new_tokens >= steps.shape[-1]))
    if bad.size:
        b, i = (int(x) for x in bad[0])
        raise ConformanceFailure(
            f"{what}: the token at step {i} of sequence {b} ({int(new_tokens[b, i])}) is not a maximiser of that step's "
            f"returned logits (its logit {chosen[b, i]:.6g}, the largest {steps[b, i].max():.6g} at id "
            f"{int(steps[b, i].argmax())}): greedy decoding takes the argmax\n{note}")


def _generation_check(ctx: Context, body: Callable[[DecoderCase, dict[str, Any]], None], *, widths: bool = True) -> None:
    """Run ``body`` on drawn and boundary generation cases (one-token prompts included); ``widths``:
    with the configurations of the released model's widths (:func:`_decoder_boundary`)."""
    def run(c: DecoderCase) -> None:
        body(c, c.state(ctx))

    run_property(ctx, _decoder_cases(left_padding=ctx.mp, generation=True), run, factor=0.5,
                 boundary=_decoder_boundary(ctx, generation=True, widths=widths))


def _gen(ctx: Context, state: dict[str, Any], config: Any, prompt: np.ndarray, n: int, mode: str, g: Any = None) -> Any:
    import torch

    return _call(ctx, "generate", state, config, torch.from_numpy(prompt).to(ctx.device), n, mode=mode, constant_g=g)


def _baseline_gen(state: dict[str, Any], config: Any, prompt: np.ndarray, n: int, mode: str, g: Any = None, *,
                  forced: Any) -> list[Any]:
    """Each baseline decoder's (tokens, step logits), teacher-forced on the reference's tokens
    ``forced`` [B, S+N]: every step's logits are then taken in the reference's context, and a
    baseline that would split a near tie otherwise does not end the comparison of the steps
    after it (it once left every later step of the implementation unjudged)."""
    import torch

    tokens = torch.from_numpy(np.asarray(forced).astype(np.int64))
    return memo.remembered(lambda: [d.generate(torch.from_numpy(prompt), n, mode, g, forced=tokens)
                                    for d in _baseline_decoders(state, config)],
                           "baseline_generate", state, config, prompt, n, mode, g, np.asarray(forced))


def _baseline_forward(state: dict[str, Any], config: Any, tokens: np.ndarray, constant_g: Sequence[Any] | None) -> list[Any]:
    """Each baseline decoder's (logits, deductive dicts) for ``tokens``."""
    import torch

    tok = torch.from_numpy(tokens)
    return memo.remembered(lambda: [d.forward(tok, constant_g)[:2] for d in _baseline_decoders(state, config)],
                           "baseline_forward", state, config, tokens, constant_g)


@register("cache_modes", "cache", requires=("cache_kv",))
def check_cache_modes(ctx: Context) -> None:
    """KV decoding (and KVG where declared) matches the reference: batch up to 10, padded
    prompts of 1 to 600 tokens, 0 … 20 new tokens. Gated on kv alone, so an implementation
    declaring kv without kvg is judged on it.

    kv and kvg are one function in exact arithmetic (kvg keeps what kv recomputes from the
    frozen A), and each is held to the reference's tokens up to a near tie; they are not held to
    each other's tokens: a sound kernel that recomputes kv's power stage in bfloat16, as the
    eager bfloat16 baseline does, while kvg keeps the prompt's float32 G_LM, split a tie of
    margin 0.011 differently and was failed."""
    with_kvg = ctx.adapter.provides("cache_kvg")

    def body(c: DecoderCase, state: dict[str, Any]) -> None:
        config, prompt, n, note = c.config, c.tokens, c.new_tokens, c.note()
        _assume_power_conditioned(ctx, state, config, prompt)
        truth = oracle.truth_generate(state, config, prompt, n, "kv")
        kv = _gen(ctx, state, config, prompt, n, "kv")
        _generation_compare(ctx, kv, truth, _baseline_gen(state, config, prompt, n, "kv", forced=truth.tokens), what="kv decoding", note=note)
        if not with_kvg:
            return
        kvg = _gen(ctx, state, config, prompt, n, "kvg")
        _generation_compare(ctx, kvg, truth, _baseline_gen(state, config, prompt, n, "kvg", forced=truth.tokens), what="kvg decoding", note=note)

    _generation_check(ctx, body)


@register("collapsed_equals_kvg", "cache", requires=("collapsed", ("cache_kv", "cache_kvg")))
def check_collapsed_equals_kvg(ctx: Context) -> None:
    """Collapsed decoding (inference collapse, the learned chain replaced by a constant G): with
    G = the prompt's own G_LM it decodes as the reference's KVG decoding does (single prompts; and
    as the implementation's own KVG decoding, where it declares kvg); with a random constant G
    the whole padded batch decodes as the reference does (the prompt pass uses G too). Needs
    collapsed and a KV cache, kv or kvg: collapsed decoding runs on the KV cache, with or
    without a G-cache."""
    import torch

    with_kvg = ctx.adapter.provides("cache_kvg")

    def body(c: DecoderCase, state: dict[str, Any]) -> None:
        config, n, note = c.config, c.new_tokens, c.note()
        prompt = c.tokens[:1]  # one G per layer: a single prompt
        _assume_power_conditioned(ctx, state, config, prompt)
        res = oracle.truth_forward(state, config, prompt)
        gs = [torch.from_numpy(np.asarray(d["G_LM"])[0]).to(device=ctx.device, dtype=ctx.torch_dtype) for d in res.deductive]
        col = _gen(ctx, state, config, prompt, n, "collapsed", gs)
        truth_col = oracle.truth_generate(state, config, prompt, n, "collapsed", gs)
        _generation_compare(ctx, col, truth_col, _baseline_gen(state, config, prompt, n, "collapsed", gs, forced=truth_col.tokens),
                            what="collapsed decoding (G = the prompt's G_LM)", note=note)
        if with_kvg:
            kvg = _gen(ctx, state, config, prompt, n, "kvg")
            truth = oracle.truth_generate(state, config, prompt, n, "kvg")
            _generation_compare(ctx, kvg, truth, _baseline_gen(state, config, prompt, n, "kvg", forced=truth.tokens), what="kvg decoding", note=note)
        # and with a G unrelated to the prompt, where running the learned chain on the prompt shows
        rng = np.random.default_rng(c.seed + 17)
        other = [torch.from_numpy(rng.standard_normal(tuple(g.shape)) / math.sqrt(g.shape[-1])).to(device=ctx.device,
                                                                                                      dtype=ctx.torch_dtype)
                 for g in gs]
        tokens = _collapsed_tokens(c)
        if tokens is not c.tokens:
            note += f"; then left-padded: {tokens.tolist()}"
        col = _gen(ctx, state, config, tokens, n, "collapsed", other)
        truth_col = oracle.truth_generate(state, config, tokens, n, "collapsed", other)
        _generation_compare(ctx, col, truth_col, _baseline_gen(state, config, tokens, n, "collapsed", other, forced=truth_col.tokens),
                            what="collapsed decoding (a random G)", note=note)

    _generation_check(ctx, body)


def _random_operators(ctx: Context, config: Any, rng: np.random.Generator) -> list[Any]:
    """One random constant operator [H, d, d] per layer, in the check's dtype, on its device."""
    import torch

    return [torch.from_numpy(sh.make_g("random", (config.num_heads,), config.depth, rng)).to(device=ctx.device, dtype=ctx.torch_dtype)
            for _ in range(config.num_layers)]


def _left_padded(tokens: np.ndarray) -> np.ndarray:
    """Each row's real ids moved to its end: the same prompts, padded on the left."""
    out = np.zeros_like(tokens)
    for r, row in enumerate(tokens):
        real = row[row != 0]
        out[r, tokens.shape[1] - real.size :] = real
    return out


def _collapsed_tokens(c: DecoderCase) -> np.ndarray:
    """The case's prompts for a decoder under constant operators: left-padded in every other case
    at every dtype. Under a constant G no Gram reads the padding rows, whose rows without a key
    are uniform below float64 where the float64 truth keeps softmax(s): the real positions do
    not depend on them, and left padding is judged in float32 and bfloat16 too (a decoder whose
    cached steps count positions from a row's first real token passed every check there)."""
    return _left_padded(c.tokens) if c.seed % 2 else c.tokens


def _other_prompt(prompt: np.ndarray, vocab: int) -> np.ndarray:
    """A second prompt of the same shape, every real id changed and, where the shape allows, its
    padding moved: the rows' padding patterns rotated by one row, or where that changes nothing
    (one row, or rows padded alike) one more position of the last row padded at its padded end.
    A loaded model that keeps the first prompt's padding mask while the shape stays the same
    decodes the second prompt wrongly."""
    real = prompt > 0  # [B, T]
    moved = np.roll(real, 1, axis=0)
    if (moved == real).all() and real[-1].sum() > 1:
        moved = real.copy()
        cols = np.flatnonzero(real[-1])
        moved[-1, cols[0] if not real[-1, 0] else cols[-1]] = False  # left padding grows at the left, else at the right
    return np.where(moved, (prompt * 7 + 3) % (vocab - 1) + 1, 0)


@register("gcache_invalidated", "cache", requires=("cache_kvg",))
def check_gcache_invalidated(ctx: Context) -> None:
    """A new prompt gets a new G-cache: two prompts decoded in turn by one loaded model match each decoded fresh."""

    def body(c: DecoderCase, state: dict[str, Any]) -> None:
        config, prompt, n = c.config, c.tokens, max(c.new_tokens, 1)
        other = _other_prompt(prompt, config.input_vocab_size)
        note = c.note() + f"; then the prompt {other.tolist()} (same model object)"
        for p in (prompt, other):
            _assume_power_conditioned(ctx, state, config, p)
        held_state, held_config = Held(state), Held(config)  # one model, kept loaded between the calls
        for p in (prompt, other):
            got = _gen(ctx, held_state, held_config, p, n, "kvg")
            truth = oracle.truth_generate(state, config, p, n, "kvg")
            _generation_compare(ctx, got, truth, _baseline_gen(state, config, p, n, "kvg", forced=truth.tokens), what="kvg decoding of successive prompts",
                                note=note)

    _generation_check(ctx, body, widths=False)


#: The longest first turn of :func:`_conversation` (tokens): the turns are about how a loaded
#: model treats a prompt that extends or cuts the sequence it decoded, not about length.
CONVERSATION_TURN = 8


def _conversation(ctx: Context, c: DecoderCase, state: dict[str, Any], held: tuple[Held, Held], n: int, mode: str,
                  g: Any = None) -> None:
    """Three turns on one loaded model, each judged against the reference decoding it fresh: a
    prompt (the case's first row, unpadded); that prompt, the tokens the model generated for it
    and two new ids — the next turn of a conversation —; and a strict prefix of that (the first
    prompt and one generated token). In PLDR-LLM every layer's K, V past the first and the
    prompt's G_LM depend on the whole prompt, so a model that reuses the cache of the sequence
    it decoded last for a prompt extending it (prefix caching, exact in a standard transformer)
    or cut from it decodes wrongly. Turns whose power stage the conditioning rule rejects are
    left out."""
    config = c.config
    real = c.tokens[0][c.tokens[0] != 0]
    length = min(real.size, CONVERSATION_TURN, config.max_seq_len - 2 * n - 2)
    if length < 1:
        return
    turn = real[None, :length]  # [1, L]
    what = f"{mode} decoding" + ("" if g is None else " (constant G)")
    for i in range(3):
        try:
            _assume_power_conditioned(ctx, state, config, turn)
        except UnsatisfiedAssumption:
            return
        note = (c.note() + f"; conversation turn {i + 1} of 3 on one model object: the prompt {turn.tolist()} "
                "(turn 2 extends turn 1's prompt and generated tokens, turn 3 is a prefix of turn 2)")
        got = _gen(ctx, held[0], held[1], turn, n, mode, g)
        truth = oracle.truth_generate(state, config, turn, n, mode, g)
        _generation_compare(ctx, got, truth, _baseline_gen(state, config, turn, n, mode, g, forced=truth.tokens),
                            what=f"{what}, conversation turn {i + 1}", note=note)
        if i == 0:
            decoded = np.asarray(oracle.to_np(got.tokens)).astype(np.int64)  # [1, L + n]: what the model answered
            new = (decoded[:, :2] * 5 + 1) % (config.input_vocab_size - 1) + 1
            turn = np.concatenate([decoded, new], axis=1)
        else:
            turn = turn[:, : length + 1]


@register("state_between_calls", "cache", requires=("forward",))
def check_state_between_calls(ctx: Context) -> None:
    """One loaded model serves every declared operation on two prompts in turn (and two constant
    G's); then a second model of the same configuration (the same config object, other weights)
    serves the first prompt, its logits and one decoding mode; then the first model the turns
    of a conversation (:func:`_conversation`): nothing carries over. (A decoder whose G-cache was
    keyed by the configuration and the prompt's ids handed the second model the first one's
    operators and passed every check before.)"""

    turns = generation_modes(ctx.adapter)
    modes = [m for m in turns if m != "collapsed"]  # each round decodes in these; collapsed with its own G
    collapsed = ctx.adapter.provides("collapsed")

    def body(c: DecoderCase, state: dict[str, Any]) -> None:
        config, prompt, n = c.config, c.tokens, max(c.new_tokens, 1)
        other = _other_prompt(prompt, config.input_vocab_size)
        second = dataclasses.replace(c, seed=(c.seed + 1) % 2**31)  # another model of this configuration
        second_state = second.state(ctx)
        for p in (prompt, other):
            _assume_power_conditioned(ctx, state, config, p)
        _assume_power_conditioned(ctx, second_state, config, prompt)
        rng = np.random.default_rng(c.seed)
        gs = [_random_operators(ctx, config, rng) for _ in range(2)]
        held_state, held_config = Held(state), Held(config)
        for j, p in enumerate((prompt, other)):
            note = c.note() + f"; call round {j + 1} of 2 on one model object (round 2: the prompt {other.tolist()}, another G)"
            _forward_compare(ctx, state, config, p, what=f"forward logits, round {j + 1}", note=note, held=(held_state, held_config))
            if collapsed:
                _forward_compare(ctx, state, config, p, constant_g=gs[j], what=f"collapsed forward logits, round {j + 1}", note=note,
                                 held=(held_state, held_config))
            for mode in modes:
                got = _gen(ctx, held_state, held_config, p, n, mode)
                truth = oracle.truth_generate(state, config, p, n, mode)
                _generation_compare(ctx, got, truth, _baseline_gen(state, config, p, n, mode, forced=truth.tokens), what=f"{mode} decoding, round {j + 1}",
                                    note=note)
            if "collapsed" in turns:
                got = _gen(ctx, held_state, held_config, p, n, "collapsed", gs[j])
                truth = oracle.truth_generate(state, config, p, n, "collapsed", gs[j])
                _generation_compare(ctx, got, truth, _baseline_gen(state, config, p, n, "collapsed", gs[j], forced=truth.tokens),
                                    what=f"collapsed decoding, round {j + 1}", note=note)
        mode = mode_in_turn(turns, c.seed)  # one decoding mode per case, in turn: every mode meets
        g = gs[0] if mode == "collapsed" else None  # many cases at a quarter of the time
        # a second model of the same configuration (the same config object) on the first prompt
        note = (c.note() + f"; after the rounds above, a second model of this configuration (weights seed {second.seed}) "
                "on the first prompt, in the same calls")
        held_second = Held(second_state)
        _forward_compare(ctx, second_state, config, prompt, what="forward logits of a second model", note=note,
                         held=(held_second, held_config))
        if mode is not None:
            got = _gen(ctx, held_second, held_config, prompt, n, mode, g)
            truth = oracle.truth_generate(second_state, config, prompt, n, mode, g)
            _generation_compare(ctx, got, truth, _baseline_gen(second_state, config, prompt, n, mode, g, forced=truth.tokens),
                                what=f"{mode} decoding of a second model", note=note)
            _conversation(ctx, c, state, (held_state, held_config), n, mode, g)

    _generation_check(ctx, body, widths=False)


@register("cache_nocache", "cache", requires=("cache_nocache",))
def check_cache_nocache(ctx: Context) -> None:
    """No-cache decoding (full recompute, G from the whole sequence each step) matches the
    reference; where ``collapsed`` is declared, also with constant operators (each step a full
    forward under the constant G: a nocache loop that ran the learned chain anyway passed)."""
    constant = ctx.adapter.provides("collapsed")

    def body(c: DecoderCase, state: dict[str, Any]) -> None:
        config, prompt, n = c.config, c.tokens, c.new_tokens
        truth = oracle.truth_generate(state, config, prompt, n, "nocache")
        _assume_power_conditioned(ctx, state, config, truth.tokens)  # the longest sequence G is taken from
        got = _gen(ctx, state, config, prompt, n, "nocache")
        _generation_compare(ctx, got, truth, _baseline_gen(state, config, prompt, n, "nocache", forced=truth.tokens), what="nocache decoding",
                            note=c.note())
        if constant:
            gs = _random_operators(ctx, config, np.random.default_rng(c.seed + 19))
            truth = oracle.truth_generate(state, config, prompt, n, "nocache", gs)
            got = _gen(ctx, state, config, prompt, n, "nocache", gs)
            _generation_compare(ctx, got, truth, _baseline_gen(state, config, prompt, n, "nocache", gs, forced=truth.tokens),
                                what="nocache decoding (constant random G)", note=c.note())

    _generation_check(ctx, body, widths=False)


@register("decoder_thread_counts", "decoder", requires=("forward",))
def check_decoder_thread_counts(ctx: Context) -> None:
    """The decoder at 2 (and, with 4 cores, 4) intra-op threads conforms as at one: its logits,
    and each case's decoding in one of the declared modes (:func:`mode_in_turn`; with a
    random constant G in ``collapsed``, whose forward logits are judged too). Every other decoder
    check runs at one thread, and a CPU decoder splits its work per thread (column blocks of
    packed weights, row spans of a decoding GEMV, heads or batch rows of the cached operators),
    so a split that is wrong only at several threads, in one mode only, is judged here."""
    import torch

    counts = thread_counts()
    modes = generation_modes(ctx.adapter)

    def body(c: DecoderCase, state: dict[str, Any]) -> None:
        config, n, note = c.config, c.new_tokens, c.note()
        mode = mode_in_turn(modes, c.seed)
        gs = _random_operators(ctx, config, np.random.default_rng(c.seed + 29)) if mode == "collapsed" else None
        prompt = _collapsed_tokens(c) if mode == "collapsed" else c.tokens
        if prompt is not c.tokens:
            note += f"; left-padded: {prompt.tolist()}"
        truth = oracle.truth_generate(state, config, prompt, n, mode, gs) if mode else None
        baselines = _baseline_gen(state, config, prompt, n, mode, gs, forced=truth.tokens) if truth is not None else []
        with threads_restored():
            for threads in counts:
                torch.set_num_threads(threads)
                _forward_compare(ctx, state, config, c.tokens, what=f"decoder logits at {threads} intra-op threads",
                                 note=c.note() + "\n")
                if gs is not None:
                    _forward_compare(ctx, state, config, prompt, constant_g=gs, note=note + "\n",
                                     what=f"collapsed decoder logits (a random constant G) at {threads} intra-op threads")
                if truth is not None:
                    got = _gen(ctx, state, config, prompt, n, mode, gs)
                    _generation_compare(ctx, got, truth, baselines, what=f"{mode} decoding at {threads} intra-op threads",
                                        note=note)

    _generation_check(ctx, body)


def generation_modes(adapter: Adapter) -> tuple[str, ...]:
    """The decoding modes ``adapter`` declares, as :func:`check_decoder_thread_counts` and
    :func:`check_state_between_calls` run them: kv, kvg, nocache, and collapsed, a cached mode
    that needs kv or kvg too (as :func:`check_collapsed_equals_kvg` does; ``collapsed`` alone
    declares the forward and nocache decoding under a constant G)."""
    modes = [m for m, cap in (("kv", "cache_kv"), ("kvg", "cache_kvg"), ("nocache", "cache_nocache")) if adapter.provides(cap)]
    if adapter.provides("collapsed") and ({"kv", "kvg"} & set(modes)):
        modes.append("collapsed")
    return tuple(modes)


def mode_in_turn(modes: Sequence[str], seed: int) -> str | None:
    """The mode a case of weights seed ``seed`` decodes in where a check runs one mode a case
    (several threads; a second model and a conversation): the modes in turn by seed (the
    boundary cases' seeds are consecutive, so each mode takes every ``len(modes)``-th of them),
    None where none is declared (logits only). One mode a case keeps the check's time near one
    generation per case."""
    return modes[seed % len(modes)] if modes else None


__all__ = ["CHECKS", "GROUPS", "Check", "Context", "DecoderCase", "check_ids", "check_limit", "register", "run_check", "run_property",
           "tiny_config"]
