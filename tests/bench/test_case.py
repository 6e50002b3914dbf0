"""One case, really run, on ``tiny`` (in this process): the eager baseline decodes the same
tokens as the fused path, and a case returns every raw measurement the rows need."""

from __future__ import annotations

import pytest

from plga.bench.plan import plan_cases
from plga.reference.config import PLDRConfig

torch = pytest.importorskip("torch")

from plga.bench.case import eager_generate, run_case  # noqa: E402
from plga.bench.machine import PROBE_MIN_READ, PROBE_ROW, read_probe, read_probes  # noqa: E402
from plga.bench.rows import derive_row  # noqa: E402
from plga.kernels import native  # noqa: E402


def test_eager_baseline_decodes_the_same_tokens():
    from plga.kernels import PLDRModel
    from plga.reference.checkpoint import random_params

    c = PLDRConfig.from_name("tiny")
    model = PLDRModel.from_reference(random_params(c, 0), c)
    prompt = torch.randint(1, c.input_vocab_size, (2, 6), generator=torch.Generator().manual_seed(1))
    for mode in ("nocache", "kv", "kvg"):
        assert torch.equal(eager_generate(model, prompt, 4, mode), model.generate(prompt, 4, mode).tokens)
    collapsed = model.collapse_from(prompt)
    assert torch.equal(eager_generate(collapsed, prompt, 4, "collapsed"), collapsed.generate(prompt, 4, "collapsed").tokens)


@pytest.mark.parametrize("impl", ["eager", "fused"])
def test_a_decode_case_runs_on_tiny(impl):
    spec = next(c for c in plan_cases(["tiny"], ["decode"], quick=True, runs=1, low_precision=False)
                if c["kind"] == "decode" and c["impl"] == impl and c["mode"] == "kv" and c["batch"] == 1)
    out = run_case(spec)
    assert len(out["times_s"]) == 1 and out["times_s"][0] > 0
    assert out["prefill_times_s"] and len(out["tokens_digest"]) == 12
    assert out["peak_rss_bytes"] > 0
    if impl == "fused":  # the loop-overhead split: profiled runs, each beside unprofiled ones
        from plga.bench.case import OVERHEAD_PAIRS

        pairs = out["overhead_pairs"]
        assert spec["overhead"] and len(pairs) == OVERHEAD_PAIRS
        # only their presence: under pytest -n 2 another test shares the two cores, and the
        # profiled runs' relations are noise (the row's arithmetic: tests/bench/test_rows.py)
        assert all(set(p) == {"generate_s", "prefill_s", "generate_compute_s", "prefill_compute_s"} for p in pairs)
        assert all(v > 0 for pair in pairs for v in pair.values())


def test_a_prefill_case_runs_on_tiny():
    spec = next(c for c in plan_cases(["tiny"], ["prefill"], quick=True, runs=1, low_precision=False)
                if c["kind"] == "prefill" and c["impl"] == "fused")
    out = run_case(spec)
    assert out["logits"] == "last" and len(out["times_s"]) == 1


class _Event:
    def __init__(self, key: str, us: float) -> None:
        self.key, self.self_cpu_time_total = key, us


class _Profile:
    def __init__(self, events: list[_Event]) -> None:
        self.events = events

    def key_averages(self) -> list[_Event]:
        return self.events


def test_compute_time_counts_the_models_kernels_and_nothing_else():
    """The loop-overhead split: matmuls, elementwise ops, a captured graph's generated kernels,
    plga's native operator and oneDNN's linear op are arithmetic; the graph's wrapper, copies,
    argmax, allocation and unnamed events are not."""
    from plga.bench.case import _compute_seconds

    arithmetic = [("aten::addmm", 100.0), ("aten::mul", 20.0), ("graph_1_cpp_fused_add_softmax_0", 300.0),
                  ("graph_1_cpp_fused_index_copy_1", 2.0), ("plga::rows_linear", 50.0), ("mkldnn::_linear_pointwise", 40.0)]
    loop = [("## Call CompiledFxGraph f1 ##", 80.0), ("aten::copy_", 7.0), ("aten::argmax", 5.0), ("aten::empty", 3.0),
            ("Pregraph bytecode", 9.0), ("AOTDispatcher Runtime Wrapper Prologue", 11.0)]
    total = _compute_seconds(_Profile([_Event(k, us) for k, us in arithmetic + loop]), "cpu")
    assert total == pytest.approx(512e-6)


