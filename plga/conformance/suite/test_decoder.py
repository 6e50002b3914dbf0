"""The decoder forward from a state dict, learner and constant G (docs/spec.md §2, §3)."""

import pytest

from ._helpers import params, run


@pytest.mark.parametrize(("check", "dtype"), params("decoder"))
def test_decoder(plga_impl, check, dtype):
    run(plga_impl, check, dtype)
