"""Reporting a ``plga bench`` run: the JSON document, its schema check and the text report.

The report reads verdicts first (the targets table), then the machine limits, then every row.
"""

from __future__ import annotations

import statistics
from typing import Any

from .plan import MIN_RUNS
from .rows import STATUSES, Row
from .targets import REPORT, TARGET_STATUSES, Verdict

SCHEMA = "plga-bench/2"

# --- schema ---------------------------------------------------------------------------------

_ROW_OK_REQUIRED = {"runs": int, "times_s": list, "median_s": float, "min_s": float, "max_s": float, "meets_runs_rule": bool}
_ROW_TIMED_REQUIRED = {"flops": int, "gflops_per_s": float, "tokens_per_s": float}
_NON_NEGATIVE = ("roofline_fraction", "bandwidth_fraction", "loop_overhead_fraction", "speedup_vs_eager", "memory_vs_eager",
                 "speedup_vs_fused", "compile_s", "compile_cached_s", "read_gbps")


def _is(v: Any, typ: type) -> bool:
    if typ is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return isinstance(v, typ) and not (typ is int and isinstance(v, bool))


def _row_errors(where: str, r: Any) -> list[str]:
    if not isinstance(r, dict):
        return [f"{where} is not an object"]
    errs = [f"{where}.{k} must be a str" for k in ("id", "kind", "status") if not isinstance(r.get(k), str)]
    if r.get("status") not in STATUSES:
        return [*errs, f"{where}.status must be one of {STATUSES}"]
    if r["status"] != "ok":
        return errs + ([] if isinstance(r.get("reason"), str) else [f"{where}: a {r['status']} row needs a reason"])
    need = dict(_ROW_OK_REQUIRED) | (_ROW_TIMED_REQUIRED if r.get("kind") in ("prefill", "decode") else {})
    errs += [f"{where}.{k} must be a {t.__name__}" for k, t in need.items() if not _is(r.get(k), t)]
    ts = r.get("times_s")
    if isinstance(ts, list) and ts and all(_is(t, float) for t in ts):
        if r.get("runs") != len(ts):
            errs.append(f"{where}.runs != len(times_s)")
        if _is(r.get("median_s"), float) and abs(r["median_s"] - statistics.median(ts)) > 1e-12:
            errs.append(f"{where}.median_s is not the median of times_s")
        if _is(r.get("min_s"), float) and _is(r.get("max_s"), float) and not (r["min_s"] <= r["median_s"] <= r["max_s"]):
            errs.append(f"{where}: need min_s ≤ median_s ≤ max_s")
        if r.get("meets_runs_rule") is not (len(ts) >= MIN_RUNS):
            errs.append(f"{where}.meets_runs_rule must say whether runs ≥ {MIN_RUNS}")
    errs += [f"{where}.{k} must be a number ≥ 0" for k in _NON_NEGATIVE if k in r and not (_is(r[k], float) and r[k] >= 0)]
    for k in ("speedup_vs_eager", "speedup_vs_fused"):  # a paired ratio is the median of its rounds
        rounds = r.get(f"{k}_rounds")
        if rounds is None:
            continue
        if not (isinstance(rounds, list) and rounds and all(_is(x, float) and x > 0 for x in rounds)):
            errs.append(f"{where}.{k}_rounds must be a non-empty list of positive numbers")
        elif not _is(r.get(k), float) or abs(r[k] - statistics.median(rounds)) > 1e-12 * max(1.0, abs(r[k])):
            errs.append(f"{where}.{k} is not the median of {k}_rounds")
    return errs


def _target_errors(where: str, t: Any) -> list[str]:
    if not isinstance(t, dict):
        return [f"{where} is not an object"]
    errs = []
    if t.get("status") not in TARGET_STATUSES:
        errs.append(f"{where}.status must be one of {TARGET_STATUSES}")
    if t.get("op") not in (">=", "<=", REPORT):
        errs.append(f"{where}.op must be '>=', '<=' or {REPORT!r}")
    if t.get("op") == REPORT and t.get("status") not in ("reported", "not measured"):
        errs.append(f"{where}: a target without a goal is reported (or not measured), never judged")
    if t.get("op") != REPORT and t.get("status") == "reported":
        errs.append(f"{where}: a target with a goal is judged, not reported")
    if t.get("status") in ("met", "missed", "reported") and not _is(t.get("measured"), float):
        errs.append(f"{where}: a {t.get('status')} target needs a numeric measured value")
    if t.get("status") == "missed" and not (_is(t.get("shortfall"), float) and t["shortfall"] > 0):
        errs.append(f"{where}: a missed target needs a positive shortfall")
    return errs


