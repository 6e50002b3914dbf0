"""Captured decoding steps (``PLDRModel.compile_decode``, :mod:`plga.kernels.capture`): the same
tokens and logits as the reference and the uncaptured steps in every cached mode, with batches
and left padding; a few compilations serve every prompt length; the checks around a step
(hooks; non-finite states in test_decode_path) still hold. A negative control shows the comparison catches a step
that attends to the cache rows not yet written."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
import torch

from plga.kernels import PLDRModel, random_G
from plga.kernels import capture as C
from plga.reference import decoder as R
from plga.reference.config import PLDRConfig

from .kernel_helpers import model_pair
from .policy import assert_rel_close

#: Left padding in rows 1 and 2; row 0 is the longest prompt.
BATCH = torch.tensor([[5, 9, 1, 30, 2, 7], [0, 0, 3, 4, 5, 6], [0, 8, 8, 2, 6, 1]])
NEW = 6


def _generate(model: PLDRModel, prompt: torch.Tensor, mode: str, *, captured: bool, G=None, n: int = NEW):
    model.compile_decode = captured
    try:
        return model.generate(prompt, n, mode, G=G, return_step_logits=True)
    finally:
        model.compile_decode = False


def _captured_with(monkeypatch, target, name: str, replacement, model: PLDRModel, mode: str = "kvg"):
    """Captured decoding of :data:`BATCH` with ``target.name`` replaced while the step is
    traced afresh (the replacement and Dynamo's cache are undone after). Dynamo builds its map
    of torch's functions once per process, from the objects their names resolve to: built while
    ``torch.arange`` is replaced, it lacks the real one, and every later trace of it fails."""
    torch._dynamo.trace_rules.get_torch_obj_rule_map()
    monkeypatch.setattr(target, name, replacement)
    torch._dynamo.reset()  # the patched body must be traced afresh
    try:
        return _generate(model, BATCH, mode, captured=True)
    finally:
        monkeypatch.undo()
        torch._dynamo.reset()


@pytest.mark.golden
@pytest.mark.parametrize("mode", ["kv", "kvg"])
def test_golden_greedy_captured(golden_checkpoint, golden, mode):
    """The trained golden model: captured float64 decoding reproduces the published tokens and
    step logits to the float64 tolerance; float32 reproduces the tokens."""
    params, config = golden_checkpoint
    prompt = torch.as_tensor(golden["gen.prompt"])
    for dtype in (torch.float64, torch.float32):
        model = PLDRModel.from_reference(params, config, dtype=dtype)
        out = _generate(model, prompt, mode, captured=True, n=10)
        np.testing.assert_array_equal(out.tokens.numpy()[0], golden[f"gen.{mode}.tokens"])
        if dtype == torch.float64:
            assert_rel_close(out.step_logits[0], golden[f"gen.{mode}.step_logits"], name=mode)


@pytest.mark.parametrize("mode", ["kv", "kvg", "collapsed"])
def test_captured_equals_the_reference_with_padding(mode):
    """Batch 3 with left padding, float64: the reference decoder's tokens and step logits, and
    the uncaptured steps' to rounding."""
    config = PLDRConfig.from_name("tiny")
    params, model = model_pair(config, 21)
    G = random_G(config, seed=5) if mode == "collapsed" else None
    g_ref = None if G is None else list(G.double().numpy())
    want = R.generate(R.to_backend(params), config, BATCH.numpy(), NEW, mode, constant_g=g_ref)
    got = _generate(model, BATCH, mode, captured=True, G=G)
    plain = _generate(model, BATCH, mode, captured=False, G=G)
    np.testing.assert_array_equal(got.tokens.numpy(), want.tokens)
    assert_rel_close(got.step_logits, want.step_logits, name=mode)
    assert torch.equal(got.tokens, plain.tokens)
    assert_rel_close(got.step_logits, plain.step_logits, rtol=1e-12, name=mode)


def test_negative_control_a_step_that_sees_unwritten_rows_is_caught(monkeypatch):
    """A captured step that forgets to mask the cache rows not yet written (zeros: score 0, a
    nonzero weight) fails the same comparison."""
    config = PLDRConfig.from_name("tiny")
    params, model = model_pair(config, 21)
    want = R.generate(R.to_backend(params), config, BATCH.numpy(), NEW, "kvg")
    original = torch.arange

    def no_unwritten(*args, **kwargs):  # the body's arange(capacity) > position, made all-False
        out = original(*args, **kwargs)
        return out.zero_() if args and args[0] == C.bucket(BATCH.shape[1] + NEW - 1, config.max_seq_len) else out

    got = _captured_with(monkeypatch, torch, "arange", no_unwritten, model)
    with pytest.raises(AssertionError):
        assert_rel_close(got.step_logits, want.step_logits, name="kvg")


def test_a_captured_kv_step_applies_g_lm_without_forming_it(monkeypatch):
    """A captured kv step takes its query's q G_LM as (q a) A_P + q b_a
    (``functional.apply_power_g``: S·d² multiply-adds per matrix instead of forming G_LM's d³);
    the test above holds its tokens and logits to the reference. Here: the power stage's G_LM
    is never traced into the step (a G_LM formed there fails the generation), and a factored
    product that drops a (the control) leaves the reference's step logits."""
    from plga.kernels import modules

    config = PLDRConfig.from_name("tiny")
    params, model = model_pair(config, 21)
    want = R.generate(R.to_backend(params), config, BATCH.numpy(), NEW, "kv")
    power_stage = modules.power_stage

    def refused_in_graph(*args):
        if torch.compiler.is_compiling():
            raise AssertionError("a captured kv step formed G_LM")
        return power_stage(*args)

    got = _captured_with(monkeypatch, modules, "power_stage", refused_in_graph, model, mode="kv")
    np.testing.assert_array_equal(got.tokens.numpy(), want.tokens)
    assert_rel_close(got.step_logits, want.step_logits, name="kv")

    def without_a(q, a, a_p, b_a):
        return q @ a_p + q @ b_a

    wrong = _captured_with(monkeypatch, modules, "apply_power_g", without_a, model, mode="kv")
    with pytest.raises(AssertionError):
        assert_rel_close(wrong.step_logits, want.step_logits, name="kv")


def test_greedy_tokens_after_the_first_are_the_graphs_own_choice(monkeypatch):
    """A greedy captured step writes its argmax into the token buffer and the loop passes it on
    untouched; the graph's choice is what lands in the output. A graph that chooses the least
    likely token (the control: Python's first choice, from the prompt pass, stays the argmax)
    keeps the reference's first token and loses the rest."""
    from plga.kernels import native

    config = PLDRConfig.from_name("tiny")
    params, model = model_pair(config, 21)
    want = R.generate(R.to_backend(params), config, BATCH.numpy(), NEW, "kvg").tokens
    s = BATCH.shape[1]
    got = _generate(model, BATCH, "kvg", captured=True)
    np.testing.assert_array_equal(got.tokens.numpy(), want)
    greedy = native.greedy

    def least_likely_in_graph(logits):
        return torch.argmin(logits, dim=-1) if torch.compiler.is_compiling() else greedy(logits)

    wrong = _captured_with(monkeypatch, native, "greedy", least_likely_in_graph, model)
    np.testing.assert_array_equal(wrong.tokens.numpy()[:, : s + 1], want[:, : s + 1])
    assert not np.array_equal(wrong.tokens.numpy()[:, s + 1 :], want[:, s + 1 :])
    assert_rel_close(wrong.step_logits[:, 0], got.step_logits[:, 0], rtol=1e-12, name="the prompt pass")


def test_float32_captured_within_rounding_of_plain():
    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 22, dtype=torch.float32)
    got = _generate(model, BATCH, "kvg", captured=True)
    plain = _generate(model, BATCH, "kvg", captured=False)
    assert torch.equal(got.tokens, plain.tokens)
    assert_rel_close(got.step_logits.double(), plain.step_logits.double(), rtol=1e-5, name="float32")


