"""Reference semantics (NumPy) of the math ops beyond the basic set: rounding to integers,
trigonometric, hyperbolic and special functions, `clz`/`popc`, and the binary `atan2 hypot
copysign nextafter remainder ldexp jn yn`.

The Tile IR interpreter (`kdsl/ir/interp.py`) and the Loop IR simulator
(`kdsl/ir/loop_interp.py`) both evaluate these ops through the tables below, so the two agree.
A float32 operand is computed in float64 and rounded once to float32 (NumPy's float64
functions, Python's `math` or the C library's `j0`/`y0`/`jn`/... are accurate to about one
float64 ulp, so the float32 result is the correctly rounded one except in rare near-halfway
cases); float64 operands use the float64 functions directly.  The ops that are exact by nature
(`trunc rint round copysign nextafter remainder ldexp clz popc`) are computed in the operand's
own type.

Special values follow C99/IEEE 754: `lgamma` of a non-positive integer is +inf, `tgamma(±0)`
is ±inf and of a negative integer NaN, `remainder(x, 0)` and `remainder(±inf, y)` are NaN,
`round` rounds halfway cases away from zero (`rint` to even), `y0(0) = y1(0) = -inf` and
`y0`/`y1`/`yn` of a negative number is NaN.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from collections.abc import Callable
from fractions import Fraction
from functools import cache

import numpy as np

Fn = Callable[..., np.ndarray]


def _via64(f: Fn) -> Fn:
    """`f` evaluated in float64 and rounded once to the operand's float type."""

    def g(x):
        x = np.asarray(x)
        return np.asarray(f(x.astype(np.float64))).astype(x.dtype)

    return g


def _scalar64(f: Callable[[float], float]) -> Fn:
    """A Python float function applied element-wise in float64, rounded to the operand type."""
    vf = np.vectorize(f, otypes=[np.float64])
    return _via64(vf)


def _round_half_away(x: np.ndarray) -> np.ndarray:
    # x - trunc(x) is exact, so the comparison with 0.5 decides halfway cases exactly.
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.copysign(np.asarray(1, x.dtype), x), t)


def _lgamma(v: float) -> float:
    if math.isnan(v):
        return v
    try:
        return math.lgamma(v)
    except (ValueError, OverflowError):  # poles (non-positive integers) and overflow
        return math.inf


def _tgamma(v: float) -> float:
    if math.isnan(v) or v == math.inf:
        return v
    if v == 0:
        return math.copysign(math.inf, v)
    if v < 0 and (math.isinf(v) or v == math.floor(v)):  # -inf and negative integers
        return math.nan
    try:
        return math.gamma(v)
    except OverflowError:
        return math.inf


def _erfc(v: float) -> float:
    return math.erfc(v)


@cache
def _libm() -> ctypes.CDLL:
    path = ctypes.util.find_library("m")
    if not path:
        raise NotImplementedError("the Bessel functions need the C math library (libm)")
    lib = ctypes.CDLL(path)
    for name in ("j0", "j1", "y0", "y1"):
        getattr(lib, name).restype = ctypes.c_double
        getattr(lib, name).argtypes = [ctypes.c_double]
    for name in ("jn", "yn"):
        getattr(lib, name).restype = ctypes.c_double
        getattr(lib, name).argtypes = [ctypes.c_int, ctypes.c_double]
    return lib


def _bessel(name: str) -> Fn:
    def f(v: float) -> float:
        return getattr(_libm(), name)(v)

    return _scalar64(f)


def _bessel_n(name: str) -> Fn:
    """jn/yn: the Tile IR operand order is (x, n)."""
    vf = np.vectorize(lambda v, n: getattr(_libm(), name)(int(n), v), otypes=[np.float64])

    def g(x, n):
        x = np.asarray(x)
        return np.asarray(vf(x.astype(np.float64), np.asarray(n))).astype(x.dtype)

    return g


def _uint_view(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.dtype(f"u{x.dtype.itemsize}"))


def _clz(x):
    """Leading zero bits of the operand's bit pattern (the width for 0)."""
    x = np.asarray(x)
    u = _uint_view(x)
    bits = 8 * x.dtype.itemsize
    shift = 1
    while shift < bits:  # smear the highest set bit into every lower position
        u = u | (u >> u.dtype.type(shift))
        shift *= 2
    return (bits - np.bitwise_count(u)).astype(x.dtype)


def _popc(x):
    x = np.asarray(x)
    return np.bitwise_count(_uint_view(x)).astype(x.dtype)


