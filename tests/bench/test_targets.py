"""Judging the targets on made-up rows: met, missed by how much, not measured."""

from __future__ import annotations

import math
import statistics

import pytest

from plga.bench.rows import Row
from plga.bench.targets import TARGETS, Target, evaluate_targets, judge

T = Target("t", "x", ">=", 0.8, "", "by hand", lambda rows: None)


def test_judge():
    v = judge(T, 0.6)
    assert v.status == "missed" and v.shortfall == pytest.approx(0.2) and v.shortfall_rel == pytest.approx(0.25)
    assert judge(T, 0.9).status == "met"
    le = Target("u", "y", "<=", 0.6, "", "", T.measure)
    v = judge(le, 0.9)
    assert v.status == "missed" and v.shortfall == pytest.approx(0.3)
    assert judge(le, 0.2).shortfall == 0.0
    assert judge(T, None).status == "not measured"
    with pytest.raises(ValueError):
        judge(Target("d", "w", ">", 1.0, "", "", T.measure), 1.0)


def test_a_target_without_a_goal_is_reported_never_judged():
    """``report``: the value is shown (status reported, no shortfall) whatever it is; without a
    value it is not measured. The report says "reported" where a judged target shows its goal."""
    from plga.bench.report import format_targets
    from plga.bench.targets import REPORT

    r = Target("r", "tokens until it pays off", REPORT, 0.0, "tokens", "by hand", T.measure)
    for value in (3.0, 1e9, math.inf):
        v = judge(r, value, "note")
        assert (v.status, v.measured, v.shortfall, v.why) == ("reported", value, None, "note")
    assert judge(r, None).status == "not measured"
    line = format_targets([judge(r, 25100.0)]).splitlines()[-1]
    assert "– (reported)" in line and "2.51e+04 tokens" in line and "reported" in line and "<=" not in line


def test_the_table_is_data():
    ids = [t.id for t in TARGETS]
    assert len(ids) == len(set(ids))
    assert all(t.op in (">=", "<=", "report") and t.how and t.text for t in TARGETS)
    assert {t.id.split("/")[0] for t in TARGETS if t.op == "report"} == {"compile-break-even"}
    for needle in ("bw/small/kv", "bfloat16/prefill/paper-110m/b8s1024", "bfloat16/decode/paper-110m/kvg", "bfloat16/logits-error",
                   "bfloat16/greedy-tokens", "compile/float32/small/kv", "compile/bfloat16/small/kv",
                   "compile-break-even/float32/small/kv", "compile-break-even/bfloat16/small/kv", "fused/never-slower",
                   "compile/same-tokens"):
        assert needle in ids


def _decode(mode, batch=1, **kw):
    base = dict(kind="decode", status="ok", config="small", impl="fused", dtype="float32", seq=128, new_tokens=64, median_s=1.0)
    return Row(id=f"{mode}{batch}{kw}", batch=batch, mode=mode, **base | kw)


def test_targets_read_the_right_rows():
    rows = [
        _decode("kv", step_s=0.012, decode_tokens_per_s=80.0, bandwidth_fraction=0.4, loop_overhead_fraction=0.3),  # plain
        _decode("kv", capture="compile", step_s=0.010, decode_tokens_per_s=100.0, bandwidth_fraction=0.5,
                loop_overhead_fraction=0.2, compile_s=0.5, compile_cached_s=0.05),
        _decode("kv", batch=8, decode_tokens_per_s=300.0),  # plain b8: not the batch target's row
        _decode("kv", batch=8, capture="compile", decode_tokens_per_s=500.0),
        _decode("kv", dtype="bfloat16", decode_tokens_per_s=125.0, step_s=0.008),
        _decode("kv", dtype="bfloat16", capture="compile", decode_tokens_per_s=180.0, step_s=0.006, compile_s=0.1),
        _decode("kvg", dtype="bfloat16", capture="compile", step_s=0.012, compile_s=0.1),
        _decode("kvg", dtype="bfloat16", step_s=0.010),
        Row(id="p", kind="prefill", status="ok", config="small", impl="fused", dtype="float32", batch=1, seq=4, speedup_vs_eager=0.9),
    ]
    by = {v.id: v for v in evaluate_targets(rows)}
    assert by["bw/small/kv"].measured == 0.5 and by["bw/small/kv"].status == "missed"
    assert by["bw/small/kv"].shortfall == pytest.approx(0.3)
    assert by["overhead/small/kv"].status == "missed"
    assert by["batch8/small/kv"].measured == pytest.approx(5.0) and by["batch8/small/kv"].status == "met"
    assert by["bfloat16/decode/small/kv"].measured == pytest.approx(1.8)  # the captured bf16 row ÷ float32 captured
    assert by["compile/bfloat16/small/kv"].measured == pytest.approx(180 / 125)
    assert by["compile/float32/small/kv"].measured == pytest.approx(100 / 80)
    assert by["compile-break-even/bfloat16/small/kv"].measured == pytest.approx(0.1 / 0.002)
    assert by["compile-break-even/float32/small/kv"].measured == pytest.approx(0.5 / 0.002)
    assert math.isinf(by["compile-break-even/bfloat16/small/kvg"].measured)  # the compiled step is slower: never pays off
    assert {by[f"compile-break-even/{k}"].status for k in ("float32/small/kv", "bfloat16/small/kv", "bfloat16/small/kvg")} == {"reported"}
    assert by["compile-break-even/float32/small/kv"].why == f"{0.05 / 0.002:.3g} tokens from Inductor's disk cache"
    assert by["compile-break-even/bfloat16/small/kv"].why == ""  # no disk-cache figure in its row
    assert by["compile-break-even/float32/paper-110m/kv"].status == "not measured"
    assert by["fused/never-slower"].measured == pytest.approx(0.9) and by["fused/never-slower"].status == "missed"
    assert by["bw/paper-110m/kv"].status == "not measured"
    assert "conformance" in by["reference/conformance-quick"].why


