"""The targets of ``plga bench`` as data, and their judgement on the rows of one run.

Each :class:`Target` is a record: an id, the sentence a reader sees, the comparison
(``>=`` / ``<=``) and threshold, the unit, how the value is measured (a sentence) and the
function that reads it from the rows. :func:`evaluate_targets` judges every record:
met / missed (with the absolute and relative shortfall) / not measured (with why). A record
whose comparison is ``report`` has no goal: the table shows its measured value (``reported``).
The compile break-even is one: the issue asked for compilation that is opt-in with a measured
break-even, not for a break-even below a set length (a cold Inductor compilation takes tens of
seconds against a saving of a few milliseconds at most a step, so no threshold a short run could
meet was ever within reach).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .machine import WIDENED_VIA
from .plan import CACHED_MODES, LOW_DTYPE
from .rows import Ratio, Row, row_ratio, workload_key

TARGET_STATUSES = ("met", "missed", "not measured", "reported")
#: The comparison of a target without a goal: its value is shown, never judged.
REPORT = "report"
Measure = Callable[[list[Row]], float | None]
#: How every ratio of two timed rows is taken (:func:`~plga.bench.rows.row_ratio`).
PAIRED = "paired by round (median of the per-round ratios of runs taken in turn)"


@dataclasses.dataclass(frozen=True)
class Target:
    id: str
    text: str
    op: str  # ">=" | "<=" | REPORT (no goal)
    threshold: float  # unused by a REPORT target
    unit: str  # "" (a fraction, shown as %, when threshold ≤ 1), "×", "s", "tokens"
    how: str  # how the measured value is obtained
    measure: Measure
    measured_by_command: str = ""  # the --cases kind whose command case it reads ("" : none)
    premise: Callable[[dict[str, Any]], str] | None = None  # why the run's machine cannot measure it ("": it can)
    #: why a missed goal is above what the run's arithmetic allows ("": it is not), from its rows and limits
    bound: Callable[[list[Row], dict[str, Any]], str] | None = None


@dataclasses.dataclass
class Verdict:
    id: str
    target: str
    op: str
    threshold: float
    unit: str
    how: str
    measured: float | None
    status: str  # met | missed | not measured | reported
    shortfall: float | None
    shortfall_rel: float | None
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def judge(target: Target, measured: float | None, why: str = "") -> Verdict:
    """One verdict: met / missed / not measured, with the absolute and relative shortfall
    (``reported``, no shortfall, for a target without a goal)."""
    if target.op not in (">=", "<=", REPORT):
        raise ValueError(f"op must be '>=', '<=' or {REPORT!r}, got {target.op!r}")
    common = dict(id=target.id, target=target.text, op=target.op, threshold=target.threshold, unit=target.unit, how=target.how)
    if measured is None:
        return Verdict(**common, measured=None, status="not measured", shortfall=None, shortfall_rel=None,
                       why=why or "no row for this target in this run")
    if target.op == REPORT:
        return Verdict(**common, measured=measured, status="reported", shortfall=None, shortfall_rel=None, why=why)
    met = measured >= target.threshold if target.op == ">=" else measured <= target.threshold
    gap = 0.0 if met else abs(target.threshold - measured)
    rel = gap / abs(target.threshold) if target.threshold else None
    return Verdict(**common, measured=measured, status="met" if met else "missed", shortfall=gap, shortfall_rel=rel, why=why)


# --- reading the rows ------------------------------------------------------------------------


def find(rows: list[Row], **want: Any) -> Row | None:
    """The first ok row whose fields equal ``want`` (``dtype`` float32 and no capture unless asked)."""
    want = {"dtype": "float32", "capture": None, **want}
    for r in rows:
        if r.ok and all(getattr(r, k) == v for k, v in want.items()):
            return r
    return None


def _ratio_note(row: Row, name: str) -> str:
    """How the ratio ``name`` of ``row`` was obtained (:meth:`Ratio.note`); "" for a field that
    is not a cross-row speed ratio."""
    value = getattr(row, name)
    if value is None or not hasattr(row, f"{name}_rounds"):
        return ""
    return Ratio(value, tuple(getattr(row, f"{name}_rounds") or ())).note()


def field(name: str, **want: Any) -> Measure:
    """The value of ``name`` on the row matching ``want`` (its ``why`` says why a row holds
    none: :attr:`Row.unmeasured`; for a speed-up, how its rounds were paired)."""
    def measure(rows: list[Row]) -> float | None:
        r = find(rows, **want)
        return None if r is None else getattr(r, name)

    def why(rows: list[Row]) -> str:
        r = find(rows, **want)
        return ((r.unmeasured or {}).get(name, "") or _ratio_note(r, name)) if r is not None else ""

    measure.why = why  # type: ignore[attr-defined]
    return measure


def from_ratio(one: Callable[[list[Row]], Ratio | None]) -> Measure:
    """The value of the ratio ``one(rows)``; its ``why`` says how it was paired (:meth:`Ratio.note`)."""
    def measure(rows: list[Row]) -> float | None:
        r = one(rows)
        return None if r is None else r.value

    def why(rows: list[Row]) -> str:
        r = one(rows)
        return "" if r is None else r.note()

    measure.why = why  # type: ignore[attr-defined]
    return measure


def ratio(name: str, num: dict[str, Any], den: dict[str, Any], invert: bool = False) -> Measure:
    """``name`` of the ``num`` row ÷ ``name`` of the ``den`` row (or den ÷ num with ``invert``),
    paired by round where the rows were timed in turn (:func:`~plga.bench.rows.row_ratio`)."""
    def one(rows: list[Row]) -> Ratio | None:
        a, b = find(rows, **num), find(rows, **den)
        if a is None or b is None:
            return None
        return row_ratio(b, a, name) if invert else row_ratio(a, b, name)

    return from_ratio(one)


def slowest(values: Callable[[list[Row]], list[tuple[float, Row, str]]]) -> Measure:
    """The smallest of ``values(rows)`` (value, its row, how it was obtained); its ``why``
    names that row."""
    def measure(rows: list[Row]) -> float | None:
        vals = values(rows)
        return min(v for v, _, _ in vals) if vals else None

    def why(rows: list[Row]) -> str:
        vals = values(rows)
        if not vals:
            return ""
        _, row, note = min(vals, key=lambda v: v[0])
        return f"{row.id}" + (f": {note}" if note else "")

    measure.why = why  # type: ignore[attr-defined]
    return measure


def _fused_vs_eager(rows: list[Row]) -> list[tuple[float, Row, str]]:
    return [(r.speedup_vs_eager, r, _ratio_note(r, "speedup_vs_eager"))
            for r in rows if r.ok and r.impl == "fused" and r.speedup_vs_eager is not None]


#: The smallest speed-up of a fused row over the eager row of its workload.
slowest_fused_vs_eager = slowest(_fused_vs_eager)


def compile_break_even(cfg: str, mode: str, dtype: str, cached: bool = False) -> Measure:
    """Tokens after which compiling pays off: compile time (cold, or from Inductor's disk cache
    with ``cached``) ÷ step time saved against the plain row of the same dtype (inf when the
    captured step is not faster). Its ``why`` gives the disk-cache figure beside the cold one."""
    def measure(rows: list[Row]) -> float | None:
        plain = find(rows, **_decode(cfg, mode, dtype=dtype))
        comp = find(rows, **_decode(cfg, mode, dtype=dtype, capture="compile"))
        seconds = None if comp is None else (comp.compile_cached_s if cached else comp.compile_s)
        if not (plain and comp and plain.step_s and comp.step_s and seconds is not None):
            return None
        saved = plain.step_s - comp.step_s
        return seconds / saved if saved > 0 else float("inf")

    def why(rows: list[Row]) -> str:
        if cached:
            return ""
        warm = compile_break_even(cfg, mode, dtype, cached=True)(rows)
        return "" if warm is None else f"{warm:.3g} tokens from Inductor's disk cache"

    measure.why = why  # type: ignore[attr-defined]
    return measure


def _command(rows: list[Row], name: str) -> Row | None:
    return next((r for r in rows if r.ok and r.kind == "command" and r.id == name), None)


def command_seconds(name: str = "conformance/quick") -> Measure:
    """The median wall time of the command case ``name``."""
    def measure(rows: list[Row]) -> float | None:
        r = _command(rows, name)
        return None if r is None else r.median_s

    return measure


def _audit_ratio(rows: list[Row]) -> Ratio | None:
    ref, tor = _command(rows, "audit/reference"), _command(rows, "audit/torch")
    return None if ref is None or tor is None else row_ratio(ref, tor, "median_s")


#: The reference audit's time ÷ the torch audit's (built-in model; the two take their runs in
#: turn, so the ratio is paired by round: :func:`~plga.bench.rows.row_ratio`).
audit_speed = from_ratio(_audit_ratio)


def captured_tokens_agree(rows: list[Row]) -> float | None:
    """The fraction of float32 captured decoding rows whose greedy tokens equal the plain fused
    row's (the same workload): the captured step must not change what is decoded."""
    flags = [r.same_tokens_as_fused for r in rows
             if r.ok and r.kind == "decode" and r.capture and r.dtype == "float32" and r.same_tokens_as_fused is not None]
    return sum(flags) / len(flags) if flags else None