def validate_document(doc: Any) -> list[str]:
    """Every way ``doc`` (a loaded bench JSON) departs from the schema (empty list: valid)."""
    if not isinstance(doc, dict):
        return ["document is not an object"]
    errs: list[str] = []
    if doc.get("schema") != SCHEMA:
        errs.append(f"schema must be {SCHEMA!r}, got {doc.get('schema')!r}")
    for key, typ in (("created", str), ("host", dict), ("settings", dict), ("limits", dict), ("rows", list), ("targets", list), ("load_avg", dict)):
        if not isinstance(doc.get(key), typ):
            errs.append(f"{key} must be a {typ.__name__}")
    lim = doc.get("limits") if isinstance(doc.get("limits"), dict) else {}
    errs += [f"limits.{k} must be a positive number" for k in ("peak_gflops", "bandwidth_gbps") if not (_is(lim.get(k), float) and lim[k] > 0)]
    seen: set[Any] = set()
    for i, r in enumerate(doc.get("rows") or []):
        errs += _row_errors(f"rows[{i}]", r)
        rid = r.get("id") if isinstance(r, dict) else None
        if rid in seen:
            errs.append(f"rows[{i}].id {rid!r} is duplicated")
        seen.add(rid)
    for i, t in enumerate(doc.get("targets") or []):
        errs += _target_errors(f"targets[{i}]", t)
    return errs


# --- text -----------------------------------------------------------------------------------


def _fmt(v: Any, spec: str = ".3g") -> str:
    if v is None:
        return "–"
    return format(v, spec) if isinstance(v, float) else str(v)


def _mib(v: Any) -> str:
    return "–" if not v else f"{v / 2**20:.0f}"


def _pct(v: Any) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


ROW_HEAD = ("case", "impl", "shape", "runs", "median ms", "min ms", "max ms", "tok/s", "GFLOP/s", "peak MiB",
            "× eager", "mem ÷ eager", "× fused f32", "roofline", "BW bound", "loop ovh", "compile s", "cached s")


def format_rows(rows: list[Row]) -> str:
    """The timed rows as a Markdown table (pasteable into a README)."""
    lines = ["| " + " | ".join(ROW_HEAD) + " |", "|" + "|".join("---" for _ in ROW_HEAD) + "|"]
    for r in rows:
        if r.kind not in ("prefill", "decode"):
            continue
        case = f"{r.config} {r.kind}" + (f" {r.mode}" if r.mode else "")
        impl = f"{r.impl}" + (f"+{r.capture}" if r.capture else "") + (f" {r.dtype}" if r.dtype and r.dtype != "float32" else "")
        shape = f"b{r.batch} s{r.seq}" + (f" +{r.new_tokens}" if r.new_tokens else "") + (f" {r.logits}" if r.logits and r.kind == "prefill" else "")
        if not r.ok:
            lines.append(f"| {case} | {impl} | {shape} | {r.status}: {r.reason} |" + " |" * (len(ROW_HEAD) - 4))
            continue
        cells = (
            case, impl, shape, f"{r.runs}" + ("" if r.meets_runs_rule else "*"), _fmt(1e3 * r.median_s, ".1f"),  # type: ignore[operator]
            _fmt(1e3 * r.min_s, ".1f"), _fmt(1e3 * r.max_s, ".1f"), _fmt(r.shown_tokens_per_s, ".4g"),  # type: ignore[operator]
            _fmt(r.gflops_per_s, ".3g"), _mib(r.peak_device_bytes or r.peak_rss_bytes), _fmt(r.speedup_vs_eager, ".2f"),
            _fmt(r.memory_vs_eager, ".2f"), _fmt(r.speedup_vs_fused, ".2f"), _pct(r.roofline_fraction), _pct(r.bandwidth_fraction),
            _pct(r.loop_overhead_fraction), _fmt(r.compile_s, ".1f"), _fmt(r.compile_cached_s, ".1f"),
        )
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def _via(matmul: dict[str, Any]) -> str:
    """" (oneDNN; torch.matmul 158.0)" when the peak came from another GEMM than torch's."""
    if matmul.get("via", "torch.matmul") == "torch.matmul":
        return ""
    if not _is(matmul.get("torch_matmul_gflops_best"), float):
        return f" ({matmul['via'].split()[0]}; torch.matmul not timed)"
    return f" ({matmul['via'].split()[0]}; torch.matmul {matmul['torch_matmul_gflops_best']:.1f})"


