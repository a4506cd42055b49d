"""Flat-index arithmetic for the tile lowering.

Every tile element is addressed by its row-major flat index `e` (an int32 Loop IR expression).
These helpers build the Loop IR expressions that turn `e` into coordinates and back, folding
constants and using shifts and masks for powers of two so the generated code stays small and
vectorisable.

Nested element loops.  A one-thread group over a tile of several dims runs one loop per
(non-unit) dim, innermost = last dim (`nest`), so that accesses along the last dim are
contiguous for the vectoriser instead of coordinates computed from `e` by shifts and masks
(which LLVM turns into gathers).  `nest` registers the flat index variable with its loop
variables; `coord` then answers coordinates of that shape with the loop variables directly.
`nested_flat` is the ONE map from those loop indices to the flat element index.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from math import prod
from weakref import WeakKeyDictionary

from kdsl.ir.loop import Binary, Cast, Const, Expr, PtrAdd, Special, Var
from kdsl.ir.types import int32

# Flat index variable -> (its non-unit dims, one loop variable per dim); see `nest`.  Weak:
# entries die with the lowering that made them.
_NESTED: WeakKeyDictionary[Var, tuple[tuple[int, ...], tuple[Var, ...]]] = WeakKeyDictionary()


def c32(v: int) -> Const:
    return Const(int(v), int32)


def _is_const(x: Expr, v: int | None = None) -> bool:
    return isinstance(x, Const) and (v is None or x.value == v)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def add(a: Expr, b: Expr) -> Expr:
    if _is_const(a) and _is_const(b):
        return c32(a.value + b.value)
    if _is_const(b, 0):
        return a
    if _is_const(a, 0):
        return b
    return Binary("add", a, b)


def mul(a: Expr, n: int) -> Expr:
    """`a * n` for a constant n >= 0 (a shift when n is a power of two)."""
    if n == 0:
        return c32(0)
    if _is_const(a):
        return c32(a.value * n)
    if n == 1:
        return a
    if _pow2(n):
        return Binary("shl", a, c32(n.bit_length() - 1))
    return Binary("mul", a, c32(n))


def mul_expr(a: Expr, b: Expr) -> Expr:
    if _is_const(b):
        return mul(a, b.value)
    if _is_const(a):
        return mul(b, a.value)
    return Binary("mul", a, b)


def div(a: Expr, n: int) -> Expr:
    """`a / n` for a non-negative index a and constant n > 0."""
    if n == 1:
        return a
    if _is_const(a):
        return c32(a.value // n)
    if _pow2(n):
        return Binary("shr", a, c32(n.bit_length() - 1))
    return Binary("div", a, c32(n))


def mod(a: Expr, n: int) -> Expr:
    """`a % n` for a non-negative index a and constant n > 0."""
    if n == 1:
        return c32(0)
    if _is_const(a):
        return c32(a.value % n)
    if _pow2(n):
        return Binary("and", a, c32(n - 1))
    return Binary("mod", a, c32(n))


def strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major element strides of `shape`."""
    return tuple(prod(shape[i + 1:]) for i in range(len(shape)))


