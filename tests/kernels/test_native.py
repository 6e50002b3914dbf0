"""The native CPU kernel of the decoding products (``torch.ops.plga.rows_linear``,
kernels/csrc/rows_linear.cpp, loaded by :mod:`plga.kernels.native`), and its greedy choice
(``torch.ops.plga.rows_argmax``: torch.argmax's index on every kind of row, with negative controls).

Its contract: b + x Wᵀ with products and sums in float32 and one rounding to the output dtype.
Every result is checked against the exact float64 product of the same (rounded) inputs with the
error bound that contract implies, over shapes that exercise every path of the kernel: groups of
1–4 rows of x on blocks of 4 rows of W and the remainder rows; on the AVX2 blocks, float32 x of
more than 4 rows broadcast over chunks of 8 and 16 lanes (and several chunks past 16 rows), blocks
of 8 and 6 rows of W and their remainders, and the choices for weights past the caches (with
AVX-512: the 16-lane broadcast blocks, columns paired up to 8 rows, an odd K's last column alone);
K tails of every length. Negative controls show the bound catches a dropped K tail, a dropped
remainder row and swapped rows of x (within a chunk and across two). The model-level tests
decode batches through it (plain and captured) and check that it ran.
"""

from __future__ import annotations

import pytest
import torch

from plga.conformance.tolerance import DECODER_ROWS
from plga.kernels import PLDRModel, native
from plga.kernels.packed import pack_rows, packed_linear
from plga.reference.config import PLDRConfig

from .kernel_helpers import has_avx512, model_pair, native_code, teacher_forced
from .policy import K_CHAIN, assert_rel_close, assert_within_policy, baseline_steps, within_policy

DTYPES = [torch.float32, torch.bfloat16]
#: Unit roundoff of the output rounding, per dtype.
OUT_U = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8}


def _served(dtype: torch.dtype) -> bool:
    return native.prepare(dtype)


needs = {d: pytest.mark.skipif(not _served(d), reason=f"the native kernel does not serve {d} on this CPU") for d in DTYPES}


def _inputs(m: int, n: int, k: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x, w, b = (torch.randn(*s, generator=g, dtype=torch.float64).to(dtype) for s in ((m, k), (n, k), (n,)))
    return x, w, b


def _violations(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> int:
    """Entries of ``out`` outside the contract's bound around the exact product of the inputs:
    |out − t| ≤ u_out·|t| + (K + 2)·2⁻²⁴·(Σ|x||w| + |b|) + tiny, t = b + x Wᵀ in float64."""
    xd, wd, bd = x.double(), w.double(), b.double()
    truth = bd + xd @ wd.T  # [M, N]
    mass = bd.abs() + xd.abs() @ wd.abs().T
    k = x.shape[1]
    bound = OUT_U[out.dtype] * truth.abs() + (k + 2) * 2.0**-24 * mass + 1e-30
    return int(((out.double() - truth).abs() > bound).sum())


@pytest.fixture(params=["widest", "avx2"])
def blocks(request):
    """The kernel's widest blocks on this CPU, then its AVX2 blocks (the ones an AVX2-only CPU
    runs), where the CPU has wider ones; restored afterwards."""
    if not _served(torch.float32) and not _served(torch.bfloat16):
        pytest.skip("the native kernel is not loaded on this CPU")
    if request.param == "avx2" and not has_avx512():
        pytest.skip("the widest blocks on this CPU are the AVX2 ones")
    with native_code(request.param):
        yield request.param


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 6, 8, 9, 12, 16, 17, 33])
@pytest.mark.parametrize(("n", "k"), [(1, 1), (3, 15), (4, 16), (7, 17), (37, 31), (64, 32), (130, 33), (9, 100), (257, 256), (40, 683)])
def test_rows_linear_within_the_float32_accumulation_bound(dtype, m, n, k, blocks):
    """Every dtype on every block variant this CPU runs (a dtype the model does not send here
    still gets a correct answer from a direct call)."""
    x, w, b = _inputs(m, n, k, dtype, seed=1000 * m + 10 * n + k)
    out = torch.ops.plga.rows_linear(x, w, b)
    assert out.dtype == dtype and out.shape == (m, n) and out.is_contiguous()
    assert _violations(out, x, w, b) == 0


