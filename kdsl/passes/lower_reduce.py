"""Lowering of `reduce` {op, axis}: sum, max, min, argmax, argmin and custom.

The input x (length R along `axis`, O outputs) is made addressable (through `Lowerer.view`: a
reduction of `trans(y)` reads y's storage); output element o, at coordinates c, combines x at
coordinates `c[:axis] + (r,) + c[axis:]` for r in [0, R).  The output is computed as a member
of a group of numel O, so it fuses with the element-wise ops that follow.

With T > 1 threads and fewer outputs than threads, a two-phase reduction keeps the threads busy:
P = the largest power of two with O*P <= T and P <= R; phase 1 gives each of O*P virtual elements
(one per thread) a partial over r = p, p+P, ...; after a barrier, phase 2 combines each output's
P partials.  A reduction to a scalar is computed by every thread from the same shared data, so
its `Var` is identical (uniform) in all threads.

Combining: `sum` adds in the result's register type (16-bit floats accumulate in float32 and are
rounded once at the end, as the Tile IR interpreter defines); `max`/`min` use the NaN-propagating
Loop IR `maximum`/`minimum`; argmax/argmin carry (value, index) and prefer the greater (smaller)
value, then a NaN, then the lower index — NumPy's first-occurrence rule, valid for any order in
which partials are combined.  `custom` lowers its combine region's scalar ops in place of the
built-in step (`combine_custom`) and, having no identity, starts each accumulator (each
partial, then each output) from its first element.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kdsl.ir import tile
from kdsl.ir.loop import (
    Array,
    ArrayStore,
    Assign,
    Binary,
    Const,
    Expr,
    For,
    If,
    Index,
    Select,
    Stmt,
    Unary,
    Var,
)
from kdsl.ir.types import DType, int1, int32

from . import lower_index as ix
from .lower_elementwise import ELEMENTWISE, register_type, rounded

INT32_MAX = 2**31 - 1


def _extreme(t: DType, high: bool) -> Const:
    """+inf/-inf for floats, the type's max/min for integers."""
    if t.is_float:
        return Const(float("inf") if high else float("-inf"), t)
    if t.is_bool:
        return Const(high, t)
    info = np.iinfo(t.np)
    return Const(int(info.max if high else info.min), t)


def identity(kind: str, t: DType) -> Const:
    if kind == "sum":
        return Const(0.0 if t.is_float else 0, t)
    return _extreme(t, high=kind in ("min", "argmin"))


@dataclass
class Acc:
    """Accumulator variables: value, and the index for argmax/argmin."""

    val: Var
    idx: Var | None = None


def _better(kind: str, x: Expr, xi: Expr, acc: Acc) -> Expr:
    """True where candidate (x, xi) replaces the accumulator (argmax/argmin)."""
    cmp = "gt" if kind == "argmax" else "lt"
    a, ai = acc.val, acc.idx
    earlier = Binary("lt", xi, ai)
    take = Binary("lor", Binary(cmp, x, a), Binary("land", Binary("eq", x, a), earlier))
    if x.dtype.is_float:
        # A NaN beats any number (a == a is false only for NaN) and the first NaN wins.
        nan_wins = Binary("land", Unary("isnan", x),
                          Binary("lor", Binary("eq", a, a), earlier))
        take = Binary("lor", take, nan_wins)
    return take


def combine_custom(L, region: tile.Block, acc: Var, x: Expr, out: list[Stmt]) -> None:
    """Append `acc = combine(acc, x)` to `out`: the custom reduce's region lowered as scalar
    Loop IR (its ops are element-wise, so the element-wise table builds each one), one
    variable per op result so that a value read twice is computed once."""
    env: dict[int, Expr] = {region.args[0].id: acc, region.args[1].id: x}
    for op in region.ops:
        xs = [env[o.id] for o in op.operands]
        if op.kind == "yield":
            if xs[0] is not acc:
                out.append(Assign(acc, xs[0]))
            return
        e = ELEMENTWISE[op.kind](op, xs, ix.c32(0))
        if not isinstance(e, (Const, Var)):
            v = L.var("c", register_type(op.result.type))
            out.append(Assign(v, e))
            e = v
        env[op.result.id] = e


def combine(L, kind: str, acc: Acc, x: Expr, xi: Expr | None, out: list[Stmt]) -> None:
    """Append `acc = acc (op) x` statements to `out`."""
    if kind == "custom":
        combine_custom(L, L.op.regions[0], acc.val, x, out)
    elif kind == "sum":
        out.append(Assign(acc.val, Binary("add", acc.val, x)))
    elif kind in ("max", "min"):
        out.append(Assign(acc.val, Binary("maximum" if kind == "max" else "minimum", acc.val, x)))
    else:
        take = L.var("take", int1)
        out.append(Assign(take, _better(kind, x, xi, acc)))
        out.append(Assign(acc.val, Select(take, x, acc.val)))
        out.append(Assign(acc.idx, Select(take, xi, acc.idx)))


