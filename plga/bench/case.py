"""One bench case in its own process: ``python -m plga.bench.case [--gated] --json '{...}'``.

The process builds the seeded weights (:func:`plga.reference.checkpoint.random_params`, the
same for every case of a config), runs ``warmup`` untimed and ``runs`` timed repetitions of
the case's workload and prints one line ``PLGA_BENCH_RESULT {json}`` on stdout. Running each
case in a fresh process makes its peak resident memory its own: the kernel's high-water mark
(``VmHWM``) is reset after the model is built (``/proc/self/clear_refs``), so the peak
covers the timed runs (weights included), not the set-up.

``--gated``: the runner interleaves this case with others (:mod:`.interleave`); the process
waits for its permission (:class:`Gate`) before the set-up, before each timed run and before
the work after the timed runs (prompt-pass timing, the overhead profile).

Case keys: ``kind`` (limits | prefill | decode | bandwidth | accuracy | command), ``config``, ``impl`` (reference |
eager | fused | collapsed), ``batch``, ``seq`` (prefill length or prompt length), ``logits``
(all | last, prefill), ``mode`` (nocache | kv | kvg | collapsed, decode), ``new_tokens``,
``runs``, ``warmup``, ``warmup_shape`` (full | reduced: warm up on sequence ≤ 128 / 2 new
tokens, for long cases), ``threads``, ``device``, ``dtype``, ``seed``, ``overhead`` (profile the
decoding loop's own overhead), ``capture`` ("compile": ``PLDRModel.compile_decode``, captured
steps; the first warm-up call timed as the compile, on an empty Inductor cache),
``cached_compile`` (default true: a captured case, after its timed runs, starts itself again in
a fresh process on the cache it filled, with ``compile_probe``, and reports that process's
compile time too: what every later process of a user pays), ``argv`` (command: the command
line to time), ``buffer_bytes`` (bandwidth: the probe's buffer).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import math
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..allocator import keep_freed_blocks
from .protocol import MARKER, READY

#: Profiler op names counted as the model's arithmetic; everything else in a decoding step
#: (argmax sampling, cache copies, allocation, Python between ops) is the loop's overhead.
COMPUTE_OP_MARKERS = (
    "mm", "linear", "scaled_dot_product", "layer_norm", "softmax", "silu", "sigmoid", "mul", "add", "sub",
    "div", "pow", "stack", "embedding", "index_select", "sum", "exp",
)
#: The profiler event of a compiled graph (a captured step). Its self time is the graph's
#: wrapper — input size checks, buffer allocation, the calls into its kernels — and, where the
#: kernels carry no events of their own (:data:`GENERATED_KERNEL`), the generated kernels too.
COMPILED_GRAPH_MARKER = "## Call CompiledFxGraph"
#: The event of one generated C++ kernel of a compiled graph: Inductor names it
#: ``graph_<id>_cpp_fused_…`` where the graph was compiled with kernel profiling, as the captured
#: step is (:func:`plga.kernels.capture.compiled_step`). Where a profile holds such events they
#: are the graph's arithmetic and the graph's own self time is overhead (on the bench machine the
#: wrapper took 75–90 µs of a 1.5 ms ``small`` step with its kernels replaced by no-ops); where
#: it holds none (a graph compiled elsewhere, without them), the graph's self time counts as
#: arithmetic, wrapper included.
GENERATED_KERNEL = re.compile(r"(graph_\d+_)?cpp_fused")
#: plga's own operators (the native few-row products, ``plga::rows_linear``): model arithmetic,
#: inside a captured step or not (an event's self time excludes the ops below it, so nothing is
#: counted twice).
NATIVE_OP_PREFIX = "plga::"
#: oneDNN's linear op (``torch.ops.mkldnn._linear_pointwise``, the kernels' GEMM on the CPU):
#: model arithmetic, registered outside the ``aten`` namespace.
ONEDNN_OP_PREFIX = "mkldnn::"
OVERHEAD_OPS = ("argmax", "copy_", "cat", "empty", "fill_", "zero_", "to", "_to_copy", "clone")


# --- memory ---------------------------------------------------------------------------------


def _proc_status(field: str) -> int | None:
    """A ``/proc/self/status`` size field (VmHWM, VmRSS) in bytes, or None off Linux."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Reset the kernel's resident high-water mark (Linux ≥ 4.0); False when not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> tuple[int, str]:
    """(peak resident bytes, source): VmHWM when readable, else ru_maxrss (KiB on Linux)."""
    hwm = _proc_status("VmHWM")
    if hwm is not None:
        return hwm, "VmHWM"
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale, "ru_maxrss"