#: Weights of at least 16 MiB (the kernel's kStreamedBytes), which stream from memory: float32
#: past 4 rows of x takes the broadcast blocks with AVX-512 where K < 512 and past 6 rows at any K
#: (5 and 6 rows at K = 897 the dot blocks); a vocabulary-sized bfloat16 product of one row. 16323 = 680
#: spans of 24 rows + 3, 4683 = 195 + 3, 32771 = 8192 blocks of 4 + 3; every K has a tail (and is
#: odd: the paired 16-lane blocks' last column).
STREAMED = [
    (torch.float32, 5, 16323, 257),
    (torch.float32, 8, 16323, 257),
    (torch.float32, 17, 16323, 257),
    (torch.float32, 6, 4683, 897),
    (torch.float32, 7, 4683, 897),
    (torch.float32, 8, 4683, 897),
    (torch.float32, 9, 4683, 897),
    (torch.bfloat16, 1, 32771, 257),
]


@pytest.mark.parametrize(("dtype", "m", "n", "k"), STREAMED, ids=lambda v: str(v).replace("torch.", ""))
def test_weights_past_the_caches_within_the_bound(dtype, m, n, k, blocks):
    """The kernel's choices for a weight that streams from memory give the contract's answer."""
    x, w, b = _inputs(m, n, k, dtype, seed=m)
    assert w.numel() * w.element_size() >= 16 << 20
    out = torch.ops.plga.rows_linear(x, w, b)
    assert _violations(out, x, w, b) == 0
    no_last_row = out.clone()
    no_last_row[:, -1] = b[-1]  # the control: the last remainder row of W skipped
    assert _violations(no_last_row, x, w, b) > 0


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
@pytest.mark.parametrize("m", [5, 17])
def test_negative_controls_the_bound_catches_dropped_and_swapped_work(dtype, m, blocks):
    """What a broken kernel would return — the K tail skipped, the last (remainder) row of W
    skipped, the first and last rows of x swapped (17: across two broadcast chunks) — is outside
    the bound the kernel itself meets."""
    x, w, b = _inputs(m, 7, 35, dtype, seed=7)  # 7 = one block of 4 + 3 remainder rows; 35 = tails
    x[:, -1], w[:, -1] = 1.0, 4.0  # the tail column matters
    assert _violations(torch.ops.plga.rows_linear(x, w, b), x, w, b) == 0
    xd, wd, bd = x.double(), w.double(), b.double()
    no_tail = (bd + xd[:, :-1] @ wd[:, :-1].T).to(dtype)
    no_last_row = (bd + xd @ wd.T).to(dtype)
    no_last_row[:, -1] = b[-1]
    swapped = torch.ops.plga.rows_linear(x[[m - 1, *range(1, m - 1), 0]], w, b)
    for wrong in (no_tail, no_last_row, swapped):
        assert _violations(wrong, x, w, b) > 0


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
def test_empty_sizes_strided_inputs_and_refusals(dtype, blocks):
    op = torch.ops.plga.rows_linear
    x, w, b = _inputs(3, 6, 20, dtype, seed=3)
    assert op(x[:0], w, b).shape == (0, 6)
    assert op(x, w[:0], b[:0]).shape == (3, 0)
    assert torch.equal(op(x[:, :0], w[:, :0], b), b.expand(3, 6))  # K = 0: the bias
    xt = x.T.contiguous().T  # the same values, column-major
    assert not xt.is_contiguous() and torch.equal(op(xt, w, b), op(x, w, b))
    with pytest.raises(RuntimeError, match="share one dtype"):
        op(x, w.double() if dtype == torch.float32 else w.float(), b)
    with pytest.raises(RuntimeError, match="disagree"):
        op(x, w[:, :5], b)
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        op(x.double(), w.double(), b.double())


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
def test_the_same_result_inside_a_compiled_graph(dtype):
    """Inside torch.compile the kernel is an opaque call (its shape function is the fake
    registration): the graph returns exactly what the eager call does. The ops around it are
    exact in floating point (× 2, relu, × 0.5), so Inductor's fused code cannot differ from
    eager's by rounding (a SiLU here would: its compiled and eager forms differ in the last bit)."""
    if not native.prepare(dtype, 3):
        pytest.skip(f"the native kernel does not serve {dtype} products of 3 rows on this CPU")
    x, w, b = _inputs(3, 50, 40, dtype, seed=5)

    def f(x, w, b):
        return torch.relu(torch.ops.plga.rows_linear(x * 2, w, b)) * 0.5

    got = torch.compile(f, fullgraph=True, dynamic=False)(x, w, b)
    assert torch.equal(got, f(x, w, b))


