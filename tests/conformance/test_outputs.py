"""What an implementation returns is taken apart inside the guard (``guard.owned_output``): plain
tensors only, cloned, in the protocol's dtypes. Each forgery below got a PASS before; each is a
FAIL now, and the same kernel returning honest tensors is judged on its numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis.errors import UnsatisfiedAssumption

from plga.conformance import check_kernel, oracle
from plga.conformance.adapter import Adapter, GenerateOutput, SkipCheck
from plga.conformance.adapters import ReferenceAdapter
from plga.conformance.guard import BadOutput, call_operation


class _Bomb(torch.Tensor):
    """A tensor subclass whose every torch operation raises ``exc`` — when the suite examines it."""

    exc: BaseException = SkipCheck("lazy")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise cls.exc


def _truth(q, k, v, G, **kw):
    return torch.from_numpy(np.asarray(oracle.truth_attention(q, k, v, G, **kw), dtype=np.float64)).to(q.dtype)


class MasksIgnored(Adapter):
    """Ignores every mask; where one is given, returns a tensor that raises ``exc`` when examined."""

    name, dtypes = "masks_ignored", ("float32",)
    capabilities = frozenset({"attention", "causal", "key_padding_mask"})
    exc: BaseException = SkipCheck("lazy")
    lazy = True

    def attention(self, q, k, v, G, *, causal=False, key_padding_mask=None, scale=None, finite_mask=False):
        out = _truth(q, k, v, G, causal=False, key_padding_mask=None, scale=scale)
        if (causal or key_padding_mask is not None) and self.lazy:
            return out.as_subclass(type("Bomb", (_Bomb,), {"exc": self.exc}))
        return out


@pytest.mark.parametrize("exc", [SkipCheck("lazy"), UnsatisfiedAssumption()], ids=["skip", "assume"])
def test_a_lazy_output_cannot_turn_failures_into_skips(exc):
    forger = type("Forger", (MasksIgnored,), {"exc": exc})()
    report = check_kernel(forger, checks=["attention_causal", "attention_padding"], profile="quick")
    assert report.verdict == "FAIL" and report.counts()["skipped"] == 0
    assert all("plain torch.Tensor" in r.message for r in report.failures)
    # control: the same wrong kernel returning plain tensors fails on its numbers
    honest = type("Honest", (MasksIgnored,), {"lazy": False})()
    report = check_kernel(honest, checks=["attention_causal"], profile="quick")
    assert report.verdict == "FAIL" and "plain torch.Tensor" not in report.failures[0].message


class StaticBuffers(ReferenceAdapter):
    """kv mode broken; results written into buffers the adapter owns (as a captured CUDA graph
    does), so the next call — kvg, correct — overwrites what kv returned."""

    name, dtypes = "static_buffers", ("float64",)
    capabilities = frozenset({"cache_kv", "cache_kvg"})
    fresh = False

    def generate(self, state_dict, config, prompt, max_new_tokens, *, mode, constant_g=None):
        res = super().generate(state_dict, config, prompt, max_new_tokens, mode=mode, constant_g=constant_g)
        tok, steps = res.tokens.clone(), res.step_logits.clone()
        if mode == "kv":
            tok[:, prompt.shape[1]:] = 1
            steps.fill_(123.0)
        if self.fresh:
            return GenerateOutput(tok, steps)
        self.buffers = getattr(self, "buffers", {})
        key = (tuple(tok.shape), tuple(steps.shape))
        bt, bs = self.buffers.setdefault(key, (torch.empty_like(tok), torch.empty_like(steps)))
        bt.copy_(tok)
        bs.copy_(steps)
        return GenerateOutput(bt, bs)


@pytest.mark.parametrize("fresh", [False, True], ids=["static-buffers", "fresh-tensors"])
def test_returned_buffers_overwritten_by_a_later_call_do_not_hide_a_wrong_result(fresh):
    adapter = type("A", (StaticBuffers,), {"fresh": fresh})()
    report = check_kernel(adapter, checks=["cache_modes"], profile="quick")
    assert report.verdict == "FAIL"
    assert "kv" in report.failures[0].message


def _attn(q, k, v, G, **kw):
    return _truth(q, k, v, G, **{n: kw[n] for n in ("causal", "key_padding_mask", "scale")})


def test_outputs_must_be_plain_tensors_in_the_protocol_dtypes():
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 3)
    args = (q, k, v, None)
    kw = dict(causal=False, key_padding_mask=None, scale=None)
    good = call_operation("attention", _attn, *args, **kw)
    assert type(good) is torch.Tensor and good.dtype == torch.float32
    for wrong, needle in [
        (lambda *a, **k: _attn(*a, **k).double(), "must be in q's dtype"),
        (lambda *a, **k: _attn(*a, **k).numpy(), "numpy.ndarray"),
        (lambda *a, **k: _attn(*a, **k).tolist(), "builtins.list"),
        (lambda *a, **k: _attn(*a, **k).as_subclass(_Bomb), "plain torch.Tensor"),
    ]:
        with pytest.raises(BadOutput, match=needle):
            call_operation("attention", wrong, *args, **kw)
    tokens = torch.ones(1, 4, dtype=torch.long)
    for bad_tokens in (tokens.double() + 0.9, tokens.bool()):
        with pytest.raises(BadOutput, match="token ids must be integers"):
            call_operation("generate", lambda *a, t=bad_tokens, **k: GenerateOutput(t, torch.zeros(1, 2, 5)), {}, None, tokens, 2)
    out = call_operation("generate", lambda *a, **k: GenerateOutput(tokens, torch.zeros(1, 2, 5)), {}, None, tokens, 2)
    assert out.tokens is not tokens and torch.equal(out.tokens, tokens)  # the suite's own copy
    with pytest.raises(BadOutput, match="not the four tensors"):
        call_operation("operator_chain", lambda q, w: (q, q), torch.ones(1, 1, 2, 2), {})


class NarrowChain(Adapter):
    """The chain computed right, returned in float16 (the tolerance used to follow the output's dtype)."""

    name, dtypes = "narrow_chain", ("float64",)
    capabilities = frozenset({"operator_chain"})
    narrow = torch.float16

    def operator_chain(self, q_rot, layer_weights):
        from plga.conformance import eager

        return tuple(t.to(self.narrow) for t in eager.operator_chain(q_rot, layer_weights))


def test_the_chain_is_judged_in_its_own_dtype_not_the_returned_one():
    assert check_kernel(NarrowChain(), checks=["operator_chain"], profile="quick").verdict == "FAIL"
    control = type("Wide", (NarrowChain,), {"narrow": torch.float64})()
    assert check_kernel(control, checks=["operator_chain"], profile="quick").verdict == "PASS"


class Finite16(ReferenceAdapter):
    """The reference rounded to float16 (correct), or with the finite mask computed as the ideal
    one (the control ``finite_mask_as_ideal``), or zeros."""

    name, dtypes = "fp16", ("float16",)
    capabilities = frozenset({"attention", "causal", "key_padding_mask", "finite_mask"})
    bug = ""

    def attention(self, q, k, v, G, *, finite_mask=False, **kw):
        if self.bug == "zeros":
            return torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
        return super().attention(q, k, v, G, finite_mask=finite_mask and self.bug != "ideal", **kw)


def test_a_baseline_that_overflows_does_not_make_the_bound_infinite():
    from plga.conformance.tolerance import compare

    truth = np.array([1.0, 2.0, 3.0])
    broken = np.array([1.0, np.nan, 3.0])  # the suite's float16 baseline where −1e9 overflowed
    cmp = compare(np.zeros(3), [broken], truth, dtype="float16")
    assert np.isfinite(cmp.bound) and not cmp.passed
    # −1e9 overflows float16: every eager baseline is NaN on a fully masked row
    for bug in ("zeros", "ideal"):
        report = check_kernel(type("W", (Finite16,), {"bug": bug})(), checks=["attention_finite_mask"], profile="quick")
        assert report.verdict == "FAIL", bug
    assert check_kernel(Finite16(), checks=["attention_finite_mask"], profile="quick").verdict == "PASS"


class WrongOperators(ReferenceAdapter):
    """Right logits; the G_LM it reports scaled by ``factor`` (or one layer short)."""

    name, dtypes = "wrong_g_lm", ("float64",)
    capabilities = frozenset({"forward"})
    factor, drop = 1.01, False

    def forward(self, state_dict, config, tokens, *, constant_g=None):
        from plga.conformance.adapter import ForwardOutput

        out = super().forward(state_dict, config, tokens, constant_g=constant_g)
        g = [x * self.factor for x in out.G_LM]
        return ForwardOutput(out.logits, g[:-1] if self.drop else g)


def test_the_operators_a_forward_reports_are_checked():
    for wrong in ({}, {"factor": 1.0, "drop": True}):
        report = check_kernel(type("W", (WrongOperators,), wrong)(), checks=["forward_logits"], profile="quick")
        assert report.verdict == "FAIL" and "G_LM" in report.failures[0].message, wrong
    control = type("Right", (WrongOperators,), {"factor": 1.0})()
    assert check_kernel(control, checks=["forward_logits", "forward_golden"], profile="quick").verdict == "PASS"


class _BackwardEscapes(torch.autograd.Function):
    """The truth forward; a backward that raises ``exc`` (set on the subclass)."""

    exc: BaseException = SkipCheck("no backward for this case")

    @staticmethod
    def forward(ctx, q, k, v, G, causal, pad, scale):
        return _truth(q.detach(), k.detach(), v.detach(), None if G is None else G.detach(), causal=causal,
                      key_padding_mask=pad, scale=scale)

    @staticmethod
    def backward(ctx, grad):
        raise _BackwardEscapes.exc


class BackwardEscapes(Adapter):
    """A right forward whose autograd backward raises; ``plain`` computes the right gradients
    (torch's autograd through the eager formula) instead."""

    name, dtypes = "backward_escapes", ("float32",)
    capabilities = frozenset({"attention", "causal", "key_padding_mask", "backward"})
    plain = False

    def attention(self, q, k, v, G, *, causal=False, key_padding_mask=None, scale=None, finite_mask=False):
        if self.plain:
            from plga.conformance import eager

            return eager.plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale)
        return _BackwardEscapes.apply(q, k, v, G, causal, key_padding_mask, scale)


