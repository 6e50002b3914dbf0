"""Bad inputs to the reference decoder and the torch kernels: a clear ValueError / TypeError each.

Every case is run against both implementations where both accept the input kind, so the two
stay in step (docs/robustness.md lists the cases with these test ids).
"""

from __future__ import annotations

import numpy as np
import pytest

from plga.reference import decoder
from plga.reference.checkpoint import random_params
from plga.reference.config import PLDRConfig

torch = pytest.importorskip("torch", reason="the kernel half of these tests needs torch")

from plga.kernels import PLDRModel, plga_attention, plga_attention_eager  # noqa: E402
from plga.kernels import functional as KF  # noqa: E402

CONFIG = PLDRConfig.from_name("tiny")  # vocab 37, context 64, 1 layer, 2 heads of d = 8
PARAMS32 = random_params(CONFIG, seed=3)
PARAMS = decoder.to_backend(PARAMS32)
PROMPT = np.array([[3, 17, 5, 29, 8]])


@pytest.fixture(scope="module")
def model():
    return PLDRModel.from_reference(PARAMS32, CONFIG, dtype=torch.float64)


BAD_TOKENS = [
    pytest.param(np.array([[1, 2, 37]]), ValueError, "lie in", id="id-equal-to-vocab"),
    pytest.param(np.array([[1, 2, 10**9]]), ValueError, "lie in", id="id-far-outside-vocab"),
    pytest.param(np.array([[-1, 2]]), ValueError, "lie in", id="negative-id"),
    pytest.param(np.array([1, 2, 3]), ValueError, "shape", id="rank-1"),
    pytest.param(np.ones((1, 2, 3), dtype=np.int64), ValueError, "shape", id="rank-3"),
    pytest.param(np.zeros((1, 0), dtype=np.int64), ValueError, "non-empty", id="empty-sequence"),
    pytest.param(np.zeros((0, 4), dtype=np.int64), ValueError, "non-empty", id="empty-batch"),
    pytest.param(np.array([[1.0, 2.0]]), TypeError, "integers", id="float-ids"),
    pytest.param(np.array([[True, False]]), TypeError, "integers", id="bool-ids"),
    pytest.param(np.array([[1 + 0j, 2]]), TypeError, "integers", id="complex-ids"),
    pytest.param(np.ones((1, 65), dtype=np.int64), ValueError, "max_seq_len", id="longer-than-context"),
]


@pytest.mark.parametrize(("tokens", "error", "message"), BAD_TOKENS)
def test_bad_tokens_reference(tokens, error, message):
    with pytest.raises(error, match=message):
        decoder.forward(PARAMS, CONFIG, tokens)


@pytest.mark.parametrize(("tokens", "error", "message"), BAD_TOKENS)
def test_bad_tokens_kernels(model, tokens, error, message):
    with pytest.raises(error, match=message):
        model(torch.as_tensor(tokens))
    with pytest.raises(error, match=message):
        model.generate(torch.as_tensor(tokens), 1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64])
def test_every_integer_id_dtype_is_read_as_the_same_ids(model, dtype):
    """Token ids of any integer width, signed or not — a NumPy array or the torch tensor of one
    (uint16 is how many tokenized corpora are stored) — give the logits of the int64 ids in both
    implementations; torch reduces no unsigned type but uint8, so the kernels widen the others."""
    want = decoder.forward(PARAMS, CONFIG, PROMPT).logits
    ids = PROMPT.astype(dtype)
    assert np.array_equal(decoder.forward(PARAMS, CONFIG, ids).logits, want)
    for given in (ids, torch.as_tensor(ids)):
        got = model(given).logits
        assert torch.equal(got, model(torch.as_tensor(PROMPT)).logits)
        assert np.allclose(got.detach().numpy(), want, rtol=1e-9, atol=1e-12)
    assert torch.equal(model.generate(ids, 2).tokens, model.generate(torch.as_tensor(PROMPT), 2).tokens)


