"""Element-wise op table of the tile lowering.

`ELEMENTWISE[kind](op, xs, e)` builds the Loop IR expression of one element of `op`'s result
from the Loop IR expressions `xs` of its operands at that element; `e` is the element's flat
index (only `iota` reads it).  Scalar ops use the same table.  Memory ops (`load`, `store`,
`atomic_rmw`, `atomic_cas`) and gathers (`broadcast`, `trans`) need statements or addressing
and are handled by the lowering itself.

Semantic rules made explicit here (see kdsl/ir/loop.py):
- float16/bfloat16 arithmetic runs in float32 (`compute_dtype`) and every result is wrapped in
  `Round(x, fmt)`, so every backend produces the same bits with or without native half math.
- integer `floordiv`/`mod` are Loop IR `div`/`mod` (C truncation, backends give x/0 == 0);
  float `floordiv` is `floor(a / b)`.
- shift amounts are masked to the operand width (`b & (bits - 1)`), as on every GPU.
- 8-bit floats are float32 in registers too; their rounding, loads, stores and bitcasts are
  integer arithmetic on the bits (fp8.py).
"""

from __future__ import annotations

from collections.abc import Callable

from kdsl.ir import fp8 as F8
from kdsl.ir import tile
from kdsl.ir.loop import (
    Binary,
    Bitcast,
    Cast,
    Const,
    Expr,
    Fma,
    PtrAdd,
    PtrDiff,
    Round,
    Select,
    Unary,
)
from kdsl.ir.types import (
    DType,
    PointerType,
    TileType,
    bfloat16,
    compute_dtype,
    float16,
    float32,
    float64,
    uint32,
)

from . import fp8
from . import index as ix

Builder = Callable[[tile.Op, list[Expr], Expr], Expr]

HALF = (float16, bfloat16)


def rounded(x: Expr, elem: DType | PointerType) -> Expr:
    """Wrap a float32 result of a float16/bfloat16 op in its rounding (8-bit floats: the
    register rule of kdsl/ir/fp8.py)."""
    if isinstance(elem, DType) and elem.is_fp8:
        return fp8.round_value(x, elem, register=True)
    return Round(x, elem.name) if elem in HALF else x


def const(value, elem: DType) -> Expr:
    """A constant of `elem` in its register type (16-bit floats rounded once, here)."""
    if elem.is_bool:
        return Const(bool(value), elem)
    if elem.is_fp8:
        return Const(F8.value_of(value, elem), float32)
    if elem.is_float:
        c = Const(float(value), compute_dtype(elem))
        return rounded(c, elem)
    return Const(int(value), elem)


def _res(op: tile.Op) -> DType:
    return op.results[0].type.elem


def _binary(loop_op: str) -> Builder:
    return lambda op, xs, e: rounded(Binary(loop_op, xs[0], xs[1]), _res(op))


def _floordiv(op, xs, e):
    q = Binary("div", xs[0], xs[1])
    return rounded(Unary("floor", q), _res(op)) if _res(op).is_float else q


def _shift(loop_op: str) -> Builder:
    def build(op, xs, e):
        t = _res(op)
        amount = xs[1] if op.operands[1].elem == t else Cast(xs[1], t)
        return Binary(loop_op, xs[0], Binary("and", amount, Const(t.bits - 1, t)))
    return build


def _compare(loop_op: str) -> Builder:
    return lambda op, xs, e: Binary(loop_op, xs[0], xs[1])


def _unary(loop_op: str) -> Builder:
    return lambda op, xs, e: rounded(Unary(loop_op, xs[0]), _res(op))


def _cast(op, xs, e):
    src, dst, x = op.operands[0].elem, _res(op), xs[0]
    if src == dst:
        return x
    if isinstance(src, PointerType) or isinstance(dst, PointerType):
        return Bitcast(x, dst)
    if dst.is_bool:
        return Binary("ne", x, const(0, src))
    if dst.is_fp8:  # the conversion rule; float64 through round-to-odd (no double rounding)
        x32 = x if compute_dtype(src) == float32 else (
            fp8.widen_f64(x) if src == float64 else Cast(x, float32))
        return fp8.round_value(x32, dst, register=False)
    if src.is_fp8 and (dst in HALF or dst == float32):
        return x  # float16 and bfloat16 hold every 8-bit float value exactly
    if dst in HALF:
        # Round from float32; a wider source goes through float32 first (a float64 or a large
        # int64 can round twice; documented limitation of the Loop IR's `Round`).
        return Round(x if compute_dtype(src) == float32 else Cast(x, float32), dst.name)
    if src in HALF and dst == float32:
        return x  # already held in float32
    return Cast(x, dst)


def _u(v: int) -> Const:
    return Const(v, uint32)


def _bin(op: str, a: Expr, b: Expr | int) -> Expr:
    return Binary(op, a, _u(b) if isinstance(b, int) else b)


