"""Lowering of `dot(a: MxK, b: KxN, acc: MxN)`.

A strategy is chosen from the target's capabilities (`DOT_STRATEGIES`: capability -> strategy,
first match wins); the generic strategy below serves every target and is the default.  Faster
ones (tensor cores, CPU micro-kernels) register here without touching the rest of the lowering.

Generic: a and b are made addressable (shared copies when T > 1); output element e = (m, n) is
a member of a group of numel M*N, computed as `acc[e] + sum_k a[m*K+k] * b[k*N+n]` with an inner
loop over k: `Fma` for floats, multiply-add for integers (int8 inputs widen to the int32
accumulator).  16-bit float inputs are already float32 in registers; a float16/bfloat16
accumulator is accumulated in float32 and rounded once at the end.
"""

from __future__ import annotations

from collections.abc import Callable

from kdsl.ir import tile
from kdsl.ir.loop import Assign, Binary, Cast, Expr, Fma, For, Index, Stmt
from kdsl.ir.types import int32
from kdsl.target import Target

from . import lower_index as ix
from .lower_elementwise import register_type, rounded

DotStrategy = Callable[[object, tile.Op], None]


def _widen(x: Expr, t) -> Expr:
    return x if x.dtype == t else Cast(x, t)


def generic_dot(L, op: tile.Op) -> None:
    a, b, c = op.operands
    M, K = a.shape
    N = b.shape[1]
    t = register_type(op.result.type)
    L.close()
    A, B = L.addressable(a, b)
    g = L.open_group(M * N)
    g.ops.add(id(op))
    L.note_addressed([A, B])
    m, n = ix.unflatten(g.e, (M, N))
    acc = L.var("acc", t)
    g.body.append(Assign(acc, _widen(L.read(c), t)))
    kk = L.var("kk", int32)
    x = _widen(Index(A, ix.add(ix.mul(m, K), kk)), t)
    y = _widen(Index(B, ix.add(ix.mul(kk, N), n)), t)
    step: Expr = Fma(x, y, acc) if t.is_float else Binary("add", acc, Binary("mul", x, y))
    body: list[Stmt] = [Assign(acc, step)]
    g.body.append(For(kk, ix.c32(0), ix.c32(K), ix.c32(1), body))
    L.bind(op.result, rounded(acc, op.result.type.elem), g)


# Capability -> strategy.  Empty for now: every target uses `generic_dot`.
DOT_STRATEGIES: dict[str, DotStrategy] = {}


def dot_strategy(target: Target) -> DotStrategy:
    for cap, strategy in DOT_STRATEGIES.items():
        if target.has(cap):
            return strategy
    return generic_dot