@pytest.mark.parametrize(
    "ids", [np.array([[1, 37]], dtype=np.uint16), np.array([[1, 2**32 - 1]], dtype=np.uint32),
            np.array([[1, 2**63 + 5]], dtype=np.uint64), np.array([[1, 2**64 - 1]], dtype=np.uint64)],
    ids=["uint16-vocab", "uint32-max", "uint64-above-int64", "uint64-max"],
)
def test_unsigned_ids_outside_the_vocabulary_are_refused(model, ids):
    """A wide unsigned id past the vocabulary is the range error, never a wrapped (negative or
    small) id read as a token; as a NumPy array the message gives its true value."""
    with pytest.raises(ValueError, match=r"lie in \[0, 37\)"):
        decoder.forward(PARAMS, CONFIG, ids)
    with pytest.raises(ValueError, match=rf"lie in \[0, 37\), got range \[1, {int(ids.max())}\]"):
        model(ids)
    with pytest.raises(ValueError, match=r"lie in \[0, 37\)"):
        model(torch.as_tensor(ids))


def test_ragged_token_lists_are_refused():
    ragged = [[1, 2, 3], [4]]
    with pytest.raises((TypeError, ValueError)):
        decoder.forward(PARAMS, CONFIG, np.array(ragged, dtype=object))
    m = PLDRModel.from_reference(PARAMS32, CONFIG)
    with pytest.raises((TypeError, ValueError)):
        m(np.array(ragged, dtype=object))


def test_prompt_plus_new_tokens_longer_than_context(model):
    with pytest.raises(ValueError, match="max_seq_len"):
        decoder.generate(PARAMS, CONFIG, PROMPT, 60)
    with pytest.raises(ValueError, match="max_seq_len"):
        model.generate(torch.as_tensor(PROMPT), 60)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        pytest.param({"max_new_tokens": -1}, ValueError, id="negative-count"),
        pytest.param({"max_new_tokens": 2.5}, TypeError, id="float-count"),
        pytest.param({"max_new_tokens": True}, TypeError, id="bool-count"),
        pytest.param({"temperature": float("nan"), "seed": 0}, ValueError, id="nan-temperature"),
        pytest.param({"temperature": float("inf"), "seed": 0}, ValueError, id="inf-temperature"),
        pytest.param({"temperature": -1.0}, ValueError, id="negative-temperature"),
        pytest.param({"top_p": float("nan")}, ValueError, id="nan-top-p"),
        pytest.param({"top_p": 0.0}, ValueError, id="zero-top-p"),
        pytest.param({"top_k": -3}, ValueError, id="negative-top-k"),
        pytest.param({"top_k": 2.5}, TypeError, id="float-top-k"),
        pytest.param({"mode": "fast"}, ValueError, id="unknown-mode"),
    ],
)
def test_generation_arguments(model, kwargs, error):
    args = {"max_new_tokens": 2} | kwargs
    n = args.pop("max_new_tokens")
    with pytest.raises(error):
        decoder.generate(PARAMS, CONFIG, PROMPT, n, **args)
    with pytest.raises(error):
        model.generate(torch.as_tensor(PROMPT), n, **args)


def test_reference_seed_must_be_non_negative():
    with pytest.raises(ValueError, match="seed"):
        decoder.generate(PARAMS, CONFIG, PROMPT, 2, temperature=1.0, seed=-1)


@pytest.mark.parametrize(
    "g",
    [
        pytest.param("nan", id="nan-G"),
        pytest.param("inf", id="inf-G"),
        pytest.param("shape", id="misshaped-G"),
        pytest.param("layers", id="wrong-layer-count"),
    ],
)
def test_bad_constant_g(model, g):
    good = np.broadcast_to(np.eye(8), (1, 2, 8, 8)).copy()
    if g == "nan":
        good[0, 1, 2, 3] = np.nan
    elif g == "inf":
        good[0, 0, 0, 0] = np.inf
    elif g == "shape":
        good = np.zeros((1, 2, 8, 7))
    else:
        good = np.zeros((2, 2, 8, 8))
    with pytest.raises(ValueError):
        decoder.forward(PARAMS, CONFIG, PROMPT, constant_g=list(good))
    with pytest.raises(ValueError):
        model(torch.as_tensor(PROMPT), G=good)