def reduce_loop(L, kind: str, t: DType, src: Array, src_idx: Array | None,
                index: Callable[[Expr], Expr], lo: Expr, hi: int, step: int,
                out: list[Stmt]) -> Acc:
    """Append `acc = reduce(src[index(r)] for r in range(lo, hi, step))` to `out`.
    Indices come from `src_idx` when given (partials), else they are r itself."""
    acc = Acc(L.var("acc", t), L.var("acc_i", int32) if kind.startswith("arg") else None)
    if _use_partials(L, kind, t, lo, hi, step):
        _partial_sum(L, t, src, index, hi, acc.val, out)
        return acc
    if kind == "custom":
        # No identity: the accumulator starts from the first element (every range reduced
        # here is non-empty: lo < hi, as P <= R in the two-phase scheme).
        out.append(Assign(acc.val, Index(src, index(lo))))
        lo = ix.add(lo, ix.c32(step))
    else:
        out.append(Assign(acc.val, identity(kind, t)))
    if acc.idx is not None:
        out.append(Assign(acc.idx, Const(INT32_MAX, int32)))
    r = L.var("r", int32)
    flat = index(r)
    x: Expr = Index(src, flat)
    xi = (Index(src_idx, flat) if src_idx is not None else r) if acc.idx is not None else None
    body: list[Stmt] = []
    if acc.idx is not None or kind == "custom":  # read several times by the combination
        xv = L.var("x", t)
        body.append(Assign(xv, x))
        x = xv
    combine(L, kind, acc, x, xi, body)
    out.append(For(r, lo, ix.c32(hi), ix.c32(step), body))
    return acc


# Float sums on one thread (the CPU) with the "reduce_partials" capability: PARTIALS running
# sums, element r going to partial r % PARTIALS, then the partials added in order.  A serial
# float sum cannot be vectorised (every add waits for the previous one); PARTIALS independent
# lanes fill several SIMD registers.  This is a fixed, documented order (the same on every run
# and every CPU), not fast-math: only the order of this reduction's additions changes.
PARTIALS = 64


def _use_partials(L, kind: str, t: DType, lo: Expr, hi: int, step: int) -> bool:
    return (L.T == 1 and kind == "sum" and t.is_float and step == 1 and hi >= 2 * PARTIALS
            and isinstance(lo, Const) and lo.value == 0 and L.target.has("reduce_partials"))


def _partial_sum(L, t: DType, src: Array, index: Callable[[Expr], Expr], hi: int, acc: Var,
                 out: list[Stmt]) -> None:
    V = PARTIALS
    part = L.array("part", t, V)
    j, rb = L.var("j", int32), L.var("rb", int32)
    zero = identity("sum", t)
    out.append(For(j, ix.c32(0), ix.c32(V), ix.c32(1), [ArrayStore(part, j, zero)]))
    full = hi - hi % V
    r = ix.add(rb, j)
    body = [ArrayStore(part, j, Binary("add", Index(part, j), Index(src, index(r))))]
    out.append(For(rb, ix.c32(0), ix.c32(full), ix.c32(V),
                   [For(j, ix.c32(0), ix.c32(V), ix.c32(1), body)]))
    if hi > full:  # the tail goes to the first partials
        tail = [ArrayStore(part, j, Binary("add", Index(part, j),
                                           Index(src, index(ix.add(j, ix.c32(full))))))]
        out.append(For(j, ix.c32(0), ix.c32(hi - full), ix.c32(1), tail))
    out.append(Assign(acc, zero))
    out.append(For(j, ix.c32(0), ix.c32(V), ix.c32(1),
                   [Assign(acc, Binary("add", acc, Index(part, j)))]))


