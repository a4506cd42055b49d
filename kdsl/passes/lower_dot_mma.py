"""Tensor-core `dot`: warp-level `mma` (the strategy of the "tensor_cores" capability).

A target with tensor cores (CUDA, sm_80+) computes `dot(a: MxK, b: KxN, acc: MxN)` with the
warp-collective Loop IR intrinsics of `MMA_KINDS` when the shapes are multiples of the
instruction's tile and the types match one of:

  a, b                       acc      intrinsic (PTX)                                  tile
  float16                    float32  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32  16x8x16
  bfloat16                   float32  mma.sync.aligned.m16n8k16.row.col.f32.bf16...      16x8x16
  float32, precision "tf32"  float32  mma.sync.aligned.m16n8k8.row.col.f32.tf32...       16x8x8
  int8                       int32    mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32    16x8x32

Anything else (float32 "ieee", float64, ragged shapes, fewer than a warp of threads, too little
shared memory) uses the fallback strategy (the generic one), so fp32 stays exact by default.

Data movement (correctness first, every step a plain Loop IR statement):
1. a and b are made addressable (shared copies, `Lowerer.addressable`); a transposed operand is
   read through its source's storage with permuted coordinates (`Lowerer.at`).
2. the accumulator is written to a shared M*N array `acc_sh` in the lowering's layout (skipped
   when it is the constant 0, the `dot(a, b)` case); barrier.
3. each warp takes 16x8 output tiles `tile = warp, warp + W, ...` (W = threads / 32); lane
   `lane` holds the C fragment elements `C_LAYOUT` (4 values) in variables, loads its A and B
   fragment elements from the shared copies and runs the intrinsic for k0 = 0, KK, ..., K - KK,
   then writes its 4 results back into `acc_sh` (each element is read and written by one lane).
4. barrier; the dot's result is `acc_sh[e]` in an element group of numel M*N (so it fuses with
   what follows, exactly like the generic strategy's result).

Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k*"): with `g = lane >> 2` (group)
and `t = lane & 3` (thread in group), element i of a lane's fragment sits at (row, col) =
(rg*g + rt*t + rc, cg*g + ct*t + cc) for the coefficients in `Layout`.  `mma_reference` is a
NumPy model of one warp's instruction built on the same tables: the Loop IR simulator runs it
(`INTRINSICS`), and the tests check the tables against the ISA's statement of the layouts.

The registers hold float32 values already rounded to float16/bfloat16 (Loop IR rule), so the
C spelling's conversion to 16-bit halves for the instruction is exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kdsl.ir import tile
from kdsl.ir.loop import ArrayStore, Assign, Cast, Const, Expr, For, Index, Intrinsic
from kdsl.ir.loop_interp import INTRINSICS, IntrinsicSim
from kdsl.ir.types import DType, bfloat16, float16, float32, int8, int32

from . import lower_index as ix
from .lower_elementwise import register_type

Coef = tuple[int, int, int]  # (g, t, constant) coefficients of one coordinate


@dataclass(frozen=True)
class Layout:
    """Per fragment element i: (row coefficients, column coefficients)."""

    elems: tuple[tuple[Coef, Coef], ...]

    def coords(self, lane: int) -> list[tuple[int, int]]:
        g, t = lane >> 2, lane & 3
        return [(rg * g + rt * t + rc, cg * g + ct * t + cc)
                for (rg, rt, rc), (cg, ct, cc) in self.elems]


def _layout(n: int, row: Callable[[int], Coef], col: Callable[[int], Coef]) -> Layout:
    return Layout(tuple((row(i), col(i)) for i in range(n)))


# C/D (float32 or int32) of every m16n8 shape: row g (+8 for c2, c3), col 2t + (i & 1).
C_LAYOUT = _layout(4, lambda i: (1, 0, 8 * (i >> 1)), lambda i: (0, 2, i & 1))


@dataclass(frozen=True)
class MmaKind:
    """One warp-level mma instruction: its tile, operand types and fragment layouts."""

    name: str           # Loop IR intrinsic name
    m: int
    n: int
    k: int
    acc: DType          # accumulator / result type (register type)
    a: Layout           # A (m x k, row-major)
    b: Layout           # B (k x n, "col": each lane holds a column's k elements)
    convert: Callable[[np.ndarray], np.ndarray]  # what the instruction sees of an input value


def _f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32).astype(np.float16).astype(np.float64)


def _bf16_truncate(x: np.ndarray) -> np.ndarray:
    # The C spelling keeps the upper 16 bits (exact for values already rounded to bfloat16).
    u = np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return u.view(np.float32).astype(np.float64)


def _tf32_rna(x: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32: round to 10 explicit mantissa bits, ties away from zero."""
    u = np.asarray(x, np.float32).view(np.uint32)
    r = (u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    finite = (u & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    return np.where(finite, r, u).view(np.float32).astype(np.float64)


_A16 = _layout(8, lambda i: (1, 0, 8 * ((i >> 1) & 1)), lambda i: (0, 2, (i & 1) + 8 * (i >> 2)))
_B16 = _layout(4, lambda i: (0, 2, (i & 1) + 8 * (i >> 1)), lambda i: (1, 0, 0))

MMA_KINDS: dict[str, MmaKind] = {
    "float16": MmaKind("mma_m16n8k16_f32_f16", 16, 8, 16, float32, _A16, _B16, _f16),
    "bfloat16": MmaKind("mma_m16n8k16_f32_bf16", 16, 8, 16, float32, _A16, _B16, _bf16_truncate),
    "tf32": MmaKind(
        "mma_m16n8k8_f32_tf32", 16, 8, 8, float32,
        _layout(4, lambda i: (1, 0, 8 * (i & 1)), lambda i: (0, 1, 4 * (i >> 1))),
        _layout(2, lambda i: (0, 1, 4 * i), lambda i: (1, 0, 0)), _tf32_rna),
    "int8": MmaKind(
        "mma_m16n8k32_s32_s8", 16, 8, 32, int32,
        _layout(16, lambda i: (1, 0, 8 * ((i >> 2) & 1)), lambda i: (0, 4, (i & 3) + 16 * (i >> 3))),
        _layout(8, lambda i: (0, 4, (i & 3) + 16 * (i >> 2)), lambda i: (1, 0, 0)),
        lambda x: np.asarray(x, np.int64)),
}


def mma_kind(op: tile.Op) -> MmaKind | None:
    """The instruction for this dot's types (shapes and target are checked by the caller)."""
    a_elem, acc_elem = op.operands[0].type.elem, op.result.type.elem
    if a_elem in (float16, bfloat16) and acc_elem == float32:
        return MMA_KINDS[a_elem.name]
    if a_elem == float32 and acc_elem == float32 and op.attrs.get("precision") == "tf32":
        return MMA_KINDS["tf32"]
    if a_elem == int8 and acc_elem == int32:
        return MMA_KINDS["int8"]
    return None


# ------------------------------------------------------------------------- NumPy model


def mma_reference(kind: MmaKind, lanes: list[list]) -> list[list]:
    """One warp's `D = A @ B + C`: `lanes[l]` is lane l's arguments (A, B, C fragment elements in
    order); returns each lane's D fragment.  A, B, C are assembled through the layouts (an
    element claimed twice with different values is an error), products are exact and summed
    in float64 (int64 for int8, wrapping to int32), then rounded once to the accumulator."""
    na, nb = len(kind.a.elems), len(kind.b.elems)
    mats = [np.full((kind.m, kind.k), np.nan), np.full((kind.k, kind.n), np.nan),
            np.full((kind.m, kind.n), np.nan)]
    for lane, args in enumerate(lanes):
        parts = (args[:na], args[na:na + nb], args[na + nb:])
        for mat, layout, vals in zip(mats, (kind.a, kind.b, C_LAYOUT), parts):
            for (r, c), v in zip(layout.coords(lane), vals):
                if not np.isnan(mat[r, c]) and mat[r, c] != float(v):
                    raise AssertionError(f"{kind.name}: element ({r}, {c}) given twice")
                mat[r, c] = float(v)
    a, b, c = mats
    if np.isnan(a).any() or np.isnan(b).any():
        raise AssertionError(f"{kind.name}: the lanes do not cover the A/B tiles")
    if kind.acc == int32:
        d64 = kind.convert(a.astype(np.int64)) @ kind.convert(b.astype(np.int64)) + c.astype(
            np.int64)
        d = ((d64 + 2**31) % 2**32 - 2**31).astype(np.int32)
    else:
        d = (kind.convert(a) @ kind.convert(b) + c).astype(np.float32)
    return [[d[r, col] for r, col in C_LAYOUT.coords(lane)] for lane in range(len(lanes))]


for _kind in MMA_KINDS.values():
    INTRINSICS[_kind.name] = IntrinsicSim(
        lambda lanes, _k=_kind: mma_reference(_k, lanes), warp=True)


# ---------------------------------------------------------------------------- strategy


def _coord(coef: Coef, g: Expr, t: Expr, base: Expr) -> Expr:
    rg, rt, rc = coef
    return ix.add(ix.add(base, ix.add(ix.mul(g, rg), ix.mul(t, rt))), ix.c32(rc))


def _is_zero(v: tile.Value) -> bool:
    op = v.owner
    return isinstance(op, tile.Op) and op.kind == "const" and op.attrs.get("value") == 0


def applicable(L, op: tile.Op) -> MmaKind | None:
    """The instruction to use for `op` on L's target, or None for the fallback."""
    kind = mma_kind(op)
    a, b, _ = op.operands
    (M, K), N = a.shape, b.shape[1]
    ws = L.target.warp_size
    if kind is None or ws != 32 or L.T % ws or M % kind.m or N % kind.n or K % kind.k:
        return None
    # Upper bound of what the strategy adds (the operand copies may exist already).
    need = sum(v.type.numel * register_type(v.type).itemsize for v in (a, b)) + M * N * 4
    return kind if L.shared_bytes + need <= L.target.shared_bytes else None


def tensor_core_dot(L, op: tile.Op, fallback: Callable) -> None:
    """Lower `dot` with warp-level mma (see the module docstring), else with `fallback`."""
    kind = applicable(L, op)
    if kind is None:
        fallback(L, op)
        return
    a, b, c = op.operands
    (M, K), N = a.shape, b.shape[1]
    t = kind.acc
    L.close()
    A, B = L.addressable(L.view(a)[0], L.view(b)[0])
    D = L.shared("acc_sh", t, M * N)
    zero = _is_zero(L.canon(c))
    if not zero:
        g = L.open_group(M * N)
        x = L.read(c)
        g.body.append(ArrayStore(D, g.e, x if x.dtype == t else Cast(x, t)))
        L.close()
        L.barrier()
    warp, lane, grp, tig = (L.var(n, int32) for n in ("warp", "lane", "grp", "tig"))
    L.emit(Assign(warp, ix.div(L.tid, 32)))
    L.emit(Assign(lane, ix.mod(L.tid, 32)))
    L.emit(Assign(grp, ix.div(lane, 4)))
    L.emit(Assign(tig, ix.mod(lane, 4)))
    tiles_n = N // kind.n
    tile_var, r0, c0, k0 = (L.var(n, int32) for n in ("mt", "r0", "c0", "k0"))
    d = [L.var(f"d{i}", t) for i in range(len(C_LAYOUT.elems))]
    d_at = [ix.add(ix.mul(_coord(rc, grp, tig, r0), N), _coord(cc, grp, tig, c0))
            for rc, cc in C_LAYOUT.elems]
    args: list[Expr] = []
    for rc, cc in kind.a.elems:
        args.append(Index(A, L.at(a, [_coord(rc, grp, tig, r0), _coord(cc, grp, tig, k0)])[1]))
    for rc, cc in kind.b.elems:
        args.append(Index(B, L.at(b, [_coord(rc, grp, tig, k0), _coord(cc, grp, tig, c0)])[1]))
    inner = For(k0, ix.c32(0), ix.c32(K), ix.c32(kind.k), [Intrinsic(kind.name, args + d, d)])
    body = [Assign(r0, ix.mul(ix.div(tile_var, tiles_n), kind.m)),
            Assign(c0, ix.mul(ix.mod(tile_var, tiles_n), kind.n))]
    body += [Assign(v, Const(0.0 if t.is_float else 0, t) if zero else Index(D, at))
             for v, at in zip(d, d_at)]
    body += [inner] + [ArrayStore(D, at, v) for v, at in zip(d, d_at)]
    tiles = (M // kind.m) * tiles_n
    L.emit(For(tile_var, warp, ix.c32(tiles), ix.c32(L.T // 32), body))
    L.barrier()
    g = L.open_group(M * N)
    g.ops.add(id(op))
    L.bind(op.result, Index(D, g.e), g)


__all__ = ["C_LAYOUT", "MMA_KINDS", "Layout", "MmaKind", "applicable", "mma_kind",
           "mma_reference", "tensor_core_dot"]