def test_captured_rows_must_decode_the_plain_tokens():
    """One float32 captured row whose tokens differ from the plain row's is a miss (a bf16 row
    differing is not counted: its rounding may legitimately flip a near-tie)."""
    same = _decode("kv", capture="compile", same_tokens_as_fused=True)
    differs = _decode("kvg", capture="compile", same_tokens_as_fused=False)
    low = _decode("kv", capture="compile", dtype="bfloat16", same_tokens_as_fused=False)
    by = {v.id: v for v in evaluate_targets([same, low])}
    assert by["compile/same-tokens"].status == "met" and by["compile/same-tokens"].measured == 1.0
    by = {v.id: v for v in evaluate_targets([same, differs, low])}
    assert by["compile/same-tokens"].status == "missed" and by["compile/same-tokens"].measured == 0.5
    assert {v.id: v for v in evaluate_targets([low])}["compile/same-tokens"].status == "not measured"


def test_a_bf16_speed_target_missed_on_a_cpu_without_bf16_arithmetic_says_why():
    """Where the bf16 matmul peak was the widened float32 product (no bf16 arithmetic), a missed
    bf16 speed-up target names the cause; a met one, another target, or a host with the
    arithmetic gets no such note."""
    from plga.bench.report import format_targets
    from plga.bench.targets import NO_LOW_PRECISION_ARITHMETIC

    big = dict(kind="prefill", status="ok", config="paper-110m", impl="fused", batch=8, seq=1024)
    rows = [Row(id="slow", dtype="bfloat16", speedup_vs_fused=1.1, **big), Row(id="f", dtype="float32", speedup_vs_eager=0.5, **big)]
    widened = {"matmul_bfloat16": {"via": "widened float32 product", "gflops_best": 80.0}}
    by = {v.id: v for v in evaluate_targets(rows, limits=widened)}
    low = by["bfloat16/prefill/paper-110m/b8s1024"]
    unpaired = "median ÷ median: the rows were not timed in turn"  # hand-made rows: no rounds to pair
    assert low.status == "missed" and low.why == f"{NO_LOW_PRECISION_ARITHMETIC}; {unpaired}"
    assert NO_LOW_PRECISION_ARITHMETIC in format_targets([low])
    assert by["prefill/speedup/paper-110m/b8s1024"].status == "missed" and by["prefill/speedup/paper-110m/b8s1024"].why == unpaired
    for limits in (None, {"matmul_bfloat16": {"via": "oneDNN inner product", "gflops_best": 800.0}}):
        assert {v.id: v for v in evaluate_targets(rows, limits=limits)}["bfloat16/prefill/paper-110m/b8s1024"].why == unpaired
    rows[0] = Row(id="fast", dtype="bfloat16", speedup_vs_fused=3.0, **big)
    met = {v.id: v for v in evaluate_targets(rows, limits=widened)}["bfloat16/prefill/paper-110m/b8s1024"]
    assert met.status == "met" and met.why == unpaired


