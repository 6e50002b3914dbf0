"""Synthetic case results for the bench's planning / reporting tests (no case is timed)."""

from __future__ import annotations

import argparse

from plga.bench import add_bench_arguments

LIMITS = {
    "peak_gflops": 100.0, "peak_gflops_float32": 100.0, "bandwidth_gbps": 20.0, "numpy_float64_matmul_gflops": 40.0,
    "matmul_n": 2048, "matmul_float32": {"gflops_best": 100.0, "gflops_median": 95.0},
    "matmul_bfloat16": {"gflops_best": 400.0, "gflops_median": 380.0},
    "read": {"gbps_best": 20.0}, "copy": {"gbps_best": 15.0},
    "gemv_linear_layout": {"gbps_best": 8.0}, "gemv_transposed_layout": {"gbps_best": 16.0},
    "gemv_packed_layout": {"gbps_best": 24.0, "parts": 2},
}


def parse(argv: list[str]) -> argparse.Namespace:
    return add_bench_arguments(argparse.ArgumentParser()).parse_args(argv)


def raw(spec, times, **extra):
    return {"spec": spec, "status": "ok", "times_s": times, "peak_rss_bytes": 1000, "peak_rss_source": "VmHWM", **extra}


def per_case(run):
    """A stand-in for :func:`plga.bench.interleave.run_group` from a per-case fake ``run(spec, timeout_s, threads)``."""

    def group(specs, timeout_s, threads, done=None, step=None):
        results = [run(spec, timeout_s, threads) for spec in specs]
        for r in results:
            if done:
                done(r)
        return results

    return group


def fake_run(spec, timeout_s, threads):
    """Made-up results: eager 3× slower than fused, collapsed 1.2× faster, bf16 2× faster, the
    compiled decoding step 1.25× faster than the plain bf16 step after a 2 s compile."""
    if spec["kind"] == "limits":
        return {"spec": spec, "status": "ok", "limits": LIMITS}
    if spec["kind"] == "command":  # the torch audit 1.25× faster than the reference one
        return {"spec": spec, "status": "ok", "times_s": [0.008 if spec.get("name") == "audit/torch" else 0.01]}
    if spec["kind"] == "bandwidth":  # the in-turn probe reads 2× the limits' bandwidth, its GEMV the faster reader
        gemv = [2**29 / 40e9 * (1 + 0.01 * i) for i in range(spec["runs"])]
        return {"spec": spec, "status": "ok", "times_s": gemv, "bytes": 2**29,
                "reader_times_s": {"sum": [1.5 * t for t in gemv], "native GEMV": gemv}}
    if spec["kind"] == "accuracy":
        return {"spec": spec, "status": "ok", "times_s": [1.0], "logits_max_abs_error": 0.5, "logits_error_bound": 2.0,
                "logits_error_ratio": 0.25, "greedy_agreement": 1.0, "greedy_note": "identical"}
    base = 0.01 * spec.get("batch", 1) * spec.get("seq", 1) / 32
    t = base * {"eager": 3.0, "fused": 1.0, "collapsed": 1 / 1.2, "reference": 10.0}[spec["impl"]]
    if spec.get("dtype") == "bfloat16":
        t /= 2
    extra = {}
    if spec["kind"] == "decode":
        t *= 4
        pre = t / 4
        if spec.get("capture"):
            t = pre + (t - pre) / 1.25
            extra["compile_s"] = 2.0
        extra |= {"tokens_digest": "same", "prefill_times_s": [pre] * 3}
        if spec.get("overhead"):
            extra["overhead_pairs"] = [{"generate_s": t, "prefill_s": pre, "generate_compute_s": 0.97 * t, "prefill_compute_s": pre}]
    peak = 5000 if spec["impl"] == "eager" else 1000
    return raw(spec, [t * (1 + 0.01 * i) for i in range(spec["runs"])], peak_rss_bytes=peak, **extra)
