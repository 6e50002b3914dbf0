"""The kernels on a CUDA device: the same contracts as on the CPU, checked where CUDA exists.

Every test takes the ``cuda_device`` fixture, which skips cleanly without CUDA (queried at
test time, never at import). Truth is the float64 reference on the CPU; float64 on the device
must meet the float64 tolerance, lower precisions the baseline policy.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from plga.conformance import oracle
from plga.conformance.tolerance import DECODER_ROWS
from plga.kernels import (
    PLDRModel,
    dag_loss,
    plga_attention,
)
from plga.reference import decoder as R
from plga.reference.checkpoint import random_params
from plga.reference.config import PLDRConfig

from .kernel_helpers import random_params as torch_init_params
from .policy import K_CHAIN, assert_rel_close, assert_within_policy, baseline_attention

pytestmark = pytest.mark.cuda

MODES = ("nocache", "kv", "kvg")


def _padded_tokens(vocab: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    tokens = rng.integers(1, vocab, size=(3, 9))
    tokens[1, :3] = 0  # left padding
    tokens[2, :1] = 0
    return tokens


def test_float64_forward_matches_reference(cuda_device):
    config = PLDRConfig.from_name("tiny")
    params = random_params(config, 3)
    tokens = _padded_tokens(config.input_vocab_size)
    want = R.forward(R.to_backend(params), config, tokens)
    model = PLDRModel.from_reference(params, config, dtype=torch.float64, device=cuda_device)
    for backend in ("sdpa", "eager"):
        with torch.no_grad():
            out = model(torch.as_tensor(tokens, device=cuda_device), deductive=True, backend=backend)
        assert out.logits.device.type == cuda_device.type
        assert_rel_close(out.logits, want.logits, name=f"logits/{backend}")
        for i, ded in enumerate(out.deductive):
            assert_rel_close(ded["G_LM"], want.deductive[i]["G_LM"], name=f"G_LM{i}/{backend}")


@pytest.mark.golden
def test_golden_checkpoint_on_device(cuda_device, golden_dir, golden):
    model = PLDRModel.from_pretrained(golden_dir / "small_seed0.pth", dtype=torch.float64, max_seq_len=64, device=cuda_device)
    with torch.no_grad():
        out = model(torch.as_tensor(golden["tokens"], device=cuda_device), deductive=True)
    assert_rel_close(out.logits, golden["logits"], name="logits")
    for i, ded in enumerate(out.deductive):
        assert_rel_close(ded["G_LM"], golden[f"layer{i}.G_LM"], name=f"layer{i}.G_LM")
    prompt = torch.as_tensor(golden["gen.prompt"], device=cuda_device)
    model32 = model.to(torch.float32)
    for mode in MODES:
        got = model.to(torch.float64).generate(prompt, 10, mode, return_step_logits=True)
        np.testing.assert_array_equal(got.tokens.cpu().numpy()[0], golden[f"gen.{mode}.tokens"], err_msg=mode)
        assert_rel_close(got.step_logits[0], golden[f"gen.{mode}.step_logits"], name=mode)
        got32 = model32.to(torch.float32).generate(prompt, 10, mode)
        np.testing.assert_array_equal(got32.tokens.cpu().numpy()[0], golden[f"gen.{mode}.tokens"], err_msg=f"{mode}/f32")


def test_generation_every_mode_matches_reference(cuda_device):
    config = PLDRConfig.from_name("tiny")
    params = random_params(config, 5)
    tokens = _padded_tokens(config.input_vocab_size)
    ref_params = R.to_backend(params)
    model = PLDRModel.from_reference(params, config, dtype=torch.float64, device=cuda_device)
    prompt = torch.as_tensor(tokens, device=cuda_device)
    for mode in MODES:
        want = R.generate(ref_params, config, tokens, 6, mode)
        got = model.generate(prompt, 6, mode, return_step_logits=True)
        np.testing.assert_array_equal(got.tokens.cpu().numpy(), want.tokens, err_msg=mode)
        assert_rel_close(got.step_logits, want.step_logits, name=mode)
    G = np.random.default_rng(1).normal(size=(config.num_layers, config.num_heads, config.depth, config.depth))
    want = R.generate(ref_params, config, tokens, 6, "collapsed", constant_g=list(G))
    got = model.generate(prompt, 6, "collapsed", G=G, return_step_logits=True)
    np.testing.assert_array_equal(got.tokens.cpu().numpy(), want.tokens)
    assert_rel_close(got.step_logits, want.step_logits, name="collapsed")
    empty = model.generate(prompt, 0, "kv", return_step_logits=True)
    assert empty.step_logits.device.type == cuda_device.type and empty.step_logits.shape == (3, 0, config.input_vocab_size)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("pad", [False, True])
def test_attention_within_policy(cuda_device, dtype, pad):
    gen = torch.Generator().manual_seed(11)
    b, h, s, d = 2, 3, 37, 64
    q, k, v = (torch.randn(b, h, s, d, generator=gen, dtype=torch.float64) for _ in range(3))
    G = torch.randn(h, d, d, generator=gen, dtype=torch.float64) / d**0.5
    kpm = None
    if pad:
        kpm = torch.zeros(b, s, dtype=torch.bool)
        kpm[1, :5] = True
    truth = oracle.truth_attention(q, k, v, G, causal=True, key_padding_mask=kpm)  # the suite's float64 truth, not kernel code
    base = baseline_attention(*(t.to(dtype) for t in (q, k, v, G)), causal=True, key_padding_mask=kpm)
    dev = [t.to(cuda_device, dtype) for t in (q, k, v)]
    got = plga_attention(*dev, G.to(cuda_device, torch.float32), causal=True,
                         key_padding_mask=None if kpm is None else kpm.to(cuda_device))
    assert got.dtype == dtype and got.device.type == cuda_device.type
    rows = slice(None) if kpm is None else (slice(None), slice(None), slice(5, None))  # fully masked rows: zeros by contract
    assert_within_policy(got[rows], truth[rows], [b[rows] for b in base], k=2.0, name=str(dtype))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_path_runs_on_flash_attention(cuda_device, dtype):
    """Causal attention without padding (prefill) and a one-query step (decode) are eligible
    for FlashAttention: forcing that backend alone must run and agree with the math backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gen = torch.Generator().manual_seed(2)
    b, h, s, d = 2, 14, 256, 64  # paper-110m head shape
    q, k, v = (torch.randn(b, h, s, d, generator=gen).to(cuda_device, dtype) for _ in range(3))
    G = (torch.randn(h, d, d, generator=gen) / d**0.5).to(cuda_device)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        flash = plga_attention(q, k, v, G, causal=True)
        flash_step = plga_attention(q[:, :, -1:], k, v, G, causal=True)
    with sdpa_kernel([SDPBackend.MATH]):
        math = plga_attention(q, k, v, G, causal=True)
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    torch.testing.assert_close(flash, math, rtol=tol, atol=tol)
    torch.testing.assert_close(flash_step, math[:, :, -1:], rtol=tol, atol=tol)
    # and the whole bf16 model's unpadded prefill and cached steps stay on flash
    if dtype != torch.bfloat16:
        return  # (float16 activations of the random model overflow: bf16 is the model's low precision)
    config = PLDRConfig.from_name("small")
    model = PLDRModel.from_reference(random_params(config, 0), config, dtype=dtype, device=cuda_device)
    prompt = torch.randint(1, config.input_vocab_size, (2, 33), generator=gen).to(cuda_device)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        out = model.generate(prompt, 4, "kvg")
    assert out.tokens.shape == (2, 37)