#: The decode-phase tokens/s of batch-1 paper-110m decoding on the plain fused path (float32) in
#: the first run on an NVIDIA H200 (commit 6b3820e, benchmarks/results/bench-cuda-h200-paper-110m.json):
#: the baselines of the CUDA decoding targets.
H200_BASELINE_TOKENS_PER_S = {"kvg": 311.0, "collapsed": 518.0}


def on_h200(limits: dict[str, Any]) -> str:
    """The premise of a target whose baseline was measured on an H200: "" on one, else why not."""
    name = limits.get("device_name") or limits.get("device") or "an unknown device"
    if limits.get("device") == "cuda" and "H200" in name:
        return ""
    return f"its baseline was measured on an NVIDIA H200; this run: {name}"


def on_cuda(limits: dict[str, Any]) -> str:
    return "" if limits.get("device") == "cuda" else f"a CUDA target; this run: {limits.get('device') or 'an unknown device'}"


def over_baseline(mode: str) -> Measure:
    """The captured float32 row's decode-phase tokens/s (b1 paper-110m, ``mode``) ÷ the H200 baseline."""
    read = field("decode_tokens_per_s", **_decode("paper-110m", mode, capture="compile"))

    def measure(rows: list[Row]) -> float | None:
        v = read(rows)
        return None if v is None else v / H200_BASELINE_TOKENS_PER_S[mode]

    return measure