def _matmul_peaks(lim: dict[str, Any], via: bool = False) -> str:
    """"float32 406.5, bfloat16 782.5" (with :func:`_via` after each peak when ``via``)."""
    return ", ".join(f"{k.removeprefix('matmul_')} {v['gflops_best']:.1f}" + (_via(v) if via else "") for k, v in lim.items()
                     if k.startswith("matmul_") and isinstance(v, dict))


def format_limits(limits: dict[str, Any], end: dict[str, Any] | None = None, used: dict[str, Any] | None = None) -> str:
    def one(lim: dict[str, Any]) -> str:
        mm = _matmul_peaks(lim, via=True)
        packed = lim.get("gemv_packed_layout")
        return (f"matmul {lim.get('matmul_n')}² GFLOP/s: {mm}; read {lim['read']['gbps_best']:.1f} GB/s, "
                f"copy {lim['copy']['gbps_best']:.1f} GB/s; GEMV 32000×896 float32: nn.Linear layout "
                f"{lim['gemv_linear_layout']['gbps_best']:.1f} GB/s, transposed {lim['gemv_transposed_layout']['gbps_best']:.1f} GB/s"
                + (f", packed ({packed['parts']} blocks) {packed['gbps_best']:.1f} GB/s" if packed else "")
                + (f", native kernel {fn['gbps_best']:.1f} GB/s" if (fn := lim.get("gemv_native")) else "")
                + (f"; bfloat16: nn.Linear layout {bl['gbps_best']:.1f} GB/s" if (bl := lim.get("gemv_bf16_linear")) else "")
                + (f", native kernel {bn['gbps_best']:.1f} GB/s" if (bn := lim.get("gemv_bf16_native")) else "")
                + f"; NumPy float64 matmul {lim.get('numpy_float64_matmul_gflops', 0):.1f} GFLOP/s")
    out = "machine limits (start): " + one(limits)
    if end:
        out += "\nmachine limits (end):   " + one(end)
    if used and used.get("fractions_from", "start") != "start":
        out += (f"\nfractions divide by the higher of the two: matmul {_matmul_peaks(used)} GFLOP/s, read {used['bandwidth_gbps']:.1f} GB/s "
                f"({used['fractions_from']})")
    return out


def format_in_turn_bandwidth(rows: list[Row]) -> str:
    """One line: the read bandwidth each decoding group measured in turn with its runs (what its
    batch-1 rows' bandwidth fractions divide by); empty when no probe ran."""
    probes = [r for r in rows if r.kind == "bandwidth"]
    if not probes:
        return ""
    cells = [f"{r.config} {r.mode} " + (f"{r.read_gbps:.1f}" + (f" ({r.read_via})" if r.read_via else "") if r.ok and r.read_gbps
                                        else r.status) for r in probes]
    return ("read bandwidth timed in turn with each decoding group over a buffer the size of its float32 weights, "
            "the faster of its readers (GB/s; its batch-1 rows' bandwidth fractions divide by it): "
            + ", ".join(cells))


def _show(v: float | None, unit: str, as_pct: bool) -> str:
    if as_pct:
        return _pct(v)
    return "–" if v is None else f"{v:.3g}{'' if unit in ('', '×') else ' '}{unit}"


