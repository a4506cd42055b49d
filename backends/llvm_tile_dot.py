"""Loop IR `TileDot` in the llvm backend, on the host's matrix unit (llvm_host.matrix_unit).

AMX ("amx"): tile instructions, LLVM's `llvm.x86.tile*` intrinsics, which name the tile
registers tmm0-7 by number.  A kernel that uses tiles configures them once per program
instance (`configure`: all eight tiles 16 rows of 64 bytes, palette 1, from a constant in the
module: `ldtilecfg` costs ~150 cycles) and releases them at its end (`release`: the
thread's tile state back to its initial state, so the OS saves none of it for a thread that
no longer computes).  A block of tm x tn
16 x 16 output tiles (`emit_tile_dot`) takes tiles 0 .. tm*tn-1 for its accumulators, then tm
for a and tn for b:

    acc tiles <- out (tileloadd) or zero (tilezero)
    for each K step of 16 packed words:      (a loop in the IR: its body is one step)
        a tiles <- 16 rows of a's copy, b tiles <- 16 rows of b's copy
        acc[i][j] += a[i] . b[j]             (tdpbf16ps / tdpbssd)
    out <- acc tiles (tilestored)

The process must have been granted the tile state first (llvm_host.tile_state_permitted): the
capabilities that let the lowering emit `TileDot` come only with that grant.

AVX512-BF16 ("avx512bf16", bfloat16 only): the block in register blocks of R rows x cols, R
the most rows whose R x cols/16 accumulators, cols/16 vectors of b and one broadcast fit the
32 `zmm` registers (32 x 32 blocks: 8 rows, 16 accumulators):

    acc[i][v] <- out (or zero)
    for each pair q of k values:             (a loop in the IR)
        b[v] <- 16 columns' pairs of b's row q (one 64-byte load each)
        acc[i][v] = vdpbf16ps(acc[i][v], broadcast(a's pair q of row i), b[v])
    out <- acc

`vdpbf16ps` adds each lane's two products to its accumulator, the odd k first, each addition
rounded (bfloat16 subnormals read as zero, subnormal results flushed), as a fused multiply-add
would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from kdsl.ir import loop as L

from . import llvm_host
from .llvm_types import I8, I32, I64, PTR

if TYPE_CHECKING:
    from .llvm import _FnEmitter

VOID = ir.VoidType()
ZMM_REGS = 32
LANES = 16  # float32 lanes of a zmm register
# TileDot kind -> the tile instruction's intrinsic
DOT_INTRINSIC = {"bf16": "llvm.x86.tdpbf16ps", "int8": "llvm.x86.tdpbssd"}
ROW_BYTES = 64  # a tile row: 16 words of 4 bytes
TILES = 8
CONFIG_NAME = "kdsl.tilecfg"


def uses_tiles(kernel: L.Kernel) -> bool:
    """Whether the kernel computes on AMX's tile registers (configured per program)."""
    return (llvm_host.matrix_unit() == "amx"
            and any(isinstance(s, L.TileDot) for s in L.walk(kernel.body)))


def _intrinsic(em: _FnEmitter, name: str, args: list[ir.Type]) -> ir.Function:
    fn = em.m.globals.get(name)
    return fn if fn is not None else ir.Function(em.m, ir.FunctionType(VOID, args), name)


def _config(module: ir.Module) -> ir.GlobalVariable:
    """The 64-byte tile configuration: palette 1, tiles 0-7 of 16 rows x 64 bytes (byte 0
    palette, bytes 16-31 the tiles' row bytes as u16, bytes 48-55 their rows)."""
    g = module.globals.get(CONFIG_NAME)
    if g is not None:
        return g
    data = bytearray(64)
    data[0] = 1
    for t in range(TILES):
        data[16 + 2 * t: 18 + 2 * t] = ROW_BYTES.to_bytes(2, "little")
        data[48 + t] = L.TILE
    ty = ir.ArrayType(I8, 64)
    g = ir.GlobalVariable(module, ty, CONFIG_NAME)
    g.initializer = ir.Constant(ty, bytearray(data))
    g.global_constant = True
    g.linkage = "private"
    g.align = 64
    return g


def configure(em: _FnEmitter) -> None:
    em.b.call(_intrinsic(em, "llvm.x86.ldtilecfg", [PTR]), [_config(em.m)])