# --- cached steps ----------------------------------------------------------------------------


def test_kernel_step_validates_its_inputs(model):
    cache = model.new_cache(1, 10)
    with pytest.raises(ValueError, match="filled cache"):
        model.step(torch.tensor([[1]]), cache)
    model(torch.as_tensor(PROMPT), cache=cache)
    with pytest.raises(ValueError, match="lie in"):
        model.step(torch.tensor([[99]]), cache)
    with pytest.raises(ValueError, match="shape"):
        model.step(torch.tensor([1]), cache)
    with pytest.raises(TypeError, match="integers"):
        model.step(torch.tensor([[1.5]]), cache)
    with pytest.raises(ValueError, match="batch"):
        model.step(torch.tensor([[1], [2]]), cache)
    with pytest.raises(ValueError, match="mode"):
        model.step(torch.tensor([[1]]), cache, "nocache")
    with pytest.raises(ValueError, match="capacity"):
        model.step(torch.ones(1, 6, dtype=torch.long), cache)
    with pytest.raises(TypeError, match="DecodeCache"):
        model.step(torch.tensor([[1]]), [cache])
    assert cache.length == 5  # nothing was appended by the refused calls


def test_kernel_forward_checks_the_cache(model):
    with pytest.raises(ValueError, match="batch"):
        model(torch.as_tensor(PROMPT), cache=model.new_cache(2, 10))
    with pytest.raises(ValueError, match="capacity"):
        model(torch.as_tensor(PROMPT), cache=model.new_cache(1, 3))
    with pytest.raises(ValueError, match="max_seq_len"):
        model.new_cache(1, CONFIG.max_seq_len + 1)


def test_reference_step_validates_its_inputs():
    result = decoder.forward(PARAMS, CONFIG, PROMPT)
    with pytest.raises(ValueError, match="lie in"):
        decoder.step(PARAMS, CONFIG, np.array([[99]]), result.caches, "kv")
    with pytest.raises(ValueError, match="batch"):
        decoder.step(PARAMS, CONFIG, np.array([[1], [2]]), result.caches, "kv")
    with pytest.raises(ValueError, match="mode"):
        decoder.step(PARAMS, CONFIG, np.array([[1]]), result.caches, "nocache")
    with pytest.raises(ValueError, match="LayerCache"):
        decoder.step(PARAMS, CONFIG, np.array([[1]]), [], "kv")


def test_logit_index_out_of_range(model):
    with pytest.raises(ValueError, match="out of range"):
        model(torch.as_tensor(PROMPT), logits=torch.tensor([7]))
    with pytest.raises(TypeError, match="integer"):
        model(torch.as_tensor(PROMPT), logits=torch.tensor([0.5]))
    with pytest.raises(ValueError, match="logits must be"):
        model(torch.as_tensor(PROMPT), logits="first")


# --- plga_attention --------------------------------------------------------------------------


def _qkv(dtype=torch.float64, b=1, h=2, s=3, t=4, d=4):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, s, d, generator=gen, dtype=dtype)
    k = torch.randn(b, h, t, d, generator=gen, dtype=dtype)
    v = torch.randn(b, h, t, d, generator=gen, dtype=dtype)
    return q, k, v


