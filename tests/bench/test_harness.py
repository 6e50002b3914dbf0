"""plga.bench harness logic on synthetic measurements: planning, derived numbers, ratios,
targets, the JSON schema and the report. No case is timed here."""

from __future__ import annotations

import argparse
import copy
import json

import pytest

from plga.bench import add_bench_arguments, bench_main
from plga.bench import flops as FL
from plga.bench import harness as H
from plga.reference.config import PLDRConfig

LIMITS = {
    "peak_gflops": 100.0, "peak_gflops_float32": 100.0, "bandwidth_gbps": 20.0, "numpy_float64_matmul_gflops": 40.0,
    "matmul_n": 2048, "matmul_float32": {"gflops_best": 100.0, "gflops_median": 95.0},
    "read": {"gbps_best": 20.0}, "copy": {"gbps_best": 15.0},
    "gemv_linear_layout": {"gbps_best": 8.0}, "gemv_transposed_layout": {"gbps_best": 16.0},
    "gemv_packed_layout": {"gbps_best": 24.0, "parts": 2},
}


def parse(argv: list[str]) -> argparse.Namespace:
    return add_bench_arguments(argparse.ArgumentParser()).parse_args(argv)


def test_defaults_follow_the_issue():
    a = parse([])
    assert (a.runs, a.threads, a.device, a.dtype, a.warmup) == (5, 2, "cpu", "float32", 1)
    assert a.cases == "prefill,decode,reference,conformance"


def test_plan_full_matrix():
    cases = H.plan_cases(["small", "paper-110m"], ["prefill", "decode", "reference"])
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids))
    assert cases[0]["kind"] == cases[-1]["kind"] == "limits"
    pre = [c for c in cases if c["kind"] == "prefill" and c["impl"] == "fused"]
    assert {(c["config"], c["batch"], c["seq"]) for c in pre} == {
        (cfg, b, s) for cfg in ("small", "paper-110m") for b in (1, 8) for s in (128, 512, 1024)
    }
    assert all(c["logits"] == "last" for c in pre)
    assert all(c["logits"] == "all" for c in cases if c.get("impl") == "eager" and c["kind"] == "prefill")
    dec = [c for c in cases if c["kind"] == "decode"]
    assert {c["mode"] for c in dec} == {"nocache", "kv", "kvg", "collapsed"}
    assert all((c["seq"], c["new_tokens"]) == (128, 64) for c in dec)
    assert {c["batch"] for c in dec if c["config"] == "small" and c["mode"] == "kv"} == {1, 8}
    assert all(c["runs"] >= 5 for c in cases)
    # overhead profiling: fused, batch 1, cached modes only
    prof = [c for c in dec if c.get("overhead")]
    assert prof and all(c["impl"] == "fused" and c["batch"] == 1 and c["mode"] != "nocache" for c in prof)


def test_plan_quick_and_unknown_kinds():
    cases = H.plan_cases(["tiny"], ["prefill", "decode"], quick=True, runs=2)
    assert all(c["runs"] == 2 for c in cases)
    assert max(c.get("seq", 0) + c.get("new_tokens", 0) for c in cases) <= PLDRConfig.from_name("tiny").max_seq_len
    with pytest.raises(ValueError, match="unknown case kinds"):
        H.plan_cases(["tiny"], ["prefil"])


def _raw(spec, times, **extra):
    return {"spec": spec, "status": "ok", "times_s": times, "peak_rss_bytes": 1000, "peak_rss_source": "VmHWM", **extra}


def test_derive_prefill_row():
    spec = {"id": "x", "kind": "prefill", "config": "tiny", "impl": "fused", "batch": 2, "seq": 8, "logits": "last"}
    row = H.derive_row(_raw(spec, [0.3, 0.1, 0.2, 0.5, 0.4]), LIMITS)
    assert (row["median_s"], row["min_s"], row["max_s"], row["runs"]) == (0.3, 0.1, 0.5, 5)
    assert row["meets_runs_rule"] is True
    assert row["tokens_per_s"] == pytest.approx(16 / 0.3)
    f = FL.forward_flops(PLDRConfig.from_name("tiny"), 2, 8, logits="last").total
    assert row["flops"] == f
    assert row["gflops_per_s"] == pytest.approx(f / 0.3 / 1e9)
    assert row["roofline_fraction"] == pytest.approx(f / 0.3 / 1e9 / 100.0)
    short = H.derive_row(_raw(spec, [0.1, 0.2]), LIMITS)
    assert short["meets_runs_rule"] is False


