"""The kernels' large-model paths, broken on purpose: the negative controls of the tests that
run small inputs down those paths (:func:`plga.kernels.thresholds.smallest`), in
tests/conformance/test_at_scale.py (the ``kernels-at-scale`` implementation) and
tests/kernels/test_golden_at_scale.py (the golden vectors). Each break acts only where the
large path runs, so at the shipped thresholds the suite's small models never meet it."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import pytest
import torch

from plga.kernels import functional, gemm

#: Whether torch runs oneDNN products on this machine (also tests/kernels/test_gemm.py's question).
ONEDNN = gemm.serves(torch.ones(gemm.MIN_MACS, 1), torch.ones(1, 1), None)


def blocked_attention_here() -> bool:
    """Whether this CPU runs bfloat16 attention by blocks of queries at all (no AMX, bf16 arithmetic)."""
    return not functional.cpu_has_amx() and gemm.cpu_has_low_precision_gemm(torch.bfloat16)


def skip_unless_here(needs: str) -> None:
    """Skip where the path ``needs`` ("onednn" or "blocked") does not exist on this machine."""
    if needs == "onednn" and not ONEDNN:
        pytest.skip("torch has no oneDNN products on this machine: the path does not exist here")
    if needs == "blocked" and not blocked_attention_here():
        pytest.skip("this CPU runs bfloat16 attention on the flash kernel at every size")


ONEDNN_PRODUCT, GATE, BLOCKED = "oneDNN product", "feed-forward gate in its GEMMs", "blocked bfloat16 attention"


def spy(monkeypatch: Any, counts: collections.Counter[str], module: Any, name: str, key: str,
        taken: Callable[..., bool] = lambda *a, **k: True) -> None:
    """Count in ``counts[key]`` the calls of ``module.name`` for which ``taken(*args)`` holds."""
    original = getattr(module, name)

    def spied(*args, **kwargs):
        counts[key] += bool(taken(*args, **kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spied)


def spy_on_large_paths(monkeypatch: Any) -> collections.Counter[str]:
    """How often each large path runs from now on: oneDNN products (:data:`ONEDNN_PRODUCT`), the
    feed-forward gate inside its GEMMs (:data:`GATE`), blocked bfloat16 attention (:data:`BLOCKED`)."""
    counts: collections.Counter[str] = collections.Counter()
    spy(monkeypatch, counts, gemm, "linear", ONEDNN_PRODUCT, lambda x, w, b=None: gemm.serves(x, w, b))
    spy(monkeypatch, counts, gemm, "gated", GATE, lambda x, w1, b1, w2, b2: gemm.serves(x, w1, b1) and gemm.serves(x, w2, b2))
    spy(monkeypatch, counts, functional, "blocked_attention", BLOCKED)
    return counts


def expected_paths(dtype: torch.dtype, padded: bool = False) -> set[str]:
    """The large paths a pass in ``dtype`` takes at the lowest thresholds on this machine: oneDNN
    products and the gate where oneDNN serves ``dtype``; blocked attention in bfloat16 without
    key padding (it runs only there) where this CPU has it."""
    want = set()
    if ONEDNN and gemm.cpu_has_low_precision_gemm(dtype):
        want |= {ONEDNN_PRODUCT, GATE}
    if dtype == torch.bfloat16 and not padded and blocked_attention_here():
        want.add(BLOCKED)
    return want


def taken(counts: collections.Counter[str]) -> set[str]:
    """The paths :func:`spy_on_large_paths` (or :func:`spy`) saw run at least once."""
    return {key for key, n in counts.items() if n > 0}


def gate_on_swapped_factors(original: Callable[..., Any]) -> Callable[..., Any]:
    def gated(x, w1, b1, w2, b2):  # silu on the second factor, only where the fused path runs
        if gemm.serves(x, w1, b1) and gemm.serves(x, w2, b2):
            return original(x, w2, b2, w1, b1)
        return original(x, w1, b1, w2, b2)

    return gated


def bias_dropped_on_onednn(original: Callable[..., Any]) -> Callable[..., Any]:
    def linear(x, w, b=None):
        return original(x, w, None) if gemm.serves(x, w, b) else original(x, w, b)

    return linear


def blocked_without_causality(original: Callable[..., Any]) -> Callable[..., Any]:
    def blocked_attention(qg, k, v, *, causal, scale):
        return original(qg, k, v, causal=False, scale=scale)

    return blocked_attention


#: (module, function, its break, the dtype it shows in, the path it needs), with test ids.
BREAKS = pytest.mark.parametrize(("module", "name", "break_it", "dtype", "needs"), [
    (gemm, "gated", gate_on_swapped_factors, "float32", "onednn"),
    (gemm, "linear", bias_dropped_on_onednn, "float32", "onednn"),
    (functional, "blocked_attention", blocked_without_causality, "bfloat16", "blocked"),
], ids=["gate-silu-on-the-wrong-factor", "onednn-bias-dropped", "blocked-attention-not-causal"])
