"""Loop IR pass: a multi-stage shared-memory ring for a loop's `cp.async` copies (GPU targets
with the "cp_async" capability; Triton's software pipelining of `num_stages`).

The lowering of a K loop whose dot operands are copied straight to shared memory
(`Lowerer.stage`) gives a body of this shape, every iteration waiting for its own copies:

    P          assignments of the iteration (`left = K - k * BK`)
    barrier    the previous iteration's readers of the copies are done
    G          the copies: `AsyncCopy`s into shared arrays X (addresses from carried pointers)
    wait       this thread's copies have landed
    barrier    ... and everybody's
    R          the compute reading X (C) and the updates of the carried pointers (U)

With N stages (the loop's `"pipeline N"` hint, from `num_stages` of the launch or of
`kd.range`) each array of X becomes a ring of N slots and the copies run N - 1 iterations
ahead of the compute:

    prologue, s = 0 .. N-2:  P(lo + s)  if lo + s < hi: G(slot s)   commit   U(lo + s)
    for k:   wait until N - 2 groups are pending     (iteration k's copies have landed)
             barrier                                   (... everybody's; slot k-1 is free)
             C(slot k % N)
             P(k + N - 1)  if k + N - 1 < hi: G(slot (k - 1) % N)   commit   U(k + N - 1)
    wait for all

One barrier per iteration instead of two, and N - 1 stages of global loads in flight while the
tensor cores work.  The slot the copies of iteration k fill, (k - 1) % N, was last read by the
compute of iteration k - 1, which every thread finished before the barrier of iteration k; the
slot read at k was filled N - 1 iterations earlier and is waited for at the top of k.  The
carried pointers run N - 1 steps ahead of the original loop's, so they must not be read after
it.  The rewrite applies only where that reordering is provably the same program:

* the body has the shape above; G holds at least one `AsyncCopy`, only assignments, loops,
  ifs and stores to X or registers, and reads no shared memory; R writes no array of X and
  issues no copy;
* U, the statements of R the copy addresses depend on (the carried pointers' updates and
  what they read), reads nothing the rest of R (C) writes, loads no memory and stores none;
  C reads nothing U or G writes; the copies read nothing C writes;
* the step is a positive constant and the bounds are not written in the loop; what U writes
  is not read outside the loop;
* the rings fit in the target's shared memory (N is lowered until they do; below 2, no ring).

Anything else keeps the synchronous body (correct, unpipelined).  The Loop IR simulator checks
the result with its race detector, which counts a copy in flight as a write of every barrier
interval until the wait that lands it (kdsl/ir/loop_interp.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields, replace

from kdsl.ir.loop import (
    PIPELINE_HINT,
    Array,
    ArrayStore,
    Assign,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    AtomicCAS,
    AtomicRMW,
    Barrier,
    Binary,
    Comment,
    Const,
    Expr,
    For,
    If,
    Index,
    Intrinsic,
    Kernel,
    Load,
    PairBits,
    Print,
    Select,
    SharedRow,
    Special,
    Stmt,
    Store,
    Transpose,
    Var,
    VecLoad,
    VecStore,
    While,
    loop_hint,
    map_operands,
    walk,
)
from kdsl.ir.types import PointerType, int32

from . import index as ix
from .mask_version import _lists
from .prefetch import _nodes

#: fields of a statement that name a variable it writes (renamed, never substituted)
_WRITTEN = ("var", "result", "results")
#: expressions that read an element of an array
_ARRAY_READS = (Index, SharedRow, PairBits)


def pipeline_copies(kernel: Kernel, shared_limit: int) -> Kernel:
    """`kernel` with the copies of its `"pipeline N"` loops in rings (module docstring);
    `shared_limit`: the bytes of shared memory a program may use."""
    ring = _Ring(kernel, shared_limit)
    body = ring.stmts(kernel.body)
    if not ring.grown:
        return replace(kernel, body=body)
    arrays = [ring.grown.get(a.name, a) for a in kernel.arrays]
    body = _rewrite_list(body, {}, {n: (a, None) for n, a in ring.grown.items()})
    return replace(kernel, body=body, arrays=arrays, variables=kernel.variables + ring.new_vars,
                   shared_bytes=ring.shared)


def stages_of(s: For) -> int:
    """N of a loop's `"pipeline N"` hint (1: none)."""
    h = loop_hint(s)
    if h and h.startswith(PIPELINE_HINT + " "):
        return int(h.split()[1])
    return 1


# ------------------------------------------------------------------------------ the rewrite


@dataclass
class _Shape:
    pre: list[Stmt]      # P
    copies: list[Stmt]   # G
    compute: list[Stmt]  # C
    update: list[Stmt]   # U
    rings: list[Array]   # X
    keep_pre: bool       # C reads what P assigns: P stays before C as well


