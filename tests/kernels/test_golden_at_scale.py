"""The golden vectors down the kernels' large-model paths.

The golden checkpoint is small (2 layers, d_model 64, dff 96, prompts of 8 and 12 tokens). At
the shipped size thresholds (:mod:`plga.kernels.thresholds`) its passes never reach oneDNN's
products, the feed-forward gate inside its GEMMs nor, in bfloat16, attention by blocks of
queries: a 110M-parameter model runs those. Under :func:`~plga.kernels.thresholds.smallest`
they do, and here the published implementation's numbers hold the kernels on them:

- float32 and bfloat16 logits of the forward and of every decoding step (fed the golden
  tokens, plain and captured) within the conformance policy of the float64 golden logits, the
  suite's eager decoders in the same dtype as baselines;
- float64: the golden greedy tokens exactly and the step logits to the fixed float64 tolerance.

Spies show that each large path ran; the negative controls (:mod:`tests.large_paths`) show that
a fault in each one fails these checks.
"""

from __future__ import annotations

import pytest
import torch

from plga.conformance.tolerance import DECODER_ROWS
from plga.kernels import PLDRModel, thresholds

from ..large_paths import BREAKS, expected_paths, skip_unless_here, spy_on_large_paths, taken
from .kernel_helpers import teacher_forced
from .policy import (
    K_CHAIN,
    assert_rel_close,
    assert_within_policy,
    baseline_ensemble,
    baseline_steps,
    within_policy,
)

pytestmark = pytest.mark.golden

DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
#: Golden rows: row 0 has no padding (blocked attention runs only without key padding); row 1
#: is padded on the right, row 2 on the left.
ROWS = pytest.mark.parametrize("rows", [[0], [0, 1, 2]], ids=["row0", "rows012"])

@pytest.fixture
def paths(monkeypatch):
    return spy_on_large_paths(monkeypatch)


def _forward_logits(params, config, tokens, dtype: torch.dtype) -> torch.Tensor:
    model = PLDRModel.from_reference(params, config, dtype=dtype).eval()
    with torch.no_grad(), thresholds.smallest():
        return model(torch.as_tensor(tokens)).logits  # [B, S, V]


@DTYPES
@ROWS
def test_golden_forward_at_scale_within_policy(golden, golden_checkpoint, paths, dtype, rows):
    params, config = golden_checkpoint
    tokens = golden["tokens"][rows]  # [B, 12]
    got = _forward_logits(params, config, tokens, dtype)
    assert got.dtype == dtype
    base = baseline_ensemble(params, config, tokens, dtype)
    assert_within_policy(got, golden["logits"][rows], base["logits"], k=K_CHAIN, name=f"{dtype} logits at scale",
                         rows=DECODER_ROWS)
    assert expected_paths(dtype, padded=rows != [0]) <= taken(paths), dict(paths)


def _golden_steps(golden, mode):
    prompt = torch.as_tensor(golden["gen.prompt"])  # [1, 8], no padding
    forced = torch.as_tensor(golden[f"gen.{mode}.tokens"][prompt.shape[1] :])[None]  # [1, 10]
    return prompt, forced, golden[f"gen.{mode}.step_logits"][None]  # truth [1, 10, V] float64


def _steps_at_scale(params, config, prompt, forced, mode, dtype, captured) -> torch.Tensor:
    model = PLDRModel.from_reference(params, config, dtype=dtype).eval()
    model.compile_decode = captured
    with thresholds.smallest():
        return teacher_forced(model, prompt, forced, mode)  # [1, 10, V]


@pytest.mark.parametrize("captured", [False, True], ids=["plain", "captured"])
@pytest.mark.parametrize("mode", ["kv", "kvg"])
@DTYPES
def test_golden_decoding_steps_at_scale_within_policy(golden, golden_checkpoint, paths, dtype, mode, captured):
    """The prompt pass runs the large paths; the steps (one row) run the decoding kernels, in
    bfloat16 the native one-row products when captured (:data:`plga.kernels.packed.NATIVE_ONE_ROW_MIN`)."""
    params, config = golden_checkpoint
    prompt, forced, truth = _golden_steps(golden, mode)
    got = _steps_at_scale(params, config, prompt, forced, mode, dtype, captured)
    assert got.dtype == dtype
    base = baseline_steps(params, config, prompt, forced, mode, dtype)
    assert_within_policy(got, truth, base, k=K_CHAIN, name=f"{dtype} {mode} step logits at scale",
                         rows=DECODER_ROWS)
    assert expected_paths(dtype) <= taken(paths), dict(paths)


@pytest.mark.parametrize("captured", [False, True], ids=["plain", "captured"])
@pytest.mark.parametrize("mode", ["nocache", "kv", "kvg"])
def test_golden_greedy_float64_at_scale(golden, golden_checkpoint, mode, captured):
    """float64 at the lowest thresholds: the published greedy tokens exactly, its step logits to
    the fixed float64 tolerance."""
    params, config = golden_checkpoint
    prompt = torch.as_tensor(golden["gen.prompt"])
    want = golden[f"gen.{mode}.tokens"]  # [18]
    model = PLDRModel.from_reference(params, config, dtype=torch.float64).eval()
    model.compile_decode = captured
    with thresholds.smallest():
        out = model.generate(prompt, len(want) - prompt.shape[1], mode, return_step_logits=True)
    assert out.tokens[0].tolist() == want.tolist()
    assert_rel_close(out.step_logits[0], golden[f"gen.{mode}.step_logits"], name=f"{mode} step logits at scale")


@BREAKS
def test_golden_at_scale_catches_a_broken_large_path(golden, golden_checkpoint, monkeypatch, module, name, break_it, dtype, needs):
    """Negative controls: with one large path broken, the golden forward at scale leaves the
    policy (row 0 and, for the products, all three rows)."""
    skip_unless_here(needs)
    params, config = golden_checkpoint
    dt = getattr(torch, dtype)
    monkeypatch.setattr(module, name, break_it(getattr(module, name)))
    row_sets = [[0]] if needs == "blocked" else [[0], [0, 1, 2]]
    for rows in row_sets:
        tokens = golden["tokens"][rows]
        base = baseline_ensemble(params, config, tokens, dt)["logits"]
        got = _forward_logits(params, config, tokens, dt)
        assert not within_policy(got, golden["logits"][rows], base, k=K_CHAIN, rows=DECODER_ROWS), f"{name} broken passed on rows {rows}"
