"""The torch backend reproduces the float64 reference backend (forward, deductive tensors, decoding)."""

from __future__ import annotations

import numpy as np
import pytest

from plga.audit.backend import ReferenceBackend, make_backend
from plga.audit.model import random_params
from plga.reference.config import PLDRConfig

torch = pytest.importorskip("torch")

CONFIG = PLDRConfig(num_layers=2, d_model=32, num_heads=2, dff=48, A_dff=16, num_reslayerA=2, num_denseA=2, input_vocab_size=64, max_seq_len=64)


@pytest.fixture(scope="module")
def pair():
    params = random_params(CONFIG, seed=11)
    return ReferenceBackend(params, CONFIG), make_backend("torch", params, CONFIG, dtype="float64")


def test_forward_matches_reference(pair):
    ref, tb = pair
    tokens = np.array([[5, 9, 17, 3, 0, 0], [7, 8, 9, 10, 11, 12]])
    a, b = ref.forward(tokens), tb.forward(tokens)
    np.testing.assert_allclose(b.logits, a.logits, rtol=1e-10, atol=1e-10)
    for la, lb in zip(a.deductive, b.deductive, strict=True):
        for k in ("A", "A_LM", "A_P", "G_LM"):
            np.testing.assert_allclose(lb[k], la[k], rtol=1e-9, atol=1e-9, err_msg=k)


@pytest.mark.parametrize("mode", ["nocache", "kv", "kvg"])
def test_decoding_matches_reference(pair, mode):
    ref, tb = pair
    prompt = np.array([[5, 9, 17, 21]])
    ta, la = ref.generate(prompt, 4, mode)
    tb_, lb = tb.generate(prompt, 4, mode)
    assert np.array_equal(ta, tb_)
    np.testing.assert_allclose(lb, la, rtol=1e-9, atol=1e-9)
    sa, _ = ref.generate(prompt, 4, mode, temperature=1.0, top_k=10, seed=100)
    sb, _ = tb.generate(prompt, 4, mode, temperature=1.0, top_k=10, seed=100)
    assert np.array_equal(sa, sb)


def test_auto_picks_reference_for_small_models():
    assert make_backend("auto", random_params(CONFIG), CONFIG).name == "reference"
    with pytest.raises(ValueError, match="unknown backend"):
        make_backend("jax", random_params(CONFIG), CONFIG)
