"""Sloppy but ordinary implementations get a verdict, never the suite's own ERROR (an outside
audit, 2026-12-07): an exception whose ``__str__`` raises, a nested or squeezed output, a
library that turns autograd off or makes numpy raise on underflow when imported, a result that
is wrong only the first time a shape is seen, a device or a feature table torch or the suite
cannot read. Before, each of these reported "a bug in plga" (exit 3) or a traceback; each test
shows the failure mode it guards against with the fix switched off, or the same kernel without
its quirk passing.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pytest
import torch

from plga.conformance import adapter as adapter_mod
from plga.conformance import check_kernel, checks, guard, oracle
from plga.conformance.adapter import Adapter, as_adapter
from plga.errors import ImplementationLoadError


def _truth(q: Any, k: Any, v: Any, G: Any, **kw: Any) -> Any:
    return torch.from_numpy(np.asarray(oracle.truth_attention(q, k, v, G, **kw), dtype=np.float64)).to(q.dtype)


def _attn(q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None, scale: Any = None) -> Any:
    return _truth(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale)


class KernelError(RuntimeError):
    """An exception class whose message reads a field only some paths set."""

    def __str__(self) -> str:
        return f"unsupported shape {self.shape}"  # type: ignore[attr-defined]


def test_an_exception_whose_str_raises_is_a_failure_not_an_error():
    def attn(q: Any, k: Any, v: Any, G: Any, **kw: Any) -> Any:
        raise KernelError()

    report = check_kernel(attn, checks=["attention_unmasked[float32]"], profile="quick", shrink=False)
    assert report.verdict == "FAIL" and not report.errors, report.summary()
    assert "attention raised KernelError: <str() of its KernelError raised AttributeError>" in report.failures[0].message


def test_a_factory_raising_such_an_exception_is_a_load_error():
    def make() -> Any:
        raise KernelError()

    with pytest.raises(ImplementationLoadError, match=r"raised KernelError: <str\(\) of its KernelError raised AttributeError>"):
        as_adapter(make)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("shape_of", ["nested", "squeezed"])
def test_a_nested_or_squeezed_output_is_a_bad_output(shape_of):
    """A nested tensor passed as a plain strided tensor and raised in the suite's conversion; a
    squeezed S = 1 output raised in batched_equals_slices' concatenation."""
    def attn(q: Any, k: Any, v: Any, G: Any, **kw: Any) -> Any:
        out = _attn(q, k, v, G, **kw)
        if shape_of == "nested":
            return torch.nested.as_nested_tensor(list(out))
        return out.squeeze()

    report = check_kernel(attn, checks=["batched_equals_slices[float32]"], profile="quick", shrink=False)
    assert report.verdict == "FAIL" and not report.errors, report.summary()
    want = "as a nested tensor" if shape_of == "nested" else "the output is [B, H, S, dv]"
    assert want in report.failures[0].message, report.failures[0].message
    assert check_kernel(_attn, checks=["batched_equals_slices[float32]"], profile="quick").verdict == "PASS"


@contextlib.contextmanager
def _process_setting(kind: str):
    """What a library may do when imported: numpy raising on every floating-point error, or
    autograd switched off."""
    if kind == "numpy raises":
        before = np.seterr(all="raise")
        try:
            yield
        finally:
            np.seterr(**before)
    else:
        with torch.no_grad():
            yield


@pytest.mark.parametrize("kind, check", [("numpy raises", "sentinel_g[float32]"),
                                         ("autograd off", "attention_backward[float32]")])
def test_process_settings_of_an_imported_library_do_not_break_the_suite(kind, check, monkeypatch):
    def attn(q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None, scale: Any = None) -> Any:
        with np.errstate(all="ignore"), torch.enable_grad():  # the library sets what it needs for itself
            from plga.conformance import eager
            return eager.plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale,
                                        order="natural")

    attn.plga_capabilities = ("attention", "causal", "key_padding_mask", "backward")  # type: ignore[attr-defined]
    with _process_setting(kind):
        before = (np.geterr(), torch.is_grad_enabled())
        report = check_kernel(attn, checks=[check], profile="quick")
        assert (np.geterr(), torch.is_grad_enabled()) == before  # the caller's settings are restored
        assert report.verdict == "PASS", report.summary()
        # negative control: without the suite's numeric settings the suite's own code raises
        monkeypatch.setattr(checks, "suite_numerics", contextlib.nullcontext)
        report = check_kernel(attn, checks=[check], profile="quick")
    assert report.verdict == "ERROR", report.summary()


