"""CPU `dot` strategy (capability "cpu_microkernel", one thread per program): a register-blocked
micro-kernel.

`out = acc; out[m, n] += sum_k a[m, k] * b[k, n]` is computed by MR x NR blocks of `out`:

    for m0 in range(0, M, MR):
        for n0 in range(0, N, NR):
            blk[i, j] = out[m0 + i, n0 + j]                 # MR x NR, in registers
            for k in range(K):
                for i in range(MR):
                    x = a[m0 + i, k]                         # broadcast
                    for j in range(NR): blk[i, j] = fma(x, b[k, n0 + j], blk[i, j])
            out[m0 + i, n0 + j] = blk[i, j]

b, when it is a load only the dot reads, is copied straight from memory into k-major panels of
NR columns (`_pack_from_memory`: the load recomputed in the copy's loop, no register array of
it; `packs_b`).  Otherwise a and b are read where their tiles lie (the register arrays of their
loads) when that serves:
a's values are single broadcasts, so any affine view of a float32 array does (a transposed
one included, 16-bit tiles being float32 in registers), and b's row segments are vector loads,
so b must be contiguous along n.  Otherwise (a transposed or reshaped view of a computed tile)
the operand is first copied, once per dot, into k-major micro-panels: `apack` holds, for each
MR-row panel of a, the MR values of each k side by side, `bpack` the NR values of b's row k
for each NR-column panel, which the micro-kernel reads as contiguous streams.  Reading in place
saves a copy of both tiles per dot (5-15% of a 128^3 step; the panels were always made
before).  The j loop vectorises into NR / W vectors of W floats; the constant i
and j loops are unrolled and `blk` becomes MR * NR / W vector registers (with AVX-512 and 8 x 32:
16 accumulators, 2 loads of b and 8 broadcasts of a per 16 FMAs; 6 x 64 with a row tail, 24
accumulators, 4 loads and 6 broadcasts per 24 FMAs, where the tile is 64 columns wide).
MR x NR is sized to the target's vector registers (`blocks`: the accumulators, the b vectors
and the broadcast must fit, else LLVM spills accumulators inside the FMA loop).  Cache
blocking across K is the kernel's own loop over BLOCK_K.

Each output element still sees the same fused multiply-adds in the same k order as the generic
and row strategies (bitwise equal results).  Integer and 16-bit-accumulator dots use the row
strategy.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from kdsl.ir import loop, tile
from kdsl.ir.loop import (
    Array,
    ArrayStore,
    Assign,
    Cast,
    Comment,
    Const,
    Expr,
    Fma,
    For,
    Index,
    Stmt,
    Var,
)
from kdsl.ir.types import float32, int32
from kdsl.target import Target

from . import index as ix
from .analysis import is_zero_const
from .context import LoweringContext
from .elementwise import HALF, register_type
from .prefetch import LINE, safe_address, slow_address

# Block shapes, best first: the first (MR, NR) dividing (M, N) wins.  Width-agnostic (a target
# without vector_bits): NR a multiple of 16 float32 where the tile allows.
BLOCKS: tuple[tuple[int, int], ...] = (
    (8, 32), (4, 32), (8, 16), (4, 16), (2, 16), (4, 8), (2, 8), (1, 8), (1, 4), (1, 2),
    (1, 1))


@lru_cache(maxsize=16)
def blocks(vector_bits: int, vector_regs: int) -> tuple[tuple[int, int], ...]:
    """Block shapes, best first, for W = vector_bits / 32 float32 lanes and R registers.

    A block of MR rows and V vectors of W columns needs MR * V accumulators, V vectors of b and
    one broadcast of a: the shapes with MR * V + V + 1 <= R, most FMAs per k first, then more
    rows.  More rows, not fewer loads: b's panel is the stream (read from L2 once per MR rows,
    m0 being the outer loop) while a's MR values per k stay in L1, so rows cut the streamed loads
    per FMA (AVX-512, 128 x 128 x 128 tiles: 8 x 32 ran 1.15-1.17x faster than 4 x 64 at 1024^3
    on one Emerald Rapids core, within noise at 2048^3 on two).  Narrower shapes (NR < W, one
    partial vector) follow for small tiles.  AVX-512 (16 lanes, 32 zmm): 8 x 32 (16
    accumulators, 19 registers); AVX2 (8 lanes, 16 ymm): 8 x 8 (8 accumulators, 10
    registers); NEON (4 lanes, 32 registers): 8 x 8.  `choose_block` prefers `tail_blocks`'
    6-row shapes to all of them where the tile allows.
    """
    if vector_bits < 64 or vector_regs < 4:
        return BLOCKS
    W = vector_bits // 32
    wide = [(mr, v) for mr in (8, 4, 2, 1) for v in (4, 2, 1) if mr * v + v + 1 <= vector_regs]
    wide.sort(key=lambda b: (-b[0] * b[1], -b[0]))
    narrow = [(mr, nr) for nr in (8, 4, 2, 1) if nr < W for mr in (8, 4, 2, 1)
              if mr + 2 <= vector_regs]
    return tuple([(mr, v * W) for mr, v in wide] + narrow)


@lru_cache(maxsize=16)
def tail_blocks(vector_bits: int, vector_regs: int) -> tuple[tuple[int, int], ...]:
    """Shapes of 6 rows (most FMAs per k first), which no power-of-two tile divides: the rows
    left over (2 or 4) run with a shape of `blocks` of the same width.  Six rows of the widest
    V that fits (6 V + V + 1 <= R) hold more accumulators than any dividing shape: AVX2 (16
    ymm) 6 x 16, 12 accumulators in 15 registers, where the power-of-two shapes stop at 8
    (8 x 8 kept the pipes half idle on Zen 3, benchmarks/RESULTS.md); AVX-512 (32 zmm) 6 x 64,
    24 accumulators in 29 registers against 8 x 32's 16 (on one Emerald Rapids core, 256 x 256
    x 64 tiles: 2048^3 141-146 -> 136-138 ms; 12 x 32, also 24 accumulators but 12 broadcasts
    per k, 150-155); NEON 6 x 16."""
    if vector_bits < 64 or vector_regs < 4:
        return ()
    W = vector_bits // 32
    v_max = [v for v in (4, 2, 1) if 6 * v + v + 1 <= vector_regs]
    return tuple((6, v * W) for v in v_max)


def choose_block(M: int, N: int, vector_bits: int, vector_regs: int
                 ) -> tuple[int, int, int | None]:
    """(MR, NR, tail MR or None) for an M x N output: the first shape of `blocks` that divides
    it, unless a `tail_blocks` shape with more accumulators divides N and leaves rows that a
    dividing shape of its width finishes."""
    W = max(1, vector_bits // 32)
    shapes = blocks(vector_bits, vector_regs)
    mr, nr = next((mr, nr) for mr, nr in shapes if M % mr == 0 and N % nr == 0)
    if M < 6:
        return mr, nr, None
    for tmr, tnr in tail_blocks(vector_bits, vector_regs):
        if tmr * tnr // W <= mr * nr // W or N % tnr:
            continue
        rest = M % tmr
        if rest == 0:
            return tmr, tnr, None
        tail = next((r for r, c in shapes if c == tnr and rest % r == 0), None)
        if tail is not None:
            return tmr, tnr, tail
    return mr, nr, None


# The first statement of the vector (NR) loop (kdsl/ir/loop.py, "Loop hints").
SIMD_HINT = loop.SIMD_HINT


def widen(x: Expr, t) -> Expr:
    return x if x.dtype == t else Cast(x, t)


def dot_output(L: LoweringContext, op: tile.Op, t, numel: int, fill: bool = True) -> Array:
    """The register array of a dot's result, holding the accumulator operand `c` on entry:
    `c`'s own array when the dot is its last user (updated in place), else a copy (left
    unwritten with `fill=False`, for a caller that writes every element itself).  Shared with
    the generic strategy (dot.py imports this module) and `sparse_dot`'s CPU strategy: the
    accumulator is the last operand of both ops."""
    c = op.operands[-1]
    acc = L.canon(c)
    if L.users.get(acc.id) == [op] and acc.id in L.regs and L.regs[acc.id].dtype == t:
        return L.regs[acc.id]  # the accumulator dies here: update its array in place
    out = L.array(op.result.name or "dot", t, numel)
    if not fill:
        return out
    g = L.open_group(numel)
    g.body.append(ArrayStore(out, g.k, widen(L.read(c), t)))
    L.close()
    return out


def _pack_loops(L: LoweringContext, hint: str, src: Expr, t, R: int, outer: int, inner: int,
                at) -> Array:
    """A packed copy of an `outer x inner` operand (`inner` = K) in micro-panels of R rows:
    element (r, k) goes to `(r // R) * R * inner + k * R + r % R`, so that the micro-kernel
    reads each panel front to back.  `at(r, k)` is the element's index in `src`."""
    out = L.array(hint, t, outer * inner)
    if _pack_transposed(L, out, src, t, R, outer, inner, at):
        return out
    r0, k, r = L.var("r0", int32), L.var("k", int32), L.var("r", int32)
    dst = ix.add(ix.add(ix.mul(r0, inner), ix.mul(k, R)), r)
    copy = ArrayStore(out, dst, widen(Index(src, at(ix.add(r0, r), k)), t))
    L.emit(For(r0, ix.c32(0), ix.c32(outer), ix.c32(R),
               [For(k, ix.c32(0), ix.c32(inner), ix.c32(1),
                    [For(r, ix.c32(0), ix.c32(R), ix.c32(1), [copy])])]))
    return out