def nest_dims(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The dims a nested element loop over `shape` runs (unit dims dropped)."""
    return tuple(d for d in shape if d != 1)


def nest(e: Var, dims: tuple[int, ...], loops: tuple[Expr, ...]) -> None:
    """Declare that flat index `e` is `nested_flat(loops, dims)`, with loops[i] in
    range(dims[i]): `coord` of shapes with these non-unit dims reads the loop variables (or
    the index expressions given in their place: an element whose coordinates a loop computes,
    as a CPU dot's packing loops do, kdsl/lowering/dot_tile.py)."""
    _NESTED[e] = (tuple(dims), tuple(loops))


def nested_flat(loops: tuple[Expr, ...], dims: tuple[int, ...]) -> Expr:
    """Row-major flat index of loop indices `loops` over `dims` (the one map)."""
    return flatten(list(loops), dims)


def _nested_coord(e: Expr, shape: tuple[int, ...], axis: int) -> Expr | None:
    nested = _NESTED.get(e) if isinstance(e, Var) else None
    if nested is None:
        return None
    dims, loops = nested
    if shape[axis] == 1:
        return c32(0)
    if nest_dims(shape) != dims:
        return None
    return loops[sum(1 for d in shape[:axis] if d != 1)]


def coord(e: Expr, shape: tuple[int, ...], axis: int) -> Expr:
    """Coordinate along `axis` of flat index `e` (< numel) of a tile of `shape`.
    The outermost axis needs no modulo since `e < numel`."""
    c = _nested_coord(e, shape, axis)
    if c is not None:
        return c
    c = div(e, strides(shape)[axis])
    return c if axis == 0 else mod(c, shape[axis])


def unflatten(e: Expr, shape: tuple[int, ...]) -> list[Expr]:
    return [coord(e, shape, d) for d in range(len(shape))]


def flatten(coords: list[Expr], shape: tuple[int, ...]) -> Expr:
    out: Expr = c32(0)
    for c, s in zip(coords, strides(shape)):
        out = add(out, mul(c, s))
    return out


def broadcast_source(e: Expr, src: tuple[int, ...], dst: tuple[int, ...]) -> Expr:
    """Flat index in `src` of the element read by flat element `e` of its broadcast to `dst`
    (dims of size 1 in `src` contribute nothing)."""
    out: Expr = c32(0)
    for d, (s, stride) in enumerate(zip(src, strides(src))):
        if s != 1:
            out = add(out, mul(coord(e, dst, d), stride))
    return out


def trans_source(e: Expr, src: tuple[int, ...], perm: tuple[int, ...]) -> Expr:
    """Flat index in `src` of flat element `e` of `trans(src, perm)`: output dim d is source
    dim perm[d]."""
    dst = tuple(src[p] for p in perm)
    src_strides = strides(src)
    out: Expr = c32(0)
    for d, p in enumerate(perm):
        if dst[d] != 1:
            out = add(out, mul(coord(e, dst, d), src_strides[p]))
    return out


def mentions(e: Expr, v: Var, memo: dict[int, bool] | None = None) -> bool:
    """Whether expression `e` reads variable `v` (shared subexpressions visited once)."""
    if e is v:
        return True
    if isinstance(e, (Var, Const, Special)):
        return False
    memo = {} if memo is None else memo
    if id(e) not in memo:
        memo[id(e)] = any(isinstance(x, Expr) and mentions(x, v, memo)
                          for x in (getattr(e, f.name) for f in fields(e)))
    return memo[id(e)]


def coefficient(e: Expr, v: Var) -> int | None:
    """How far `e` moves when `v` grows by one: elements for an integer, bytes for a pointer
    (`PtrAdd` scales its offset by the pointee's size); None when `e` is not affine in `v`
    with a constant coefficient (a product of two variables, a division, a load)."""
    return _coefficient(e, v, {}, {})


def _coefficient(e: Expr, v: Var, memo: dict[int, int | None], seen: dict[int, bool]
                 ) -> int | None:
    if e is v:
        return 1
    if not mentions(e, v, seen):
        return 0
    if id(e) in memo:
        return memo[id(e)]
    memo[id(e)] = out = _affine_step(e, v, lambda x: _coefficient(x, v, memo, seen))
    return out


def _affine_step(e: Expr, v: Var, rec: Callable[[Expr], int | None]) -> int | None:
    if isinstance(e, PtrAdd):
        p, o = rec(e.ptr), rec(e.offset)
        return None if p is None or o is None else p + o * e.ptr.dtype.pointee.itemsize
    if isinstance(e, Cast) and not e.dtype.is_float:
        return rec(e.x)
    if not isinstance(e, Binary):
        return None
    a, b = rec(e.a), rec(e.b)
    if e.op in ("add", "sub"):
        return None if a is None or b is None else (a + b if e.op == "add" else a - b)
    if e.op == "shl" and isinstance(e.b, Const) and a is not None:
        return a << int(e.b.value)
    if e.op == "mul" and isinstance(e.b, Const) and a is not None:
        return a * int(e.b.value)
    if e.op == "mul" and isinstance(e.a, Const) and b is not None:
        return b * int(e.a.value)
    return None
