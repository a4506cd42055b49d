"""Lowering of `scan` {op, axis, reverse}: inclusive scans (cumsum, cumprod, associative_scan
with a combine region, of one or several operands).

The operands (shape (A.., R, B..) around `axis`: A outer, R along the axis, B inner elements;
O = A*B lines) are made addressable through `Lowerer.view`, like a reduction's.  Position q of a
line is coordinate r = q along the axis, r = R-1-q when `reverse`; the scan is
y[q] = combine(y[q-1], x[q]) with y[0] = x[0] (the interpreter's sequential definition), the
earlier value always the combination's first argument, so a combine function needs to be
associative only (not commutative).

One thread (T == 1, the CPU): a running loop along each line, into the results' register
arrays.  With B == 1 (the axis is the last dim) the carry is a scalar variable; with B > 1 the
loop over the B inner elements is innermost, each row combining with the previous row of the
result, so it is contiguous and vectorises.

Several threads (T > 1, a work-group): a blocked scan through shared memory.  Each line is cut
into P chunks of C = ceil(R / P) positions (P as large as T / O allows, every chunk non-empty),
one virtual worker per chunk (O*P of them, ceil(O*P / T) per thread when O > T):
  phase 1  each worker scans its chunk sequentially into a shared copy of the result and keeps
           the chunk's total;
  phase 2  (P > 1) Hillis-Steele over each line's P totals: log2(P) steps, each reading a
           partner d chunks earlier between two barriers, turn them into inclusive prefixes;
  phase 3  every element, in the usual layout (element e in thread e % T, fused with what
           follows), combines the prefix of the chunks before its own with its chunk-local value.
Work O(R*O + O*P log P), depth O(C + log P) barriers-separated steps.  Float sums and products
associate differently from the sequential definition (rounding may differ, as in a GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod

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
    Stmt,
    Var,
)
from kdsl.ir.types import DType, int32

from . import index as ix
from .context import LoweringContext
from .elementwise import register_type, rounded
from .reduce import combine_custom

# Built-in scan kinds -> the Loop IR binary op of one step (rounded as that op's result).
_STEP = {"sum": "add", "prod": "mul"}

Step = Callable[[list[Var], list[Expr], list[Stmt]], None]


def _stepper(L: LoweringContext, op: tile.Op) -> Step:
    """`step(accs, xs, out)` appends `accs = combine(accs, xs)` to `out`; xs are Vars."""
    kind = op.attrs["op"]
    if kind == "custom":
        region = op.regions[0]
        return lambda accs, xs, out: combine_custom(L, region, accs, xs, out)
    loop_op, elem = _STEP[kind], op.results[0].type.elem

    def step(accs: list[Var], xs: list[Expr], out: list[Stmt]) -> None:
        out.append(Assign(accs[0], rounded(Binary(loop_op, accs[0], xs[0]), elem)))
    return step


class _Scan:
    """The operands, their addressable arrays and the index maps of one scan op."""

    def __init__(self, L: LoweringContext, op: tile.Op):
        self.L, self.op = L, op
        self.xs = op.operands
        self.axis, self.reverse = op.attrs["axis"], op.attrs["reverse"]
        shape = self.xs[0].shape
        self.shape = shape
        ax = self.axis
        self.A, self.R, self.B = prod(shape[:ax]), shape[ax], prod(shape[ax + 1:])
        self.ts: list[DType] = [register_type(v.type) for v in self.xs]
        self.step = _stepper(L, op)
        L.close()
        self.arrs = L.addressable(*[L.view(v)[0] for v in self.xs])

    def r(self, q: Expr) -> Expr:
        """Coordinate along the axis of position q."""
        if not self.reverse:
            return q
        if isinstance(q, Const):
            return ix.c32(self.R - 1 - q.value)
        return Binary("sub", ix.c32(self.R - 1), q)

    def flat(self, a: Expr, r: Expr, b: Expr) -> Expr:
        """Flat index in the scanned tile of element (a, r, b)."""
        return ix.add(ix.mul(a, self.R * self.B), ix.add(ix.mul(r, self.B), b))

    def load(self, a: Expr, r: Expr, b: Expr, out: list[Stmt],
             into: list[Var] | None = None) -> list[Var]:
        """Variables (`into`, or new ones) assigned each operand's element (a, r, b), read
        through its view."""
        ax = self.axis
        coords = ix.unflatten(a, self.shape[:ax]) + [r] + ix.unflatten(b, self.shape[ax + 1:])
        vs = into if into is not None else self.accs("x")
        for v, arr, var in zip(self.xs, self.arrs, vs):
            out.append(Assign(var, Index(arr, self.L.at(v, coords)[1])))
        return vs

    def accs(self, hint: str = "acc") -> list[Var]:
        return [self.L.var(hint, t) for t in self.ts]


def lower_scan(L: LoweringContext, op: tile.Op) -> None:
    s = _Scan(L, op)
    if L.target.one_thread_per_program:
        _one_thread(s)
    else:
        _threads(s)


def _nest(L: LoweringContext, dims: list[tuple[str, int]], build: Callable[..., list[Stmt]],
          out: list[Stmt]) -> None:
    """Nested loops over `dims` (hint, extent; extent 1 gives the constant 0 and no loop),
    outermost first, around the statements `build(*indices)` returns."""
    idx: list[Expr] = [L.var(h, int32) if n > 1 else ix.c32(0) for h, n in dims]
    body = build(*idx)
    for (_, n), i in reversed(list(zip(dims, idx))):
        if n > 1:
            body = [For(i, ix.c32(0), ix.c32(n), ix.c32(1), body)]
    out.extend(body)


def _one_thread(s: _Scan) -> None:
    L, R, B = s.L, s.R, s.B
    N = prod(s.shape)
    outs = [L.array(r.name or "scan", t, N) for r, t in zip(s.op.results, s.ts)]
    if B == 1:
        # The axis is the last dim: a scalar carry along each line.
        def line(a: Expr) -> list[Stmt]:
            body: list[Stmt] = []
            r0 = s.r(ix.c32(0))
            accs = s.load(a, r0, ix.c32(0), body, s.accs())
            e0 = s.flat(a, r0, ix.c32(0))
            body.extend(ArrayStore(o, e0, c) for o, c in zip(outs, accs))
            if R > 1:
                q = L.var("q", int32)
                inner: list[Stmt] = []
                r = s.r(q)
                s.step(accs, s.load(a, r, ix.c32(0), inner), inner)
                e = s.flat(a, r, ix.c32(0))
                inner.extend(ArrayStore(o, e, c) for o, c in zip(outs, accs))
                body.append(For(q, ix.c32(1), ix.c32(R), ix.c32(1), inner))
            return body

        top: list[Stmt] = []
        _nest(L, [("a", s.A)], line, top)
        L.emit(*top)
    else:
        # Rows of B inner elements: each row combines with the previous row of the result.
        def first_row(a: Expr, b: Expr) -> list[Stmt]:
            body: list[Stmt] = []
            r0 = s.r(ix.c32(0))
            xs = s.load(a, r0, b, body)
            e = s.flat(a, r0, b)
            body.extend(ArrayStore(o, e, x) for o, x in zip(outs, xs))
            return body

        def rows(a: Expr) -> list[Stmt]:
            body: list[Stmt] = []
            _nest(L, [("b", B)], lambda b: first_row(a, b), body)
            if R > 1:
                q = L.var("q", int32)
                inner: list[Stmt] = []

                def row(b: Expr) -> list[Stmt]:
                    st: list[Stmt] = []
                    r = s.r(q)
                    e = s.flat(a, r, b)
                    prev = ix.add(e, ix.c32(B if s.reverse else -B))
                    accs = s.accs()
                    st.extend(Assign(c, Index(o, prev)) for c, o in zip(accs, outs))
                    s.step(accs, s.load(a, r, b, st), st)
                    st.extend(ArrayStore(o, e, c) for o, c in zip(outs, accs))
                    return st

                _nest(L, [("b", B)], row, inner)
                body.append(For(q, ix.c32(1), ix.c32(R), ix.c32(1), inner))
            return body

        top = []
        _nest(L, [("a", s.A)], rows, top)
        L.emit(*top)
    for r, o in zip(s.op.results, outs):
        L.regs[r.id] = o


def _chunks(T: int, O: int, R: int) -> tuple[int, int]:
    """(P, C): chunks per line and positions per chunk, every chunk non-empty."""
    P0 = max(1, min(T // O, R)) if O < T else 1
    C = -(-R // P0)
    return -(-R // C), C


def _threads(s: _Scan) -> None:
    L, R, B, T = s.L, s.R, s.B, s.L.T
    O, N = s.A * B, s.A * R * B
    P, C = _chunks(T, O, R)
    n = O * P
    names = [r.name or "scan" for r in s.op.results]
    out_sh = [L.shared(f"{nm}_sh", t, N) for nm, t in zip(names, s.ts)]
    tot = [L.shared("tot", t, n) for t in s.ts] if P > 1 else []
    L.barrier()  # earlier readers of reused shared arrays are done

    # Phase 1: worker v scans chunk p of line o.
    def worker(v: Expr) -> list[Stmt]:
        body: list[Stmt] = []
        o, p = _line_chunk(v, O, P)
        a = ix.c32(0) if s.A == 1 else ix.div(o, B)
        b = ix.c32(0) if B == 1 else ix.mod(o, B)
        q0 = ix.mul(p, C)
        r0 = s.r(q0)
        accs = s.load(a, r0, b, body, s.accs())
        e0 = s.flat(a, r0, b)
        body.extend(ArrayStore(o_, e0, c) for o_, c in zip(out_sh, accs))
        if C > 1:
            q = L.var("q", int32)
            hi: Expr = ix.c32(R)
            if P > 1:
                hi = ix.add(q0, ix.c32(C))
                if R % C:  # the last chunk is shorter
                    hi = Binary("minimum", hi, ix.c32(R))
            inner: list[Stmt] = []
            r = s.r(q)
            s.step(accs, s.load(a, r, b, inner), inner)
            e = s.flat(a, r, b)
            inner.extend(ArrayStore(o_, e, c) for o_, c in zip(out_sh, accs))
            body.append(For(q, ix.add(q0, ix.c32(1)), hi, ix.c32(1), inner))
        body.extend(ArrayStore(t_, v, c) for t_, c in zip(tot, accs))
        return body

    L.emit(*_per_worker(L, n, worker))
    L.barrier()

    # Phase 2: inclusive prefixes of each line's chunk totals (Hillis-Steele).
    d = 1
    while d < P:
        v = L.tid
        cond: Expr = Binary("ge", _line_chunk(v, O, P)[1], ix.c32(d))
        if n < T:
            cond = Binary("land", Binary("lt", v, ix.c32(n)), cond)
        left, right = s.accs("left"), s.accs("right")
        read: list[Stmt] = [Assign(c, Index(t_, ix.add(v, ix.c32(-d)))) for c, t_ in zip(left, tot)]
        read += [Assign(c, Index(t_, v)) for c, t_ in zip(right, tot)]
        s.step(left, right, read)
        L.emit(If(cond, read))
        L.barrier()
        L.emit(If(cond, [ArrayStore(t_, v, c) for t_, c in zip(tot, left)]))
        L.barrier()
        d *= 2

    # Phase 3: each element (usual layout) = prefix of the earlier chunks (+) its local value.
    g = L.open_group(N)
    g.ops.add(id(s.op))
    if P == 1:
        for r, o_ in zip(s.op.results, out_sh):
            L.bind(r, Index(o_, g.e), g)
            L.note_staged(r, o_)  # the final values, by flat index, in this epoch's memory
        return
    e = g.e
    dims3 = (s.A, R, B)
    a, r, b = (ix.coord(e, dims3, i) if dims3[i] > 1 else ix.c32(0) for i in range(3))
    if s.A == 1:
        r = ix.div(e, B)  # e < R * B
    q = s.r(r)  # the map is its own inverse
    p = ix.div(q, C)
    ys = s.accs("y")
    g.body.extend(Assign(y, Index(o_, e)) for y, o_ in zip(ys, out_sh))
    pre: list[Stmt] = []
    accs = s.accs()
    line = ix.add(ix.mul(a, B), b)
    src = ix.add(ix.mul(line, P), ix.add(p, ix.c32(-1)))
    pre.extend(Assign(c, Index(t_, src)) for c, t_ in zip(accs, tot))
    s.step(accs, ys, pre)
    pre.extend(Assign(y, c) for y, c in zip(ys, accs))
    g.body.append(If(Binary("gt", p, ix.c32(0)), pre))
    for res, y in zip(s.op.results, ys):
        L.bind(res, y, g)


def _line_chunk(v: Expr, O: int, P: int) -> tuple[Expr, Expr]:
    """(line, chunk) of virtual worker v (< O*P)."""
    if O == 1:
        return ix.c32(0), v
    return ix.div(v, P), ix.mod(v, P)


def _per_worker(L: LoweringContext, n: int, worker: Callable[[Expr], list[Stmt]]) -> list[Stmt]:
    """Statements running `worker(v)` for every virtual worker v < n, v = tid + j*T."""
    T = L.T
    loops = -(-n // T)
    if loops == 1:
        v: Expr = L.tid
        body = worker(v)
        return [If(Binary("lt", v, ix.c32(n)), body)] if n < T else body
    j = L.var("j", int32)
    vv = L.var("v", int32)
    body = [Assign(vv, ix.add(L.tid, ix.mul(j, T)))] + worker(vv)
    if n % T:
        body = [body[0], If(Binary("lt", vv, ix.c32(n)), body[1:])]
    return [For(j, ix.c32(0), ix.c32(loops), ix.c32(1), body)]


__all__ = ["lower_scan"]
