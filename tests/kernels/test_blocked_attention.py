"""The CPU's blocked bfloat16 attention (:func:`plga.kernels.functional.blocked_attention`):
taken exactly where :func:`plga_attention` says, within the tolerance policy of the float64
reference at every block boundary (one block, tails, several head chunks, S < T, not causal),
in a whole bfloat16 decoder, and its negative controls are caught; input errors keep their
one-line messages."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from plga.conformance.tolerance import DECODER_ROWS
from plga.errors import InputError, InputTypeError
from plga.kernels import PLDRModel, plga_attention
from plga.kernels import functional as KF
from plga.reference import decoder as ref_decoder
from plga.reference.config import PLDRConfig

from .kernel_helpers import attention_support_np, random_params, reference_attention
from .policy import (
    K_CHAIN,
    assert_within_policy,
    baseline_attention,
    baseline_ensemble,
    within_policy,
)


@pytest.fixture
def blocked_calls(monkeypatch):
    """Counts the calls of the blocked path, on a CPU taken to have bfloat16 arithmetic but no AMX
    tiles (where the path serves), whatever this host has."""
    monkeypatch.setattr(KF, "cpu_has_amx", lambda: False)
    monkeypatch.setattr(KF, "cpu_has_low_precision_gemm", lambda dtype: True)
    calls = []
    real = KF.blocked_attention

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(KF, "blocked_attention", spy)
    return calls


def _bf16_inputs(seed, b, h, s, t, d, dv, g_kind):
    """bf16 q, k, v and G (per head or per batch element)."""
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, h, n, d, generator=gen, dtype=torch.float64) for n in (s, t))
    v = torch.randn(b, h, t, dv, generator=gen, dtype=torch.float64)
    G = torch.randn(*{"heads": (h, d, d), "batch": (b, h, d, d)}[g_kind], generator=gen, dtype=torch.float64) / d**0.5
    return tuple(x.bfloat16() for x in (q, k, v, G))


def _truth(q, k, v, G, *, causal):
    """float64 attention on the bf16 values; causal bottom-right aligned."""
    allowed = attention_support_np(q.shape[2], k.shape[2], causal, None)
    return reference_attention(q.double(), k.double(), v.double(), G.double(), allowed, True)


#: (B, H, S, T, d, dv, causal, G): at the size threshold with one block; three blocks and a
#: tail with dv ≠ d; S < T bottom-right with a one-row tail and per-batch G; not causal.
CASES = [
    (2, 8, 64, 64, 16, 16, True, "heads"),
    (1, 4, 300, 300, 32, 24, True, "heads"),
    (2, 3, 129, 257, 64, 64, True, "batch"),
    (1, 5, 200, 200, 8, 8, False, "heads"),
]


@pytest.mark.parametrize("workspace", ["default", "two-heads"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:6])) + ("-causal" if c[6] else "") + f"-{c[7]}")
def test_blocked_path_within_policy(case, workspace, blocked_calls, monkeypatch):
    b, h, s, t, d, dv, causal, g_kind = case
    if workspace == "two-heads":  # several head chunks, the last one short
        monkeypatch.setattr(KF, "BLOCKED_WORKSPACE", 2 * KF.BLOCKED_QUERY_ROWS * t)
    q, k, v, G = _bf16_inputs(sum(case[:6]), b, h, s, t, d, dv, g_kind)
    with torch.inference_mode():
        out = plga_attention(q, k, v, G, causal=causal, finite_mask=True)
    assert blocked_calls, "the blocked path was not taken"
    assert out.dtype == torch.bfloat16 and out.shape == (b, h, s, dv)
    truth = _truth(q, k, v, G, causal=causal)
    base = baseline_attention(q, k, v, G, causal=causal)
    assert_within_policy(out, truth, base, name="blocked bf16 attention")
    if causal:  # negative controls: seeing later keys, or queries aligned top-left, are caught
        qg = KF.apply_g(q.float(), G)
        leaky = KF.blocked_attention(qg, k, v, causal=False, scale=d**-0.5)
        assert not within_policy(leaky, truth, base)
        if s < t:  # top-left: query i sees keys ≤ i, the causal attention over the first S keys
            top_left = KF.blocked_attention(qg, k[:, :, :s], v[:, :, :s], causal=True, scale=d**-0.5)
            assert not within_policy(top_left, truth, base)


@pytest.mark.parametrize("change", ["fewer queries", "fewer scores", "padding", "float32", "autograd", "G = None", "G = I", "AMX", "no bf16 arithmetic"])
def test_flash_kernel_elsewhere(change, blocked_calls, monkeypatch):
    """One change from the smallest blocked case keeps torch's flash kernel."""
    b, h, s = 2, 8, 64
    q, k, v, G = _bf16_inputs(1, b, h, s, s, 16, 16, "heads")
    plga_attention(q, k, v, G, causal=True, finite_mask=True)
    assert len(blocked_calls) == 1  # control: the unchanged case is blocked
    pad = None
    if change == "fewer queries":  # more batch, same scores
        q, k, v, G = _bf16_inputs(1, 4 * b, h, s - 1, s - 1, 16, 16, "heads")
    elif change == "fewer scores":
        q, k, v, G = _bf16_inputs(1, b, h - 1, s, s, 16, 16, "heads")
    elif change == "padding":
        pad = torch.zeros(b, s, dtype=torch.bool)
    elif change == "float32":
        q, k, v, G = (x.float() for x in (q, k, v, G))
    elif change == "autograd":
        q.requires_grad_(True)
    elif change == "AMX":  # the flash kernel's bfloat16 products run on the tiles: faster at every size
        monkeypatch.setattr(KF, "cpu_has_amx", lambda: True)
    elif change == "no bf16 arithmetic":  # the value product would run on torch's scalar fallback
        monkeypatch.setattr(KF, "cpu_has_low_precision_gemm", lambda dtype: dtype != torch.bfloat16)
    elif change == "G = None":  # PLGA at G = I is SDPA: the flash kernel keeps it bit for bit
        G = None
    else:
        G = torch.eye(16, dtype=G.dtype).expand(h, 16, 16)
    plga_attention(q, k, v, G, causal=True, key_padding_mask=pad, finite_mask=True)
    assert len(blocked_calls) == 1