class _Ring:
    def __init__(self, kernel: Kernel, shared_limit: int):
        self.k = kernel
        self.limit = shared_limit
        self.shared = kernel.shared_bytes
        self.grown: dict[str, Array] = {}
        self.new_vars: list[Var] = []
        self.taken = {v.name for v in kernel.variables} | {p.name for p in kernel.params}

    def fresh(self, hint: str, dtype) -> Var:
        n = 0
        while f"{hint}{n}" in self.taken:
            n += 1
        v = Var(f"{hint}{n}", dtype)
        self.taken.add(v.name)
        self.new_vars.append(v)
        return v

    def stmts(self, stmts: list[Stmt]) -> list[Stmt]:
        out: list[Stmt] = []
        for s in stmts:
            if isinstance(s, For):
                stages = stages_of(s)
                body = self.stmts(s.body[1:] if stages > 1 else s.body)
                loop = For(s.var, s.lo, s.hi, s.step, body)
                out.extend(self.ring(loop, s, stages) if stages > 1 else [loop])
            elif isinstance(s, If):
                out.append(If(s.cond, self.stmts(s.then), self.stmts(s.orelse)))
            elif isinstance(s, While):
                out.append(While(self.stmts(s.cond_body), s.cond, self.stmts(s.body)))
            else:
                out.append(s)
        return out

    def ring(self, loop: For, original: For, stages: int) -> list[Stmt]:
        """`loop` (the rewritten body of the kernel's `original`) with its copies in a ring of
        up to `stages` slots, or as it is."""
        shape = _shape(loop, original, self.k.body)
        if shape is None or any(a.name in self.grown for a in shape.rings):
            return [loop]
        size = sum(_bytes(a) for a in shape.rings)
        while stages > 1 and self.shared + (stages - 1) * size > self.limit:
            stages -= 1
        if stages < 2:
            return [loop]
        self.shared += (stages - 1) * size
        for a in shape.rings:
            self.grown[a.name] = Array(a.name, a.dtype, a.size * stages, a.space)
        return self._build(loop, shape, stages)

    def _build(self, loop: For, sh: _Shape, n: int) -> list[Stmt]:
        iv, step = loop.var, int(loop.step.value)
        read_slot, fill_slot = self.fresh("ring_read", int32), self.fresh("ring_fill", int32)
        # P's variables get fresh names in its copy for the iteration N - 1 ahead
        env: dict[str, Expr] = {}
        for s in sh.pre:
            if isinstance(s, Assign):
                env[s.var.name] = self.fresh(s.var.name + "_ahead", s.var.dtype)

        def ahead(at: Expr, slot: Expr | int) -> list[Stmt]:
            """P, G and U of the iteration whose induction value is `at`, its copies into
            ring slot `slot`, then a commit."""
            m = dict(env, **{iv.name: at})
            pre = _rewrite_list(sh.pre, m, {})
            offsets = {a.name: (self.grown[a.name], ix.mul(_as_expr(slot), a.size))
                       for a in sh.rings}
            copies = _rewrite_list(sh.copies, m, offsets)
            upd = _rewrite_list(sh.update, m, {})
            return pre + [If(Binary("lt", at, loop.hi), copies), AsyncCommit()] + upd

        out: list[Stmt] = [Comment(f"copies in a ring of {n} stages (async_ring.py)")]
        for s in range(n - 1):
            out += ahead(ix.add(loop.lo, ix.c32(s * step)), s)
        reads = {a.name: (self.grown[a.name], ix.mul(read_slot, a.size)) for a in sh.rings}
        body: list[Stmt] = [AsyncWait(n - 2), Barrier()]
        body += sh.pre if sh.keep_pre else []
        body += _rewrite_list(sh.compute, {}, reads)
        body += ahead(ix.add(iv, ix.c32((n - 1) * step)), fill_slot)
        body += [_advance(read_slot, n), _advance(fill_slot, n)]
        # the prologue's slots are constants, the loop's two counters
        return out + [Assign(read_slot, ix.c32(0)), Assign(fill_slot, ix.c32(n - 1)),
                      For(iv, loop.lo, loop.hi, loop.step, body), AsyncWait(0)]


def _advance(slot: Var, n: int) -> Stmt:
    nxt = ix.add(slot, ix.c32(1))
    return Assign(slot, Select(Binary("eq", nxt, ix.c32(n)), ix.c32(0), nxt))


def _as_expr(x: Expr | int) -> Expr:
    return ix.c32(x) if isinstance(x, int) else x


