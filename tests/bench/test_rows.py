"""A row's derived numbers from made-up measurements, and the cross-row ratios."""

from __future__ import annotations

import pytest

from plga.bench import flops as FL
from plga.bench.rows import Row, add_ratios, derive_row, round_values, row_ratio
from plga.reference.config import PLDRConfig

from .helpers import LIMITS, raw

TINY = PLDRConfig.from_name("tiny")


def test_derive_prefill_row():
    spec = {"id": "x", "kind": "prefill", "config": "tiny", "impl": "fused", "dtype": "float32", "batch": 2, "seq": 8, "logits": "last"}
    row = derive_row(raw(spec, [0.3, 0.1, 0.2, 0.5, 0.4]), LIMITS)
    assert (row.median_s, row.min_s, row.max_s, row.runs) == (0.3, 0.1, 0.5, 5)
    assert row.meets_runs_rule is True
    assert row.tokens_per_s == pytest.approx(16 / 0.3)
    f = FL.forward_flops(TINY, 2, 8, logits="last", last_row_only=True).total  # the fused path trims its last layer
    assert row.flops == f < FL.forward_flops(TINY, 2, 8, logits="last").total
    assert row.gflops_per_s == pytest.approx(f / 0.3 / 1e9)
    assert row.roofline_fraction == pytest.approx(f / 0.3 / 1e9 / 100.0)
    # a bf16 row is measured against the bf16 matmul peak
    low = derive_row(raw({**spec, "dtype": "bfloat16"}, [0.3] * 5), LIMITS)
    assert low.roofline_fraction == pytest.approx(f / 0.3 / 1e9 / 400.0)
    assert derive_row(raw(spec, [0.1, 0.2]), LIMITS).meets_runs_rule is False


def test_derive_decode_row_step_bandwidth_overhead():
    spec = {"id": "d", "kind": "decode", "config": "tiny", "impl": "fused", "dtype": "float32", "batch": 1, "seq": 8,
            "new_tokens": 11, "mode": "kvg"}
    pairs = [{"generate_s": 2.0, "prefill_s": 1.0, "generate_compute_s": 1.9, "prefill_compute_s": 1.0}]
    r = raw(spec, [2.0] * 5, prefill_times_s=[1.0, 1.0, 1.0], tokens_digest="abc", overhead_pairs=pairs)
    row = derive_row(r, LIMITS)
    assert row.step_s == pytest.approx(0.1)  # (2.0 − 1.0) / (11 − 1)
    assert row.decode_tokens_per_s == pytest.approx(10.0)
    assert row.tokens_per_s == pytest.approx(11 / 2.0)
    wbytes = FL.decode_weight_bytes(TINY, "kvg")
    assert row.weight_bytes_per_step == wbytes
    assert row.bandwidth_fraction == pytest.approx(wbytes / 20e9 / 0.1)
    assert row.step_compute_s == pytest.approx(0.09)
    assert row.loop_overhead_fraction == pytest.approx(0.1)
    low = derive_row(raw({**spec, "dtype": "bfloat16"}, [2.0] * 5, prefill_times_s=[1.0]), LIMITS)
    assert low.weight_bytes_per_step == FL.decode_weight_bytes(TINY, "kvg", bytes_per_param=2, chain_bytes_per_param=4)
    nocache = derive_row(raw({**spec, "id": "n", "mode": "nocache"}, [2.2] * 5), LIMITS)
    assert nocache.step_s == pytest.approx(0.2)
    b8 = derive_row(raw({**spec, "id": "b8", "batch": 8}, [2.0] * 5, prefill_times_s=[1.0]), LIMITS)
    assert b8.bandwidth_fraction is None and b8.decode_tokens_per_s == pytest.approx(80.0)


def test_error_rows_keep_their_reason_and_json_round_trips():
    spec = {"id": "e", "kind": "prefill", "config": "tiny", "impl": "eager", "batch": 1, "seq": 4}
    row = derive_row({"spec": spec, "status": "error", "reason": "boom"}, LIMITS)
    assert row.status == "error" and row.reason == "boom"
    assert Row.from_json(row.to_json()) == row
    assert "median_s" not in row.to_json()  # None fields are left out of the JSON


def _row(id_, impl, median, **kw):
    base = dict(kind="prefill", config="c", batch=1, seq=4, dtype="float32", status="ok", peak_rss_bytes=1000)
    return Row(id=id_, impl=impl, median_s=median, **base | kw)