def test_a_bf16_prefill_target_above_the_machines_bf16_peak_says_so():
    """A missed bf16 prefill speed-up names the run's bf16 ÷ float32 matmul peak where that is
    below the goal (bf16 on vector units, no AMX: ~2×); not where the peaks allow the goal, not
    when met, and never on a decoding target (bandwidth-bound: the halved bytes bound it)."""
    from plga.bench.report import format_targets

    big = dict(kind="prefill", status="ok", config="paper-110m", impl="fused", batch=8, seq=1024)
    dec = _decode("kv", capture="compile", dtype="bfloat16", decode_tokens_per_s=110.0)
    rows = [Row(id="slow", dtype="bfloat16", speedup_vs_fused=1.6, **big), dec,
            _decode("kv", capture="compile", decode_tokens_per_s=100.0)]
    vector_units = {"matmul_float32": {"via": "oneDNN inner product", "gflops_best": 207.0},
                    "matmul_bfloat16": {"via": "oneDNN inner product", "gflops_best": 424.0}}
    by = {v.id: v for v in evaluate_targets(rows, limits=vector_units)}
    low = by["bfloat16/prefill/paper-110m/b8s1024"]
    assert low.status == "missed" and "2.05× its float32 peak" in low.why and "2.5×" in low.why
    assert "2.05×" in format_targets([low])
    unpaired = "median ÷ median: the rows were not timed in turn"  # hand-made rows: no rounds to pair
    assert by["bfloat16/decode/small/kv"].status == "missed" and by["bfloat16/decode/small/kv"].why == unpaired
    amx = {**vector_units, "matmul_bfloat16": {"via": "oneDNN inner product", "gflops_best": 850.0}}
    for limits in (amx, None, {"matmul_bfloat16": {"gflops_best": 424.0}}):  # the peaks allow it / were not measured
        assert {v.id: v for v in evaluate_targets(rows, limits=limits)}["bfloat16/prefill/paper-110m/b8s1024"].why == unpaired
    rows[0] = Row(id="fast", dtype="bfloat16", speedup_vs_fused=2.6, **big)
    assert {v.id: v for v in evaluate_targets(rows, limits=vector_units)}["bfloat16/prefill/paper-110m/b8s1024"].why == unpaired


def test_the_cuda_targets_are_judged_only_where_their_baseline_holds():
    """The CUDA decoding goals divide by the first H200 run's tokens/s: judged on an H200 only
    (elsewhere: not measured, with why, whatever the rows say); bf16 prefill ≥ eager on any
    CUDA device, over every shape with an eager row."""
    from plga.bench.targets import H200_BASELINE_TOKENS_PER_S

    paper = dict(config="paper-110m", seq=128)
    pre = dict(kind="prefill", status="ok", config="paper-110m", batch=8, seq=1024)
    rows = [
        _decode("kvg", capture="compile", decode_tokens_per_s=4037.0, **paper),
        _decode("collapsed", capture="compile", decode_tokens_per_s=2435.0, **paper),
        _decode("collapsed", capture="compile", dtype="bfloat16", decode_tokens_per_s=9000.0, **paper),  # not the goal's row
        Row(id="e", impl="eager", dtype="float32", median_s=0.0455, **pre),
        Row(id="b", impl="fused", dtype="bfloat16", median_s=0.0211, **pre),
        Row(id="b1", impl="fused", dtype="bfloat16", median_s=0.001, **pre | {"seq": 128}),  # no eager row: not counted
    ]
    h200 = {"device": "cuda", "device_name": "NVIDIA H200"}
    by = {v.id: v for v in evaluate_targets(rows, limits=h200)}
    kvg, col = by["cuda/decode/paper-110m/kvg"], by["cuda/decode/paper-110m/collapsed"]
    assert kvg.status == "met" and kvg.measured == pytest.approx(4037 / H200_BASELINE_TOKENS_PER_S["kvg"])
    assert col.status == "missed" and col.measured == pytest.approx(2435 / H200_BASELINE_TOKENS_PER_S["collapsed"])
    low = by["cuda/bfloat16/prefill-vs-eager"]
    assert low.status == "met" and low.measured == pytest.approx(0.0455 / 0.0211)
    slow = [*rows, Row(id="e2", impl="eager", dtype="float32", median_s=0.004, **pre | {"batch": 1}),
            Row(id="b2", impl="fused", dtype="bfloat16", median_s=0.005, **pre | {"batch": 1})]
    assert {v.id: v for v in evaluate_targets(slow, limits=h200)}["cuda/bfloat16/prefill-vs-eager"].measured == pytest.approx(0.8)
    for limits, decode_why in (({"device": "cpu"}, "this run: cpu"), ({"device": "cuda", "device_name": "NVIDIA A100"}, "NVIDIA A100"),
                               (None, "an unknown device")):
        by = {v.id: v for v in evaluate_targets(rows, limits=limits)}
        for mode in ("kvg", "collapsed"):
            v = by[f"cuda/decode/paper-110m/{mode}"]
            assert v.status == "not measured" and v.measured is None and "H200" in v.why and decode_why in v.why
        assert (by["cuda/bfloat16/prefill-vs-eager"].status == "met") == (limits is not None and limits["device"] == "cuda")


