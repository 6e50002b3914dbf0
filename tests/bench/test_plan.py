"""Planning a bench run: which cases, their ids, and the skips (no case is run)."""

from __future__ import annotations

import pytest

from plga.bench import plan as P
from plga.errors import UsageError
from plga.reference.config import PLDRConfig

from .helpers import LIMITS, parse


def test_defaults_follow_the_issue():
    a = parse([])
    assert (a.runs, a.threads, a.device, a.dtype, a.warmup) == (5, 2, "cpu", "float32", 1)
    assert a.cases == "prefill,decode,reference,conformance,audit"
    assert not (a.no_low_precision or a.no_capture or a.no_progress or a.no_cached_compile)


def test_plan_full_matrix():
    cases = P.plan_cases(["small", "paper-110m"], ["prefill", "decode", "reference"])
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids))
    assert cases[0]["kind"] == cases[-1]["kind"] == "limits"
    pre = [c for c in cases if c["kind"] == "prefill" and c["impl"] == "fused" and c["dtype"] == "float32"]
    assert {(c["config"], c["batch"], c["seq"]) for c in pre} == {
        (cfg, b, s) for cfg in ("small", "paper-110m") for b in (1, 8) for s in (128, 512, 1024)
    }
    assert all(c["logits"] == "last" for c in pre)
    assert all(c["logits"] == "all" for c in cases if c.get("impl") == "eager" and c["kind"] == "prefill")
    dec = [c for c in cases if c["kind"] == "decode"]
    assert {c["mode"] for c in dec} == {"nocache", "kv", "kvg", "collapsed"}
    assert all((c["seq"], c["new_tokens"]) == (128, 64) for c in dec)
    assert {c["batch"] for c in dec if c["config"] == "small" and c["mode"] == "kv"} == {1, 8}
    assert all(c["runs"] >= 5 for c in cases if c["kind"] != "accuracy")  # accuracy: one untimed check
    # overhead profiling: fused, batch 1, cached modes only
    prof = [c for c in dec if c.get("overhead")]
    assert prof and all(c["impl"] == "fused" and c["batch"] == 1 and c["mode"] != "nocache" for c in prof)


def test_low_precision_and_capture_rows():
    cases = P.plan_cases(["small"], ["prefill", "decode"])
    low = [c for c in cases if c.get("dtype") == "bfloat16" and c["kind"] != "accuracy" and not c.get("capture")]
    assert {(c["kind"], c.get("batch"), c.get("seq"), c.get("mode")) for c in low} == {
        ("prefill", 8, 1024, None), *(("decode", 1, 128, m) for m in P.CACHED_MODES)
    }
    assert all(c["impl"] == "fused" and "@bfloat16" in c["id"] for c in low)
    comp = [c for c in cases if c.get("capture")]
    # a captured row beside every plain cached row: float32 at batch 1 and 8, bfloat16 at batch 1
    plain = {(c["dtype"], c["batch"], c["mode"]) for c in cases
             if c["kind"] == "decode" and c["impl"] == "fused" and not c.get("capture") and c["mode"] != "nocache"}
    assert {(c["dtype"], c["batch"], c["mode"]) for c in comp} == plain
    assert {c["batch"] for c in comp if c["dtype"] == "float32"} == {1, 8}
    assert all(c["impl"] == "fused" and "+compile" in c["id"] for c in comp)
    assert all(c.get("overhead", False) == (c["batch"] == 1 and c["dtype"] == "float32") for c in comp)
    assert all(c["cached_compile"] for c in comp)  # each also times its compile from the disk cache
    args = parse(["--no-cached-compile"])
    assert args.no_cached_compile
    assert not [c for c in P.plan_cases(["small"], ["decode"], cached_compile=False) if c.get("cached_compile", False)]
    assert [c["id"] for c in cases if c["kind"] == "accuracy"] == ["accuracy/golden@bfloat16"]
    assert [c for c in P.plan_cases(["small"], ["decode"], device="cuda") if c.get("capture")]  # CUDA graphs
    none = P.plan_cases(["small"], ["prefill", "decode"], low_precision=False, capture=False)
    assert not [c for c in none if c.get("dtype") != "float32" or c.get("capture")]
    # a bfloat16 run has no extra low-precision rows (they would duplicate its own)
    run = P.plan_cases(["small"], ["prefill"], dtype="bfloat16")
    assert len([c for c in run if c.get("impl") == "fused" and (c["batch"], c["seq"]) == (8, 1024)]) == 1
    assert not [c for c in run if c["kind"] == "accuracy"]


