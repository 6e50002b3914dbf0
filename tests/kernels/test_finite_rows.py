"""The guard's one-pass row check (:func:`plga.kernels.finite.nonfinite_rows`) flags exactly the
rows ``~isfinite(t).all()`` flags: NaN, +inf and −inf anywhere in a row, in every dtype, and never
a row of finite extremes."""

from __future__ import annotations

import pytest
import torch

from plga.kernels.finite import nonfinite_rows


def _expected(t: torch.Tensor) -> torch.Tensor:
    return ~torch.isfinite(t).reshape(t.shape[0], t.shape[1], -1).all(-1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(3, 5, 7), (2, 4, 6, 6), (1, 1, 1)])
def test_nonfinite_rows_flags_what_isfinite_flags(dtype, shape):
    gen = torch.Generator().manual_seed(sum(shape))
    t = torch.randn(*shape, generator=gen).to(dtype)
    big = torch.finfo(dtype).max
    flat = t.view(shape[0], shape[1], -1)
    flat[0, 0, -1] = big  # finite extremes: never flagged
    flat[-1, -1, 0] = -big
    assert not nonfinite_rows(t).any()
    bad = {(0, 0): float("nan"), (shape[0] - 1, shape[1] - 1): float("inf")}
    if shape[0] > 1:
        bad[(1, 0)] = float("-inf")
    for (b, x), value in bad.items():
        flat[b, x, flat.shape[-1] // 2] = value
    got = nonfinite_rows(t)
    assert got.shape == shape[:2] and got.dtype == torch.bool
    assert torch.equal(got, _expected(t)) and int(got.sum()) == len(bad)


def test_an_empty_row_is_finite():
    assert not nonfinite_rows(torch.empty(2, 3, 0)).any() and nonfinite_rows(torch.empty(2, 3, 0)).shape == (2, 3)