def test_packed_linear_dispatch():
    """Few-row products on the row layout run the kernel in each dtype it serves here for that
    many rows, one row too (outside captured steps); more than PACKED_SMALL_M rows run the GEMM;
    a dtype it does not serve never runs it."""
    served = [d for d in DTYPES if _served(d)]
    served_rows = [d for d in DTYPES if native.prepare(d, 8)]
    if not served_rows:
        pytest.skip("the native kernel serves no dtype on this CPU")
    from torch.profiler import profile

    def ran_native(x: torch.Tensor, dtype: torch.dtype) -> bool:
        w, bias, n = pack_rows(*(t.to(dtype) for t in _inputs(1, 40, 24, torch.float64, seed=9)[1:]))
        with profile() as prof:
            out = packed_linear(x.to(dtype), w, bias, n)
        assert out.shape == (x.shape[0], 40)
        return any(e.key == "plga::rows_linear" for e in prof.key_averages())

    x = torch.randn(8, 24)
    for dtype in DTYPES:
        assert ran_native(x, dtype) is (dtype in served_rows) and ran_native(x[:1], dtype) is (dtype in served)
        assert not ran_native(torch.randn(17, 24), dtype)


# --- decoding through the kernel ----------------------------------------------------------------

PROMPTS = torch.tensor([[5, 9, 1, 30, 2, 7], [0, 0, 3, 4, 5, 6], [0, 8, 8, 2, 6, 1]])
#: Six rows: past the 4-row groups (on an AVX2-only CPU, float32 runs the broadcast blocks).
PROMPTS_6 = torch.cat([PROMPTS, torch.tensor([[0, 0, 0, 0, 2, 9], [7, 7, 7, 1, 1, 1], [0, 3, 1, 4, 1, 5]])])


def _generate(model: PLDRModel, captured: bool, n: int = 6, prompts: torch.Tensor = PROMPTS):
    from torch.profiler import profile

    model.compile_decode = captured
    try:
        with profile() as prof:
            out = model.generate(prompts, n, "kvg", return_step_logits=True)
    finally:
        model.compile_decode = False
    return out, any(e.key == "plga::rows_linear" for e in prof.key_averages())


@pytest.mark.parametrize("prompts", [PROMPTS, PROMPTS_6], ids=["b3", "b6"])
def test_float32_batch_decoding_through_the_kernel_equals_the_portable_path(monkeypatch, prompts):
    """A padded batch of three, and of six, plain and captured steps against the portable path
    (``PLGA_NATIVE=0``: column blocks and torch's GEMV): the same tokens, logits within float32
    rounding; and the kernel ran exactly where it should: in captured steps (their layout follows
    the batch), and in plain steps where it serves float32 for one row (their layout is the
    model's: on a CPU with AVX2 only they keep the column blocks)."""
    if not native.prepare(torch.float32, len(prompts)):
        pytest.skip(f"the native kernel does not serve float32 products of {len(prompts)} rows on this CPU")
    _, model = model_pair(PLDRConfig.from_name("tiny"), 31, dtype=torch.float32)
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    try:
        portable, portable_native = _generate(model, captured=False, prompts=prompts)
    finally:
        monkeypatch.delenv(native.ENV_SWITCH)
        native.prepare(torch.float32, len(prompts))
    plain, plain_native = _generate(model, captured=False, prompts=prompts)
    got, ran = _generate(model, captured=True, prompts=prompts)
    assert ran and not portable_native and plain_native is native.prepare(torch.float32)
    for out, name in ((plain, "plain"), (got, "captured")):
        assert torch.equal(out.tokens, portable.tokens), name
        assert_rel_close(out.step_logits.double(), portable.step_logits.double(), rtol=1e-5, name=f"float32 batch, {name}")


@needs[torch.bfloat16]
def test_bfloat16_batch_steps_through_the_kernel_within_policy():
    """bf16 steps of a batch of two (the kernel's few-row products) fed the same tokens as the
    float64 model, within the conformance policy of its logits (baselines: the suite's eager
    bf16 decoders). The golden prompt's bf16 steps (batch 1) are held to it in test_low_precision."""
    params, model = model_pair(PLDRConfig.from_name("tiny"), 32, dtype=torch.bfloat16)
    exact = PLDRModel.from_reference(params, model.config, dtype=torch.float64)
    prompt, forced = torch.tensor([[5, 9, 1, 30, 2, 7], [3, 3, 4, 5, 6, 1]]), torch.tensor([[4, 8, 15, 16], [23, 2, 11, 9]])
    from torch.profiler import profile

    with profile() as prof:
        got = teacher_forced(model, prompt, forced, "kvg")
    assert any(e.key == "plga::rows_linear" for e in prof.key_averages())
    truth = teacher_forced(exact, prompt, forced, "kvg")
    base = baseline_steps(params, model.config, prompt, forced, "kvg")
    assert_within_policy(got, truth, base, k=K_CHAIN, name="bf16 batch step logits", rows=DECODER_ROWS)
    assert not within_policy(teacher_forced(model, prompt, forced.flip(0), "kvg"), truth, base, k=K_CHAIN, rows=DECODER_ROWS)  # negative control