def test_one_compilation_serves_every_prompt_length():
    """The cache capacity is bucketed: prompts of other lengths reuse the compiled step."""
    from torch._dynamo.utils import counters

    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 23)
    _generate(model, BATCH[:1, :3], "kvg", captured=True, n=3)
    before = counters["stats"]["unique_graphs"]
    for length, n in ((2, 5), (5, 2), (6, 4)):
        want = _generate(model, BATCH[:1, :length], "kvg", captured=False, n=n)
        got = _generate(model, BATCH[:1, :length], "kvg", captured=True, n=n)
        assert torch.equal(got.tokens, want.tokens)
    assert counters["stats"]["unique_graphs"] == before
    assert [C.bucket(c, 1024) for c in (1, 64, 65, 300, 1024)] == [64, 64, 128, 512, 1024]
    assert C.bucket(40, 32) == 40  # never below what the generation needs


class _Records(logging.Handler):
    """The records a logger emits while attached (Dynamo's loggers do not propagate to pytest's)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_full_step_cache_is_dropped_and_the_new_shape_compiled(monkeypatch):
    """Past :data:`capture.RECOMPILE_LIMIT` entries a new shape drops the step's entries and
    compiles (``fullgraph=True`` made Dynamo raise instead: a process that decodes many
    configurations — the conformance suite's drawn decoders — stopped with an error); the
    dropped shapes compile again when used. The entries are dropped before Dynamo reaches its
    limit, so it logs no warning (a conformance run printed ten lines of it per drop). Negative
    control: without the drop Dynamo warns and raises."""
    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 29)
    monkeypatch.setattr(C, "RECOMPILE_LIMIT", 1)
    torch._dynamo.eval_frame.remove_from_cache(C._step)  # entries of earlier tests in this process would serve the first prompt
    dynamo_log = logging.getLogger("torch._dynamo.convert_frame")
    records = _Records()
    dynamo_log.addHandler(records)
    try:
        for prompt in (BATCH, BATCH[:2], BATCH, BATCH[1:2]):
            got = _generate(model, prompt, "kvg", captured=True)
            want = _generate(model, prompt, "kvg", captured=False)
            assert torch.equal(got.tokens, want.tokens)
            assert_rel_close(got.step_logits, want.step_logits, rtol=1e-12, name="kvg")
            assert len(torch._dynamo.eval_frame._debug_get_cache_entry_list(C._step.__code__)) == 1
        assert not [m for m in records.messages if "recompile_limit" in m]
        monkeypatch.setattr(torch._dynamo.eval_frame, "remove_from_cache", lambda f: None)
        with pytest.raises(torch._dynamo.exc.FailOnRecompileLimitHit):
            _generate(model, BATCH[:2], "kvg", captured=True)
        assert [m for m in records.messages if "recompile_limit" in m]
    finally:
        dynamo_log.removeHandler(records)


def test_a_new_batch_after_a_warm_generation_runs_every_guard():
    """Warm steps skip Dynamo's guards only within one generation: the next generation (another
    batch, another mode) checks them again and gets its own compiled step."""
    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 24)
    for prompt, mode in ((BATCH, "kvg"), (BATCH[1:2], "kvg"), (BATCH, "kv"), (BATCH[:2], "kvg")):
        got = _generate(model, prompt, mode, captured=True)
        want = _generate(model, prompt, mode, captured=False)
        assert torch.equal(got.tokens, want.tokens)
        assert_rel_close(got.step_logits, want.step_logits, rtol=1e-12, name=mode)


def test_a_hook_keeps_generation_on_the_module_path():
    """A forward hook on a projection: steps run uncaptured through the modules, where it fires."""
    _, model = model_pair(PLDRConfig.from_name("tiny"), 25)
    want = _generate(model, BATCH, "kvg", captured=False)
    seen = []
    handle = model.decoder.dec_layers[0].mha1.wq.register_forward_hook(lambda _m, _i, out: seen.append(out.shape))
    try:
        got = _generate(model, BATCH, "kvg", captured=True)
    finally:
        handle.remove()
    assert len(seen) == NEW  # the prompt pass and NEW − 1 steps
    assert torch.equal(got.tokens, want.tokens)


def test_layout_follows_the_batch(monkeypatch):
    """With compile_decode, float32 copies on the CPU use the row layout for a batch of one
    (one-row products: the compiled GEMV); larger batches use it too where the native kernel
    serves float32 products of that many rows, else the column blocks."""
    from plga.kernels import native

    _, model = model_pair(PLDRConfig.from_name("tiny"), 26, dtype=torch.float32)

    def rank(batch: int) -> int:
        model.compile_decode = True
        try:
            with torch.no_grad():
                return model._packed_fields("sdpa", 0, 4, batch)["weights"][0][0][0].ndim
        finally:
            model.compile_decode = False

    one = _generate(model, BATCH[:1], "kvg", captured=True)
    assert rank(1) == 2  # rows [N, K]
    three = _generate(model, BATCH, "kvg", captured=True)
    assert rank(3) == (2 if native.prepare(torch.float32, 3) else 3)
    assert torch.equal(three.tokens[:1], one.tokens)
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    assert rank(3) == 3  # column blocks [P, K, N/P]
    assert torch.equal(_generate(model, BATCH, "kvg", captured=True).tokens, three.tokens)


def _count_dynamo_calls(monkeypatch) -> list[int]:
    """Counts the calls that go through the ``torch.compile`` wrapper (Dynamo's frame evaluation)."""
    calls: list[int] = []
    compiled = C.compiled_step

    def counting(device):
        fn = compiled(device)
        return lambda *a: calls.append(1) or fn(*a)

    monkeypatch.setattr(C, "compiled_step", counting)
    return calls


def test_warm_steps_call_the_entry_dynamo_chose(monkeypatch):
    """At most a generation's first step goes through Dynamo (when no compiled entry accepts it
    yet); every other step calls the code of the cache entry Dynamo's own guards choose among
    several entries (batches, modes), and decodes the uncaptured tokens and logits. A second
    generation of the same shapes never goes through Dynamo."""
    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 27)
    calls = _count_dynamo_calls(monkeypatch)
    for prompt, mode in ((BATCH, "kvg"), (BATCH[1:2], "kv"), (BATCH, "kv"), (BATCH[:2], "kvg"), (BATCH, "kvg")):
        want = _generate(model, prompt, mode, captured=False)
        for most in (1, 0):  # NEW − 1 captured steps; a compiled entry is found without Dynamo
            calls.clear()
            got = _generate(model, prompt, mode, captured=True)
            assert len(calls) <= most
            assert torch.equal(got.tokens, want.tokens)
            assert_rel_close(got.step_logits, want.step_logits, rtol=1e-12, name=mode)