def release(em: _FnEmitter) -> None:
    em.b.call(_intrinsic(em, "llvm.x86.tilerelease", []), [])


def _tile(n: int) -> ir.Constant:
    return ir.Constant(I8, n)


def emit_tile_dot(em: _FnEmitter, s: L.TileDot) -> None:
    unit = llvm_host.matrix_unit()
    if unit not in _EMIT:
        raise NotImplementedError(f"TileDot on matrix unit {unit!r}")
    _EMIT[unit](em, s)


def _loop_head(b: ir.IRBuilder, name: str) -> tuple[ir.PhiInstr, ir.Block]:
    """Open a counted loop (a body that runs at least once): (its i64 counter from 0, the
    block before it); `_loop_tail` closes it."""
    pre = b.block
    body = b.append_basic_block(f"{name}.k")
    b.branch(body)
    b.position_at_end(body)
    i = b.phi(I64, name=name)
    i.add_incoming(ir.Constant(I64, 0), pre)
    return i, pre


def _loop_tail(b: ir.IRBuilder, i: ir.PhiInstr, count: int) -> None:
    """Close the loop of counter `i` after `count` iterations; code follows after it."""
    nxt = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(nxt, b.block)
    done = b.append_basic_block(f"{i.parent.name}.done")
    b.cbranch(b.icmp_signed("<", nxt, ir.Constant(I64, count)), i.parent, done)
    b.position_at_end(done)


def _amx(em: _FnEmitter, s: L.TileDot) -> None:
    b = em.b
    _, g, _ = L.TILE_DOT_KINDS[s.kind]
    tm, tn = s.rows // L.TILE, s.cols // L.TILE
    acc = [[i * tn + j for j in range(tn)] for i in range(tm)]
    a_t = [tm * tn + i for i in range(tm)]
    b_t = [tm * tn + tm + j for j in range(tn)]
    load = _intrinsic(em, "llvm.x86.tileloadd64", [I8, PTR, I64])
    store = _intrinsic(em, "llvm.x86.tilestored64", [I8, PTR, I64])
    dot = _intrinsic(em, DOT_INTRINSIC[s.kind], [I8, I8, I8])
    word = 4  # bytes of an output element (float32, int32)
    # bytes of an operand element (uint16 bfloat16 bits, int8, or a uint32 word of them)
    a_part, b_part = s.a.dtype.itemsize, s.b.dtype.itemsize

    def at(base: ir.Value, offset: ir.Value | int) -> ir.Value:
        if isinstance(offset, int):
            offset = ir.Constant(I64, offset)
        return b.gep(base, [offset], source_etype=I8)

    def stride(n: int, size: int) -> ir.Constant:
        return ir.Constant(I64, n * size)

    out0, _ = em._elem_ptr(s.out, s.out_at)
    c_at = [[at(out0, (i * L.TILE * s.out_stride + j * L.TILE) * word) for j in range(tn)]
            for i in range(tm)]
    for i in range(tm):
        for j in range(tn):
            if s.zero:
                b.call(_intrinsic(em, "llvm.x86.tilezero", [I8]), [_tile(acc[i][j])])
            else:
                b.call(load, [_tile(acc[i][j]), c_at[i][j], stride(s.out_stride, word)])
    a0, _ = em._elem_ptr(s.a, s.a_at)
    b0, _ = em._elem_ptr(s.b, s.b_at)
    steps = s.depth // (L.TILE * g)
    ks, _ = _loop_head(b, "tiles")
    a_step = b.mul(ks, ir.Constant(I64, ROW_BYTES))  # 16 words further along a's rows
    b_step = b.mul(ks, ir.Constant(I64, L.TILE * s.b_stride * b_part))  # 16 word rows down
    for i in range(tm):
        ptr = at(at(a0, i * L.TILE * s.a_stride * a_part), a_step)
        b.call(load, [_tile(a_t[i]), ptr, stride(s.a_stride, a_part)])
    for j in range(tn):
        ptr = at(at(b0, j * ROW_BYTES), b_step)  # 16 columns of g values
        b.call(load, [_tile(b_t[j]), ptr, stride(s.b_stride, b_part)])
    for i in range(tm):
        for j in range(tn):
            b.call(dot, [_tile(acc[i][j]), _tile(a_t[i]), _tile(b_t[j])])
    _loop_tail(b, ks, steps)
    for i in range(tm):
        for j in range(tn):
            b.call(store, [_tile(acc[i][j]), c_at[i][j], stride(s.out_stride, word)])


