"""A bench row: one case's measurements and the numbers derived from them (:class:`Row`).

:func:`derive_row` turns a case process's raw result and the machine limits into a row;
:func:`add_ratios` adds the cross-row ratios of one run (speed-up and memory against the eager
row of the same workload, speed-up against the float32 fused row for a low-precision or
captured row). A speed ratio of two rows timed in turn (:mod:`.interleave`) is paired by round:
:func:`row_ratio`, the one estimator every ratio of ``plga bench`` uses.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from . import flops as FL
from .plan import MIN_RUNS, case_flops, config_of

STATUSES = ("ok", "error", "skipped")


@dataclasses.dataclass
class Row:
    """One case of a run. ``status`` ok rows carry the timings; error / skipped rows a ``reason``."""

    id: str
    kind: str  # prefill | decode | command | accuracy
    status: str  # ok | error | skipped
    config: str | None = None
    impl: str | None = None  # reference | eager | fused | collapsed
    dtype: str | None = None
    capture: str | None = None  # "compile": the decoding step under torch.compile
    batch: int | None = None
    seq: int | None = None
    logits: str | None = None  # prefill: all | last
    mode: str | None = None  # decode: nocache | kv | kvg | collapsed
    new_tokens: int | None = None
    reason: str | None = None
    #: the group whose rounds of timed runs it took in turn with (:func:`.plan.group_of`); rows of
    #: one group have their i-th runs side by side in time. None: timed alone (older files too)
    group: str | None = None
    # timings (ok rows)
    runs: int | None = None
    warmup: int | None = None
    warmup_shape: str | None = None  # full | reduced
    times_s: list[float] | None = None
    median_s: float | None = None
    min_s: float | None = None
    max_s: float | None = None
    meets_runs_rule: bool | None = None  # runs ≥ MIN_RUNS
    wall_s: float | None = None
    threads: int | None = None
    peak_rss_bytes: int | None = None
    peak_rss_source: str | None = None
    rss_before_runs_bytes: int | None = None
    peak_device_bytes: int | None = None
    compile_s: float | None = None  # first (compiling) call of a captured row, on an empty Inductor cache
    compile_cached_s: float | None = None  # the same in a fresh process on the cache the row filled
    cuda_graph_skips: int | None = None  # captured CUDA rows: graphs Inductor compiled without a CUDA graph
    # work and speed
    flops: int | None = None
    flops_breakdown: dict[str, int] | None = None
    gflops_per_s: float | None = None
    tokens_per_s: float | None = None  # prefill B·S/median; decode B·N/median (end to end)
    roofline_fraction: float | None = None
    # decoding
    tokens_digest: str | None = None
    prefill_median_s: float | None = None
    step_s: float | None = None
    decode_tokens_per_s: float | None = None
    weight_bytes_per_step: int | None = None
    cache_bytes_per_step: int | None = None
    bandwidth_bound_s: float | None = None
    bandwidth_fraction: float | None = None
    #: the read bandwidth a decoding row's bound divides by (GB/s) and where it was measured:
    #: "in turn" (its group's probe), or "limits" (the run's machine limits, where no probe ran);
    #: on a bandwidth row, the probe's own best run
    read_gbps: float | None = None
    read_gbps_source: str | None = None
    #: on a bandwidth row, the reader of that best run (:func:`~plga.bench.machine.read_probes`)
    read_via: str | None = None
    step_compute_s: float | None = None
    loop_overhead_fraction: float | None = None
    loop_overhead_pairs: list[float] | None = None  # each pair's 1 − compute ÷ wall, unclipped
    #: why a derived field is absent although its inputs were measured ({field: reason})
    unmeasured: dict[str, str] | None = None
    collapse_fluctuation_max: float | None = None
    # accuracy of a low-precision row against float64 (logits of the case's prompt)
    logits_max_abs_error: float | None = None
    logits_error_bound: float | None = None  # the tolerance policy's bound for that dtype
    logits_error_ratio: float | None = None  # error ÷ bound (≤ 1: within the policy)
    greedy_agreement: float | None = None  # 1: same greedy tokens as float32, or a divergence within the error
    greedy_note: str | None = None
    # cross-row ratios (add_ratios)
    speedup_vs_eager: float | None = None
    speedup_vs_eager_rounds: list[float] | None = None  # the per-round ratios it is the median of (paired rows)
    memory_vs_eager: float | None = None
    same_tokens_as_eager: bool | None = None
    speedup_vs_fused: float | None = None
    speedup_vs_fused_rounds: list[float] | None = None
    same_tokens_as_fused: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Row:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def shown_tokens_per_s(self) -> float | None:
        """Decode rows: decode-phase tokens/s (B / step); prefill rows: B·S / median."""
        return self.decode_tokens_per_s if self.kind == "decode" and self.decode_tokens_per_s else self.tokens_per_s


SPEC_FIELDS = ("config", "impl", "dtype", "capture", "batch", "seq", "logits", "mode", "new_tokens", "group")


def not_run(spec: dict[str, Any], status: str, reason: str) -> Row:
    """A row for a case that failed or was skipped."""
    return Row(id=spec["id"], kind=spec["kind"], status=status, reason=reason, **{k: spec.get(k) for k in SPEC_FIELDS})


def derive_row(raw: dict[str, Any], limits: dict[str, Any]) -> Row:
    """A row from a case's raw measurements and the machine limits (no cross-row ratios)."""
    spec = raw["spec"]
    if raw.get("status", "error") != "ok":
        return not_run(spec, "error", raw.get("reason", ""))
    times = raw["times_s"]
    row = Row(
        id=spec["id"], kind=spec["kind"], status="ok", **{k: spec.get(k) for k in SPEC_FIELDS},
        runs=len(times), warmup=spec.get("warmup"), times_s=times, warmup_shape=spec.get("warmup_shape", "full"),
        median_s=statistics.median(times), min_s=min(times), max_s=max(times), meets_runs_rule=len(times) >= MIN_RUNS,
        wall_s=raw.get("wall_s"), threads=raw.get("threads"), peak_rss_bytes=raw.get("peak_rss_bytes"),
        peak_rss_source=raw.get("peak_rss_source"), rss_before_runs_bytes=raw.get("rss_before_runs_bytes"),
        peak_device_bytes=raw.get("peak_device_bytes"), compile_s=raw.get("compile_s"),
        compile_cached_s=raw.get("compile_cached_s"), cuda_graph_skips=raw.get("cuda_graph_skips"),
    )
    if raw.get("compile_cached_error"):
        row.unmeasured = {"compile_cached_s": raw["compile_cached_error"]}
    if spec["kind"] == "bandwidth":
        row.read_gbps, row.read_gbps_source = raw["bytes"] / min(times) / 1e9, "in turn"
        readers = raw.get("reader_times_s") or {}
        if readers:
            row.read_via = min(readers, key=lambda name: min(readers[name]))
        return row
    if spec["kind"] in ("command", "accuracy"):
        for name in ("logits_max_abs_error", "logits_error_bound", "logits_error_ratio", "greedy_agreement", "greedy_note"):
            setattr(row, name, raw.get(name))
        return row
    if raw.get("logits"):
        row.logits = raw["logits"]
    fb = case_flops(spec)
    med = row.median_s
    assert med is not None
    row.flops, row.flops_breakdown = fb.total, fb.as_dict()
    row.gflops_per_s = FL.achieved_gflops(fb.total, med)
    if spec["kind"] == "prefill":
        row.tokens_per_s = spec["batch"] * spec["seq"] / med
        peak = (limits.get(f"matmul_{spec.get('dtype', 'float32')}") or {}).get("gflops_best") or limits.get("peak_gflops")
        if peak and spec["impl"] != "reference":
            row.roofline_fraction = FL.roofline_fraction(fb.total, med, peak)
        return row
    _derive_decode(row, raw, spec, limits)
    return row