def _bytes(a: Array) -> int:
    return a.size * (8 if isinstance(a.dtype, PointerType) else a.dtype.itemsize)


# ------------------------------------------------------------------------------ the analysis


def _shape(loop: For, original: For, kernel_body: list[Stmt]) -> _Shape | None:
    """The P / G / C / U split of `loop`'s body when the ring is provably the same program
    (`original`: the loop as it stands in `kernel_body`)."""
    body = loop.body
    if not (isinstance(loop.step, Const) and int(loop.step.value) > 0):
        return None
    first = next((i for i, s in enumerate(body) if isinstance(s, Barrier)), None)
    if first is None or not all(isinstance(s, (Assign, Comment)) for s in body[:first]):
        return None
    wait = next((i for i in range(first + 1, len(body))
                 if isinstance(body[i], AsyncWait) and body[i].pending == 0), None)
    if wait is None or wait + 1 >= len(body) or not isinstance(body[wait + 1], Barrier):
        return None
    pre, copies, rest = body[:first], body[first + 1:wait], body[wait + 2:]
    rings = _copy_targets(copies)
    if rings is None:
        return None
    ring_names = {("a", a.name) for a in rings}
    for s in walk(rest):
        if isinstance(s, (AsyncCopy, AsyncWait, AsyncCommit)) or ring_names & _writes([s]):
            return None
    issue_in = _exposed(pre + copies) - {("v", loop.var.name)}
    carried = issue_in & _writes(rest)
    update, compute = _split(rest, carried)
    w_compute, w_update = _writes(compute), _writes(update)
    r_compute, r_update = _exposed(compute), _exposed(update)
    if (w_compute & (issue_in | r_update) or r_compute & (w_update | _writes(copies) - ring_names)
            or r_update & _writes(copies) or ("v", loop.var.name) in _writes(body)):
        return None
    bounds = {("v", v.name) for e in (loop.lo, loop.hi) for v in _nodes(e) if isinstance(v, Var)}
    if bounds & _writes(body) or any(_touches_memory(s) for s in walk(update)):
        return None
    if w_update & _reads_outside(kernel_body, original):
        return None
    keep_pre = bool(r_compute & _writes(pre))
    return _Shape(pre, copies, compute, update, rings, keep_pre)


def _copy_targets(copies: list[Stmt]) -> list[Array] | None:
    """The shared arrays G writes, when G is a copy group the ring can take (module
    docstring), else None."""
    rings: dict[str, Array] = {}
    n_async = 0
    for s in walk(copies):
        if isinstance(s, AsyncCopy):
            n_async += 1
            rings[s.dst.name] = s.dst
        elif isinstance(s, ArrayStore):
            if s.array.space == "shared":
                rings[s.array.name] = s.array
        elif not isinstance(s, (Assign, For, If, Comment)):
            return None
        for e in _stmt_exprs(s):
            if any(isinstance(x, _ARRAY_READS) and x.array.space == "shared"
                   for x in _nodes(e)):
                return None
    return list(rings.values()) if n_async else None


def _split(rest: list[Stmt], carried: set[tuple[str, str]]
           ) -> tuple[list[Stmt], list[Stmt]]:
    """(U, C) of R: U the top-level statements that write what the copies read across
    iterations (`carried`), with those writing what they read before them."""
    need = set(carried)
    in_update = [False] * len(rest)
    for i in range(len(rest) - 1, -1, -1):
        if _writes([rest[i]]) & need:
            in_update[i] = True
            need |= _exposed([rest[i]])
    update = [s for s, u in zip(rest, in_update) if u]
    compute = [s for s, u in zip(rest, in_update) if not u]
    return update, compute


def _touches_memory(s: Stmt) -> bool:
    if isinstance(s, (Store, AtomicRMW, AtomicCAS, Print, Intrinsic, VecLoad, VecStore,
                      AsyncCopy, Barrier)):
        return True
    return any(isinstance(x, Load) for e in _stmt_exprs(s) for x in _nodes(e))


# --------------------------------------------------------------------- reads and writes

Name = tuple[str, str]  # ("v", variable) or ("a", array)


def _stmt_exprs(s: Stmt) -> Iterator[Expr]:
    """The expressions `s` evaluates itself (not those of nested statements), written
    variables excluded."""
    for f in fields(s):
        if f.name in _WRITTEN:
            continue
        v = getattr(s, f.name)
        if isinstance(v, Expr):
            yield v
        elif isinstance(v, list):
            yield from (x for x in v if isinstance(x, Expr))


def _expr_reads(e: Expr) -> set[Name]:
    out: set[Name] = set()
    for x in _nodes(e):
        if isinstance(x, Var):
            out.add(("v", x.name))
        elif isinstance(x, _ARRAY_READS):
            out.add(("a", x.array.name))
    return out