def test_negative_control_an_entry_chosen_without_its_guards_is_caught(monkeypatch):
    """Another entry of the same shapes picked without its guards (the graph compiled for a
    batch without padding, which reads no padding mask) decodes other logits for the padded
    rows, and the comparison above catches it."""
    import types

    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 27)
    unpadded = torch.where(BATCH == 0, 3, BATCH)
    _generate(model, unpadded, "kvg", captured=True)
    _generate(model, BATCH, "kvg", captured=True)
    want = _generate(model, BATCH, "kvg", captured=False)
    chosen = C.entry_function

    def another_entry(fn, args):
        right = chosen(fn, args)
        assert right is not None
        entries = torch._dynamo.eval_frame._debug_get_cache_entry_list(fn.__code__)
        return next(types.FunctionType(e.code, fn.__globals__) for e in entries if e.code is not right.__code__)

    monkeypatch.setattr(C, "entry_function", another_entry)
    got = _generate(model, BATCH, "kvg", captured=True)
    with pytest.raises(AssertionError):
        assert_rel_close(got.step_logits, want.step_logits, rtol=1e-12, name="kvg")


def test_without_the_entry_steps_run_under_the_guard_stance(monkeypatch):
    """Where no entry can be found (a torch without the introspection), every step goes
    through Dynamo with the guards skipped, and decodes the same."""
    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 28)
    want = _generate(model, BATCH, "kvg", captured=True)
    calls = _count_dynamo_calls(monkeypatch)
    monkeypatch.setattr(C, "entry_function", lambda fn, args: None)
    got = _generate(model, BATCH, "kvg", captured=True)
    assert len(calls) == NEW - 1
    assert torch.equal(got.tokens, want.tokens)
    assert_rel_close(got.step_logits, want.step_logits, rtol=1e-12, name="kvg")


