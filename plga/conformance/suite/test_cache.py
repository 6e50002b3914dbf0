"""Cached decoding: nocache, kv, kvg, collapsed, and their fidelity (docs/spec.md §3)."""

import pytest

from ._helpers import params, run

pytestmark = pytest.mark.usefixtures("plga_suite_memo")  # the suite's own results, kept per module


@pytest.mark.parametrize(("check", "dtype"), params("cache"))
def test_cache(plga_impl, check, dtype):
    run(plga_impl, check, dtype)
