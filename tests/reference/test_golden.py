"""The reference against the golden vectors of the published v510 implementation (docs/spec.md §5)."""

from __future__ import annotations

import numpy as np
import pytest

from plga.reference import decoder

RTOL = 1e-12


def rel_err(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual − expected| / max |expected| (relative to the tensor's scale)."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


@pytest.fixture(scope="module")
def golden_forward(golden):
    params, config, arrays = golden
    return decoder.forward(decoder.to_backend(params), config, arrays["tokens"]), arrays


def test_logits_and_decoder_output(golden_forward):
    result, z = golden_forward
    assert rel_err(result.logits, z["logits"]) <= RTOL
    assert rel_err(result.hidden, z["decoder_output"]) <= RTOL


@pytest.mark.parametrize("layer", [0, 1])
@pytest.mark.parametrize(("ours", "theirs"), [("A_LM", "A_LM"), ("G_LM", "G_LM"), ("scores", "scores_unmasked")])
def test_deductive_tensors(golden_forward, layer, ours, theirs):
    result, z = golden_forward
    assert rel_err(result.deductive[layer][ours], z[f"layer{layer}.{theirs}"]) <= RTOL


@pytest.mark.parametrize("mode", ["nocache", "kv", "kvg"])
def test_greedy_generation(golden, mode):
    params, config, z = golden
    out = decoder.generate(decoder.to_backend(params), config, z["gen.prompt"], 10, mode)
    np.testing.assert_array_equal(out.tokens[0], z[f"gen.{mode}.tokens"])
    assert rel_err(out.step_logits[0], z[f"gen.{mode}.step_logits"]) <= RTOL


def test_nocache_differs_from_kv_in_this_uncollapsed_model(golden):
    """The golden model is random: recomputing G must change the decoded tokens (docs/spec.md §5)."""
    _, _, z = golden
    assert not np.array_equal(z["gen.nocache.tokens"], z["gen.kv.tokens"])


def test_a_perturbed_model_misses_the_golden_logits(golden):
    """Negative control: the tolerance is tight enough to see a one-ulp-scale weight change."""
    params, config, z = golden
    broken = dict(params)
    key = "decoder.dec_layers.1.mha1.plgatt_layer.pwlst"
    broken[key] = params[key] * np.float32(1 + 1e-6)
    result = decoder.forward(decoder.to_backend(broken), config, z["tokens"])
    assert rel_err(result.logits, z["logits"]) > RTOL
