"""Planning a ``plga bench`` run: which cases, in which order, and what each should cost.

A case is a plain JSON object (it travels to its own process, :mod:`.case`) with the keys
``kind`` (limits | prefill | decode | bandwidth | accuracy | command), ``config``, ``impl``, ``dtype``, ``batch``,
``seq``, ``logits``, ``mode``, ``new_tokens``, ``capture`` and the run settings. Implementations:

- ``reference``: the float64 NumPy reference (:mod:`plga.reference.decoder`);
- ``eager``: the published algorithm on the kernels' eager backend
  (``PLDRModel(..., backend="eager")``: materialized scores, the ``nn.Linear`` modules, all logits);
- ``fused``: the kernels' fused path (SDPA on q' = q G, packed weights, last-position logits);
- ``collapsed``: the fused path on a collapsed model (constant per-layer G, no metric learner).

Cases of one group (:func:`group_of`) take their timed runs in turn (:mod:`.interleave`). Each
decoding group also holds a ``bandwidth`` case, a read-bandwidth probe over a buffer the size of
the group's float32 weights (:func:`probe_bytes`) timed in turn with the group's runs: the bound
its rows' bandwidth fractions divide by.
Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import UsageError
from . import flops as FL

PREFILL_BATCHES = (1, 8)
PREFILL_SEQS = (128, 512, 1024)
DECODE_PROMPT, DECODE_NEW = 128, 64
DECODE_MODES = ("nocache", "kv", "kvg", "collapsed")
CACHED_MODES = ("kv", "kvg", "collapsed")
CASE_KINDS = ("prefill", "decode", "reference", "conformance", "audit")
#: The low-precision dtype whose fused rows every CPU run adds beside the float32 ones.
LOW_DTYPE = "bfloat16"
QUICK = {"configs": ("tiny", "small"), "batches": (1, 8), "seqs": (32, 64), "prompt": 32, "new": 8, "runs": 2}
#: The presets a full run times: ``tiny`` too, since the fused path must not be slower than
#: eager at tiny shapes either (there the fixed costs of a call weigh most).
DEFAULT_CONFIGS = ("tiny", "small", "paper-110m")
MIN_RUNS = 5
#: A case whose single run is estimated above this many seconds warms up on a reduced shape.
LONG_RUN_S = 8.0


def config_of(name: str) -> Any:
    """The :class:`~plga.reference.config.PLDRConfig` preset ``name`` (an unknown name is a usage error)."""
    from ..reference.config import PLDRConfig

    try:
        return PLDRConfig.from_name(name)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def shapes(config_name: str, quick: bool) -> tuple[tuple[int, ...], tuple[int, ...], int, int]:
    """(prefill batches, prefill lengths, decoding prompt, new tokens) of a preset in a run: the
    full shapes, or :data:`QUICK`'s for a quick run and for a preset whose context cannot hold the
    full shapes (``tiny``, 64 positions: its cases would all be skipped)."""
    full = config_of(config_name).max_seq_len >= max(*PREFILL_SEQS, DECODE_PROMPT + DECODE_NEW)
    if quick or not full:
        return QUICK["batches"], QUICK["seqs"], QUICK["prompt"], QUICK["new"]
    return PREFILL_BATCHES, PREFILL_SEQS, DECODE_PROMPT, DECODE_NEW


def probe_bytes(config_name: str, mode: str) -> int:
    """The buffer a decoding group's bandwidth probe reads: the float32 weight bytes of its
    batch-1 step (:func:`~plga.bench.flops.decode_weight_bytes`), so the probe's reads sit in
    the same level of the memory hierarchy as the weights'."""
    return FL.decode_weight_bytes(config_of(config_name), mode)


def case_id(spec: dict[str, Any]) -> str:
    """A readable unique id: config/kind/[mode/]impl[+capture][@dtype]/shape[/logits]."""
    if spec["kind"] == "limits":
        return f"limits/{spec.get('when', 'start')}"
    if spec["kind"] == "command":
        return spec.get("name", "conformance/quick")
    if spec["kind"] == "accuracy":
        return f"accuracy/golden@{spec['dtype']}"
    if spec["kind"] == "bandwidth":
        return f"{spec['config']}/decode/{spec['mode']}/read-bandwidth"
    impl = spec["impl"] + ("+" + spec["capture"] if spec.get("capture") else "")
    if spec.get("dtype", "float32") != "float32" and spec["impl"] != "reference":
        impl += "@" + spec["dtype"]
    shape = f"b{spec['batch']}s{spec['seq']}"
    if spec["kind"] == "decode":
        return f"{spec['config']}/decode/{spec['mode']}/{impl}/{shape}n{spec['new_tokens']}"
    return f"{spec['config']}/prefill/{impl}/{shape}/{spec.get('logits', '')}".rstrip("/")


