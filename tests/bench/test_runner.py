"""``plga bench`` end to end on made-up case results: the JSON schema, the report (verdicts
first), skips, failures and the conformance command. No case is timed here."""

from __future__ import annotations

import copy
import json

import pytest

from plga.bench import bench_main, main
from plga.bench import plan as P
from plga.bench import runner as R
from plga.bench.report import validate_document

from .helpers import fake_run, parse, per_case


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(R, "run_group", per_case(fake_run))


def test_end_to_end_on_synthetic_cases(fake, tmp_path, capsys):
    out = tmp_path / "bench.json"
    args = ["--config", "small,paper-110m", "--out", str(out), "--reference-budget-s", "1e9", "--conformance-cmd", "true",
            "--no-progress"]
    assert bench_main(parse(args)) == 0
    doc = json.loads(out.read_text())
    assert validate_document(doc) == []
    assert doc["settings"]["meets_runs_rule"] is True
    by_id = {t["id"]: t for t in doc["targets"]}
    assert by_id["prefill/speedup/paper-110m/b8s1024"]["measured"] == pytest.approx(3.0, rel=1e-6)
    assert by_id["prefill/speedup/paper-110m/b8s1024"]["status"] == "met"
    assert by_id["prefill/collapsed/paper-110m/b1s128"]["measured"] == pytest.approx(1.2, rel=1e-6)
    assert by_id["prefill/memory/small/b8s1024"]["measured"] == pytest.approx(0.2)
    assert by_id["nocache/small"]["measured"] == pytest.approx(3.0, rel=1e-6)
    assert by_id["bfloat16/prefill/paper-110m/b8s1024"]["measured"] == pytest.approx(2.0, rel=1e-6)
    assert by_id["bfloat16/prefill/paper-110m/b8s1024"]["status"] == "missed"
    assert by_id["compile/bfloat16/small/kv"]["measured"] == pytest.approx(1.25, rel=0.01)  # timed runs spread 0–4 %
    assert by_id["compile-break-even/bfloat16/small/kv"]["measured"] > 0
    assert by_id["compile/float32/small/kv"]["measured"] is not None
    assert by_id["bfloat16/logits-error"]["measured"] == 0.25 and by_id["bfloat16/greedy-tokens"]["status"] == "met"
    assert by_id["reference/conformance-quick"]["status"] == "met"  # fake_run: 1 run of 0.01 s
    assert by_id["audit/torch-vs-reference"]["measured"] == pytest.approx(1.25)
    shapes = {r["id"]: r.get("warmup_shape") for r in doc["rows"] if r["status"] == "ok" and r["kind"] == "prefill"}
    assert shapes["paper-110m/prefill/eager/b8s1024/all"] == "reduced"  # est. > LONG_RUN_S at 100 GFLOP/s peak
    assert shapes["small/prefill/fused/b1s128/last"] == "full"
    # rows of one group are paired by round: fake_run's runs drift 0–4 % alike in every case
    fused_b8 = next(r for r in doc["rows"] if r["id"].startswith("paper-110m/prefill/fused/b8s1024") and r["dtype"] == "float32")
    assert fused_b8["group"] == "paper-110m/prefill/b8s1024" and fused_b8["speedup_vs_eager_rounds"] == pytest.approx([3.0] * 5)
    assert "5 rounds, 3–3" in by_id["prefill/speedup/paper-110m/b8s1024"]["why"]
    fused = [r for r in doc["rows"] if r.get("impl") == "fused" and r["kind"] == "decode" and r["dtype"] == "float32"]
    assert all(r["same_tokens_as_eager"] for r in fused if not r.get("capture"))
    text = capsys.readouterr().out
    assert text.index("targets:") < text.index("machine limits") < text.index("| case |")  # verdicts first
    assert doc["settings"]["interleaved"] is True and "timed in turn" in text.splitlines()[1]
    assert "accuracy (bfloat16, golden prompts)" in text
    assert text.rstrip().endswith(f"wrote {out}")
    assert not (tmp_path / "bench.json.partial").exists()


def test_shapes_past_the_context_are_skipped_rows(monkeypatch, tmp_path, capsys):
    seen = []

    def run(spec, timeout_s, threads):
        seen.append(spec["id"])
        return fake_run(spec, timeout_s, threads)

    monkeypatch.setattr(R, "run_group", per_case(run))
    # shapes past tiny's 64 positions (a full run gives tiny shapes it holds: plan.shapes)
    monkeypatch.setattr(P, "shapes", lambda cfg, quick: ((1, 8), (128, 512), 128, 64))
    out = tmp_path / "t.json"
    assert bench_main(parse(["--config", "tiny", "--cases", "prefill,decode", "--out", str(out)])) == 0
    doc = json.loads(out.read_text())
    rows = [r for r in doc["rows"] if r["kind"] in ("prefill", "decode")]
    assert rows and all(r["status"] == "skipped" and "exceed the config's max_seq_len 64" in r["reason"] for r in rows)
    assert all(i.startswith(("limits", "accuracy")) for i in seen)
    capsys.readouterr()


