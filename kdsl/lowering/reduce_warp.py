"""Reductions through warp shuffles (the strategy of the "warp_shuffle" capability).

On a target whose warps are 32 lanes that exchange registers (CUDA: `__shfl_xor_sync`), a
`reduce` whose rows are contiguous in the layout (the reduced axis is the last one that is not
of size 1: softmax's and the norms' row reductions, and every whole-tile reduction) is computed
without staging its input in shared memory:

1. each thread folds the elements it holds of each row in registers, inside the group that
   computes the input (so the reduction fuses with it: x needs no array if nothing else reads
   it).  With layout width V (vector.py), T threads and rows of R elements, the threads of a
   row and the register slots of a row in each of them (a *segment* of q consecutive slots)
   are fixed by the layout (`plan`):
     R a multiple of V*T        every thread holds R/T slots of each row (P = T threads)
     V*T a multiple of R        a row is one run of V slots in each of P = R/V consecutive
                                threads (aligned to P)
     V a multiple of R          a run holds whole rows (P = 1)
   A row's P threads form aligned groups of G = min(P, 32) lanes in Wr = max(P / 32, 1)
   consecutive warps.
2. a butterfly of `shfl_xor` steps (lane offsets G/2, ..., 2, 1) combines each segment's
   partial with the lanes of its group: after it every lane of the group holds the group's
   partial.  The combine is the reduction's own step (reduce.py `combine`: sum, NaN-propagating
   max/min, argmax/argmin's (value, index) rule, a custom combine region).
3. one lane per group (lane % G == 0) writes the partial to a shared slot (row o, warp w of
   the row): O * Wr slots, between one pair of barriers;
4. the result: output o combines its Wr slots in warp order, in a group of the output's numel
   (so it fuses with what follows), or, for a scalar, in every thread (the result is uniform).

Order of a float sum (documented in docs/numerics.md): within a thread, increasing register
slot; then the butterfly, which adds partials of lanes `l` and `l ^ off` for off = G/2 ... 1;
then warps in order.  Integer sums, max, min, argmax and argmin give exactly what the generic
strategy gives (their results do not depend on the order); a custom combine is assumed
associative and commutative, as in Triton.

The shuffle is the Loop IR intrinsic `shfl_xor(x, offset)` (`SHFL_XOR`): a warp-collective
exchange in which lane l receives x of lane l ^ offset.  It is emitted only under warp-uniform
control (every lane of every warp executes the butterfly).  The Loop IR simulator runs it with
`shfl_xor_lanes` (all lanes of the warp at once); CUDA spells it `__shfl_xor_sync(0xffffffff,
x, offset)` for every register type (narrow integers and bool through an int).

Where the strategy does not apply (no capability, warps of another size, a thread count that is
not a multiple of 32, a reduced axis followed by dims larger than 1, an input read through a
gather view, a row split over threads in a way the cases above do not cover, a custom combine
with threads that hold no element) the generic strategy of reduce.py is used.
"""

from __future__ import annotations

from dataclasses import dataclass

from kdsl.ir import tile
from kdsl.ir.loop import (
    ArrayStore,
    Assign,
    Binary,
    Const,
    Expr,
    For,
    If,
    Index,
    Intrinsic,
    IntrinsicSim,
    Stmt,
    Var,
)
from kdsl.ir.types import DType, int32

from . import index as ix
from .context import LoweringContext
from .reduce import INT32_MAX, Acc, bind_scalar, combine, finish, identity, reduce_loop
from .vector import element_index

WARP = 32
SHFL_XOR = "shfl_xor"


def shfl_xor_lanes(lanes: list[list]) -> list[list]:
    """One warp's `shfl_xor`: lane l's arguments are (x, offset); it receives x of lane
    l ^ offset.  The offset must be the same in every lane and stay inside the warp."""
    offs = {int(a[1]) for a in lanes}
    if len(offs) != 1:
        raise AssertionError(f"shfl_xor: lanes disagree on the offset ({sorted(offs)})")
    off = offs.pop()
    if not 0 < off < len(lanes):
        raise AssertionError(f"shfl_xor: offset {off} leaves a warp of {len(lanes)} lanes")
    return [[lanes[lane ^ off][0]] for lane in range(len(lanes))]


#: how the Loop IR simulator runs the intrinsics of this module
SIMULATIONS: dict[str, IntrinsicSim] = {SHFL_XOR: IntrinsicSim(shfl_xor_lanes, warp=True)}