def group_of(spec: dict[str, Any]) -> str:
    """The group whose cases take their timed runs in turn (:mod:`.interleave`): the
    implementations of one prefill shape, every case of one decoding mode in a config (both
    batches: the batch-8 ÷ batch-1 ratio is a target), the audit on both backends; any other
    case alone."""
    if spec["kind"] == "prefill":
        return f"{spec['config']}/prefill/b{spec['batch']}s{spec['seq']}"
    if spec["kind"] in ("decode", "bandwidth"):
        return f"{spec['config']}/decode/{spec['mode']}"
    if spec["kind"] == "command" and spec.get("name", "").startswith("audit/"):
        return "audit"
    return case_id(spec)


def plan_cases(
    configs: Iterable[str], kinds: Iterable[str], *, quick: bool = False, runs: int = MIN_RUNS, warmup: int = 1,
    threads: int = 2, device: str = "cpu", dtype: str = "float32", seed: int = 0, overhead: bool = True,
    low_precision: bool = True, capture: bool = True, cached_compile: bool = True,
) -> list[dict[str, Any]]:
    """The case specs of one run, in execution order (machine limits first and last).

    ``low_precision`` adds, for a float32 run, fused rows in :data:`LOW_DTYPE` beside the float32
    ones (prefill at the largest shape, batch-1 cached decoding) and the accuracy case on the
    golden vectors, so their ratios come from one run; ``capture`` adds cached decoding with
    captured steps (``PLDRModel.compile_decode``: one compiled graph per step, a CUDA graph on
    CUDA) beside every plain cached decoding row, in float32 and :data:`LOW_DTYPE`;
    ``cached_compile`` has each of them also time its compile in a fresh process on the Inductor
    cache it filled.
    """
    kinds = set(kinds)
    unknown = kinds - set(CASE_KINDS)
    if unknown:
        raise UsageError(f"unknown case kinds {sorted(unknown)}; known: {', '.join(CASE_KINDS)}")
    base = {"runs": runs, "warmup": warmup, "threads": threads, "device": device, "dtype": dtype, "seed": seed}
    low = low_precision and dtype == "float32" and LOW_DTYPE
    cap = {"capture": "compile", "cached_compile": cached_compile}
    cases: list[dict[str, Any]] = [{**base, "kind": "limits", "when": "start"}]
    ref = "reference" in kinds
    for cfg in configs:
        batches, seqs, prompt, new = shapes(cfg, quick)
        reduced = (batches, seqs, prompt, new) != (PREFILL_BATCHES, PREFILL_SEQS, DECODE_PROMPT, DECODE_NEW)
        if "prefill" in kinds or ref:
            for b in batches:
                for s in seqs:
                    pre = {**base, "kind": "prefill", "config": cfg, "batch": b, "seq": s}
                    if ref:
                        cases.append({**pre, "impl": "reference", "logits": "all"})
                    if "prefill" in kinds:
                        cases.append({**pre, "impl": "eager", "logits": "all"})
                        cases.append({**pre, "impl": "fused", "logits": "last"})
                        if low and (b, s) == (batches[-1], seqs[-1]):
                            cases.append({**pre, "impl": "fused", "logits": "last", "dtype": low})
                        if b == 1 or s == seqs[0]:
                            cases.append({**pre, "impl": "collapsed", "logits": "last"})
        if "decode" in kinds or ref:
            dec_batches = (1, 8) if (cfg == "small" or reduced) else (1,)
            for b in dec_batches:
                for mode in DECODE_MODES:
                    if b > 1 and mode == "nocache":
                        continue  # full recompute at batch 8: 8× the cost of the slowest row, no target
                    dec = {**base, "kind": "decode", "config": cfg, "batch": b, "seq": prompt, "new_tokens": new, "mode": mode}
                    if "decode" in kinds and b == dec_batches[0]:  # the group's bandwidth, timed in turn with it
                        cases.append({**base, "kind": "bandwidth", "config": cfg, "mode": mode,
                                      "buffer_bytes": probe_bytes(cfg, mode)})
                    if ref and b == 1:
                        cases.append({**dec, "impl": "reference"})
                    if "decode" not in kinds:
                        continue
                    cached_b1 = b == 1 and mode != "nocache"
                    cases.append({**dec, "impl": "eager"})
                    cases.append({**dec, "impl": "fused", "overhead": overhead and cached_b1})
                    if capture and mode != "nocache":  # captured steps (compile_decode)
                        cases.append({**dec, "impl": "fused", **cap, "overhead": overhead and cached_b1})
                    if cached_b1 and low:
                        cases.append({**dec, "impl": "fused", "dtype": low})
                    if cached_b1 and low and capture:
                        cases.append({**dec, "impl": "fused", "dtype": low, **cap})
    if low and kinds & {"prefill", "decode"}:
        cases.append({**base, "kind": "accuracy", "dtype": low, "runs": 1, "warmup": 0})
    if "conformance" in kinds:
        cases.append({**base, "kind": "command", "name": "conformance/quick", "runs": 1, "warmup": 0})
    if "audit" in kinds:  # the whole audit of the built-in model on each backend (float64, the CPU)
        for backend in ("torch", "reference"):
            cases.append({**base, "kind": "command", "name": f"audit/{backend}", "runs": 3 if not quick else 1, "warmup": 0})
    cases.append({**base, "kind": "limits", "when": "end"})
    for c in cases:
        c["id"] = case_id(c)
        c["group"] = group_of(c)
    return cases