def test_operator_chain_and_gradients(cuda_device):
    config = PLDRConfig.from_name("tiny")
    params = random_params(config, 9)
    model = PLDRModel.from_reference(params, config, dtype=torch.float64)
    q = torch.randn(2, config.num_heads, 6, config.depth, dtype=torch.float64)
    cpu = model.decoder.dec_layers[0].mha1.chain(q)
    dev_model = PLDRModel.from_reference(params, config, dtype=torch.float64, device=cuda_device)
    dev = dev_model.decoder.dec_layers[0].mha1.chain(q.to(cuda_device))
    for name, a, c in zip(("A", "A_LM", "A_P", "G_LM"), cpu, dev, strict=True):
        assert_rel_close(c, a, name=name)
    tokens = torch.as_tensor(_padded_tokens(config.input_vocab_size))
    for m, toks in ((model, tokens), (dev_model, tokens.to(cuda_device))):
        m.zero_grad()
        m(toks).logits.sum().backward()
    for (name, p_cpu), p_dev in zip(model.named_parameters(), dev_model.parameters(), strict=True):
        assert p_dev.grad is not None, name
        assert_rel_close(p_dev.grad, p_cpu.grad, rtol=1e-7, name=name)  # backward through A_LM^P: measured 2.7e-9 on an H200
    X = torch.randn(5, 5, dtype=torch.float64)
    assert_rel_close(dag_loss(X.to(cuda_device)), dag_loss(X), name="dag_loss")