def test_quick_is_labelled(fake, tmp_path, capsys):
    out = tmp_path / "q.json"
    assert bench_main(parse(["--quick", "--config", "tiny", "--out", str(out)])) == 0
    doc = json.loads(out.read_text())
    assert doc["settings"]["quick"] is True and doc["settings"]["meets_runs_rule"] is False
    assert all(r["meets_runs_rule"] is False for r in doc["rows"] if r["status"] == "ok")
    assert "QUICK" in capsys.readouterr().out


def test_validate_document_catches_errors(fake, tmp_path, capsys):
    out = tmp_path / "b.json"
    bench_main(parse(["--config", "tiny", "--quick", "--out", str(out)]))
    capsys.readouterr()
    good = json.loads(out.read_text())
    assert validate_document(good) == []
    assert validate_document([]) == ["document is not an object"]
    bad = copy.deepcopy(good)
    bad["schema"] = "other"
    bad["limits"]["bandwidth_gbps"] = 0
    row = next(r for r in bad["rows"] if r["status"] == "ok")
    row["median_s"] = row["max_s"] + 1
    row["meets_runs_rule"] = True
    paired = next(r for r in bad["rows"] if r.get("speedup_vs_eager_rounds"))
    paired["speedup_vs_eager"] *= 1.1  # a paired ratio that is not the median of its rounds
    bad["rows"].append(copy.deepcopy(bad["rows"][0]))
    bad["rows"].append({"id": "z", "kind": "prefill", "status": "error"})
    bad["targets"].append({"status": "missed", "op": ">=", "measured": 0.1, "shortfall": 0})
    bad["targets"].append({"status": "met", "op": "report", "measured": 0.1})
    bad["targets"].append({"status": "reported", "op": "<=", "measured": 0.1})
    bad["targets"].append({"status": "reported", "op": "report", "measured": None})
    errs = "\n".join(validate_document(bad))
    for needle in ("schema must be", "limits.bandwidth_gbps", "not the median", "meets_runs_rule", "duplicated",
                   "positive shortfall", "needs a reason", "reported (or not measured), never judged",
                   "judged, not reported", "a reported target needs a numeric measured value",
                   "speedup_vs_eager is not the median of speedup_vs_eager_rounds"):
        assert needle in errs


def test_failed_case_gives_exit_1(monkeypatch, capsys):
    def failing(spec, timeout_s, threads):
        if spec["kind"] == "limits":
            return fake_run(spec, timeout_s, threads)
        return {"spec": spec, "status": "error", "reason": "RuntimeError: boom"}

    monkeypatch.setattr(R, "run_group", per_case(failing))
    assert bench_main(parse(["--config", "tiny", "--quick", "--cases", "prefill"])) == 1
    assert "boom" in capsys.readouterr().out