def _pack_transposed(L: LoweringContext, out: Array, src: Array, t, R: int, outer: int,
                     inner: int, at) -> bool:
    """The packing as n x n block transposes (`Transpose`, n = the vector lanes) where the
    source rows run along k (`at(r, k)` moves by 1 with k and by a constant S >= n with r: the
    `trans(k)` of attention's `dot(q, trans(k))`), the target has `transpose_block` and the
    sizes are multiples of n; False otherwise.  The loop nest does the same copy one element
    at a time, which a vectoriser turns into scatters or gathers (~6x slower at 64 x 64)."""
    n = L.target.vector_bits // 32
    if not (L.target.has("transpose_block") and n >= 2 and t == float32
            and src.dtype == float32 and src.space == "reg"
            and R % n == 0 and inner % n == 0 and outer % R == 0):
        return False
    r_probe, k_probe = Var("r", int32), Var("k", int32)  # never emitted
    probe = at(r_probe, k_probe)
    S = ix.coefficient(probe, r_probe)
    if ix.coefficient(probe, k_probe) != 1 or S is None or S < n:
        return False
    p, rr, k0 = L.var("p", int32), L.var("rr", int32), L.var("k0", int32)
    block = loop.Transpose(out, ix.add(ix.add(ix.mul(p, inner), ix.mul(k0, R)), rr), R,
                           src, at(ix.add(p, rr), k0), S, n)
    L.emit(For(p, ix.c32(0), ix.c32(outer), ix.c32(R),
               [For(rr, ix.c32(0), ix.c32(R), ix.c32(n),
                    [For(k0, ix.c32(0), ix.c32(inner), ix.c32(n), [block])])]))
    return True


