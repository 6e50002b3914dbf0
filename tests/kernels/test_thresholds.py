"""plga.kernels.thresholds: every size threshold listed, all lowered together, all restored."""

import importlib
import pkgutil

import pytest

pytest.importorskip("torch")

import plga.kernels as K
from plga.kernels import gemm, thresholds

#: Integer constants of plga.kernels that steer no path by size: Dynamo's compilation limits.
NOT_SIZE_THRESHOLDS = {"RECOMPILE_LIMIT", "_LIFETIME_COMPILATIONS"}


def _integer_constants() -> set[tuple[str, str]]:
    """(module, NAME) of every module-level integer constant in plga.kernels (upper-case name,
    leading underscores allowed; booleans are no thresholds)."""
    found = set()
    for info in pkgutil.iter_modules(K.__path__):
        module = importlib.import_module(f"plga.kernels.{info.name}")
        for name, value in vars(module).items():
            if name.lstrip("_").isupper() and isinstance(value, int) and not isinstance(value, bool):
                found.add((module.__name__, name))
    return found


def _unlisted() -> set[tuple[str, str]]:
    listed = {(t.module, t.name) for t in thresholds.THRESHOLDS}
    return {(m, n) for m, n in _integer_constants() if n not in NOT_SIZE_THRESHOLDS and (m, n) not in listed}


def test_every_integer_constant_of_the_kernels_is_a_listed_threshold_or_named_as_none():
    """A new size threshold cannot escape the at-scale conformance run unnoticed."""
    assert _unlisted() == set()
    assert {(t.module, t.name) for t in thresholds.THRESHOLDS} <= _integer_constants()  # no stale entry


def test_a_new_unlisted_threshold_is_found(monkeypatch):
    """Negative control of the test above: an integer constant added to a kernels module is reported."""
    monkeypatch.setattr(gemm, "NEW_MIN_ROWS", 8, raising=False)
    assert _unlisted() == {("plga.kernels.gemm", "NEW_MIN_ROWS")}


def _values() -> dict[tuple[str, str], int]:
    return {(t.module, t.name): getattr(importlib.import_module(t.module), t.name) for t in thresholds.THRESHOLDS}


def test_smallest_lowers_every_threshold_and_restores_them():
    shipped = _values()
    lowest = {(t.module, t.name): t.lowest for t in thresholds.THRESHOLDS}
    assert shipped != lowest  # the context changes something
    with thresholds.smallest():
        assert _values() == lowest
    assert _values() == shipped


def test_smallest_restores_the_thresholds_after_an_error():
    shipped = _values()
    with pytest.raises(RuntimeError, match="inside"), thresholds.smallest():
        raise RuntimeError("inside")
    assert _values() == shipped


def test_each_lowest_value_sends_a_small_input_down_the_large_path():
    """The lowered values do what their descriptions say, for inputs far below the shipped ones."""
    import torch

    from plga.kernels import finite, functional, packed

    x, w = torch.ones(3, 8), torch.ones(5, 8)
    q = torch.ones(1, 1, 4, 8, dtype=torch.bfloat16)
    g = torch.full((1, 8, 8), 0.5)
    with thresholds.smallest():
        assert gemm.serves(x, w, None) == gemm.serves(torch.ones(4096, 8), torch.ones(4096, 8), None)
        assert x.shape[0] > packed.PACKED_SMALL_M  # a three-token prompt's products: the prefill path
        assert 8 >= finite.SPLIT_MIN_ROW
        blocked = functional._takes_blocked_path(q, q, q, g, True, None)
    assert not gemm.serves(x, w, None)
    assert not functional._takes_blocked_path(q, q, q, g, True, None)
    if functional.cpu_has_amx() or not gemm.cpu_has_low_precision_gemm(torch.bfloat16):
        assert not blocked  # the flash kernel serves bfloat16 attention on this CPU at every size
    else:
        assert blocked