def _attention_cases():
    q, k, v = _qkv()
    g = torch.eye(4, dtype=torch.float64).expand(2, 4, 4)
    nan = q.clone()
    nan[0, 1, 2, 3] = float("nan")
    inf = v.clone()
    inf[0, 0, 0, 0] = float("inf")
    g_nan = g.clone()
    g_nan[1, 0, 0] = float("nan")
    return [
        pytest.param((q[0], k, v, g), {}, ValueError, "must be \\[B, H, S, d\\]", id="rank-3-q"),
        pytest.param((q, k[:, :1], v[:, :1], g), {}, ValueError, "incompatible", id="head-mismatch"),
        pytest.param((q, k[..., :3], v, g), {}, ValueError, "incompatible", id="depth-mismatch"),
        pytest.param((q, k, v[:, :, :2], g), {}, ValueError, "incompatible", id="kv-length-mismatch"),
        pytest.param((q[:, :, :0], k, v, g), {}, ValueError, "empty", id="empty-queries"),
        pytest.param((q, k[:, :, :0], v[:, :, :0], g), {}, ValueError, "empty", id="empty-keys"),
        pytest.param((q.float(), k, v, g), {}, ValueError, "one dtype", id="q-dtype-mismatch"),
        pytest.param((q, k, v.half(), g), {}, ValueError, "one dtype", id="v-dtype-mismatch"),
        pytest.param((q.long(), k.long(), v.long(), g), {}, ValueError, "floating", id="integer-qkv"),
        pytest.param((q, k, v, g.long()), {}, ValueError, "floating", id="integer-G"),
        pytest.param((q, k, v, torch.eye(3, dtype=torch.float64)), {}, ValueError, "G must be", id="misshaped-G"),
        pytest.param((nan, k, v, g), {}, ValueError, "q has non-finite", id="nan-q"),
        pytest.param((q, k, inf, g), {}, ValueError, "v has non-finite", id="inf-v"),
        pytest.param((q, k, v, g_nan), {}, ValueError, "G has non-finite", id="nan-G"),
        pytest.param((q, k, v, g), {"scale": float("nan")}, ValueError, "scale", id="nan-scale"),
        pytest.param((q.numpy(), k, v, g), {}, TypeError, "torch.Tensor", id="numpy-q"),
        pytest.param((q, k, v, g), {"key_padding_mask": torch.zeros(3, 4, dtype=torch.bool)}, ValueError, "batch", id="mask-batch"),
        pytest.param((q, k, v, g), {"key_padding_mask": torch.zeros(1, 3, dtype=torch.bool)}, ValueError, "key_padding_mask", id="mask-length"),
    ]


@pytest.mark.parametrize(("args", "kwargs", "error", "message"), _attention_cases())
@pytest.mark.parametrize("fn", [plga_attention, plga_attention_eager], ids=["fused", "eager"])
def test_plga_attention_input_errors(fn, args, kwargs, error, message):
    with pytest.raises(error, match=message):
        fn(*args, **kwargs)


def test_unknown_attention_backend():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="backend"):
        plga_attention(q, k, v, backend="flash3")
    m = PLDRModel.from_reference(PARAMS32, CONFIG)
    with pytest.raises(ValueError, match="backend"):
        m(torch.as_tensor(PROMPT), backend="flash3")


def test_validate_false_skips_only_the_finiteness_scan():
    """Why the scan is on by default: torch's fused CPU SDPA turns a NaN query row into zeros
    (observed with torch 2.x), a silently wrong but finite output."""
    q, k, v = _qkv()
    q[0, 0, 0, 0] = float("nan")
    out = plga_attention(q, k, v, validate=False)
    row = out[0, 0, 0]
    assert torch.isnan(row).all() or torch.all(row == 0)
    assert torch.isfinite(out[0, 1]).all()
    with pytest.raises(ValueError, match="incompatible"):
        plga_attention(q, k[..., :3], v, validate=False)