class _BFloat(ir.Type):
    """LLVM's `bfloat` (llvmlite has no such type; its text is all LLVM needs)."""

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _BFloat)

    def __hash__(self) -> int:
        return hash("bfloat")


F32X16 = ir.VectorType(ir.FloatType(), LANES)
I32X16 = ir.VectorType(I32, LANES)
BF16X32 = ir.VectorType(_BFloat(), 2 * LANES)


def _rows_per_group(rows: int, nv: int) -> int:
    """The most rows R dividing `rows` whose R * nv accumulators, nv vectors of b and one
    broadcast fit the vector registers."""
    return max(r for r in range(1, rows + 1) if rows % r == 0 and r * nv + nv + 1 <= ZMM_REGS)


def _avx512bf16(em: _FnEmitter, s: L.TileDot) -> None:
    if s.kind != "bf16":
        raise NotImplementedError(f"TileDot {s.kind} on AVX512-BF16")
    b = em.b
    nv = s.cols // LANES
    R = _rows_per_group(s.rows, nv)
    dot = em.m.globals.get("llvm.x86.avx512bf16.dpbf16ps.512") or ir.Function(
        em.m, ir.FunctionType(F32X16, [F32X16, BF16X32, BF16X32]),
        "llvm.x86.avx512bf16.dpbf16ps.512")
    word = 4  # bytes of a pair of bfloat16 patterns, and of an output element
    a_part, b_part = s.a.dtype.itemsize, s.b.dtype.itemsize  # (uint16, or uint32 words)

    def at(base: ir.Value, offset: ir.Value | int) -> ir.Value:
        if isinstance(offset, int):
            offset = ir.Constant(I64, offset)
        return b.gep(base, [offset], source_etype=I8)

    out0, _ = em._elem_ptr(s.out, s.out_at)
    a0, _ = em._elem_ptr(s.a, s.a_at)
    b0, _ = em._elem_ptr(s.b, s.b_at)
    pairs = s.depth // 2
    for r0 in range(0, s.rows, R):
        o_at = [[at(out0, ((r0 + i) * s.out_stride + v * LANES) * word) for v in range(nv)]
                for i in range(R)]
        init = [[ir.Constant(F32X16, None) if s.zero else
                 em.tag(b.load(o_at[i][v], typ=F32X16, align=word), private=True)
                 for v in range(nv)] for i in range(R)]
        q, pre = _loop_head(b, "bf16dot")
        acc = [[b.phi(F32X16) for _ in range(nv)] for _ in range(R)]
        for i in range(R):
            for v in range(nv):
                acc[i][v].add_incoming(init[i][v], pre)
        b_row = at(b0, b.mul(q, ir.Constant(I64, s.b_stride * b_part)))
        bv = [b.bitcast(em.tag(b.load(at(b_row, v * LANES * word), typ=I32X16, align=2),
                               private=True), BF16X32) for v in range(nv)]
        a_col = b.mul(q, ir.Constant(I64, word))  # the pair's byte offset along a's row
        new = []
        for i in range(R):
            pair = em.tag(b.load(at(at(a0, (r0 + i) * s.a_stride * a_part), a_col), typ=I32,
                                 align=2), private=True)
            splat = b.bitcast(b.shuffle_vector(
                b.insert_element(ir.Constant(I32X16, None), pair, ir.Constant(I32, 0)),
                ir.Constant(I32X16, None), ir.Constant(I32X16, [0] * LANES)), BF16X32)
            new.append([b.call(dot, [acc[i][v], splat, bv[v]]) for v in range(nv)])
        for i in range(R):
            for v in range(nv):
                acc[i][v].add_incoming(new[i][v], b.block)
        _loop_tail(b, q, pairs)
        for i in range(R):
            for v in range(nv):
                ptr = b.bitcast(o_at[i][v], F32X16.as_pointer())
                em.tag(b.store(new[i][v], ptr, align=word), private=True)


# unit (llvm_host.matrix_unit) -> its TileDot emitter
_EMIT = {"amx": _amx, "avx512bf16": _avx512bf16}


__all__ = ["configure", "emit_tile_dot", "release", "uses_tiles"]