def test_a_callers_force_eager_stance_holds_for_every_step(monkeypatch):
    """Under ``torch.compiler.set_stance("force_eager")`` every step goes through Dynamo, which
    runs it eagerly: no compiled entry is called and nothing is compiled, even where an entry
    for the same step exists, and the tokens are the plain ones."""
    from torch._dynamo.utils import counters

    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 29)
    _generate(model, BATCH, "kvg", captured=True)  # an entry for this step exists
    want = _generate(model, BATCH, "kvg", captured=False)
    calls = _count_dynamo_calls(monkeypatch)
    before = counters["stats"]["unique_graphs"]
    with torch.compiler.set_stance("force_eager"):
        got = _generate(model, BATCH[:2], "kvg", captured=True)  # another batch: no entry yet
        again = _generate(model, BATCH, "kvg", captured=True)
    assert counters["stats"]["unique_graphs"] == before
    assert len(calls) == 2 * (NEW - 1)
    assert torch.equal(again.tokens, want.tokens) and torch.equal(got.tokens, want.tokens[:2])


def _captured_kernel_calls(model: PLDRModel, prompt: torch.Tensor):
    """A captured kvg generation of ``prompt`` after a warm-up one (which compiles, and may run
    the native op on its own), and how many ``plga::rows_linear`` calls it made."""
    from torch.profiler import profile

    _generate(model, prompt, "kvg", captured=True)
    with profile() as prof:
        out = _generate(model, prompt, "kvg", captured=True)
    return out, sum(ev.count for ev in prof.key_averages() if ev.key == "plga::rows_linear")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_large_weights_run_the_native_kernel_in_a_captured_step(monkeypatch, dtype):
    """A captured step runs its one-row products over weights of at least ``NATIVE_ONE_ROW_MIN``
    elements on the native kernel (an opaque call in the graph) and the smaller ones fused into
    the graph; either way it decodes the plain path's tokens (whose one-row products run the
    native kernel outside a graph). At a limit equal to the size of tiny's larger packed weights —
    QKV, the gates and the vocabulary (37 rows padded to 48), 48 × 16 = 768 elements each —
    exactly their products leave the graph (at least the limit: native)."""
    from plga.kernels import native
    from plga.kernels import packed as P

    if not native.prepare(dtype):
        pytest.skip(f"the native kernel does not serve one-row {dtype} products on this machine")
    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 30, dtype=dtype)
    prompt = torch.randint(1, config.input_vocab_size, (1, 20), generator=torch.Generator().manual_seed(3))  # 20 rows: F.linear
    plain = _generate(model, prompt, "kvg", captured=False)

    def captured_with(limit: int):
        monkeypatch.setattr(P, "NATIVE_ONE_ROW_MIN", limit)
        return _captured_kernel_calls(model, prompt)

    fused, fused_calls = captured_with(1 << 40)
    nat, native_calls = captured_with(0)
    split, split_calls = captured_with(768)  # down 16 × 24 = 384 and output 16 × 16 = 256 elements stay fused
    # outside the graph, the prompt pass's one-row products: the last layer's at the last position
    # (output, gates, down: the rows the logits read) and the last position's vocabulary row
    assert fused_calls == 3 + 1
    assert native_calls - fused_calls == (NEW - 1) * (4 * config.num_layers + 1)  # QKV, output, gates, down; vocabulary
    assert split_calls - fused_calls == (NEW - 1) * (2 * config.num_layers + 1)  # QKV, gates; vocabulary
    rtol = 1e-5 if dtype == torch.float32 else 2e-2
    for got in (fused, nat, split):
        assert torch.equal(got.tokens, plain.tokens)
        assert_rel_close(got.step_logits.double(), plain.step_logits.double(), rtol=rtol, name=f"{dtype} captured")


