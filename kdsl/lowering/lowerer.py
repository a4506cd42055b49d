"""The one shared lowering: Tile IR -> Loop IR, driven by a `Target`.

Distribution (kdsl/ir/loop.py): with T = `target.threads`, flat element `e` of a tile of N
elements lives in thread `e % T`, register slot `e // T`; a thread holds S = ceil(N / T) slots.
Scalars are uniform: every thread computes them into its own `Var`s.

Walking a block in order, consecutive fusable ops (element-wise ops, `iota`, `const`, `splat`
and the gathers `broadcast`/`trans`/`slice`) whose results have the same numel form a *group*,
emitted as ONE element loop

    for k in range(S):  e = tid + k*T;  [if e < N:]  one Assign per op

With one thread, a group opened by an op of several (non-unit) dims runs nested loops instead,
one per dim, innermost = last dim, and `k = e` is rebuilt from them (index.py `nest`):
loads and stores along the last dim are then contiguous vector accesses, not gathers.

A group value that is needed elsewhere (a later group, a reduction, a loop carry, a yield) is
also written to its register array (size S, indexed by k).  Scalar ops are emitted in program
order before the open group's loop (they never depend on it).  A group ends at a non-fusable op,
a different numel, control flow or a scalar side effect.  `reshape` and `hint` are aliases of
their operand (same flat order): they generate nothing.

Values built only from indices, constants and scalars (offsets such as `rm[:, None] * K + rk`)
are never stored: each group that reads them recomputes them (`remat_ok`), at any index.  With
one thread a tile load is treated the same way when no store can come between it and its
readers (`_load_remat_ok`): the CPU re-reads the row from cache instead of storing and
reloading a register array that pushes the row's other operands out of L1.  Other
gathers need their source *addressable* by flat index (`addressable`): with one thread
(`Target.registers_addressable`) that is the source's register array itself; with several, a
shared copy filled between two barriers.  When a
group opens, the sources of all its gathers are staged together (`_prestage`).  Shared arrays
are reused by *epochs*: each staging starts one, after a barrier that all readers of earlier
epochs' arrays precede.  Reductions and dots read their operands through `view`, so that
`dot(q, trans(k))` reads k's copy with permuted coordinates instead of a materialised
transpose.  Reductions live in reduce.py, scans in scan.py, `dot` in dot.py,
the element-wise op table in elementwise.py.

A yielded tile computed in the loop body's last group is written straight into the carried
array when no reader can observe it (`yield_to`), so `acc = acc + ...` costs no copy.

Control flow lives in control.py, IR analyses (aliases, users) in analysis.py; the interface
the helper modules see is `LoweringContext` (context.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from math import prod
from typing import Any

from kdsl.errors import CompilationError
from kdsl.ir import tile
from kdsl.ir.loop import (
    Array,
    ArrayStore,
    Assign,
    AsyncCopy,
    AsyncWait,
    AtomicCAS,
    AtomicRMW,
    Barrier,
    Binary,
    Const,
    Expr,
    For,
    If,
    Index,
    Intrinsic,
    IntrinsicSim,
    Kernel,
    KParam,
    PairBits,
    Special,
    Stmt,
    Type,
    Var,
)
from kdsl.ir.loop_verify import verify
from kdsl.ir.types import PointerType, int32
from kdsl.passes.provenance import stored_params
from kdsl.target import Target

from . import fp8 as mem  # loads and stores (8-bit floats move as their codes)
from . import index as ix
from .analysis import ALIASES, addressed_operands, aliases, raw_pointer_loc, read_once, users
from .async_ring import pipeline_copies
from .caps import check_target
from .context import CoordMap, Group
from .control import lower_for, lower_if, lower_while
from .debug import DEBUG_LOWERINGS, drop_breakpoints
from .dot import dot_strategy, packed_operands, sparse_dot_strategy
from .dot_mma import SIMULATIONS as MMA_SIMULATIONS
from .dot_sparse import SIMULATIONS as SPARSE_SIMULATIONS
from .elementwise import ELEMENTWISE, NEEDS_CAP, const, register_type
from .gather import lower_gather, lower_histogram, lower_unsplat, slice_coords, slice_source
from .hoist_barriers import hoist_barriers
from .legalize import legalize
from .mask_version import version_masks
from .prefetch import lower_prefetch
from .reduce import accumulator_types, lower_reduce
from .reduce_warp import SIMULATIONS as WARP_SIMULATIONS
from .reduce_warp import warp_reduce
from .scan import lower_scan
from .vector import Vectorizer, element_index

# Ops computed element by element inside a group.
GATHERS = frozenset({"broadcast", "trans", "slice"})
FUSABLE = tile.ELEMENTWISE | {"iota", "const", "splat", "reshape"} | GATHERS
# Ops a tile value may be recomputed from at any index (pure, cheap, no memory).
REMAT_KINDS = (
    tile.BINARY_OPS | tile.COMPARE_OPS | tile.UNARY_OPS
    | {"iota", "const", "splat", "reshape", "broadcast", "trans", "slice", "hint", "where",
       "cast", "addptr", "fma", "int_to_ptr", "ptr_to_int"}
)
REMAT_LIMIT = 12  # largest expression (in distinct ops) recomputed instead of stored
# Ops too costly to recompute on data read from memory (softmax's exp(x - max)): a value built
# with one on a rematerialised load is stored.  On index math they stay cheap enough (rare).
COSTLY = (tile.UNARY_OPS - {"neg", "not", "abs", "floor", "ceil"}) | {"pow"}


class _Names:
    """Unique identifiers (letters, digits and `_`, ending in a digit): each backend maps them
    to its own language's identifiers (the C emitter renames keywords and library names)."""

    def __init__(self, reserved: set[str]):
        self.used = set(reserved)

    def fresh(self, hint: str) -> str:
        base = re.sub(r"\W", "_", hint or "v") or "v"
        if not (base[0].isalpha() or base[0] == "_"):
            base = "v" + base
        i = 0
        while True:
            name = f"{base}{i}"
            if name not in self.used:
                self.used.add(name)
                return name
            i += 1


