"""Structural checks: sentinel G, batched = per-slice, SDPA at G = I (score_sdpa_special_case)."""

import pytest

from ._helpers import params, run

pytestmark = pytest.mark.usefixtures("plga_suite_memo")  # the suite's own results, kept per module


@pytest.mark.parametrize(("check", "dtype"), params("structure"))
def test_structure(plga_impl, check, dtype):
    run(plga_impl, check, dtype)
