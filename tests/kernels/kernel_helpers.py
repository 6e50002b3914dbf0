"""Shared strategies and builders for the kernel tests (imported by the test modules)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from plga.kernels import PLDRModel, native
from plga.reference import spec
from plga.reference.config import PLDRConfig

#: Small, deadline-free settings: the machine is shared (≤ 25 examples).
FEW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def configs(draw, max_layers: int = 2) -> PLDRConfig:
    """Small decoder configurations: odd head counts, odd widths, one or two units."""
    heads = draw(st.sampled_from([1, 2, 3, 5]), label="num_heads")
    depth = draw(st.sampled_from([2, 4, 6, 8]), label="depth")
    return PLDRConfig(
        num_layers=draw(st.integers(1, max_layers), label="num_layers"),
        d_model=heads * depth,
        num_heads=heads,
        dff=draw(st.sampled_from([5, 8, 13]), label="dff"),
        A_dff=draw(st.sampled_from([3, 6, 7]), label="A_dff"),
        num_reslayerA=draw(st.integers(1, 2), label="num_reslayerA"),
        num_denseA=draw(st.integers(1, 2), label="num_denseA"),
        input_vocab_size=draw(st.sampled_from([11, 23, 40]), label="vocab"),
        max_seq_len=32,
    )


def random_params(config: PLDRConfig, seed: int) -> dict[str, np.ndarray]:
    """Float32 weights with the upstream initialisation (xavier; P, W, a xavier-normal)."""
    torch.manual_seed(seed)
    return PLDRModel(config).to_reference()


@st.composite
def token_batches(draw, vocab: int, max_len: int = 13, max_batch: int = 3) -> np.ndarray:
    """Token ids [B, S] (S in 1, primes, …) with optional left or right padding per row."""
    s = draw(st.sampled_from([1, 2, 3, 5, 7, 11, 13][: max(1, sum(n <= max_len for n in [1, 2, 3, 5, 7, 11, 13]))]), label="seq")
    b = draw(st.integers(1, max_batch), label="batch")
    seed = draw(st.integers(0, 2**31 - 1), label="token_seed")
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, vocab, size=(b, s))
    for row in range(b):
        side = draw(st.sampled_from(["none", "left", "right"]), label=f"pad{row}")
        n = draw(st.integers(0, max(0, s - 1)), label=f"npad{row}")
        if side == "left" and n:
            tokens[row, :n] = 0
        elif side == "right" and n:
            tokens[row, s - n :] = 0
    return tokens


def model_pair(config: PLDRConfig, seed: int, dtype=torch.float64):
    params = random_params(config, seed)
    return params, PLDRModel.from_reference(params, config, dtype=dtype)


def teacher_forced(model: PLDRModel, prompt: torch.Tensor, forced: torch.Tensor, mode: str) -> torch.Tensor:
    """Last-position logits of the prompt pass over ``prompt`` [B, S] and of a ``mode`` step per
    token of ``forced`` [B, N] but the last (each step fed the forced token, not the model's
    choice) → [B, N, V]."""
    n = forced.shape[1]
    with torch.inference_mode():
        cache = model.new_cache(prompt.shape[0], prompt.shape[1] + n)
        out = [model(prompt, logits="last", cache=cache).logits]
        for i in range(n - 1):
            out.append(model.step(forced[:, i : i + 1], cache, mode))
    return torch.stack(out, 1)


def attention_support_np(s, t, causal, pad):
    """Reference support [B, 1, S, T] with queries as the last S positions."""
    allowed = np.ones((1, 1, s, t), dtype=bool)
    if causal:
        allowed = allowed & np.tril(np.ones((s, t), dtype=bool), k=t - s)[None, None]
    if pad is not None:
        allowed = allowed & ~pad[:, None, None, :]
    return allowed


def reference_attention(q, k, v, G, allowed, finite):
    """The float64 reference attention (docs/spec.md) on float64 tensors q, k, v, G (or None = I)."""
    g = np.eye(q.shape[-1]) if G is None else G.numpy()
    if g.ndim == 3:
        g = g[None]
    return spec.plga_attention(
        q.numpy(), g, k.numpy(), v.numpy(), support=allowed, fill=spec.MASK_FILL if finite else None
    )


def has_avx512() -> bool:
    """Whether this CPU has AVX-512F, where the native kernels have code wider than their AVX2 code."""
    return "avx512f" in native._cpu_flags()


@contextlib.contextmanager
def native_code(which: str) -> Iterator[str]:
    """The native kernels on their widest code (``"widest"``) or on their AVX2 code (``"avx2"``,
    the switch ``plga::avx2_only``) inside the block; the previous setting is restored after."""
    previous = torch.ops.plga.avx2_only(which == "avx2")
    try:
        yield which
    finally:
        torch.ops.plga.avx2_only(previous)