def _own_reads(s: Stmt) -> set[Name]:
    out: set[Name] = set()
    for e in _stmt_exprs(s):
        out |= _expr_reads(e)
    for f in ("src",):  # arrays a statement reads whole (VecStore, Transpose)
        a = getattr(s, f, None)
        if isinstance(a, Array):
            out.add(("a", a.name))
    return out


def _own_writes(s: Stmt) -> set[Name]:
    out: set[Name] = set()
    for f in _WRITTEN:
        v = getattr(s, f, None)
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, Var):
                out.add(("v", x.name))
    for f in ("array", "dst"):
        a = getattr(s, f, None)
        if isinstance(a, Array):
            out.add(("a", a.name))
    return out


def _writes(stmts: list[Stmt]) -> set[Name]:
    out: set[Name] = set()
    for s in walk(stmts):
        out |= _own_writes(s)
    return out


def _exposed(stmts: list[Stmt]) -> set[Name]:
    """What `stmts` read before writing it in the same pass (variables assigned earlier in
    the list, or a loop's own variable, are not read from outside); arrays always count."""
    defined: set[Name] = set()
    out: set[Name] = set()
    for s in stmts:
        out |= _own_reads(s) - defined
        inner: set[Name] = set()
        for _, sub in _lists(s):
            inner |= _exposed(sub)
        if isinstance(s, For):
            inner.discard(("v", s.var.name))
        out |= inner - defined
        if isinstance(s, (Assign, Intrinsic)):
            defined |= {w for w in _own_writes(s) if w[0] == "v"}
    return out


def _reads_outside(body: list[Stmt], loop: For) -> set[Name]:
    out: set[Name] = set()
    for s in body:
        if s is loop:
            continue
        out |= _own_reads(s)
        for _, sub in _lists(s):
            out |= _reads_outside(sub, loop)
    return out


# ------------------------------------------------------------------------------ rewriting


def _rewrite_expr(e: Expr, env: dict[str, Expr], arrays: dict[str, tuple[Array, Expr | None]],
                  memo: dict[int, Expr]) -> Expr:
    if isinstance(e, Var):
        return env.get(e.name, e)
    if isinstance(e, (Const, Special)):
        return e
    got = memo.get(id(e))
    if got is not None:
        return got
    out = map_operands(e, lambda x: _rewrite_expr(x, env, arrays, memo))
    if isinstance(out, _ARRAY_READS) and out.array.name in arrays:
        new, off = arrays[out.array.name]
        out = replace(out, array=new, index=out.index if off is None else ix.add(out.index, off))
    memo[id(e)] = out
    return out


def _rewrite(s: Stmt, env: dict[str, Expr], arrays: dict[str, tuple[Array, Expr | None]],
             memo: dict[int, Expr]) -> Stmt:
    """`s` with variables substituted (`env`; a written variable only renamed to a `Var`) and
    the arrays of `arrays` replaced, their element indices moved by the offset given."""
    changes: dict = {}
    offset: Expr | None = None

    def written(v: Var) -> Var:
        nv = env.get(v.name, v)
        return nv if isinstance(nv, Var) else v

    for f in fields(s):
        v = getattr(s, f.name)
        if f.name in _WRITTEN and isinstance(v, Var):
            changes[f.name] = written(v)
        elif isinstance(v, Expr):
            changes[f.name] = _rewrite_expr(v, env, arrays, memo)
        elif isinstance(v, Array) and v.name in arrays:
            changes[f.name], off = arrays[v.name]
            offset = off if off is not None else offset
        elif isinstance(v, list) and v:
            if isinstance(v[0], Stmt):
                changes[f.name] = _rewrite_list(v, env, arrays, memo)
            elif f.name in _WRITTEN:
                changes[f.name] = [written(x) for x in v]
            elif isinstance(v[0], Expr):
                changes[f.name] = [_rewrite_expr(x, env, arrays, memo) for x in v]
    if offset is not None:  # ArrayStore / AsyncCopy into a ring slot
        assert isinstance(s, (ArrayStore, AsyncCopy)), s
        changes["index"] = ix.add(changes["index"], offset)
    assert not isinstance(s, Transpose) or offset is None
    return replace(s, **changes)


def _rewrite_list(stmts: list[Stmt], env: dict[str, Expr],
                  arrays: dict[str, tuple[Array, Expr | None]],
                  memo: dict[int, Expr] | None = None) -> list[Stmt]:
    memo = {} if memo is None else memo
    return [_rewrite(s, env, arrays, memo) for s in stmts]
