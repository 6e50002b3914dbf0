"""The decode fast path: fused, transposed weight copies (never in the state dict), rebuilt
when parameters change; the meta-device construction of ``from_reference``."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from plga.kernels import PLDRModel
from plga.reference.config import PLDRConfig

from .kernel_helpers import model_pair
from .policy import assert_rel_close

PROMPT = torch.tensor([[5, 9, 1, 30, 2], [0, 0, 3, 4, 5]])


def _steps(model: PLDRModel, mode: str, grad: bool, n: int = 4, s_new: int = 1) -> list[torch.Tensor]:
    cache = model.new_cache(PROMPT.shape[0], PROMPT.shape[1] + n * s_new)
    out = []
    with torch.no_grad():
        model(PROMPT, logits="last", cache=cache)
    with torch.set_grad_enabled(grad):
        for t in range(n):
            toks = torch.arange(1, s_new + 1).repeat(PROMPT.shape[0], 1) + t
            logits = model.step(toks, cache, mode, logits="all")
            out.append(logits.detach())
    return out


@pytest.mark.parametrize("mode", ["kv", "kvg"])
@pytest.mark.parametrize("s_new", [1, 3])
def test_fast_step_matches_the_module_path(mode, s_new):
    """Steps without grad (fused copies) equal steps with grad (nn.Linear path) to rounding."""
    _, model = model_pair(PLDRConfig.from_name("tiny"), 11)
    fast = _steps(model, mode, grad=False, s_new=s_new)
    slow = _steps(model, mode, grad=True, s_new=s_new)
    for a, b in zip(fast, slow, strict=True):
        assert_rel_close(a, b, rtol=1e-12)


@pytest.mark.parametrize("dff", [13, 16, 24])
def test_fused_full_pass_matches_the_module_path(dff):
    """A full pass without autograd (packed QKV, gluw1|gluw2 zero-padded to 8·P) equals the
    nn.Linear path to rounding, logits and deductive tensors, left padding included."""
    config = dataclasses.replace(PLDRConfig.from_name("tiny"), dff=dff)
    _, model = model_pair(config, 14)
    with torch.no_grad():
        fast = model(PROMPT, logits="all", deductive=True)
    slow = model(PROMPT, logits="all", deductive=True)
    assert_rel_close(fast.logits, slow.logits.detach(), rtol=1e-12, name="logits")
    for a, b in zip(fast.deductive, slow.deductive, strict=True):
        assert_rel_close(a["G_LM"], b["G_LM"].detach(), rtol=1e-12, name="G_LM")
    layer = model.decoder.dec_layers[0]
    w12, _, n = model._packed.layer(0, layer.mha1, layer.ffn, model.device)[2]
    parts = w12.shape[0]
    assert n == parts * w12.shape[2] and n % (16 * parts) == 0 and n >= 2 * dff


def test_packed_copies_follow_the_thread_count():
    """The column blocks match the intra-op threads at build time; a change rebuilds them."""
    _, model = model_pair(PLDRConfig.from_name("tiny"), 15)
    before = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 3):
            torch.set_num_threads(threads)
            outs.append(model.generate(PROMPT, 4, "kvg", return_step_logits=True).step_logits)
            assert model._packed.final(model.final_layer, model.device)[0].shape[0] == threads
    finally:
        torch.set_num_threads(before)
    assert_rel_close(outs[0], outs[1], rtol=1e-12)


def test_vocabulary_projection_runs_on_vocab_threads(monkeypatch):
    """With ``vocab_threads`` the vocabulary product (packed GEMV, and the module path) runs on
    that many intra-op threads, the layers on the caller's setting, which is restored; the
    logits do not change. Negative control: without it the product runs on the caller's one."""
    import plga.kernels.model as M

    _, model = model_pair(PLDRConfig.from_name("tiny"), 16)
    vocab = model.config.input_vocab_size
    seen: dict[str, list[int]] = {"vocab": [], "layer": []}

    def spy(x, w, b, n, **kw):
        seen["vocab" if n == vocab else "layer"].append(torch.get_num_threads())
        return packed_linear(x, w, b, n, **kw)

    packed_linear = M.packed_linear
    monkeypatch.setattr(M, "packed_linear", spy)
    before = torch.get_num_threads()
    outs = {}
    try:
        torch.set_num_threads(1)
        for wide in (None, 3):
            model.vocab_threads = wide
            seen["vocab"].clear(), seen["layer"].clear()
            outs[wide] = model.generate(PROMPT, 4, "kvg", return_step_logits=True).step_logits
            assert set(seen["vocab"]) == {wide or 1} and set(seen["layer"]) == {1}, seen
            assert torch.get_num_threads() == 1, "the caller's setting is restored"
        assert model._packed.final(model.final_layer, model.device, threads=3)[0].shape[0] == 3  # blocks for 3 threads
        hooked: list[int] = []  # a hook keeps the module path: logits="all" through nn.Linear
        handle = model.final_layer.register_forward_hook(lambda *_: hooked.append(torch.get_num_threads()))
        try:
            model(PROMPT, logits="all")
        finally:
            handle.remove()
        assert hooked == [3]
    finally:
        model.vocab_threads = None
        torch.set_num_threads(before)
    assert_rel_close(outs[3], outs[None], rtol=1e-12)


