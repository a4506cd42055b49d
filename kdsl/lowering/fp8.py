"""8-bit floats in the lowering: the conversions of `kdsl/ir/fp8.py` as Loop IR expressions.

fp8 values are float32 in registers (`compute_dtype`), and the Loop IR has no fp8 node: a
`Load` through a `ptr<float8...>` reads the raw byte (a uint8 code) and a `Store` writes one
(kdsl/ir/loop.py), and this module builds, from integer and float32 operations that every
backend has, the three conversions the interpreter defines:

  decode(code)          the float32 value of a code (loads)
  encode(x)             the code of a register value (stores, bitcasts; the register rule)
  round(x, register)    x rounded to the format, held in float32: the conversion rule for
                        casts, the register rule for op results

So OpenCL, CUDA and LLVM share one implementation, checked against the NumPy reference on
every backend (tests/backend/test_fp8.py) and in the Loop IR simulator.

Rounding to nearest even is integer arithmetic on the float32 bits `a` of |x|: for a normal
result, `(a + half - 1 + lsb) >> shift` rounds the significand to man_bits (a carry moves into
the next binade by itself); for a subnormal result, the float32 addition `|x| + C` with
C = 2^(24 - bias - man_bits), whose ulp is the format's quantum, rounds |x| to a multiple of the
quantum (IEEE addition rounds to nearest even) and the bits of the sum minus those of C count
the quanta.  No step relies on float arithmetic that fast-math may reassociate (the one float
addition's result is only read through its bits).  Constants are converted here, in Python,
with the reference (`fp8.code_of` / `fp8.value_of`).
"""

from __future__ import annotations

import numpy as np

from kdsl.ir import fp8 as F
from kdsl.ir.loop import Binary, Bitcast, Cast, Const, Expr, Load, Select, Store, Unary
from kdsl.ir.types import DType, float32, float64, uint8, uint32

_INF = F.F32_INF_BITS


def _u(v: int) -> Const:
    return Const(v, uint32)


def _bin(op: str, a: Expr, b: Expr | int) -> Expr:
    return Binary(op, a, _u(b) if isinstance(b, int) else b)


def _f(v: float) -> Const:
    return Const(v, float32)


def _bits32(v: float) -> int:
    return int(np.float32(v).view(np.uint32))


def _abs_bits(x: Expr) -> tuple[Expr, Expr]:
    """(bits of x, bits of |x|) of a float32 expression."""
    u = Bitcast(x, uint32)
    return u, _bin("and", u, 0x7FFFFFFF)


def _rounded_normal(a: Expr, f: F.Fp8Format) -> Expr:
    """|x|'s float32 bits rounded to man_bits of significand (nearest, ties to even), low bits
    still in place."""
    shift = 23 - f.man_bits
    lsb = _bin("and", _bin("shr", a, shift), 1)
    return _bin("add", _bin("add", a, (1 << (shift - 1)) - 1), lsb)


def _quanta(a: Expr, f: F.Fp8Format) -> Expr:
    """|x| (bits `a`, below the smallest normal) rounded to a whole number of quanta, as a
    uint32 count (up to 2^man_bits)."""
    c = 2.0 ** (24 - f.bias - f.man_bits)
    total = Binary("add", Bitcast(a, float32), _f(c))
    return _bin("sub", Bitcast(total, uint32), _bits32(c))


def round_value(x: Expr, dtype: DType, register: bool) -> Expr:
    """float32 `x` rounded to the 8-bit format `dtype`, as a float32 (conversion rule, or the
    register rule for op results; kdsl/ir/fp8.py)."""
    if isinstance(x, Const):
        conv = F.register_value if register else F.convert_value
        return _f(float(conv(float(x.value), dtype)))
    f = F.fmt(dtype)
    u, a = _abs_bits(x)
    shift = 23 - f.man_bits
    normal = _bin("and", _rounded_normal(a, f), ~((1 << shift) - 1) & 0xFFFFFFFF)
    sub = Bitcast(Binary("mul", Cast(_quanta(a, f), float32), _f(f.subnormal_scale)), uint32)
    r = Select(_bin("lt", a, f.min_normal_bits), sub, normal)
    saturated = _bin("minimum", r, f.max_bits)  # (unsigned) infinities included
    if register and f.special == "ieee":
        saturated = Select(_bin("eq", a, _INF), _u(_INF), saturated)
    sign = _bin("and", u, 0x80000000)
    if f.special == "fnuz":  # no -0; infinities become the NaN (0xffc00000, see decode)
        signed = Select(_bin("eq", saturated, 0), _u(0), _bin("or", saturated, sign))
        signed = Select(_bin("eq", a, _INF), _u(F.QUIET_NAN_BITS | 0x80000000), signed)
    else:
        signed = _bin("or", saturated, sign)
    out = Select(_bin("gt", a, _INF), _nan_value(f, u, register), signed)
    return Bitcast(out, float32)