# --- analytic numbers per case --------------------------------------------------------------


def case_flops(spec: dict[str, Any]) -> FL.FlopBreakdown:
    """Matmul FLOPs of one run of a case, as that implementation computes it."""
    c = config_of(spec["config"])
    impl = spec["impl"]
    causal = impl in ("fused", "collapsed")  # eager paths multiply the whole S×T block
    # the fused backend (fused and collapsed rows) trims its last layer wherever it returns the last logits
    if spec["kind"] == "prefill":
        op = "collapsed" if impl == "collapsed" else "full"
        logits = spec.get("logits", "all")
        return FL.forward_flops(c, spec["batch"], spec["seq"], operator=op, logits=logits, causal_pairs=causal,
                                last_row_only=causal and logits == "last")
    logits = "last" if impl == "fused" else "all"
    return FL.generate_flops(
        c, spec["batch"], spec["seq"], spec["new_tokens"], spec["mode"],
        prompt_logits=logits, step_logits=logits, causal_pairs=causal, last_row_only=impl == "fused",
    )


def estimate_seconds(spec: dict[str, Any], limits: dict[str, Any]) -> float:
    """Rough time of one run of a torch case: FLOPs at half the matmul peak, plus (cached
    decoding) the weights streamed once per step at half the read bandwidth."""
    c = config_of(spec["config"])
    t = case_flops(spec).total / (0.5 * float(limits.get("peak_gflops") or 20.0) * 1e9)
    if spec["kind"] == "decode" and spec["mode"] != "nocache":
        bw = 0.5 * float(limits.get("bandwidth_gbps") or 10.0) * 1e9
        t += (spec["new_tokens"] - 1) * FL.decode_weight_bytes(c, spec["mode"], batch=spec["batch"]) / bw
    return t


def estimate_reference_seconds(spec: dict[str, Any], limits: dict[str, Any]) -> float:
    """Rough float64 time of one reference run (deliberately pessimistic): FLOPs at a quarter
    of the NumPy float64 matmul rate, plus the float64 temporaries it streams at a quarter of
    the read bandwidth — about six passes over every [B, H, S, T] score block per layer and
    three over the [B, S, V] logits — plus (cached decoding) the float64 weights once per step."""
    c = config_of(spec["config"])
    rate = 0.25 * float(limits.get("numpy_float64_matmul_gflops") or 5.0) * 1e9
    bw = 0.25 * float(limits.get("bandwidth_gbps") or 10.0) * 1e9
    t = case_flops(spec).total / rate

    def temporaries(b: int, s: int, start: int = 0) -> float:
        return 8.0 * (6 * c.num_layers * b * c.num_heads * s * (start + s) + 3 * b * s * c.input_vocab_size)

    b, s = spec["batch"], spec["seq"]
    if spec["kind"] == "prefill":
        return t + temporaries(b, s) / bw
    n = spec["new_tokens"]
    if spec["mode"] == "nocache":
        return t + sum(temporaries(b, s + i) for i in range(n)) / bw
    t += temporaries(b, s) / bw + sum(temporaries(b, 1, s + i) for i in range(n - 1)) / bw
    return t + (n - 1) * FL.decode_weight_bytes(c, spec["mode"], bytes_per_param=8) / bw


def skip_reason(spec: dict[str, Any], limits: dict[str, Any], reference_budget_s: float) -> str | None:
    """Why a planned case is not run (past the config's context, or a float64 reference case
    over its time budget); None when it runs."""
    if spec["kind"] in ("prefill", "decode"):
        length = spec["seq"] + spec.get("new_tokens", 0)
        limit = config_of(spec["config"]).max_seq_len
        if length > limit:
            return f"{length} positions exceed the config's max_seq_len {limit}"
    if spec.get("impl") == "reference":
        est = estimate_reference_seconds(spec, limits) * (spec["runs"] + spec["warmup"])
        if est > reference_budget_s:
            return f"float64 reference estimated {est:.0f} s > --reference-budget-s {reference_budget_s:.0f}"
    return None


__all__ = [
    "CACHED_MODES",
    "CASE_KINDS",
    "DECODE_MODES",
    "DEFAULT_CONFIGS",
    "LONG_RUN_S",
    "LOW_DTYPE",
    "MIN_RUNS",
    "QUICK",
    "case_flops",
    "case_id",
    "config_of",
    "estimate_reference_seconds",
    "estimate_seconds",
    "group_of",
    "plan_cases",
    "probe_bytes",
    "shapes",
    "skip_reason",
]