@pytest.mark.parametrize("exc", [SkipCheck("no backward for this case"), UnsatisfiedAssumption()], ids=["skip", "assume"])
def test_an_escape_from_the_kernels_backward_fails_the_check(exc, monkeypatch):
    """The backward runs the implementation's code outside any operation call: a SkipCheck (or a
    Hypothesis assumption) from it used to turn the check into a skip; it is the kernel's failure."""
    monkeypatch.setattr(_BackwardEscapes, "exc", exc)
    report = check_kernel(BackwardEscapes(), checks=["attention_backward[float32]"], profile="quick")
    assert report.verdict == "FAIL" and report.counts()["skipped"] == 0, report.summary()
    assert f"attention backward raised {type(exc).__name__}" in report.failures[0].message
    # control: the same forward with a working backward passes
    plain = type("Plain", (BackwardEscapes,), {"plain": True})()
    assert check_kernel(plain, checks=["attention_backward[float32]"], profile="quick").verdict == "PASS"


def test_only_the_suite_skips_a_check():
    """A SkipCheck reaching the check from anywhere but the suite (here: raised from inside the
    check's body, as an injected one would be) fails it; the suite's own skip still skips."""
    from plga.conformance import checks
    from plga.conformance.adapter import is_suite_skip, skip_check
    from plga.conformance.guard import KernelCrash

    assert is_suite_skip(skip_check("x")) and not is_suite_skip(SkipCheck("x"))
    adapter = BackwardEscapes()
    real = checks.CHECKS["attention_unmasked"]
    for raised, caught in ((SkipCheck("forged"), KernelCrash), (skip_check("the suite's"), SkipCheck)):
        def body(ctx, raised=raised):
            raise raised

        checks.CHECKS["attention_unmasked"] = checks.dataclasses.replace(real, fn=body)
        try:
            with pytest.raises(caught) as info:
                checks.run_check(adapter, "attention_unmasked", "float32")
        finally:
            checks.CHECKS["attention_unmasked"] = real
        assert (caught is KernelCrash) == ("only the suite decides" in str(info.value))


@pytest.mark.parametrize("make", [lambda out: out.to("meta"), lambda out: out.to_sparse()], ids=["meta", "sparse"])
def test_a_tensor_without_dense_values_is_a_bad_output(make):
    """A meta tensor (shape, no values) or a sparse one is named as such, inside the guard; it used
    to surface as torch's own error from the comparison."""
    def attn(q, k, v, G, *, causal=False, key_padding_mask=None, scale=None):
        return make(_truth(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale))

    report = check_kernel(attn, checks=["attention_unmasked[float32]"], profile="quick")
    assert report.verdict == "FAIL"
    assert "the protocol asks for a dense tensor holding its values" in report.failures[0].message, report.failures[0].message
