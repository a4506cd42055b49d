"""Lowering of the ops that read a tile at other coordinates than their own.

- `slice` {start, step} is a *static* gather like `broadcast` and `trans`: its source
  coordinates are affine in the element's own (`slice_coords`), so it fuses into groups, looks
  through in `Lowerer.view` and rematerialises; lowerer.py handles it with the other
  GATHERS through `slice_coords` / `slice_source`.
- `gather` {axis} reads its source at a coordinate taken from the index tile: the source is made
  addressable (its register array with one thread, a shared copy with several), read through
  `Lowerer.view` (a gather from `trans(x)` reads x), and the result is computed per element in a
  group of the index's numel, so it fuses with what follows.  Indices are clamped to the axis
  (in their own type, as the interpreter does) so that no access leaves the array.
- `histogram` {num_bins}: output bin b (a group element) counts the staged input's elements
  equal to b (under the mask), a loop over the input per bin: no atomics, no intermediate of
  N x num_bins elements, the same counts on every target.
- a `reshape` of a one-element tile to a scalar (`lower_unsplat`): every thread reads element 0.
"""

from __future__ import annotations

from kdsl.ir import tile
from kdsl.ir.loop import Assign, Binary, Cast, Const, Expr, For, Index
from kdsl.ir.types import DType, int32, int64

from . import index as ix
from .context import LoweringContext


def _affine(c: Expr, start: int, step: int) -> Expr:
    """start + step * c for constants start >= 0 and step (of any sign)."""
    if step < 0:
        return Binary("sub", ix.c32(start), ix.mul(c, -step))
    return ix.add(ix.c32(start), ix.mul(c, step))


def slice_coords(op: tile.Op, coords: list[Expr]) -> list[Expr]:
    """Source coordinates of element `coords` of a `slice`."""
    out = []
    for c, s, t, n in zip(coords, op.attrs["start"], op.attrs["step"], op.results[0].shape):
        out.append(ix.c32(s) if n == 1 or t == 0 else _affine(c, s, t))
    return out


def slice_source(op: tile.Op, e: Expr) -> Expr:
    """Flat index in the source of flat element `e` of a `slice`."""
    dst = op.results[0].shape
    return ix.flatten(slice_coords(op, ix.unflatten(e, dst)), op.operands[0].shape)


def clamped_index(x: Expr, t: DType, n: int) -> Expr:
    """An index of type `t` clamped to [0, n), as int32.  Each bound is applied only where the
    type can exceed it (the constant must fit in the type)."""
    if t.is_bool:
        x, t = Cast(x, int32), int32
    if t.is_signed:
        x = Binary("maximum", x, Const(0, t))
    if n - 1 < (1 << (t.bits - t.is_signed)) - 1:
        x = Binary("minimum", x, Const(n - 1, t))
    return x if t == int32 else Cast(x, int32)


def lower_gather(L: LoweringContext, op: tile.Op) -> None:
    src, index = op.operands
    ax = op.attrs["axis"]
    base, cmap = L.view(src)
    (arr,) = L.addressable(base)
    g = L.open_group(index.type.numel, index.shape)
    g.ops.add(id(op))
    L.note_addressed([arr])
    coords = ix.unflatten(g.e, index.shape)
    i = L.var("gi", int32)
    g.body.append(Assign(i, clamped_index(L.read(index), index.type.elem, src.shape[ax])))
    coords[ax] = i
    L.bind(op.result, Index(arr, ix.flatten(cmap(coords), base.shape)), g)


def lower_histogram(L: LoweringContext, op: tile.Op) -> None:
    x = op.operands[0]
    views = [L.view(v) for v in op.operands]
    arrs = L.addressable(*(base for base, _ in views))
    bins = op.attrs["num_bins"]
    g = L.open_group(bins, (bins,))
    g.ops.add(id(op))
    L.note_addressed(arrs)
    r = L.var("r", int32)

    def at(j: int) -> Expr:
        base, cmap = views[j]
        return Index(arrs[j], ix.flatten(cmap([r]), base.shape))

    # Values of up to 32 bits compare in int32 (a uint32 above 2**31 wraps to a negative
    # number, equal to no bin); wider ones in int64, where a wrapped uint64 is negative too.
    wide = x.type.elem.bits > 32
    val = at(0)
    val = (val if val.dtype == int64 else Cast(val, int64)) if wide else \
        (val if val.dtype == int32 else Cast(val, int32))
    hit: Expr = Binary("eq", val, Cast(g.e, int64) if wide else g.e)
    if len(op.operands) > 1:
        hit = Binary("land", hit, at(1))
    count = L.var("count", int32)
    g.body.append(Assign(count, ix.c32(0)))
    g.body.append(For(r, ix.c32(0), ix.c32(x.type.numel), ix.c32(1),
                      [Assign(count, Binary("add", count, Cast(hit, int32)))]))
    L.bind(op.result, count, g)


def lower_unsplat(L: LoweringContext, op: tile.Op) -> None:
    """`reshape` of a one-element tile to a scalar (the only reshape that is not an alias)."""
    src = op.operands[0]
    if not L.target.registers_addressable and L.remat_ok(src):
        expr = L.eval_at(src, ix.c32(0))  # computed alike by every thread
    else:
        base, flat = L.at(src, [ix.c32(0)] * src.type.rank)  # through slices (split)
        (arr,) = L.addressable(base)
        expr = Index(arr, flat)
    L.result_var(op.result, expr)
