"""Vectorised global loads and stores for the shared lowering (targets with "vector_loads").

Layout.  With T threads and width V (`layout_width`), flat element `e` of a tile of N
elements lives in thread `(e // V) % T`, register slot `(e // (V*T)) * V + e % V`: each thread
owns runs of V consecutive elements along the fastest dimension.  V is chosen per numel
(`Vectorizer.width`): the run that makes each thread's accesses 16 bytes wide, i.e.
`VECTOR_BYTES // itemsize` for the narrowest type among the tile loads and stores of that numel
that could be vector accesses at that width (8 for float16/bfloat16, 16 for int8, never less
than `VECTOR_WIDTH` = 4), halved until N is a multiple of V*T, and 1 (the plain `e % T`
layout) when not even 2 fits.  A register array is only ever read by slot in groups of its own
numel, and everything that crosses threads (staging, reductions, dot, mma) addresses tiles by
flat index, so every numel may use its own width.  `element_index(tid, k)` is the ONE map from
(thread, slot) to `e`.

Axis analysis.  `AxisInfo` describes an integer or pointer tile along its last axis, in the
manner of Triton's axis analysis restricted to the fastest dimension:
  contig  values come in runs of `contig` (a power of two) consecutive values (+1 element
          each) starting at last coordinates that are multiples of `contig`;
  const   runs of `const` equal values, aligned likewise;
  div     a power of two dividing the first value of every contig run (every value when
          contig == 1); for pointers, in bytes.
Rules cover iota, const, splat, broadcast, reshape, trans, add, sub, mul, shl, addptr, casts,
comparisons and logic (for masks), `where`, `for` loops (a fixpoint over carried values) and
`if`.  Hints follow Triton: `multiple_of(x, n)` raises `div` (for a tile with contiguous runs,
the promise is about the first value of each run, as in Triton's `offs = multiple_of(offs,
BLOCK)`); `max_contiguous(x, n)` raises `contig`.

Alignment of arguments.  A pointer parameter is assumed aligned to its element size only.  It
is known 16-byte aligned when the kernel says so (`kd.multiple_of(ptr, 16)`) or when the
compiler records it in `fn.options.multiple_of_16` (runtime parameter names whose value, the
address for pointers, is a multiple of 16: the runtime specialisation Triton does on
`ptr % 16 == 0`); integer parameters in that set get divisor 16.

Access.  In a group of width V > 1, a load or store of a tile whose last dim is a multiple of
V becomes one `VecLoad`/`VecStore` of V elements per thread run when its pointer has contig
>= V and div >= min(V * itemsize, 16) bytes, and its mask (if any) is constant over runs of V
(e.g. `offs < n` with n a multiple of V).  A run wider than 16 bytes (float32 in a layout of 8
chosen for a float16 access of the same numel) is emitted as 16-byte pieces, each aligned:
every global access stays at most 128 bits (`ld.global.v4.b32`).  The group then loops over
runs:

    for kv in range(0, S, V):
        e0 = element_index(tid, kv);  VecLoad(ptr(e0), vec, mask(e0))      # hoisted loads
        for i in range(V):  k = kv + i;  e = element_index(tid, k);  body   # reads vec[i]
        VecStore(ptr(e0), out, mask(e0))                                    # deferred stores

A load is vectorised only before any side effect of its group, and a group with deferred
stores is closed before the next memory op, so memory order is kept.  Everything else falls
back to scalar accesses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kdsl.ir import tile
from kdsl.ir.loop import ArrayStore, Assign, Expr, Index, Select, Stmt, VecLoad, VecStore
from kdsl.ir.types import PointerType, int1, int32
from kdsl.target import Target

from . import index as ix
from .context import LoweringContext
from .elementwise import ELEMENTWISE, const, register_type

VECTOR_WIDTH = 4      # fewest elements per thread run (16 bytes of float32)
VECTOR_BYTES = 16     # widest global access (ld.global.v4.b32)
MAX_WIDTH = VECTOR_BYTES  # most elements per run (16 bytes of int8)
BIG = 1 << 20         # "unbounded" run length or divisor
MAX_FIXPOINT = 6      # iterations of a loop's carried-value fixpoint before giving up


def layout_width(target: Target, n: int, want: int = VECTOR_WIDTH) -> int:
    """V for tiles of n elements on `target` (1: the plain layout): the largest power of two
    V <= `want` with n a multiple of V*T."""
    T = target.threads
    if target.one_thread_per_program or not target.has("vector_loads"):
        return 1
    V = want
    while V > 1 and n % (V * T):
        V //= 2
    return max(V, 1)


def element_index(tid: Expr, k: Expr, T: int, V: int) -> Expr:
    """Flat element held by thread `tid` in register slot `k` (the one layout map)."""
    if V == 1:
        return ix.add(tid, ix.mul(k, T))
    return ix.add(ix.add(ix.mul(ix.div(k, V), V * T), ix.mul(tid, V)), ix.mod(k, V))


# ------------------------------------------------------------------------- axis analysis


def pow2(n: int) -> int:
    """Largest power of two dividing n (BIG for 0)."""
    n = abs(int(n))
    return BIG if n == 0 else min(n & -n, BIG)


@dataclass(frozen=True)
class AxisInfo:
    contig: int = 1
    const: int = 1
    div: int = 1

    def div_at(self, c: int, unit: int = 1) -> int:
        """Divisor of the values at last coordinates that are multiples of c (a power of two):
        inside a run, the value at offset j*c from its start is start + j*c (times `unit`
        bytes for pointers)."""
        return self.div if c >= self.contig else min(self.div, c * unit)


BOTTOM = AxisInfo()
SCALAR = AxisInfo(1, BIG, 1)


def _join(a: AxisInfo, b: AxisInfo, unit: int = 1) -> AxisInfo:
    c = min(a.contig, b.contig)
    return AxisInfo(c, min(a.const, b.const), min(a.div_at(c, unit), b.div_at(c, unit)))


def _add(a: AxisInfo, b: AxisInfo, unit_a: int = 1, scale_b: int = 1) -> AxisInfo:
    """a + b (b scaled by `scale_b`: the pointee size when a is a pointer)."""
    c = max(min(a.contig, b.const), min(a.const, b.contig))
    return AxisInfo(c, min(a.const, b.const),
                    min(a.div_at(c, unit_a), b.div_at(c) * scale_b))


def _is_int(t) -> bool:
    return getattr(t, "is_int", False)


def _itemsize(t) -> int:
    return 8 if isinstance(t, PointerType) else max(t.itemsize, 1)


def _cap(info: AxisInfo, shape: tuple[int, ...]) -> AxisInfo:
    """Runs cannot exceed the last dimension."""
    last = pow2(shape[-1]) if shape else BIG
    return AxisInfo(min(info.contig, last), info.const if shape else BIG, min(info.div, BIG))


class AxisAnalysis:
    """AxisInfo of every value of a Tile IR function (see the module docstring)."""

    def __init__(self, fn: tile.Function):
        self.info: dict[int, AxisInfo] = {}
        self.consts: dict[int, int] = {}
        known = set(fn.options.multiple_of_16)
        for p in fn.runtime_params:
            t = p.type.elem
            if isinstance(t, PointerType):
                align = _itemsize(t.pointee)
                self.info[p.value.id] = AxisInfo(1, BIG, 16 if p.name in known else align)
            else:
                self.info[p.value.id] = AxisInfo(1, BIG, 16 if p.name in known else 1)
        self.block(fn.body)

    def get(self, v: tile.Value) -> AxisInfo:
        return self.info.get(v.id, SCALAR if v.type.is_scalar else BOTTOM)

    def block(self, block: tile.Block) -> None:
        for op in block.ops:
            self.op(op)

    def op(self, op: tile.Op) -> None:
        k = op.kind
        if k == "for":
            self._for(op)
            return
        if k == "if":
            for region in op.regions:
                self.block(region)
            ys = [r.terminator.operands for r in op.regions if r.terminator]
            for i, r in enumerate(op.results):
                infos = [self.get(y[i]) for y in ys if i < len(y)]
                out = infos[0] if infos else BOTTOM
                for x in infos[1:]:
                    out = _join(out, x, self._unit(r))
                self.info[r.id] = out
            return
        for region in op.regions:  # while: carried values unknown
            self.block(region)
        if not op.results:
            return
        r = op.results[0]
        rule = _RULES.get(k)
        info = rule(self, op) if rule is not None else BOTTOM
        if r.type.is_scalar:
            info = AxisInfo(1, BIG, info.div)
        self.info[r.id] = _cap(info, r.shape)
        for extra in op.results[1:]:
            self.info[extra.id] = BOTTOM

    @staticmethod
    def _unit(v: tile.Value) -> int:
        t = v.type.elem
        return _itemsize(t.pointee) if isinstance(t, PointerType) else 1

    def _for(self, op: tile.Op) -> None:
        body = op.regions[0]
        lo, _, step = (self.get(x) for x in op.operands[:3])
        self.info[body.args[0].id] = AxisInfo(1, BIG, min(lo.div, step.div))
        carried = [self.get(x) for x in op.operands[3:]]
        for _ in range(MAX_FIXPOINT):
            for a, info in zip(body.args[1:], carried):
                self.info[a.id] = info
            self.block(body)
            ys = body.terminator.operands if body.terminator else []
            new = [_join(c, self.get(y), self._unit(y)) for c, y in zip(carried, ys)]
            if new == carried:
                break
            carried = new
        else:
            carried = [BOTTOM for _ in carried]
            for a in body.args[1:]:
                self.info[a.id] = BOTTOM
            self.block(body)
        for r, info in zip(op.results, carried):
            self.info[r.id] = info


def _const(A: AxisAnalysis, op: tile.Op) -> AxisInfo:
    v = op.attrs.get("value")
    if isinstance(v, bool) or not isinstance(v, int):
        return AxisInfo(1, BIG, 1)
    A.consts[op.result.id] = v
    return AxisInfo(1, BIG, pow2(v))


def _iota(A: AxisAnalysis, op: tile.Op) -> AxisInfo:
    shape = op.result.shape
    if op.attrs.get("axis", 0) != len(shape) - 1:  # counts along another axis: constant here
        return AxisInfo(1, BIG, 1)
    n = shape[-1]
    return AxisInfo(pow2(n), 1 if n > 1 else BIG, pow2(op.attrs.get("start", 0)))


def _splat(A: AxisAnalysis, op: tile.Op) -> AxisInfo:
    x = op.operands[0]
    if x.id in A.consts:
        A.consts[op.result.id] = A.consts[x.id]
    return AxisInfo(1, BIG, A.get(x).div_at(1, A._unit(x)))


def _broadcast(A: AxisAnalysis, op: tile.Op) -> AxisInfo:
    x = op.operands[0]
    if x.id in A.consts:
        A.consts[op.result.id] = A.consts[x.id]
    if x.shape and x.shape[-1] == 1 and op.result.shape[-1] != 1:
        return AxisInfo(1, BIG, A.get(x).div_at(1, A._unit(x)))
    return A.get(x)


def _reshape(A: AxisAnalysis, op: tile.Op) -> AxisInfo:
    x, r = op.operands[0], op.result
    if x.id in A.consts:
        A.consts[r.id] = A.consts[x.id]
    info, unit = A.get(x), A._unit(x)
    if x.type.is_scalar:
        return AxisInfo(1, BIG, info.div)
    last = pow2(r.shape[-1]) if r.shape else 1
    c = min(info.contig, last)
    return AxisInfo(c, min(info.const, last), info.div_at(c, unit))


def _trans(A: AxisAnalysis, op: tile.Op) -> AxisInfo:
    x, perm = op.operands[0], tuple(op.attrs["perm"])
    if perm[-1] == len(perm) - 1:
        return A.get(x)
    return AxisInfo(1, 1, A.get(x).div_at(1, A._unit(x)))


def _hint(A: AxisAnalysis, op: tile.Op) -> AxisInfo:
    x = op.operands[0]
    info = A.get(x)
    if x.id in A.consts:
        A.consts[op.result.id] = A.consts[x.id]

    def last(v) -> int:
        return int(v[-1] if isinstance(v, (tuple, list)) else v)

    if "multiple_of" in op.attrs:
        info = AxisInfo(info.contig, info.const, max(info.div, pow2(last(op.attrs["multiple_of"]))))
    if "max_contiguous" in op.attrs:
        info = AxisInfo(max(info.contig, pow2(last(op.attrs["max_contiguous"]))), info.const,
                        info.div)
    return info


def _binop(A: AxisAnalysis, op: tile.Op) -> AxisInfo:
    a, b = (A.get(x) for x in op.operands)
    k = op.kind
    if not op.result.elem.is_int or op.result.elem.is_bool:  # masks keep only constancy
        return AxisInfo(1, min(a.const, b.const), 1)
    if k == "add":
        return _add(a, b)
    if k == "sub":
        c = min(a.contig, b.const)
        return AxisInfo(c, min(a.const, b.const), min(a.div_at(c), b.div_at(c)))
    if k == "mul":
        return AxisInfo(1, min(a.const, b.const), min(a.div_at(1) * b.div_at(1), BIG))
    if k == "shl" and op.operands[1].id in A.consts:
        s = A.consts[op.operands[1].id]
        if 0 <= s < 31:
            return AxisInfo(1, a.const, min(a.div_at(1) << s, BIG))
    return AxisInfo(1, min(a.const, b.const), 1)


_LOGIC = frozenset({"and", "or", "xor", "land", "lor"})


def _compare(A: AxisAnalysis, op: tile.Op) -> AxisInfo:
    """`x < y` is constant over aligned blocks of B values where x runs +1 from a multiple of
    B and y is one multiple of B: B = min(x.contig, x.div, y.div, y.const)."""
    a, b = (A.get(x) for x in op.operands)
    const = min(a.const, b.const)
    if op.kind in ("gt", "le"):
        a, b = b, a
    if op.kind in ("lt", "ge", "gt", "le") and _is_int(op.operands[0].elem):
        const = max(const, min(a.contig, a.div, b.div_at(1), b.const))
    return AxisInfo(1, const, 1)


def _addptr(A: AxisAnalysis, op: tile.Op) -> AxisInfo:
    p, off = op.operands
    unit = A._unit(p)
    return _add(A.get(p), A.get(off), unit_a=unit, scale_b=unit)


def _cast(A: AxisAnalysis, op: tile.Op) -> AxisInfo:
    x = op.operands[0]
    if _is_int(x.elem) and _is_int(op.result.elem):
        return A.get(x)
    return AxisInfo(1, A.get(x).const, 1)


def _where(A: AxisAnalysis, op: tile.Op) -> AxisInfo:
    return AxisInfo(1, min(A.get(x).const for x in op.operands), 1)


def _unary(A: AxisAnalysis, op: tile.Op) -> AxisInfo:
    return AxisInfo(1, A.get(op.operands[0]).const, 1)


_RULES = {
    "const": _const, "iota": _iota, "splat": _splat, "broadcast": _broadcast,
    "reshape": _reshape, "trans": _trans, "hint": _hint, "addptr": _addptr, "cast": _cast,
    "where": _where,
    **{k: _binop for k in ("add", "sub", "mul", "shl", "and", "or", "xor", "land", "lor",
                           "div", "floordiv", "mod", "shr", "maximum", "minimum", "pow")},
    **{k: _compare for k in ("eq", "ne", "lt", "le", "gt", "ge")},
    **{k: _unary for k in ("not", "neg", "abs")},
}


# -------------------------------------------------------------------------------- access


@dataclass
class VecGroup:
    """Vector state of an open group: run variable `kv`, lane `i`, run start `e0`, the
    hoisted loads `pre` and deferred stores `post`."""

    kv: object
    i: object
    e0: object
    pre: list
    post: list
    masks: dict = field(default_factory=dict)  # mask value id -> its Var at the run start
    # loaded value id -> (its VecLoad in `pre`, the load op): a staging may turn the access
    # into a copy straight to shared memory (`Lowerer.stage`)
    loads: dict = field(default_factory=dict)


class Vectorizer:
    """Decides and emits vector accesses for one lowering (`Lowerer.vector`)."""

    def __init__(self, fn: tile.Function, target: Target):
        self.fn = fn
        self.target = target
        self._axis: AxisAnalysis | None = None
        self._widths: dict[int, int] = {}  # numel -> V

    @property
    def axis(self) -> AxisAnalysis:
        if self._axis is None:
            self._axis = AxisAnalysis(self.fn)
        return self._axis

    def width(self, n: int) -> int:
        """V of the layout of tiles of n elements (see the module docstring)."""
        w = self._widths.get(n)
        if w is None:
            w = self._widths[n] = layout_width(self.target, n, self._want(n))
        return w

    def _want(self, n: int) -> int:
        """The run length that makes the accesses of tiles of n elements 16 bytes wide: the
        widest of those of its loads and stores (at least `VECTOR_WIDTH`)."""
        if layout_width(self.target, n, 2) == 1:
            return VECTOR_WIDTH  # no vector layout at all (no need to analyse)
        want = VECTOR_WIDTH
        for op in self.fn.walk():
            if op.kind in ("load", "store") and op.operands[0].type.numel == n \
                    and not op.operands[0].type.is_scalar:
                size = self._access_size(op)
                w = min(MAX_WIDTH, VECTOR_BYTES // size) if size else 0
                while w > want and not self._fits(op, w, size):
                    w //= 2
                want = max(want, w)
        return want

    @staticmethod
    def _mask(op: tile.Op) -> tile.Value | None:
        at = 2 if op.kind == "store" else 1
        return op.operands[at] if len(op.operands) > at else None

    @staticmethod
    def _access_size(op: tile.Op) -> int:
        """Bytes of one element of a vectorisable access (0: never a vector access)."""
        pointee = op.operands[0].elem.pointee
        if isinstance(pointee, PointerType) or pointee.is_fp8:  # fp8: codes per element
            return 0
        return _itemsize(pointee)

    def _fits(self, op: tile.Op, V: int, size: int) -> bool:
        """Whether the pointer and mask of `op` allow runs of V elements of `size` bytes."""
        ptr, mask = op.operands[0], self._mask(op)
        if ptr.shape[-1] % V:
            return False
        info = self.axis.get(ptr)
        if info.contig < V or info.div < min(V * size, VECTOR_BYTES):
            return False
        return mask is None or self.axis.get(mask).const >= V

    def plan(self, L: LoweringContext, op: tile.Op) -> bool:
        """Whether `op` (a tile load or store, joining the open group) can be one vector access
        per run (see the module docstring)."""
        g = L.group
        V = g.width
        ptr, mask = op.operands[0], self._mask(op)
        size = self._access_size(op)
        if V == 1 or not size or (op.kind == "load" and g.effects):
            return False
        if not self._fits(op, V, size):
            return False
        z = ix.c32(0)  # any run: only whether the values can be computed there matters
        return self._at_run(L, ptr, z, z) is not None and (
            mask is None or self._at_run(L, mask, z, z) is not None)

    def _state(self, L: LoweringContext) -> VecGroup:
        g = L.group
        if g.vec is None:
            g.vec = VecGroup(L.var("kv", int32), L.var("i", int32), L.var("e0", int32), [], [])
        return g.vec

    def _at_run(self, L: LoweringContext, v: tile.Value, kv: Expr, e0: Expr, depth: int = 0) -> Expr | None:
        """Expression of `v` at the first element `e0` (slot `kv`) of the current run, for the
        statements around the lane loop; None if it cannot be computed there."""
        c = L.canon(v)
        if c.type.is_scalar:
            return L.scalars.get(c.id)
        if c.id in L.regs:
            return Index(L.regs[c.id], kv)
        if L.remat_ok(c):
            return L.eval_at(c, e0)
        op = c.owner
        if depth > 8 or not isinstance(op, tile.Op) or op.kind not in _PURE:
            return None
        xs = [self._at_run(L, o, kv, e0, depth + 1) for o in op.operands]
        if any(x is None for x in xs):
            return None
        return ELEMENTWISE[op.kind](op, xs, e0)

    def _run_values(self, L: LoweringContext, op: tile.Op, mask_at: int) -> tuple[VecGroup, Expr, Expr | None]:
        st = self._state(L)
        ptr = self._at_run(L, op.operands[0], st.kv, st.e0)
        mask = None
        if len(op.operands) > mask_at:
            m = L.canon(op.operands[mask_at])
            mask = st.masks.get(m.id)
            if mask is None:
                mask = st.masks[m.id] = L.var("vmask", int1)
                st.pre.append(Assign(mask, self._at_run(L, m, st.kv, st.e0)))
        return st, ptr, mask

    def load(self, L: LoweringContext, op: tile.Op) -> Expr:
        """Emit the vector load of `op` in the open group; its value at the current lane."""
        st, ptr, mask = self._run_values(L, op, 1)
        vec = L.array((op.result.name or "v") + "_vec", register_type(op.result.type),
                      L.group.width)
        st.pre.append(VecLoad(ptr, vec, mask, loc=op.loc))
        st.loads[op.result.id] = (st.pre[-1], op)
        x: Expr = Index(vec, st.i)
        if mask is not None:  # the mask is uniform over the run
            other = (L.read(op.operands[2]) if len(op.operands) > 2
                     else const(0, op.result.elem))
            x = Select(mask, x, other)
        return x

    def store(self, L: LoweringContext, op: tile.Op, value: Expr) -> Stmt:
        """Emit the deferred vector store of `op`; returns the statement of the group body that
        puts the current lane's value into the stored array."""
        st, ptr, mask = self._run_values(L, op, 2)
        vec = L.array("st_vec", register_type(op.operands[1].type), L.group.width)
        st.post.append(VecStore(ptr, vec, mask, loc=op.loc))
        return ArrayStore(vec, st.i, value)


# Ops whose value at a run start may be rebuilt from their operands there (pure, per element).
_PURE = (tile.BINARY_OPS | tile.COMPARE_OPS | tile.UNARY_OPS
         | {"addptr", "cast", "where", "fma"})

__all__ = ["VECTOR_WIDTH", "AxisAnalysis", "AxisInfo", "Vectorizer", "element_index",
           "layout_width", "pow2"]