def half_bits(x: Expr, fmt: DType) -> Expr:
    """The 16-bit pattern (in a uint32) of a float16/bfloat16 value held in float32."""
    u = Bitcast(x, uint32)
    if fmt == bfloat16:
        return _bin("shr", u, 16)  # the low 16 bits of a bfloat16 value are zero
    sign = _bin("and", _bin("shr", u, 16), 0x8000)
    exp = _bin("and", _bin("shr", u, 23), 0xFF)
    mant = _bin("and", u, 0x7FFFFF)
    normal = _bin("or", _bin("or", sign, _bin("shl", _bin("sub", exp, 112), 10)),
                  _bin("shr", mant, 13))
    # float16 subnormals (and zero) are exact multiples of 2^-24 below 2^-14.
    sub = _bin("or", sign, Cast(Binary("mul", Unary("abs", x), Const(2.0**24, float32)), uint32))
    quiet = Select(_bin("ne", mant, 0), _u(0x200), _u(0))
    special = _bin("or", _bin("or", _bin("or", sign, 0x7C00), _bin("shr", mant, 13)), quiet)
    return Select(_bin("eq", exp, 0xFF), special, Select(_bin("gt", exp, 112), normal, sub))


def half_from_bits(h: Expr, fmt: DType) -> Expr:
    """The float32 holding the float16/bfloat16 value of 16-bit pattern `h` (a uint32)."""
    if fmt == bfloat16:
        return Bitcast(_bin("shl", h, 16), float32)
    sign = _bin("shl", _bin("and", h, 0x8000), 16)
    exp = _bin("and", _bin("shr", h, 10), 0x1F)
    mant = _bin("and", h, 0x3FF)
    normal = _bin("or", _bin("or", sign, _bin("shl", _bin("add", exp, 112), 23)),
                  _bin("shl", mant, 13))
    special = _bin("or", _bin("or", sign, 0x7F800000), _bin("shl", mant, 13))
    magnitude = Bitcast(Binary("mul", Cast(mant, float32), Const(2.0**-24, float32)), uint32)
    sub = _bin("or", sign, magnitude)
    bits = Select(_bin("eq", exp, 0x1F), special, Select(_bin("eq", exp, 0), sub, normal))
    return Bitcast(bits, float32)


def _bitcast(op, xs, e):
    src, dst, x = op.operands[0].elem, _res(op), xs[0]
    if src == dst:
        return x
    if isinstance(src, DType) and isinstance(dst, DType) and (src.is_fp8 or dst.is_fp8):
        # through the code: an 8-bit float's register value is float32
        bits = fp8.encode(x, src) if src.is_fp8 else _bin("and", Cast(x, uint32), 0xFF)
        return fp8.decode(bits, dst) if dst.is_fp8 else Cast(bits, dst)
    if src not in HALF and dst not in HALF:
        return Bitcast(x, dst)
    # 16-bit floats are held in float32: go through their 16-bit pattern explicitly.
    if src in HALF:
        bits = half_bits(x, src)
    else:
        bits = _bin("and", Cast(x, uint32), 0xFFFF)
    return half_from_bits(bits, dst) if dst in HALF else Cast(bits, dst)


def _iota(op, xs, e):
    shape = op.results[0].shape
    return ix.add(ix.coord(e, shape, op.attrs["axis"]), ix.c32(op.attrs.get("start", 0)))


def _const(op, xs, e):
    return const(op.attrs["value"], _res(op))


def _identity(op, xs, e):
    return xs[0]


# Tile op kind -> Loop IR binary op (where the two agree).
_BINARY_NAMES = {
    "add": "add", "sub": "sub", "mul": "mul", "div": "div", "mod": "mod", "pow": "pow",
    "and": "and", "or": "or", "xor": "xor", "maximum": "maximum", "minimum": "minimum",
    **{k: k for k in ("atan2", "hypot", "copysign", "nextafter", "remainder", "ldexp", "jn",
                      "yn")},
}

# Ops only some targets compute: op kind -> (target capability, the backends that have it).
# The lowering raises a CompilationError at the op's line on a target without it.
NEEDS_CAP: dict[str, tuple[str, str]] = {
    k: ("bessel", "interp, llvm and cuda") for k in ("j0", "j1", "y0", "y1", "jn", "yn")
}

ELEMENTWISE: dict[str, Builder] = {
    **{k: _binary(v) for k, v in _BINARY_NAMES.items()},
    **{k: _compare(k) for k in tile.COMPARE_OPS},
    **{k: _unary(k) for k in tile.UNARY_OPS},
    "floordiv": _floordiv,
    "shl": _shift("shl"),
    "shr": _shift("shr"),
    "fma": lambda op, xs, e: rounded(Fma(*xs), _res(op)),
    "where": lambda op, xs, e: Select(*xs),
    "cast": _cast,
    "bitcast": _bitcast,
    "addptr": lambda op, xs, e: PtrAdd(xs[0], xs[1]),
    "ptr_offset": lambda op, xs, e: PtrDiff(xs[0], xs[1]),
    "int_to_ptr": lambda op, xs, e: Cast(xs[0], _res(op)),
    "ptr_to_int": lambda op, xs, e: Cast(xs[0], _res(op)),
    "hint": _identity,
    "splat": _identity,
    "reshape": _identity,
    "iota": _iota,
    "const": _const,
}


def register_type(t: TileType) -> DType | PointerType:
    """Loop IR type holding elements of `t`."""
    return t.elem if isinstance(t.elem, PointerType) else compute_dtype(t.elem)