# --- helpers --------------------------------------------------------------------------------


def _digest(tokens: Any) -> str:
    import numpy as np

    arr = np.ascontiguousarray(np.asarray(tokens.cpu() if hasattr(tokens, "cpu") else tokens, dtype=np.int64))
    return hashlib.sha1(arr.tobytes()).hexdigest()[:12]


def _sync(device: str) -> Callable[[], None]:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return lambda: None


#: A timed run repeats a fast workload until it lasts this long and reports the time per call
#: (a sub-millisecond forward timed once is mostly timer and scheduler noise).
MIN_RUN_S = 0.05

#: A run that starts after waiting at the gate first calls its workload, untimed, for this long.
#: The waiting process's threads went to sleep and the others evicted its caches: on the bench
#: machine the first forward after the wait took 1–14 ms where the next ones took 0.65 ms, and
#: the next few were still slow, so a 50 ms run of the tiny fused forward read 0.80–1.0 ms per
#: call in a group and 0.66 ms alone (one process, one case). Interleaving is how the bench
#: compares cases fairly; this cost is its artifact, not the workload's: a program calling the
#: forward in a loop never pays it.
REWARM_S = 0.02
#: ... except where one call lasts longer than this: a wake-up of ~15 ms is then under 1.5 % of
#: the run, and an untimed call before each run would add its whole length to the bench.
REWARM_LONG_CALL_S = 1.0


class Gate:
    """The runner's permission to work, for a case interleaved with others (:mod:`.interleave`).

    :meth:`wait` prints :data:`~.protocol.READY` and blocks until the runner answers with a
    line on stdin (the end of stdin — the runner is gone — ends the process); it records when
    the permission came (``granted``, ``time.monotonic()`` seconds: the clock every process
    shares). A case run alone has an open gate: :meth:`wait` returns at once."""

    def __init__(self, gated: bool = False) -> None:
        self.gated = gated
        self.granted: list[float] = []

    def wait(self) -> bool:
        """Block until the runner's permission comes; whether this process waited for it."""
        if not self.gated:
            return False
        print(READY, flush=True)
        if not sys.stdin.readline():
            raise SystemExit(1)
        self.granted.append(time.monotonic())
        return True


def _rewarm(fn: Callable[[], Any], sync: Callable[[], None], call_s: float = 0.0) -> None:
    """``fn`` called untimed for :data:`REWARM_S` (at least once), after a wait at the gate;
    nothing where one call (``call_s``) lasts longer than :data:`REWARM_LONG_CALL_S`."""
    if call_s > REWARM_LONG_CALL_S:
        return
    t0 = time.perf_counter()
    while True:
        fn()
        sync()
        if time.perf_counter() - t0 >= REWARM_S:
            return


OPEN = Gate()


def _time(
    fn: Callable[[], Any], runs: int, warmup: int, device: str, min_run_s: float = MIN_RUN_S, gate: Gate = OPEN
) -> tuple[list[float], Any]:
    """Per-call seconds of ``runs`` timed runs after ``warmup`` calls; each run repeats ``fn``
    enough times to last ``min_run_s`` (measured on one call; 0: one call per run) and starts
    when ``gate`` opens (re-warmed after a wait: :func:`_rewarm`)."""
    sync = _sync(device)
    out = None
    for _ in range(warmup):
        out = fn()
    sync()
    reps, call_s = 1, 0.0
    if min_run_s > 0 and runs:
        t0 = time.perf_counter()
        out = fn()
        sync()
        call_s = time.perf_counter() - t0
        reps = max(1, min(1000, math.ceil(min_run_s / max(call_s, 1e-9))))
    times = []
    for _ in range(runs):
        if gate.wait():
            _rewarm(fn, sync, call_s)
        t0 = time.perf_counter()
        for _ in range(reps):
            out = fn()
        sync()
        times.append((time.perf_counter() - t0) / reps)
    return times, out