def test_a_graph_without_kernel_events_counts_its_own_time_as_arithmetic():
    """Where a profile holds no generated-kernel events (a graph compiled without kernel
    profiling), the graph's self time holds its kernels and counts as arithmetic, wrapper
    included; the control: the same events with one kernel event make it overhead."""
    from plga.bench.case import _compute_seconds

    events = [("aten::addmm", 100.0), ("## Call CompiledFxGraph f1 ##", 380.0), ("Pregraph bytecode", 9.0)]
    assert _compute_seconds(_Profile([_Event(k, us) for k, us in events]), "cpu") == pytest.approx(480e-6)
    with_kernel = [*events, ("graph_0_cpp_fused_mul_0", 1.0)]
    assert _compute_seconds(_Profile([_Event(k, us) for k, us in with_kernel]), "cpu") == pytest.approx(101e-6)


def test_a_captured_steps_kernels_are_profiled_apart_from_its_wrapper():
    """plga compiles the captured step with kernel profiling: a profile of a captured generation
    holds events under the name the split counts as arithmetic, and the graph's own event beside
    them (its wrapper). Without that option (the control) no such event exists, and the split
    would count the wrapper as arithmetic."""
    from torch.profiler import profile

    from plga.bench.case import COMPILED_GRAPH_MARKER, GENERATED_KERNEL
    from plga.kernels import PLDRModel, capture
    from plga.reference.checkpoint import random_params

    c = PLDRConfig.from_name("tiny")
    model = PLDRModel.from_reference(random_params(c, 0), c).eval()
    model.compile_decode = True
    # batch 3: no bench case decodes it, so the step compiled here is not the one a case in this
    # process times as its cold compile (test_a_captured_case_reports_its_cold_and_cached_compile)
    prompt = torch.randint(1, c.input_vocab_size, (3, 6), generator=torch.Generator().manual_seed(3))
    model.generate(prompt, 3)  # compiles
    with profile() as prof:
        model.generate(prompt, 3)
    keys = [ev.key for ev in prof.key_averages()]
    assert any(GENERATED_KERNEL.match(k) for k in keys), keys
    assert any(k.startswith(COMPILED_GRAPH_MARKER) for k in keys), keys
    assert capture.CPU_OPTIONS["cpp.enable_kernel_profile"] is True
    plain = torch.compile(lambda x: torch.softmax(x * 2, -1), dynamic=False)
    x = torch.randn(3, 5)
    plain(x)
    with profile() as prof:
        plain(x)
    assert not any(GENERATED_KERNEL.match(ev.key) for ev in prof.key_averages())


def test_each_profiled_call_is_set_beside_a_timed_run_on_either_side(monkeypatch):
    """A pair's wall time is the mean of the unprofiled runs just before and just after its
    profiled call, so a steady drift of the host's speed cancels (here walls rise by 1 s per run)."""
    from plga.bench import case

    events: list[str] = []
    clock = iter(range(100))

    def timed(fn, runs, warmup, device):
        events.append(f"time {fn.__name__}")
        return [float(next(clock))], None

    def profiled(fn, device):
        events.append(f"profile {fn.__name__}")
        return 0.5

    def generate():
        pass

    def prefill():
        pass

    monkeypatch.setattr(case, "_time", timed)
    monkeypatch.setattr(case, "_profile_compute", profiled)
    pairs = case._overhead_pairs(generate, prefill, "cpu")
    assert len(pairs) == case.OVERHEAD_PAIRS
    assert events[:6] == ["time generate", "profile generate", "time generate", "time prefill", "profile prefill", "time prefill"]
    assert pairs[0] == {"generate_s": 0.5, "generate_compute_s": 0.5, "prefill_s": 2.5, "prefill_compute_s": 0.5}
    assert pairs[1]["generate_s"] == 4.5


def test_the_native_operator_is_profiled_under_the_counted_name():
    """The native kernel's profiler event carries the name the split counts (a renamed operator
    would silently move its time to the loop's overhead)."""
    from torch.profiler import profile

    from plga.bench.case import NATIVE_OP_PREFIX, _compute_seconds
    from plga.kernels import native

    if not native.loaded():
        pytest.skip("the native kernel is not available on this machine")
    x, w, b = torch.randn(2, 64), torch.randn(32, 64), torch.randn(32)
    with profile() as prof:
        torch.ops.plga.rows_linear(x, w, b)
    keys = [ev.key for ev in prof.key_averages()]
    assert any(k.startswith(NATIVE_OP_PREFIX) for k in keys), keys
    assert _compute_seconds(prof, "cpu") > 0