def test_derive_decode_row_step_bandwidth_overhead():
    spec = {"id": "d", "kind": "decode", "config": "tiny", "impl": "fused", "batch": 1, "seq": 8, "new_tokens": 11, "mode": "kvg"}
    raw = _raw(spec, [2.0] * 5, prefill_times_s=[1.0, 1.0, 1.0], tokens_digest="abc",
               profiled_compute_s={"generate": 1.9, "prefill": 1.0})
    row = H.derive_row(raw, LIMITS)
    assert row["step_s"] == pytest.approx(0.1)  # (2.0 − 1.0) / (11 − 1)
    assert row["decode_tokens_per_s"] == pytest.approx(10.0)
    assert row["tokens_per_s"] == pytest.approx(11 / 2.0)
    wbytes = FL.decode_weight_bytes(PLDRConfig.from_name("tiny"), "kvg")
    assert row["weight_bytes_per_step"] == wbytes
    assert row["bandwidth_fraction"] == pytest.approx(wbytes / 20e9 / 0.1)
    assert row["step_compute_s"] == pytest.approx(0.09)
    assert row["loop_overhead_fraction"] == pytest.approx(0.1)
    nocache = H.derive_row(_raw({**spec, "id": "n", "mode": "nocache"}, [2.2] * 5), LIMITS)
    assert nocache["step_s"] == pytest.approx(0.2)
    b8 = H.derive_row(_raw({**spec, "id": "b8", "batch": 8}, [2.0] * 5, prefill_times_s=[1.0]), LIMITS)
    assert "bandwidth_fraction" not in b8 and b8["decode_tokens_per_s"] == pytest.approx(80.0)


def test_error_rows_keep_their_reason():
    spec = {"id": "e", "kind": "prefill", "config": "tiny", "impl": "eager", "batch": 1, "seq": 4}
    row = H.derive_row({"spec": spec, "status": "error", "reason": "boom"}, LIMITS)
    assert row["status"] == "error" and row["reason"] == "boom"


def test_ratios_within_a_workload():
    rows = [
        {"id": "e", "kind": "prefill", "config": "c", "batch": 1, "seq": 4, "impl": "eager", "status": "ok",
         "median_s": 3.0, "peak_rss_bytes": 1000},
        {"id": "f", "kind": "prefill", "config": "c", "batch": 1, "seq": 4, "impl": "fused", "status": "ok",
         "median_s": 1.5, "peak_rss_bytes": 400},
        {"id": "g", "kind": "prefill", "config": "c", "batch": 8, "seq": 4, "impl": "fused", "status": "ok",
         "median_s": 1.0, "peak_rss_bytes": 400},
    ]
    H.add_ratios(rows)
    assert rows[1]["speedup_vs_eager"] == pytest.approx(2.0)
    assert rows[1]["memory_vs_eager"] == pytest.approx(0.4)
    assert rows[0]["speedup_vs_eager"] == pytest.approx(1.0)
    assert "speedup_vs_eager" not in rows[2]  # no eager row for batch 8


def test_judge():
    t = H.judge("a", "x", ">=", 0.8, 0.6)
    assert t["status"] == "missed" and t["shortfall"] == pytest.approx(0.2) and t["shortfall_rel"] == pytest.approx(0.25)
    assert H.judge("a", "x", ">=", 0.8, 0.9)["status"] == "met"
    t = H.judge("b", "y", "<=", 0.6, 0.9)
    assert t["status"] == "missed" and t["shortfall"] == pytest.approx(0.3)
    assert H.judge("b", "y", "<=", 0.6, 0.2)["shortfall"] == 0.0
    assert H.judge("c", "z", ">=", 1.0, None)["status"] == "not measured"
    with pytest.raises(ValueError):
        H.judge("d", "w", ">", 1.0, 1.0)


