"""The low-precision inference path on the CPU: bfloat16 copies in the nn.Linear row layout
(:func:`plga.kernels.packed.pack_rows`), the opt-in compiled batch-1 GEMV
(``PLDRModel.compile_decode``), and decoding in bfloat16 against the golden vectors under the
conformance tolerance policy (baselines: the suite's eager decoder in bfloat16)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from plga.conformance.tolerance import DECODER_ROWS
from plga.kernels import PLDRModel
from plga.kernels.packed import pack_rows, packed_linear, rows_gemv
from plga.reference.config import PLDRConfig

from .kernel_helpers import model_pair, teacher_forced
from .policy import K_CHAIN, assert_rel_close, assert_within_policy, baseline_steps, within_policy


@pytest.mark.parametrize("m", [1, 5, 20])
@pytest.mark.parametrize("n", [7, 32, 45])
def test_row_layout_equals_linear(m, n):
    g = torch.Generator().manual_seed(n * 100 + m)
    w, b, x = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((n, 24), (n,), (m, 24)))
    rows, bias, width = pack_rows(w, b)
    assert width == n and rows.shape[0] % 16 == 0 and rows.is_contiguous()
    assert_rel_close(packed_linear(x, rows, bias, width), F.linear(x, w, b), rtol=1e-14)
    with pytest.raises(AssertionError):  # negative control: a row order mix-up is caught
        assert_rel_close(packed_linear(x, rows.flip(0), bias, width), F.linear(x, w, b), rtol=1e-14)


def test_compiled_gemv_within_policy():
    """One bf16 product: the compiled GEMV (float32 accumulation, one rounding) against the exact
    float64 product, with torch's bf16 ``F.linear`` as the baseline."""
    g = torch.Generator().manual_seed(0)
    w, b, x = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((300, 96), (300,), (1, 96)))
    wl, bl, xl = w.bfloat16(), b.bfloat16(), x.bfloat16()
    truth = F.linear(xl.double(), wl.double(), bl.double())  # exact on the bf16 inputs
    got = rows_gemv(xl, wl, bl)
    assert got.dtype == torch.bfloat16 and got.shape == (1, 300)
    assert_within_policy(got, truth, [F.linear(xl, wl, bl)], name="compiled GEMV")
    assert not within_policy(rows_gemv(xl, wl.flip(0), bl), truth, [F.linear(xl, wl, bl)])  # negative control


def test_every_variant_of_a_shape_compiles_under_the_raised_limit():
    """The same shapes as inference tensors and as ordinary ones (the packed copies are either,
    by where they were first built) are two compiled entries; each compiles with the raised
    recompile limit, never falling back to eager code at Dynamo's default."""
    from torch._dynamo.utils import counters

    g = torch.Generator().manual_seed(1)
    w, b, x = (torch.randn(*s, generator=g) for s in ((53, 37), (53,), (1, 37)))  # a shape no other test uses
    want = F.linear(x, w, b)
    graphs = []
    for inference in (True, False):
        with torch.inference_mode(inference), torch._dynamo.config.patch(recompile_limit=1):  # the default, made tight
            args = [t.clone() for t in (x, w, b)]
            before = counters["stats"]["unique_graphs"]
            assert_rel_close(rows_gemv(*args), want, rtol=1e-5)
            graphs.append(counters["stats"]["unique_graphs"] - before)
    assert graphs == [1, 1]


def test_bfloat16_copies_use_the_row_layout():
    _, model = model_pair(PLDRConfig.from_name("tiny"), 21, dtype=torch.bfloat16)
    model.generate(torch.tensor([[5, 9, 1]]), 2, "kv")
    packed = model._packed.all_tensors()
    assert packed and all(t.dtype == torch.bfloat16 and t.ndim in (1, 2) for t in packed)
    layer = model.decoder.dec_layers[0]
    qkv = model._packed.layer(0, layer.mha1, layer.ffn, model.device)[0]
    assert qkv[0].shape[1] == model.config.d_model and qkv[2] == 3 * model.config.d_model


