"""The kernel tests' view of the project's one tolerance policy.

The policy and its baselines live in the conformance suite: :mod:`plga.conformance.tolerance`
(``max|kernel − truth| ≤ k · max|baseline − truth| + floor``, and the one fixed float64
tolerance) and :mod:`plga.conformance.eager` (the independent eager baselines in several
operation orders). This module only adapts their calls to the shapes these tests use.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from plga.conformance import eager as eg
from plga.conformance.tolerance import (
    FLOAT64_RTOL,
    assert_conforms,
    assert_float64_close,
    compare,
    k_for,
)

#: The policy multiple downstream of an uncollapsed operator chain (the suite's override).
K_CHAIN = k_for("forward_logits")


def assert_rel_close(actual: Any, expected: Any, *, rtol: float = FLOAT64_RTOL, name: str = "output") -> float:
    """The fixed float64 tolerance (relative to max|expected|); returns the relative error."""
    return assert_float64_close(actual, expected, rtol=rtol, what=name)


def assert_within_policy(
    actual: Any, expected: Any, baselines: Any, *, k: float = 2.0, name: str = "output", rows: tuple[str, ...] = (),
) -> Any:
    """``actual`` within k × the baselines' error against ``expected`` (+ the rounding floor),
    per row of the leading axes ``rows`` or over the whole tensor. Logits [B, S, V] take
    ``DECODER_ROWS``, as the conformance suite judges a decoder: one ill-conditioned row (a
    left-padded sequence in float32) must not loosen the bound of the others."""
    return assert_conforms(actual, baselines, expected, k=k, what=name, rows=rows)


def within_policy(actual: Any, expected: Any, baselines: Any, *, k: float = 2.0, rows: tuple[str, ...] = ()) -> bool:
    return compare(actual, baselines, expected, k=k, rows=rows).passed


def baseline_attention(
    q: Tensor, k: Tensor, v: Tensor, G: Tensor | None, *, causal: bool, key_padding_mask: Tensor | None = None,
    finite_mask: bool = True,
) -> list[Tensor]:
    """The suite's eager attention in the inputs' dtype, in every operation order it knows."""
    return [
        eg.plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, finite_mask=finite_mask, order=o)
        for o in eg.ATTENTION_ORDERS
    ]


def baseline_decoders(params: dict[str, np.ndarray], config: Any, dtype: torch.dtype) -> list[eg.EagerDecoder]:
    """The suite's eager decoders in ``dtype``: every operation order, and bf16/fp16 also with a
    float32 chain."""
    state = {key: torch.as_tensor(np.asarray(val)) for key, val in params.items()}
    decoders = [eg.EagerDecoder(state, config, dtype=dtype, order=o) for o in eg.ORDERS]
    if dtype in (torch.bfloat16, torch.float16):
        decoders.append(eg.EagerDecoder(state, config, dtype=dtype, wide_chain=True))
    return decoders


def baseline_ensemble(
    params: dict[str, np.ndarray], config: Any, tokens: Any, dtype: torch.dtype, *, constant_g: Any = None
) -> dict[str, Any]:
    """The forwards of :func:`baseline_decoders`: {"logits": [one per decoder], "G_LM": [per layer: one per decoder]}."""
    decoders = baseline_decoders(params, config, dtype)
    gs = None if constant_g is None else [torch.as_tensor(np.asarray(g)) for g in constant_g]
    runs = [d.forward(torch.as_tensor(np.asarray(tokens)), gs) for d in decoders]
    return {
        "logits": [logits for logits, _, _ in runs],
        "G_LM": [[deds[i]["G_LM"] for _, deds, _ in runs] for i in range(config.num_layers)],
    }


def baseline_steps(
    params: dict[str, np.ndarray], config: Any, prompt: Tensor, forced: Tensor, mode: str, dtype: torch.dtype = torch.bfloat16,
) -> list[Tensor]:
    """:func:`baseline_decoders` fed ``prompt`` [B, S] and then the tokens ``forced`` [B, N] one step at a time in ``mode``:
    one [B, N, V] of last-position logits per decoder (the prompt pass's, then a step's per
    forced token but the last), as :func:`.kernel_helpers.teacher_forced` returns them."""
    out = []
    for d in baseline_decoders(params, config, dtype):
        logits, _, caches = d.forward(prompt)
        steps = [logits[:, -1]]
        for i in range(forced.shape[1] - 1):
            logits, caches = d.step(forced[:, i : i + 1], caches, mode)
            steps.append(logits[:, -1])
        out.append(torch.stack(steps, 1))
    return out
