"""Python operators on IR values, for writing the math library's decompositions readably.

`X(b, v)` wraps a Tile IR value `v` and the builder `b`; `+ - * / < == & | ~ << >>` and the
functions below build ops through the rules of `semantic.py`, so promotion, weak typing of
Python literals (`x * 0.5` keeps x's float type) and broadcasting are the language's own.
Nothing here adds semantics: every function of `libdevice` written with it is an exact
composition of Tile IR ops, evaluated by every backend and by the interpreter alike.
"""

from __future__ import annotations

from typing import Any

from ..ir.types import DType, TileType, int1, int32
from . import semantic


class X:
    """An IR value inside a decomposition, with Python operators."""

    __slots__ = ("b", "v")

    def __init__(self, b: Any, v: Any):
        self.b = b
        self.v = semantic.to_value(b, v) if not isinstance(v, X) else v.v

    @property
    def dtype(self) -> DType:
        return self.v.type.elem

    def _bin(self, kind: str, other: Any, swap: bool = False) -> X:
        o = other.v if isinstance(other, X) else other
        a, c = (o, self.v) if swap else (self.v, o)
        return X(self.b, semantic.binary(self.b, kind, a, c))

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("div", o)
    def __rtruediv__(self, o): return self._bin("div", o, True)
    def __floordiv__(self, o): return self._bin("floordiv", o)
    def __mod__(self, o): return self._bin("mod", o)
    def __and__(self, o): return self._bin("and", o)
    def __rand__(self, o): return self._bin("and", o, True)
    def __or__(self, o): return self._bin("or", o)
    def __ror__(self, o): return self._bin("or", o, True)
    def __xor__(self, o): return self._bin("xor", o)
    def __lshift__(self, o): return self._bin("shl", o)
    def __rshift__(self, o): return self._bin("shr", o)

    def _cmp(self, kind: str, other: Any) -> X:
        o = other.v if isinstance(other, X) else other
        return X(self.b, semantic.compare(self.b, kind, self.v, o))

    def __lt__(self, o): return self._cmp("lt", o)
    def __le__(self, o): return self._cmp("le", o)
    def __gt__(self, o): return self._cmp("gt", o)
    def __ge__(self, o): return self._cmp("ge", o)
    def eq(self, o) -> X: return self._cmp("eq", o)
    def ne(self, o) -> X: return self._cmp("ne", o)

    def __neg__(self) -> X:
        return X(self.b, semantic.neg(self.b, self.v))

    def __invert__(self) -> X:
        return X(self.b, semantic.invert(self.b, self.v))

    def to(self, dtype: DType) -> X:
        return X(self.b, semantic.cast(self.b, self.v, dtype))

    def bits(self, dtype: DType) -> X:
        """The same bits as `dtype` (equal width)."""
        return X(self.b, semantic.cast(self.b, self.v, dtype, bitcast=True))

    def like(self, value: Any, dtype: DType | None = None) -> X:
        """A constant of this value's shape and of `dtype` (default: this value's type)."""
        dt = dtype or self.dtype
        return X(self.b, semantic.full(self.b, self.v.shape, value, dt))


def lift(b: Any, v: Any) -> X:
    return v if isinstance(v, X) else X(b, v)


def _v(x: Any) -> Any:
    return x.v if isinstance(x, X) else x


def where(c: X, x: Any, y: Any) -> X:
    return X(c.b, semantic.where(c.b, c.v, _v(x), _v(y)))


def fma(a: X, x: Any, y: Any) -> X:
    return X(a.b, semantic.fma(a.b, a.v, _v(x), _v(y)))


def un(op: str, x: X) -> X:
    """A unary Tile IR op (exp, sqrt, trunc, clz, ...)."""
    return X(x.b, semantic.unary(x.b, op, x.v))


def bi(op: str, x: X, y: Any) -> X:
    """A binary Tile IR op of equal operand types (atan2, hypot, copysign, maximum, ...)."""
    return X(x.b, semantic.binary(x.b, op, x.v, _v(y)))


def float_int(op: str, x: X, n: Any) -> X:
    """`ldexp(x, n)`, `jn(x, n)`, `yn(x, n)`: x a float, n converted to int32, both at their
    common shape."""
    b = x.b
    n = semantic.to_value(b, _v(n), int32)
    n = semantic.cast(b, n, int32)
    shp = semantic.broadcast_shapes(x.v.shape, n.type.shape)
    xv = semantic.broadcast_to(b, x.v, shp)
    nv = semantic.broadcast_to(b, n, shp)
    return X(b, b.op(op, [xv, nv], xv.type))


def isnan(x: X) -> X:
    return x.ne(x)  # unordered: true exactly for NaN


def isinf(x: X) -> X:
    return un("abs", x).eq(float("inf"))


def isfinite(x: X) -> X:
    return un("abs", x) < float("inf")


def any_of(*cs: X) -> X:
    out = cs[0]
    for c in cs[1:]:
        out = out | c
    return out


def is_bool(x: X) -> bool:
    return x.dtype == int1


def type_of(x: X) -> TileType:
    return x.v.type
