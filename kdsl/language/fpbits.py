"""Exact float functions of libdevice built from bit operations, comparisons and `where`:
classification, exponents (`logb`, `ilogb`), `fdim`, `saturatef`, and exact scalings.

Every function takes and returns `X` values (kdsl/language/mathexpr.py) of float32 or float64.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.types import DType, float32, float64, int1, int32, int64
from .mathexpr import X, bi, float_int, isinf, isnan, un, where

INT_MIN, INT_MAX = -(2**31), 2**31 - 1


@dataclass(frozen=True)
class Format:
    """Layout of an IEEE binary format: significand bits (without the hidden bit), exponent
    bias, the integer type of its bits, and its extreme values."""

    mant: int
    bias: int
    int_t: DType
    min_normal: float
    max: float


FORMATS = {
    float32: Format(23, 127, int32, 2.0**-126, float.fromhex("0x1.fffffep127")),
    float64: Format(52, 1023, int64, 2.0**-1022, float.fromhex("0x1.fffffffffffffp1023")),
}


def fmt(x: X) -> Format:
    return FORMATS[x.dtype]


def signbit(x: X) -> X:
    """int1: the sign bit is set (also for -0.0 and negative NaNs)."""
    return x.bits(fmt(x).int_t) < 0


def exponent(x: X) -> X:
    """int32 floor(log2(|x|)) of a finite nonzero x, exactly from the bits; subnormals are
    first scaled by 2**64 (exact)."""
    f = fmt(x)
    a = un("abs", x)
    sub = a < f.min_normal
    a = where(sub, a * 2.0**64, a)
    raw = ((a.bits(f.int_t) >> f.mant) & 0x7FF).to(int32) - f.bias
    return raw - where(sub, x.like(64, int32), x.like(0, int32))


def logb(x: X) -> X:
    """The exponent as a float: -inf for 0, +inf for infinities, NaN for NaN."""
    e = exponent(where(x.eq(0.0) | ~(un("abs", x) < float("inf")), x.like(1.0), x)).to(x.dtype)
    e = where(x.eq(0.0), x.like(float("-inf")), e)
    return where(isinf(x), x.like(float("inf")), where(isnan(x), x, e))


def ilogb(x: X) -> X:
    """int32 exponent; INT_MIN for 0 and NaN, INT_MAX for infinities (C's FP_ILOGB0 and
    FP_ILOGBNAN as glibc and CUDA define them)."""
    e = exponent(where(x.eq(0.0) | ~(un("abs", x) < float("inf")), x.like(1.0), x))
    e = where(x.eq(0.0) | isnan(x), x.like(INT_MIN, int32), e)
    return where(isinf(x), x.like(INT_MAX, int32), e)


def ldexp(x: X, n) -> X:
    """x * 2**n with one rounding (the `ldexp` primitive)."""
    return float_int("ldexp", x, n)


def nextafter(x: X, toward: float) -> X:
    return bi("nextafter", x, toward)


def fdim(x: X, y: X) -> X:
    """x - y where x > y, +0 where x <= y, NaN where either is NaN."""
    d = where(x > y, x - y, x.like(0.0))
    return where(isnan(x) | isnan(y), x + y, d)


def saturate(x: X) -> X:
    """x clamped to [0, 1]; NaN gives 0 (as CUDA's __saturatef)."""
    return where(x > 0.0, bi("minimum", x, 1.0), x.like(0.0))


def as_int1(x: X) -> X:
    return x if x.dtype == int1 else x.to(int1)
