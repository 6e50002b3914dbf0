"""Three numeric backends for evaluating a statement: float64 with error bounds, mpmath, sympy.

Every real-valued quantity is a NumPy array (0-d for a scalar). The float64 backend carries,
with each value, a first-order bound ``e`` on its absolute rounding error (max over entries),
propagated by the usual rules (Higham, *Accuracy and Stability*, ch. 3: γₙ = nu/(1−nu) for
sums and dot products; relative conditioning for exp, log, sqrt, division). A call into the
reference is a black box: its own error is measured against the mpmath reference on the same
float64 inputs ("a multiple of the reference's own low-precision error"),
and input errors are pushed through it along a random direction. The tolerance of a float64
comparison is derived from these bounds, never a bare constant.

Lean's total-function conventions (docs/spec.md §6) are implemented here: ``x / 0 = 0``,
``x⁻¹`` at 0 is 0, ``Real.sqrt`` of a negative is 0, ``Real.log x = log |x|`` with
``log 0 = 0``, and ``Real.rpow`` with ``x^0 = 1``, ``0^y = 0`` (y ≠ 0) and
``x^y = exp(y log|x|) cos(yπ)`` for x < 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import sympy as sp

U = 2.0**-53  # unit roundoff of float64


class NonReal(ArithmeticError):
    """The reference returned NaN, ±inf or a complex number where the Lean function is real."""


def _guarded(fn: Any, args: list[Any], backend: str) -> Any:
    """Call a reference function; an exception there is a disagreement with the total Lean
    function (reported as a failure of the statement, not as a bridge error)."""
    try:
        return fn(*args)
    except (ArithmeticError, TypeError, ValueError) as exc:
        name = getattr(fn, "__name__", str(fn))
        raise NonReal(f"reference {name} raised {type(exc).__name__}: {exc} in {backend}, on an "
                      "input where the Lean function is defined") from exc


def _check_real(fn: Any, y: Any, backend: str) -> None:
    arr = np.asarray(y, dtype=object).ravel()
    for x in arr:
        if isinstance(x, (complex, mpmath.mpc)) or (isinstance(x, (float, np.floating)) and not math.isfinite(x)) \
                or (isinstance(x, mpmath.mpf) and not mpmath.isfinite(x)):
            name = getattr(fn, "__name__", str(fn))
            raise NonReal(f"reference {name} returned {x!r} in {backend}, but the Lean function is total "
                          "and real (Lean conventions: Real.sqrt of a negative is 0, x/0 = 0, "
                          "rpow of a negative base is exp(y log|x|) cos(yπ))")


def gamma(n: int) -> float:
    return n * U / (1 - n * U)


@dataclass(frozen=True)
class FinsetV:
    """A ``Finset (Fin n)`` value."""

    n: int
    elems: frozenset[int]

    def mask(self) -> np.ndarray:
        m = np.zeros(self.n, dtype=bool)
        m[list(self.elems)] = True
        return m


@dataclass
class Tr:
    """A float64 value with a bound on its absolute rounding error."""

    v: np.ndarray
    e: float

    @property
    def mag(self) -> float:
        a = np.abs(self.v)
        return float(np.max(a)) if a.size else 0.0


def _maxabs(a: np.ndarray) -> float:
    return float(np.max(np.abs(a))) if a.size else 0.0


def _minabs(a: np.ndarray) -> float:
    return float(np.min(np.abs(a))) if a.size else math.inf


class F64:
    """float64 arithmetic with first-order error bounds (values are :class:`Tr`)."""

    kind = "f64"

    def __init__(self, dps: int = 50, seed: int = 0):
        self.dps = dps
        self.rng = np.random.default_rng(seed)

    # construction
    def lift(self, raw: Any) -> Tr:
        return Tr(np.asarray(raw, dtype=np.float64), 0.0)

    def const(self, q: Fraction, shape: tuple[int, ...] = ()) -> Tr:
        x = float(q)
        exact = Fraction(x) == q
        return Tr(np.full(shape, x), 0.0 if exact else U * abs(x))

    def eye(self, n: int, q: Fraction, m: int | None = None) -> Tr:
        c = self.const(q)
        return Tr(np.eye(n, m if m is not None else n) * c.v, c.e)

    def stack(self, items: list[Tr]) -> Tr:
        if not items:
            return Tr(np.zeros((0,)), 0.0)
        return Tr(np.stack([i.v for i in items]), max(i.e for i in items))

    def index(self, a: Tr, idx: tuple[int, ...]) -> Tr:
        return Tr(np.asarray(a.v[idx]), a.e)

    def raw(self, a: Tr) -> np.ndarray:
        return a.v

    # arithmetic
    def add(self, a: Tr, b: Tr) -> Tr:
        v = a.v + b.v
        return Tr(v, a.e + b.e + U * _maxabs(v))

    def sub(self, a: Tr, b: Tr) -> Tr:
        v = a.v - b.v
        return Tr(v, a.e + b.e + U * _maxabs(v))

    def neg(self, a: Tr) -> Tr:
        return Tr(-a.v, a.e)

    def mul(self, a: Tr, b: Tr) -> Tr:
        v = a.v * b.v
        return Tr(v, a.mag * b.e + b.mag * a.e + a.e * b.e + U * _maxabs(v))

    def matmul(self, a: Tr, b: Tr) -> Tr:
        k = a.v.shape[-1]
        v = a.v @ b.v
        absprod = _maxabs(np.abs(a.v) @ np.abs(b.v)) if v.size else 0.0
        return Tr(v, k * (a.mag * b.e + b.mag * a.e + a.e * b.e) + gamma(max(k, 1)) * absprod)

    def div(self, a: Tr, b: Tr) -> Tr:
        a_v, b_v = np.broadcast_arrays(a.v, b.v)
        zero = b_v == 0
        safe = np.where(zero, 1.0, b_v)
        v = np.where(zero, 0.0, a_v / safe)
        nz = b_v[~zero]
        if b.e == 0:
            e = (a.e / _minabs(nz) if nz.size else 0.0) + U * _maxabs(v)
        elif nz.size and _minabs(nz) > 2 * b.e:
            m = _minabs(nz) - b.e
            e = (a.e + _maxabs(v) * b.e) / m + U * _maxabs(v)
        else:
            e = math.inf
        return Tr(v, e)

    def inv(self, a: Tr) -> Tr:
        return self.div(self.const(Fraction(1), a.v.shape), a)

    def exp(self, a: Tr) -> Tr:
        with np.errstate(over="ignore", under="ignore"):
            v = np.exp(a.v)
        m = _maxabs(v)
        return Tr(v, m * math.expm1(a.e) + U * m if a.e < 700 else math.inf)

    def log(self, a: Tr) -> Tr:
        x = np.abs(a.v)
        v = np.where(x == 0, 0.0, np.log(np.where(x == 0, 1.0, x)))
        lo = _minabs(a.v[a.v != 0]) if np.any(a.v != 0) else math.inf
        if a.e == 0:
            return Tr(v, U * _maxabs(v) + U)
        if lo > 2 * a.e:
            return Tr(v, a.e / (lo - a.e) + U * _maxabs(v))
        return Tr(v, math.inf)

    def sqrt(self, a: Tr) -> Tr:
        x = np.maximum(a.v, 0.0)
        v = np.sqrt(x)
        lo = float(np.min(x)) if x.size else 0.0
        e = math.sqrt(a.e) if a.e else 0.0
        if lo > 0:
            e = min(e, a.e / (2 * math.sqrt(lo)))
        return Tr(v, e + U * _maxabs(v))

    def sin(self, a: Tr) -> Tr:
        return Tr(np.sin(a.v), a.e + U)

    def cos(self, a: Tr) -> Tr:
        return Tr(np.cos(a.v), a.e + U)

    def abs(self, a: Tr) -> Tr:
        return Tr(np.abs(a.v), a.e)

    def transpose(self, a: Tr) -> Tr:
        return Tr(np.swapaxes(a.v, -1, -2), a.e)

    def rpow(self, a: Tr, p: Tr) -> Tr:
        x, y = np.broadcast_arrays(a.v, p.v)
        ax = np.abs(x)
        with np.errstate(all="ignore"):
            mag = np.exp(y * np.log(np.where(ax == 0, 1.0, ax)))
            v = np.where(y == 0, 1.0, np.where(x == 0, 0.0, np.where(x > 0, mag, mag * np.cos(y * np.pi))))
        m = _maxabs(v)
        if a.e == 0 and p.e == 0:
            logs = np.abs(np.log(np.where(ax == 0, 1.0, ax)))
            return Tr(v, 4 * U * m * (1 + _maxabs(y * logs)))
        lo = _minabs(x[x != 0]) if np.any(x != 0) else math.inf
        if lo <= 2 * a.e:
            return Tr(v, math.inf)
        logs = _maxabs(np.log(np.where(ax == 0, 1.0, ax)))
        return Tr(v, m * (_maxabs(y) * a.e / (lo - a.e) + logs * p.e) + 4 * U * m * (1 + _maxabs(y) * logs))

    def sum(self, items: list[Tr], shape: tuple[int, ...]) -> Tr:
        if not items:
            return Tr(np.zeros(shape), 0.0)
        v = np.sum([i.v for i in items], axis=0)
        tot = np.sum([np.abs(i.v) for i in items], axis=0)
        return Tr(np.asarray(v), sum(i.e for i in items) + gamma(len(items)) * _maxabs(tot))

    def trace(self, a: Tr) -> Tr:
        n = a.v.shape[-1]
        return self.sum([self.index(a, (i, i)) for i in range(n)], ())

    def det(self, a: Tr) -> Tr:
        n = a.v.shape[-1]
        v = np.asarray(np.linalg.det(a.v)) if n else np.asarray(1.0)
        m = max(a.mag, 1e-300)
        scale = math.factorial(n) * m**n if n else 1.0
        return Tr(v, scale * (n * (a.e / m if a.e else 0.0) + gamma(n * n + 1) * n))

    def expm(self, a: Tr) -> Tr:
        """Matrix exponential: scaling and squaring of a Taylor series; its error is measured
        against the mpmath exponential (a black box, as for reference calls)."""
        return self.call(_expm_any, [a])

    # comparisons: (ok, residual, tolerance)
    def equal(self, a: Tr, b: Tr) -> tuple[bool, float, float]:
        diff = _maxabs(a.v - b.v) if a.v.size else 0.0
        tol = 2 * (a.e + b.e) + 4 * U * max(a.mag, b.mag)
        if not math.isfinite(tol):
            return True, diff, tol
        return diff <= tol, diff, tol

    def less(self, a: Tr, b: Tr, strict: bool) -> tuple[bool, float, float]:
        tol = 2 * (a.e + b.e) + 4 * U * max(a.mag, b.mag)
        gap = float(np.max(a.v - b.v))  # > 0 means violated
        if not math.isfinite(tol):
            return True, max(gap, 0.0), tol
        return gap <= tol, max(gap, 0.0), tol

    # black-box reference calls
    def call(self, fn: Any, args: list[Any]) -> Tr:
        raw = [self.raw(a) if isinstance(a, Tr) else _plain(a) for a in args]
        with np.errstate(all="ignore"):
            y = np.asarray(_guarded(fn, raw, "float64"), dtype=np.float64)
        _check_real(fn, y, "float64")
        with mpmath.workdps(self.dps):  # 50 digits: ~34 beyond float64, the measured error is exact
            mp_args = [_to_mp(r) for r in raw]
            y_mp = np.asarray(_guarded(fn, mp_args, "mpmath"), dtype=object)
            _check_real(fn, y_mp, "mpmath")
            try:
                own = _maxabs(np.asarray((y.astype(object) - y_mp), dtype=object).astype(float)) if y.size else 0.0
            except TypeError as exc:
                raise NonReal(f"reference {getattr(fn, '__name__', fn)} returned a non-real value: {exc}") from exc
            e_in = max((a.e for a in args if isinstance(a, Tr)), default=0.0)
            prop = 0.0
            if e_in > 0:
                if not math.isfinite(e_in):
                    return Tr(y, math.inf)
                pert = []
                for a, r in zip(args, mp_args, strict=True):
                    if isinstance(a, Tr) and a.e > 0:
                        s = self.rng.choice([-1.0, 1.0], size=np.shape(r))
                        pert.append(r + _to_mp(s * a.e))
                    else:
                        pert.append(r)
                y2 = np.asarray(_guarded(fn, pert, "mpmath"), dtype=object)
                _check_real(fn, y2, "mpmath (perturbed inputs)")
                prop = _maxabs(np.asarray(y2 - y_mp, dtype=object).astype(float))
        return Tr(y, 2 * own + 2 * prop + 2 * U * _maxabs(y))


def _plain(a: Any) -> Any:
    if hasattr(a, "mask"):
        return a.mask()
    return a


def _expm_any(a: Any) -> Any:
    """exp of a square matrix: mpmath.expm on mpf entries, else float64 scaling and squaring."""
    arr = np.asarray(a)
    n = arr.shape[-1]
    if arr.dtype == object:
        if n == 0:
            return arr
        e = mpmath.expm(mpmath.matrix(arr.tolist()))
        return np.array([[e[i, j] for j in range(n)] for i in range(n)], dtype=object)
    norm = float(np.max(np.sum(np.abs(arr), axis=1))) if n else 0.0
    s = max(0, int(np.ceil(np.log2(norm))) + 1) if norm > 0.5 else 0
    x = arr / 2.0**s
    term = np.eye(n)
    out = np.eye(n)
    for k in range(1, 30):
        term = term @ x / k
        out = out + term
    for _ in range(s):
        out = out @ out
    return out


def _to_mp(r: Any) -> Any:
    if isinstance(r, np.ndarray) and r.dtype.kind == "f":
        return np.vectorize(lambda v: mpmath.mpf(float(v)), otypes=[object])(r) if r.ndim else mpmath.mpf(float(r))
    if isinstance(r, float):
        return mpmath.mpf(r)
    return r


class Exact:
    """mpmath (``kind='mp'``) or sympy (``kind='sy'``) arithmetic on object arrays."""

    def __init__(self, kind: str, dps: int = 50):
        self.kind = kind
        self.dps = dps
        if kind == "mp":
            self.num = mpmath.mpf
            self.f_exp, self.f_sin, self.f_cos = mpmath.exp, mpmath.sin, mpmath.cos
        else:
            self.num = sp.Rational
            self.f_exp, self.f_sin, self.f_cos = sp.exp, sp.sin, sp.cos

    def _wrap(self, x: Any) -> np.ndarray:
        a = np.empty((), dtype=object)
        a[()] = x
        return a

    def _map(self, f: Any, a: np.ndarray) -> np.ndarray:
        if a.ndim == 0:
            return self._wrap(f(a[()]))
        out = np.empty(a.shape, dtype=object)
        for idx in np.ndindex(a.shape):
            out[idx] = f(a[idx])
        return out

    def lift(self, raw: Any) -> np.ndarray:
        arr = np.asarray(raw)
        if self.kind == "mp":
            return self._map(lambda v: mpmath.mpf(float(v)), arr.astype(np.float64)) if arr.dtype.kind == "f" else arr
        return arr if arr.dtype == object else self._map(lambda v: sp.Rational(float(v)), arr)

    def const(self, q: Fraction, shape: tuple[int, ...] = ()) -> np.ndarray:
        if self.kind == "mp":
            c = mpmath.mpf(q.numerator) / q.denominator
        else:
            c = sp.Rational(q.numerator, q.denominator)
        out = np.empty(shape, dtype=object)
        for idx in np.ndindex(shape):
            out[idx] = c
        return out if shape else self._wrap(c)

    def eye(self, n: int, q: Fraction, m: int | None = None) -> np.ndarray:
        m = n if m is None else m
        out = self.const(Fraction(0), (n, m))
        for i in range(min(n, m)):
            out[i, i] = self.const(q)[()]
        return out

    def stack(self, items: list[np.ndarray]) -> np.ndarray:
        if not items:
            return np.empty((0,), dtype=object)
        shape = (len(items), *items[0].shape)
        out = np.empty(shape, dtype=object)
        for k, it in enumerate(items):
            if it.ndim == 0:
                out[k] = it[()]
            else:
                out[k] = it
        return out

    def index(self, a: np.ndarray, idx: tuple[int, ...]) -> np.ndarray:
        r = a[idx]
        return r if isinstance(r, np.ndarray) else self._wrap(r)

    def raw(self, a: np.ndarray) -> Any:
        return a[()] if a.ndim == 0 else a

    def _bin(self, f: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a2, b2 = np.broadcast_arrays(a, b)
        out = np.empty(a2.shape, dtype=object)
        for idx in np.ndindex(a2.shape):
            out[idx] = f(a2[idx], b2[idx])
        return out

    def add(self, a, b):
        return self._bin(lambda x, y: x + y, a, b)

    def sub(self, a, b):
        return self._bin(lambda x, y: x - y, a, b)

    def neg(self, a):
        return self._map(lambda x: -x, a)

    def mul(self, a, b):
        return self._bin(lambda x, y: x * y, a, b)

    def matmul(self, a, b):
        m, k = a.shape
        _k2, n = b.shape
        out = np.empty((m, n), dtype=object)
        for i in range(m):
            for j in range(n):
                s = self.num(0)
                for t in range(k):
                    s = s + a[i, t] * b[t, j]
                out[i, j] = s
        return out

    def div(self, a, b):
        zero = self.num(0)
        return self._bin(lambda x, y: zero if _is_zero(y) else x / y, a, b)

    def inv(self, a):
        zero = self.num(0)
        return self._map(lambda x: zero if _is_zero(x) else 1 / x, a)

    def exp(self, a):
        return self._map(self.f_exp, a)

    def sin(self, a):
        return self._map(self.f_sin, a)

    def cos(self, a):
        return self._map(self.f_cos, a)

    def abs(self, a):
        return self._map(abs if self.kind == "mp" else sp.Abs, a)

    def transpose(self, a):
        return np.swapaxes(a, -1, -2).copy()

    def log(self, a):
        if self.kind == "sy":
            return self._map(sp.log, a)
        return self._map(lambda x: mpmath.mpf(0) if x == 0 else mpmath.log(abs(x)), a)

    def sqrt(self, a):
        if self.kind == "sy":
            return self._map(sp.sqrt, a)
        return self._map(lambda x: mpmath.sqrt(x) if x > 0 else mpmath.mpf(0), a)

    def rpow(self, a, p):
        if self.kind == "sy":
            return self._bin(lambda x, y: sp.Integer(1) if y == 0 else x**y, a, p)

        def f(x, y):
            if y == 0:
                return mpmath.mpf(1)
            if x == 0:
                return mpmath.mpf(0)
            if x > 0:
                return mpmath.exp(y * mpmath.log(x))
            return mpmath.exp(y * mpmath.log(-x)) * mpmath.cos(y * mpmath.pi)

        return self._bin(f, a, p)

    def sum(self, items: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
        acc = self.const(Fraction(0), shape)
        for it in items:
            acc = self.add(acc, it)
        return acc

    def trace(self, a):
        return self.sum([self.index(a, (i, i)) for i in range(a.shape[-1])], ())

    def det(self, a):
        n = a.shape[-1]
        if n == 0:
            return self.const(Fraction(1))
        if self.kind == "sy":
            return self._wrap(sp.Matrix(a.tolist()).det(method="berkowitz"))
        return self._wrap(_cofactor_det([list(r) for r in a.tolist()]))

    def expm(self, a):
        if self.kind == "sy":
            from .elaborate import Outside

            raise Outside("the matrix exponential is not expanded symbolically")
        return np.asarray(_expm_any(a), dtype=object)

    def tol(self, *vals: np.ndarray) -> mpmath.mpf:
        """The mpmath tolerance: 10^-(dps-10) relative to the magnitudes compared."""
        mag = max([mpmath.mpf(1)] + [abs(x) for v in vals for x in v.flat])
        return mpmath.mpf(10) ** (-(self.dps - 10)) * mag

    def equal(self, a, b) -> tuple[bool, float, float]:
        if self.kind == "sy":
            raise TypeError("sympy values are compared by the symbolic prover")
        for x in list(a.flat) + list(b.flat):
            if isinstance(x, mpmath.mpc):
                raise NonReal(f"non-real value {x} in a comparison")
        d = max((abs(x - y) for x, y in zip(a.flat, b.flat, strict=False)), default=mpmath.mpf(0))
        t = self.tol(a, b)
        return bool(d <= t), float(d), float(t)

    def less(self, a, b, strict: bool) -> tuple[bool, float, float]:
        x, y = a[()], b[()]
        if isinstance(x, mpmath.mpc) or isinstance(y, mpmath.mpc):
            raise NonReal(f"non-real value in a comparison: {x} vs {y}")
        t = self.tol(a, b)
        gap = x - y
        ok = bool(x < y) if strict else bool(gap <= t)
        return ok, float(max(gap, 0)), float(0 if strict else t)

    def call(self, fn: Any, args: list[Any]) -> np.ndarray:
        raw = [self.raw(a) if isinstance(a, np.ndarray) and a.dtype == object else _plain(a) for a in args]
        with mpmath.workdps(self.dps):
            y = _guarded(fn, raw, self.kind)
        _check_real(fn, y, self.kind)
        arr = np.asarray(y, dtype=object)
        return arr if arr.ndim else self._wrap(y if not isinstance(y, np.ndarray) else y[()])


def _cofactor_det(m: list[list[Any]]) -> Any:
    """Determinant by cofactor expansion (exact arithmetic; fine for the sizes ≤ 5 drawn).
    mpmath.det's LU pivoting fails on exactly singular matrices."""
    n = len(m)
    if n == 1:
        return m[0][0]
    if n == 2:
        return m[0][0] * m[1][1] - m[0][1] * m[1][0]
    total = 0
    for j in range(n):
        if m[0][j] == 0:
            continue
        minor = [row[:j] + row[j + 1 :] for row in m[1:]]
        term = m[0][j] * _cofactor_det(minor)
        total = total + term if j % 2 == 0 else total - term
    return total



def lift(env: dict[str, Any], backend: Any) -> dict[str, Any]:
    """``env`` with every float array or scalar lifted into ``backend`` (other values unchanged)."""
    out = {}
    for k, v in env.items():
        if isinstance(v, (np.ndarray, np.floating, float)) and np.asarray(v).dtype.kind == "f":
            out[k] = backend.lift(np.asarray(v))
        else:
            out[k] = v
    return out

def _is_zero(x: Any) -> bool:
    if isinstance(x, sp.Basic):
        return x == 0
    return x == 0
