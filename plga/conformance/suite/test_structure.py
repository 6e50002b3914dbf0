"""Structural checks: sentinel G, batched = per-slice, SDPA at G = I (score_sdpa_special_case)."""

import pytest

from ._helpers import params, run


@pytest.mark.parametrize(("check", "dtype"), params("structure"))
def test_structure(plga_impl, check, dtype):
    run(plga_impl, check, dtype)