def format_targets(verdicts: list[Verdict]) -> str:
    """The verdicts as a Markdown table: met / missed (by how much; why, where the host rules the
    target out) / not measured (why) / reported (a value without a goal)."""
    head = ("target", "goal", "measured", "status", "shortfall")
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for t in verdicts:
        pct = t.unit == "" and t.threshold <= 1.0
        goal = "– (reported)" if t.op == REPORT else f"{t.op} {_show(t.threshold, t.unit, pct)}"
        short = "–" if not t.shortfall else f"{_show(t.shortfall, t.unit, pct)} ({100 * (t.shortfall_rel or 0):.0f}% of goal)"
        status = t.status + (f" ({t.why})" if t.why else "")
        lines.append(f"| {t.target} | {goal} | {_show(t.measured, t.unit, pct)} | {status} | {short} |")
    return "\n".join(lines)


def format_cuda_graphs(rows: list[Row]) -> str:
    """A line naming the captured CUDA rows whose step Inductor compiled without a CUDA graph
    (each step then launched its kernels from Python); empty when there are none."""
    skipped = [r.id for r in rows if r.ok and r.cuda_graph_skips]
    return f"captured rows without a CUDA graph (Inductor skipped it; TORCH_LOGS=cudagraphs says why): {', '.join(skipped)}" if skipped else ""


def format_accuracy(rows: list[Row]) -> str:
    r = next((r for r in rows if r.ok and r.kind == "accuracy"), None)
    if r is None:
        return ""
    return (f"accuracy ({r.dtype}, golden prompts): max|logits − float64| = {_fmt(r.logits_max_abs_error, '.3g')}, "
            f"policy bound {_fmt(r.logits_error_bound, '.3g')}; greedy: {r.greedy_note}")


def format_report(doc: dict[str, Any], rows: list[Row], verdicts: list[Verdict]) -> str:
    s, la = doc["settings"], doc["load_avg"]
    counts = {k: sum(v.status == k for v in verdicts) for k in TARGET_STATUSES}
    parts = [
        f"plga bench  {doc['created']}  device {s['device']}  dtype {s['dtype']}  threads {s['threads']}  runs {s['runs']}"
        f"{'  (QUICK: fewer than 5 runs, reduced shapes)' if s.get('quick') else ''}",
        f"load average at start {la['start']}, at end {la['end']}; wall {doc.get('wall_s', 0):.0f} s"
        + {True: "; large freed blocks kept (glibc)", False: "; system allocator (large blocks unmapped on free)"}.get(
            doc["host"].get("freed_blocks_kept"), "")
        + ("; the cases of a prefill shape / decoding mode timed in turn" if s.get("interleaved") else ""),
        "",
        f"targets: {counts['met']} met, {counts['missed']} missed, {counts['not measured']} not measured"
        + (f"; {counts['reported']} values reported without a goal" if counts["reported"] else ""),
        format_targets(verdicts),
        "",
        format_limits(doc["limits"], doc.get("limits_end"), doc.get("limits_used")),
    ]
    in_turn = format_in_turn_bandwidth(rows)
    if in_turn:
        parts.append(in_turn)
    for line in (format_accuracy(rows), format_cuda_graphs(rows)):
        if line:
            parts.append(line)
    parts += [
        "",
        format_rows(rows),
        "",
        "tok/s: prefill B·S/median; decode rows: decode-phase tokens/s (B / step time, step = (generate − prompt pass)/(N−1)). "
        "* = fewer than 5 runs. × eager: the eager row's time ÷ this row's; × fused f32: the float32 fused row's time ÷ this "
        "row's (bf16 and compiled rows); both paired by round (the median of the per-round ratios of runs taken in turn). "
        "roofline = achieved GFLOP/s ÷ matmul peak of the row's dtype; BW bound = (weight bytes per step ÷ read bandwidth) ÷ step time, "
        "the read bandwidth of the row's decoding group, timed in turn with it over a buffer the size of the group's float32 weights. "
        "compile s: the captured row's first call on an empty Inductor cache, less its second; cached s: the same in a fresh "
        "process on the cache the row filled (what a later run pays).",
    ]
    return "\n".join(parts)


__all__ = [
    "SCHEMA", "format_cuda_graphs", "format_in_turn_bandwidth", "format_limits", "format_report", "format_rows", "format_targets",
    "validate_document",
]