def lower_reduce(L, op: tile.Op) -> None:
    x, kind, axis = op.operands[0], op.attrs["op"], op.attrs["axis"]
    res = op.result
    R = x.shape[axis]
    O = x.type.numel // R
    xt = register_type(x.type)
    # Sums accumulate in the result's register type; extremes stay in the input's.
    acc_t = register_type(res.type) if kind == "sum" else xt
    if res.type.is_scalar:
        fused = _fused_partial_sum(L, op, kind, acc_t, R)
        if fused is not None:
            _bind_scalar(L, res, kind, fused)
            return
    L.close()
    (arr,) = L.addressable(L.view(x)[0])  # a reduction of trans(y) reads y's storage

    def x_index(o: Expr) -> Callable[[Expr], Expr]:
        """Flat index in `arr` of element r (along `axis`) of output o's row."""
        out_coords = ix.unflatten(o, res.shape)
        return lambda r: L.at(x, out_coords[:axis] + [r] + out_coords[axis:])[1]

    P = 1
    if L.T > 1 and O < L.T:
        while P * 2 * O <= L.T and P * 2 <= R:
            P *= 2
    if P > 1:
        part, part_i = _phase1(L, kind, acc_t, arr, x_index, O, P, R)
        src, src_idx, count = part, part_i, P

        def row(o: Expr) -> Callable[[Expr], Expr]:
            return lambda j: ix.add(ix.mul(o, P), j)
    else:
        src, src_idx, count, row = arr, None, R, x_index

    def finish(acc: Acc) -> Expr:
        if kind.startswith("arg"):
            return acc.idx
        return rounded(acc.val, res.type.elem) if kind == "sum" else acc.val

    if res.type.is_scalar:
        acc = reduce_loop(L, kind, acc_t, src, src_idx, row(ix.c32(0)), ix.c32(0), count, 1,
                          L.out)
        _bind_scalar(L, res, kind, acc)
        return
    g = L.open_group(O)
    g.ops.add(id(op))
    L.note_addressed([src])
    acc = reduce_loop(L, kind, acc_t, src, src_idx, row(g.e), ix.c32(0), count, 1, g.body)
    L.bind(res, finish(acc), g)


def _bind_scalar(L, res: tile.Value, kind: str, acc: Acc) -> None:
    """Make the finished accumulator the value of the scalar result `res`."""
    if kind.startswith("arg"):
        value: Expr = acc.idx
    else:
        value = rounded(acc.val, res.type.elem) if kind == "sum" else acc.val
    if value is not acc.val and value is not acc.idx:
        v = L.var(res.name or "red", register_type(res.type))
        L.emit(Assign(v, value))
        value = v
    L.scalars[res.id] = value


def _fused_partial_sum(L, op: tile.Op, kind: str, t: DType, R: int) -> Acc | None:
    """A whole-tile float sum (the norms' `sum(x * x)`) accumulated inside the element loop
    that computes x, or None where this does not apply.

    The open one-thread group over x's R elements is re-shaped into nested loops
    (R / PARTIALS, PARTIALS) and each element is added to partial `j` (its inner index) right
    where it is computed: x then needs no register array of R elements, and the row is
    walked once instead of twice (on the CPU the R-element arrays of a row otherwise overflow
    L1).  Element r still goes to partial r % PARTIALS in increasing r, so the result is
    bit-identical to `_partial_sum`."""
    g = L.group
    x = L.canon(op.operands[0])
    if not (g is not None and kind == "sum" and t.is_float and L.T == 1
            and L.target.has("reduce_partials") and g.n == R and x.type.numel == R
            and R % PARTIALS == 0 and R >= 2 * PARTIALS and g.vec is None and not g.loops
            and x.id in L.cur):
        return None
    V = PARTIALS
    part = L.array("part", t, V)
    j, rb = L.var("j", int32), L.var("rb", int32)
    zero = identity("sum", t)
    L.out.append(For(j, ix.c32(0), ix.c32(V), ix.c32(1), [ArrayStore(part, j, zero)]))
    g.dims, g.loops = (R // V, V), (rb, j)
    ix.nest(g.k, g.dims, g.loops)
    g.body.append(ArrayStore(part, j, Binary("add", Index(part, j), L.read(x))))
    g.ops.add(id(op))  # x (if nothing else reads it) needs no array
    L.close()
    acc = Acc(L.var("acc", t))
    L.out.append(Assign(acc.val, zero))
    L.out.append(For(j, ix.c32(0), ix.c32(V), ix.c32(1),
                     [Assign(acc.val, Binary("add", acc.val, Index(part, j)))]))
    return acc


def _phase1(L, kind, t, arr, x_index, O, P, R) -> tuple[Array, Array | None]:
    """Partials of O*P virtual elements (one per thread) into shared arrays."""
    n = O * P
    part = L.shared("part", t, n)
    part_i = L.shared("part_i", int32, n) if kind.startswith("arg") else None
    L.barrier()  # previous readers of shared memory (earlier loop iterations) are done
    v = L.tid
    o, p = ix.div(v, P), ix.mod(v, P)
    stmts: list[Stmt] = []
    acc = reduce_loop(L, kind, t, arr, None, x_index(o), p, R, P, stmts)
    stmts.append(ArrayStore(part, v, acc.val))
    if part_i is not None:
        stmts.append(ArrayStore(part_i, v, acc.idx))
    if n < L.T:
        stmts = [If(Binary("lt", v, ix.c32(n)), stmts)]
    L.out.extend(stmts)
    L.barrier()
    return part, part_i