def test_few_row_float32_products_run_the_native_kernel_in_a_captured_step(monkeypatch):
    """Where the native kernel serves float32 products of several rows (every CPU it loads on),
    a captured float32 step of a batch runs each product on it (an opaque call in the graph)
    and decodes the plain path's tokens; with the kernel withheld from several-row products
    (the control) the step runs Inductor's own product and no call reaches the kernel."""
    from plga.kernels import native

    if not native.prepare(torch.float32, len(BATCH)):
        pytest.skip("the native kernel does not serve several-row float32 products on this machine")
    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 31, dtype=torch.float32)
    plain = _generate(model, BATCH, "kvg", captured=False)

    got, calls = _captured_kernel_calls(model, BATCH)
    withheld = tuple(frozenset(d - {torch.float32}) for d in native._state["serves"])
    with monkeypatch.context() as patch:
        patch.setitem(native._state, "serves", withheld)  # what the next prepare() reads
        fused, fused_calls = _captured_kernel_calls(model, BATCH)
    native.prepare(torch.float32)  # the real answer again for later tests
    # the prompt pass's last rows (the last layer's output, gates and down, the vocabulary); then each step's
    # QKV, output, gates and down in every layer, and the vocabulary
    assert calls == 3 + 1 + (NEW - 1) * (4 * config.num_layers + 1)
    assert fused_calls == 0
    for out in (got, fused):
        assert torch.equal(out.tokens, plain.tokens)
        assert_rel_close(out.step_logits.double(), plain.step_logits.double(), rtol=1e-5, name="float32 captured")