def test_usage_errors_are_one_line_exit_2(capsys):
    assert main(["--config", "no-such-preset"]) == 2
    assert main(["--config", "tiny", "--cases", "prefil"]) == 2
    assert main(["--config", "tiny", "--runs", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("plga bench: error:") for line in err)


def test_conformance_command(monkeypatch, capsys):
    seen = []

    def fake(spec, timeout_s, threads):
        if spec["kind"] == "command":
            seen.append(spec["argv"])
            return {"spec": spec, "status": "ok", "times_s": [150.0]}
        return fake_run(spec, timeout_s, threads)

    monkeypatch.setattr(R, "run_group", per_case(fake))
    assert bench_main(parse(["--config", "tiny", "--quick", "--cases", "conformance", "--conformance-cmd", "true --x 'a b'"])) == 0
    assert seen == [["true", "--x", "a b"]]
    out = capsys.readouterr().out
    assert "conformance quick profile" in out and "missed" in out  # 150 s > 120 s


def test_only_runs_the_matching_cases(monkeypatch, capsys):
    seen = []

    def run(spec, timeout_s, threads):
        seen.append(spec["id"])
        return fake_run(spec, timeout_s, threads)

    monkeypatch.setattr(R, "run_group", per_case(run))
    assert bench_main(parse(["--config", "small", "--cases", "prefill,decode", "--only", "decode/kvg/fused,b8s1024/last"])) == 0
    assert seen[0] == "limits/start" and seen[-1] == "limits/end"
    assert set(seen[1:-1]) == {
        "small/decode/kvg/fused/b1s128n64", "small/decode/kvg/fused/b8s128n64", "small/prefill/fused/b8s1024/last",
        "small/decode/kvg/fused+compile/b1s128n64", "small/decode/kvg/fused+compile/b8s128n64",
        "small/decode/kvg/fused@bfloat16/b1s128n64", "small/decode/kvg/fused+compile@bfloat16/b1s128n64",
        "small/prefill/fused@bfloat16/b8s1024/last",
        "small/decode/kvg/read-bandwidth",  # the kept decoding group's bandwidth probe
    }
    capsys.readouterr()


def test_fractions_divide_by_the_higher_of_the_start_and_end_limits(monkeypatch, tmp_path, capsys):
    """A limit measured while the host was busy is understated: the start's float32 peak here is
    half the end's, and the rows' roofline and bandwidth fractions use the end's (the stricter)."""
    from .helpers import LIMITS

    slow = copy.deepcopy(LIMITS) | {"peak_gflops": 50.0, "peak_gflops_float32": 50.0}
    slow["matmul_float32"] = {"gflops_best": 50.0, "gflops_median": 45.0}

    def run(spec, timeout_s, threads):
        if spec["kind"] == "limits":
            return {"spec": spec, "status": "ok", "limits": slow if spec["when"] == "start" else LIMITS}
        return fake_run(spec, timeout_s, threads)

    monkeypatch.setattr(R, "run_group", per_case(run))
    out = tmp_path / "bench.json"
    assert bench_main(parse(["--config", "small", "--cases", "prefill", "--out", str(out), "--no-progress",
                             "--no-low-precision"])) == 0
    doc = json.loads(out.read_text())
    assert doc["limits"]["matmul_float32"]["gflops_best"] == 50.0
    assert doc["limits_used"]["matmul_float32"]["gflops_best"] == 100.0
    assert doc["limits_used"]["fractions_from"] == "start, raised to the end's matmul_float32"
    row = next(r for r in doc["rows"] if r["impl"] == "fused" and r["status"] == "ok")
    assert row["roofline_fraction"] == pytest.approx(row["gflops_per_s"] / 100.0)
    assert "fractions divide by the higher of the two: matmul float32 100.0" in capsys.readouterr().out


def test_best_of_keeps_the_start_where_it_was_higher():
    from plga.bench.machine import best_of

    from .helpers import LIMITS

    low_end = copy.deepcopy(LIMITS) | {"bandwidth_gbps": 10.0, "read": {"gbps_best": 10.0}}
    assert best_of(LIMITS, low_end)["bandwidth_gbps"] == 20.0
    assert best_of(LIMITS, low_end)["fractions_from"] == "start"
    assert best_of(LIMITS, None)["fractions_from"] == "start"
    high_end = copy.deepcopy(LIMITS) | {"bandwidth_gbps": 30.0, "read": {"gbps_best": 30.0}}
    used = best_of(LIMITS, high_end)
    assert used["bandwidth_gbps"] == 30.0 and used["read"]["gbps_best"] == 30.0 and "read" in used["fractions_from"]
    assert LIMITS["bandwidth_gbps"] == 20.0  # the start's record is not changed


def test_decoding_rows_divide_by_their_groups_in_turn_bandwidth(monkeypatch, tmp_path, capsys):
    """Each decoding group's read-bandwidth probe (2× the limits' reading here) is the bound of
    its batch-1 rows; a group whose probe failed falls back to the limits, and says so."""
    from .helpers import LIMITS

    def run(spec, timeout_s, threads):
        if spec["kind"] == "bandwidth" and spec["mode"] == "kvg":
            return {"spec": spec, "status": "error", "reason": "killed"}
        return fake_run(spec, timeout_s, threads)

    monkeypatch.setattr(R, "run_group", per_case(run))
    out = tmp_path / "bench.json"
    assert bench_main(parse(["--config", "small", "--cases", "decode", "--out", str(out), "--no-progress",
                             "--no-low-precision", "--no-capture", "--only", "small/decode/kv/fused"])) == 0
    doc = json.loads(out.read_text())
    assert validate_document(doc) == []
    probes = {r["id"]: r for r in doc["rows"] if r["kind"] == "bandwidth"}
    assert set(probes) == {"small/decode/kv/read-bandwidth"}  # kept with its group's kept case
    assert probes["small/decode/kv/read-bandwidth"]["read_gbps"] == pytest.approx(40.0)
    assert probes["small/decode/kv/read-bandwidth"]["read_via"] == "native GEMV"
    kv = next(r for r in doc["rows"] if r["id"] == "small/decode/kv/fused/b1s128n64")
    assert (kv["read_gbps"], kv["read_gbps_source"]) == (pytest.approx(40.0), "in turn")
    assert kv["bandwidth_fraction"] == pytest.approx(kv["weight_bytes_per_step"] / 40e9 / kv["step_s"])
    text = capsys.readouterr().out
    assert "read bandwidth timed in turn with each decoding group" in text and "small kv 40.0 (native GEMV)" in text

    out2 = tmp_path / "bench2.json"  # the kvg probe fails: its rows divide by the limits' reading
    assert bench_main(parse(["--config", "small", "--cases", "decode", "--out", str(out2), "--no-progress",
                             "--no-low-precision", "--no-capture", "--only", "small/decode/kvg/fused"])) == 1
    doc = json.loads(out2.read_text())
    kvg = next(r for r in doc["rows"] if r["id"] == "small/decode/kvg/fused/b1s128n64")
    assert (kvg["read_gbps"], kvg["read_gbps_source"]) == (LIMITS["bandwidth_gbps"], "limits")
    assert kvg["bandwidth_fraction"] == pytest.approx(kvg["weight_bytes_per_step"] / 20e9 / kvg["step_s"])
    assert "small kvg error" in capsys.readouterr().out