def fake_run(spec, timeout_s, threads):
    """Synthetic case results: eager 3× slower than fused, collapsed 1.2× faster than fused."""
    if spec["kind"] == "limits":
        return {"spec": spec, "status": "ok", "limits": LIMITS}
    if spec["kind"] == "command":
        return {"spec": spec, "status": "ok", "times_s": [0.01]}
    base = 0.01 * spec.get("batch", 1) * spec.get("seq", 1) / 32
    factor = {"eager": 3.0, "fused": 1.0, "collapsed": 1 / 1.2, "reference": 10.0}[spec["impl"]]
    t = base * factor
    extra = {}
    if spec["kind"] == "decode":
        t *= 4
        extra = {"tokens_digest": "same", "prefill_times_s": [t / 4] * 3}
        if spec.get("overhead"):
            extra["profiled_compute_s"] = {"generate": 0.97 * t, "prefill": t / 4}
    peak = 5000 if spec["impl"] == "eager" else 1000
    return _raw(spec, [t * (1 + 0.01 * i) for i in range(spec["runs"])], peak_rss_bytes=peak, **extra)


def test_bench_main_end_to_end_on_synthetic_cases(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(H, "run_subprocess", fake_run)
    out = tmp_path / "bench.json"
    args = ["--config", "small,paper-110m", "--out", str(out), "--reference-budget-s", "1e9", "--conformance-cmd", "true"]
    rc = bench_main(parse(args))
    assert rc == 0
    doc = json.loads(out.read_text())
    assert H.validate_document(doc) == []
    assert doc["settings"]["meets_runs_rule"] is True
    assert doc["load_avg"]["start"] is None or len(doc["load_avg"]["start"]) == 3
    by_id = {t["id"]: t for t in doc["targets"]}
    assert by_id["prefill/speedup/paper-110m/b8s1024"]["measured"] == pytest.approx(3.0, rel=1e-6)
    assert by_id["prefill/speedup/paper-110m/b8s1024"]["status"] == "met"
    assert by_id["prefill/collapsed/paper-110m/b1s128"]["measured"] == pytest.approx(1.2, rel=1e-6)
    assert by_id["prefill/memory/small/b8s1024"]["measured"] == pytest.approx(0.2)
    assert by_id["nocache/small"]["measured"] == pytest.approx(3.0, rel=1e-6)
    assert by_id["reference/conformance-quick"]["status"] == "met"  # fake_run: 1 run of 0.01 s
    shapes = {r["id"]: r.get("warmup_shape") for r in doc["rows"] if r["status"] == "ok" and r["kind"] == "prefill"}
    assert shapes["paper-110m/prefill/eager/b8s1024/all"] == "reduced"  # est. > LONG_RUN_S at 100 GFLOP/s peak
    assert shapes["small/prefill/fused/b1s128/last"] == "full"
    fused = [r for r in doc["rows"] if r.get("impl") == "fused" and r["kind"] == "decode"]
    assert all(r["same_tokens_as_eager"] for r in fused)
    text = capsys.readouterr().out
    assert "targets:" in text and text.rstrip().endswith(f"wrote {out}")


def test_reference_budget_skips_are_rows(monkeypatch, capsys):
    monkeypatch.setattr(H, "run_subprocess", fake_run)
    args = parse(["--config", "small", "--cases", "prefill,reference", "--reference-budget-s", "0"])
    assert bench_main(args) == 0
    capsys.readouterr()


def test_shapes_past_the_context_are_skipped_rows(monkeypatch, tmp_path, capsys):
    """tiny has max_seq_len 64: the full grid's s128+64 decoding and s≥128 prefill are skipped
    with the reason, never run (they used to fail inside the case)."""
    seen = []

    def run(spec, timeout_s, threads):
        seen.append(spec["id"])
        return fake_run(spec, timeout_s, threads)

    monkeypatch.setattr(H, "run_subprocess", run)
    out = tmp_path / "t.json"
    assert bench_main(parse(["--config", "tiny", "--cases", "prefill,decode", "--out", str(out)])) == 0
    doc = json.loads(out.read_text())
    bench_rows = [r for r in doc["rows"] if r["kind"] in ("prefill", "decode")]
    assert bench_rows and all(r["status"] == "skipped" for r in bench_rows)
    assert all("exceed the config's max_seq_len 64" in r["reason"] for r in bench_rows)
    assert all(i.startswith("limits") for i in seen)
    capsys.readouterr()


def test_quick_is_labelled(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(H, "run_subprocess", fake_run)
    out = tmp_path / "q.json"
    assert bench_main(parse(["--quick", "--config", "tiny", "--out", str(out)])) == 0
    doc = json.loads(out.read_text())
    assert doc["settings"]["quick"] is True and doc["settings"]["meets_runs_rule"] is False
    assert all(r["meets_runs_rule"] is False for r in doc["rows"] if r["status"] == "ok")
    assert "QUICK" in capsys.readouterr().out


def test_validate_document_catches_errors(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(H, "run_subprocess", fake_run)
    out = tmp_path / "b.json"
    bench_main(parse(["--config", "tiny", "--quick", "--out", str(out)]))
    capsys.readouterr()
    good = json.loads(out.read_text())
    assert H.validate_document(good) == []
    assert H.validate_document([]) == ["document is not an object"]
    bad = copy.deepcopy(good)
    bad["schema"] = "other"
    bad["limits"]["bandwidth_gbps"] = 0
    row = next(r for r in bad["rows"] if r["status"] == "ok")
    row["median_s"] = row["max_s"] + 1
    row["meets_runs_rule"] = True
    bad["rows"].append(copy.deepcopy(bad["rows"][0]))
    bad["targets"].append({"status": "missed", "op": ">=", "measured": 0.1, "shortfall": 0})
    errs = "\n".join(H.validate_document(bad))
    for needle in ("schema must be", "limits.bandwidth_gbps", "not the median", "meets_runs_rule", "duplicated", "positive shortfall"):
        assert needle in errs


def test_failed_case_gives_exit_1(monkeypatch, capsys):
    def failing(spec, timeout_s, threads):
        if spec["kind"] == "limits":
            return fake_run(spec, timeout_s, threads)
        return {"spec": spec, "status": "error", "reason": "RuntimeError: boom"}

    monkeypatch.setattr(H, "run_subprocess", failing)
    assert bench_main(parse(["--config", "tiny", "--quick", "--cases", "prefill"])) == 1
    assert "boom" in capsys.readouterr().out


def test_conformance_command(monkeypatch, capsys):
    seen = []

    def fake(spec, timeout_s, threads):
        if spec["kind"] == "command":
            seen.append(spec["argv"])
            return {"spec": spec, "status": "ok", "times_s": [150.0]}
        return fake_run(spec, timeout_s, threads)

    monkeypatch.setattr(H, "run_subprocess", fake)
    assert bench_main(parse(["--config", "tiny", "--quick", "--cases", "conformance", "--conformance-cmd", "true --x 'a b'"])) == 0
    assert seen == [["true", "--x", "a b"]]
    assert "conformance quick profile" in capsys.readouterr().out


def test_eager_baseline_decodes_the_same_tokens():
    torch = pytest.importorskip("torch")
    from plga.bench.eager import EagerDecoder
    from plga.kernels import PLDRModel
    from plga.reference.checkpoint import random_params

    c = PLDRConfig.from_name("tiny")
    model = PLDRModel.from_reference(random_params(c, 0), c)
    prompt = torch.randint(1, c.input_vocab_size, (2, 6), generator=torch.Generator().manual_seed(1))
    eager = EagerDecoder(model)
    for mode in ("nocache", "kv", "kvg"):
        assert torch.equal(eager.generate(prompt, 4, mode), model.generate(prompt, 4, mode).tokens)
    collapsed = model.collapse_from(prompt)
    assert torch.equal(EagerDecoder(collapsed).generate(prompt, 4, "collapsed"), collapsed.generate(prompt, 4, "collapsed").tokens)