def test_sampled_generation_is_the_uncaptured_one():
    """Seeded top-k / top-p sampling draws from the captured steps' logits: the same tokens as
    the uncaptured steps for the same seed (float64: logits equal to rounding)."""
    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 31)
    kwargs = dict(temperature=0.9, top_k=8, top_p=0.95, seed=11, return_step_logits=True)
    for mode in ("kv", "kvg"):
        model.compile_decode = True
        try:
            got = model.generate(BATCH, NEW, mode, **kwargs)
        finally:
            model.compile_decode = False
        want = model.generate(BATCH, NEW, mode, **kwargs)
        assert torch.equal(got.tokens, want.tokens)
        assert_rel_close(got.step_logits, want.step_logits, rtol=1e-12, name=mode)
    other = model.generate(BATCH, NEW, "kvg", **{**kwargs, "seed": 12})
    assert not torch.equal(other.tokens, want.tokens)  # the seed matters: the comparison can fail
    # the captured steps also write their greedy choice; the sampled token must replace it
    greedy = _generate(model, BATCH, "kvg", captured=True)
    assert not torch.equal(got.tokens, greedy.tokens)


def test_a_cuda_step_compiled_without_its_cuda_graph_is_reported(monkeypatch):
    """Inductor falls back silently to launching a step's kernels from Python when it cannot
    keep the CUDA graph; the capture reads its skip counter and warns (CUDA only)."""
    from torch._dynamo.utils import counters

    before = C.cuda_graph_skips()
    monkeypatch.setitem(counters["inductor"], "cudagraph_skips", before + 1)
    assert C.cuda_graph_skips() == before + 1
    with pytest.warns(RuntimeWarning, match="without a CUDA graph"):
        C.warn_if_graph_skipped(torch.device("cuda"), before)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        C.warn_if_graph_skipped(torch.device("cuda"), before + 1)  # no new skip
        C.warn_if_graph_skipped(torch.device("cpu"), before)  # the CPU has no CUDA graph to skip