def test_a_full_run_times_tiny_at_the_shapes_its_context_holds():
    """The default presets include ``tiny`` (the fused path must not lose to eager at tiny shapes
    either). Its 64-position context cannot hold the full shapes, so a full run times it at the
    quick shapes with the full run count, and none of its cases is skipped; the larger presets
    keep the full shapes."""
    assert parse([]).config is None and P.DEFAULT_CONFIGS == ("tiny", "small", "paper-110m")
    assert P.shapes("tiny", quick=False) == (P.QUICK["batches"], P.QUICK["seqs"], P.QUICK["prompt"], P.QUICK["new"])
    assert P.shapes("small", quick=False) == (P.PREFILL_BATCHES, P.PREFILL_SEQS, P.DECODE_PROMPT, P.DECODE_NEW)
    assert P.shapes("small", quick=True) == P.shapes("tiny", quick=False)
    cases = P.plan_cases(P.DEFAULT_CONFIGS, ["prefill", "decode", "reference"])
    tiny = [c for c in cases if c.get("config") == "tiny" and c["kind"] in ("prefill", "decode")]
    assert {c["impl"] for c in tiny} >= {"eager", "fused", "collapsed", "reference"}
    assert {(c["kind"], c["batch"]) for c in tiny} == {("prefill", 1), ("prefill", 8), ("decode", 1), ("decode", 8)}
    assert all(P.skip_reason(c, LIMITS, 1e9) is None and c["runs"] == 5 for c in tiny)
    assert {c["seq"] for c in cases if c.get("config") == "paper-110m" and c["kind"] == "prefill"} == set(P.PREFILL_SEQS)


def test_plan_quick_and_unknown_kinds():
    cases = P.plan_cases(["tiny"], ["prefill", "decode"], quick=True, runs=2)
    assert all(c["runs"] == 2 for c in cases if c["kind"] != "accuracy")
    assert max(c.get("seq", 0) + c.get("new_tokens", 0) for c in cases) <= PLDRConfig.from_name("tiny").max_seq_len
    with pytest.raises(UsageError, match="unknown case kinds"):
        P.plan_cases(["tiny"], ["prefil"])
    with pytest.raises(UsageError):
        P.config_of("no-such-preset")


def test_skip_reasons():
    long = {"kind": "decode", "config": "tiny", "impl": "fused", "batch": 1, "seq": 60, "new_tokens": 8, "mode": "kv"}
    assert "exceed the config's max_seq_len 64" in P.skip_reason(long, LIMITS, 20.0)
    assert P.skip_reason({**long, "seq": 8}, LIMITS, 20.0) is None
    ref = {"kind": "prefill", "config": "paper-110m", "impl": "reference", "batch": 8, "seq": 1024, "runs": 5, "warmup": 1}
    assert "reference estimated" in P.skip_reason(ref, LIMITS, 20.0)
    assert P.skip_reason(ref, LIMITS, 1e9) is None


def test_groups_hold_the_cases_of_each_ratio():
    cases = P.plan_cases(["small", "paper-110m"], P.CASE_KINDS)
    groups: dict[str, list[str]] = {}
    for c in cases:
        groups.setdefault(c["group"], []).append(c["id"])
    # every case of a ratio target shares its partner's group
    assert {"small/decode/kv/fused+compile/b1s128n64", "small/decode/kv/fused+compile/b8s128n64",
            "small/decode/kv/fused+compile@bfloat16/b1s128n64", "small/decode/kv/eager/b1s128n64",
            "small/decode/kv/reference/b1s128n64"} <= set(groups["small/decode/kv"])
    assert set(groups["paper-110m/prefill/b8s1024"]) == {
        "paper-110m/prefill/reference/b8s1024/all", "paper-110m/prefill/eager/b8s1024/all",
        "paper-110m/prefill/fused/b8s1024/last", "paper-110m/prefill/fused@bfloat16/b8s1024/last"}
    assert set(groups["audit"]) == {"audit/torch", "audit/reference"}
    # the machine limits, the accuracy and the conformance cases run alone
    for alone in ("limits/start", "limits/end", "accuracy/golden@bfloat16", "conformance/quick"):
        assert groups[alone] == [alone]
    # another mode, config or shape is another group
    assert "small/decode/kv/fused/b1s128n64" not in groups["small/decode/kvg"]
    assert not any(i.startswith("small/") for i in groups["paper-110m/prefill/b1s128"])


def test_every_decoding_group_holds_its_bandwidth_probe():
    """One read-bandwidth probe per (config, decoding mode), in the group of that mode's cases and
    ahead of them (it sets up first); none without decoding cases."""
    cases = P.plan_cases(["small", "paper-110m"], ["prefill", "decode"])
    probes = [c for c in cases if c["kind"] == "bandwidth"]
    assert {(c["config"], c["mode"]) for c in probes} == {(cfg, m) for cfg in ("small", "paper-110m") for m in P.DECODE_MODES}
    for p in probes:
        group = [c for c in cases if c["group"] == p["group"]]
        assert group[0] is p and all(c["kind"] == "decode" for c in group[1:]) and len(group) > 1
        assert p["id"] == f"{p['config']}/decode/{p['mode']}/read-bandwidth" and p["buffer_bytes"] == P.probe_bytes(p["config"], p["mode"])
    assert not [c for c in P.plan_cases(["small"], ["prefill", "reference"]) if c["kind"] == "bandwidth"]
