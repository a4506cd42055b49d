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

Data movement (`plan` -> `MmaPlan`; every step a plain Loop IR statement):
1. a and b get shared copies.  With 16-bit inputs on a target with 16-bit shared arrays
   ("shared_16bit") each is copied in its own type from its view's base (itself, or the
   source of a transpose) in the base's row-major order, rows padded by `PAD16` elements
   (`Copy16`: a [M][K] as [M][K + 8], b [K][N] as [K][N + 8], b = trans(x [N][K]) as
   [N][K + 8]), written by the group that loads them where it can (`Lowerer.stage`; 16-byte
   vector loads become `cp.async` copies straight to shared memory, "cp_async"); the
   fragments are loaded with `ldmatrix.x4` (one per A tile, one per two B tiles; `.trans`
   where K runs down the copy's columns; capability "ldmatrix"), else from copies with K
   along the rows (a base with K down its columns copied transposed) each fragment register
   is one 32-bit `PairBits` read of two consecutive k; either way they go as is to the packed
   form of the instruction (`MmaKind.bits`).  Otherwise the lowering's float32
   copies by flat index (`Lowerer.addressable`), read element by element.
2. the M rows are cut into passes so that a thread holds at most `MAX_ACC_REGS` accumulators;
   in a pass the warps form a wm x wn grid, warp (wi, wj) owning a pm x pn block of 16x8
   tiles whose C fragments are Python-unrolled variables (registers) for the whole K loop.
3. accumulator in: c's rows go, one chunk of `chunk` rows at a time, to a shared buffer and
   from it into the fragments (barriers around each chunk; zeros for `dot(a, b)`).
4. the K steps (unrolled up to `UNROLL_K_STEPS`): each warp loads its pm A and pn B fragments
   once per step and issues pm*pn intrinsics.
5. accumulator out: fragments -> buffer -> the lowering's layout, chunk by chunk.  When one
   buffer holds the whole result it is read lazily by flat index (so it fuses with what
   follows); otherwise the chunks are copied into a register array (the accumulator's own when
   it dies at this dot).

A loop-carried accumulator (`acc = dot(a, b, acc)` in a `for` loop, the accumulator used for
nothing else in the body, one pass) stays in the fragments for the whole loop
(`resident_accumulators`): steps 3 and 5 run once, before and after the loop, instead of at
every iteration.

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
from functools import partial

import numpy as np

from kdsl.ir import tile
from kdsl.ir.loop import (
    Array,
    ArrayStore,
    Assign,
    Binary,
    Cast,
    Const,
    Expr,
    For,
    If,
    Index,
    Intrinsic,
    IntrinsicSim,
    PairBits,
    SharedRow,
    Stmt,
    Var,
)
from kdsl.ir.types import DType, bfloat16, float16, float32, int8, int32, uint32

from . import index as ix
from .analysis import is_zero_const
from .context import LoweringContext
from .elementwise import register_type
from .vector import element_index

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
    # the same instruction with its A and B fragments as packed 16-bit pairs (uint32 each),
    # read with `PairBits` from 16-bit shared copies; "" where the inputs are not 16-bit
    bits: str = ""


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
    "float16": MmaKind("mma_m16n8k16_f32_f16", 16, 8, 16, float32, _A16, _B16, _f16,
                       bits="mma_m16n8k16_f32_f16_bits"),
    "bfloat16": MmaKind("mma_m16n8k16_f32_bf16", 16, 8, 16, float32, _A16, _B16, _bf16_truncate,
                        bits="mma_m16n8k16_f32_bf16_bits"),
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


#: intrinsic name -> how the Loop IR simulator runs it (the lowering records the ones a kernel
#: uses in `Kernel.intrinsics`)
def _unpack(bits: int, fmt: str) -> tuple[float, float]:
    """The two 16-bit values of a packed register (low half first)."""
    halves = (int(bits) & 0xFFFF, (int(bits) >> 16) & 0xFFFF)
    if fmt == "float16":
        return tuple(float(np.array(h, np.uint16).view(np.float16)) for h in halves)
    return tuple(float(np.array(h << 16, np.uint32).view(np.float32)) for h in halves)


def mma_bits_reference(kind: MmaKind, fmt: str, lanes: list[list]) -> list[list]:
    """`mma_reference` with each lane's A and B fragments given as packed pairs."""
    na, nb = len(kind.a.elems) // 2, len(kind.b.elems) // 2
    flat = []
    for args in lanes:
        vals = [x for w in args[:na + nb] for x in _unpack(w, fmt)]
        flat.append(vals + list(args[na + nb:]))
    return mma_reference(kind, flat)


def ldmatrix_reference(lanes: list[list], trans: bool = False) -> list[list]:
    """One warp's `ldmatrix.m8n8.x4.b16`: lane l's argument is the row it addresses (row l % 8
    of matrix l / 8, as eight 16-bit codes); lane l receives, of each matrix j, row l / 4's
    elements 2 (l % 4) and 2 (l % 4) + 1 packed in register j, or with `.trans` column
    l / 4's elements of rows 2 (l % 4) and 2 (l % 4) + 1 (PTX ISA, "ldmatrix")."""
    rows = [args[0] for args in lanes]
    if len(rows) != 32:
        raise AssertionError("ldmatrix: a warp of 32 lanes")
    out = []
    for lane in range(32):
        r, c = lane // 4, 2 * (lane % 4)
        if trans:
            out.append([rows[8 * j + c][r] | rows[8 * j + c + 1][r] << 16 for j in range(4)])
        else:
            out.append([rows[8 * j + r][c] | rows[8 * j + r][c + 1] << 16 for j in range(4)])
    return out


SIMULATIONS: dict[str, IntrinsicSim] = {
    kind.name: IntrinsicSim(partial(mma_reference, kind), warp=True) for kind in MMA_KINDS.values()
}
SIMULATIONS.update({
    kind.bits: IntrinsicSim(partial(mma_bits_reference, kind, fmt), warp=True)
    for fmt, kind in MMA_KINDS.items() if kind.bits
})
SIMULATIONS["ldmatrix_x4"] = IntrinsicSim(ldmatrix_reference, warp=True)
SIMULATIONS["ldmatrix_x4_trans"] = IntrinsicSim(partial(ldmatrix_reference, trans=True),
                                                warp=True)
#: ldmatrix intrinsic by whether the matrices are transposed on the way
_LDMATRIX = {False: "ldmatrix_x4", True: "ldmatrix_x4_trans"}


# ---------------------------------------------------------------------------- strategy

# Accumulator values one thread may hold in registers during a pass (4 per 16x8 tile); more
# rows are split into passes.  128 keeps 8-warp 128x128 tiles in one pass (64 values) with
# room for the fragments and addresses under the 255-register limit.
MAX_ACC_REGS = 128
# Largest exchange buffer (accumulator rows x N) the strategy asks for: beyond it the
# exchange runs in row chunks.  Kept small so that big tiles stay within the static 48 KiB.
EXCHANGE_BYTES = 32 * 1024


@dataclass(frozen=True)
class MmaPlan:
    """How a dot is cut: passes of `rows` rows (a multiple of 16 dividing M); in a pass the
    warps form a `wm` x `wn` grid, warp (wi, wj) owning the `pm` x `pn` block of 16x8 tiles
    at tile row wi*pm, tile column wj*pn (warps beyond wm*wn idle); the accumulator goes
    through a shared buffer of `chunk` rows x N, one chunk at a time."""

    kind: MmaKind
    rows: int
    wm: int
    wn: int
    pm: int
    pn: int
    chunk: int


def _coord(coef: Coef, g: Expr, t: Expr, base: Expr) -> Expr:
    rg, rt, rc = coef
    return ix.add(ix.add(base, ix.add(ix.mul(g, rg), ix.mul(t, rt))), ix.c32(rc))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _warp_grid(tm: int, tn: int, warps: int) -> tuple[int, int]:
    """(wm, wn): the most warps that split tm x tn tiles evenly, then the fewest fragment
    loads per warp (an A fragment is 8 values, a B fragment 4)."""
    grids = [(wm, wn) for wm in _divisors(tm) for wn in _divisors(tn) if wm * wn <= warps]
    return min(grids, key=lambda g: (-g[0] * g[1], 8 * (tm // g[0]) + 4 * (tn // g[1])))


def plan(L: LoweringContext, op: tile.Op) -> MmaPlan | None:
    """The cut of `op` on L's target, or None when the mma strategy does not apply."""
    kind = mma_kind(op)
    a, b, _ = op.operands
    (M, K), N = a.shape, b.shape[1]
    ws = L.target.warp_size
    if kind is None or ws != 32 or L.T % ws or M % kind.m or N % kind.n or K % kind.k:
        return None
    # Upper bound of the operand copies (they may exist already), then what is left.
    left = L.shared_left() - sum(
        v.type.numel * register_type(v.type).itemsize for v in (a, b))
    row_bytes = N * kind.acc.itemsize
    for rows in sorted((16 * d for d in _divisors(M // 16)), reverse=True):
        wm, wn = _warp_grid(rows // 16, N // 8, L.T // 32)
        pm, pn = rows // 16 // wm, N // 8 // wn
        if pm * pn * 4 > MAX_ACC_REGS:
            continue
        fits = [16 * d for d in _divisors(rows // 16)
                if 16 * d * row_bytes <= min(left, EXCHANGE_BYTES)]
        if not fits:
            return None
        return MmaPlan(kind, rows, wm, wn, pm, pn, max(fits))
    return None


def applicable(L: LoweringContext, op: tile.Op) -> MmaKind | None:
    """The instruction to use for `op` on L's target, or None for the fallback."""
    p = plan(L, op)
    return p.kind if p is not None else None


def _frag_at(layout_elem: tuple[Coef, Coef], grp: Expr, tig: Expr, r0: Expr, c0: Expr
             ) -> tuple[Expr, Expr]:
    rc, cc = layout_elem
    return _coord(rc, grp, tig, r0), _coord(cc, grp, tig, c0)


# A dot of at most this many K steps of its instruction is unrolled (constant offsets in the
# fragment loads); BLOCK_K 64 of a 16-bit dot is 4 steps, 128 is 8.
UNROLL_K_STEPS = 8
# Rows of a 16-bit operand copy are padded by 8 elements (16 bytes): the eight rows one
# fragment load touches then start in different banks (a row of 64 halves spans all 32).
PAD16 = 8


@dataclass(frozen=True)
class Copy16:
    """A 16-bit shared copy of a dot operand's view base, with rows of `stride` elements
    (the copy's row length + PAD16): the base in its own row-major order, or its transpose
    (`transposed`, so that K runs along the rows where ldmatrix cannot transpose).
    `k_inner`: the operand's K runs along the copy's rows (consecutive k adjacent)."""

    base: tile.Value
    stride: int
    k_inner: bool
    transposed: bool = False

    @property
    def size(self) -> int:
        return self.base.shape[1 if self.transposed else 0] * self.stride

    @property
    def run(self) -> int:
        """Elements of the base that are consecutive in the copy too (0: none)."""
        return 0 if self.transposed else self.base.shape[1]

    def position(self, e: Expr) -> Expr:
        r, c = ix.unflatten(e, self.base.shape)
        if self.transposed:
            r, c = c, r
        return ix.add(ix.mul(r, self.stride), c)

    def at(self, k: Expr, other: Expr) -> Expr:
        """Index of the operand element at (k, other coordinate)."""
        r, c = (other, k) if self.k_inner else (k, other)
        return ix.add(ix.mul(r, self.stride), c)


def _copy16(L: LoweringContext, v: tile.Value, k_dim: int, ldmatrix: bool) -> Copy16 | None:
    """The 16-bit copy of operand `v` (2-D, its K dim `k_dim`), copied from its view's base:
    `v` itself or the source of `trans(v)`; None for other views (they keep flat copies).
    Without ldmatrix, a base whose K runs down its columns is copied transposed."""
    base, _ = L.view(v)
    c = L.canon(v)
    if base.type.elem != v.type.elem or len(v.shape) != 2:
        return None
    if base is c and base.shape == v.shape:
        k_base = k_dim  # base coordinates are v's
    elif (isinstance(c.owner, tile.Op) and c.owner.kind == "trans"
          and L.canon(c.owner.operands[0]) is base and base.shape == v.shape[::-1]):
        k_base = 1 - k_dim  # base coordinates are v's reversed
    else:
        return None
    if k_base == 1 or ldmatrix:
        return Copy16(base, base.shape[1] + PAD16, k_base == 1)
    return Copy16(base, base.shape[0] + PAD16, True, transposed=True)


class _MmaDot:
    """The Loop IR of one mma dot under plan `p`: the warp coordinates, the fragment
    variables, and the three phases (accumulator in, the K loop, accumulator out)."""

    def __init__(self, L: LoweringContext, op: tile.Op, p: MmaPlan) -> None:
        self.L, self.op, self.p = L, op, p
        a, b, _ = op.operands
        self.M, self.K = a.shape
        self.N = b.shape[1]
        kind, t = p.kind, p.kind.acc
        self.warp, self.lane, self.grp, self.tig, self.wi, self.wj = (
            L.var(n, int32) for n in ("warp", "lane", "grp", "tig", "wi", "wj"))
        self.k0 = L.var("k0", int32)
        # acc[i][j]: the C fragment of the warp's tile (i, j); af[i], bf[j]: its A / B fragments.
        self.acc = [[[L.var(f"d{i}_{j}_{x}", t) for x in range(4)] for j in range(p.pn)]
                    for i in range(p.pm)]
        self.active = p.wm * p.wn < L.T // 32  # idle warps skip the warp-collective part
        # 16-bit copies of a and b with padded rows (`Copy16`); fragments through ldmatrix
        # (`.trans` where K runs down a copy's columns), else PairBits (K along the rows)
        self.packed: tuple[Copy16, Copy16] | None = None
        self.ldmatrix = L.target.has("ldmatrix") and p.pn % 2 == 0
        if kind.bits and L.target.has("shared_16bit"):
            ca, cb = _copy16(L, a, 1, self.ldmatrix), _copy16(L, b, 0, self.ldmatrix)
            if ca is not None and cb is not None:
                self.packed = (ca, cb)
        self.abits: list[list[Var]] | None = None
        self.bbits: list[list[Var]] | None = None
        if self.packed is None:
            self.af = [[L.var(f"a{i}_{x}", register_type(a.type))
                        for x in range(len(kind.a.elems))] for i in range(p.pm)]
            self.bf = [[L.var(f"b{j}_{x}", register_type(b.type))
                        for x in range(len(kind.b.elems))] for j in range(p.pn)]

    def coordinates(self) -> None:
        L, p = self.L, self.p
        for v, x in ((self.warp, ix.div(L.tid, 32)), (self.lane, ix.mod(L.tid, 32)),
                     (self.grp, ix.div(self.lane, 4)), (self.tig, ix.mod(self.lane, 4)),
                     (self.wi, ix.div(self.warp, p.wn)), (self.wj, ix.mod(self.warp, p.wn))):
            L.emit(Assign(v, x))

    def warps_only(self, stmts: list[Stmt]) -> None:
        if self.active:
            self.L.emit(If(Binary("lt", self.warp, ix.c32(self.p.wm * self.p.wn)), stmts))
        else:
            self.L.emit(*stmts)

    def tile_row(self, pass_row: int, i: int) -> Expr:  # first row of the warp's tile row i
        return ix.add(ix.mul(self.wi, self.p.pm * 16), ix.c32(pass_row + 16 * i))

    def col(self, j: int) -> Expr:
        return ix.add(ix.mul(self.wj, self.p.pn * 8), ix.c32(8 * j))

    def exchange(self, X: Array, pass_row: int, chunk_row: int, into_regs: bool) -> list[Stmt]:
        """Fragments <-> the chunk buffer X (rows chunk_row ... of the accumulator)."""
        p, N = self.p, self.N
        out: list[Stmt] = []
        for i in range(p.pm):
            r0 = self.tile_row(pass_row, i)
            body: list[Stmt] = []
            for j in range(p.pn):
                for v, el in zip(self.acc[i][j], C_LAYOUT.elems):
                    r, cc = _frag_at(el, self.grp, self.tig, ix.add(r0, ix.c32(-chunk_row)),
                                     self.col(j))
                    at = ix.add(ix.mul(r, N), cc)
                    body.append(Assign(v, Index(X, at)) if into_regs else ArrayStore(X, at, v))
            if p.chunk == p.rows:
                out += body
            else:  # the tile row is in this chunk or not (chunks are whole tile rows)
                inside = Binary("eq", ix.div(r0, p.chunk), ix.c32(chunk_row // p.chunk))
                out.append(If(inside, body))
        return out

    def mma_loop(self, A: Array, B: Array, pass_row: int) -> list[Stmt]:
        """The K steps of the dot: unrolled when there are at most `UNROLL_K_STEPS` (constant
        fragment addresses), else a loop."""
        step = self._packed_step if self.packed else self._step
        n = self.K // self.p.kind.k
        if n <= UNROLL_K_STEPS:
            return [s for i in range(n) for s in step(A, B, pass_row, ix.c32(i * self.p.kind.k))]
        return [For(self.k0, ix.c32(0), ix.c32(self.K), ix.c32(self.p.kind.k),
                    step(A, B, pass_row, self.k0))]

    def _step(self, A: Array, B: Array, pass_row: int, k0: Expr) -> list[Stmt]:
        L, p, kind = self.L, self.p, self.p.kind
        a, b, _ = self.op.operands
        grp, tig = self.grp, self.tig
        body: list[Stmt] = []
        for i in range(p.pm):
            for x, el in enumerate(kind.a.elems):
                r, kk = _frag_at(el, grp, tig, self.tile_row(pass_row, i), k0)
                body.append(Assign(self.af[i][x], Index(A, L.at(a, [r, kk])[1])))
        for j in range(p.pn):
            for x, el in enumerate(kind.b.elems):
                kk, cc = _frag_at(el, grp, tig, k0, self.col(j))
                body.append(Assign(self.bf[j][x], Index(B, L.at(b, [kk, cc])[1])))
        for i in range(p.pm):
            for j in range(p.pn):
                body.append(Intrinsic(kind.name, self.af[i] + self.bf[j] + self.acc[i][j],
                                      self.acc[i][j]))
        return body

    def _packed_step(self, A: Array, B: Array, pass_row: int, k0: Expr) -> list[Stmt]:
        """One K step on the 16-bit copies: one `ldmatrix.x4` per A tile (its four 8x8
        quarters are A0..A3) and per two B tiles (B0, B1 of each), lane l addressing row l % 8
        of matrix l / 8 (`.trans` where K runs down the copy's columns); else each fragment
        register is one `PairBits` read of two consecutive k."""
        p, kind = self.p, self.p.kind
        ca, cb = self.packed
        grp, tig = self.grp, self.tig
        if self.abits is None:
            L = self.L
            self.abits = [[L.var(f"ap{i}_{x}", uint32) for x in range(len(kind.a.elems) // 2)]
                          for i in range(p.pm)]
            self.bbits = [[L.var(f"bp{j}_{x}", uint32) for x in range(len(kind.b.elems) // 2)]
                          for j in range(p.pn)]
        body: list[Stmt] = []
        if self.ldmatrix:
            li, lm = ix.mod(self.lane, 8), ix.div(self.lane, 8)
            hi, lo = ix.mul(ix.div(lm, 2), 8), ix.mul(ix.mod(lm, 2), 8)
            for i in range(p.pm):
                # matrix j: rows +8 for j odd, k +8 for j >= 2 (A0: rows 0-7, k 0-7; A1: rows
                # 8-15; A2: k 8-15; A3: both)
                r0 = self.tile_row(pass_row, i)
                if ca.k_inner:  # the lane's row is an operand row
                    at = ca.at(ix.add(k0, hi), ix.add(ix.add(r0, lo), li))
                else:  # the lane's row is a k row
                    at = ca.at(ix.add(ix.add(k0, hi), li), ix.add(r0, lo))
                body.append(Intrinsic(_LDMATRIX[not ca.k_inner], [SharedRow(A, at)],
                                      self.abits[i]))
            for q in range(p.pn // 2):
                # matrix j: k +8 for j odd, the second tile (n +8) for j >= 2
                c0 = self.col(2 * q)
                if cb.k_inner:
                    at = cb.at(ix.add(k0, lo), ix.add(ix.add(c0, hi), li))
                else:
                    at = cb.at(ix.add(ix.add(k0, lo), li), ix.add(c0, hi))
                body.append(Intrinsic(_LDMATRIX[not cb.k_inner], [SharedRow(B, at)],
                                      self.bbits[2 * q] + self.bbits[2 * q + 1]))
        else:
            for i in range(p.pm):
                for x, v in enumerate(self.abits[i]):
                    r, kk = _frag_at(kind.a.elems[2 * x], grp, tig, self.tile_row(pass_row, i),
                                     k0)
                    body.append(Assign(v, PairBits(A, ca.at(kk, r))))
            for j in range(p.pn):
                for x, v in enumerate(self.bbits[j]):
                    kk, cc = _frag_at(kind.b.elems[2 * x], grp, tig, k0, self.col(j))
                    body.append(Assign(v, PairBits(B, cb.at(kk, cc))))
        for i in range(p.pm):
            for j in range(p.pn):
                body.append(Intrinsic(kind.bits, self.abits[i] + self.bbits[j] + self.acc[i][j],
                                      self.acc[i][j]))
        return body

    def operands(self) -> list[Array]:
        """Shared copies of a and b: 16-bit, K-major with padded rows where the target has
        16-bit shared arrays and both operands have such a layout (`_k_major`), else the
        lowering's own copies (float32 registers' type, by flat index)."""
        L = self.L
        a, b, _ = self.op.operands
        if self.packed:
            ca, cb = self.packed
            return L.stage([ca.base, cb.base], [ca.position, cb.position],
                           [a.type.elem, b.type.elem], [ca.size, cb.size], reader=self.op,
                           rows=[ca.run, cb.run])
        L.close()
        return L.addressable(L.view(a)[0], L.view(b)[0])

    def acc_in(self, c: tile.Value, pass_row: int, lazy: bool, X: Array | None = None) -> None:
        """c's rows of this pass -> the fragments (zeros for a zero constant), a chunk of rows
        at a time through a shared buffer (barriers around each chunk)."""
        L, p, N, t = self.L, self.p, self.N, self.p.kind.acc
        if is_zero_const(L.canon(c)):
            self.warps_only([Assign(v, Const(0.0 if t.is_float else 0, t))
                             for row in self.acc for frag in row for v in frag])
            return
        X = X if X is not None else L.shared("acc_sh", t, p.chunk * N)
        for chunk_row in range(pass_row, pass_row + p.rows, p.chunk):
            g = L.open_group(self.M * N)
            x = L.read(c)
            at = ix.add(g.e, ix.c32(-chunk_row * N))
            store: Stmt = ArrayStore(X, at, x if x.dtype == t else Cast(x, t))
            if not lazy:
                store = If(Binary("land", Binary("ge", g.e, ix.c32(chunk_row * N)),
                                  Binary("lt", g.e, ix.c32((chunk_row + p.chunk) * N))),
                           [store])
            g.body.append(store)
            L.close()
            L.barrier()
            self.warps_only(self.exchange(X, pass_row, chunk_row, True))
            L.barrier()

    def acc_out(self, pass_row: int, out: Array | None, lazy: bool,
                X: Array | None = None) -> Array:
        """The fragments -> a shared buffer -> the lowering's layout, a chunk at a time.  With
        `lazy` (one buffer holds the result) the buffer is returned, to be read by flat index;
        otherwise the chunks are copied into the register array `out`."""
        L, p, N = self.L, self.p, self.N
        X = X if X is not None else L.shared("acc_sh", p.kind.acc, p.chunk * N)
        for chunk_row in range(pass_row, pass_row + p.rows, p.chunk):
            self.warps_only(self.exchange(X, pass_row, chunk_row, False))
            L.barrier()
            if lazy:
                return X
            _read_chunk(L, X, out, chunk_row * N, p.chunk * N, self.M * N)
            L.barrier()
        return X

    def bind_result(self, v: tile.Value, X: Array, out: Array | None, lazy: bool) -> None:
        L = self.L
        if lazy:
            g = L.open_group(self.M * self.N)
            g.ops.add(id(self.op))
            L.bind(v, Index(X, g.e), g)
        else:
            L.regs[v.id] = out


def tensor_core_dot(L: LoweringContext, op: tile.Op, fallback: Callable) -> None:
    """Lower `dot` with warp-level mma (see the module docstring), else with `fallback`."""
    resident = L.resident.get(id(op))
    if resident is not None:  # the accumulator stays in the fragments across the loop
        A, B = resident.operands()
        resident.warps_only(resident.mma_loop(A, B, 0))
        return
    p = plan(L, op)
    if p is None:
        fallback(L, op)
        return
    a, b, c = op.operands
    M, N, t = a.shape[0], b.shape[1], p.kind.acc
    d = _MmaDot(L, op, p)
    A, B = d.operands()
    X = L.shared("acc_sh", t, p.chunk * N)
    d.coordinates()
    lazy = p.rows == M and p.chunk == M  # one buffer holds the result: read it lazily
    out = None
    cv = L.canon(c)
    if not lazy and not is_zero_const(cv) and L.users.get(cv.id) == [op] and cv.id in L.regs \
            and L.regs[cv.id].dtype == t:
        # The accumulator dies here: the result overwrites its registers (each pass reads
        # its rows of c before writing them), which keeps one M*N array live, not two.
        out = L.regs[cv.id]
    elif not lazy:
        out = L.array(op.result.name or "dot", t, L.slots(M * N))
    for pass_row in range(0, M, p.rows):
        d.acc_in(c, pass_row, lazy, X)
        d.warps_only(d.mma_loop(A, B, pass_row))
        d.acc_out(pass_row, out, lazy, X)
    d.bind_result(op.result, X, out, lazy)


def resident_accumulators(L: LoweringContext, loop: tile.Op) -> dict[int, _MmaDot]:
    """Carried values of `for` op `loop` kept in mma fragments for the whole loop: carried
    value j whose only use in the body is as the accumulator of one mma dot (at the top of
    the body) whose result is yielded back as j and used for nothing else, when the dot runs
    in a single pass.  Its registers then carry it from one iteration's dot to the next; the
    conversion to and from the lowering's layout happens once, before and after the loop
    (`enter_resident`, `leave_resident`), instead of at every dot."""
    body = loop.regions[0]
    term = body.terminator
    if term is None or not L.target.has("tensor_cores"):
        return {}
    found: dict[int, _MmaDot] = {}
    for j, arg in enumerate(body.args[1:]):
        dots = L.users.get(arg.id, [])
        if len(dots) != 1 or dots[0].kind != "dot" or dots[0] not in body.ops:
            continue
        dot = dots[0]
        if dot.operands[2] is not arg or dot.operands[0] is arg or dot.operands[1] is arg:
            continue
        if term.operands[j] is not dot.result or L.users.get(dot.result.id) != [term]:
            continue
        if sum(1 for o in term.operands if o is dot.result) != 1:
            continue
        p = plan(L, dot)
        if p is None or p.rows != dot.operands[0].shape[0]:
            continue
        found[j] = _MmaDot(L, dot, p)
    return found


def enter_resident(L: LoweringContext, d: _MmaDot, init: tile.Value) -> None:
    """Before the loop: the warp coordinates and the initial accumulator in the fragments."""
    L.close()
    d.coordinates()
    d.acc_in(init, 0, d.p.chunk == d.M)
    L.resident[id(d.op)] = d


def leave_resident(L: LoweringContext, d: _MmaDot, result: tile.Value) -> None:
    """After the loop: the fragments back in the lowering's layout as the loop's result."""
    L.close()
    lazy = d.p.chunk == d.M
    out = None if lazy else L.array(result.name or "acc", d.p.kind.acc, L.slots(d.M * d.N))
    X = d.acc_out(0, out, lazy)
    d.bind_result(result, X, out, lazy)
    del L.resident[id(d.op)]


def _read_chunk(L: LoweringContext, X, out, lo: int, n: int, numel: int) -> None:
    """out[slot] = X[e - lo] for the thread's elements e in [lo, lo + n) of a tile of `numel`:
    a plain slot range when chunks are whole runs of every thread's slots, else all slots,
    guarded."""
    T, V = L.T, L.vector.width(numel)
    k = L.var("k", int32)
    e = element_index(L.tid, k, T, V)
    if n % (V * T) == 0:
        body: list[Stmt] = [ArrayStore(out, k, Index(X, ix.add(e, ix.c32(-lo))))]
        L.emit(For(k, ix.c32(lo // T), ix.c32((lo + n) // T), ix.c32(1), body))
        return
    ev = L.var("e", int32)
    inside = Binary("land", Binary("ge", ev, ix.c32(lo)), Binary("lt", ev, ix.c32(lo + n)))
    body = [Assign(ev, e), If(inside, [ArrayStore(out, k, Index(X, ix.add(ev, ix.c32(-lo))))])]
    L.emit(For(k, ix.c32(0), ix.c32(L.slots(numel)), ix.c32(1), body))


__all__ = ["C_LAYOUT", "EXCHANGE_BYTES", "MAX_ACC_REGS", "MMA_KINDS", "Layout", "MmaKind",
           "MmaPlan", "applicable", "enter_resident", "leave_resident", "mma_kind",
           "mma_reference", "plan", "resident_accumulators", "tensor_core_dot"]
