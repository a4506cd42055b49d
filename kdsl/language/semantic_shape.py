"""Rules of the shape builtins that move elements: split, join, interleave, cat, flip, ravel,
gather and histogram (the rules of the other builtins are in `semantic.py`).

Every static rearrangement decomposes into two Tile IR ops: `slice` (per-dim start and step,
an index map that the lowering fuses like a broadcast or a transpose) and `where` over an `iota`
of broadcasts (join: element `[..., i]` of the result is a if i == 0 else b).  `gather` and
`histogram` depend on data and are ops of their own.
"""

from __future__ import annotations

from typing import Any

from ..ir.tile import Value
from ..ir.types import DType, TileType, int1, int32
from .semantic import (
    Operand,
    _check_numel,
    _constexpr_int,
    _mask_arg,
    binary_dtype,
    broadcast_shapes,
    broadcast_to,
    cast,
    coerce,
    describe,
    error,
    is_value,
    reshape,
    shape,
    to_value,
)


def _tile(x: Operand, what: str) -> Value:
    if not is_value(x) or not x.shape:
        raise error(f"{what} needs a tile, got {describe(x)}")
    return x


def _axis(ax: Any, rank: int, what: str) -> int:
    ax = _constexpr_int(ax, what)
    if not -rank <= ax < rank:
        raise error(f"{what} {ax} is out of range for a tile of rank {rank}")
    return ax % rank


def slice_tile(b, x: Value, start: tuple[int, ...], step: tuple[int, ...],
               out: tuple[int, ...]) -> Value:
    """Element c of the result (shape `out`) is x[start + step * c], per dim."""
    return b.op("slice", [x], TileType(out, x.type.elem), start=tuple(start), step=tuple(step))


def split(b, a: Operand) -> tuple[Value, Value]:
    """The two halves of a tile whose last dim has size 2 (a[..., 0], a[..., 1]); a tile of
    shape [2] splits into two scalars."""
    a = _tile(a, "split")
    if a.shape[-1] != 2:
        raise error(f"split needs a last dim of size 2, got shape {list(a.shape)}")
    r, out = a.type.rank, a.shape[:-1] + (1,)
    halves = []
    for i in (0, 1):
        h = slice_tile(b, a, (0,) * (r - 1) + (i,), (1,) * r, out)
        halves.append(b.op("reshape", [h], TileType(a.shape[:-1], a.type.elem)))
    return halves[0], halves[1]


def _numbers(x: Operand, y: Operand, what: str) -> DType:
    for v in (x, y):
        if is_value(v) and v.type.is_ptr:
            raise error(f"{what} is not defined on pointers")
    return binary_dtype(x, y)


def _stack(b, x: Operand, y: Operand, shp: tuple[int, ...], dt: DType, axis: int) -> Value:
    """x and y (shape `shp`) side by side along a new dim of size 2 at `axis`."""
    out = shp[:axis] + (2,) + shp[axis:]
    parts = []
    for v in (x, y):
        v = coerce(b, v, dt, shp)
        if v.shape:
            v = b.op("reshape", [v], TileType(shp[:axis] + (1,) + shp[axis:], dt))
        parts.append(broadcast_to(b, v, out))
    first = b.op("iota", [], TileType(out, int32), axis=axis, start=0)
    zero = b.op("const", [], TileType(out, int32), value=0)
    sel = b.op("eq", [first, zero], TileType(out, int1))
    return b.op("where", [sel, *parts], parts[0].type)


def join(b, x: Operand, y: Operand) -> Value:
    """x and y (broadcast together, promoted to one type) along a new last dim of size 2;
    two scalars give a tile of shape [2]."""
    dt = _numbers(x, y, "join")
    shp = broadcast_shapes(shape(x), shape(y))
    return _stack(b, x, y, shp, dt, len(shp))


def interleave(b, x: Operand, y: Operand) -> Value:
    """Elements of x and y alternating along the last dim: join then merge the last two dims."""
    c = join(b, x, y)
    if c.type.rank == 1:
        return c
    return reshape(b, c, c.shape[:-2] + (2 * c.shape[-2],))


def cat(b, x: Operand, y: Operand, can_reorder: bool = False) -> Value:
    """x then y along dim 0 (tiles of one shape). Order is kept whatever `can_reorder` says."""
    x, y = _tile(x, "cat"), _tile(y, "cat")
    if x.shape != y.shape:
        raise error(f"cat needs two tiles of the same shape, got {list(x.shape)} and "
                    f"{list(y.shape)}")
    dt = _numbers(x, y, "cat")
    c = _stack(b, x, y, x.shape, dt, 0)
    return reshape(b, c, (2 * x.shape[0],) + x.shape[1:])


def flip(b, x: Operand, dim: Any = None) -> Value:
    """x reversed along `dim` (None: the last dim)."""
    x = _tile(x, "flip")
    r = x.type.rank
    d = r - 1 if dim is None else _axis(dim, r, "flip dim")
    n = x.shape[d]
    if n == 1:
        return x
    start = tuple(n - 1 if i == d else 0 for i in range(r))
    step = tuple(-1 if i == d else 1 for i in range(r))
    return slice_tile(b, x, start, step, x.shape)


def ravel(b, x: Operand) -> Value:
    """The elements of x as a 1-D tile, in row-major order."""
    x = to_value(b, x)
    return reshape(b, x, (x.type.numel,))


def gather(b, src: Operand, index: Operand, axis: Any) -> Value:
    """out[c] = src[c with its `axis` coordinate replaced by index[c]]; index has src's rank
    and src's dims except along `axis`, and gives the result's shape. An index outside
    [0, src.shape[axis]) is clamped to it."""
    src, index = _tile(src, "gather"), _tile(index, "gather index")
    if not isinstance(index.type.elem, DType) or index.type.elem.is_float:
        raise error(f"gather index must be an integer tile, got {index.type.elem}")
    r = src.type.rank
    if index.type.rank != r:
        raise error(f"gather: index has rank {index.type.rank}, src has rank {r}")
    ax = _axis(axis, r, "gather axis")
    for d in range(r):
        if d != ax and index.shape[d] != src.shape[d]:
            raise error(f"gather: index shape {list(index.shape)} and src shape "
                        f"{list(src.shape)} differ in dim {d} (only the axis {ax} may)")
    return b.op("gather", [src, index], TileType(index.shape, src.type.elem), axis=ax)


def histogram(b, x: Operand, num_bins: Any, mask: Operand = None) -> Value:
    """int32 counts of the values 0 .. num_bins-1 in a 1-D integer tile, where `mask` is true;
    other values are not counted."""
    x = _tile(x, "histogram")
    if x.type.rank != 1:
        raise error(f"histogram needs a 1-D tile, got shape {list(x.shape)}")
    if not isinstance(x.type.elem, DType) or x.type.elem.is_float:
        raise error(f"histogram needs integer values, got {x.type.elem}")
    if x.type.elem == int1:
        x = cast(b, x, int32)
    n = _constexpr_int(num_bins, "histogram num_bins")
    if n < 1:
        raise error(f"histogram needs num_bins >= 1, got {n}")
    _check_numel((n,))
    ops = [x] if mask is None else [x, _mask_arg(b, mask, x.shape)]
    return b.op("histogram", ops, TileType((n,), int32), num_bins=n)
