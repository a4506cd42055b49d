"""CPU matrix-unit `dot` strategy (capability "tile_dot"): bfloat16 and int8 dots as blocks of
Loop IR `TileDot` statements, which a backend runs on the CPU's matrix unit (the llvm backend:
Intel AMX's `tdpbf16ps` / `tdpbssd`, or AVX512-BF16's `vdpbf16ps`; backends/llvm_tile_dot.py).

    dot(a: M x K, b: K x N, acc: M x N)      a, b bfloat16 -> float32  ("tile_dot_bf16")
                                             a, b int8     -> int32    ("tile_dot_int8")

A matrix unit multiplies 16 x 16 output tiles by K steps of 32 bfloat16 (64 int8) values, and
reads its operands as words of `g` consecutive values of k (g = 2 for bfloat16, 4 for int8): a
as rows of k, b with `g` rows interleaved (the "VNNI" layout).  Both are copied, once per dot,
into arrays of their bits (bfloat16 as uint16, int8 as is):

    ap[m * K + k] = a[m, k]                            (a's rows, k contiguous)
    bp[(k // g) * g*N + g * n + k % g] = b[k, n]       (b's rows, g at a time, interleaved)

each copy a loop nest whose inner loop runs along n or k; a bfloat16 b whose k is contiguous
where it lies (`x @ w.t()`, `trans(k)`) is copied as it lies and turned into the unit's words
by 16 x 16 word transposes instead (`_pack_b`).  An operand that is a load the dot alone reads
(the usual `a = load(...); acc = dot(a, b, acc)`) is copied straight from memory: the lowering
does not store it (`Lowerer._packed`), and its values are recomputed in the copy's loop
(`dot_cpu.recompute_at`) with coordinates the loop computes (`ix.nest`), so that the load's
pointer arithmetic stays affine in the loop variables.  Other operands
are read from their register arrays (16-bit floats are float32 there: a bfloat16's bits are
the high half of its float32's).  The output is then cut into blocks of at most 8 tiles (4
accumulator tiles of a 32 x 32 block, 2 of a and 2 of b), each block a `TileDot` over the whole
K: the accumulators stay in tile registers for the block's K loop, and the dot's output array
is read and written once per block.

Where the types, the shapes (M, N multiples of 16, K of 16 * g) or the target do not allow it,
the fallback strategy runs (the register-blocked micro-kernel, dot_cpu.py).

Numerics: bfloat16 products are exact in float32; the unit sums them in its own order and
precision (AMX's is not the sequential fused multiply-add chain of the micro-kernel: results
can differ in the last bits), reads bfloat16 subnormals as zero and flushes subnormal results.
int8 sums are exact.  docs/numerics.md states both.
"""

from __future__ import annotations

from collections.abc import Callable

from kdsl.ir import tile
from kdsl.ir.loop import (
    TILE,
    TILE_DOT_KINDS,
    VECTOR_HINT,
    Array,
    ArrayStore,
    Assign,
    Binary,
    Bitcast,
    Cast,
    Comment,
    Const,
    Expr,
    For,
    Index,
    Load,
    PairBits,
    Stmt,
    TileDot,
    Transpose,
    Var,
)
from kdsl.ir.types import bfloat16, float32, int8, int32, uint16, uint32
from kdsl.target import Target

from . import index as ix
from .analysis import is_zero_const
from .context import LoweringContext
from .dot_cpu import dot_output, recompute_at
from .elementwise import register_type

# (a's and b's element type, the result's) -> TileDot kind
KINDS = {(bfloat16, float32): "bf16", (int8, int32): "int8"}

# Output blocks, most accumulator tiles first: (rows, cols) in tiles of TILE x TILE.  A block of
# tm x tn tiles holds tm * tn accumulators, tm tiles of a and tn of b: at most 8 tile registers.
BLOCKS = ((2, 2), (3, 1), (1, 3), (2, 1), (1, 2), (1, 1))


def tile_kind(op: tile.Op) -> str | None:
    """The TileDot kind of dot `op` by its types, or None."""
    a, b = op.operands[:2]
    if a.type.elem != b.type.elem:
        return None
    return KINDS.get((a.type.elem, op.result.type.elem))