def _low_precision_prefill_vs_eager(rows: list[Row]) -> list[tuple[float, Row, str]]:
    eager = {workload_key(r): r for r in rows if r.ok and r.kind == "prefill" and r.impl == "eager" and r.dtype == "float32"}
    out = []
    for r in rows:
        if r.ok and r.kind == "prefill" and r.impl == "fused" and r.dtype == LOW_DTYPE and workload_key(r) in eager:
            ratio_ = row_ratio(eager[workload_key(r)], r, "median_s")
            if ratio_ is not None:
                out.append((ratio_.value, r, ratio_.note()))
    return out


#: The smallest speed-up of a low-precision fused prefill row over the float32 eager row of its
#: workload (every shape that has both).
slowest_low_precision_prefill_vs_eager = slowest(_low_precision_prefill_vs_eager)


def accuracy(name: str) -> Measure:
    def measure(rows: list[Row]) -> float | None:
        r = next((r for r in rows if r.ok and r.kind == "accuracy"), None)
        return None if r is None else getattr(r, name)

    return measure


# --- the table -------------------------------------------------------------------------------


def _decode(cfg: str, mode: str, batch: int = 1, **extra: Any) -> dict[str, Any]:
    return dict(kind="decode", config=cfg, impl="fused", batch=batch, mode=mode, **extra)