class Lowerer:
    """State of one lowering.  The helper modules see it as a `LoweringContext` (context.py):
    the names listed there are its interface; everything else here is the driver's own."""

    def __init__(self, fn: tile.Function, target: Target):
        self.fn = fn
        self.target = target
        self.T = target.threads
        self.tid: Expr = ix.c32(0) if target.one_thread_per_program else Special("tid")
        self.names = _Names({p.name for p in fn.runtime_params})
        self.variables: list[Var] = []
        self.arrays: list[Array] = []
        self.scalars: dict[int, Expr] = {}   # scalar value id -> expression (Var, Const, ...)
        self.regs: dict[int, Array] = {}     # tile value id -> register array (S slots)
        self.cur: dict[int, Expr] = {}       # tile value id -> expression in the open group
        self.staged: dict[int, Array] = {}   # tile value id -> addressable copy (by flat index)
        self.group: Group | None = None
        self.out: list[Stmt] = []
        self.alias = aliases(fn)
        self.users = users(fn, self.alias)
        # values read once per element by a loop of their reader's own (hints, a dot's
        # packing loops: `_packed`): recomputed there whatever their size
        self._read_once = read_once(fn, self.users, lambda u, v: u.kind in tile.HINT_OPS or (
            u.kind == "dot" and v.id in {self.canon(o).id for o in self._packed(u)}))
        self._remat: dict[int, frozenset[int] | None] = {}
        self._remat_loads: set[int] = set()  # ids of the loads that are rematerialised
        # Where each op sits: id(op) -> (its block, its index there); for `_load_remat_ok`.
        self._pos: dict[int, tuple[tile.Block, int]] = {}
        for op in fn.walk():
            for b in op.regions:
                self._pos.update((id(o), (b, i)) for i, o in enumerate(b.ops))
        self._pos.update((id(o), (fn.body, i)) for i, o in enumerate(fn.body.ops))
        # Values that reductions and dots address in memory (through gather views), and the
        # ops that address each.
        # value id -> ids of the ops that read it only through a shared copy the value's own
        # group wrote (`stage`): they need no register array of it
        self.copied: dict[int, set[int]] = {}
        # id(dot op) -> its accumulator held in mma fragments across the enclosing loop
        # (dot_mma.resident_accumulators); set by the loop's lowering.
        self.resident: dict[int, Any] = {}
        self.viewers: dict[int, list[tile.Op]] = {}
        for op in fn.walk():
            for o in self._addressed(op):
                self.viewers.setdefault(self.view(o)[0].id, []).append(op)
        self.viewed: set[int] = set(self.viewers)
        self.shared_bytes = 0
        # Shared memory is reused by epochs: every staging starts a new epoch after a barrier,
        # and the readers of arrays filled in earlier epochs all come before that barrier.
        self.epoch = 0
        self.shared_epoch: dict[str, int] = {}
        self.op: tile.Op | None = None
        self.vector = Vectorizer(fn, target)  # layout width and vector accesses

    # ------------------------------------------------------------------------ declarations

    def var(self, hint: str, dtype) -> Var:
        v = Var(self.names.fresh(hint), dtype)
        self.variables.append(v)
        return v

    def array(self, hint: str, dtype, size: int, space: str = "reg") -> Array:
        a = Array(self.names.fresh(hint), dtype, size, space)
        self.arrays.append(a)
        if space == "shared":
            self.shared_bytes += size * (8 if isinstance(dtype, PointerType) else dtype.itemsize)
            if self.shared_bytes > self.target.shared_bytes:
                loc = self.op.loc if self.op is not None else None
                raise CompilationError(
                    f"{self.op.kind if self.op else 'kernel'} needs {self.shared_bytes} bytes of "
                    f"shared memory, more than the {self.target.shared_bytes} this target has",
                    loc, self.fn.name)
        return a

    def shared(self, hint: str, dtype, size: int) -> Array:
        """A shared array for the current epoch, reusing a dead one of the same type if any."""
        free = [a for a in self.arrays if a.space == "shared" and a.dtype == dtype
                and a.size >= size and self.shared_epoch[a.name] < self.epoch]
        a = min(free, key=lambda a: a.size) if free else self.array(hint, dtype, size, "shared")
        self.shared_epoch[a.name] = self.epoch
        return a

    def shared_left(self) -> int:
        return self.target.shared_bytes - self.shared_bytes

    def note_staged(self, v: tile.Value, array: Array) -> None:
        self.staged[v.id] = array

    def new_epoch(self) -> None:
        """Start a staging (followed by a barrier): earlier shared arrays become reusable, so
        copies staged before are forgotten."""
        self.epoch += 1
        self.staged = {}

    def slots(self, n: int) -> int:
        return -(-n // self.T)

    def emit(self, *stmts: Stmt) -> None:
        self.out.extend(stmts)

    def barrier(self) -> None:
        """A barrier (none where the target needs none, and never two in a row)."""
        if self.target.needs_barriers and not (self.out and isinstance(self.out[-1], Barrier)):
            self.out.append(Barrier())

    @contextmanager
    def into(self, stmts: list[Stmt], loop: bool = False) -> Iterator[list[Stmt]]:
        """Emit into `stmts` (a region body).  Copies staged inside stay inside.  A loop body
        does not use copies staged before it: a later staging in the body may reuse their
        memory, which the next iteration would then read."""
        assert self.group is None
        saved_out, saved_staged, saved_epoch = self.out, dict(self.staged), self.epoch
        self.out = stmts
        if loop:
            self.staged = {}
        try:
            yield stmts
        finally:
            self.close()
            self.out = saved_out
            self.staged = saved_staged if self.epoch == saved_epoch else {}

    # ------------------------------------------------------------------------------ groups

    def open_group(self, n: int, shape: tuple[int, ...] | None = None) -> Group:
        """The open group of numel n (closing another one first).  A new one-thread group
        given the `shape` of its first op loops over each of its dims (see `close`)."""
        if self.group is not None and self.group.n != n:
            self.close()
        if self.group is None:
            k = self.var("k", int32)
            e: Expr = k  # with one thread, slot k holds element k
            if not self.target.one_thread_per_program:
                e = self.var("e", int32)
            self.group = g = Group(n, self.slots(n), k, e, width=self.vector.width(n))
            dims = ix.nest_dims(shape) if shape is not None and self.target.tile_loops else ()
            if len(dims) > 1:
                g.dims = dims
                g.loops = tuple(self.var(f"k{d}_", int32) for d in range(len(dims)))
                ix.nest(k, dims, g.loops)
        return self.group

    def close(self) -> None:
        """Emit the open group's element loop, storing the values needed elsewhere."""
        g, self.group = self.group, None
        if g is None:
            return
        for v in g.values:
            if v.id not in self.regs and self._needs_array(v, g):
                arr = self.array(v.name or "r", register_type(v.type), g.s)
                self.regs[v.id] = arr
                g.body.append(ArrayStore(arr, g.k, self.cur[v.id]))
        self.cur.clear()
        if not g.body and not (g.vec is not None and (g.vec.pre or g.vec.post)):
            # (a vector group whose loads all became `AsyncCopy`s has its work in `pre`)
            return
        body = g.body
        if g.n % self.T:
            body = [If(Binary("lt", g.e, ix.c32(g.n)), body)]
        if g.e is not g.k:
            if _mentions(body, g.e):
                e = element_index(self.tid, g.k, self.T, g.width)
                body = [Assign(g.e, e)] + body
            else:
                self.variables.remove(g.e)
        if g.vec is None and g.loops:
            # Nested loops, innermost = last dim; k (= e) is rebuilt from them if read.
            if _mentions(body, g.k):
                body = [Assign(g.k, ix.nested_flat(g.loops, g.dims))] + body
            else:
                self.variables.remove(g.k)
            steps = [1] * (len(g.dims) - 1) + [g.step]
            for var, d, st in reversed(list(zip(g.loops, g.dims, steps))):
                body = [For(var, ix.c32(0), ix.c32(d), ix.c32(st), body)]
            self.out.extend(body)
            return
        if g.vec is None:
            self.out.append(For(g.k, ix.c32(0), ix.c32(g.s), ix.c32(g.step), body))
            return
        # Vector accesses: a loop over runs of `width` slots around the lane loop.
        v = g.vec
        if _mentions(body, g.k):
            body = [Assign(g.k, ix.add(v.kv, v.i))] + body
        else:
            self.variables.remove(g.k)
        run = [Assign(v.e0, element_index(self.tid, v.kv, self.T, g.width))] + v.pre
        run += [For(v.i, ix.c32(0), ix.c32(g.width), ix.c32(1), body)] + v.post
        self.out.append(For(v.kv, ix.c32(0), ix.c32(g.s), ix.c32(g.width), run))

    def _needs_array(self, v: tile.Value, g: Group) -> bool:
        served = g.ops | self.copied.get(v.id, set())  # readers that have what they need
        outside = [u for u in self.users.get(v.id, []) if id(u) not in served]
        if not outside:
            return False
        # Every other reader goes through `read`/`read_at`, which recompute a remat_ok value,
        # except reductions and dots outside the group (one fused into it, as
        # reduce.py's `_fused_partial_sum`, has already read it).
        return not self.remat_ok(v) or any(id(u) not in served
                                           for u in self.viewers.get(v.id, ()))

    def _needs_storage(self, v: tile.Value) -> bool:
        """Whether some user must address v in memory: a reduction input, a dot operand."""
        return v.id in self.viewed

    def view(self, v: tile.Value) -> tuple[tile.Value, CoordMap]:
        """(base, coordinate map): element `coords` of `v` is element `cmap(coords)` of `base`,
        looking through aliases and gathers of stored values, so that a reduction or dot of
        `trans(x)` reads x's storage instead of materialising the transpose."""
        c = self.canon(v)
        if c.shape == v.shape:
            conv: CoordMap = _same_coords
        else:  # through a reshape: same flat index
            def conv(cs: list[Expr]) -> list[Expr]:
                return ix.unflatten(ix.flatten(cs, v.shape), c.shape)
        op = c.owner
        if (isinstance(op, tile.Op) and op.kind in GATHERS
                and not op.operands[0].type.is_scalar and self._viewed_in_storage(op.operands[0])):
            base, inner = self.view(op.operands[0])
            return base, lambda cs: inner(_gather_coords(op, conv(cs)))
        return c, conv

    def _viewed_in_storage(self, x: tile.Value) -> bool:
        """Whether a view reads `x`'s own storage (a gather of `x` is then never computed).  A
        value that can be recomputed at any index usually has none, and is recomputed at the
        gathered coordinates instead; but on one thread a recomputation that reads memory (the
        unmasked `k` of `dot(q, trans(k))`) would load it element by element at transposed
        addresses: such a value is stored in its own order once (`addressable`) and read
        through the view."""
        ops = self._remat_ops(x)
        return ops is None or (self.target.one_thread_per_program
                               and not self._remat_loads.isdisjoint(ops))

    def at(self, v: tile.Value, coords: list[Expr]) -> tuple[tile.Value, Expr]:
        """(base, flat index in base) of element `coords` of `v` (see `view`)."""
        base, cmap = self.view(v)
        return base, ix.flatten(cmap(coords), base.shape)

    def in_group(self, v: tile.Value) -> bool:
        return self.canon(v).id in self.cur

    def _other_nest(self, shape: tuple[int, ...], op: tile.Op) -> bool:
        """Whether `op` (of `shape`) starts a group of its own although the open one has its
        numel: on a `tile_loops` target, when the open group loops over other dims and `op`
        reads nothing it computes.  Fused, the second shape's coordinates come from the
        first's loop variables by shifts and masks (the matmul's A [256, 64] and B [64, 256]
        tile loads: B's row `k >> 8`, column `k & 255`), which neither the mask versioning
        nor the prefetch hints can follow: its copy stayed masked, unprefetched, 15% of a
        2048^3 matmul on one core.  Apart, each is a nest of its own rows."""
        g = self.group
        if g is None or not self.target.tile_loops or g.n != prod(shape):
            return False
        dims = ix.nest_dims(shape)
        if (dims if len(dims) > 1 else ()) == g.dims:
            return False
        return not any(self.in_group(o) for o in op.operands)

    def _only_viewed(self, v: tile.Value) -> bool:
        """Whether every user of `v` reads it through `view` (so it needs no code)."""
        users = self.users.get(v.id, [])
        return bool(users) and all(any(self.canon(o) is v for o in self._addressed(u))
                                   and v not in [self.canon(o) for o in u.operands
                                                 if o not in self._addressed(u)]
                                   for u in users)

    def _addressed(self, op: tile.Op) -> list[tile.Value]:
        """The operands `op` reads at arbitrary flat indices (`addressed_operands`), except
        those a dot copies into panels of its own and may recompute (`_packed`): its packing
        loops read them element by element, as any fused reader does."""
        out = addressed_operands(op)
        packed = self._packed(op)
        return [o for o in out if o not in packed or not self.remat_ok(o)]

    def _packed(self, op: tile.Op) -> list[tile.Value]:
        """The operands of `op` its dot strategy copies itself (dot.py `packed_operands`)."""
        return packed_operands(self.target, op, self.canon)

    def bind(self, v: tile.Value, expr: Expr, g: Group) -> None:
        """Make `expr` the value of tile `v` in group `g` (a temp unless trivially cheap)."""
        if not isinstance(expr, (Const, Var, Special, Index)):
            t = self.var(v.name or "t", register_type(v.type))
            g.body.append(Assign(t, expr))
            expr = t
        self.cur[v.id] = expr
        g.values.append(v)

    # ------------------------------------------------------------------------------ values

    def canon(self, v: tile.Value) -> tile.Value:
        """The value `v` aliases (see ALIASES), or `v`."""
        return self.alias.get(v.id, v)

    def scalar(self, v: tile.Value) -> Expr:
        return self.scalars[self.canon(v).id]

    def read(self, v: tile.Value) -> Expr:
        """Value of `v` at the open group's current element."""
        v = self.canon(v)
        if v.type.is_scalar:
            return self.scalars[v.id]
        if v.id in self.cur:
            return self.cur[v.id]
        g = self.group
        if v.id in self.regs:
            return Index(self.regs[v.id], g.k)
        if self.remat_ok(v):
            # Recompute it here, once per group: its operands are read the same way.
            op: tile.Op = v.owner
            if op.kind in GATHERS:
                expr = self.read_at(op.operands[0], self.gather_index(op, g.e))
            else:
                expr = self._recompute(op, [self.read(o) for o in op.operands], g.e)
            if not isinstance(expr, (Const, Var, Special, Index)):
                t = self.var(v.name or "t", register_type(v.type))
                g.body.append(Assign(t, expr))
                expr = t
            self.cur[v.id] = expr
            return expr
        raise AssertionError(f"tile value {v!r} has no storage")

    def read_at(self, v: tile.Value, idx: Expr) -> Expr:
        """Value of `v` at flat index `idx` (any thread's element)."""
        v = self.canon(v)
        if v.type.is_scalar:
            return self.scalars[v.id]
        if self.target.registers_addressable and v.id in self.regs:
            self.group.addressed.add(self.regs[v.id].name)
            return Index(self.regs[v.id], idx)
        if v.id in self.staged:
            return Index(self.staged[v.id], idx)
        assert self.remat_ok(v), v
        return self.eval_at(v, idx)

    def remat_ok(self, v: tile.Value) -> bool:
        return self._remat_size(v) is not None

    def _remat_size(self, v: tile.Value) -> int | None:
        ops = self._remat_ops(v)
        return None if ops is None else len(ops)

    def _remat_ops(self, v: tile.Value) -> frozenset[int] | None:
        """The ops (ids) recomputed to rematerialise `v`, or None if it is not remat_ok.  A
        subexpression read twice (the mask of a load and of its `where`) is computed once per
        group, so the limit counts distinct ops."""
        v = self.canon(v)
        if v.type.is_scalar:
            return frozenset()
        if v.id in self._remat:
            return self._remat[v.id]
        ops: frozenset[int] | None = None
        op = v.owner
        if isinstance(op, tile.Op) and (op.kind in REMAT_KINDS
                                        or op.kind == "load" and self._load_remat_ok(op)):
            parts = [self._remat_ops(o) for o in op.operands]
            if None not in parts:
                ops = frozenset({id(op)}).union(*parts)
                if op.kind == "load":
                    self._remat_loads.add(id(op))
                big = len(ops) > REMAT_LIMIT and v.id not in self._read_once
                if big or (op.kind in COSTLY and not self._remat_loads.isdisjoint(ops)):
                    ops = None
        self._remat[v.id] = ops
        return ops

    def _load_remat_ok(self, op: tile.Op) -> bool:
        """Whether a tile load may be re-executed wherever it is read instead of being kept in
        a register array (one thread only).  On the CPU that array (a whole row: 16 KiB for
        4096 floats) costs a store and a reload per element and pushes the row's other
        operands out of L1, where re-reading the source hits the cache.

        Safe when memory cannot change between the load and its last reader: every op that
        reads it, directly or through pure element-wise ops, sits in the load's own block
        (not in a nested region, not its terminator: a yield's copy may run after scalar
        carries are updated), and no op strictly between the load and the last of them stores
        or contains a store.  A store in the last reader's own group is ordered as within a
        group (per element, load before store), as if the load had been written there."""
        if not self.target.registers_addressable:
            return False
        pos = self._pos.get(id(op))
        if pos is None:
            return False
        block, i = pos
        last, seen, todo = i, set(), [op.result]
        while todo:
            v = self.canon(todo.pop())
            if v.id in seen:
                continue
            seen.add(v.id)
            for u in self.users.get(v.id, []):
                p = self._pos.get(id(u))
                if p is None or p[0] is not block or u.kind in tile.TERMINATORS:
                    return False
                last = max(last, p[1])
                if u.kind in REMAT_KINDS or u.kind in ALIASES:
                    todo.extend(u.results)
        return not any(_has_effects(o) for o in block.ops[i + 1:last])

    def _recompute(self, op: tile.Op, xs: list[Expr], idx: Expr) -> Expr:
        """A remat_ok op's value from its operands' values `xs` at flat index `idx`."""
        if op.kind == "load":
            return mem.load(xs[0], *_mask_other(xs), op.loc)
        return ELEMENTWISE[op.kind](op, xs, idx)

    def eval_at(self, v: tile.Value, idx: Expr) -> Expr:
        """Recompute a `remat_ok` value at flat index `idx`."""
        v = self.canon(v)
        if v.type.is_scalar:
            return self.scalars[v.id]
        op: tile.Op = v.owner
        src = op.operands[0] if op.operands else None
        if op.kind in GATHERS:
            return self.eval_at(src, self.gather_index(op, idx))
        return self._recompute(op, [self.eval_at(o, idx) for o in op.operands], idx)

    @staticmethod
    def gather_index(op: tile.Op, idx: Expr) -> Expr:
        src = op.operands[0].shape
        if op.kind == "broadcast":
            return ix.broadcast_source(idx, src, op.results[0].shape)
        if op.kind == "slice":
            return slice_source(op, idx)
        return ix.trans_source(idx, src, tuple(op.attrs["perm"]))

    def addressable(self, *values: tile.Value) -> list[Array]:
        """Arrays holding each value indexed by flat element (closes the open group if needed).
        Where registers are not addressable, the values are staged to shared memory together,
        between one pair of barriers."""
        values = tuple(self.canon(v) for v in values)
        if self.target.registers_addressable:
            if any(v.id not in self.regs for v in values):
                self.close()
                for v in dict.fromkeys(values):
                    if v.id not in self.regs and self.remat_ok(v):
                        self._materialise(v)
            return [self.regs[v.id] for v in values]
        if any(v.id not in self.staged for v in values):
            self.close()
            self.new_epoch()  # all values are staged in it, none reused from an older one
            self.barrier()  # earlier readers of shared memory (a previous iteration) are done
            for v in dict.fromkeys(values):
                n = v.type.numel
                sh = self.shared((v.name or "s") + "_sh", register_type(v.type), n)
                g = self.open_group(n)
                # (`read`: a register array at the slot, or a scalar that a one-element
                # tile aliases, as `reshape(reduce(...))` of keep_dims)
                g.body.append(ArrayStore(sh, g.e, self.read(v)))
                self.staged[v.id] = sh
            self.close()
            self.barrier()
        return [self.staged[v.id] for v in values]

    def stage(self, values: list[tile.Value], positions: list[Callable[[Expr], Expr]],
              dtypes: list[Type], sizes: list[int], reader: tile.Op | None = None,
              rows: list[int] | None = None) -> list[Array]:
        """Shared copies of tiles in layouts of their own: element e of values[i] at
        positions[i](e) of a fresh array of sizes[i] elements of dtypes[i] (a 16-bit type is
        stored converted), all written in a new epoch between one pair of barriers.

        When every value is computed in the open group (the loads of a dot's operands), the
        copies are written by that group itself, after a barrier placed before its loop: the
        values then need no register array for `reader`, the op reading the copies
        (`copied`).  Not when the group reads shared memory: an array of an older
        epoch it reads may be the memory the copies reuse.  There, a value that is a 16-byte
        vector load read by nothing but `reader`, zero where masked, whose positions run on
        for `rows[i]` elements (a multiple of the run), is copied straight from global to
        shared memory (`AsyncCopy`, on a target with "cp_async") instead of through
        registers."""
        g = self.group
        vals = [self.canon(v) for v in values]
        inline = [g is not None and self.target.needs_barriers and reader is not None
                  and v.id in self.cur and v.type.numel == g.n for v in vals]
        if any(inline) and not _reads_shared(g.body):
            # The values of the open group are copied by it, the others (stored by earlier
            # groups) by a group of their own after it: one epoch, one pair of barriers.
            self.new_epoch()
            self.barrier()  # before the group's loop: earlier readers of shared memory are done
            out: list[Array] = []
            waits = False
            for j, (v, pos, t, n) in enumerate(zip(vals, positions, dtypes, sizes)):
                sh = self.shared((v.name or "s") + "_sh", t, n)
                out.append(sh)
                if not inline[j]:
                    continue
                copy = self._async_copy(v, sh, pos, rows[j] if rows else 0, reader)
                if copy is None:
                    g.body.append(ArrayStore(sh, pos(g.e), self.cur[v.id]))
                waits = waits or copy is not None
                self.copied.setdefault(v.id, set()).add(id(reader))
            self.close()
            for j, (v, pos) in enumerate(zip(vals, positions)):
                if not inline[j]:
                    g2 = self.open_group(v.type.numel)
                    g2.body.append(ArrayStore(out[j], pos(g2.e), self.read(v)))
                    self.close()
            if waits:
                self.emit(AsyncWait())
            self.barrier()
            return out
        self.close()
        self.new_epoch()
        self.barrier()  # earlier readers of shared memory (a previous iteration) are done
        out = []
        for v, pos, t, n in zip(values, positions, dtypes, sizes):
            v = self.canon(v)
            sh = self.shared((v.name or "s") + "_sh", t, n)
            g = self.open_group(v.type.numel)
            g.body.append(ArrayStore(sh, pos(g.e), self.read(v)))
            self.close()
            out.append(sh)
        self.barrier()
        return out

    def _async_copy(self, v: tile.Value, sh: Array, pos: Callable[[Expr], Expr], row: int,
                    reader: tile.Op) -> AsyncCopy | None:
        """Turn the open group's vector load of `v` into an `AsyncCopy` to `sh` (see
        `stage`), or None when it does not qualify."""
        g = self.group
        if not self.target.has("cp_async") or g.vec is None or v.id not in g.vec.loads:
            return None
        vload, op = g.vec.loads[v.id]
        if (g.width * v.type.elem.itemsize != 16 or not row or row % g.width
                or self.users.get(v.id) != [reader] or not _zero_other(op)
                or sh.dtype != v.type.elem):
            return None
        copy = AsyncCopy(sh, pos(g.vec.e0), vload.ptr, g.width, vload.mask, loc=vload.loc)
        g.vec.pre[g.vec.pre.index(vload)] = copy
        return copy

    def _materialise(self, v: tile.Value) -> None:
        """Store a recomputed value (cheap index math, or a re-loadable tile) in a register array:
        a dot or a reduction is about to address it in memory (one thread)."""
        g = self.open_group(v.type.numel)
        x = self.read(v)
        arr = self.array(v.name or "r", register_type(v.type), g.s)
        g.body.append(ArrayStore(arr, g.k, x))
        self.regs[v.id] = arr
        self.close()

    def note_addressed(self, arrays: list[Array]) -> None:
        """Record that the open group reads `arrays` at other slots than its own."""
        self.group.addressed.update(a.name for a in arrays if a.space == "reg")

    # --------------------------------------------------------------------------------- ops

    def lower_block(self, block: tile.Block) -> tile.Op | None:
        """Lower a block's ops into `self.out`; returns its terminator (not lowered), leaving
        the last group open so that yields can be written from it."""
        for i, op in enumerate(block.ops):
            if op.kind in tile.TERMINATORS:
                return op
            self.op = op
            if (not self.target.registers_addressable and op.kind in FUSABLE
                    and not self._is_scalar(op)):
                n = _numel(op)
                if self.group is None or self.group.n != n:
                    self._prestage(block.ops[i:], n)
            self.lower_op(op)
        return None

    def _prestage(self, ops: list[tile.Op], n: int) -> None:
        """Before a group opens, stage the gather sources of the ops that will join it
        together, so that the group is not split by a staging."""
        srcs: list[tile.Value] = []
        inside: set[int] = set()
        for op in ops:
            if op.kind not in FUSABLE or op.kind in tile.SIDE_EFFECTS and self._is_scalar(op):
                break
            if op.kind in ALIASES:
                continue
            if not self._is_scalar(op):
                if _numel(op) != n:
                    break
                src = self.canon(op.operands[0]) if op.operands else None
                if (op.kind in GATHERS and not src.type.is_scalar and src.id not in inside
                        and not self.remat_ok(src) and not self._only_viewed(op.result)):
                    srcs.append(src)
            inside.update(r.id for r in op.results)
        if srcs:
            self.addressable(*srcs)

    def lower_op(self, op: tile.Op) -> None:
        k = op.kind
        if op.results and op.results[0].id in self.alias:
            return
        if k in NEEDS_CAP and not self.target.has(NEEDS_CAP[k][0]):
            raise CompilationError(f"{k} is not available on the {self.target.backend} backend "
                                   f"(it is on {NEEDS_CAP[k][1]})", op.loc, self.fn.name)
        if k in _SPECIAL:
            _SPECIAL[k](self, op)
        elif self._is_scalar(op):
            self.lower_scalar(op)
        elif k in FUSABLE:
            self.lower_fused(op)
        else:
            raise CompilationError(f"the tile lowering does not know op '{k}'", op.loc,
                                   self.fn.name)

    @staticmethod
    def _is_scalar(op: tile.Op) -> bool:
        if op.results:
            return all(r.type.is_scalar for r in op.results)
        return op.operands[0].type.is_scalar

    def result_var(self, v: tile.Value, expr: Expr) -> None:
        if isinstance(expr, (Const, Var, Special)):
            self.scalars[v.id] = expr
        else:
            var = self.var(v.name or "s", register_type(v.type))
            self.emit(Assign(var, expr))
            self.scalars[v.id] = var

    def lower_scalar(self, op: tile.Op) -> None:
        k = op.kind
        if k in tile.SIDE_EFFECTS or (k == "load" and self.group and self.group.effects):
            self.close()  # keep memory effects in program order
        xs = [self.scalar(o) for o in op.operands]
        if k == "program_id":
            self.scalars[op.result.id] = Special("pid", op.attrs["axis"])
        elif k == "num_programs":
            self.scalars[op.result.id] = Special("nprog", op.attrs["axis"])
        elif k == "load":
            self.result_var(op.result, mem.load(xs[0], *_mask_other(xs), op.loc))
        elif k == "store":
            self.emit(self.once(mem.store(xs[0], xs[1], xs[2] if len(xs) > 2 else None, op.loc)))
        elif k in tile.ATOMIC_OPS:
            self._scalar_atomic(op, xs)
        else:
            self.result_var(op.result, ELEMENTWISE[k](op, xs, ix.c32(0)))

    def once(self, stmt: Stmt) -> Stmt:
        """A scalar side effect runs once per program: in thread 0 only."""
        if self.target.one_thread_per_program:
            return stmt
        return If(Binary("eq", self.tid, ix.c32(0)), [stmt])

    def _scalar_atomic(self, op: tile.Op, xs: list[Expr]) -> None:
        """Thread 0 performs a scalar atomic once per program.  With several threads, the
        stores the other threads made before it are complete first (a barrier) when it
        releases, and their later accesses wait for it (a barrier) when it acquires or its old
        value is used, which reaches every thread through shared memory."""
        used = bool(self.users.get(op.result.id))
        res = self.var(op.result.name or "old", register_type(op.result.type)) if used else None
        sem = op.attrs.get("sem", "acq_rel")
        # the old value reaches the other threads of the program through shared memory
        slot = (self.shared("old_sh", res.dtype, 1)
                if used and not self.target.one_thread_per_program else None)
        if slot is not None or sem in ("release", "acq_rel"):
            self.barrier()
        for stmt in _atomic_stmts(op, xs, res):
            self.emit(self.once(stmt))
        if slot is not None:
            self.emit(self.once(ArrayStore(slot, ix.c32(0), res)))
        if slot is not None or sem in ("acquire", "acq_rel"):
            self.barrier()
        if slot is not None:
            self.emit(Assign(res, Index(slot, ix.c32(0))))
        if res is not None:
            self.scalars[op.result.id] = res

    def lower_fused(self, op: tile.Op) -> None:
        k = op.kind
        shape = op.results[0].shape if op.results else op.operands[0].shape
        src = self.canon(op.operands[0]) if op.operands else None
        if op.results and self.remat_ok(op.result) and not self._needs_storage(op.result):
            return  # computed lazily where it is read (`read`), so no dead code is emitted
        if (k in GATHERS and self._only_viewed(op.result)
                and self.view(op.result)[0] is not self.canon(op.result)):
            # Read by reductions/dots through its source (`view`).  A gather of a recomputable
            # source is not looked through (`view`), so it is lowered and stored here.
            return
        if k in GATHERS and not src.type.is_scalar and not self.remat_ok(src):
            self.addressable(src)  # stages it to shared memory if registers are not addressable
        if (k in tile.SIDE_EFFECTS or k == "load") and self.group is not None \
                and self.group.vec is not None and self.group.vec.post:
            self.close()  # deferred vector stores come before the next memory access
        sem = op.attrs.get("sem") if k in tile.ATOMIC_OPS else None
        if sem in ("release", "acq_rel"):
            # A group runs its ops element after element: every earlier access of this
            # thread, of every element, must come before the first of its atomics.
            self.close()
        if self._other_nest(shape, op):
            self.close()
        g = self.open_group(prod(shape), shape)
        g.ops.add(id(op))
        if k in GATHERS:
            self.bind(op.result, self.read_at(src, self.gather_index(op, g.e)), g)
            return
        if k in ("load", "store") and self.vector.plan(self, op):
            if k == "load":
                self.bind(op.result, self.vector.load(self, op), g)
            else:
                g.body.append(self.vector.store(self, op, self.read(op.operands[1])))
                g.effects = True
            return
        xs = [self.read(o) for o in op.operands]
        if k == "load":
            self.bind(op.result, mem.load(xs[0], *_mask_other(xs), op.loc), g)
        elif k == "store":
            g.body.append(mem.store(xs[0], xs[1], xs[2] if len(xs) > 2 else None, op.loc))
            g.effects = True
        elif k in tile.ATOMIC_OPS:
            res = None
            if self.users.get(op.result.id):
                res = self.var(op.result.name or "old", register_type(op.result.type))
            g.body.extend(_atomic_stmts(op, xs, res))
            g.effects = True
            if res is not None:
                self.cur[op.result.id] = res
                g.values.append(op.result)
            if sem in ("acquire", "acq_rel"):
                self.close()  # and every later access after the last of them
        else:
            self.bind(op.result, ELEMENTWISE[k](op, xs, g.e), g)

    # ------------------------------------------------------------------------ control flow

    def storage(self, v: tile.Value, hint: str) -> Var | Array:
        """Fresh mutable storage for values of v's type (a Var, or a register array)."""
        t = register_type(v.type)
        if v.type.is_scalar:
            return self.var(hint, t)
        return self.array(hint, t, self.slots(v.type.numel))

    def bind_storage(self, v: tile.Value, st: Var | Array) -> None:
        if isinstance(st, Var):
            self.scalars[v.id] = st
        else:
            self.regs[v.id] = st

    def copy(self, dsts: list[Var | Array], srcs: list[tile.Value]) -> None:
        """dst_i = src_i for all i at once (all sources read before any write: swaps work)."""
        srcs = [self.canon(s) for s in srcs]
        pairs = [(d, s) for d, s in zip(dsts, srcs)
                 if not (isinstance(d, Var) and self.scalars.get(s.id) is d)
                 and not (isinstance(d, Array) and self.regs.get(s.id) is d)]
        scalar_pairs = [(d, s) for d, s in pairs if isinstance(d, Var)]
        # The open group may read a destination variable: its loop must come first, since
        # scalar statements are emitted before it.
        self.close()
        temps = []
        for d, s in scalar_pairs:
            t = self.var(d.name + "_next", d.dtype) if len(scalar_pairs) > 1 else None
            if t is not None:
                self.emit(Assign(t, self.scalar(s)))
            temps.append(t)
        for (d, s), t in zip(scalar_pairs, temps):
            self.emit(Assign(d, t if t is not None else self.scalar(s)))
        by_numel: dict[int, list] = {}
        for d, s in pairs:
            if isinstance(d, Array):
                by_numel.setdefault(s.type.numel, []).append((d, s))
        for n, group_pairs in by_numel.items():
            g = self.open_group(n)
            reads: list[Expr] = []
            for d, s in group_pairs:
                x = self.read(s)
                if len(group_pairs) > 1:  # a slot of one array may be the source of another
                    t = self.var(d.name + "_next", d.dtype)
                    g.body.append(Assign(t, x))
                    x = t
                reads.append(x)
            for (d, s), x in zip(group_pairs, reads):
                g.body.append(ArrayStore(d, g.k, x))
            self.close()

    def yield_to(self, dsts: list[Var | Array], srcs: list[tile.Value]) -> None:
        """Copy yielded values to their destinations.  A tile computed in the open group is
        written in place at the end of the group's body when that cannot be observed: the
        group reads the destination only at its own slot and no other yield reads it."""
        g = self.group
        srcs = [self.canon(s) for s in srcs]
        for d, s in zip(dsts, srcs):
            # Only a value this yield alone reads: `regs` then makes d its storage, which
            # another branch or iteration overwrites (a value also read after the region, say
            # an index tile yielded as the placeholder of a returned branch, would change).
            users = self.users.get(s.id, [])
            if (g is not None and isinstance(d, Array) and s.id in self.cur
                    and s.id not in self.regs and s.type.numel == g.n
                    and d.name not in g.addressed
                    and len(users) == 1 and users[0].kind in tile.TERMINATORS
                    and not any(self.regs.get(o.id) is d for o in srcs if o is not s)):
                g.body.append(ArrayStore(d, g.k, self.cur[s.id]))
                self.regs[s.id] = d
        self.copy(dsts, srcs)

    def lower_region(self, block: tile.Block, args: list[Var | Array], finish=None,
                     loop: bool = False, block_args: list[tile.Value] | None = None
                     ) -> tuple[list[Stmt], tile.Op | None]:
        """Lower a region with its block args (or those of `block_args`, where others have
        no storage of this layout) bound to `args`; `finish(terminator)` runs at its end,
        before the last group is closed."""
        for a, st in zip(block.args if block_args is None else block_args, args):
            self.bind_storage(a, st)
        stmts: list[Stmt] = []
        with self.into(stmts, loop):
            term = self.lower_block(block)
            if finish is not None:
                finish(term)
        return stmts, term


def _zero_other(op: tile.Op) -> bool:
    """Whether a load gives zero where it is masked (or has no mask)."""
    if len(op.operands) < 2:
        return True
    if len(op.operands) < 3:
        return False  # masked without `other`: undefined there, not zero
    o = op.operands[2]
    while isinstance(o.owner, tile.Op) and o.owner.kind in ("splat", "broadcast", "cast"):
        o = o.owner.operands[0]
    return (isinstance(o.owner, tile.Op) and o.owner.kind == "const"
            and o.owner.attrs.get("value") == 0)


def _reads_shared(node: object) -> bool:
    """Whether statements or expressions read a shared array (walked by dataclass fields)."""
    if isinstance(node, (Index, PairBits)) and node.array.space == "shared":
        return True
    if isinstance(node, (list, tuple)):
        return any(_reads_shared(x) for x in node)
    if isinstance(node, (Array, Var, Const, Special)):
        return False
    fields_ = getattr(node, "__dataclass_fields__", None)
    return fields_ is not None and any(_reads_shared(getattr(node, f)) for f in fields_)


def _same_coords(cs: list[Expr]) -> list[Expr]:
    return cs


def _gather_coords(op: tile.Op, coords: list[Expr]) -> list[Expr]:
    """Source coordinates of element `coords` of a broadcast, trans or slice."""
    src = op.operands[0].shape
    if op.kind == "slice":
        return slice_coords(op, coords)
    if op.kind == "broadcast":
        return [c if s != 1 else ix.c32(0) for c, s in zip(coords, src)]
    out: list[Expr] = [ix.c32(0)] * len(src)
    for d, p in enumerate(op.attrs["perm"]):
        out[p] = coords[d]
    return out


def _mentions(node, var: Var) -> bool:
    """Whether a Loop IR statement list or expression reads `var`."""
    if node is var:
        return True
    if isinstance(node, list):
        return any(_mentions(x, var) for x in node)
    if isinstance(node, (Expr, Stmt)):
        return any(_mentions(getattr(node, f.name), var) for f in fields(node))
    return False


def _has_effects(op: tile.Op) -> bool:
    """Whether an op is, or contains in its regions, a store or an atomic."""
    return any(o.kind in tile.SIDE_EFFECTS for o in op.walk())


def _numel(op: tile.Op) -> int:
    return (op.results[0] if op.results else op.operands[0]).type.numel


def _mask_other(xs: list[Expr]) -> tuple[Expr | None, Expr | None]:
    return (xs[1], xs[2]) if len(xs) > 2 else (xs[1] if len(xs) > 1 else None, None)


def _lower_dot(L: Lowerer, op: tile.Op) -> None:
    dot_strategy(L.target)(L, op)


def _lower_reduce(L: Lowerer, op: tile.Op) -> None:
    """Warp shuffles where they apply (reduce_warp.py), else the generic strategy."""
    if not warp_reduce(L, op, accumulator_types(op)):
        lower_reduce(L, op)


def _lower_sparse_dot(L: Lowerer, op: tile.Op) -> None:
    sparse_dot_strategy(L.target)(L, op)


def _atomic_stmts(op: tile.Op, xs: list[Expr], res: Var | None) -> list[Stmt]:
    """The Loop IR of an `atomic_rmw`/`atomic_cas` op with operand values `xs`.  A masked-off
    lane's old value is 0, as in the interpreter."""
    sem, scope = op.attrs.get("sem", "acq_rel"), op.attrs.get("scope", "gpu")
    if op.kind == "atomic_cas":
        mask = xs[3] if len(xs) > 3 else None
        stmt: Stmt = AtomicCAS(xs[0], xs[1], xs[2], mask, res, op.loc, sem, scope)
    else:
        mask = xs[2] if len(xs) > 2 else None
        stmt = AtomicRMW(op.attrs["op"], xs[0], xs[1], mask, res, op.loc, sem, scope)
    if mask is None or res is None:
        return [stmt]
    return [Assign(res, const(0, op.result.type.elem)), stmt]


# Non-fusable ops -> their lowering.
_SPECIAL = {
    "for": lower_for, "while": lower_while, "if": lower_if,
    "reduce": _lower_reduce, "scan": lower_scan, "dot": _lower_dot, **DEBUG_LOWERINGS,
    "sparse_dot": _lower_sparse_dot,  # mma.sp, the CPU micro-kernel or generic (dot.py)
    "prefetch": lower_prefetch,  # kd.prefetch: hints, one per cache line (prefetch.py)
    "gather": lower_gather, "histogram": lower_histogram,
    "reshape": lower_unsplat,  # the only reshape not an alias: a one-element tile to a scalar
}


def lower(fn: tile.Function, target: Target) -> Kernel:
    """Lower a Tile IR function to the Loop IR kernel run by each program instance."""
    drop_breakpoints(fn, target)
    check_target(fn, target)
    L = Lowerer(fn, target)
    params = []
    for p in fn.runtime_params:
        params.append(KParam(p.name, p.type.elem))
        L.scalars[p.value.id] = Var(p.name, p.type.elem)
    L.lower_block(fn.body)
    L.close()
    # checked mode's site table (kdsl/passes/checks.py) travels with the kernel to the runtime
    attrs = {"checks": fn.attrs["checks"]} if "checks" in fn.attrs else {}
    kernel = Kernel(fn.name, params, L.out, L.variables, L.arrays, L.T, attrs,
                    options=fn.options, stored_params=frozenset(stored_params(fn)),
                    shared_bytes=L.shared_bytes, raw_pointers=raw_pointer_loc(fn),
                    warp_size=target.warp_size)
    kernel = hoist_barriers(legalize(kernel, target))
    if target.has("cp_async"):
        kernel = pipeline_copies(kernel, target.shared_bytes)
    if target.one_thread_per_program:
        kernel = version_masks(kernel, max(4, target.vector_bits // 32))
    kernel.intrinsics = {n: INTRINSIC_SIMULATIONS[n] for n in _intrinsics_used(kernel.body)}
    # A bad lowering is an error naming its node here, not a KeyError in an emitter; and
    # what the backend gets has only the ops it lists (a fraction of a millisecond).
    return verify(kernel, target.ops)


#: how the Loop IR simulator runs each intrinsic the lowering may emit (dot_mma.py's,
#: dot_sparse.py's and reduce_warp.py's)
INTRINSIC_SIMULATIONS: dict[str, IntrinsicSim] = {**MMA_SIMULATIONS, **SPARSE_SIMULATIONS,
                                                  **WARP_SIMULATIONS}


def _intrinsics_used(stmts: list[Stmt]) -> set[str]:
    names: set[str] = set()
    for s in stmts:
        if isinstance(s, Intrinsic):
            names.add(s.name)
        for f in ("body", "then", "orelse", "cond_body"):
            names |= _intrinsics_used(getattr(s, f, None) or [])
    return names


__all__ = ["FUSABLE", "GATHERS", "Group", "Lowerer", "lower"]