def test_fast_last_logits_match_forward():
    _, model = model_pair(PLDRConfig.from_name("tiny"), 12)
    full = torch.cat([PROMPT, torch.tensor([[7], [8]])], 1)
    ref = model(full, logits="all", G="identity").logits[:, -1]
    cache = model.new_cache(2, 6)
    with torch.no_grad():
        model(PROMPT, logits="last", G="identity", cache=cache)
        got = model.step(torch.tensor([[7], [8]]), cache, G="identity")
    assert_rel_close(got, ref, rtol=1e-10)


def test_decode_copies_are_not_state_and_follow_parameter_changes():
    _, model = model_pair(PLDRConfig.from_name("tiny"), 13)
    keys = list(model.state_dict())
    model.generate(PROMPT, 3, "kv")
    assert model._packed, "the decode copies were built"
    assert list(model.state_dict()) == keys  # nothing persistent registered
    before = model.generate(PROMPT, 4, "kvg", return_step_logits=True).step_logits
    with torch.no_grad():  # in-place change: version bump invalidates the copies
        model.final_layer.weight.mul_(2.0)
        model.decoder.dec_layers[0].ffn.gluw2.bias.add_(0.5)
    after = model.generate(PROMPT, 4, "kvg", return_step_logits=True).step_logits
    assert not torch.allclose(before, after)
    _, fresh = model_pair(PLDRConfig.from_name("tiny"), 13)
    fresh.load_state_dict(model.state_dict())
    ref = fresh.generate(PROMPT, 4, "kvg", return_step_logits=True).step_logits
    assert torch.equal(after, ref)
    # load_state_dict into a model with built copies also invalidates them
    model.load_state_dict(fresh.state_dict() | {"final_layer.bias": fresh.final_layer.bias + 1.0})
    shifted = model.generate(PROMPT, 1, "kvg", return_step_logits=True).step_logits
    assert_rel_close(shifted, ref[:, :1] + 1.0, rtol=1e-12)


def test_dtype_cast_rebuilds_copies():
    _, model = model_pair(PLDRConfig.from_name("tiny"), 14)
    model.generate(PROMPT, 3, "kv")
    m32 = model.to(torch.float32)
    out = m32.generate(PROMPT, 3, "kv", return_step_logits=True).step_logits
    assert out.dtype == torch.float32
    packed = m32._packed.all_tensors()
    assert packed and all(t.dtype == torch.float32 for t in packed)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_from_reference_loads_exactly_without_random_init(dtype):
    params, model = model_pair(PLDRConfig.from_name("tiny"), 15, dtype=dtype)
    torch.manual_seed(0)
    state0 = torch.random.get_rng_state()
    again = PLDRModel.from_reference(params, model.config, dtype=dtype)
    assert torch.equal(torch.random.get_rng_state(), state0)  # no init drew random numbers
    for k, v in model.state_dict().items():
        w = again.state_dict()[k]
        assert w.dtype == v.dtype and w.device.type == "cpu" and torch.equal(w, v)
    assert all(not p.is_meta for p in again.parameters())
    with torch.no_grad():
        assert torch.equal(again(PROMPT).logits, model(PROMPT).logits)  # real RoPE tables, not meta