def eager_speedup_bound(want: dict[str, Any]) -> Callable[[list[Row], dict[str, Any]], tuple[float, str] | None]:
    """The most the fused row matching ``want`` can gain over the eager row of the same
    workload in this run, and why: the eager time ÷ the time of the fused path's own matrix
    products at the run's float32 matmul peak (its counted FLOPs,
    :func:`~plga.bench.flops.forward_flops`, are what the peak bounds; the rest of its work only
    adds time). None where a row, a FLOP count or the peak is missing. (A paper-110m ``nocache``
    pass at batch 1 is mostly its layers' products, which both paths compute: eager's extra
    all-position logits make it only ~1.6× the fused FLOPs.)"""
    def bound(rows: list[Row], limits: dict[str, Any]) -> tuple[float, str] | None:
        fused, eager = find(rows, **want), find(rows, **{**want, "impl": "eager"})
        peak = (limits.get("matmul_float32") or {}).get("gflops_best")
        if fused is None or eager is None or not fused.flops or not eager.flops or not eager.median_s or not peak:
            return None
        floor_s = fused.flops / (peak * 1e9)  # the fused products alone, at the matmul peak
        eager_gflops = eager.flops / eager.median_s / 1e9
        return eager.median_s / floor_s, (
            f"eager computes {eager.flops / fused.flops:.2f}× the fused path's matrix FLOPs here and ran at {eager_gflops:.0f} "
            f"GFLOP/s ({eager_gflops / peak:.0%} of the run's {peak:.0f} GFLOP/s matmul peak); at that peak the fused products "
            f"alone take {floor_s:.3g} s against eager's {eager.median_s:.3g} s")

    return bound