def test_sampling_is_seeded_on_device(cuda_device):
    config = PLDRConfig.from_name("tiny")
    model = PLDRModel.from_reference(random_params(config, 1), config, dtype=torch.float32, device=cuda_device)
    prompt = torch.as_tensor(_padded_tokens(config.input_vocab_size), device=cuda_device)
    kw = dict(temperature=0.9, top_k=20, top_p=0.95)
    a = model.generate(prompt, 12, "kvg", seed=4, **kw).tokens
    b = model.generate(prompt, 12, "kvg", seed=4, **kw).tokens
    assert torch.equal(a, b)
    assert int(a.min()) >= 0 and int(a.max()) < config.input_vocab_size


def test_collapse_save_and_reload_across_devices(cuda_device, tmp_path):
    config = PLDRConfig.from_name("tiny")
    params = random_params(config, 2)
    model = PLDRModel.from_reference(params, config, dtype=torch.float64, device=cuda_device)
    prompts = torch.as_tensor(_padded_tokens(config.input_vocab_size)[:1], device=cuda_device)
    collapsed = model.collapse_from(prompts)
    assert collapsed.device.type == cuda_device.type and collapsed.collapsed
    folder = collapsed.save_collapsed(tmp_path / "collapsed")
    back = PLDRModel.from_pretrained(folder, dtype=torch.float64)
    assert back.device.type == "cpu" and back.collapsed
    tokens = _padded_tokens(config.input_vocab_size)
    with torch.no_grad():
        on_dev = collapsed(torch.as_tensor(tokens, device=cuda_device)).logits
        on_cpu = back(torch.as_tensor(tokens)).logits
    assert_rel_close(on_dev, on_cpu, name="collapsed logits cuda vs cpu")


def test_low_precision_model_within_policy(cuda_device):
    """bf16 activations on the device (operator chain upcast to float32) against the CPU baseline."""
    from .policy import baseline_ensemble

    config = PLDRConfig.from_name("tiny")
    params = torch_init_params(config, 13)
    tokens = np.array([[5, 9, 1, 30, 2, 7, 11], [0, 0, 3, 4, 5, 6, 8]])
    want = R.forward(R.to_backend(params), config, tokens)
    base = baseline_ensemble(params, config, tokens, torch.bfloat16)
    model = PLDRModel.from_reference(params, config, dtype=torch.bfloat16, device=cuda_device)
    with torch.no_grad():
        out = model(torch.as_tensor(tokens, device=cuda_device), deductive=True)
    assert_within_policy(out.logits, want.logits, base["logits"], k=K_CHAIN, name="logits", rows=DECODER_ROWS)
    for i, ded in enumerate(out.deductive):
        assert ded["G_LM"].dtype == torch.float32  # the chain never runs in bf16
        assert_within_policy(ded["G_LM"], want.deductive[i]["G_LM"], base["G_LM"][i], k=K_CHAIN, name=f"G_LM{i}")


@pytest.mark.parametrize("mode", ["kv", "kvg"])
def test_captured_generation_on_device(cuda_device, mode):
    """Captured steps on CUDA (a CUDA graph per step shape): the reference's tokens and logits in
    float64, the uncaptured steps' tokens in float32, batch 3 with left padding. A second
    prompt of the same shape replays on the same leased buffers (static addresses, reset)."""
    config = PLDRConfig.from_name("tiny")
    params = random_params(config, 9)
    tokens = _padded_tokens(config.input_vocab_size)
    want = R.generate(R.to_backend(params), config, tokens, 6, mode)
    for dtype in (torch.float64, torch.float32):
        model = PLDRModel.from_reference(params, config, dtype=dtype, device=cuda_device)
        plain = model.generate(torch.as_tensor(tokens, device=cuda_device), 6, mode, return_step_logits=True)
        model.compile_decode = True
        got = model.generate(torch.as_tensor(tokens, device=cuda_device), 6, mode, return_step_logits=True)
        assert torch.equal(got.tokens.cpu(), plain.tokens.cpu())
        if dtype == torch.float64:
            np.testing.assert_array_equal(got.tokens.cpu().numpy(), want.tokens)
            assert_rel_close(got.step_logits, want.step_logits, name=mode)
        other = torch.as_tensor(np.roll(tokens, 1, axis=0), device=cuda_device)  # same shape: the same buffers
        again = model.generate(other, 6, mode)
        model.compile_decode = False
        assert torch.equal(again.tokens.cpu(), model.generate(other, 6, mode).tokens.cpu())