def _nan_value(f: F.Fp8Format, u: Expr, register: bool) -> Expr:
    """float32 bits of the register value a NaN becomes (decode of its code)."""
    if f.special == "none":  # no NaN: -max (0xff)
        return _u(_bits32(-f.max_value))
    if f.special == "fnuz":
        return _u(F.QUIET_NAN_BITS | 0x80000000)
    if not register:
        return _u(F.QUIET_NAN_BITS | 0x7F)
    sign = _bin("and", u, 0x80000000)
    if f.special == "fn":
        return _bin("or", sign, F.QUIET_NAN_BITS | 0x7F)
    payload = _bin("and", u, 3)  # float8e5 keeps its payload
    mag = Select(_bin("eq", payload, 0), _u(0x7F), _bin("or", payload, 0x7C))
    return _bin("or", _bin("or", sign, F.QUIET_NAN_BITS), mag)


def encode(x: Expr, dtype: DType) -> Expr:
    """The code (uint32, below 256) of float32 register value `x` (register rule)."""
    if isinstance(x, Const):
        return _u(F.code_of(float(x.value), dtype))
    f = F.fmt(dtype)
    u, a = _abs_bits(x)
    shift = 23 - f.man_bits
    normal = _bin("sub", _bin("shr", _rounded_normal(a, f), shift), f.rebias << f.man_bits)
    c = Select(_bin("lt", a, f.min_normal_bits), _quanta(a, f), normal)
    c = _bin("minimum", c, f.max_code)
    if f.special == "ieee":
        c = Select(_bin("eq", a, _INF), _u(0x7C), c)
    sign = _bin("and", _bin("shr", u, 24), 0x80)
    if f.special == "fnuz":
        signed = Select(_bin("eq", c, 0), _u(0), _bin("or", c, sign))
        signed = Select(_bin("eq", a, _INF), _u(0x80), signed)
    else:
        signed = _bin("or", c, sign)
    if f.special == "fn":
        nan: Expr = _bin("or", sign, 0x7F)
    elif f.special == "ieee":
        payload = _bin("and", u, 3)
        nan = _bin("or", sign, Select(_bin("eq", payload, 0), _u(0x7F), _bin("or", payload, 0x7C)))
    else:
        nan = _u(f.nan_code)
    return Select(_bin("gt", a, _INF), nan, signed)


def decode(h: Expr, dtype: DType) -> Expr:
    """The float32 value of code `h` (a uint32 below 256)."""
    f = F.fmt(dtype)
    mag = _bin("and", h, 0x7F)
    sign = _bin("shl", _bin("and", h, 0x80), 24)
    normal = _bin("add", _bin("shl", mag, 23 - f.man_bits), f.rebias << 23)
    sub = Bitcast(Binary("mul", Cast(mag, float32), _f(f.subnormal_scale)), uint32)
    bits = Select(_bin("lt", mag, 1 << f.man_bits), sub, normal)
    nan = _bin("or", _u(F.QUIET_NAN_BITS), mag)
    if f.special == "fn":
        bits = Select(_bin("eq", mag, 0x7F), nan, bits)
    elif f.special == "ieee":
        bits = Select(_bin("gt", mag, 0x7C), nan,
                      Select(_bin("eq", mag, 0x7C), _u(_INF), bits))
    elif f.special == "fnuz":
        bits = Select(_bin("eq", h, 0x80), nan, bits)
    return Bitcast(_bin("or", bits, sign), float32)


# ------------------------------------------------------------------------ memory accesses


def _fp8_pointee(ptr: Expr) -> DType | None:
    p = ptr.dtype.pointee
    return p if isinstance(p, DType) and p.is_fp8 else None


def load(ptr: Expr, mask: Expr | None, other: Expr | None, loc) -> Expr:
    """`Load` of a tile element, decoding 8-bit floats (their `Load` reads the code)."""
    t = _fp8_pointee(ptr)
    if t is None:
        return Load(ptr, mask, other, loc=loc)
    code_other = None if other is None else Cast(encode(other, t), uint8)
    if isinstance(code_other, Cast) and isinstance(code_other.x, Const):
        code_other = Const(code_other.x.value, uint8)
    return decode(Cast(Load(ptr, mask, code_other, loc=loc), uint32), t)


def store(ptr: Expr, value: Expr, mask: Expr | None, loc) -> Store:
    """`Store` of a tile element, encoding 8-bit floats (their `Store` writes the code)."""
    t = _fp8_pointee(ptr)
    if t is not None:
        value = encode(value, t)
        value = Const(value.value, uint8) if isinstance(value, Const) else Cast(value, uint8)
    return Store(ptr, value, mask, loc=loc)


def widen_f64(x: Expr) -> Expr:
    """float64 `x` as a float32 rounded to odd, so that rounding it to 8 bits afterwards is
    correctly rounded (no double rounding): an inexact conversion keeps the truncated value
    with its last bit set."""
    f = Cast(x, float32)
    back = Cast(f, float64)
    bits = Bitcast(f, uint32)
    toward_zero = Select(Binary("gt", Unary("abs", back), Unary("abs", x)), _bin("sub", bits, 1),
                         bits)
    odd = _bin("or", toward_zero, 1)
    return Bitcast(Select(Binary("ne", back, x), odd, bits), float32)


__all__ = ["decode", "encode", "load", "round_value", "store", "widen_f64"]
