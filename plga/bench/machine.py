"""The machine's limits, measured in the bench's own run: matmul GFLOP/s and memory bandwidth.

- matmul: C = A B with A, B square ``n``×``n`` (2048 by default) in the bench dtype,
  2·n³ FLOPs per product, through ``torch.matmul`` and, on the CPU, through the kernels' own
  GEMM (:func:`plga.kernels.gemm.linear`, oneDNN); the faster one's best (min-time) run is the
  roofline peak, and torch's rate is kept beside it (MKL's float32 on AMD runs at ~40 % of it).
- bandwidth (CPU): a read-only reduction (``x.sum()``, :func:`read_probe`) over a buffer far
  larger than the last-level cache (512 MiB), bytes = buffer size; and a copy (read + write,
  2× bytes). Batch-1 decoding is a stream of weight reads, so the read bandwidth is its bound;
  the decoding rows divide by a probe timed in turn with their group's runs (a host's
  bandwidth moves by tens of percent between minutes) over a buffer the size of the group's
  float32 weights (weights that fit the last-level cache are read at its rate, and so is the
  probe), read by the sum and by the native GEMV, the faster counting (:func:`read_probes`);
  by these figures where none ran.
- diagnostics: matrix-vector products over a [32000, 896] float32 matrix (the paper-110m
  vocabulary projection) in the nn.Linear layout ([out, in], what ``F.linear`` uses) and
  in the transposed layout ([in, out], ``x @ Wᵀ`` with Wᵀ contiguous), and in the kernels'
  packed layout (:func:`plga.kernels.packed.pack_linear`: one column block per thread,
  one batched product; the decoding layout where the native kernel is missing) and, where
  it serves, the native kernel (:mod:`plga.kernels.native`; the decoding path on such a CPU),
  to show what a GEMV actually reaches against the streaming bound; the same product in
  bfloat16 through ``F.linear`` and the native kernel.
On CUDA every timed region is closed by ``torch.cuda.synchronize()``; CUDA is touched only
when ``device`` is ``"cuda"``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from .plan import LOW_DTYPE

#: The fewest bytes one call of a :func:`read_probe` reads (it repeats a smaller buffer).
PROBE_MIN_READ = 64 * 2**20
#: The ``via`` of a low-precision matmul peak timed on the kernels' widened float32 product (a
#: CPU without the dtype's arithmetic; :func:`measure_limits`).
WIDENED_VIA = "widened float32 product"
#: Elements per row of a probe buffer (its native GEMV reads it as rows of this length).
PROBE_ROW = 1024


def _sync(device: str) -> Callable[[], None]:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return lambda: None


def time_runs(fn: Callable[[], Any], runs: int, warmup: int, device: str = "cpu") -> list[float]:
    """Wall seconds of ``runs`` calls of ``fn`` after ``warmup`` untimed calls."""
    sync = _sync(device)
    for _ in range(warmup):
        fn()
    sync()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t0)
    return out


def summary(times: list[float]) -> dict[str, float]:
    """median / min / max of a list of seconds."""
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)}


def _repeated(fn: Callable[[], Any], reps: int) -> Callable[[], Any]:
    if reps == 1:
        return fn

    def run() -> Any:
        for _ in range(reps):
            out = fn()
        return out

    return run


def read_probe(device: str, nbytes: int) -> tuple[int, Any, Callable[[], Any]]:
    """(bytes read per call, buffer, fn): ``fn`` sums a float32 buffer of ``nbytes`` bytes
    (rounded up to whole :data:`PROBE_ROW`-element rows, 16 rows at a time), as often as it
    takes to read at least :data:`PROBE_MIN_READ` bytes per call, so a cache-sized buffer still
    times a read of milliseconds.

    The machine limits read a buffer far larger than the last-level cache (the DRAM rate); a
    decoding group reads one the size of its float32 weights (:func:`read_probes`), so its
    bound sees the weights' own residency (one bench host's cache held ~100 MiB: 57 GB/s up to
    64 MiB, 25 GB/s from 128 MiB, while paper-110m reads 294 MiB of weights a step)."""
    import torch

    block = 16 * PROBE_ROW
    n = max(1, -(-nbytes // (4 * block))) * block
    x = torch.ones(n, device=torch.device(device), dtype=torch.float32)
    reps = max(1, -(-PROBE_MIN_READ // (n * 4)))
    return n * 4 * reps, x, _repeated(x.sum, reps)


def read_probes(device: str, nbytes: int) -> tuple[int, dict[str, Callable[[], Any]]]:
    """(bytes one call reads, {reader: fn}): readers of one buffer (:func:`read_probe`), each
    reading it as often per call: ``sum`` everywhere and, on a CPU where the native decoding
    kernel is loaded (:func:`~plga.kernels.native.loaded`), ``native GEMV`` (the buffer as [N, :data:`PROBE_ROW`] rows times one
    vector, the decoding products' own way of streaming weights). The faster one is a decoding
    group's bound: a bound a step could beat by reading its weights another way is none (one
    host's ``sum`` read 294 MiB at 22 GB/s while the steps streamed them 15–20 % faster)."""
    import torch

    from ..kernels import native

    nbytes, x, read = read_probe(device, nbytes)
    readers = {"sum": read}
    if torch.device(device).type == "cpu" and native.loaded():
        rows = x.view(-1, PROBE_ROW)  # [N, PROBE_ROW]
        v, z = torch.ones(1, PROBE_ROW), torch.zeros(rows.shape[0])
        reps = nbytes // (x.numel() * 4)
        readers["native GEMV"] = _repeated(lambda: torch.ops.plga.rows_linear(v, rows, z), reps)
    return nbytes, readers


def measure_limits(
    *, device: str = "cpu", dtype: str = "float32", runs: int = 5, matmul_n: int = 2048, buffer_mib: int = 512
) -> dict[str, Any]:
    """Matmul GFLOP/s (float32, the bench dtype and the low-precision rows' dtype) and memory bandwidth in GB/s."""
    import torch

    from ..kernels import gemm

    dev = torch.device(device)
    out: dict[str, Any] = {"device": device, "matmul_n": matmul_n, "buffer_mib": buffer_mib, "runs": runs}
    if dev.type == "cuda":  # the GPU's model: targets whose baseline was measured on one model name it
        out["device_name"] = torch.cuda.get_device_name(dev)
    dtypes = list(dict.fromkeys(("float32", dtype, LOW_DTYPE)))
    gen = torch.Generator(device="cpu").manual_seed(0)
    for name in dtypes:
        tdt = getattr(torch, name)
        a = torch.randn(matmul_n, matmul_n, generator=gen).to(device=dev, dtype=tdt)
        b = torch.randn(matmul_n, matmul_n, generator=gen).to(device=dev, dtype=tdt)
        flops = 2 * matmul_n**3
        bt = b.t().contiguous()  # [N, K]: b's product as a linear layer
        torch_gflops: float | None = None
        if gemm.widens(a, bt, None):
            # no arithmetic for the dtype on this CPU: the kernels' products run widened to float32,
            # and torch.matmul's scalar fallback is not timed (an AVX2-only CPU: minutes at 2048²)
            ts = time_runs(lambda a=a, bt=bt: gemm.linear(a, bt), runs, 2, device)
            best = {"via": WIDENED_VIA, **summary(ts)}
        else:
            ts = time_runs(lambda a=a, b=b: a @ b, runs, 2, device)
            best = {"via": "torch.matmul", **summary(ts)}
            torch_gflops = flops / min(ts) / 1e9
        if gemm.serves(a, bt, None):  # the kernels' GEMM (oneDNN), where it differs from torch's
            ts1 = time_runs(lambda a=a, bt=bt: gemm.linear(a, bt), runs, 2, device)
            if min(ts1) < min(ts):
                best, ts = {"via": "oneDNN inner product", **summary(ts1)}, ts1
        out[f"matmul_{name}"] = {
            **best,
            "gflops_best": flops / min(ts) / 1e9,
            "gflops_median": flops / statistics.median(ts) / 1e9,
            "torch_matmul_gflops_best": torch_gflops,
        }
        del a, b, bt
    nbytes, x, read = read_probe(device, buffer_mib * 2**20)
    ts = time_runs(read, runs, 2, device)
    out["read"] = {**summary(ts), "gbps_best": nbytes / min(ts) / 1e9, "gbps_median": nbytes / statistics.median(ts) / 1e9}
    y = torch.empty_like(x)
    ts = time_runs(lambda x=x, y=y: y.copy_(x), runs, 2, device)
    out["copy"] = {**summary(ts), "gbps_best": 2 * nbytes / min(ts) / 1e9, "gbps_median": 2 * nbytes / statistics.median(ts) / 1e9}
    del x, y, read
    w = torch.randn(32000, 896, generator=gen).to(dev)
    wt = w.t().contiguous()
    v = torch.randn(1, 896, generator=gen).to(dev)
    wbytes = w.numel() * 4
    ts = time_runs(lambda: torch.nn.functional.linear(v, w), max(runs, 10), 3, device)
    out["gemv_linear_layout"] = {**summary(ts), "gbps_best": wbytes / min(ts) / 1e9}
    ts = time_runs(lambda: v @ wt, max(runs, 10), 3, device)
    out["gemv_transposed_layout"] = {**summary(ts), "gbps_best": wbytes / min(ts) / 1e9}
    from ..kernels.packed import pack_linear, packed_linear, packed_parts

    parts = packed_parts(dev)  # as PLDRModel decodes
    packed = pack_linear(wt, torch.zeros(32000, device=dev), parts)
    ts = time_runs(lambda: packed_linear(v, *packed), max(runs, 10), 3, device)
    out["gemv_packed_layout"] = {**summary(ts), "gbps_best": wbytes / min(ts) / 1e9, "parts": parts}
    wl, vl, zl = w.bfloat16(), v.bfloat16(), torch.zeros(32000, device=dev, dtype=torch.bfloat16)
    ts = time_runs(lambda: torch.nn.functional.linear(vl, wl, zl), max(runs, 10), 3, device)
    out["gemv_bf16_linear"] = {**summary(ts), "gbps_best": wbytes / 2 / min(ts) / 1e9}
    from ..kernels import native

    if dev.type == "cpu" and native.loaded():
        z = torch.zeros(32000, device=dev)
        ts = time_runs(lambda: torch.ops.plga.rows_linear(v, w, z), max(runs, 10), 3, device)
        out["gemv_native"] = {**summary(ts), "gbps_best": wbytes / min(ts) / 1e9}
    if dev.type == "cpu" and native.prepare(torch.bfloat16):
        ts = time_runs(lambda: torch.ops.plga.rows_linear(vl, wl, zl), max(runs, 10), 3, device)
        out["gemv_bf16_native"] = {**summary(ts), "gbps_best": wbytes / 2 / min(ts) / 1e9}
    # the numbers the bench divides by
    out["peak_gflops"] = out[f"matmul_{dtype}"]["gflops_best"]
    out["peak_gflops_float32"] = out["matmul_float32"]["gflops_best"]
    out["bandwidth_gbps"] = out["read"]["gbps_best"]
    import numpy as np  # the float64 reference runs in NumPy on the CPU whatever the device

    a64 = np.random.default_rng(0).standard_normal((1024, 1024))
    ts = time_runs(lambda: a64 @ a64, runs, 1)
    out["numpy_float64_matmul_gflops"] = 2 * 1024**3 / min(ts) / 1e9
    return out


def best_of(start: dict[str, Any], end: dict[str, Any] | None) -> dict[str, Any]:
    """The limits the run's fractions divide by: ``start``, with every matmul peak and the read
    bandwidth raised to the end-of-run measurement where that was higher (``fractions_from``
    says which). A limit measured while something else ran is understated, never overstated,
    so the higher of the two is the machine's; and the higher peak gives the stricter fraction.
    """
    if not end:
        return {**start, "fractions_from": "start"}
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in start.items()}
    raised = []
    for key, val in end.items():
        if key.startswith("matmul_") and isinstance(val, dict) and val.get("gflops_best", 0) > out.get(key, {}).get("gflops_best", 0):
            out[key] = dict(val)
            raised.append(key)
    if end.get("read", {}).get("gbps_best", 0) > out.get("read", {}).get("gbps_best", 0):
        out["read"] = dict(end["read"])
        raised.append("read")
    out["peak_gflops"] = max(out["peak_gflops"], end.get("peak_gflops", 0))
    out["peak_gflops_float32"] = max(out["peak_gflops_float32"], end.get("peak_gflops_float32", 0))
    out["bandwidth_gbps"] = max(out["bandwidth_gbps"], end.get("bandwidth_gbps", 0))
    out["fractions_from"] = "start" if not raised else "start, raised to the end's " + ", ".join(raised)
    return out


__all__ = ["PROBE_MIN_READ", "PROBE_ROW", "WIDENED_VIA", "best_of", "measure_limits", "read_probe", "read_probes", "summary", "time_runs"]