def _time_readers(
    readers: dict[str, Callable[[], Any]], runs: int, warmup: int, device: str, gate: Gate = OPEN
) -> dict[str, list[float]]:
    """Seconds of ``runs`` calls of every reader, one call of each per timed run (a run starts
    when ``gate`` opens, each reader re-warmed after a wait: :func:`_rewarm`), after ``warmup``
    untimed calls of each."""
    sync = _sync(device)
    for fn in readers.values():
        for _ in range(warmup):
            fn()
    sync()
    times: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(runs):
        woke = gate.wait()
        for name, fn in readers.items():
            if woke:
                _rewarm(fn, sync)
            t0 = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - t0)
    return times


def _tokens(vocab: int, batch: int, seq: int, seed: int) -> Any:
    """Seeded ids in [1, vocab): no padding (id 0), the same for every impl of a workload."""
    import numpy as np

    rng = np.random.default_rng([seed, batch, seq])
    return rng.integers(1, vocab, size=(batch, seq), dtype=np.int64)


def _compute_seconds(prof: Any, device: str) -> float:
    """Σ self time of the model's arithmetic ops in a profile (CPU ops, or device kernels on CUDA).
    A compiled graph's own self time counts only where its kernels have no events
    (:data:`GENERATED_KERNEL`)."""
    events = list(prof.key_averages())
    kernels_seen = any(GENERATED_KERNEL.match(ev.key) for ev in events)
    total_us = 0.0
    for ev in events:
        if device.startswith("cuda"):
            total_us += float(getattr(ev, "self_device_time_total", getattr(ev, "self_cuda_time_total", 0.0)))
            continue
        graph = ev.key.startswith(COMPILED_GRAPH_MARKER)
        if (graph and not kernels_seen) or GENERATED_KERNEL.match(ev.key) or ev.key.startswith((NATIVE_OP_PREFIX, ONEDNN_OP_PREFIX)):
            total_us += float(ev.self_cpu_time_total)  # generated, native or oneDNN kernels
            continue
        if graph:  # the graph's wrapper: overhead
            continue
        name = ev.key.removeprefix("aten::")
        if not ev.key.startswith("aten::") or name in OVERHEAD_OPS:
            continue
        if any(m in name for m in COMPUTE_OP_MARKERS):
            total_us += float(ev.self_cpu_time_total)
    return total_us * 1e-6


def _profile_compute(fn: Callable[[], Any], device: str) -> float:
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=acts) as prof:
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    return _compute_seconds(prof, device)


#: Profiled runs of the loop-overhead split, each beside unprofiled runs of the same workload.
#: The host's speed drifts by tens of percent between minutes, so the compute of one profiled
#: run divided by the step time of runs taken earlier measured the drift as much as the loop;
#: a run on each side of the profiled one cancels a steady drift, and the median of several
#: pairs narrows the rest (three pairs of one run before each profile spread from −5 % to
#: +31 % over the captured rows of one bench run, where the loop costs about 3 %).
OVERHEAD_PAIRS = 5


def _overhead_pairs(generate: Callable[[], Any], prefill: Callable[[], Any], device: str) -> list[dict[str, float]]:
    """:data:`OVERHEAD_PAIRS` times, for ``generate`` and then ``prefill``: the compute seconds of a
    profiled call (:func:`_profile_compute`) and, beside it, the unprofiled wall time — the mean
    of one timed run just before the profiled call and one just after it."""
    pairs = []
    for _ in range(OVERHEAD_PAIRS):
        pair = {}
        for name, fn in (("generate", generate), ("prefill", prefill)):
            (before,), _ = _time(fn, 1, 0, device)
            compute = _profile_compute(fn, device)
            (after,), _ = _time(fn, 1, 0, device)
            pair[f"{name}_s"], pair[f"{name}_compute_s"] = (before + after) / 2, compute
        pairs.append(pair)
    return pairs


