"""PLGA attention given G against the float64/mpmath reference (docs/spec.md §1.8)."""

import pytest

from ._helpers import params, run

pytestmark = pytest.mark.usefixtures("plga_suite_memo")  # the suite's own results, kept per module


@pytest.mark.parametrize(("check", "dtype"), params("attention"))
def test_attention(plga_impl, check, dtype):
    run(plga_impl, check, dtype)