def test_a_captured_case_reports_its_cold_and_cached_compile():
    """A captured case times its compile on an empty Inductor cache, then starts itself again in
    a fresh process on the cache it filled (the cached compile a later run pays)."""
    spec = next(c for c in plan_cases(["tiny"], ["decode"], quick=True, runs=1, low_precision=False, capture=True)
                if c["kind"] == "decode" and c.get("capture") and c["batch"] == 1)
    # the bench runs a case in a fresh process; here another test in this process may have
    # compiled the same step, and its entry would serve the case's first call (no compile)
    torch._dynamo.reset()
    out = run_case(dict(spec, overhead=False))
    assert out["compile_s"] > 0 and out["compile_cached_s"] > 0  # presence only: speed is the bench's
    assert "compile_cached_error" not in out


def test_a_failed_cached_compile_probe_is_reported_not_fatal(monkeypatch):
    """The probe's failure leaves the case's own measurements and says why (the row's
    ``unmeasured``)."""
    import subprocess

    from plga.bench import case as case_mod

    def failing(cmd, **kw):
        assert "compile_probe" in cmd[-1]
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="boom")

    monkeypatch.setattr(case_mod.subprocess, "run", failing)
    assert case_mod._cached_compile_seconds({"kind": "decode", "capture": "compile"}) == (None, "the cached-compile probe failed: exit 1: boom")
    raw = {"spec": {"id": "x", "kind": "command", "argv": []}, "status": "ok", "times_s": [1.0],
           "compile_cached_s": None, "compile_cached_error": "the cached-compile probe failed: exit 1: boom"}
    assert derive_row(raw, {}).unmeasured == {"compile_cached_s": "the cached-compile probe failed: exit 1: boom"}


def test_a_bandwidth_probe_times_its_readers_in_each_round():
    """Every reader is timed once per run; a run's time is its faster reader's, and the row names
    the reader of the best run."""
    out = run_case({"kind": "bandwidth", "config": "tiny", "mode": "kv", "buffer_bytes": 2**20, "runs": 2, "warmup": 1})
    readers = out["reader_times_s"]
    expected = {"sum", "native GEMV"} if native.loaded() else {"sum"}
    assert set(readers) == expected and all(len(ts) == 2 and min(ts) > 0 for ts in readers.values())
    assert out["bytes"] == PROBE_MIN_READ and out["times_s"] == [min(ts) for ts in zip(*readers.values(), strict=True)]
    row = derive_row({**out, "spec": {**out["spec"], "id": "tiny/decode/kv/read-bandwidth"}, "status": "ok"}, {})
    assert row.read_via == min(readers, key=lambda name: min(readers[name]))
    assert row.read_gbps == pytest.approx(PROBE_MIN_READ / min(out["times_s"]) / 1e9)