def test_power_stage_refuses_misshaped_parameters():
    a = torch.zeros(1, 2, 4, 4)
    w = torch.zeros(2, 4, 4)
    with pytest.raises(ValueError, match="W must be"):
        KF.power_stage(a, torch.zeros(1, 4, 4), w, w, w, w)  # would broadcast silently over heads
    with pytest.raises(ValueError, match="A must be"):
        KF.power_stage(torch.zeros(2, 4, 3), w, w, w, w, w)


# --- all-padding rows: a documented behaviour, not an error --------------------------------


def test_all_padding_row_is_finite_and_isolated(model):
    """A row that is all padding (id 0) runs the published finite −1e9 mask: every key of that
    row is masked, so its softmax is taken over E − 1e9 (finite, no NaN); other rows are
    unaffected, and reference and kernels agree."""
    tokens = np.array([[0, 0, 0, 0], [3, 17, 5, 29], [0, 0, 4, 9]])
    ref = decoder.forward(PARAMS, CONFIG, tokens)
    assert np.all(np.isfinite(ref.logits))
    with torch.no_grad():
        out = model(torch.as_tensor(tokens)).logits.numpy()
    np.testing.assert_allclose(out, ref.logits, rtol=1e-10, atol=1e-10)
    alone = decoder.forward(PARAMS, CONFIG, tokens[1:2]).logits
    np.testing.assert_allclose(ref.logits[1:2], alone, rtol=1e-12, atol=1e-12)


def test_fully_masked_attention_rows_are_documented():
    """Ideal masking: a query row with no allowed key returns exact zeros. Finite mask (the
    published one): the row is softmax(E − 1e9) over all keys, finite."""
    q, k, v = _qkv(s=4, t=4)
    pad = torch.tensor([[True, True, False, False]])
    ideal = plga_attention(q, k, v, causal=True, key_padding_mask=pad)
    assert torch.all(ideal[:, :, :2] == 0)
    finite = plga_attention(q, k, v, causal=True, key_padding_mask=pad, finite_mask=True)
    assert torch.isfinite(finite).all() and torch.all(finite[:, :, :2] != 0)


# --- non-finite activations --------------------------------------------------------------------


def test_non_finite_weights_given_directly_are_refused():
    bad = dict(PARAMS32)
    bad["decoder.dec_layers.0.ffn.gluw3.bias"] = bad["decoder.dec_layers.0.ffn.gluw3.bias"].copy()
    bad["decoder.dec_layers.0.ffn.gluw3.bias"][0] = np.inf
    with pytest.raises(ValueError, match=r"non-finite .*ffn\.gluw3\.bias"):
        PLDRModel.from_reference(bad, CONFIG)
    # the reference's LayerNorm (Lean conventions) would map the inf row to β: checked before it
    with pytest.raises(decoder.NonFiniteError, match="layer 0: the feed-forward output is not finite"):
        decoder.forward(decoder.to_backend(bad), CONFIG, PROMPT)


def test_activation_overflow_is_reported_by_the_kernels(model):
    """Weights that are finite but overflow the activations (here: float32 embeddings of 1e38)."""
    m = PLDRModel.from_reference(PARAMS32, CONFIG, dtype=torch.float32)
    with torch.no_grad():
        m.decoder.embedding.weight[17].fill_(3e38)
    with pytest.raises(decoder.NonFiniteError, match=r"layer 0: .* not finite"):
        m(torch.as_tensor(PROMPT))
    m.check_finite = False  # the documented opt-out returns the raw values
    with torch.no_grad():
        assert not torch.isfinite(m(torch.as_tensor(PROMPT)).logits).all()


def test_non_finite_logits_are_refused_by_the_sampler():
    """One sampler (plga.reference.sampling) serves both backends; it refuses NaN / inf logits."""
    from plga.errors import NonFiniteError
    from plga.reference.sampling import sample_next

    for bad in (np.nan, np.inf):
        logits = np.array([[0.0, bad, 1.0]])
        for temperature in (0.0, 1.0):
            with pytest.raises(NonFiniteError):
                sample_next(logits, np.random.default_rng(0), temperature=temperature)
