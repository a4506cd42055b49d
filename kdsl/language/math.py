"""`kd.math`: the names of Triton's `tl.math`, with Triton's signatures.

Most are the `kd.*` builtins themselves (`kd.math.exp is kd.exp`); `umulhi`, `sqrt_rn`,
`div_rn` and `fdiv` are defined here and also exported at top level (`kd.umulhi`, ...), as
Triton exports them.  kdsl's `sqrt` and `/` are already IEEE (correctly rounded) on every
backend unless a kernel is compiled with `fast_math`, so `sqrt_rn` and `div_rn` are the same
operations under the names that promise it.
"""

from __future__ import annotations

from . import core, semantic
from .core import abs, builtin, ceil, cos, erf, exp, exp2, floor, fma, log, log2, rsqrt, sin, sqrt
from .intbits import umulhi as _umulhi
from .mathexpr import X


@builtin
def umulhi(x, y, _builder=None):
    """The most significant N bits of the 2N-bit product of x and y, their bit patterns read
    as unsigned (int32, uint32, int64, uint64; the result has the promoted type)."""
    dt = semantic.binary_dtype(x, y)
    if not dt.is_int or dt.bits not in (32, 64):
        raise semantic.error(f"umulhi needs 32- or 64-bit integers, got {dt}")
    shp = semantic.broadcast_shapes(semantic.shape(x), semantic.shape(y))
    xs = [X(_builder, semantic.coerce(_builder, v, dt, shp)) for v in (x, y)]
    return _umulhi(*xs).v


@builtin
def sqrt_rn(x, _builder=None):
    """Square root rounded to nearest (IEEE)."""
    return semantic.unary(_builder, "sqrt", x)


@builtin
def div_rn(x, y, _builder=None):
    """x / y rounded to nearest (IEEE)."""
    return semantic.truediv(_builder, x, y)


@builtin
def fdiv(x, y, ieee_rounding=False, _builder=None):
    """x / y of two floats (Triton's fast division; IEEE division here on every backend)."""
    for v in (x, y):
        if not (isinstance(v, float) or semantic.is_value(v) and not semantic.is_ptr(v)
                and v.type.elem.is_float):
            raise semantic.error("both operands of fdiv must have a floating-point type")
    return semantic.truediv(_builder, x, y)


# Triton's `x.sqrt_rn()` (its other math methods are kd's own: x.exp(), x.sqrt(), ...)
core.TILE_METHODS.setdefault("sqrt_rn", sqrt_rn)

__all__ = ["abs", "ceil", "cos", "div_rn", "erf", "exp", "exp2", "fdiv", "floor", "fma", "log",
           "log2", "rsqrt", "sin", "sqrt", "sqrt_rn", "umulhi"]