@dataclass(frozen=True)
class RowPlan:
    """How a reduction's rows sit in the layout (see the module docstring)."""

    R: int        # elements of a row (the reduced axis)
    O: int        # rows (outputs)
    n: int        # elements of the input
    V: int        # layout width of the input's numel
    P: int        # threads holding one row
    q: int        # consecutive register slots of one row in one thread (a segment)
    J: int        # segments per thread
    G: int        # lanes of one warp holding one row (the butterfly's width)
    Wr: int       # warps holding one row (slots per row in shared memory)
    ragged: bool  # some threads hold fewer elements (n not a multiple of T; then q == 1)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def plan(L: LoweringContext, op: tile.Op, acc_ts: list[DType]) -> RowPlan | None:
    """The placement of `op`'s rows on L's target, or None where the strategy does not apply."""
    t = L.target
    if not t.has("warp_shuffle") or t.warp_size != WARP or L.T % WARP:
        return None
    xs, axis, kind = op.operands, op.attrs["axis"], op.attrs["op"]
    shape = xs[0].shape
    R, n, T = shape[axis], xs[0].type.numel, L.T
    if R == 1 or any(d != 1 for d in shape[axis + 1:]):
        return None  # rows are not runs of consecutive flat indices
    if any(L.view(v)[0] is not L.canon(v) for v in xs):
        return None  # read through a gather (reduce(trans(y))): only its source is stored
    V = L.vector.width(n)
    if R % (V * T) == 0:
        P, q = T, R // T
    elif R % V == 0 and (V * T) % R == 0:
        P, q = R // V, V
    elif V % R == 0:
        P, q = 1, R
    else:
        return None
    G, Wr = min(P, WARP), max(P // WARP, 1)
    if not _pow2(G) or (P > WARP and P % WARP):
        return None
    ragged = n % T != 0
    if ragged and kind == "custom":
        return None  # no identity for the threads that hold nothing
    O = n // R
    slot_bytes = sum(a.itemsize for a in acc_ts) + (4 if kind.startswith("arg") else 0)
    if O * Wr * slot_bytes > L.shared_left():
        return None
    return RowPlan(R, O, n, V, P, q, L.slots(n) // q, G, Wr, ragged)


def warp_reduce(L: LoweringContext, op: tile.Op, acc_ts: list[DType]) -> bool:
    """Lower `op` through warp shuffles (module docstring); False where it does not apply."""
    p = plan(L, op, acc_ts)
    if p is None:
        return False
    kind = op.attrs["op"]
    arg = kind.startswith("arg")
    acc = Acc([L.var("wacc", t) for t in acc_ts], L.var("wacc_i", int32) if arg else None)
    accs = [*acc.vals] + ([acc.idx] if arg else [])
    # Per-thread partials of the segments (J > 1): register arrays, one per accumulator.
    parts = [L.array("wseg", a.dtype, p.J) for a in accs] if p.J > 1 else []
    if p.ragged:  # slots a thread does not hold keep the identity
        ids = _identities(kind, acc_ts, arg)
        if parts:
            j = L.var("j", int32)
            L.emit(For(j, ix.c32(0), ix.c32(p.J), ix.c32(1),
                       [ArrayStore(s, j, c) for s, c in zip(parts, ids)]))
        else:
            L.emit(*[Assign(a, c) for a, c in zip(accs, ids)])
    _fold(L, op, p, kind, acc, accs, parts)
    L.close()

    # Butterfly and shared slots.
    warp = ix.div(L.tid, WARP)
    slots = [L.shared("wpart", a.dtype, p.O * p.Wr) for a in accs]
    L.barrier()  # earlier readers of shared memory (a previous loop iteration) are done
    j = L.var("jw", int32) if p.J > 1 else None
    body: list[Stmt] = [Assign(a, Index(s, j)) for a, s in zip(accs, parts)]
    _butterfly(L, kind, acc, accs, p.G, body)
    if p.P == L.T:  # every thread holds every row: segment j is row j
        o = j if j is not None else ix.c32(0)
    else:  # the row of the segment's first element
        o = ix.div(element_index(L.tid, ix.mul(j, p.q) if j is not None else ix.c32(0), L.T,
                                 p.V), p.R)
    at = ix.add(ix.mul(o, p.Wr), ix.mod(warp, p.Wr))
    write: list[Stmt] = [ArrayStore(s, at, a) for s, a in zip(slots, accs)]
    conds = ([Binary("eq", ix.mod(L.tid, p.G), ix.c32(0))] if p.G > 1 else []) + (
        [Binary("lt", o, ix.c32(p.O))] if p.ragged else [])
    for c in conds:
        write = [If(c, write)]
    body.extend(write)
    if j is not None:
        L.emit(For(j, ix.c32(0), ix.c32(p.J), ix.c32(1), body))
    else:
        L.emit(*body)
    L.barrier()

    # Each output combines its Wr slots, in warp order.
    srcs, src_idx = slots[:len(acc.vals)], slots[-1] if arg else None

    def row(out: Expr):
        return lambda w: [ix.add(ix.mul(out, p.Wr), w)] * len(srcs)

    if op.results[0].type.is_scalar and _pow2(p.Wr) and p.Wr > 1:
        # Every warp combines the Wr slots with a second butterfly: lane l reads slot
        # l % Wr, so each aligned group of Wr lanes holds each slot once (no identity needed),
        # and every lane ends with the same value (the butterfly is symmetric).
        stmts = [Assign(a, Index(s, ix.mod(L.tid, p.Wr))) for a, s in zip(accs, slots)]
        _butterfly(L, kind, acc, accs, p.Wr, stmts)
        L.emit(*stmts)
        bind_scalar(L, op.results, kind, acc)
        return True
    if op.results[0].type.is_scalar:
        stmts = []
        res = reduce_loop(L, kind, acc_ts, srcs, src_idx, row(ix.c32(0)), ix.c32(0), p.Wr, 1,
                          stmts)
        L.emit(*stmts)
        bind_scalar(L, op.results, kind, res)
        return True
    g = L.open_group(p.O)
    g.ops.add(id(op))
    res = reduce_loop(L, kind, acc_ts, srcs, src_idx, row(g.e), ix.c32(0), p.Wr, 1, g.body)
    for r, value in zip(op.results, finish(kind, res, op.results)):
        L.bind(r, value, g)
    return True


def _butterfly(L: LoweringContext, kind: str, acc: Acc, accs: list[Var], G: int,
               out: list[Stmt]) -> None:
    """Append the steps that combine `acc` over each aligned group of G lanes (lane offsets
    G/2, ..., 2, 1): every lane of a group ends with the group's combination."""
    off = G // 2
    while off:
        theirs = [L.var("shfl", a.dtype) for a in accs]
        out.extend(Intrinsic(SHFL_XOR, [a, ix.c32(off)], [x]) for a, x in zip(accs, theirs))
        combine(L, kind, acc, theirs[:len(acc.vals)],
                theirs[-1] if acc.idx is not None else None, out)
        off //= 2


def _identities(kind: str, ts: list[DType], arg: bool) -> list[Const]:
    return [identity(kind, t) for t in ts] + ([Const(INT32_MAX, int32)] if arg else [])


def _fold(L: LoweringContext, op: tile.Op, p: RowPlan, kind: str, acc: Acc, accs: list[Var],
          parts: list) -> None:
    """Phase 1, in the group of the input's numel: fold each element into the running
    accumulator of its segment; a segment's last slot writes it to the partial arrays (J > 1).
    With one slot per segment the element is its segment's partial."""
    g = L.open_group(p.n)
    g.ops.add(id(op))  # the input needs no array unless something else reads it
    xs = [L.read(v) for v in op.operands]
    xi = ix.mod(g.e, p.R) if acc.idx is not None else None
    vals: list[Expr] = [*xs] + ([xi] if xi is not None else [])
    if p.q == 1:
        if parts:
            g.body.extend(ArrayStore(s, g.k, v) for s, v in zip(parts, vals))
        else:
            g.body.extend(Assign(a, v) for a, v in zip(accs, vals))
        return
    step: list[Stmt] = []
    combine(L, kind, acc, xs, xi, step)
    start = Binary("eq", ix.mod(g.k, p.q), ix.c32(0))
    if kind == "custom":  # no identity: a segment starts from its first element
        g.body.append(If(start, [Assign(a, v) for a, v in zip(accs, vals)], step))
    else:
        ids = _identities(kind, [a.dtype for a in acc.vals], xi is not None)
        init = [Assign(a, c) for a, c in zip(accs, ids)]
        if parts:
            g.body.append(If(start, init))
        else:  # one segment: start it before the group's loop
            L.emit(*init)
        g.body.extend(step)
    if parts:
        last = Binary("eq", ix.mod(g.k, p.q), ix.c32(p.q - 1))
        g.body.append(If(last, [ArrayStore(s, ix.div(g.k, p.q), a) for s, a in zip(parts, accs)]))


__all__ = ["SHFL_XOR", "SIMULATIONS", "RowPlan", "plan", "shfl_xor_lanes", "warp_reduce"]