def test_the_read_probe_repeats_only_a_buffer_smaller_than_its_minimum_read():
    """A buffer of at least PROBE_MIN_READ bytes is read once per call, a smaller one as often as
    it takes, a size between whole blocks of rows is rounded up; the byte count returned is what
    one call reads (a mismatch would scale every bound)."""
    big = PROBE_MIN_READ + 4 * 2**20
    nbytes, x, read = read_probe("cpu", big)
    assert nbytes == big == x.numel() * 4 and float(read()) == x.numel()
    nbytes, x, read = read_probe("cpu", 3 * 2**20)
    assert nbytes == 3 * 2**20 * -(-PROBE_MIN_READ // (3 * 2**20)) and float(read()) == x.numel()
    block = 16 * PROBE_ROW * 4
    _, x, _ = read_probe("cpu", 3 * 2**20 + 5)
    assert x.numel() * 4 == 3 * 2**20 + block


@pytest.mark.skipif(not native.loaded(), reason="the native kernel is not loaded on this CPU")
def test_the_native_gemv_reader_reads_every_row_of_the_buffer():
    """The GEMV reader multiplies the whole buffer, as often as the sum reads it: each output is a
    row's sum (PROBE_ROW for a buffer of ones), one per row."""
    nbytes, readers = read_probes("cpu", 3 * 2**20)
    assert set(readers) == {"sum", "native GEMV"} and nbytes == read_probe("cpu", 3 * 2**20)[0]
    out = readers["native GEMV"]()
    assert out.shape == (1, 3 * 2**20 // (4 * PROBE_ROW)) and bool((out == PROBE_ROW).all())


@pytest.mark.parametrize("arithmetic", [True, False], ids=["bf16-arithmetic", "no-bf16-arithmetic"])
def test_the_low_precision_matmul_peak_is_the_kernels_product(arithmetic, monkeypatch):
    """Where the CPU has no bfloat16 arithmetic the bfloat16 peak is the kernels' widened product
    and torch.matmul's scalar fallback is not timed (minutes at 2048² on an AVX2-only CPU); the
    report says so. With the arithmetic, torch.matmul is timed as before."""
    import torch

    from plga.bench import machine
    from plga.bench.report import format_limits
    from plga.kernels import gemm

    monkeypatch.setattr(gemm, "cpu_has_low_precision_gemm", lambda dtype: arithmetic or dtype not in (torch.bfloat16, torch.float16))
    slow = []
    real = torch.Tensor.__matmul__
    monkeypatch.setattr(torch.Tensor, "__matmul__", lambda a, b: (slow.append(a.dtype), real(a, b))[1])
    lim = machine.measure_limits(runs=1, matmul_n=64, buffer_mib=1)
    mm = lim["matmul_bfloat16"]
    assert mm["gflops_best"] > 0
    if arithmetic:
        assert torch.bfloat16 in slow and mm["torch_matmul_gflops_best"] > 0
    else:
        assert torch.bfloat16 not in slow and torch.float32 in slow  # control: the float32 peak still timed
        assert mm["via"] == "widened float32 product" and mm["torch_matmul_gflops_best"] is None
        assert "bfloat16 " in format_limits(lim) and "(widened; torch.matmul not timed)" in format_limits(lim)


class _WokenGate:
    """A gate that always made its case wait, and leaves the workload cold (its threads asleep,
    its caches evicted): the next call pays a wake-up, as on the bench machine after a wait."""

    gated = True

    def __init__(self, state: dict) -> None:
        self.state = state

    def wait(self) -> bool:
        self.state["cold"] = True
        return True


def _cold_then_fast(state: dict, wake_s: float = 0.03, call_s: float = 0.001):
    import time

    def fn() -> None:
        state["calls"] += 1
        time.sleep(wake_s if state.pop("cold", False) else call_s)

    return fn


def test_a_run_after_a_wait_at_the_gate_is_rewarmed_untimed():
    """A 30 ms wake-up on the first call after each wait is in no timed run (each run re-warms
    untimed first); the control: with the re-warm switched off, every run carries it."""
    from plga.bench import case

    state: dict = {"calls": 0}
    times, _ = case._time(_cold_then_fast(state), 3, 1, "cpu", min_run_s=0.005, gate=_WokenGate(state))
    assert len(times) == 3 and max(times) < 0.004, times
    control: dict = {"calls": 0}
    real = case._rewarm
    try:
        case._rewarm = lambda *a, **k: None
        cold, _ = case._time(_cold_then_fast(control), 3, 1, "cpu", min_run_s=0.005, gate=_WokenGate(control))
    finally:
        case._rewarm = real
    assert min(cold) > 0.005, cold


def test_no_rewarm_without_a_wait_or_for_a_long_call(monkeypatch):
    """An open gate (a case run alone, back to back) re-warms nothing: warm-up, the one-call
    measure and the timed calls only; nor does a gated run whose one call is longer than
    REWARM_LONG_CALL_S (the wake-up is then a small part of it)."""
    from plga.bench import case

    state: dict = {"calls": 0}
    case._time(_cold_then_fast(state), 2, 1, "cpu", min_run_s=0)
    assert state["calls"] == 1 + 2  # the warm-up, one call per run
    woken: dict = {"calls": 0}
    case._time(_cold_then_fast(woken), 2, 1, "cpu", min_run_s=0, gate=_WokenGate(woken))
    assert woken["calls"] >= 1 + 2 + 2  # the control: after a wait, untimed calls before each run
    monkeypatch.setattr(case, "REWARM_LONG_CALL_S", 0.0005)
    gated: dict = {"calls": 0}
    times, _ = case._time(_cold_then_fast(gated, 0.03), 2, 1, "cpu", min_run_s=0.0035, gate=_WokenGate(gated))
    assert min(times) > 0.005, times  # each run took its wake-up: no call before it


def test_the_bandwidth_readers_are_rewarmed_after_a_wait():
    """Each reader of the bandwidth probe re-warms after a wait before its timed read: a
    wake-up read slowly would lower the measured bandwidth and raise every fraction of it."""
    from plga.bench import case

    state: dict = {"calls": 0}
    fast, other = _cold_then_fast(state), _cold_then_fast(state)
    times = case._time_readers({"a": fast, "b": other}, 2, 1, "cpu", gate=_WokenGate(state))
    assert all(t < 0.004 for ts in times.values() for t in ts), times
