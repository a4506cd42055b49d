"""Lowering of `reduce` {op, axis}: sum, max, min, argmax, argmin and custom.

The input x (length R along `axis`, O outputs) is made addressable (through `Lowerer.view`: a
reduction of `trans(y)` reads y's storage); output element o, at coordinates c, combines x at
coordinates `c[:axis] + (r,) + c[axis:]` for r in [0, R).  The output is computed as a member
of a group of numel O, so it fuses with the element-wise ops that follow.

A target with warp shuffles reduces contiguous rows in registers and across lanes instead
(reduce_warp.py, which the lowering tries first: `Lowerer`'s "reduce" entry); what follows is
the generic strategy, every other case.

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
partial, then each output) from its first element.  A custom reduce of n operands (Triton's
`reduce((v, i), ...)`) carries n accumulators and n partial arrays through the same steps, each
operand read through its own view.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kdsl.ir import tile
from kdsl.ir.loop import (
    SIMD_HINT,
    Array,
    ArrayStore,
    Assign,
    Binary,
    Comment,
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

from . import index as ix
from .context import LoweringContext
from .elementwise import ELEMENTWISE, register_type, rounded

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
    """Accumulator variables: the values (one per operand), and the index for argmax/argmin."""

    vals: list[Var]
    idx: Var | None = None

    @property
    def val(self) -> Var:
        return self.vals[0]


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


def combine_custom(L: LoweringContext, region: tile.Block, accs: list[Var], xs: list[Expr],
                   out: list[Stmt]) -> None:
    """Append `accs = combine(*accs, *xs)` to `out`: a combine region lowered as scalar Loop IR
    (its ops are element-wise, so the element-wise table builds each one), one variable per
    op result so that a value read twice is computed once.  `xs` are Vars or Consts."""
    env: dict[int, Expr] = {a.id: v for a, v in zip(region.args, [*accs, *xs])}
    for op in region.ops:
        vals = [env[o.id] for o in op.operands]
        if op.kind == "yield":
            _assign_all(L, accs, vals, out)
            return
        e = ELEMENTWISE[op.kind](op, vals, ix.c32(0))
        if not isinstance(e, (Const, Var)):
            v = L.var("c", register_type(op.result.type))
            out.append(Assign(v, e))
            e = v
        env[op.result.id] = e


def _assign_all(L: LoweringContext, accs: list[Var], vals: list[Expr], out: list[Stmt]) -> None:
    """`accs = vals` at once: a value that is another accumulator (a combine returning its
    arguments swapped) is copied to a temporary before any accumulator is written."""
    pending = [(a, v) for a, v in zip(accs, vals) if v is not a]
    if len(pending) > 1:
        ids = {id(a) for a in accs}
        for i, (a, v) in enumerate(pending):
            if id(v) in ids:
                t = L.var("c", a.dtype)
                out.append(Assign(t, v))
                pending[i] = (a, t)
    out.extend(Assign(a, v) for a, v in pending)


def combine(L: LoweringContext, kind: str, acc: Acc, xs: list[Expr], xi: Expr | None, out: list[Stmt]) -> None:
    """Append `acc = acc (op) x` statements to `out` (x: one value per operand)."""
    x = xs[0]
    if kind == "custom":
        combine_custom(L, L.op.regions[0], acc.vals, xs, out)
    elif kind == "sum":
        out.append(Assign(acc.val, Binary("add", acc.val, x)))
    elif kind in ("max", "min"):
        out.append(Assign(acc.val, Binary("maximum" if kind == "max" else "minimum", acc.val, x)))
    else:
        take = L.var("take", int1)
        out.append(Assign(take, _better(kind, x, xi, acc)))
        out.append(Assign(acc.val, Select(take, x, acc.val)))
        out.append(Assign(acc.idx, Select(take, xi, acc.idx)))


def reduce_loop(L: LoweringContext, kind: str, ts: list[DType], srcs: list[Array], src_idx: Array | None,
                index: Callable[[Expr], list[Expr]], lo: Expr, hi: int, step: int,
                out: list[Stmt]) -> Acc:
    """Append `acc = reduce(src[index(r)] for r in range(lo, hi, step))` to `out`, for each
    operand's (type, source) in `ts`, `srcs` (one for the built-in kinds); `index(r)` gives
    one flat index per source.  Indices come from `src_idx` when given (partials), else they
    are r itself."""
    acc = Acc([L.var("acc", t) for t in ts],
              L.var("acc_i", int32) if kind.startswith("arg") else None)
    t, src = ts[0], srcs[0]
    if _use_partials(L, kind, t, lo, hi, step):
        _partial_sum(L, kind, t, src, lambda r: index(r)[0], hi, acc.val, out)
        return acc
    if kind == "custom":
        # No identity: the accumulator starts from the first element (every range reduced
        # here is non-empty: lo < hi, as P <= R in the two-phase scheme).
        for a, s, f in zip(acc.vals, srcs, index(lo)):
            out.append(Assign(a, Index(s, f)))
        lo = ix.add(lo, ix.c32(step))
    else:
        out.append(Assign(acc.val, identity(kind, t)))
    if acc.idx is not None:
        out.append(Assign(acc.idx, Const(INT32_MAX, int32)))
    r = L.var("r", int32)
    flats = index(r)
    xs: list[Expr] = [Index(s, f) for s, f in zip(srcs, flats)]
    xi = (Index(src_idx, flats[0]) if src_idx is not None else r) if acc.idx is not None \
        else None
    body: list[Stmt] = []
    if acc.idx is not None or kind == "custom":  # read several times by the combination
        xvs = [L.var("x", t) for t in ts]
        body.extend(Assign(v, x) for v, x in zip(xvs, xs))
        xs = list(xvs)
    combine(L, kind, acc, xs, xi, body)
    out.append(For(r, lo, ix.c32(hi), ix.c32(step), body))
    return acc


# Float sums on one thread (the CPU) with the "reduce_partials" capability: PARTIALS running
# sums, element r going to partial r % PARTIALS, then the partials folded as a tree of halves
# (partial j += partial j + PARTIALS/2, then + PARTIALS/4, ... down to partial 0).  A serial
# float sum cannot be vectorised (every add waits for the previous one); PARTIALS independent
# lanes fill several SIMD registers.  This is a fixed, documented order (the same on every run
# and every CPU), not fast-math: only the order of this reduction's additions changes.
# With "reduce_partials_minmax" too, float max and min use the same partials: their result
# does not depend on the order (NaN propagates whatever its position), except which zero a max
# of -0.0 and +0.0 returns, which no order fixes either (IEEE leaves it open); their partials
# fold as a tree of halves.  PoCL 3.1 ran the softmax's row max one element per step without
# them.  The llvm backend has the capability too since its `maximum` is two selects (not
# `llvm.maximum`, whose serial reductions LLVM 20 vectorised but whose -0 < +0 order costs
# five instructions per op): with the short sums' partials, softmax 4096^2 24.1-24.3 ->
# 18.5-19.3 ms and 8192x64 0.80-0.90 -> 0.46-0.50 ms (two threads), attention's row max 9.3%
# -> 4.0% of the kernel (one core; Emerald Rapids, benchmarks/RESULTS.md 2026-12-02).
# Rows of 32 to 127 elements (attention's 64-key tiles) use SHORT_PARTIALS (one AVX-512
# vector): their serial sum was a 64-add dependency chain per row, which LLVM vectorised across
# rows with gathers (6% of the attention kernel on Emerald Rapids).
PARTIALS = 64
SHORT_PARTIALS = 16
#: reduction kind -> (the Loop IR op that combines two partials, the capability it needs)
PARTIAL_OPS = {"sum": ("add", "reduce_partials"),
               "max": ("maximum", "reduce_partials_minmax"),
               "min": ("minimum", "reduce_partials_minmax")}


def partial_count(n: int) -> int:
    """How many partials a reduction of n elements gets (0: none, a serial loop)."""
    return PARTIALS if n >= 2 * PARTIALS else SHORT_PARTIALS if n >= 2 * SHORT_PARTIALS else 0


def _use_partials(L: LoweringContext, kind: str, t: DType, lo: Expr, hi: int, step: int) -> bool:
    return (L.target.one_thread_per_program and kind in PARTIAL_OPS and t.is_float
            and step == 1 and partial_count(hi) > 0 and isinstance(lo, Const) and lo.value == 0
            and L.target.has(PARTIAL_OPS[kind][1]))


def _partial_sum(L: LoweringContext, kind: str, t: DType, src: Array,
                 index: Callable[[Expr], Expr], hi: int, acc: Var, out: list[Stmt]) -> None:
    V = partial_count(hi)
    op = PARTIAL_OPS[kind][0]
    part = L.array("part", t, V)
    j, rb = L.var("j", int32), L.var("rb", int32)
    zero = identity(kind, t)
    out.append(For(j, ix.c32(0), ix.c32(V), ix.c32(1), [ArrayStore(part, j, zero)]))
    full = hi - hi % V
    r = ix.add(rb, j)
    # (SIMD_HINT: j is the vector dimension; without it LLVM unrolls the short j loop fully
    # and vectorises the loop over rows around it instead, with gathers)
    body = [Comment(SIMD_HINT),
            ArrayStore(part, j, Binary(op, Index(part, j), Index(src, index(r))))]
    out.append(For(rb, ix.c32(0), ix.c32(full), ix.c32(V),
                   [For(j, ix.c32(0), ix.c32(V), ix.c32(1), body)]))
    if hi > full:  # the tail goes to the first partials
        tail = [ArrayStore(part, j, Binary(op, Index(part, j),
                                           Index(src, index(ix.add(j, ix.c32(full))))))]
        out.append(For(j, ix.c32(0), ix.c32(hi - full), ix.c32(1), tail))
    out.extend(_fold_partials(part, V, op, j, acc))


def _fold_partials(part: Array, V: int, op: str, j: Var, acc: Var) -> list[Stmt]:
    """`acc` = the V partials of `part` combined by `op` as a tree of halves, each step one
    element-wise op on the vector of the upper half (log2 V steps, not V dependent ones: a
    row's serial 64-add chain was 5-7% of rms_norm on a Zen 5 core).  For a sum this is the
    documented order: partial j gets partial j + V/2, then j + V/4, ... (pairwise, so also no
    less accurate than adding them in order); a max or min does not depend on the order."""
    out: list[Stmt] = []
    w = V // 2
    while w >= 1:
        out.append(For(j, ix.c32(0), ix.c32(w), ix.c32(1),
                       [Comment(SIMD_HINT),
                        ArrayStore(part, j, Binary(op, Index(part, j),
                                                   Index(part, ix.add(j, ix.c32(w)))))]))
        w //= 2
    out.append(Assign(acc, Index(part, ix.c32(0))))
    return out


def accumulator_types(op: tile.Op) -> list[DType]:
    """Register types of a reduction's accumulators: sums accumulate in the result's register
    type, extremes (and custom combines) in each input's."""
    if op.attrs["op"] == "sum":
        return [register_type(op.results[0].type)]
    return [register_type(v.type) for v in op.operands]


def lower_reduce(L: LoweringContext, op: tile.Op) -> None:
    """The generic strategy (the lowering tries reduce_warp.py's first where it applies)."""
    xs, kind, axis = op.operands, op.attrs["op"], op.attrs["axis"]
    x, res = xs[0], op.results[0]
    R = x.shape[axis]
    O = x.type.numel // R
    acc_ts = accumulator_types(op)
    if res.type.is_scalar:
        fused = _fused_partial_sum(L, op, kind, acc_ts[0], R)
        if fused is not None:
            bind_scalar(L, op.results, kind, fused)
            return
    elif _column_reduce(L, op, kind, acc_ts[0], axis, R, O):
        return
    L.close()
    arrs = L.addressable(*[L.view(v)[0] for v in xs])  # reduce(trans(y)) reads y's storage

    def x_index(o: Expr) -> Callable[[Expr], list[Expr]]:
        """Flat index in each of `arrs` of element r (along `axis`) of output o's row."""
        out_coords = ix.unflatten(o, res.shape)
        return lambda r: [L.at(v, out_coords[:axis] + [r] + out_coords[axis:])[1] for v in xs]

    P = 1
    if O < L.T:  # more threads than outputs: two phases keep them busy
        while P * 2 * O <= L.T and P * 2 <= R:
            P *= 2
    if P > 1:
        parts, part_i = _phase1(L, kind, acc_ts, arrs, x_index, O, P, R)
        srcs, src_idx, count = parts, part_i, P

        def row(o: Expr) -> Callable[[Expr], list[Expr]]:
            return lambda j: [ix.add(ix.mul(o, P), j)] * len(parts)
    else:
        srcs, src_idx, count, row = arrs, None, R, x_index

    if res.type.is_scalar:
        stmts: list[Stmt] = []
        acc = reduce_loop(L, kind, acc_ts, srcs, src_idx, row(ix.c32(0)), ix.c32(0), count, 1,
                          stmts)
        L.emit(*stmts)
        bind_scalar(L, op.results, kind, acc)
        return
    g = L.open_group(O)
    g.ops.add(id(op))
    L.note_addressed(srcs)
    acc = reduce_loop(L, kind, acc_ts, srcs, src_idx, row(g.e), ix.c32(0), count, 1, g.body)
    for r, value in zip(op.results, finish(kind, acc, op.results)):
        L.bind(r, value, g)


def finish(kind: str, acc: Acc, results: list[tile.Value]) -> list[Expr]:
    """The value of each result from the finished accumulator."""
    if kind.startswith("arg"):
        return [acc.idx]
    if kind == "sum":
        return [rounded(acc.val, results[0].type.elem)]
    return list(acc.vals)


def bind_scalar(L: LoweringContext, results: list[tile.Value], kind: str, acc: Acc) -> None:
    """Make the finished accumulator the value of the scalar results."""
    for res, value in zip(results, finish(kind, acc, results)):
        if not any(value is v for v in (*acc.vals, acc.idx)):
            v = L.var(res.name or "red", register_type(res.type))
            L.emit(Assign(v, value))
            value = v
        L.scalars[res.id] = value


def _fused_partial_sum(L: LoweringContext, op: tile.Op, kind: str, t: DType, R: int) -> Acc | None:
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
    if not (g is not None and kind == "sum" and t.is_float and L.target.one_thread_per_program
            and L.target.has("reduce_partials") and g.n == R and x.type.numel == R
            and R % PARTIALS == 0 and R >= 2 * PARTIALS and g.vec is None and not g.loops
            and L.in_group(x)):
        return None
    V = PARTIALS
    part = L.array("part", t, V)
    j, rb = L.var("j", int32), L.var("rb", int32)
    zero = identity("sum", t)
    L.emit(For(j, ix.c32(0), ix.c32(V), ix.c32(1), [ArrayStore(part, j, zero)]))
    g.dims, g.loops = (R // V, V), (rb, j)
    ix.nest(g.k, g.dims, g.loops)
    g.body.append(ArrayStore(part, j, Binary("add", Index(part, j), L.read(x))))
    g.ops.add(id(op))  # x (if nothing else reads it) needs no array
    L.close()
    acc = Acc([L.var("acc", t)])
    for st in _fold_partials(part, V, "add", j, acc.val):
        L.emit(st)
    return acc


#: Reductions `_column_reduce` interchanges (their combine is one Loop IR op).
COLUMN_OPS = {"sum": "add", "max": "maximum", "min": "minimum"}


def _column_reduce(L: LoweringContext, op: tile.Op, kind: str, t: DType, axis: int, R: int,
                   O: int) -> bool:
    """A reduction along an axis that is not x's innermost (decode attention's
    `sum(p[:, None] * v, axis=0)`) on one thread, with the loops interchanged: an array of the
    O accumulators, then for r: for o: `acc[o] = acc[o] (op) x[.., r, ..]`, whose inner loop
    runs along x's contiguous elements and vectorises across outputs (the generic loop, for o:
    for r:, walks x with a stride and every step waits for the previous one).  Where x is
    computed in the open group, over nested loops of x's shape, the accumulation is appended
    to that group's body, so x needs no array and is walked once.  Every output still combines
    r = 0, 1, ... R-1 in order from the identity: the results are bit-identical to the generic
    loop's.  False where this does not apply (x's innermost axis, several threads, argmax,
    custom combines, multi-operand reductions)."""
    x, res = op.operands[0], op.results[0]
    dims = ix.nest_dims(x.shape)  # the open group's loops, if it runs over x's shape
    if not (L.target.one_thread_per_program and kind in COLUMN_OPS and len(op.operands) == 1
            and R > 1 and any(d != 1 for d in x.shape[axis + 1:])):
        return False
    # A view whose reduced axis is contiguous in its base (`sum(trans(y), axis=0)` reads y's
    # rows) keeps the generic loop, which walks those rows.
    base, cmap = L.view(x)
    o_probe, r_probe = Var("o", int32), Var("r", int32)  # never emitted
    coords = ix.unflatten(o_probe, res.shape)
    if ix.coefficient(ix.flatten(cmap(coords[:axis] + [r_probe] + coords[axis:]), base.shape),
                      r_probe) == 1:
        return False
    g = L.group
    fused = (g is not None and g.n == x.type.numel and g.vec is None and g.dims == dims
             and len(g.loops) == len(dims) and L.in_group(x))
    combine_op = COLUMN_OPS[kind]
    acc = L.array("col", t, O)
    o = L.var("o", int32)
    L.emit(For(o, ix.c32(0), ix.c32(O), ix.c32(1), [ArrayStore(acc, o, identity(kind, t))]))
    if fused:
        ax = sum(1 for d in x.shape[:axis] if d != 1)
        keep = [i for i in range(len(dims)) if i != ax]
        slot = ix.nested_flat(tuple(g.loops[i] for i in keep), tuple(dims[i] for i in keep))
        g.body.append(ArrayStore(acc, slot, Binary(combine_op, Index(acc, slot), L.read(x))))
        g.ops.add(id(op))  # x (if nothing else reads it) needs no array
        L.close()
    else:
        L.close()
        src = L.addressable(L.view(x)[0])[0]
        r = L.var("r", int32)
        coords = ix.unflatten(o, res.shape)
        flat = L.at(x, coords[:axis] + [r] + coords[axis:])[1]
        step = ArrayStore(acc, o, Binary(combine_op, Index(acc, o), Index(src, flat)))
        L.emit(For(r, ix.c32(0), ix.c32(R), ix.c32(1),
                   [For(o, ix.c32(0), ix.c32(O), ix.c32(1), [step])]))
    g = L.open_group(O)
    g.ops.add(id(op))
    value = Index(acc, g.e)
    L.bind(res, rounded(value, res.type.elem) if kind == "sum" else value, g)
    return True


def _phase1(L: LoweringContext, kind, ts, arrs, x_index, O, P, R) -> tuple[list[Array], Array | None]:
    """Partials of O*P virtual elements (one per thread) into shared arrays (one per operand)."""
    n = O * P
    parts = [L.shared("part", t, n) for t in ts]
    part_i = L.shared("part_i", int32, n) if kind.startswith("arg") else None
    L.barrier()  # previous readers of shared memory (earlier loop iterations) are done
    v = L.tid
    o, p = ix.div(v, P), ix.mod(v, P)
    stmts: list[Stmt] = []
    acc = reduce_loop(L, kind, ts, arrs, None, x_index(o), p, R, P, stmts)
    stmts.extend(ArrayStore(part, v, a) for part, a in zip(parts, acc.vals))
    if part_i is not None:
        stmts.append(ArrayStore(part_i, v, acc.idx))
    if n < L.T:
        stmts = [If(Binary("lt", v, ix.c32(n)), stmts)]
    L.emit(*stmts)
    L.barrier()
    return parts, part_i