def test_settings_changed_inside_a_call_are_put_back(monkeypatch):
    """A kernel that leaves numpy raising after its call: the suite's next truth still runs."""
    def attn(q: Any, k: Any, v: Any, G: Any, **kw: Any) -> Any:
        out = _attn(q, k, v, G, **kw)
        np.seterr(all="raise")  # set for the library's next call, never put back
        return out

    before = np.geterr()
    try:
        report = check_kernel(attn, checks=["attention_padding[float32]"], profile="quick")
    finally:
        np.seterr(**before)
    assert report.verdict == "PASS", report.summary()
    assert np.geterr() == before
    monkeypatch.setattr(guard, "_restore_numerics", lambda state: None)  # negative control
    try:
        report = check_kernel(attn, checks=["attention_padding[float32]"], profile="quick")
    finally:
        np.seterr(**before)
    assert report.verdict == "ERROR", report.summary()


def test_a_wrong_result_that_does_not_recur_on_replay_is_a_failure():
    """Wrong the first time each shape is seen at d = 3 (a fallback while a plan is built), right
    after: Hypothesis reports the replayed case as flaky, which the runner took for a suite bug."""
    seen: set[Any] = set()

    def attn(q: Any, k: Any, v: Any, G: Any, **kw: Any) -> Any:
        key = (tuple(q.shape), tuple(k.shape), tuple(v.shape))
        cold = key not in seen
        seen.add(key)
        out = _attn(q, k, v, G, **kw)
        return out + 1.0 if cold and q.shape[-1] == 3 else out

    attn.plga_capabilities = ("attention",)  # type: ignore[attr-defined]
    report = check_kernel(attn, checks=["attention_unmasked[float64]"], profile="quick")
    assert report.verdict == "FAIL" and not report.errors, report.summary()
    assert "Not reproducible" in report.failures[0].message


@pytest.mark.parametrize("device, message", [("gpu", "is not a torch device name"), (None, "must be a torch device name")])
def test_a_device_torch_does_not_know_is_a_load_error(device, message):
    def attn(q: Any, k: Any, v: Any, G: Any, **kw: Any) -> Any:
        return _attn(q, k, v, G, **kw)

    attn.plga_device = device  # type: ignore[attr-defined]
    with pytest.raises(ImplementationLoadError, match=message):
        as_adapter(attn)


def test_a_device_this_process_cannot_use_skips_its_checks():
    if checks.device_missing("xpu") is None:
        pytest.skip("this torch build can use xpu")

    class OnXpu(Adapter):
        name, device, dtypes, capabilities = "on xpu", "xpu", ("float32",), frozenset({"attention"})

    report = check_kernel(OnXpu, checks=["attention_unmasked[float32]"], profile="quick")
    assert report.verdict == "NOTHING VERIFIED" and not report.errors, report.summary()
    assert "runs on xpu but this process cannot use it" in report.results[0].message


def test_a_feature_table_is_not_a_declaration():
    """``{"key_padding_mask": False}`` used to declare key padding (its keys were read)."""
    class Table(Adapter):
        name, dtypes = "table", ("float32",)
        capabilities = {"attention": True, "key_padding_mask": False}  # type: ignore[assignment]  # noqa: RUF012

    with pytest.raises(ImplementationLoadError, match="capabilities must be a collection of names"):
        as_adapter(Table)

    def attn(q: Any, k: Any, v: Any, G: Any, **kw: Any) -> Any:
        return _attn(q, k, v, G, **kw)

    attn.plga_dtypes = "float32"  # type: ignore[attr-defined]
    with pytest.raises(ImplementationLoadError, match=r"plga_dtypes must be a collection of names .* got 'float32'"):
        adapter_mod.CallableAdapter(attn)
