"""The decoder forward from a state dict, learner and constant G (docs/spec.md §2, §3)."""

import pytest

from ._helpers import params, run

pytestmark = pytest.mark.usefixtures("plga_suite_memo")  # the suite's own results, kept per module


@pytest.mark.parametrize(("check", "dtype"), params("decoder"))
def test_decoder(plga_impl, check, dtype):
    run(plga_impl, check, dtype)
