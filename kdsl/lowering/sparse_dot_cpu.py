"""CPU `sparse_dot` strategy (capability "cpu_microkernel", one thread per program): a
register-blocked gather micro-kernel.

`out = acc; out[m, n] += sum_j a[m, j] * b[4 * (j // 2) + (meta[m, j] & 3), n]` (a holds the
kept half of a 2:4-sparse A, kdsl/language/sparse_dot.py) is computed by MR x NR blocks of
`out`, after decoding meta into row offsets once per dot:

    off[m, jj] = (4 * (jj // 2) + (meta[m, jj] & 3)) * N      # the row of b, as an offset
    for m0 in range(0, M, MR):
        for n0 in range(0, N, NR):
            blk[i, j] = out[m0 + i, n0 + j]                  # MR x NR, in registers
            for jj in range(H):                              # the kept values, in order
                for i in range(MR):
                    x = a[m0 + i, jj]                        # broadcast
                    r = off[m0 + i, jj] + n0
                    for j in range(NR): blk[i, j] = fma(x, b[r + j], blk[i, j])
            out[m0 + i, n0 + j] = blk[i, j]

Unlike the dense micro-kernel (dot_cpu.py), the rows of b that a k step reads differ from row
to row of the block, so b cannot be streamed as one packed panel: each row i of the block
reads its own row r of b, which the j loop loads as NR / W contiguous vectors (the FMAs' memory
operands).  b is the small K x N tile of the step, read straight from its register array
(row-major float32; any other view is first copied into one), so those loads hit L1.  Per row
and kept value the loop does one broadcast, one load of the offset and NR / W FMAs; the
constant i and j loops are unrolled and `blk` becomes MR * NR / W vector registers (no
accumulator on the stack; `blocks` sizes them, with no register for b).  The offsets are
decoded in a vectorised loop, in the narrowest unsigned type that holds them, so that LLVM
indexes b with them directly: decoding meta inside the loop (a byte load, a mask, an or and
a shift per row and kept value) ran the loop about 1.2x slower (AVX-512, 64 x 64 tiles, one
Emerald Rapids core: 3.0-3.2 against 3.6 G vector FMAs/s).

Each output element sees the same fused multiply-adds in the same order as the generic
strategy (dot_sparse.py), so results are bitwise equal whatever the blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from kdsl.ir import tile
from kdsl.ir.loop import (ROLLED_HINT, Array, ArrayStore, Assign, Binary, Comment, Expr, Fma, For,
                          Index, Stmt)
from kdsl.ir.types import float32, int32, uint8, uint16

from . import index as ix
from .context import LoweringContext
from .dot_cpu import BLOCKS, SIMD_HINT, dot_output, widen
from .dot_sparse import generic_sparse_dot
from .elementwise import register_type


@lru_cache(maxsize=16)
def blocks(vector_bits: int, vector_regs: int) -> tuple[tuple[int, int], ...]:
    """Block shapes (MR, NR), best first, for W = vector_bits / 32 lanes and R registers.

    MR rows of V vectors need MR * V accumulators and one broadcast (b is a memory operand of
    each FMA): MR * V + 2 <= R (one spare).  Most vectors per row first (every vector of b is
    one load, but the broadcast and the offset are per row and kept value: wider rows share
    them among more FMAs), then more rows.  AVX-512 (16 lanes, 32 zmm): 3 x 128 when the
    tile's rows allow, else 2 x 128 (the library's 64 x 128 tiles), then 7 x 64 ... 4 x 64;
    AVX2 (8 lanes, 16 ymm): 1 x 64, then 3 x 32; a tile narrower than W: 8 x 8 ... 1 x 1;
    without a vector width, the dense table's shapes."""
    if vector_bits < 64 or vector_regs < 4:
        return BLOCKS
    W = vector_bits // 32
    wide = [(mr, v) for mr in (8, 7, 6, 5, 4, 3, 2, 1) for v in (8, 4, 3, 2, 1)
            if mr * v + 2 <= vector_regs]
    wide.sort(key=lambda b: (-b[1], -b[0]))
    narrow = [(mr, nr) for nr in (8, 4, 2, 1) if nr < W for mr in (8, 4, 2, 1)
              if mr + 2 <= vector_regs]
    return tuple([(mr, v * W) for mr, v in wide] + narrow)


def _row_major(L: LoweringContext, b: tile.Value, B: Array, t, K: int, N: int) -> Array:
    """`b` as a row-major K x N array of `t`: its own register array when it is one, else a
    copy (a transposed or gathered view, another register type)."""
    base, _ = L.view(b)
    if base is L.canon(b) and base.shape == b.shape and B.dtype == t:
        return B
    out = L.array("bcopy", t, K * N)
    k, n = L.var("k", int32), L.var("n", int32)
    copy = ArrayStore(out, ix.add(ix.mul(k, N), n), widen(Index(B, L.at(b, [k, n])[1]), t))
    L.emit(For(k, ix.c32(0), ix.c32(K), ix.c32(1), [For(n, ix.c32(0), ix.c32(N), ix.c32(1),
                                                        [copy])]))
    return out