def _targets() -> tuple[Target, ...]:
    out: list[Target] = []
    big = dict(kind="prefill", config="paper-110m", impl="fused", batch=8, seq=1024)
    low = LOW_DTYPE
    out.append(Target("fused/never-slower", "fused path never slower than eager (any case)", ">=", 1.0, "×",
                      "min over fused rows of eager time ÷ fused time, " + PAIRED, slowest_fused_vs_eager))
    cap = {"capture": "compile"}
    for cfg in ("small", "paper-110m"):
        for mode in CACHED_MODES:
            out.append(Target(f"bw/{cfg}/{mode}", f"decode b1 {mode} @ {cfg}, captured: fraction of bandwidth bound", ">=", 0.80, "",
                              "(weight bytes per step ÷ read bandwidth timed in turn with the row's group) ÷ step time, captured-step row",
                              field("bandwidth_fraction", **_decode(cfg, mode, **cap))))
        for mode in CACHED_MODES:
            out.append(Target(f"overhead/{cfg}/{mode}", f"decode b1 {mode} @ {cfg}, captured: loop overhead fraction of a step", "<=", 0.05,
                              "", "1 − profiled compute per step ÷ step time, captured-step row",
                              field("loop_overhead_fraction", **_decode(cfg, mode, **cap))))
    for mode in CACHED_MODES:
        out.append(Target(f"batch8/small/{mode}", f"decode {mode} @ small, captured: b8 tokens/s ÷ b1 tokens/s", ">=", 4.0, "×",
                          "decode-phase tokens/s of the captured b8 row ÷ the captured b1 row, " + PAIRED,
                          ratio("decode_tokens_per_s", _decode("small", mode, batch=8, **cap), _decode("small", mode, **cap))))
    for cfg in ("small", "paper-110m"):
        out.append(Target(f"nocache/{cfg}", f"decode nocache @ {cfg}: speed-up vs eager", ">=", 2.5, "×",
                          "eager time ÷ fused time, " + PAIRED, field("speedup_vs_eager", **_decode(cfg, "nocache")),
                          bound=eager_speedup_bound(_decode(cfg, "nocache"))))
    out += [
        Target("prefill/speedup/paper-110m/b8s1024", "prefill paper-110m b8 s1024: speed-up vs eager", ">=", 1.8, "×",
               "eager time ÷ fused time, " + PAIRED, field("speedup_vs_eager", **big), bound=eager_speedup_bound(big)),
        Target("prefill/roofline/paper-110m/b8s1024", "prefill paper-110m b8 s1024: fraction of matmul roofline", ">=", 0.85, "",
               "achieved GFLOP/s ÷ float32 2048² matmul peak (the faster of torch.matmul and the kernels' GEMM)", field("roofline_fraction", **big)),
        Target("prefill/roofline/paper-110m/b8s512", "prefill paper-110m b8 s512: fraction of matmul roofline", ">=", 0.75, "",
               "achieved GFLOP/s ÷ float32 2048² matmul peak (the faster of torch.matmul and the kernels' GEMM)", field("roofline_fraction", **big | {"seq": 512})),
        Target("prefill/memory/small/b8s1024", "prefill small b8 s1024, last logits: peak memory ÷ eager (all logits)", "<=", 0.6, "×",
               "peak RSS of the fused row ÷ the eager row", field("memory_vs_eager", **big | {"config": "small"})),
        Target("prefill/collapsed/paper-110m/b1s128", "collapsed prefill paper-110m b1 s128: speed-up vs fused", ">=", 1.15, "×",
               "fused time ÷ collapsed time, " + PAIRED,
               ratio("median_s", dict(kind="prefill", config="paper-110m", impl="collapsed", batch=1, seq=128),
                     dict(kind="prefill", config="paper-110m", impl="fused", batch=1, seq=128), invert=True)),
        Target(f"{low}/prefill/paper-110m/b8s1024", f"prefill paper-110m b8 s1024 in {low}: speed-up vs float32 fused", ">=", 2.5, "×",
               "float32 fused time ÷ bf16 fused time, " + PAIRED, field("speedup_vs_fused", **big | {"dtype": low})),
    ]
    for cfg in ("small", "paper-110m"):
        for mode in CACHED_MODES:
            out.append(Target(f"{low}/decode/{cfg}/{mode}", f"decode b1 {mode} @ {cfg} in {low}, captured: tokens/s ÷ float32 captured",
                              ">=", 1.6, "×", "decode-phase tokens/s of the bf16 captured row ÷ the float32 captured row, " + PAIRED,
                              ratio("decode_tokens_per_s", _decode(cfg, mode, dtype=low, **cap), _decode(cfg, mode, **cap))))
    out += [
        Target(f"{low}/logits-error", f"{low} logits on the golden prompts: error vs float64 ÷ policy bound", "<=", 1.0, "×",
               "max|kernel − float64| ÷ (k · baseline error + floor), conformance tolerance policy",
               accuracy("logits_error_ratio")),
        Target(f"{low}/greedy-tokens", f"{low} greedy tokens equal float32 on the golden prompt (or a divergence within error)",
               ">=", 1.0, "", "1 when equal or the float32 top-2 margin at the divergence < the bf16 logits error, else 0",
               accuracy("greedy_agreement")),
    ]
    out.append(Target("compile/same-tokens", "float32 captured decoding emits the plain fused path's greedy tokens (every row)",
                      ">=", 1.0, "", "fraction of float32 captured rows whose token digest equals the plain row's",
                      captured_tokens_agree))
    for dt in ("float32", low):
        for cfg in ("small", "paper-110m"):
            for mode in CACHED_MODES:
                out.append(Target(f"compile/{dt}/{cfg}/{mode}", f"decode b1 {mode} @ {cfg} in {dt}: captured ÷ plain tokens/s",
                                  ">=", 1.0, "×", "decode-phase tokens/s of the captured row ÷ the plain row (compile in the warm-up), " + PAIRED,
                                  ratio("decode_tokens_per_s", _decode(cfg, mode, dtype=dt, **cap), _decode(cfg, mode, dtype=dt))))
                out.append(Target(f"compile-break-even/{dt}/{cfg}/{mode}", f"decode b1 {mode} @ {cfg} in {dt}: tokens until compiling pays off",
                                  REPORT, 0.0, "tokens", "cold compile time ÷ (plain step − captured step); compilation is opt-in",
                                  compile_break_even(cfg, mode, dt)))
    for mode in ("kvg", "collapsed"):
        base = H200_BASELINE_TOKENS_PER_S[mode]
        out.append(Target(f"cuda/decode/paper-110m/{mode}", f"decode b1 {mode} @ paper-110m on the H200, captured: ÷ {base:g} tok/s",
                          ">=", 5.0, "×", f"decode-phase tokens/s of the float32 captured row ÷ {base:g} (the plain fused path's, "
                          "first H200 run)", over_baseline(mode), premise=on_h200))
    out.append(Target(f"cuda/{low}/prefill-vs-eager", f"prefill in {low} on CUDA: speed-up vs float32 eager (every shape timed in bf16)", ">=", 1.0,
                      "×", f"min over {low} fused prefill rows of the float32 eager time ÷ the row's, " + PAIRED,
                      slowest_low_precision_prefill_vs_eager, premise=on_cuda))
    out.append(Target("reference/conformance-quick", "conformance quick profile wall time", "<=", 120.0, "s",
                      "one timed run of the command", command_seconds(), "conformance"))
    out.append(Target("audit/torch-vs-reference", "plga audit of the built-in model: torch backend speed ÷ reference", ">=", 1.0,
                      "×", "reference audit time ÷ torch audit time (float64, the CPU), " + PAIRED, audit_speed, "audit"))
    return tuple(out)