def test_ratios_within_a_workload():
    rows = [
        _row("e", "eager", 3.0),
        _row("f", "fused", 1.5, peak_rss_bytes=400),
        _row("g", "fused", 1.0, batch=8),
        _row("b", "fused", 0.5, dtype="bfloat16"),
        _row("c", "fused", 1.2, capture="compile"),
    ]
    add_ratios(rows)
    e, f, g, b, c = rows
    assert f.speedup_vs_eager == pytest.approx(2.0) and f.memory_vs_eager == pytest.approx(0.4)
    assert e.speedup_vs_eager == pytest.approx(1.0)
    assert g.speedup_vs_eager is None  # no eager row for batch 8
    assert b.speedup_vs_eager is None  # no bf16 eager row: ratios stay within a dtype
    assert b.speedup_vs_fused == pytest.approx(3.0) and c.speedup_vs_fused == pytest.approx(1.25)
    assert f.speedup_vs_fused is None


def test_loop_overhead_pairs_each_profile_with_the_runs_beside_it():
    """A host that slows between pairs changes every time but not the overhead: each profiled
    compute is divided by the wall time measured beside it (median over the pairs)."""
    spec = {"id": "d", "kind": "decode", "config": "tiny", "impl": "fused", "dtype": "float32", "batch": 1, "seq": 8,
            "new_tokens": 11, "mode": "kvg"}
    pairs = [{"generate_s": 2.0 * k, "prefill_s": 1.0 * k, "generate_compute_s": 1.9 * k, "prefill_compute_s": 1.0 * k}
             for k in (1.0, 1.5, 0.7)]
    row = derive_row(raw(spec, [3.0] * 5, prefill_times_s=[1.0], overhead_pairs=pairs), LIMITS)
    assert row.loop_overhead_fraction == pytest.approx(0.1)  # not 1 − 0.09 / 0.2 from the timed runs
    assert row.step_compute_s == pytest.approx(0.09)
    outlier = [*pairs[:2], {**pairs[2], "generate_compute_s": 0.2}]  # one disturbed profile: the median holds
    assert derive_row(raw(spec, [3.0] * 5, prefill_times_s=[1.0], overhead_pairs=outlier), LIMITS).loop_overhead_fraction == pytest.approx(0.1)
    nocache = derive_row(raw({**spec, "mode": "nocache"}, [3.0] * 5, overhead_pairs=pairs), LIMITS)
    assert nocache.loop_overhead_fraction is None


def test_a_profile_that_outruns_its_wall_time_is_not_a_zero_overhead():
    """Two of three profiled steps computing longer than the unprofiled steps beside them (the
    host slowed between the runs) used to be clipped to 0 % and met the ≤ 5 % target; now the
    fraction is absent and the target is not measured, saying why."""
    from plga.bench.targets import evaluate_targets

    spec = {"id": "d", "kind": "decode", "config": "small", "impl": "fused", "capture": "compile", "dtype": "float32",
            "batch": 1, "seq": 8, "new_tokens": 11, "mode": "kv"}
    pair = {"generate_s": 2.0, "prefill_s": 1.0, "prefill_compute_s": 1.0}
    pairs = [{**pair, "generate_compute_s": g} for g in (2.1, 2.2, 1.9)]  # fractions −0.1, −0.2, 0.1
    row = derive_row(raw(spec, [3.0] * 5, prefill_times_s=[1.0], overhead_pairs=pairs), LIMITS)
    assert row.loop_overhead_fraction is None and row.loop_overhead_pairs == pytest.approx([-0.1, -0.2, 0.1])
    (verdict,) = [v for v in evaluate_targets([row]) if v.id == "overhead/small/kv"]
    assert verdict.status == "not measured" and "profiled step's compute exceeded" in verdict.why
    # control: one inconsistent pair of three leaves a measured median
    pairs[1]["generate_compute_s"] = 1.8
    assert derive_row(raw(spec, [3.0] * 5, prefill_times_s=[1.0], overhead_pairs=pairs), LIMITS).loop_overhead_fraction == pytest.approx(0.1)


def test_captured_cuda_rows_without_a_cuda_graph_are_named():
    """A captured CUDA row whose step Inductor compiled without a CUDA graph is named under the
    table; a row that kept its graph (0 skips) and a CPU row (no count) are not."""
    from plga.bench.report import format_cuda_graphs

    spec = {"kind": "decode", "config": "tiny", "impl": "fused", "dtype": "float32", "batch": 1, "seq": 8, "new_tokens": 11,
            "mode": "kvg", "capture": "compile"}
    rows = [derive_row(raw({**spec, "id": name}, [2.0] * 5, prefill_times_s=[1.0], **extra), LIMITS)
            for name, extra in (("graphed", {"cuda_graph_skips": 0}), ("skipped", {"cuda_graph_skips": 1}), ("cpu", {}))]
    assert [r.cuda_graph_skips for r in rows] == [0, 1, None]
    assert Row.from_json(rows[1].to_json()) == rows[1]
    line = format_cuda_graphs(rows)
    assert "skipped" in line and "graphed" not in line and "cpu" not in line
    assert format_cuda_graphs(rows[::2]) == ""


