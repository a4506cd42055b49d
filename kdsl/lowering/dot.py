"""Lowering of `dot(a: MxK, b: KxN, acc: MxN)`.

A strategy is chosen from the target's capabilities (`DOT_STRATEGIES`: capability -> strategy,
first match wins); otherwise one thread (the CPU) uses `rows_dot`, whose innermost loop is
contiguous and vectorises, and several threads use the generic strategy.  Faster
ones (tensor cores, CPU micro-kernels) register here without touching the rest of the lowering.

Generic: a and b are made addressable (shared copies when T > 1; a transposed operand is read
through its source's storage, see `Lowerer.view`); output element e = (m, n) is
a member of a group of numel M*N, computed as `acc[e] + sum_k a[m*K+k] * b[k*N+n]` with an inner
loop over k: `Fma` for floats, multiply-add for integers (int8 inputs widen to the int32
accumulator).  16-bit float inputs are already float32 in registers; a float16/bfloat16
accumulator is accumulated in float32 and rounded once at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from kdsl.ir import tile
from kdsl.ir.loop import ArrayStore, Assign, Binary, Expr, Fma, For, Index, Stmt
from kdsl.ir.types import int32
from kdsl.target import Target

from . import index as ix
from .context import LoweringContext
from .dot_cpu import cpu_dot, dot_output, packs_b, widen
from .dot_mma import tensor_core_dot
from .dot_sparse import generic_sparse_dot, sparse_tensor_core_dot
from .dot_tile import takes as tile_takes
from .dot_tile import tile_dot
from .elementwise import HALF, register_type, rounded
from .sparse_dot_cpu import cpu_sparse_dot

DotStrategy = Callable[[object, tile.Op], None]


def generic_dot(L: LoweringContext, op: tile.Op) -> None:
    a, b, c = op.operands
    M, K = a.shape
    N = b.shape[1]
    t = register_type(op.result.type)
    L.close()
    a_base, b_base = L.view(a)[0], L.view(b)[0]  # dot(p, trans(x)) reads x's storage
    A, B = L.addressable(a_base, b_base)
    g = L.open_group(M * N)
    g.ops.add(id(op))
    L.note_addressed([A, B])
    m, n = ix.unflatten(g.e, (M, N))
    acc = L.var("acc", t)
    g.body.append(Assign(acc, widen(L.read(c), t)))
    kk = L.var("kk", int32)
    x = widen(Index(A, L.at(a, [m, kk])[1]), t)
    y = widen(Index(B, L.at(b, [kk, n])[1]), t)
    step: Expr = Fma(x, y, acc) if t.is_float else Binary("add", acc, Binary("mul", x, y))
    body: list[Stmt] = [Assign(acc, step)]
    g.body.append(For(kk, ix.c32(0), ix.c32(K), ix.c32(1), body))
    L.bind(op.result, rounded(acc, op.result.type.elem), g)


def rows_dot(L: LoweringContext, op: tile.Op) -> None:
    """One thread (the CPU): `out = acc; for m, k: out[m, :] += a[m, k] * b[k, :]`.  The
    innermost loop runs over contiguous n, so it vectorises; each output element still sees
    the same sequence of fused multiply-adds as in `generic_dot` (bitwise equal results)."""
    a, b = op.operands[:2]
    M, K = a.shape
    N = b.shape[1]
    t = register_type(op.result.type)
    L.close()
    A, B = L.addressable(L.view(a)[0], L.view(b)[0])
    out = dot_output(L, op, t, M * N)
    m, kk, n = L.var("m", int32), L.var("kk", int32), L.var("n", int32)
    x = L.var("a", t)
    at = ix.add(ix.mul(m, N), n)
    y = widen(Index(B, L.at(b, [kk, n])[1]), t)
    update = Fma(x, y, Index(out, at)) if t.is_float else \
        Binary("add", Index(out, at), Binary("mul", x, y))
    inner = For(n, ix.c32(0), ix.c32(N), ix.c32(1), [ArrayStore(out, at, update)])
    middle = For(kk, ix.c32(0), ix.c32(K), ix.c32(1),
                 [Assign(x, widen(Index(A, L.at(a, [m, kk])[1]), t)), inner])
    L.emit(For(m, ix.c32(0), ix.c32(M), ix.c32(1), [middle]))
    if op.result.elem in HALF:  # a 16-bit accumulator is rounded once, at the end
        g = L.open_group(M * N)
        g.body.append(ArrayStore(out, g.k, rounded(Index(out, g.k), op.result.elem)))
        L.close()
    L.regs[op.result.id] = out


# Capability -> strategy, first match wins (tensor cores, CPU micro-kernels plug in here).
DOT_STRATEGIES: dict[str, DotStrategy] = {
    # warp-level mma where types and shapes allow it, else the generic strategy
    "tensor_cores": partial(tensor_core_dot, fallback=generic_dot),
    # a CPU's matrix unit (AMX) for bfloat16 and int8 dots (dot_tile.py), else the CPU's
    # micro-kernel
    "tile_dot": partial(tile_dot, fallback=partial(cpu_dot, fallback=rows_dot)),
    # one thread (the CPU): register-blocked micro-kernel (dot_cpu.py)
    "cpu_microkernel": partial(cpu_dot, fallback=rows_dot),
}


def packed_operands(target: Target, op: tile.Op,
                    canon: Callable[[tile.Value], tile.Value]) -> list[tile.Value]:
    """The operands of dot `op` that its strategy on `target` copies itself, element by
    element, in loops of its own (so that a load only the dot reads is recomputed there
    rather than stored: kdsl/lowering/lowerer.py `_addressed`): both operands of a
    matrix-unit dot (dot_tile.py), b of the CPU micro-kernel's float32 dot (dot_cpu.py
    `packs_b`); `canon` gives a value's canonical value."""
    if op.kind != "dot":
        return []
    if tile_takes(target, op):
        return list(op.operands[:2])
    b = op.operands[1]
    return [b] if packs_b(target, op, canon(b)) else []


def dot_strategy(target: Target) -> DotStrategy:
    for cap, strategy in DOT_STRATEGIES.items():
        if target.has(cap):
            return strategy
    # one thread walks whole tiles: the row order keeps the innermost loop contiguous
    return rows_dot if target.tile_loops else generic_dot


# The same for `sparse_dot` (2:4-sparse a): mma.sp where it applies (dot_sparse.py), the CPU's
# gather micro-kernel (sparse_dot_cpu.py), else the generic loop of FMAs over the kept values.
SPARSE_DOT_STRATEGIES: dict[str, DotStrategy] = {
    "tensor_cores": partial(sparse_tensor_core_dot, fallback=generic_sparse_dot),
    "cpu_microkernel": partial(cpu_sparse_dot, fallback=generic_sparse_dot),
}


def sparse_dot_strategy(target: Target) -> DotStrategy:
    for cap, strategy in SPARSE_DOT_STRATEGIES.items():
        if target.has(cap):
            return strategy
    return generic_sparse_dot
