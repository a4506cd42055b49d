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

The j loop is contiguous in b and vectorises into NR / W vectors of W floats; the constant i
and j loops are unrolled and `blk` becomes MR * NR / W vector registers (with AVX-512 and 8 x 32:
16 accumulators, 2 loads of b and 8 broadcasts of a per 16 FMAs).  A transposed b (a view
such as `dot(q, trans(k))`) is first packed into a contiguous K x N array, so that the inner
loop never gathers.  Cache blocking across K is the kernel's own loop over BLOCK_K.

Each output element still sees the same fused multiply-adds in the same k order as the generic
and row strategies (bitwise equal results).  Integer and 16-bit-accumulator dots use the row
strategy.
"""

from __future__ import annotations

from kdsl.ir import tile
from kdsl.ir.loop import ArrayStore, Assign, Cast, Comment, Expr, Fma, For, Index, Stmt
from kdsl.ir.types import float32, int32

from . import lower_index as ix
from .lower_elementwise import HALF, register_type

# Block shapes, best first: the first (MR, NR) dividing (M, N) wins.  NR is a multiple of the
# widest SIMD width (16 float32 with AVX-512; 2 x 8 with AVX2).
BLOCKS: tuple[tuple[int, int], ...] = (
    (8, 32), (4, 32), (8, 16), (4, 16), (2, 16), (4, 8), (2, 8), (1, 8), (1, 4), (1, 2),
    (1, 1))


# The first statement of the vector (NR) loop: backends that understand it keep that loop for
# the vectoriser instead of unrolling it (backends/llvm.py `_LOOP_HINTS`); others ignore it.
SIMD_HINT = "simd"


def _widen(x: Expr, t) -> Expr:
    return x if x.dtype == t else Cast(x, t)


def _contiguous(L, v: tile.Value) -> bool:
    """Whether `v` is read from its own row-major storage (no gather in the view)."""
    base, _ = L.view(v)
    return base is L.canon(v) and base.shape == v.shape


def cpu_dot(L, op: tile.Op) -> None:
    a, b, c = op.operands
    t = register_type(op.result.type)
    if t != float32 or op.result.elem in HALF:
        from .lower_dot import rows_dot  # integer, float64 and 16-bit accumulators

        rows_dot(L, op)
        return
    M, K = a.shape
    N = b.shape[1]
    L.close()
    A, B = L.addressable(L.view(a)[0], L.view(b)[0])
    if not _contiguous(L, b):  # pack b (e.g. a transposed view) as contiguous K x N
        packed = L.array("bpack", t, K * N)
        g = L.open_group(K * N)
        kk, nn = ix.unflatten(g.e, (K, N))
        g.body.append(ArrayStore(packed, g.k, _widen(Index(B, L.at(b, [kk, nn])[1]), t)))
        L.close()
        B = packed

        def b_at(k: Expr, n: Expr) -> Expr:
            return ix.add(ix.mul(k, N), n)
    else:
        def b_at(k: Expr, n: Expr) -> Expr:
            return L.at(b, [k, n])[1]
    acc = L.canon(c)
    if L.users.get(acc.id) == [op] and acc.id in L.regs and L.regs[acc.id].dtype == t:
        out = L.regs[acc.id]  # the accumulator dies here: update its array in place
    else:
        out = L.array(op.result.name or "dot", t, M * N)
        g = L.open_group(M * N)
        g.body.append(ArrayStore(out, g.k, _widen(L.read(c), t)))
        L.close()
    MR, NR = next((mr, nr) for mr, nr in BLOCKS if M % mr == 0 and N % nr == 0)
    blk = L.array("blk", t, MR * NR)
    m0, n0, kk = L.var("m0", int32), L.var("n0", int32), L.var("kk", int32)
    i, j = L.var("i", int32), L.var("j", int32)
    x = L.var("a", t)

    def block_loops(body: list[Stmt]) -> Stmt:
        return For(i, ix.c32(0), ix.c32(MR), ix.c32(1),
                   [For(j, ix.c32(0), ix.c32(NR), ix.c32(1), body)])

    o_at = ix.add(ix.mul(ix.add(m0, i), N), ix.add(n0, j))
    b_at_ = ix.add(ix.mul(i, NR), j)
    load = block_loops([ArrayStore(blk, b_at_, Index(out, o_at))])
    save = block_loops([ArrayStore(out, o_at, Index(blk, b_at_))])
    y = _widen(Index(B, b_at(kk, ix.add(n0, j))), t)
    fma = For(j, ix.c32(0), ix.c32(NR), ix.c32(1),
              [Comment(SIMD_HINT), ArrayStore(blk, b_at_, Fma(x, y, Index(blk, b_at_)))])
    rows = For(i, ix.c32(0), ix.c32(MR), ix.c32(1),
               [Assign(x, _widen(Index(A, L.at(a, [ix.add(m0, i), kk])[1]), t)), fma])
    kloop = For(kk, ix.c32(0), ix.c32(K), ix.c32(1), [rows])
    L.emit(For(m0, ix.c32(0), ix.c32(M), ix.c32(MR),
               [For(n0, ix.c32(0), ix.c32(N), ix.c32(NR), [load, kloop, save])]))
    L.regs[op.result.id] = out