def _derive_decode(row: Row, raw: dict[str, Any], spec: dict[str, Any], limits: dict[str, Any]) -> None:
    b, n, mode = spec["batch"], spec["new_tokens"], spec["mode"]
    med = row.median_s
    assert med is not None
    row.tokens_digest = raw.get("tokens_digest")
    row.tokens_per_s = b * n / med  # end to end: prompt pass + N−1 steps
    pre = statistics.median(raw["prefill_times_s"]) if raw.get("prefill_times_s") else None
    step = None
    if mode == "nocache":
        step = med / n
    elif pre is not None and n > 1 and med > pre:
        step = (med - pre) / (n - 1)
        row.prefill_median_s = pre
    row.step_s = step
    if step:
        row.decode_tokens_per_s = b / step
    row.collapse_fluctuation_max = raw.get("collapse_fluctuation_max")
    bpp = 8 if spec["impl"] == "reference" else (2 if spec.get("dtype") in ("bfloat16", "float16") else 4)
    c = config_of(spec["config"])
    row.weight_bytes_per_step = FL.decode_weight_bytes(
        c, mode, bytes_per_param=bpp, chain_bytes_per_param=8 if bpp == 8 else 4, batch=b
    )
    row.cache_bytes_per_step = FL.decode_cache_bytes(c, mode, spec["seq"] + n // 2, bytes_per_value=bpp, batch=b)
    bw = limits.get("bandwidth_gbps")
    if bw and b == 1:
        row.read_gbps, row.read_gbps_source = bw, limits.get("bandwidth_source", "limits")
        if step:
            row.bandwidth_bound_s = FL.bandwidth_bound_s(row.weight_bytes_per_step, bw)
            row.bandwidth_fraction = FL.bandwidth_fraction(row.weight_bytes_per_step, step, bw)
    pairs = raw.get("overhead_pairs")
    if pairs and n > 1 and mode != "nocache":
        # each pair: a step's compute in a profiled run ÷ a step's wall time in the runs beside it
        compute = [max(0.0, p["generate_compute_s"] - p["prefill_compute_s"]) / (n - 1) for p in pairs]
        wall = [(p["generate_s"] - p["prefill_s"]) / (n - 1) for p in pairs]
        fractions = [1.0 - c / w for c, w in zip(compute, wall, strict=True) if w > 0]
        if fractions:
            row.step_compute_s = statistics.median(compute)
            row.loop_overhead_pairs = fractions
            middle = statistics.median(fractions)
            if middle >= 0:
                row.loop_overhead_fraction = middle
            else:  # the profiled compute outran the wall time beside it: the host's speed changed
                row.unmeasured = {**(row.unmeasured or {}), "loop_overhead_fraction": (
                    f"inconsistent: in the median pair the profiled step's compute exceeded the unprofiled step's wall "
                    f"({100 * middle:.0f} %): the host changed speed between the runs")}


def workload_key(row: Row) -> tuple[Any, ...]:
    """Rows with the same key measure the same workload (ratios are taken within a key)."""
    return (row.config, row.kind, row.batch, row.seq, row.mode, row.new_tokens)


def round_values(row: Row, quantity: str) -> list[float] | None:
    """``row``'s ``quantity`` in each of its timed runs, in run order (None where it has no
    per-round value): ``median_s`` → the runs' seconds; ``decode_tokens_per_s`` → B ÷ that run's
    step, (run − prompt pass) ÷ (N − 1) with the row's one prompt-pass median (nocache: run ÷ N)."""
    times = row.times_s
    if not times:
        return None
    if quantity == "median_s":
        return list(times)
    if quantity != "decode_tokens_per_s":
        raise ValueError(f"no per-round value of {quantity!r}: median_s or decode_tokens_per_s")
    if row.kind != "decode" or not row.batch or not row.new_tokens or row.decode_tokens_per_s is None:
        return None
    n = row.new_tokens
    if row.mode == "nocache":
        steps = [t / n for t in times]
    elif row.prefill_median_s is not None and n > 1:
        steps = [(t - row.prefill_median_s) / (n - 1) for t in times]
    else:
        return None
    if min(steps) <= 0:  # a run no longer than the prompt pass: no step to pair
        return None
    return [row.batch / s for s in steps]


@dataclasses.dataclass(frozen=True)
class Ratio:
    """A ratio of two rows' ``quantity``: the median of its per-round ratios when the rows took
    their runs in turn (``rounds``), else the ratio of their medians (``rounds`` empty)."""

    value: float
    rounds: tuple[float, ...] = ()

    def note(self) -> str:
        """How it was obtained, for a verdict: the spread of the rounds, or that it was not paired."""
        if not self.rounds:
            return "median ÷ median: the rows were not timed in turn"
        if len(self.rounds) == 1:
            return "one round"
        return f"{len(self.rounds)} rounds, {min(self.rounds):.3g}–{max(self.rounds):.3g}"


def row_ratio(num: Row, den: Row, quantity: str) -> Ratio | None:
    """``num``'s ``quantity`` ÷ ``den``'s (``median_s`` or ``decode_tokens_per_s``); None when
    either is absent. Rows of one group are paired by round: the host's speed drifts by tens of
    percent between minutes, and the i-th runs of a group's rows are seconds apart, so the
    per-round ratios carry little of the drift that two medians, taken from different rounds,
    carry in full. Their median is the ratio. A row with fewer runs pairs its first rounds."""
    x, y = getattr(num, quantity), getattr(den, quantity)
    if not x or not y:
        return None
    if num.group is not None and num.group == den.group:
        a, b = round_values(num, quantity), round_values(den, quantity)
        if a and b:
            rounds = tuple(p / q for p, q in zip(a, b, strict=False))
            return Ratio(statistics.median(rounds), rounds)
    return Ratio(x / y)


def _memory(row: Row, other: Row) -> float | None:
    if row.peak_device_bytes and other.peak_device_bytes:
        return row.peak_device_bytes / other.peak_device_bytes
    if row.peak_rss_bytes and other.peak_rss_bytes:
        return row.peak_rss_bytes / other.peak_rss_bytes
    return None


def _speedup(faster: Row, base: Row) -> tuple[float | None, list[float] | None]:
    """(base time ÷ row time, its per-round ratios or None): :func:`row_ratio` on the runs' seconds."""
    r = row_ratio(base, faster, "median_s")
    return (None, None) if r is None else (r.value, list(r.rounds) or None)


def add_ratios(rows: list[Row]) -> None:
    """``speedup_vs_eager`` = eager time ÷ row time (:func:`row_ratio`: the median of per-round
    ratios for rows timed in turn) and ``memory_vs_eager`` = row peak ÷ eager peak (eager row of
    the same workload and dtype); for low-precision and captured fused rows ``speedup_vs_fused``
    = float32 fused time ÷ row time and whether their tokens agree."""
    timed = [r for r in rows if r.ok and r.kind in ("prefill", "decode")]
    eager = {(workload_key(r), r.dtype): r for r in timed if r.impl == "eager"}
    plain = {workload_key(r): r for r in timed if r.impl == "fused" and r.dtype == "float32" and not r.capture}
    for r in timed:
        e = eager.get((workload_key(r), r.dtype))
        if e is not None:
            r.speedup_vs_eager, r.speedup_vs_eager_rounds = _speedup(r, e)
            r.memory_vs_eager = _memory(r, e)
            if r.tokens_digest and e.tokens_digest:
                r.same_tokens_as_eager = r.tokens_digest == e.tokens_digest
        f = plain.get(workload_key(r))
        if f is not None and r.impl == "fused" and (r.dtype != "float32" or r.capture):
            r.speedup_vs_fused, r.speedup_vs_fused_rounds = _speedup(r, f)
            if r.tokens_digest and f.tokens_digest:
                r.same_tokens_as_fused = r.tokens_digest == f.tokens_digest


__all__ = ["STATUSES", "Ratio", "Row", "add_ratios", "derive_row", "not_run", "round_values", "row_ratio", "workload_key"]