@pytest.mark.parametrize("captured", [False, True])
def test_generate_steps_still_report_non_finite_hidden_states(captured):
    """generate's own steps check the last layer's hidden state (non-finite rows propagate),
    captured (``compile_decode``: the flag is computed in the graph) or not."""
    from plga.errors import NonFiniteError

    _, model = model_pair(PLDRConfig.from_name("tiny"), 16, dtype=torch.float32)
    prompt = torch.tensor([[5, 9, 1]])
    greedy = model.generate(prompt, 1, "kvg").tokens[0, -1]
    with torch.no_grad():
        model.decoder.embedding.weight[greedy].fill_(3e38)  # overflows only when generated
    model.compile_decode = captured
    # captured: the flags of every step are checked after the last, naming sequence positions
    # (the overflowing token sits at position 3; the next step attends to its key)
    where = r" at positions \[3, 4\]" if captured else ""
    with pytest.raises(NonFiniteError, match=r"layer \d+: the hidden state is not finite" + where):
        model.generate(prompt, 3, "kvg")
    # sampling reads each step's logits on the host: the flags are checked first, naming the layer
    with pytest.raises(NonFiniteError, match=r"layer \d+: the hidden state is not finite"):
        model.generate(prompt, 3, "kvg", temperature=1.0, top_k=1, seed=0)  # top-1: the greedy token


def test_collapse_under_inference_mode_keeps_ordinary_parameters():
    """A model collapsed inside torch.inference_mode() must still use the fast decode path."""
    import torch

    from plga.kernels import PLDRModel
    from plga.reference.checkpoint import random_params
    from plga.reference.config import PLDRConfig

    config = PLDRConfig.from_name("tiny")
    model = PLDRModel.from_reference(random_params(config), config, dtype=torch.float32)
    with torch.inference_mode():
        collapsed = model.collapse_from(torch.tensor([[3, 5, 7, 9]]))
    assert not any(p.is_inference() for p in collapsed.parameters())
    layer = collapsed.decoder.dec_layers[0]
    assert collapsed._packed.layer(0, layer.mha1, layer.ffn, collapsed.device) is not None


def test_forward_hooks_fire_without_autograd():
    """A hook on an nn.Linear (activation capture, the audit's probes) keeps the module path
    under no_grad / inference_mode, where the packed copies would bypass it; same numbers."""
    _, model = model_pair(PLDRConfig.from_name("tiny"), 16)
    with torch.inference_mode():
        fused = model(PROMPT, logits="last").logits
    seen = []
    handle = model.decoder.dec_layers[0].ffn.gluw3.register_forward_hook(lambda _m, _i, out: seen.append(out.shape))
    try:
        with torch.inference_mode():
            hooked = model(PROMPT, logits="last").logits
            model.generate(PROMPT, 2, "kvg")
    finally:
        handle.remove()
    assert len(seen) == 3  # the prompt pass, the generate prompt pass, one cached step
    assert_rel_close(hooked, fused, rtol=1e-12)


def test_eager_backend_stays_on_the_modules():
    """backend="eager" is the published algorithm (the bench's baseline): no packed copies,
    even without autograd."""
    _, model = model_pair(PLDRConfig.from_name("tiny"), 17)
    with torch.inference_mode():
        eager = model(PROMPT, logits="last", backend="eager").logits
    assert not model._packed
    with torch.inference_mode():
        fused = model(PROMPT, logits="last").logits
    assert model._packed
    assert_rel_close(fused, eager, rtol=1e-12)


@pytest.mark.parametrize("mode", ["kv", "kvg"])
def test_generate_looks_up_the_packed_fields_once(monkeypatch, mode):
    """Generate's uncaptured steps share one lookup of the packed fields (the prompt pass makes
    the other), and emit what forward + step() — each step looking its fields up — emit, bit for
    bit: the rotation rows a step slices are the ones it would have looked up."""
    _, model = model_pair(PLDRConfig.from_name("tiny"), 18)
    n = 5
    cache = model.new_cache(PROMPT.shape[0], PROMPT.shape[1] + n - 1)
    with torch.inference_mode():
        logits = model(PROMPT, logits="last", cache=cache).logits
        manual = [logits]
        for _ in range(n - 1):
            logits = model.step(torch.argmax(logits, -1)[:, None], cache, mode)
            manual.append(logits)
    calls = []
    lookup = PLDRModel._packed_fields
    monkeypatch.setattr(PLDRModel, "_packed_fields", lambda self, *a, **k: calls.append(a) or lookup(self, *a, **k))
    out = model.generate(PROMPT, n, mode, return_step_logits=True)
    assert len(calls) == 2, calls  # the prompt pass and the generation, not one per step
    assert torch.equal(out.step_logits, torch.stack(manual, 1))
