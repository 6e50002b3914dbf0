"""The operator chain from rotated queries to G_LM (docs/spec.md §1.1–1.7)."""

import pytest

from ._helpers import params, run

pytestmark = pytest.mark.usefixtures("plga_suite_memo")  # the suite's own results, kept per module


@pytest.mark.parametrize(("check", "dtype"), params("chain"))
def test_chain(plga_impl, check, dtype):
    run(plga_impl, check, dtype)