def test_the_packed_fields_of_a_captured_step_are_all_marked_static(monkeypatch):
    """Every tensor of the fields a captured step reads (rotation tables, every layer's packed
    weights, the final projection) and of its step buffers goes to ``prepare_static``: on CUDA
    an unmarked input is copied before each replay, and an unmarked one updated in place keeps
    the step out of its CUDA graph. The walker finds tensors at any depth and skips other leaves."""
    t = [torch.zeros(1) for _ in range(4)]
    assert [id(x) for x in C.tensors_in({"a": (t[0], 3, [t[1], {"b": t[2]}]), "c": None, "d": t[3]})] == [id(x) for x in t]
    marked: list[int] = []
    monkeypatch.setattr(C, "prepare_static", lambda *ts: marked.extend(id(x) for x in ts))
    _, model = model_pair(PLDRConfig.from_name("tiny"), 5, dtype=torch.float32)
    model.compile_decode = True
    with torch.no_grad():  # the packed copies serve passes without autograd
        fields = model._capture_fields(model.new_cache(1, 64))
    assert fields is not None
    want = C.tensors_in(fields)
    assert len(want) >= 2 + 2 * model.config.num_layers  # rope (cos, sin), each layer's products, the final one
    assert {id(x) for x in want} <= set(marked)
    bufs = model._new_step_buffers(1, 64)  # what the steps update in place: static by construction
    assert {id(x) for x in (*(t for kv in bufs.kv for t in kv), bufs.ids, bufs.position, bufs.flags)} <= set(marked)


def _captured_step_inputs(monkeypatch, model: PLDRModel, mode: str, G=None) -> list[tuple[tuple[int, ...], bool]]:
    """(shape, static) of every tensor input of the captured step, compiled afresh for
    :data:`BATCH` (padded) with ``prepare_static`` marking on the CPU as it does on CUDA: what
    Inductor hands its CUDA-graph wrapper, which copies each non-static input before a replay."""
    import torch._inductor.compile_fx as fx
    import torch._inductor.config

    seen: list[tuple[tuple[int, ...], bool]] = []
    inner = fx._compile_fx_inner

    def spy(gm, example_inputs, **kw):
        static = set(kw.get("static_input_idxs", ()))
        seen.extend((tuple(x.shape), i in static) for i, x in enumerate(example_inputs) if isinstance(x, torch.Tensor))
        return inner(gm, example_inputs, **kw)

    monkeypatch.setattr(fx, "_compile_fx_inner", spy)
    monkeypatch.setattr(C, "prepare_static", lambda *ts: [torch._dynamo.mark_static_address(t, guard=False) for t in ts])
    torch._dynamo.reset()
    try:
        with torch._inductor.config.patch(force_disable_caches=True):  # a cache hit skips the spy
            _generate(model, BATCH, mode, captured=True, G=G)
    finally:
        torch._dynamo.reset()
    assert seen, "the step was not compiled"
    return seen


@pytest.mark.parametrize("mode", ["kv", "kvg", "collapsed"])
def test_every_input_of_a_captured_step_is_static(monkeypatch, mode):
    """Nothing is copied before a replay: every tensor the compiled step reads — parameters,
    packed fields, the step buffers, and what the prompt pass sets (each layer's cached A or
    G_LM, the padding keys) or the caller gives (constant operators), held in the leased
    buffers — is a static input. The control: without the holding, the prompt pass's tensors
    arrive as ordinary inputs (on CUDA, a copy of each before every step)."""
    config = PLDRConfig.from_name("tiny")
    _, model = model_pair(config, 21, dtype=torch.float32)
    G = random_G(config, seed=5) if mode == "collapsed" else None
    assert [shape for shape, static in _captured_step_inputs(monkeypatch, model, mode, G) if not static] == []
    if mode == "kvg":
        monkeypatch.setattr(PLDRModel, "_hold_step_inputs", staticmethod(lambda bufs, cache, mode, operators: operators))
        loose = [shape for shape, static in _captured_step_inputs(monkeypatch, model, mode) if not static]
        assert (BATCH.shape[0], model.config.num_heads, model.config.depth, model.config.depth) in loose  # G_LM
        assert any(len(shape) == 2 and shape[0] == BATCH.shape[0] for shape in loose)  # the padding keys