@pytest.mark.parametrize("bad", ["list", "scalar", "float64 on another shape"])
def test_a_bad_G_gets_the_input_error(bad, blocked_calls):
    q, k, v, G = _bf16_inputs(2, 2, 8, 64, 64, 16, 16, "heads")
    G = {"list": G.tolist(), "scalar": G[0, 0, 0], "float64 on another shape": G.double()[:, :8, :8]}[bad]
    with pytest.raises(InputTypeError if bad == "list" else InputError):
        plga_attention(q, k, v, G, causal=True)
    assert not blocked_calls


def test_bfloat16_decoder_with_blocked_attention_within_policy(blocked_calls, monkeypatch):
    """A bf16 forward whose every layer takes the blocked path (G in float32, as the model
    passes it), against the float64 reference decoder, with the suite's eager bf16 decoders as
    baselines; a blocked path that lets queries see later keys is caught."""
    config = PLDRConfig(num_layers=2, d_model=64, num_heads=4, dff=96, A_dff=24, num_reslayerA=1, num_denseA=2,
                        input_vocab_size=101, max_seq_len=160)
    params = random_params(config, 5)
    tokens = np.random.default_rng(5).integers(1, config.input_vocab_size, size=(2, 130))
    model = PLDRModel.from_reference(params, config, dtype=torch.bfloat16).eval()
    with torch.inference_mode():
        got = model(torch.as_tensor(tokens)).logits
    assert len(blocked_calls) == config.num_layers
    truth = ref_decoder.forward(params, config, tokens).logits
    base = baseline_ensemble(params, config, tokens, torch.bfloat16)["logits"]
    assert_within_policy(got, truth, base, k=K_CHAIN, name="bf16 logits", rows=DECODER_ROWS)
    real = KF.blocked_attention
    monkeypatch.setattr(KF, "blocked_attention", lambda qg, k, v, *, causal, scale: real(qg, k, v, causal=False, scale=scale))
    with torch.inference_mode():
        leaky = model(torch.as_tensor(tokens)).logits
    assert not within_policy(leaky, truth, base, k=K_CHAIN)


def test_the_amx_question_matches_the_cpu_flags():
    """:func:`cpu_has_amx` answers what the kernel says of this CPU (Linux: the amx_tile flag)."""
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next(line for line in fh if line.startswith("flags")).split()
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags on this host")
    assert KF.cpu_has_amx() is ("amx_tile" in flags)
