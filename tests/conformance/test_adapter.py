"""The adapter protocol, the one switch, and the third-party entry points."""

import warnings

import pytest

from plga.conformance import (
    Adapter,
    SkipCheck,
    as_adapter,
    check_kernel,
    parametrize_with_checks,
    quick_summary,
    resolve_impl,
)
from plga.conformance.adapter import CallableAdapter
from plga.conformance.broken import transposed_g
from plga.conformance.eager import plga_attention


def my_attention(q, k, v, G, *, causal=False, key_padding_mask=None, scale=None):
    """A third party's attention: what a kernel engineer passes to the suite."""
    return plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale)


@parametrize_with_checks([my_attention], groups=["structure"])
def test_third_party_parametrize_with_checks(impl, check):
    check(impl)


def test_plain_callable_is_an_attention_only_adapter():
    a = as_adapter(my_attention)
    assert isinstance(a, CallableAdapter)
    assert a.capabilities == {"attention", "causal", "key_padding_mask"}
    with pytest.raises(SkipCheck, match="does not declare capability 'operator_chain'"):
        a.require("operator_chain")


def test_switch_aliases_and_env(monkeypatch):
    assert "reference" in resolve_impl("reference").name
    monkeypatch.setenv("PLGA_IMPL", "plga.conformance.broken:transposed_g")
    a = resolve_impl()
    assert isinstance(a, CallableAdapter) and "transposed_g" in a.name
    monkeypatch.delenv("PLGA_IMPL")
    assert resolve_impl().name.startswith("plga.kernels")  # the project's kernels are the default
    with pytest.raises(ValueError, match="cannot import module"):
        resolve_impl("no_such_module_xyz:thing")
    with pytest.raises(ValueError, match="has no attribute"):
        resolve_impl("plga.conformance.broken:nothing_here")


def test_missing_capabilities_skip_with_named_reason():
    report = check_kernel(my_attention, groups=["chain", "decoder"], shrink=False)
    assert report.counts()["skipped"] == len(report.results) > 0
    assert all("does not declare capability" in r.message for r in report.results)


def test_expected_failures_become_xfail_and_unmatched_warn():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = check_kernel(transposed_g, checks=["sentinel_g[float32]"], shrink=False,
                              expected_failures={"sentinel_g": "known: reads G transposed", "no_such_check": "x"})
    assert [r.status for r in report.results] == ["xfailed"]
    assert report.passed
    assert any("match no check" in str(w.message) for w in caught)


def test_adapter_subclass_and_factory():
    class Mine(Adapter):
        name = "mine"
        dtypes = ("float32",)
        capabilities = frozenset({"attention"})

        def attention(self, q, k, v, G, *, causal=False, key_padding_mask=None, scale=None, finite_mask=False):
            return plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale)

    assert as_adapter(Mine).name == "mine"
    assert as_adapter(lambda: Mine()).name == "mine"
    report = check_kernel(Mine, checks=["attention_unmasked", "attention_causal"], shrink=False)
    statuses = {r.check: r.status for r in report.results}
    assert statuses == {"attention_unmasked": "passed", "attention_causal": "skipped"}


def test_quick_summary_rows():
    rows = quick_summary("reference", groups=["structure"])
    assert [r["group"] for r in rows] == ["structure"]
    row = rows[0]
    assert row["ok"] and row["failed"] == 0 and row["passed"] > 0
    assert set(row) >= {"suite", "group", "implementation", "passed", "failed", "skipped", "seconds", "ok", "failures"}
