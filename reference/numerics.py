"""The two numeric backends of the reference: float64 NumPy and mpmath.

An array is either ``float64`` (the float64 backend) or ``object`` holding ``mpmath.mpf``
(the mpmath backend). Every elementwise function of the reference dispatches on the dtype
through :func:`elementwise`, so one definition serves both backends. mpmath precision is
always local: :func:`to_mp` and :func:`mp_eval` enter ``mpmath.workdps`` and restore it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import mpmath
import numpy as np
from numpy.typing import NDArray

Array = NDArray[Any]

#: Digits used by the mpmath backend unless a caller asks for more. 50 digits leave ~34
#: digits of headroom over float64, enough for every identity the suite checks.
DEFAULT_DPS = 50


def is_mp(x: Any) -> bool:
    """True when ``x`` is an object array (mpmath backend) or an mpmath number."""
    if isinstance(x, np.ndarray):
        return x.dtype == object
    return isinstance(x, (mpmath.mpf, mpmath.mpc))


def as_float64(x: Any) -> Array:
    """Float64 array of ``x`` (mpf entries are rounded to nearest)."""
    if isinstance(x, np.ndarray) and x.dtype == object:
        return np.vectorize(float, otypes=[np.float64])(x)
    return np.asarray(x, dtype=np.float64)


def to_mp(x: Any, dps: int = DEFAULT_DPS) -> Array:
    """Object array of ``mpf`` holding the exact binary values of ``x`` (no rounding)."""
    arr = np.asarray(x)
    with mpmath.workdps(dps):
        if arr.dtype == object:
            return np.vectorize(mpmath.mpf, otypes=[object])(arr) if arr.size else arr
        conv = np.vectorize(lambda v: mpmath.mpf(float(v)), otypes=[object])
        return conv(arr.astype(np.float64)) if arr.size else arr.astype(object)


def mp_eval(fn: Callable[..., Any], *args: Any, dps: int = DEFAULT_DPS, **kwargs: Any) -> Any:
    """Evaluate ``fn`` with every float array argument converted to mpf at ``dps`` digits.

    Arrays of integer or boolean dtype (masks, token ids, positions) pass through unchanged.
    The precision is restored when the call returns.
    """

    def convert(a: Any) -> Any:
        if isinstance(a, np.ndarray) and a.dtype.kind == "f":
            return to_mp(a, dps)
        if isinstance(a, float):
            return mpmath.mpf(a)
        if isinstance(a, (list, tuple)):
            return type(a)(convert(v) for v in a)
        return a

    with mpmath.workdps(dps):
        return fn(*(convert(a) for a in args), **{k: convert(v) for k, v in kwargs.items()})


def elementwise(np_fn: Callable[[Array], Array], mp_fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """An elementwise function that uses ``np_fn`` on float64 and ``mp_fn`` on mpf entries."""

    def apply(x: Any) -> Any:
        if is_mp(x):
            if isinstance(x, np.ndarray):
                return np.frompyfunc(mp_fn, 1, 1)(x).astype(object) if x.size else x
            return mp_fn(x)
        return np_fn(np.asarray(x, dtype=np.float64))

    return apply


exp = elementwise(np.exp, mpmath.exp)
log = elementwise(np.log, mpmath.log)
sqrt = elementwise(np.sqrt, mpmath.sqrt)


def rpow(base: Any, exponent: Any) -> Any:
    """Elementwise real power with Mathlib's ``Real.rpow`` conventions (docs/spec.md §6).

    ``x^y`` for ``x > 0``; ``x^0 = 1`` for every x; ``0^y = 0`` for ``y ≠ 0``; and for
    ``x < 0``, ``|x|^y · cos(yπ)``. On positive bases it is exactly ``np.power``.
    """
    if is_mp(base) or is_mp(exponent):
        b, e = np.broadcast_arrays(np.asarray(base, dtype=object), np.asarray(exponent, dtype=object))
        return np.frompyfunc(_mp_rpow, 2, 1)(b, e).astype(object)
    x, y = np.broadcast_arrays(np.asarray(base, dtype=np.float64), np.asarray(exponent, dtype=np.float64))
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        out = np.power(np.abs(x), y)
        negative = x < 0
        if negative.any():
            out = np.where(negative, out * np.cos(y * np.pi), out)
        return np.where(y == 0, 1.0, np.where((x == 0) & (y != 0), 0.0, out))


def _mp_rpow(x: Any, y: Any) -> Any:
    x, y = mpmath.mpf(x), mpmath.mpf(y)
    if y == 0:
        return mpmath.mpf(1)
    if x == 0:
        return mpmath.mpf(0)
    magnitude = mpmath.power(abs(x), y)
    return magnitude if x > 0 else magnitude * mpmath.cos(y * mpmath.pi)


def scalar(value: float, like: Any) -> Any:
    """``value`` in the backend of ``like`` (mpf when ``like`` is mpmath, else float)."""
    return mpmath.mpf(value) if is_mp(like) else float(value)


def float32_sqrt(n: int) -> float:
    """``sqrt(n)`` evaluated in float32 then widened, as the published code computes it."""
    return float(np.sqrt(np.float32(n)))


def exact_sqrt(n: int) -> float:
    """``sqrt(n)`` correctly rounded to float64."""
    return math.sqrt(n)