def _in_place(L: LoweringContext, v: tile.Value, arr: Array, t, coords: list[Expr],
              loops: list[Var], unit: Var | None, out: Array) -> Expr | None:
    """The index in `arr` (the array holding `v`'s storage) of element `coords` of `v`, when
    the micro-kernel may read it there: `arr` holds `t` values (16-bit floats are held as
    float32 in registers), is not the output the dot updates, and the index is affine in the
    micro-kernel's loop variables `loops` (no coordinates by shifts and masks, as a reshaped
    view needs), with stride 1 along `unit` where given; else None (the operand is packed)."""
    if arr.dtype != t or arr is out:
        return None
    at = L.at(v, coords)[1]
    steps = [ix.coefficient(at, x) for x in loops]
    if None in steps or (unit is not None and ix.coefficient(at, unit) != 1):
        return None
    return at


def packs_b(target: Target, op: tile.Op, b: tile.Value) -> bool:
    """Whether `cpu_dot` may copy b (`b`: its canonical value) straight from memory into its
    micro-panels: a float32 accumulator on a micro-kernel target and b a tile load (not a view
    of one: a transposed b is packed by block transposes).  It does where the load is
    recomputable (only the dot reads it: kdsl/lowering/lowerer.py `_addressed`), instead of
    reading the tile's register array in place, whose rows lie a power of two apart (a
    256 x 512 tile's 2 KiB): a panel's 64 rows of k then fell into 8 of L1's 64 sets and
    streamed from L2 on every pass; the panels are contiguous.  Emerald Rapids, one thread,
    2048^3 float32: 134 -> 128 ms; two threads 4096^3 556 -> 531 ms."""
    if not (target.has("cpu_microkernel") and register_type(op.result.type) == float32
            and op.result.elem not in HALF and isinstance(b.owner, tile.Op)):
        return False
    return b.owner.kind == "load" or (b.owner.kind in tile.ELEMENTWISE
                                      and row_shape(target, op, computed=True) is not None)