# --- the cases ------------------------------------------------------------------------------


def _weights(config: Any, name: str, seed: int, cache_dir: str | None) -> dict[str, Any]:
    """``random_params(config, seed)``, kept as an uncompressed .npz in ``cache_dir`` so the
    cases of one run load the same weights instead of regenerating them (seconds at 110M)."""
    import numpy as np

    from ..reference.checkpoint import random_params

    if not cache_dir:
        return random_params(config, seed)
    path = Path(cache_dir) / f"{name}-seed{seed}.npz"
    if path.exists():
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    params = random_params(config, seed)
    from ..atomic import atomic_path

    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **params)
    return params


def _build(spec: dict[str, Any]) -> dict[str, Any]:
    """Weights, models and inputs of a case (everything set up before timing)."""
    import numpy as np
    import torch

    from ..kernels import PLDRModel
    from ..reference.config import PLDRConfig

    config = PLDRConfig.from_name(spec["config"])
    params = _weights(config, spec["config"], spec.get("seed", 0), spec.get("weights_cache"))
    device, dtype = spec.get("device", "cpu"), getattr(torch, spec.get("dtype", "float32"))
    impl = spec["impl"]
    env: dict[str, Any] = {"config": config}
    needs_g = impl == "collapsed" or spec.get("mode") == "collapsed"
    model = PLDRModel.from_reference(params, config, dtype=dtype, device=device).eval()
    g_star = None
    if needs_g:
        # G* = mean G_LM over a fixed calibration batch: the same for every case of a config
        calib = torch.as_tensor(_tokens(config.input_vocab_size, 4, 32, 12345), device=device)
        with torch.inference_mode():
            collapsed = model.collapse_from(calib).eval()
        g_star = collapsed.decoder.collapsed_G.detach().float().cpu().numpy()
        env["collapse_fluctuation_max"] = collapsed.collapse_report.max if collapsed.collapse_report else None
        if impl == "collapsed" or (impl != "reference" and spec.get("mode") == "collapsed"):
            model = collapsed
        else:
            del collapsed
    if spec.get("capture") == "compile":
        model.compile_decode = True
    if impl == "reference":
        from ..reference import decoder

        env["params64"] = decoder.to_backend(params)
        env["constant_g"] = None if g_star is None else [g.astype(np.float64) for g in g_star]
        del model
    else:
        env["model"] = model
    del params
    gc.collect()
    return env