def _timed(id_, impl, times, group="g", **kw):
    spec = {"id": id_, "kind": "prefill", "config": "tiny", "impl": impl, "dtype": "float32", "batch": 1, "seq": 8,
            "group": group, **kw}
    return derive_row(raw(spec, times), LIMITS)


def test_a_speed_up_of_rows_timed_in_turn_is_the_median_of_its_rounds():
    """The host slows through the run and the eager row has one fast round: the two medians come
    from different rounds and read fused 0.83× eager, though fused was 1.25× faster in four
    rounds of five. Paired by round the speed-up is 1.25×; rows not timed in turn (different
    groups) keep the ratio of their medians."""
    fused = [1.0, 2.0, 3.0, 4.0, 5.0]
    eager = [1.25, 2.5, 3.75, 5.0, 0.9]
    rows = [_timed("e", "eager", eager), _timed("f", "fused", fused)]
    add_ratios(rows)
    assert rows[1].speedup_vs_eager == pytest.approx(1.25)
    assert rows[1].speedup_vs_eager_rounds == pytest.approx([1.25, 1.25, 1.25, 1.25, 0.18])
    assert Row.from_json(rows[1].to_json()) == rows[1]
    apart = [_timed("e", "eager", eager, group="g1"), _timed("f", "fused", fused, group="g2")]
    add_ratios(apart)
    assert apart[1].speedup_vs_eager == pytest.approx(2.5 / 3.0) and apart[1].speedup_vs_eager_rounds is None
    # control: a fused path slower in every round stays slower, however the host drifts
    slower = [_timed("e", "eager", [0.9 * t for t in fused]), _timed("f", "fused", fused)]
    add_ratios(slower)
    assert slower[1].speedup_vs_eager == pytest.approx(0.9)


def test_pairing_uses_the_rounds_both_rows_ran():
    """A row with fewer runs (a reference row under its budget) pairs its first rounds."""
    r = row_ratio(_timed("a", "eager", [2.0, 4.0, 6.0]), _timed("b", "fused", [1.0, 2.0, 3.0, 100.0, 100.0]), "median_s")
    assert r is not None and r.rounds == pytest.approx((2.0, 2.0, 2.0)) and r.value == pytest.approx(2.0)
    assert r.note() == "3 rounds, 2–2"


def test_decode_tokens_per_s_ratios_are_paired_by_round():
    """Batch 8 ÷ batch 1 decoding: each round's step is (run − prompt pass) ÷ (N − 1). The b8
    row's last round was disturbed (fast); per round b8 reads 4× b1 in four rounds of five, the
    medians 6×. The per-round tokens/s of a row has the row's decode tokens/s as its median."""
    spec = {"kind": "decode", "config": "small", "impl": "fused", "dtype": "float32", "seq": 8, "new_tokens": 11,
            "mode": "kv", "group": "small/decode/kv"}
    drift = [1.0, 2.0, 3.0, 4.0, 5.0]
    b1 = derive_row(raw({**spec, "id": "b1", "batch": 1}, [1.0 + 10 * 0.1 * d for d in drift], prefill_times_s=[1.0]), LIMITS)
    b8_drift = [1.0, 2.0, 3.0, 4.0, 0.2]
    b8 = derive_row(raw({**spec, "id": "b8", "batch": 8}, [1.0 + 10 * 0.2 * d for d in b8_drift], prefill_times_s=[1.0]), LIMITS)
    per_round = round_values(b1, "decode_tokens_per_s")
    assert per_round == pytest.approx([10.0 / d for d in drift])
    assert sorted(per_round)[2] == pytest.approx(b1.decode_tokens_per_s)
    assert b8.decode_tokens_per_s / b1.decode_tokens_per_s == pytest.approx(6.0)
    paired = row_ratio(b8, b1, "decode_tokens_per_s")
    assert paired is not None and paired.value == pytest.approx(4.0) and paired.rounds[-1] == pytest.approx(100.0)
    # a run no longer than the prompt pass has no step: the rows fall back to their medians
    short = derive_row(raw({**spec, "id": "s", "batch": 8}, [0.5, *[1.0 + 2 * d for d in b8_drift[1:]]], prefill_times_s=[1.0]),
                       LIMITS)
    assert round_values(short, "decode_tokens_per_s") is None
    fallback = row_ratio(short, b1, "decode_tokens_per_s")
    assert fallback is not None and fallback.rounds == () and fallback.note().startswith("median ÷ median")
    with pytest.raises(ValueError, match="no per-round value"):
        round_values(b1, "step_s")