@needs[torch.bfloat16]
def test_bfloat16_captured_batch_equals_plain_steps():
    """Captured bf16 steps of a padded batch run the same kernel as the plain steps: the same
    tokens, logits within a few bf16 roundings of their scale; and the kernel ran in both."""
    _, model = model_pair(PLDRConfig.from_name("tiny"), 34, dtype=torch.bfloat16)
    plain, plain_ran = _generate(model, captured=False)
    got, ran = _generate(model, captured=True)
    assert ran and plain_ran
    assert torch.equal(got.tokens, plain.tokens)
    err = (got.step_logits.double() - plain.step_logits.double()).abs().amax().item()
    assert err <= 4 * 2.0**-8 * plain.step_logits.double().abs().amax().item()


def test_without_the_kernel_the_portable_paths_serve(monkeypatch, capsys):
    """PLGA_NATIVE=0, a CPU without the instructions, or a failed build: prepare() says no, no
    product runs the kernel, and a failed build leaves one note on stderr."""
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    assert not native.prepare(torch.bfloat16) and not native.ready(torch.bfloat16) and not native.loaded()
    monkeypatch.delenv(native.ENV_SWITCH)
    assert native.loaded() is bool(native.served_dtypes(native._cpu_flags()))  # control: back on where the CPU has a served dtype

    monkeypatch.setattr(native, "_state", {"tried": False, "serves": frozenset()})
    monkeypatch.setattr(native, "_cpu_flags", lambda: set())
    built = []
    monkeypatch.setattr(native, "_build", lambda: built.append(1))
    assert not native.prepare(torch.float32) and not built  # no instructions: no build attempted

    def broken() -> None:
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(native, "_state", {"tried": False, "serves": frozenset()})
    monkeypatch.setattr(native, "_cpu_flags", lambda: {"avx512f", "avx512bw", "avx512_bf16"})
    monkeypatch.setattr(native, "_build", broken)
    assert not native.prepare(torch.bfloat16) and not native.prepare(torch.bfloat16)
    err = capsys.readouterr().err
    assert err.count("native CPU kernel is unavailable") == 1 and "Ninja is required" in err
    _, model = model_pair(PLDRConfig.from_name("tiny"), 33, dtype=torch.bfloat16)
    out, ran = _generate(model, captured=False, n=3)
    assert not ran and out.tokens.shape == (3, 9)


def test_the_op_is_defined_once_per_process():
    """Reloading the module finds the schemas already there (a second define would raise)."""
    import importlib

    importlib.reload(native)
    assert callable(torch.ops.plga.rows_linear) and callable(torch.ops.plga.rows_argmax)


# --- the greedy choice: plga::rows_argmax --------------------------------------------------------