@pytest.mark.parametrize("compiled", [False, True], ids=["plain", "compiled"])
@pytest.mark.parametrize("mode", ["kv", "kvg"])
def test_bfloat16_decoding_steps_within_policy(golden, golden_checkpoint, mode, compiled):
    """Every step of bf16 decoding on the golden prompt, fed the golden tokens, within the policy
    of the float64 golden step logits (batch 1: the row-layout GEMVs, compiled or not)."""
    params, config = golden_checkpoint
    prompt = torch.as_tensor(golden["gen.prompt"])  # [1, 8]
    forced = torch.as_tensor(golden[f"gen.{mode}.tokens"][prompt.shape[1] :])[None]  # [1, 10]
    truth = golden[f"gen.{mode}.step_logits"][None]  # [1, 10, V] float64
    model = PLDRModel.from_reference(params, config, dtype=torch.bfloat16).eval()
    model.compile_decode = compiled
    got = teacher_forced(model, prompt, forced, mode)
    assert got.dtype == torch.bfloat16
    base = baseline_steps(params, config, prompt, forced, mode)
    assert_within_policy(got, truth, base, k=K_CHAIN, name=f"bf16 {mode} step logits", rows=DECODER_ROWS)
    wrong = teacher_forced(model, prompt, forced.roll(1, dims=1), mode)  # negative control: other tokens fed
    assert not within_policy(wrong, truth, base, k=K_CHAIN, rows=DECODER_ROWS)


def _divergence(low, ref, start: int) -> tuple[int | None, float, float]:
    """The first new token where ``low`` and ``ref`` (generations with step logits) differ, the
    reference's top-2 logit margin there and ``low``'s largest logits error at that step (both
    saw the same tokens up to it); (None, inf, 0) when every token agrees."""
    differ = (low.tokens[0] != ref.tokens[0]).nonzero()
    if not len(differ):
        return None, float("inf"), 0.0
    i = int(differ[0]) - start
    top2 = ref.step_logits[0, i].double().topk(2).values
    error = (low.step_logits[0, i].double() - ref.step_logits[0, i].double()).abs().max()
    return i, float(top2[0] - top2[1]), float(error)


@pytest.mark.parametrize("compiled", [False, True, "native"], ids=["plain", "compiled", "compiled-native"])
def test_bfloat16_greedy_tokens_equal_float32_on_the_golden_prompt(golden, golden_checkpoint, compiled, monkeypatch):
    """bf16 greedy tokens equal float32's, or first differ where float32's top-2 margin is at
    most twice bf16's logits error at that step (each of the two logits may move by it): the
    golden prompt has a step with a margin of 0.003 against bf16 errors of ~0.03, so which way
    it goes depends on rounding. ``compiled-native``: captured steps with every one-row product
    on the native kernel (the rule for large bf16 weights, here applied to all)."""
    params, config = golden_checkpoint
    prompt = torch.as_tensor(golden["gen.prompt"])
    n = golden["gen.kv.tokens"].shape[0] - prompt.shape[1]
    low = PLDRModel.from_reference(params, config, dtype=torch.bfloat16).eval()
    low.compile_decode = bool(compiled)
    if compiled == "native":
        from plga.kernels import packed

        monkeypatch.setattr(packed, "NATIVE_ONE_ROW_MIN", 0)
    f32 = PLDRModel.from_reference(params, config, dtype=torch.float32).eval()
    for mode in ("kv", "kvg"):
        got = low.generate(prompt, n, mode, return_step_logits=True)
        ref = f32.generate(prompt, n, mode, return_step_logits=True)
        assert ref.tokens[0].tolist() == golden[f"gen.{mode}.tokens"].tolist()
        step, margin, error = _divergence(got, ref, prompt.shape[1])
        assert margin <= 2 * error or step is None, f"{mode}: diverges at new token {step}, margin {margin:.3g} > 2 × {error:.3g}"


def test_negative_control_an_unexplained_divergence_is_caught(golden, golden_checkpoint):
    """A generation that leaves float32's tokens at a step with a wide margin (forced: another
    token fed from the second new token on) fails the rule above."""
    params, config = golden_checkpoint
    prompt = torch.as_tensor(golden["gen.prompt"])
    f32 = PLDRModel.from_reference(params, config, dtype=torch.float32).eval()
    ref = f32.generate(prompt, 4, "kv", return_step_logits=True)
    forced = ref.tokens.clone()
    forced[0, prompt.shape[1] + 1] = (forced[0, prompt.shape[1] + 1] + 1) % config.input_vocab_size
    other = type(ref)(tokens=forced, step_logits=ref.step_logits + 1e-3)
    step, margin, error = _divergence(other, ref, prompt.shape[1])
    assert step == 1 and margin > 0.5 and not margin <= 2 * error