def _prefill(spec: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    import torch

    c, impl, device = env["config"], spec["impl"], spec.get("device", "cpu")
    b, s = spec["batch"], spec["seq"]
    ids = _tokens(c.input_vocab_size, b, s, spec.get("seed", 0))
    logits = spec.get("logits", "all" if impl in ("reference", "eager") else "last")
    if impl == "reference":
        from ..reference import decoder

        params64 = env["params64"]
        fn = lambda: decoder.forward(params64, c, ids).logits  # noqa: E731  (always all logits)
        logits = "all"
    else:
        model = env["model"]
        tokens = torch.as_tensor(ids, device=device)
        backend = "eager" if impl == "eager" else "sdpa"

        def fn() -> Any:
            with torch.inference_mode():
                return model(tokens, logits=logits, backend=backend).logits

    return {"fn": fn, "logits": logits, "digest_of": None}


def eager_generate(model: Any, prompt: Any, n: int, mode: str) -> Any:
    """Greedy decoding as the published algorithm does it, on the kernels' eager backend: every
    pass computes the logits of all its positions (``logits="all"``) through the ``nn.Linear``
    modules and materialized scores, and the loop takes the last row's argmax. Cached modes use
    the model's static cache (``new_cache`` / ``step``); the published code grows its cache by
    ``torch.cat`` each step instead (a copy of every layer's K, V per token), which this
    baseline does not reproduce. → tokens [B, S + n]."""
    import torch

    with torch.inference_mode():
        if mode == "nocache":
            tokens = prompt
            for _ in range(n):
                logits = model(tokens, logits="all", backend="eager").logits[:, -1]  # [B, V]
                tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
            return tokens
        b, s = prompt.shape
        cache = model.new_cache(b, s + n - 1 if n > 1 else s)
        logits = model(prompt, logits="all", backend="eager", cache=cache).logits[:, -1]  # [B, V]
        out = [prompt]
        for i in range(n):
            out.append(logits.argmax(-1, keepdim=True))  # [B, 1]
            if i + 1 < n:
                logits = model.step(out[-1], cache, mode, logits="all", backend="eager")[:, -1]
        return torch.cat(out, dim=1)


def _decode(spec: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    import torch

    c, impl, device = env["config"], spec["impl"], spec.get("device", "cpu")
    b, s, n, mode = spec["batch"], spec["seq"], spec["new_tokens"], spec["mode"]
    ids = _tokens(c.input_vocab_size, b, s, spec.get("seed", 0))
    prefill_fn: Callable[[], Any] | None = None
    if impl == "reference":
        from ..reference import decoder

        params64, cg = env["params64"], env["constant_g"]
        fn = lambda: decoder.generate(params64, c, ids, n, mode, constant_g=cg).tokens  # noqa: E731
        if mode != "nocache":
            prefill_fn = lambda: decoder.forward(params64, c, ids, constant_g=cg).logits  # noqa: E731
    else:
        model = env["model"]
        prompt = torch.as_tensor(ids, device=device)
        if impl == "eager":
            fn = lambda: eager_generate(model, prompt, n, mode)  # noqa: E731
            if mode != "nocache":

                def prefill_fn() -> Any:
                    with torch.inference_mode():
                        cache = model.new_cache(b, s + n - 1 if n > 1 else s)
                        return model(prompt, logits="all", backend="eager", cache=cache).logits

        else:
            fn = lambda: model.generate(prompt, n, mode).tokens  # noqa: E731
            if mode != "nocache":

                def prefill_fn() -> Any:
                    with torch.inference_mode():
                        cache = model.new_cache(b, s + n - 1 if n > 1 else s)
                        return model(prompt, logits="last", cache=cache).logits

    return {"fn": fn, "prefill_fn": prefill_fn}


def golden_accuracy(dtype: Any) -> dict[str, Any]:
    """The fused path in ``dtype`` on the shipped golden vectors: its logits against float64 under
    the conformance tolerance policy (baselines: the suite's eager decoders in ``dtype``, every
    operation order, and with the float32 chain), and its greedy tokens against float32's on the
    golden prompt; a divergence counts as explained when float32's top-2 logit margin at that
    step is at most twice the measured logits error (each of two logits may move by the error)."""
    import numpy as np
    import torch

    from ..conformance import eager as eg
    from ..conformance.tolerance import compare, k_for
    from ..datafiles import GOLDEN_ARRAYS, GOLDEN_CHECKPOINT, data_file
    from ..errors import DataFileError
    from ..kernels import PLDRModel
    from ..reference.checkpoint import load_checkpoint

    ckpt, arrays = data_file(GOLDEN_CHECKPOINT), data_file(GOLDEN_ARRAYS)
    if ckpt is None or arrays is None:
        raise DataFileError("the golden vectors are absent (tests/data/golden, or $PLGA_SHARED_DATA)")
    params, config = load_checkpoint(ckpt, max_seq_len=64)
    golden = dict(np.load(arrays))
    tokens = torch.as_tensor(golden["tokens"])  # [3, 12]
    model = PLDRModel.from_reference(params, config, dtype=dtype).eval()
    with torch.inference_mode():
        logits = model(tokens).logits  # [3, 12, V] on the packed path
    state = {k: torch.as_tensor(np.asarray(v)) for k, v in params.items()}
    decoders = [eg.EagerDecoder(state, config, dtype=dtype, order=o) for o in eg.ORDERS]
    decoders.append(eg.EagerDecoder(state, config, dtype=dtype, wide_chain=True))
    cmp = compare(logits, [d.forward(tokens)[0] for d in decoders], golden["logits"], k=k_for("forward_logits"))
    bound = cmp.k * cmp.baseline_error + cmp.floor
    prompt = torch.as_tensor(golden["gen.prompt"])  # [1, 8]
    n = golden["gen.kv.tokens"].shape[0] - prompt.shape[1]
    ref = PLDRModel.from_reference(params, config, dtype=torch.float32).eval().generate(prompt, n, "kv", return_step_logits=True)
    low = model.generate(prompt, n, "kv").tokens
    differ = (ref.tokens[0] != low[0]).nonzero()
    if not len(differ):
        agreement, note = 1.0, f"{n} greedy tokens identical to float32"
    else:
        i = int(differ[0]) - prompt.shape[1]
        top2 = ref.step_logits[0, i].float().topk(2).values  # type: ignore[index]
        margin = float(top2[0] - top2[1])
        agreement = 1.0 if margin <= 2 * cmp.kernel_error else 0.0
        note = (f"diverges from float32 at new token {i}: float32 top-2 margin {margin:.3g} "
                f"{'≤' if agreement else '>'} 2 × logits error {cmp.kernel_error:.3g}")
    return {"logits_max_abs_error": cmp.kernel_error, "logits_error_bound": bound,
            "logits_error_ratio": cmp.kernel_error / bound, "greedy_agreement": agreement, "greedy_note": note}


def run_case(spec: dict[str, Any], gate: Gate = OPEN) -> dict[str, Any]:
    """Run one case and return its raw measurements (no derived ratios: the runner adds those).
    Each timed run, and the work after them, starts when ``gate`` opens."""
    t_start = time.perf_counter()
    if spec.get("capture") and not spec.get("compile_probe"):  # a cold compile: Inductor's on-disk cache starts empty
        import atexit
        import shutil
        import tempfile

        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache = tempfile.mkdtemp(prefix="plga-bench-inductor-")
        atexit.register(shutil.rmtree, cache, True)
    threads = int(spec.get("threads", 2))
    import torch

    torch.set_num_threads(threads)
    device = spec.get("device", "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("--device cuda but torch.cuda.is_available() is False")
    kind = spec["kind"]
    runs, warmup = int(spec.get("runs", 5)), int(spec.get("warmup", 1))
    out: dict[str, Any] = {"spec": spec, "pid": os.getpid(), "threads": torch.get_num_threads()}
    if kind == "limits":
        from .machine import measure_limits

        out["limits"] = measure_limits(device=device, dtype=spec.get("dtype", "float32"), runs=max(runs, 5))
        out["wall_s"] = time.perf_counter() - t_start
        return out
    if kind == "bandwidth":  # the read-bandwidth probe, its runs in turn with its decoding group's
        from .machine import read_probes

        out["bytes"], readers = read_probes(device, int(spec["buffer_bytes"]))
        out["reader_times_s"] = _time_readers(readers, runs, warmup, device, gate)
        out["times_s"] = [min(ts) for ts in zip(*out["reader_times_s"].values(), strict=True)]  # the faster reader of each round
        out["wall_s"] = time.perf_counter() - t_start
        return out
    if kind == "accuracy":
        out.update(golden_accuracy(getattr(torch, spec["dtype"])))
        out["times_s"] = [time.perf_counter() - t_start]
        out["wall_s"] = out["times_s"][0]
        return out
    if kind == "command":
        times = []
        for _ in range(runs):
            gate.wait()
            t0 = time.perf_counter()
            proc = subprocess.run(spec["argv"], capture_output=True, text=True, check=False)
            times.append(time.perf_counter() - t0)
            if proc.returncode != 0:
                raise RuntimeError(f"{spec['argv']} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
        out["times_s"] = times
        out["wall_s"] = time.perf_counter() - t_start
        return out
    env = _build(spec)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    out["rss_before_runs_bytes"] = _proc_status("VmRSS")
    out["rss_peak_reset"] = reset_peak_rss()
    work = _prefill(spec, env) if kind == "prefill" else _decode(spec, env)
    if "logits" in work:
        out["logits"] = work["logits"]
    if spec.get("warmup_shape") == "reduced" and warmup:
        # a long case: warm up on a shorter workload of the same kind (same kernels, thread
        # pool and code paths; the timed runs all pay the same large-buffer page faults)
        small = dict(spec, seq=min(spec["seq"], 128)) if kind == "prefill" else dict(spec, new_tokens=min(spec["new_tokens"], 2))
        warm = _prefill(small, env) if kind == "prefill" else _decode(small, env)
    else:
        warm = work
    if spec.get("capture") and warmup:
        # the first call compiles (a fresh Inductor cache: a cold compile; a probe: the cache
        # its case filled); compile time = first call − second call of the same workload
        (first, again), _ = _time(warm["fn"], 2, 0, device, min_run_s=0)
        out["compile_s"] = max(0.0, first - again)
        if device.startswith("cuda"):
            from ..kernels.capture import cuda_graph_skips

            out["cuda_graph_skips"] = cuda_graph_skips()
        warmup -= 1
        if spec.get("compile_probe"):
            out["times_s"] = [first]
            out["wall_s"] = time.perf_counter() - t_start
            return out
    if warm is not work and warmup:
        _time(warm["fn"], 0, warmup, device)
        warmup = 0
    times, result = _time(work["fn"], runs, warmup, device, gate=gate)
    out["times_s"] = times
    out["peak_rss_bytes"], out["peak_rss_source"] = peak_rss_bytes()
    if device.startswith("cuda"):
        out["peak_device_bytes"] = int(torch.cuda.max_memory_allocated())
    woke = gate.wait()  # the prompt-pass timing and the overhead profile: one case at a time too
    if kind == "decode":
        out["tokens_digest"] = _digest(result)
        prefill_fn = work.get("prefill_fn")
        if prefill_fn is not None and spec["new_tokens"] > 1:
            if woke:
                _rewarm(prefill_fn, _sync(device))
            out["prefill_times_s"], _ = _time(prefill_fn, min(runs, 3), 1, device)
        if spec.get("overhead") and spec["impl"] != "reference" and prefill_fn is not None:
            with contextlib.suppress(Exception):
                out["overhead_pairs"] = _overhead_pairs(work["fn"], prefill_fn, device)
    if "collapse_fluctuation_max" in env:
        out["collapse_fluctuation_max"] = env["collapse_fluctuation_max"]
    if spec.get("cached_compile", True) and "compile_s" in out:
        out["compile_cached_s"], why = _cached_compile_seconds(spec)
        if why:
            out["compile_cached_error"] = why
    out["wall_s"] = time.perf_counter() - t_start
    return out


def _cached_compile_seconds(spec: dict[str, Any]) -> tuple[float | None, str]:
    """The compile time of this captured case in a fresh process on the Inductor cache this
    process filled (``TORCHINDUCTOR_CACHE_DIR``, inherited): imports, Dynamo's tracing and the
    cache look-ups a user's later runs pay. (None, why) when the probe fails: the case's own
    measurements stand."""
    probe = dict(spec, compile_probe=True, cached_compile=False, runs=0, warmup=1, overhead=False)
    cmd = [sys.executable, "-m", "plga.bench.case", "--json", json.dumps(probe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARKER)]
    result = json.loads(lines[-1][len(MARKER):]) if lines else {"reason": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    if result.get("status") != "ok" or "compile_s" not in result:
        return None, f"the cached-compile probe failed: {result.get('reason', 'no compile time')}"
    return float(result["compile_s"]), ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m plga.bench.case", description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="the case as a JSON object")
    parser.add_argument("--gated", action="store_true", help="wait for the runner's permission (a line on stdin) at each step")
    args = parser.parse_args(argv)
    spec = json.loads(args.json)
    keep_freed_blocks()  # as the plga console script does
    gate = Gate(args.gated)
    try:
        gate.wait()  # the set-up (imports, weights, warm-up, compilation)
        result = run_case(spec, gate)
        result["status"] = "ok"
    except Exception as exc:  # reported in the row, the run goes on
        if os.environ.get("PLGA_DEBUG"):
            raise
        result = {"spec": spec, "status": "error", "reason": f"{type(exc).__name__}: {' '.join(str(exc).split())}"}
    if args.gated:
        result["granted_s"] = gate.granted
    print(MARKER + json.dumps(result), flush=True)
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