#: the most row blocks that evaluate a computed b each where they read it (`_b_row`)
B_ROW_BLOCKS = 2


def row_shape(target: Target, op: tile.Op, computed: bool) -> tuple[int, int] | None:
    """The (MR, NR) block with which the micro-kernel evaluates b where it reads it, NR
    values per k (`_b_row`), or None: a dot of few rows (a decode step's M = 1..16) and b
    read straight from memory.  A load gets it where one block covers the rows (each
    element read once; more blocks keep the panel copy, read from L1); a computed b (a
    weight-only quantised matmul's dequantisation) where at most `B_ROW_BLOCKS` blocks do:
    its element-wise math then runs once per block, in the FMA loop, instead of once into a
    tile that the panels are copied from (int8, K = N = 4096, M = 16 on one core: the stored
    tile's loop took 41% of the time, stalled on its loads)."""
    M, N = op.operands[0].shape[0], op.operands[1].shape[1]
    most = B_ROW_BLOCKS if computed else 1
    return next(((mr, nr) for mr, nr in blocks(target.vector_bits, target.vector_regs)
                 if M % mr == 0 and N % nr == 0 and M // mr <= most), None)


def recompute_at(L: LoweringContext, v: tile.Value, e: Var, coords: list[Expr]) -> Expr:
    """Recomputable tile `v` at element `coords`, in a loop whose variable `e` (assigned
    there as the flat index, if read) has those coordinates (`ix.nest`), so that addresses
    stay affine in the loop's variables: a packing loop's reads of an operand straight from
    memory.  Transposes are followed by coordinates (a flat index through one becomes
    divisions and remainders, which hide the strides from the vectoriser)."""
    x = L.canon(v)
    while isinstance(x.owner, tile.Op) and x.owner.kind == "trans":
        src = [ix.c32(0)] * len(coords)
        for d, p in enumerate(x.owner.attrs["perm"]):
            src[p] = coords[d]
        x, coords = L.canon(x.owner.operands[0]), src
    ix.nest(e, ix.nest_dims(x.shape), tuple(c for c, d in zip(coords, x.shape) if d != 1))
    return L.eval_at(x, e)


def _pack_from_memory(L: LoweringContext, b: tile.Value, t, NR: int, K: int, N: int) -> Array:
    """b (K x N, recomputable: a load only the dot reads) copied from memory into k-major
    panels of NR columns, bp[(n // NR) * K * NR + k * NR + n % NR]: each panel one contiguous
    stream (rows of a tile lie a power of two apart, which maps a panel's k rows onto a few
    L1 sets).  The panel loop steps by NR, so the prefetch rewrite (unit-step nests only)
    gives the copy no hints: on one Emerald Rapids core they cost 3-4% (2048^3: 126-129 ms
    without, 130-135 with)."""
    bp = L.array("bpack", t, K * N)
    p, k, j, e = L.var("p", int32), L.var("k", int32), L.var("j", int32), L.var("eb", int32)
    n = ix.add(p, j)
    store = ArrayStore(bp, ix.add(ix.add(ix.mul(p, K), ix.mul(k, NR)), j),
                       widen(recompute_at(L, b, e, [k, n]), t))
    L.emit(For(p, ix.c32(0), ix.c32(N), ix.c32(NR),
               [For(k, ix.c32(0), ix.c32(K), ix.c32(1),
                    [For(j, ix.c32(0), ix.c32(NR), ix.c32(1),
                         [Comment(loop.VECTOR_HINT), Assign(e, ix.add(ix.mul(k, N), n)),
                          store])])]))
    return bp


def _b_row(L: LoweringContext, b: tile.Value, row: Array, t, kk: Var, n0: Var, j: Var,
           N: int) -> list[Stmt]:
    """Row kk of b's columns n0..n0 + NR (recomputable b: loads and element-wise math only
    the dot reads) evaluated into `row`, NR values the micro-kernel's FMAs then read from
    registers (`row_shape`): with one block of rows each element of b is read once, so a
    panel copy would be a store and a load per element for nothing; a weight-only quantised
    matmul's dequantisation (int8 load, convert, scale) runs inside the FMA loop, once per
    block of rows, on no tile of its own.  Hints for the row the next K step reads go
    first (`_next_rows_hints`)."""
    e = L.var("eb", int32)
    n = ix.add(n0, j)
    return [*_next_rows_hints(L, b, kk, n0, row.size, N),
            For(j, ix.c32(0), ix.c32(row.size), ix.c32(1),
                [Comment(SIMD_HINT), Assign(e, ix.add(ix.mul(kk, N), n)),
                 ArrayStore(row, j, widen(recompute_at(L, b, e, [kk, n]), t))])]


def _next_rows_hints(L: LoweringContext, b: tile.Value, kk: Var, n0: Var, NR: int,
                     N: int) -> list[Stmt]:
    """Prefetch hints, one per cache line, for b's row kk + K of columns n0..n0 + NR: the
    row the enclosing K loop's next step reads here (its rows advance by the tile's K), a
    whole sweep of the other panels ahead.  The prefetch rewrite gives a nest stepped by NR
    no hints, and b's rows lie a matrix row (a page, for 4096 int8 columns) apart, which the
    hardware's stream prefetchers do not follow.  For each load b is computed from at its own
    shape whose address is safe to compute early (no memory read, no trap: prefetch.py
    `safe_address`); not where the row reaches it only through a division by more than K (a
    group's scales: one row for many k, in L1 already).  Only on targets with the
    "prefetch" capability; hints never fault, so rows past the operand's end are harmless."""
    if not L.target.has("prefetch"):
        return []
    K = b.shape[0]
    out: list[Stmt] = []
    for load in _loads_of(L, b):
        step = max(1, LINE // load.results[0].type.elem.itemsize)
        jp, e = L.var("jp", int32), L.var("ep", int32)
        row, col = ix.add(kk, ix.c32(K)), ix.add(n0, jp)
        ptr = recompute_at(L, load.operands[0], e, [row, col])
        if not safe_address(ptr) or slow_address(ptr, {kk.name: K}):
            continue
        out.append(For(jp, ix.c32(0), ix.c32(NR), ix.c32(min(step, NR)),
                       [Assign(e, ix.add(ix.mul(row, N), col)), loop.Prefetch(ptr)]))
    return out


def _loads_of(L: LoweringContext, v: tile.Value) -> list[tile.Op]:
    """The loads of v's shape that element-wise ops compute v from."""
    found: list[tile.Op] = []
    todo = [L.canon(v)]
    while todo:
        x = todo.pop()
        op = x.owner
        if not isinstance(op, tile.Op) or x.shape != v.shape or any(op is f for f in found):
            continue
        if op.kind == "load":
            found.append(op)
        elif op.kind in tile.ELEMENTWISE:
            todo.extend(L.canon(o) for o in op.operands)
    return found


def cpu_dot(L: LoweringContext, op: tile.Op, fallback: Callable) -> None:
    """The micro-kernel for float32 accumulators; `fallback` (dot.py's row strategy) for
    integer, float64 and 16-bit accumulators."""
    a, b = op.operands[:2]
    t = register_type(op.result.type)
    if t != float32 or op.result.elem in HALF:
        fallback(L, op)
        return
    M, K = a.shape
    N = b.shape[1]
    L.close()
    b_mem = packs_b(L.target, op, L.canon(b)) and L.remat_ok(b)
    A = L.addressable(L.view(a)[0])[0]
    B = None if b_mem else L.addressable(L.view(b)[0])[0]
    MR, NR, tail = choose_block(M, N, L.target.vector_bits, L.target.vector_regs)
    m0, n0, kk = L.var("m0", int32), L.var("n0", int32), L.var("kk", int32)
    i, j = L.var("i", int32), L.var("j", int32)
    # An operand is read where the tile already lies when it can be: a's values are
    # broadcast one at a time, so any affine view of a float32 array serves (a transposed one
    # included); b's rows are vector loads, so b must be float32 and contiguous along n.
    # Otherwise (16-bit inputs, widened in the copy; a transposed b; a view through a
    # reshape) the operand is first copied into k-major micro-panels once per dot, which the
    # micro-kernel then reads as one contiguous stream.  Reading in place saves the copy
    # (1.05-1.15x at 1024^3, benchmarks/RESULTS.md).
    # Without an accumulator operand (a `const` of zeros) the register blocks start at zero
    # and the output array is only written: no zeroing pass, no loads of zeros (attention's
    # `dot(q, trans(k))` every key tile).
    zero = is_zero_const(L.canon(op.operands[-1]))
    out = dot_output(L, op, t, M * N, fill=not zero)  # (before: an updated operand is packed)
    # b of few rows' dot evaluated where the micro-kernel reads it, NR values per k, with no
    # panel copy (`_b_row`)
    shape = row_shape(L.target, op, L.canon(b).owner.kind != "load") if b_mem else None
    b_row = shape is not None
    if shape is not None:
        (MR, NR), tail = shape, None
    row = ix.add(m0, i)
    direct_a = _in_place(L, a, A, t, [row, kk], [m0, i, kk], None, out)
    if direct_a is None and tail is not None:  # a's panels are MR rows wide: no tail
        shapes = blocks(L.target.vector_bits, L.target.vector_regs)
        MR, NR = next((mr, nr) for mr, nr in shapes if M % mr == 0 and N % nr == 0)
        tail = None
    if direct_a is None:
        A = _pack_loops(L, "apack", A, t, MR, M, K, lambda m, k: L.at(a, [m, k])[1])
        direct_a = ix.add(ix.add(ix.mul(m0, K), ix.mul(kk, MR)), i)
    col = ix.add(n0, j)
    if b_row:
        B = L.array("brow", t, NR)
        direct_b = j
    elif b_mem:
        B = _pack_from_memory(L, b, t, NR, K, N)
        direct_b = ix.add(ix.add(ix.mul(n0, K), ix.mul(kk, NR)), j)
    else:
        direct_b = _in_place(L, b, B, t, [kk, col], [kk, n0, j], j, out)
    if direct_b is None:
        B = _pack_loops(L, "bpack", B, t, NR, N, K, lambda n, k: L.at(b, [k, n])[1])
        direct_b = ix.add(ix.add(ix.mul(n0, K), ix.mul(kk, NR)), j)
    a_at, b_at = direct_a, direct_b
    blk = L.array("blk", t, MR * NR)
    x = L.var("a", t)

    o_at = ix.add(ix.mul(ix.add(m0, i), N), ix.add(n0, j))
    k_at = ix.add(ix.mul(i, NR), j)

    def panel_rows(lo: int, hi: int, mr: int) -> Stmt:
        """Rows lo..hi of the output in blocks of mr x NR."""
        def block_loops(body: list[Stmt]) -> Stmt:
            # (the copies of blk are SIMD loops too: a backend that prints vector types for
            # them, backends/c_simd.py, then holds blk in vector registers throughout)
            return For(i, ix.c32(0), ix.c32(mr), ix.c32(1),
                       [For(j, ix.c32(0), ix.c32(NR), ix.c32(1), [Comment(SIMD_HINT), *body])])

        load = block_loops([ArrayStore(blk, k_at, Const(0.0, t) if zero else Index(out, o_at))])
        save = block_loops([ArrayStore(out, o_at, Index(blk, k_at))])
        fma = For(j, ix.c32(0), ix.c32(NR), ix.c32(1),
                  [Comment(SIMD_HINT),
                   ArrayStore(blk, k_at, Fma(x, Index(B, b_at), Index(blk, k_at)))])
        rows: list[Stmt] = [For(i, ix.c32(0), ix.c32(mr), ix.c32(1),
                                [Assign(x, Index(A, a_at)), fma])]
        if b_row:
            rows = _b_row(L, b, B, t, kk, n0, j, N) + rows
        # unrolled by 4 (ROLLED_HINT): LLVM left it rolled, 5 instructions of loop control
        # per 24 FMAs and 10 loads; one Emerald Rapids core, 2048^3: 128-129 -> 121-122 ms
        kloop = For(kk, ix.c32(0), ix.c32(K), ix.c32(1), [Comment(loop.ROLLED_HINT), *rows])
        # m0 outside n0: an mr-row panel of a (mr * K floats) stays in L1 while the NR-column
        # panels of b stream past it (n0 outside measured ~1.4x slower at 1024^3).
        return For(m0, ix.c32(lo), ix.c32(hi), ix.c32(mr),
                   [For(n0, ix.c32(0), ix.c32(N), ix.c32(NR), [load, kloop, save])])

    whole = M - M % MR if tail is not None else M
    L.emit(panel_rows(0, whole, MR))
    if tail is not None:  # the rows a 6-row block leaves, with a shorter block
        L.emit(panel_rows(whole, M, tail))
    L.regs[op.result.id] = out