def takes(target: Target, op: tile.Op) -> bool:
    """Whether `tile_dot` lowers dot `op` on `target` (types, shapes and capabilities)."""
    kind = tile_kind(op)
    if kind is None or not target.has(f"tile_dot_{kind}"):
        return False
    acc_t, g, _ = TILE_DOT_KINDS[kind]
    a, b = op.operands[:2]
    M, K = a.shape
    N = b.shape[1]
    return (M % TILE == 0 and N % TILE == 0 and K % (TILE * g) == 0
            and register_type(op.result.type) == acc_t)


def choose_block(M: int, N: int) -> tuple[int, int]:
    """(rows, cols) of the output blocks: the first of BLOCKS dividing an M x N output."""
    return next((tm * TILE, tn * TILE) for tm, tn in BLOCKS
                if M % (tm * TILE) == 0 and N % (tn * TILE) == 0)


def _bits(x: Expr, kind: str) -> Expr:
    """The operand array's element for value `x` held in registers: a bfloat16 (a float32
    whose low half is zero) as its uint16 pattern; an int8 as itself."""
    if kind == "bf16":
        return Cast(Binary("shr", Bitcast(x, uint32), Const(16, uint32)), uint16)
    return x


def _operand(L: LoweringContext, v: tile.Value) -> Callable[[Expr, Expr], Expr]:
    """`value(e, coords)`: element `coords` of operand `v` in a packing loop, `e` a fresh
    variable the loop may use as its flat index.  A value the dot may recompute (a load only
    it reads) is re-read from memory; any other is read from its register array."""
    if L.remat_ok(v):
        return lambda e, coords: recompute_at(L, v, e, coords)
    base = L.view(v)[0]
    arr = L.addressable(base)[0]
    return lambda e, coords: Index(arr, L.at(v, coords)[1])


def _k_contiguous(L: LoweringContext, v: tile.Value, value: Callable) -> bool:
    """Whether consecutive k of operand `v` (K x N) are adjacent where it is read from (its
    load's addresses, or its register array), while consecutive n are not: b stored
    transposed, as `x @ w.t()` and attention's `dot(q, trans(k))` have it."""
    k, n, e = Var("k", int32), Var("n", int32), Var("e", int32)  # probes, never emitted
    x = value(e, [k, n])
    if isinstance(x, Load):  # (a pointer moves in bytes)
        at, unit = x.ptr, x.ptr.dtype.pointee.itemsize
    elif isinstance(x, Index):
        at, unit = x.index, 1
    else:
        return False
    # (n's coefficient may be a runtime stride, which `coefficient` does not know: None)
    return ix.coefficient(at, k) == unit and ix.coefficient(at, n) != unit


def _rows_of_k(L: LoweringContext, hint: str, v: tile.Value, value: Callable, kind: str,
               R: int, K: int, at: Callable[[Expr, Expr], list[Expr]]) -> Array:
    """R rows of K values of operand `v` copied as the unit's parts (k innermost): element
    `at(r, k)` of v to r * K + k.  a's copy (rows of a); a transposed b's columns."""
    out = L.array(hint, TILE_DOT_KINDS[kind][2], R * K)
    r, k, e = L.var("r", int32), L.var("k", int32), L.var("e", int32)
    L.emit(For(r, ix.c32(0), ix.c32(R), ix.c32(1),
               [For(k, ix.c32(0), ix.c32(K), ix.c32(1),
                    [Comment(VECTOR_HINT), Assign(e, ix.flatten(at(r, k), v.shape)),
                     ArrayStore(out, ix.add(ix.mul(r, K), k),
                                _bits(value(e, at(r, k)), kind))])]))
    return out


