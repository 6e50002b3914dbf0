"""The run's memo of the suite's own results (:mod:`plga.conformance.memo`): equal inputs share a
result, any difference in value, dtype, shape or type gets its own, and a caller cannot change
what the next one receives."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from plga.conformance import memo
from plga.reference.config import PLDRConfig


def _state(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return {f"w{i}": torch.randn(3, 4, generator=g).to(dtype) for i in range(5)}


@pytest.mark.parametrize("scoped", [False, True])
def test_digest_tells_apart_every_difference_in_content(scoped):
    with memo.scope() if scoped else contextlib.nullcontext():
        a, b = _state(), _state()
        assert memo.digest(a, "kv", 3) == memo.digest(b, "kv", 3)  # other objects, same contents
        assert memo.digest(a, "kv", 3) != memo.digest(a, "kvg", 3)
        assert memo.digest(a, "kv", 3) != memo.digest(a, "kv", 4)
        assert memo.digest(a) != memo.digest(_state(torch.bfloat16))  # dtype
        b["w2"] = b["w2"].clone()
        b["w2"][0, 0] += 1e-7
        assert memo.digest(a) != memo.digest(b)  # one value
        assert memo.digest(a) != memo.digest({**a, "w0": a["w0"].reshape(4, 3)})  # shape
        x = np.arange(6.0)
        assert memo.digest(x) != memo.digest(torch.from_numpy(x))  # type
        assert memo.digest(x) != memo.digest(x.astype(np.float32))
        assert memo.digest(PLDRConfig.from_name("tiny")) != memo.digest(PLDRConfig.from_name("small"))
        assert memo.digest(None) != memo.digest(0) != memo.digest("0")
        with pytest.raises(TypeError, match="no content digest"):
            memo.digest(object())


@pytest.mark.parametrize("chunk", [1, 1 << 24])
def test_a_state_dict_digest_keeps_the_boundaries_between_tensors(monkeypatch, chunk):
    """A state dict's values are hashed concatenated (per dtype and device, in updates of up to
    ``CHUNK_BYTES``): the names, dtypes and shapes hashed before them keep the tensors apart."""
    monkeypatch.setattr(memo, "CHUNK_BYTES", chunk)
    t = torch.tensor
    split = lambda a, b: {"a": t(a), "b": t(b)}  # noqa: E731
    assert memo.digest(split([1.0, 2.0], [3.0])) == memo.digest(split([1.0, 2.0], [3.0]))
    assert memo.digest(split([1.0, 2.0], [3.0])) != memo.digest(split([1.0], [2.0, 3.0]))  # same bytes in a row
    assert memo.digest({"a": t([1.0])}) != memo.digest({"c": t([1.0])})  # a name
    mixed = {"a": t([1.0]), "b": t([1], dtype=torch.int32), "c": t([True]), "d": t([2.0], dtype=torch.float64)}
    assert memo.digest(mixed) == memo.digest({k: v.clone() for k, v in mixed.items()})
    assert memo.digest(mixed) != memo.digest({**mixed, "b": mixed["b"].view(torch.float32)})  # the same bits as another dtype
    strided = torch.arange(6.0).reshape(2, 3).t()
    assert memo.digest({"a": strided}) == memo.digest({"a": strided.contiguous()})  # values, not layout
    assert memo.digest({"w": t([1.0, 2.0], requires_grad=True)}) == memo.digest({"w": t([1.0, 2.0])})


def test_a_state_changed_in_place_is_digested_again():
    """Inside a run the digests of tensors and state dicts are kept: an in-place change (its
    version moves), a replaced entry or a new key gives a new digest."""
    with memo.scope():
        s = _state()
        first, w1 = memo.digest(s), s["w1"].clone()
        assert memo.digest(s) == first
        s["w1"].add_(1.0)
        changed = memo.digest(s)
        assert changed != first
        s["w1"] = w1
        assert memo.digest(s) == memo.digest(_state())  # a new tensor object, the first contents
        s["extra"] = torch.zeros(1)
        assert memo.digest(s) != memo.digest(_state())


def test_remembered_computes_once_a_run_and_hands_out_copies():
    calls = []

    def compute():
        calls.append(1)
        return {"logits": np.ones(3)}

    memo.remembered(compute, "f", _state())
    memo.remembered(compute, "f", _state())
    assert len(calls) == 2  # outside a run: computed every time
    with memo.scope():
        got = memo.remembered(compute, "f", _state())
        got["logits"][0] = 99.0  # a caller changing its copy
        again = memo.remembered(compute, "f", _state())
        assert len(calls) == 3 and again["logits"][0] == 1.0
        memo.remembered(compute, "f", _state(torch.bfloat16))
        assert len(calls) == 4
    with memo.scope():  # a new run starts empty
        memo.remembered(compute, "f", _state())
        assert len(calls) == 5


def test_a_run_keeps_the_truth_of_a_case_once(monkeypatch):
    """Through the oracle: the float64 truth of one case is computed once a run, and a control
    the memo could hide (another dtype's weights, another mode) is computed anew."""
    from plga.conformance import oracle
    from plga.reference import decoder
    from plga.reference.checkpoint import random_params

    seen = []
    real = decoder.generate

    def spy(*args, **kwargs):
        seen.append(args[4])
        return real(*args, **kwargs)

    monkeypatch.setattr(decoder, "generate", spy)
    config = PLDRConfig.from_name("tiny")
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in random_params(config, seed=0).items()}
    prompt = np.array([[5, 6, 7]])
    with memo.scope():
        a = oracle.truth_generate(state, config, prompt, 2, "kv")
        b = oracle.truth_generate({k: v.clone() for k, v in state.items()}, config, prompt, 2, "kv")
        oracle.truth_generate(state, config, prompt, 2, "kvg")
        oracle.truth_generate({k: v.to(torch.bfloat16) for k, v in state.items()}, config, prompt, 2, "kv")
    assert seen == ["kv", "kvg", "kv"]
    assert np.array_equal(a.tokens, b.tokens) and a.tokens is not b.tokens
