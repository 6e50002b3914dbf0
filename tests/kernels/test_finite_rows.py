"""The guard's one-pass row check (:func:`plga.kernels.finite.row_extremes`, read by
:func:`~plga.kernels.finite.nonfinite`) flags exactly the rows ``~isfinite(t).all()`` flags: NaN,
+inf and −inf anywhere in a row, in every dtype, and never a row of finite extremes; and the
guard names the first bad entry of a pass."""

from __future__ import annotations

import pytest
import torch

from plga.kernels.finite import nonfinite, row_extremes


def nonfinite_rows(t: torch.Tensor) -> torch.Tensor:
    return nonfinite(*row_extremes(t))


def _expected(t: torch.Tensor) -> torch.Tensor:
    return ~torch.isfinite(t).reshape(t.shape[0], t.shape[1], -1).all(-1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(3, 5, 7), (2, 4, 6, 6), (1, 1, 1), (2, 3, 31), (2, 3, 32), (3, 2, 8, 8), (2, 2, 900)])
def test_row_extremes_flag_what_isfinite_flags(dtype, shape):
    """Rows shorter than SPLIT_MIN_ROW (one aminmax) and as long or longer (amin and amax)."""
    gen = torch.Generator().manual_seed(sum(shape))
    t = torch.randn(*shape, generator=gen).to(dtype)
    big = torch.finfo(dtype).max
    flat = t.view(shape[0], shape[1], -1)
    flat[0, 0, -1] = big  # finite extremes: never flagged
    flat[-1, -1, 0] = -big
    assert not nonfinite_rows(t).any()
    n = flat.shape[-1]
    bad = {(0, 0): (float("nan"), n // 2), (shape[0] - 1, shape[1] - 1): (float("inf"), n - 1)}  # a row's middle, its end
    if shape[0] > 1:
        bad[(1, 0)] = (float("-inf"), 0)  # its start
    for (b, x), (value, k) in bad.items():
        flat[b, x, k] = value
    got = nonfinite_rows(t)
    assert got.shape == shape[:2] and got.dtype == torch.bool
    assert torch.equal(got, _expected(t)) and int(got.sum()) == len(bad)


def test_an_empty_row_is_finite():
    assert not nonfinite_rows(torch.empty(2, 3, 0)).any() and nonfinite_rows(torch.empty(2, 3, 0)).shape == (2, 3)


def _guard_with(*entries):
    from plga.kernels.finite import FiniteGuard

    guard = FiniteGuard()
    for layer, name, t in entries:
        if t.dtype == torch.bool:
            guard.add_flags(layer, name, t)
        else:
            guard.add(layer, name, t)
    return guard


def test_the_guard_passes_finite_extremes_of_every_dtype_in_one_pass():
    """Mixed dtypes in one pass (a bfloat16 hidden state beside float32 operators, as a bf16
    model records them), each holding its dtype's largest finite values: no error."""
    entries = []
    for layer, dtype in enumerate([torch.bfloat16, torch.float16, torch.float32, torch.float64]):
        t = torch.zeros(2, 3, 4, dtype=dtype)
        t[0, 1, 2], t[1, 2, 3] = torch.finfo(dtype).max, -torch.finfo(dtype).max
        entries.append((layer, "the hidden state", t))
    entries.append((9, "A_P", torch.zeros(2, 2, 3, 3)))
    entries.append((9, "the hidden state", torch.zeros(2, 5, dtype=torch.bool)))
    _guard_with(*entries).check()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_guard_names_the_first_bad_entry_of_a_pass(value, dtype):
    """Several layers recorded, the bad values in the third entry (and a later one): the error
    names that entry's layer and exactly its bad positions, whatever the dtype and the kind of
    non-finite value."""
    from plga.errors import NonFiniteError

    good = torch.ones(2, 4, 3, dtype=dtype)
    bad = good.clone()
    bad[0, 1, 2] = value
    bad[1, 3, 0] = value
    later = good.clone()
    later[0, 0, 0] = value
    guard = _guard_with((0, "A_LM", torch.ones(2, 2, 3, 3)), (0, "the hidden state", good),
                        (1, "the hidden state", bad), (2, "the hidden state", later))
    with pytest.raises(NonFiniteError, match=r"^layer 1: the hidden state is not finite at positions \[1, 3\] "):
        guard.check()
    guard.check()  # the entries were consumed: nothing left to raise


def test_the_guard_reads_flags_beside_extremes():
    """A flag set by a captured step is an error in a pass whose other entries are finite, and
    a deductive entry names the heads, with the overflow hint for A_P."""
    from plga.errors import NonFiniteError

    flags = torch.zeros(1, 6, dtype=torch.bool)
    flags[0, 4] = True
    with pytest.raises(NonFiniteError, match=r"layer 3: the hidden state is not finite at positions \[4\]"):
        _guard_with((0, "the hidden state", torch.ones(1, 2, 2)), (3, "the hidden state", flags)).check()
    a_p = torch.ones(1, 3, 2, 2)
    a_p[0, 2, 1, 1] = float("inf")
    with pytest.raises(NonFiniteError, match=r"layer 0: A_P is not finite in heads \[2\] \(A_LM \*\* P overflowed"):
        _guard_with((0, "A_LM", torch.ones(1, 3, 2, 2)), (0, "A_P", a_p), (0, "the hidden state", flags)).check()