def _remainder(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or b == 0:
        return math.nan
    return math.remainder(a, b)


_remainder_v = np.vectorize(_remainder, otypes=[np.float64])


def _binary64(f: Fn) -> Fn:
    def g(a, b):
        a = np.asarray(a)
        return np.asarray(f(a.astype(np.float64), np.asarray(b).astype(np.float64))
                          ).astype(a.dtype)

    return g


def _ldexp(x, n):
    x = np.asarray(x)
    # The exponent is an int32; amounts beyond +-2200 give the same result as +-2200 (every
    # float overflows or underflows by then), which keeps NumPy's C int argument in range.
    n = np.clip(np.asarray(n).astype(np.int64), -2200, 2200).astype(np.int32)
    return np.ldexp(x, n).astype(x.dtype)


UNARY: dict[str, Fn] = {
    "trunc": np.trunc,
    "rint": np.rint,
    "round": _round_half_away,
    "tan": _via64(np.tan),
    "asin": _via64(np.arcsin),
    "acos": _via64(np.arccos),
    "atan": _via64(np.arctan),
    "sinh": _via64(np.sinh),
    "cosh": _via64(np.cosh),
    "asinh": _via64(np.arcsinh),
    "acosh": _via64(np.arccosh),
    "atanh": _via64(np.arctanh),
    "log1p": _via64(np.log1p),
    "expm1": _via64(np.expm1),
    "cbrt": _via64(np.cbrt),
    "exp10": _via64(lambda x: np.power(10.0, x)),
    "log10": _via64(np.log10),
    "erfc": _scalar64(_erfc),
    "lgamma": _scalar64(_lgamma),
    "tgamma": _scalar64(_tgamma),
    "j0": _bessel("j0"),
    "j1": _bessel("j1"),
    "y0": _bessel("y0"),
    "y1": _bessel("y1"),
    "clz": _clz,
    "popc": _popc,
}

BINARY: dict[str, Fn] = {
    "atan2": _binary64(np.arctan2),
    "hypot": _binary64(np.hypot),
    "copysign": lambda a, b: np.copysign(a, np.asarray(b).astype(np.asarray(a).dtype)),
    "nextafter": lambda a, b: np.nextafter(a, np.asarray(b).astype(np.asarray(a).dtype)),
    "remainder": _binary64(_remainder_v),
    "ldexp": _ldexp,
    "jn": _bessel_n("jn"),
    "yn": _bessel_n("yn"),
}


def ignore_type(f: Fn) -> Fn:
    """A binary function as the interpreters' tables call it: (a, b, operand dtype)."""
    return lambda a, b, t: f(a, b)


def scalar(f: Fn) -> Fn:
    """A function returning 0-d arrays for scalar operands (the Loop IR simulator's values)."""
    return lambda *xs: f(*xs)[()]


def _fma64_scalar(a: float, b: float, c: float) -> float:
    if not (math.isfinite(a) and math.isfinite(b)):
        return a * b + c  # the product is exact (inf, NaN or an exact 0 * inf = NaN)
    if not math.isfinite(c):
        return c
    r = Fraction(a) * Fraction(b) + Fraction(c)
    if r == 0:  # the exact product is -c, representable: IEEE's sign of an exact zero sum
        return a * b + c
    try:
        return float(r)  # correctly rounded
    except OverflowError:
        return math.inf if r > 0 else -math.inf


_fma64 = np.vectorize(_fma64_scalar, otypes=[np.float64])


def fma(a, b, c) -> np.ndarray:
    """a * b + c rounded once.  float64: exact rational arithmetic.  float32 (and 16-bit
    floats held in float32): the product is exact in float64 and the sum's error is found by
    TwoSum; the float64 sum is rounded to odd when inexact, so that its rounding to float32 is
    the correctly rounded fma."""
    a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)
    if a.dtype == np.float64:
        return np.asarray(_fma64(a, b, c))
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = c.astype(np.float64)
    s = p + c64
    bb = s - p
    e = (p - (s - bb)) + (c64 - bb)
    inexact = np.isfinite(s) & (e != 0)
    past = inexact & ((e < 0) != (s < 0))  # |s| > |exact|: truncate toward zero
    t = np.where(past, np.nextafter(s, 0.0), s)
    odd = np.where(inexact, (t.view(np.uint64) | np.uint64(1)).view(np.float64), s)
    return odd.astype(a.dtype)