def _pack_b(L: LoweringContext, b: tile.Value, value: Callable, kind: str, K: int,
            N: int) -> tuple[Array, int, int]:
    """b's copy in the unit's layout, (array, elements per block column, row stride).

    Rows of b in memory (n contiguous): for each group of g rows, their values of column n
    side by side, n innermost (g contiguous reads, one interleaved write), as uint16 / int8.
    A bfloat16 b stored transposed (k contiguous, `_k_contiguous`, as `x @ w.t()` and
    attention's `dot(q, trans(k))` have it) on a target with `transpose_block`: its columns
    copied as they lie (k innermost: a plain copy of 16-bit patterns), read back as words of
    two k (`PairBits`) into a uint32 array [N][K/2], and those transposed 16 x 16 at a time
    into [K/2][N] (`Transpose`: vector loads, shuffles, stores).  Read element by element in
    the unit's order, the copy was scalar 16-bit loads (a 2048^3 `a @ w.t()` 27 ms against
    14 for `a @ w`)."""
    _, g, part = TILE_DOT_KINDS[kind]
    KW = K // g
    if kind == "bf16" and L.target.has("transpose_block") and _k_contiguous(L, b, value):
        xh = _rows_of_k(L, "bcols", b, value, kind, N, K, lambda n, k: [k, n])
        xw = L.array("bwords", uint32, N * KW)
        n, q = L.var("n", int32), L.var("q", int32)
        L.emit(For(n, ix.c32(0), ix.c32(N), ix.c32(1),
                   [For(q, ix.c32(0), ix.c32(KW), ix.c32(1),
                        [Comment(VECTOR_HINT),
                         ArrayStore(xw, ix.add(ix.mul(n, KW), q),
                                    PairBits(xh, ix.add(ix.mul(n, K), ix.mul(q, 2))))])]))
        bw = L.array("bpack", uint32, KW * N)
        n0, q0 = L.var("n0", int32), L.var("q0", int32)
        L.emit(For(n0, ix.c32(0), ix.c32(N), ix.c32(TILE),
                   [For(q0, ix.c32(0), ix.c32(KW), ix.c32(TILE),
                        [Transpose(bw, ix.add(ix.mul(q0, N), n0), N, xw,
                                   ix.add(ix.mul(n0, KW), q0), KW, TILE)])]))
        return bw, 1, N
    bp = L.array("bpack", part, K * N)
    q, n = L.var("q", int32), L.var("n", int32)
    body: list[Stmt] = [Comment(VECTOR_HINT)]
    for r in range(g):
        e = L.var("eb", int32)
        row = ix.add(ix.mul(q, g), ix.c32(r))
        body += [Assign(e, ix.flatten([row, n], b.shape)),
                 ArrayStore(bp, ix.add(ix.add(ix.mul(q, g * N), ix.mul(n, g)), ix.c32(r)),
                            _bits(value(e, [row, n]), kind))]
    L.emit(For(q, ix.c32(0), ix.c32(KW), ix.c32(1),
               [For(n, ix.c32(0), ix.c32(N), ix.c32(1), body)]))
    return bp, g, g * N


def tile_dot(L: LoweringContext, op: tile.Op, fallback: Callable) -> None:
    """The matrix-unit dot where the types, shapes and target allow it, else `fallback`."""
    if not takes(L.target, op):
        fallback(L, op)
        return
    kind = tile_kind(op)
    acc_t, g, _ = TILE_DOT_KINDS[kind]
    a, b = op.operands[:2]
    M, K = a.shape
    N = b.shape[1]
    L.close()
    a_val, b_val = _operand(L, a), _operand(L, b)
    zero = is_zero_const(L.canon(op.operands[-1]))
    out = dot_output(L, op, acc_t, M * N, fill=not zero)

    ap = _rows_of_k(L, "apack", a, a_val, kind, M, K, lambda m, k: [m, k])
    bp, b_at, b_stride = _pack_b(L, b, b_val, kind, K, N)
    rows, cols = choose_block(M, N)
    m0, n0 = L.var("m0", int32), L.var("n0", int32)
    block = TileDot(kind, out, ix.add(ix.mul(m0, N), n0), N, ap, ix.mul(m0, K), K,
                    bp, ix.mul(n0, b_at), b_stride, rows, cols, K, zero)
    # n0 outside m0: a block column of b's copy (K x cols values) stays in L1 while the
    # row blocks of a's copy stream past it
    L.emit(For(n0, ix.c32(0), ix.c32(N), ix.c32(cols),
               [For(m0, ix.c32(0), ix.c32(M), ix.c32(rows), [block])]))
    L.regs[op.result.id] = out
