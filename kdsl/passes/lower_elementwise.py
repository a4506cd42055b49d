"""Element-wise op table of the tile lowering.

`ELEMENTWISE[kind](op, xs, e)` builds the Loop IR expression of one element of `op`'s result
from the Loop IR expressions `xs` of its operands at that element; `e` is the element's flat
index (only `iota` reads it).  Scalar ops use the same table.  Memory ops (`load`, `store`,
`atomic_add`) and gathers (`broadcast`, `trans`) need statements or addressing and are handled
by the lowering itself.

Semantic rules made explicit here (see kdsl/ir/loop.py):
- float16/bfloat16 arithmetic runs in float32 (`compute_dtype`) and every result is wrapped in
  `Round(x, fmt)`, so every backend produces the same bits with or without native half math.
- integer `floordiv`/`mod` are Loop IR `div`/`mod` (C truncation, backends give x/0 == 0);
  float `floordiv` is `floor(a / b)`.
- shift amounts are masked to the operand width (`b & (bits - 1)`), as on every GPU.
"""

from __future__ import annotations

from collections.abc import Callable

from kdsl.ir import tile
from kdsl.ir.loop import Binary, Bitcast, Cast, Const, Expr, Fma, PtrAdd, Round, Select, Unary
from kdsl.ir.types import (
    DType,
    PointerType,
    TileType,
    bfloat16,
    compute_dtype,
    float16,
    float32,
)

from . import lower_index as ix

Builder = Callable[[tile.Op, list[Expr], Expr], Expr]

HALF = (float16, bfloat16)


def rounded(x: Expr, elem: DType | PointerType) -> Expr:
    """Wrap a float32 result of a float16/bfloat16 op in its rounding."""
    return Round(x, elem.name) if elem in HALF else x


def const(value, elem: DType) -> Expr:
    """A constant of `elem` in its register type (16-bit floats rounded once, here)."""
    if elem.is_bool:
        return Const(bool(value), elem)
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
    if dst in HALF:
        # Round from float32; a wider source goes through float32 first (a float64 or a large
        # int64 can round twice; documented limitation of the Loop IR's `Round`).
        return Round(x if compute_dtype(src) == float32 else Cast(x, float32), dst.name)
    if src in HALF and dst == float32:
        return x  # already held in float32
    return Cast(x, dst)


def _bitcast(op, xs, e):
    src, dst = op.operands[0].elem, _res(op)
    if src == dst:
        return xs[0]
    if src in HALF or dst in HALF:
        from kdsl.errors import CompilationError

        raise CompilationError("bitcast to or from float16/bfloat16 is not supported", op.loc)
    return Bitcast(xs[0], dst)


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
    "hint": _identity,
    "splat": _identity,
    "reshape": _identity,
    "iota": _iota,
    "const": _const,
}


def register_type(t: TileType) -> DType | PointerType:
    """Loop IR type holding elements of `t`."""
    return t.elem if isinstance(t.elem, PointerType) else compute_dtype(t.elem)