def _argmax_rows(m: int, n: int, dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    """Rows that tell argmax variants apart: random values, ties (rounded values, all zeros, ±0),
    infinities, all −inf, and NaN first, last, alone and beside an infinity."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, n, generator=g, dtype=torch.float64).to(dtype)
    signed_zeros = torch.where(torch.arange(n) % 2 == 0, -0.0, 0.0).to(dtype).expand(m, n).contiguous()
    out = [x, (x * 2).round(), torch.zeros(m, n, dtype=dtype), signed_zeros, torch.full((m, n), -float("inf"), dtype=dtype)]
    for edit in ((slice(None), -1, float("nan")), (0, n // 2, float("nan")), (slice(None), n // 3, float("inf"))):
        y = x.clone()
        y[edit[0], edit[1]] = edit[2]
        if edit[2] == float("inf"):
            y[:, -1] = float("inf")  # a later tie: the first infinity wins
        out.append(y)
    y = x.clone()
    y[:, 0], y[:, -1] = float("inf"), float("nan")  # a NaN after the largest value still wins
    out.append(y)
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
@pytest.mark.parametrize("m", [1, 3, 8, 17])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 31, 256, 32000])
def test_rows_argmax_is_torch_argmax(dtype, m, n):
    """The same index as ``torch.argmax(x, -1)`` on every row kind (first maximal index; first
    NaN where a row has one), for lengths with and without an 8-lane tail, and a strided input."""
    if not native.loaded():
        pytest.skip("the native kernel is not loaded on this CPU")
    for i, x in enumerate(_argmax_rows(m, n, dtype, seed=100 * m + n)):
        got = torch.ops.plga.rows_argmax(x)
        assert got.dtype == torch.long and torch.equal(got, torch.argmax(x, -1)), (i, got, torch.argmax(x, -1))
    x = _argmax_rows(m, n, dtype, seed=7)[0]
    strided = torch.cat([x, x], 1)[:, ::2]
    assert torch.equal(torch.ops.plga.rows_argmax(strided), torch.argmax(strided, -1))


def test_rows_argmax_negative_controls_and_refusals():
    """The rows above tell the usual wrong answers from torch's: the last maximal index, NaN
    ignored, NaN as the smallest value. Empty rows, other dtypes and other ranks are refused."""
    if not native.loaded():
        pytest.skip("the native kernel is not loaded on this CPU")
    rows = _argmax_rows(3, 37, torch.float32, seed=3)

    def last_max(x: torch.Tensor) -> torch.Tensor:
        return x.shape[1] - 1 - torch.argmax(x.flip(1), -1)

    def nan_ignored(x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(torch.nan_to_num(x, nan=-float("inf")), -1)

    for wrong in (last_max, nan_ignored):
        assert any(not torch.equal(wrong(x), torch.argmax(x, -1)) for x in rows), wrong.__name__
    op = torch.ops.plga.rows_argmax
    with pytest.raises(RuntimeError, match="length 0"):
        op(torch.zeros(2, 0))
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        op(torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"expected x \[M, N\]"):
        op(torch.zeros(3))
    assert op(torch.zeros(0, 5)).shape == (0,)


def test_greedy_uses_the_kernel_where_loaded_and_torch_elsewhere(monkeypatch):
    """``native.greedy`` runs ``plga::rows_argmax`` for CPU float32 / bfloat16 logits when the
    library is loaded, ``torch.argmax`` otherwise (float64, the kernel withheld), with the same
    answer; inside a compiled graph too (an opaque call)."""
    from torch.profiler import profile

    def ran(x: torch.Tensor) -> bool:
        with profile() as prof:
            assert torch.equal(native.greedy(x), torch.argmax(x, -1))
        return any(e.key == "plga::rows_argmax" for e in prof.key_averages())

    x = _argmax_rows(4, 300, torch.float32, seed=11)[-1]
    loaded = native.loaded()
    assert ran(x) is loaded and ran(x.bfloat16()) is loaded and not ran(x.double())
    monkeypatch.setattr(native, "READY_ROWS", frozenset())
    assert not ran(x)
    monkeypatch.undo()
    compiled = torch.compile(lambda t: native.greedy(t * 1.0), fullgraph=True, dynamic=False)
    compiled(x)
    with profile() as prof:
        assert torch.equal(compiled(x), torch.argmax(x, -1))
    assert any(e.key == "plga::rows_argmax" for e in prof.key_averages()) is loaded


def test_the_avx2_switch_narrows_and_restores():
    """``avx2_only`` returns the previous setting; the AVX2 blocks give results within
    the same bound as the widest (checked above) and, on an AVX-512 CPU, differ from them only by
    the order of the float32 sums."""
    if not _served(torch.float32) and not _served(torch.bfloat16):
        pytest.skip("the native kernel is not loaded on this CPU")
    switch = torch.ops.plga.avx2_only
    assert switch(True) is False and switch(True) is True and switch(False) is True and switch(False) is False
    x, w, b = _inputs(3, 9, 40, torch.float32, seed=4)
    widest = torch.ops.plga.rows_linear(x, w, b)
    switch(True)
    try:
        narrow = torch.ops.plga.rows_linear(x, w, b)
    finally:
        switch(False)
    assert _violations(narrow, x, w, b) == 0 and _violations(widest, x, w, b) == 0
    assert_rel_close(narrow, widest, rtol=1e-5)


@pytest.mark.parametrize(("flags", "served", "served_rows"), [
    # AVX2 only (AMD EPYC measured): bfloat16 on the AVX2 blocks; float32 from two rows
    ({"avx2", "fma"}, {torch.bfloat16}, {torch.float32, torch.bfloat16}),
    ({"avx2", "fma", "avx512f", "avx512bw"}, {torch.float32}, {torch.float32}),  # AVX-512 without BF16: not measured for bf16
    ({"avx2", "fma", "avx512f", "avx512bw", "avx512_bf16"}, {torch.float32, torch.bfloat16}, {torch.float32, torch.bfloat16}),
    ({"avx2"}, set(), set()),  # no FMA
    (set(), set(), set()),
])
def test_served_dtypes_follow_the_measured_rule(flags, served, served_rows):
    assert native.served_dtypes(flags) == native.served_dtypes(flags, rows=1) == served
    assert native.served_dtypes(flags, rows=2) == native.served_dtypes(flags, rows=16) == served_rows