# The row offsets' type: the narrowest unsigned type holding every offset in b (K * N - 1).
# Unsigned and narrow, so that LLVM knows `offset + j` cannot overflow and indexes b with it
# directly (from an int32 it versions the vector loop against a wrap of the addition).
OFFSET_TYPES = ((1 << 8, uint8), (1 << 16, uint16))


def _row_offsets(L: LoweringContext, e: tile.Value, E: Array, M: int, H: int, K: int,
                 N: int) -> tuple[Array, Callable[[Expr, Expr], Expr], bool]:
    """(`off`, `at`, exact): `off[at(m, jj)]` = the offset in b (row-major, N columns) of the
    row kept value jj of row m meets, `(4 * (jj // 2) + (meta[m, jj] & 3)) * N`, decoded once
    per dot instead of a byte load and three integer ops per row and kept value in the FMA
    loop.  `off` is laid out as meta's storage runs (m-major for a transposed meta tile, the
    kernels' usual form, else jj-major) and decoded in that order, so the loop reads and writes
    contiguously and vectorises.  `exact` is False when the offsets need int32 (K * N > 65536):
    the reader then bounds them itself."""
    t = next((t for bound, t in OFFSET_TYPES if K * N <= bound), int32)
    off = L.array("rowoff", t, M * H)
    jj, m = L.var("jj", int32), L.var("m", int32)
    _, cmap = L.view(e)
    if cmap([m, jj])[-1] is m:  # m is contiguous in meta's storage
        def at(m: Expr, jj: Expr) -> Expr:
            return ix.add(ix.mul(jj, M), m)
        outer, inner = (jj, H), (m, M)
    else:
        def at(m: Expr, jj: Expr) -> Expr:
            return ix.add(ix.mul(m, H), jj)
        outer, inner = (m, M), (jj, H)
    idx = Binary("and", widen(Index(E, L.at(e, [m, jj])[1]), int32), ix.c32(3))
    row = ix.add(ix.mul(ix.div(jj, 2), 4), idx)
    store = ArrayStore(off, at(m, jj), widen(ix.mul(row, N), t))
    L.emit(For(outer[0], ix.c32(0), ix.c32(outer[1]), ix.c32(1),
               [For(inner[0], ix.c32(0), ix.c32(inner[1]), ix.c32(1), [store])]))
    return off, at, t != int32


def cpu_sparse_dot(L: LoweringContext, op: tile.Op,
                   fallback: Callable = generic_sparse_dot) -> None:
    """The micro-kernel for a float32 accumulator (what `sparse_dot` always has); `fallback`
    for any other."""
    a, e, b, _ = op.operands
    t = register_type(op.result.type)
    if t != float32:
        fallback(L, op)
        return
    M, H = a.shape
    K, N = b.shape
    L.close()
    A, E, B = L.addressable(L.view(a)[0], L.view(e)[0], L.view(b)[0])
    B = _row_major(L, b, B, t, K, N)
    shapes = blocks(L.target.vector_bits, L.target.vector_regs)
    MR, NR = next((mr, nr) for mr, nr in shapes if M % mr == 0 and N % nr == 0)
    m0, n0, jj = L.var("m0", int32), L.var("n0", int32), L.var("jj", int32)
    i, j = L.var("i", int32), L.var("j", int32)
    out = dot_output(L, op, t, M * N)
    blk = L.array("blk", t, MR * NR)
    x, r = L.var("a", t), L.var("r", int32)

    def block_loops(body: list[Stmt]) -> Stmt:
        return For(i, ix.c32(0), ix.c32(MR), ix.c32(1),
                   [For(j, ix.c32(0), ix.c32(NR), ix.c32(1), body)])

    m = ix.add(m0, i)
    o_at = ix.add(ix.mul(m, N), ix.add(n0, j))
    k_at = ix.add(ix.mul(i, NR), j)
    load = block_loops([ArrayStore(blk, k_at, Index(out, o_at))])
    save = block_loops([ArrayStore(out, o_at, Index(blk, k_at))])
    rows_of, off_at, narrow = _row_offsets(L, e, E, M, H, K, N)
    offset: Expr = widen(Index(rows_of, off_at(m, jj)), int32)
    if not narrow:  # a mask no offset exceeds: LLVM then knows offset + j cannot wrap
        offset = Binary("and", offset, ix.c32((1 << (K * N - 1).bit_length()) - 1))
    fma = For(j, ix.c32(0), ix.c32(NR), ix.c32(1),
              [Comment(SIMD_HINT),
               ArrayStore(blk, k_at, Fma(x, Index(B, ix.add(r, j)), Index(blk, k_at)))])
    rows = For(i, ix.c32(0), ix.c32(MR), ix.c32(1),
               [Assign(x, widen(Index(A, L.at(a, [m, jj])[1]), t)),
                Assign(r, ix.add(offset, n0)), fma])
    # (16 registers: rolled, else LLVM hoists every kept value's broadcast and spills them)
    kloop = For(jj, ix.c32(0), ix.c32(H), ix.c32(1),
                ([Comment(ROLLED_HINT)] if L.target.vector_regs <= 16 else []) + [rows])
    L.emit(For(m0, ix.c32(0), ix.c32(M), ix.c32(MR),
               [For(n0, ix.c32(0), ix.c32(N), ix.c32(NR), [load, kloop, save])]))
    L.regs[op.result.id] = out