def test_generations_on_reused_step_buffers_equal_fresh_ones(monkeypatch):
    """On CUDA a captured generation reuses the previous one's in-place tensors (the CUDA graph
    recorded their addresses). Played on the CPU: successive generations — other prompts and
    lengths in one capacity bucket, padding, sampling, constant operators that change between
    generations (held anew), and one ended by an error — give what fresh buffers give, on the
    same storage; without the lease's reset, what the error left in
    them (non-finite keys, set flags) fails the next generation."""
    from plga.errors import NonFiniteError

    _, model = model_pair(PLDRConfig.from_name("tiny"), 9, dtype=torch.float32)
    model.compile_decode = True
    runs = [
        (torch.tensor([[5, 9, 1, 30]]), 6, "kvg", {}),
        (torch.tensor([[7, 2]]), 9, "kvg", {}),
        (torch.tensor([[4, 8, 15]]), 5, "kv", {}),
        (torch.tensor([[0, 0, 4, 8, 15]]), 7, "kvg", {}),  # left padding
        (torch.tensor([[7, 2]]), 9, "kvg", {"temperature": 0.8, "seed": 3}),
        (torch.tensor([[3, 1, 4]]), 5, "collapsed", {"G": random_G(model.config, seed=1)}),
        (torch.tensor([[3, 1, 4]]), 5, "collapsed", {"G": random_G(model.config, seed=2)}),  # held anew
    ]
    fresh = [model.generate(p, n, m, return_step_logits=True, **kw) for p, n, m, kw in runs]
    short = (torch.tensor([[7, 2]]), 2, "kvg")  # one step, at position 2
    short_tokens = model.generate(*short).tokens
    monkeypatch.setattr(C, "reuses_buffers", lambda device: True)
    pointers = set()
    for (p, n, m, kw), want in zip(runs + runs, fresh + fresh, strict=True):
        got = model.generate(p, n, m, return_step_logits=True, **kw)
        assert torch.equal(got.tokens, want.tokens)
        torch.testing.assert_close(got.step_logits, want.step_logits, rtol=0, atol=0)
        (bufs,) = model._step_buffers._idle.values()
        pointers.add(bufs.kv[0][0].data_ptr())
    assert len(pointers) == 1  # one set of buffers served them all
    greedy = fresh[0].tokens[0, 4]
    saved = model.decoder.embedding.weight[greedy].clone()
    with torch.no_grad():
        model.decoder.embedding.weight[greedy].fill_(3e38)
    with pytest.raises(NonFiniteError):  # leaves non-finite keys and set flags at positions 4-8
        model.generate(*runs[0][:3])
    with torch.no_grad():
        model.decoder.embedding.weight[greedy] = saved
    reset = C.StepBuffers.reset  # without it, the short generation meets what the error left
    monkeypatch.setattr(C.StepBuffers, "reset", lambda self: self.position.zero_())  # negative control
    with pytest.raises(NonFiniteError):
        model.generate(*short)
    monkeypatch.setattr(C.StepBuffers, "reset", reset)
    with torch.no_grad():  # the error again, then the real reset
        model.decoder.embedding.weight[greedy].fill_(3e38)
    with pytest.raises(NonFiniteError):
        model.generate(*runs[0][:3])
    with torch.no_grad():
        model.decoder.embedding.weight[greedy] = saved
    assert torch.equal(model.generate(*short).tokens, short_tokens)