TARGETS = _targets()


#: Why a low-precision speed-up target cannot be met on a CPU without the dtype's arithmetic.
NO_LOW_PRECISION_ARITHMETIC = (f"this CPU has no {LOW_DTYPE} arithmetic (no AVX-512 or AMX): its {LOW_DTYPE} products run "
                               "widened to float32, so only the halved weight bytes can speed it up")


def low_precision_bound(target: Target, limits: dict[str, Any] | None) -> str:
    """Why a bf16 speed-up target is above this machine, from the run's limits; empty when it is
    not. A bf16 prefill or decoding target on a host whose bf16 matmul peak was the widened
    float32 product (:func:`~plga.bench.machine.measure_limits`): :data:`NO_LOW_PRECISION_ARITHMETIC`.
    A bf16 *prefill* target whose goal exceeds the bf16 ÷ float32 matmul peak (the most a
    matmul-bound prefill can gain: a CPU whose bf16 runs on AVX512-BF16's vector units, not on
    AMX's tiles, gives about 2× rather than 4×)."""
    if not target.id.startswith((f"{LOW_DTYPE}/prefill/", f"{LOW_DTYPE}/decode/")):
        return ""
    lim = limits or {}
    low = lim.get(f"matmul_{LOW_DTYPE}") or {}
    if low.get("via") == WIDENED_VIA:
        return NO_LOW_PRECISION_ARITHMETIC
    peak, f32 = low.get("gflops_best"), (lim.get("matmul_float32") or {}).get("gflops_best")
    if not target.id.startswith(f"{LOW_DTYPE}/prefill/") or not peak or not f32 or peak / f32 >= target.threshold:
        return ""
    return (f"this machine's {LOW_DTYPE} matmul peak is {peak / f32:.2f}× its float32 peak in this run (no AMX tiles): "
            f"a {target.threshold:g}× speed-up of matmul-bound prefill is above what its arithmetic allows")


def arithmetic_bound(target: Target, rows: list[Row], limits: dict[str, Any] | None) -> str:
    """Why ``target``'s goal is above the most its rows' arithmetic allows in this run
    (:attr:`Target.bound`), or "" when it has no bound or the bound allows the goal."""
    found = target.bound(rows, limits or {}) if target.bound else None
    if found is None or found[0] >= target.threshold:
        return ""
    most, how = found
    return f"{how}: at most {most:.2f}×, below the {target.threshold:g}× goal unless its products outrun that peak"


def evaluate_targets(rows: list[Row], targets: tuple[Target, ...] = TARGETS, limits: dict[str, Any] | None = None) -> list[Verdict]:
    """Every target judged on the rows of one run (``limits``: the run's machine limits — the
    higher of the start's and the end's, as the rows' fractions use them — which say when a
    target's premise does not hold on this host and bound what its arithmetic allows)."""
    out = []
    for t in targets:
        unfit = t.premise(limits or {}) if t.premise else ""
        if unfit:  # this machine cannot measure it, whatever its rows say
            out.append(judge(t, None, unfit))
            continue
        measured = t.measure(rows)
        why = getattr(t.measure, "why", lambda rows: "")(rows)  # why absent, or how it was obtained
        if t.measured_by_command and not why and measured is None:
            why = f"not run: add '{t.measured_by_command}' to --cases"
        v = judge(t, measured, why)
        if v.status == "missed":
            v.why = "; ".join(s for s in (low_precision_bound(t, limits), arithmetic_bound(t, rows, limits), v.why) if s)
        out.append(v)
    return out


__all__ = ["H200_BASELINE_TOKENS_PER_S", "NO_LOW_PRECISION_ARITHMETIC", "PAIRED", "REPORT", "TARGETS", "TARGET_STATUSES", "Target",
           "Verdict", "arithmetic_bound", "eager_speedup_bound", "evaluate_targets", "find", "judge", "low_precision_bound"]
