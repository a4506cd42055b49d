"""Lowering of `sparse_dot(a: MxK/2, meta: MxK/2, b: KxN, acc: MxN)` (kdsl/language/
sparse_dot.py): a 2:4-sparse A, given by its kept values and their indices 0-3 in each group of
4, times a dense b.

Generic strategy (every target): a, meta and b are made addressable and output element (m, n)
is `acc[m, n] + sum_j a[m, j] * b[4 * (j // 2) + (meta[m, j] & 3), n]`, one `Fma` per kept
value (half the multiplies of the dense product).

Sparse tensor cores (capability "tensor_cores", CUDA sm_80+, float16/bfloat16 operands, a
float32 accumulator, M, N, K multiples of 16, 8, 32): the warp-level `mma.sp` m16n8k32, which
multiplies a 16x32 2:4-sparse A, held as its 16x16 kept values, by a 32x8 B.  Per K step of 32
each warp loads, for each of its 16x8 output tiles, the A fragment of kept values (the layout
of the dense m16n8k16 A over the compressed columns), the B fragment (32 x 8) and builds the
metadata register from `meta` (below), then issues the instruction; the accumulator goes
through a shared buffer as in the dense strategy (kdsl/lowering/dot_mma.py), here only in
one pass whose whole M x N result fits the exchange buffer (else the generic strategy).

Metadata (PTX ISA, "Sparse matrix storage" and "Matrix fragments for sparse mma.m16n8k32 with
.f16 and .bf16 types"; sparsity selector 0): lane l = 4g + t with t in {0, 1} supplies a 32-bit
register whose bits [16h + 4c, 16h + 4c + 4) describe row g + 8h of the tile and group of four
8t + 4c .. of its 32 columns (c = 0..3): the index of its first kept value in bits 0-1, of the
second in bits 2-3 (they must be increasing).  Lanes with t in {2, 3} pass a value the
instruction ignores.  `mma_sp_reference` is the NumPy model of one warp's instruction built on
the same tables; the Loop IR simulator runs it, and tests/codegen/test_cuda_mma_sp.py checks
the tables against the ISA's statement of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kdsl.ir import tile
from kdsl.ir.loop import (
    ArrayStore,
    Assign,
    Binary,
    Cast,
    Const,
    Expr,
    Fma,
    For,
    If,
    Index,
    Intrinsic,
    Stmt,
)
from kdsl.ir.loop_interp import IntrinsicSim
from kdsl.ir.types import float32, int32

from . import index as ix
from .analysis import is_zero_const
from .dot_mma import (
    C_LAYOUT,
    EXCHANGE_BYTES,
    MAX_ACC_REGS,
    MMA_KINDS,
    Layout,
    _bf16_truncate,
    _f16,
    _layout,
    _warp_grid,
)
from .elementwise import register_type


def _widen(x: Expr, t) -> Expr:
    return x if x.dtype == t else Cast(x, t)


def _index(L, arr, v: tile.Value, coords: list[Expr]) -> Expr:
    return Index(arr, L.at(v, coords)[1])


def _kept_row(L, E, e: tile.Value, m: Expr, j: Expr) -> Expr:
    """The row of b that kept value j of row m meets: 4 * (j // 2) + (meta[m, j] & 3)."""
    idx = Binary("and", _widen(_index(L, E, e, [m, j]), int32), ix.c32(3))
    return ix.add(ix.mul(ix.div(j, 2), 4), idx)


# ------------------------------------------------------------------------------- generic


def generic_sparse_dot(L, op: tile.Op) -> None:
    a, e, b, c = op.operands
    M, H = a.shape
    N = b.shape[1]
    t = register_type(op.result.type)
    L.close()
    A, E, B = L.addressable(L.view(a)[0], L.view(e)[0], L.view(b)[0])
    g = L.open_group(M * N)
    g.ops.add(id(op))
    L.note_addressed([A, E, B])
    m, n = ix.unflatten(g.e, (M, N))
    acc = L.var("acc", t)
    g.body.append(Assign(acc, _widen(L.read(c), t)))
    jj = L.var("jj", int32)
    x = _widen(_index(L, A, a, [m, jj]), t)
    y = _widen(_index(L, B, b, [_kept_row(L, E, e, m, jj), n]), t)
    g.body.append(For(jj, ix.c32(0), ix.c32(H), ix.c32(1), [Assign(acc, Fma(x, y, acc))]))
    L.bind(op.result, acc, g)


# ------------------------------------------------------------------ the mma.sp instruction


@dataclass(frozen=True)
class SparseMmaKind:
    """`mma.sp` m16n8k32: the A fragment over the 16x16 kept values, B over 32 x 8."""

    name: str
    a: Layout
    b: Layout
    convert: Callable[[np.ndarray], np.ndarray]
    m: int = 16
    n: int = 8
    k: int = 32


# B (32 x 8, 16-bit): element i at row 2t + (i & 1) + 8 * (i >> 1), column g
_B32 = _layout(8, lambda i: (0, 2, (i & 1) + 8 * (i >> 1)), lambda i: (1, 0, 0))

SPARSE_MMA_KINDS: dict[str, SparseMmaKind] = {
    "float16": SparseMmaKind("mma_sp_m16n8k32_f32_f16", MMA_KINDS["float16"].a, _B32, _f16),
    "bfloat16": SparseMmaKind("mma_sp_m16n8k32_f32_bf16", MMA_KINDS["bfloat16"].a, _B32,
                              _bf16_truncate),
}
META_LANES = (0, 1)  # sparsity selector 0: lanes 4g and 4g + 1 supply the metadata


def meta_fields(lane: int) -> list[tuple[int, int, int]]:
    """(bit offset, row, compressed column) of each 2-bit index in lane `lane`'s metadata
    register (empty for lanes the instruction does not read): row g + 8h, the s-th kept value
    of group 8t + 4c of 32 columns, i.e. compressed column 2 * (4t + c) + s."""
    g, t = lane >> 2, lane & 3
    if t not in META_LANES:
        return []
    return [(16 * h + 4 * c + 2 * s, g + 8 * h, 2 * (4 * t + c) + s)
            for h in (0, 1) for c in range(4) for s in (0, 1)]


def mma_sp_reference(kind: SparseMmaKind, lanes: list[list]) -> list[list]:
    """One warp's `D = A @ B + C` with A 2:4-sparse: `lanes[l]` is lane l's arguments (A, B, C
    fragment elements, then the metadata register); the kept values and their indices are
    assembled through the layouts into the dense 16x32 A (an element claimed twice with
    different values is an error, and so are a group's indices that are not increasing), then
    products are summed in float64 and rounded once to float32."""
    na, nb = len(kind.a.elems), len(kind.b.elems)
    vals = np.full((kind.m, kind.k // 2), np.nan)
    idx = np.full((kind.m, kind.k // 2), -1)
    b = np.full((kind.k, kind.n), np.nan)
    c = np.full((kind.m, kind.n), np.nan)
    for lane, args in enumerate(lanes):
        parts = (args[:na], args[na:na + nb], args[na + nb:na + nb + 4])
        for mat, layout, xs in zip((vals, b, c), (kind.a, kind.b, C_LAYOUT), parts):
            for (r, col), v in zip(layout.coords(lane), xs):
                if not np.isnan(mat[r, col]) and mat[r, col] != float(v):
                    raise AssertionError(f"{kind.name}: element ({r}, {col}) given twice")
                mat[r, col] = float(v)
        word = int(args[-1]) & 0xFFFFFFFF
        for bit, r, col in meta_fields(lane):
            idx[r, col] = (word >> bit) & 3
    if np.isnan(vals).any() or np.isnan(b).any() or (idx < 0).any():
        raise AssertionError(f"{kind.name}: the lanes do not cover the A/B tiles and metadata")
    if (idx[:, 0::2] >= idx[:, 1::2]).any():
        raise AssertionError(f"{kind.name}: a group's metadata indices are not increasing")
    dense = np.zeros((kind.m, kind.k))
    rows = np.arange(kind.m)[:, None]
    cols = 4 * (np.arange(kind.k // 2) // 2)[None, :] + idx
    dense[rows, cols] = kind.convert(vals)
    d = (dense @ kind.convert(b) + c).astype(np.float32)
    return [[d[r, col] for r, col in C_LAYOUT.coords(lane)] for lane in range(len(lanes))]


#: how the Loop IR simulator runs the sparse mma intrinsics (kernel.intrinsics, lowerer.py)
SIMULATIONS: dict[str, IntrinsicSim] = {
    k.name: IntrinsicSim(lambda lanes, _k=k: mma_sp_reference(_k, lanes), warp=True)
    for k in SPARSE_MMA_KINDS.values()}


# ---------------------------------------------------------------------------- strategy


@dataclass(frozen=True)
class SparsePlan:
    """The warps form a wm x wn grid, warp (wi, wj) owning the pm x pn block of 16x8 tiles at
    tile row wi*pm, tile column wj*pn (warps beyond wm*wn idle); one pass, one exchange."""

    kind: SparseMmaKind
    wm: int
    wn: int
    pm: int
    pn: int


def plan(L, op: tile.Op) -> SparsePlan | None:
    """The cut of `op` on L's target, or None when mma.sp does not apply."""
    a, e, b, _ = op.operands
    kind = SPARSE_MMA_KINDS.get(a.elem.name)
    (M, _), (K, N) = a.shape, b.shape
    if kind is None or b.elem != a.elem or op.result.elem != float32:
        return None
    if not L.target.has("tensor_cores") or L.target.warp_size != 32 or L.T % 32:
        return None
    if M % kind.m or N % kind.n or K % kind.k:
        return None
    wm, wn = _warp_grid(M // 16, N // 8, L.T // 32)
    pm, pn = M // 16 // wm, N // 8 // wn
    left = L.shared_left() - sum(
        v.type.numel * register_type(v.type).itemsize for v in (a, e, b))
    if pm * pn * 4 > MAX_ACC_REGS or M * N * 4 > min(left, EXCHANGE_BYTES):
        return None
    return SparsePlan(kind, wm, wn, pm, pn)


def _coord(coef: tuple[int, int, int], g: Expr, t: Expr, base: Expr) -> Expr:
    rg, rt, rc = coef
    return ix.add(ix.add(base, ix.add(ix.mul(g, rg), ix.mul(t, rt))), ix.c32(rc))


def sparse_tensor_core_dot(L, op: tile.Op, fallback: Callable = generic_sparse_dot) -> None:
    """Lower `sparse_dot` with mma.sp (see the module docstring), else with `fallback`."""
    p = plan(L, op)
    if p is None:
        fallback(L, op)
        return
    kind = p.kind
    a, e, b, c = op.operands
    (M, _), (K, N) = a.shape, b.shape
    L.close()
    A, E, B = L.addressable(L.view(a)[0], L.view(e)[0], L.view(b)[0])
    X = L.shared("acc_sh", float32, M * N)
    cv = L.canon(c)
    zero = is_zero_const(cv)
    warp, lane, grp, tig, wi, wj = (L.var(n, int32)
                                    for n in ("warp", "lane", "grp", "tig", "wi", "wj"))
    for v, x in ((warp, ix.div(L.tid, 32)), (lane, ix.mod(L.tid, 32)), (grp, ix.div(lane, 4)),
                 (tig, ix.mod(lane, 4)), (wi, ix.div(warp, p.wn)), (wj, ix.mod(warp, p.wn))):
        L.emit(Assign(v, x))
    acc = [[[L.var(f"d{i}_{j}_{x}", float32) for x in range(4)] for j in range(p.pn)]
           for i in range(p.pm)]
    af = [[L.var(f"a{i}_{x}", register_type(a.type)) for x in range(len(kind.a.elems))]
          for i in range(p.pm)]
    bf = [[L.var(f"b{j}_{x}", register_type(b.type)) for x in range(len(kind.b.elems))]
          for j in range(p.pn)]
    meta = [L.var(f"e{i}", int32) for i in range(p.pm)]
    idle = p.wm * p.wn < L.T // 32  # idle warps skip the warp-collective part

    def warps_only(stmts: list[Stmt]) -> None:
        if idle:
            L.emit(If(Binary("lt", warp, ix.c32(p.wm * p.wn)), stmts))
        else:
            L.emit(*stmts)

    def tile_row(i: int) -> Expr:
        return ix.add(ix.mul(wi, p.pm * 16), ix.c32(16 * i))

    def col(j: int) -> Expr:
        return ix.add(ix.mul(wj, p.pn * 8), ix.c32(8 * j))

    def exchange(into_regs: bool) -> list[Stmt]:
        out: list[Stmt] = []
        for i in range(p.pm):
            for j in range(p.pn):
                for v, (rc, cc) in zip(acc[i][j], C_LAYOUT.elems):
                    at = ix.add(ix.mul(_coord(rc, grp, tig, tile_row(i)), N),
                                _coord(cc, grp, tig, col(j)))
                    out.append(Assign(v, Index(X, at)) if into_regs else ArrayStore(X, at, v))
        return out

    def metadata(i: int, k0: Expr) -> Expr:
        """Lane (grp, tig)'s metadata register for tile row i at K step k0 (in kept-value
        columns: k0 // 2), as `meta_fields` lays it out, for tig in {0, 1}; lanes 2 and 3 of
        a quad build the same word as lanes 0 and 1 (the instruction ignores it)."""
        half = ix.mod(tig, 2)
        word: Expr | None = None
        for h in (0, 1):
            r = ix.add(ix.add(tile_row(i), grp), ix.c32(8 * h))
            for cg in range(4):
                for s in (0, 1):
                    j = ix.add(ix.add(k0, ix.mul(half, 8)), ix.c32(2 * cg + s))
                    idx = Binary("and", _widen(_index(L, E, e, [r, j]), int32), ix.c32(3))
                    part = Binary("shl", idx, ix.c32(16 * h + 4 * cg + 2 * s))
                    word = part if word is None else Binary("or", word, part)
        return word

    def mma_loop() -> Stmt:
        k0 = L.var("k0", int32)   # in kept-value columns; b's rows are 2 * k0 ...
        body: list[Stmt] = []
        for i in range(p.pm):
            for x, (rc, cc) in enumerate(kind.a.elems):
                r, kk = _coord(rc, grp, tig, tile_row(i)), _coord(cc, grp, tig, k0)
                body.append(Assign(af[i][x], _index(L, A, a, [r, kk])))
            body.append(Assign(meta[i], metadata(i, k0)))
        for j in range(p.pn):
            for x, (rc, cc) in enumerate(kind.b.elems):
                kk, n = _coord(rc, grp, tig, ix.mul(k0, 2)), _coord(cc, grp, tig, col(j))
                body.append(Assign(bf[j][x], _index(L, B, b, [kk, n])))
        for i in range(p.pm):
            for j in range(p.pn):
                body.append(Intrinsic(kind.name, af[i] + bf[j] + acc[i][j] + [meta[i]],
                                      acc[i][j]))
        return For(k0, ix.c32(0), ix.c32(K // 2), ix.c32(kind.k // 2), body)

    if zero:
        warps_only([Assign(v, Const(0.0, float32)) for row in acc for frag in row for v in frag])
    else:
        g = L.open_group(M * N)
        x = L.read(c)
        g.body.append(ArrayStore(X, g.e, _widen(x, float32)))
        L.close()
        L.barrier()
        warps_only(exchange(True))
        L.barrier()
    warps_only([mma_loop()])
    warps_only(exchange(False))
    L.barrier()
    g = L.open_group(M * N)
    g.ops.add(id(op))
    L.bind(op.result, Index(X, g.e), g)


__all__ = ["META_LANES", "SPARSE_MMA_KINDS", "SparseMmaKind", "SparsePlan",
           "generic_sparse_dot", "meta_fields", "mma_sp_reference", "plan",
           "sparse_tensor_core_dot"]