def test_a_verdict_on_rows_timed_in_turn_is_paired_and_names_its_rounds():
    """The drift that made "fused never slower than eager" read 0.85× on an AMX host: eager ÷
    fused per round 1.27, 1.31, 1.20, 1.21 and 0.69 (the host stalled in the fused run of the last
    round). Paired, the target reads the median round (1.21×, met) and its note names the row and
    the spread; a fused path slower in most rounds still misses."""
    from plga.bench.report import format_targets
    from plga.bench.rows import add_ratios, derive_row

    from .helpers import LIMITS, raw

    spec = {"kind": "decode", "config": "tiny", "dtype": "float32", "batch": 1, "seq": 8, "new_tokens": 4,
            "mode": "nocache", "group": "tiny/decode/nocache"}
    fused_s = [0.10, 0.10, 0.20, 0.25, 0.28]  # the host slowing down through the run
    per_round = [1.27, 1.31, 1.20, 1.21, 0.69]

    def rows_for(ratios):
        rows = [derive_row(raw({**spec, "id": "tiny/decode/eager", "impl": "eager"}, [f * q for f, q in zip(fused_s, ratios, strict=True)]), LIMITS),
                derive_row(raw({**spec, "id": "tiny/decode/fused", "impl": "fused"}, fused_s), LIMITS)]
        add_ratios(rows)
        return {v.id: v for v in evaluate_targets(rows)}["fused/never-slower"]

    assert statistics.median([f * q for f, q in zip(fused_s, per_round, strict=True)]) / statistics.median(fused_s) < 1.0
    v = rows_for(per_round)
    assert v.status == "met" and v.measured == pytest.approx(1.21)
    assert v.why == "tiny/decode/fused: 5 rounds, 0.69–1.31" and "5 rounds, 0.69–1.31" in format_targets([v])
    slower = rows_for([0.95, 0.9, 1.2, 0.97, 1.3])
    assert slower.status == "missed" and slower.measured == pytest.approx(0.97)


def test_a_speedup_goal_above_what_the_products_allow_says_so():
    """A missed speed-up-vs-eager target whose goal is above eager time ÷ (the fused row's
    matrix FLOPs at the run's float32 matmul peak) says so, with the numbers; not where the
    peak allows the goal (the same rows, a faster peak), not when met, and not without the
    eager row or the peak."""
    from plga.bench.report import format_targets

    dec = dict(kind="decode", status="ok", config="paper-110m", batch=1, mode="nocache", dtype="float32", seq=128, new_tokens=64)
    fused = Row(id="f", impl="fused", median_s=7.0, flops=10**12, speedup_vs_eager=10 / 7, **dec)
    eager = Row(id="e", impl="eager", median_s=10.0, flops=16 * 10**11, **dec)
    slow_peak = {"matmul_float32": {"gflops_best": 200.0}}  # fused products alone: 5 s → at most 2.0×
    v = {v.id: v for v in evaluate_targets([fused, eager], limits=slow_peak)}["nocache/paper-110m"]
    assert v.status == "missed"
    assert "eager computes 1.60× the fused path's matrix FLOPs" in v.why and "160 GFLOP/s (80% of the run's 200" in v.why
    assert "alone take 5 s against eager's 10 s: at most 2.00×, below the 2.5× goal" in v.why
    assert "at most 2.00×" in format_targets([v])
    for rows, limits in (([fused, eager], {"matmul_float32": {"gflops_best": 500.0}}),  # at most 5×: the goal is reachable
                         ([fused], slow_peak), ([fused, eager], None)):
        assert "at most" not in {v.id: v for v in evaluate_targets(rows, limits=limits)}["nocache/paper-110m"].why
    fused.speedup_vs_eager = 2.6  # met: no note, whatever the bound says
    met = {v.id: v for v in evaluate_targets([fused, eager], limits=slow_peak)}["nocache/paper-110m"]
    assert met.status == "met" and "at most" not in met.why
