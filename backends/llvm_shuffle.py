"""Loop IR `Transpose` in the LLVM backend: an n x n block of 32-bit elements (float32 or
uint32 words) as n vector loads, n log2(n)
two-vector `shufflevector`s (the network of transpose_net.py) and n vector stores.

The loop nest (`dst[j][i] = src[i][j]`) is what LLVM's vectoriser sees otherwise, and it turns
it into scatters or gathers: the CPU dot's packing of a transposed 64 x 64 operand took ~2.2 us
that way on one Emerald Rapids core, ~0.35 us as shuffles (a C loop against AVX-512
intrinsics, 2026-12-02).  LLVM lowers each two-source shuffle to one `vunpck`/`vpermt2ps`/
`vshuff` on x86 (or `zip`/`trn` on ARM).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from kdsl.ir import loop as L
from kdsl.ir.types import float32

from .llvm_math import F32
from .transpose_net import stages
from .llvm_types import I32, I64

if TYPE_CHECKING:
    from .llvm import _FnEmitter


def emit_transpose(em: _FnEmitter, s: L.Transpose) -> None:
    b, n = em.b, s.n
    elem = F32 if s.src.dtype == float32 else I32  # (float32 or uint32 words)
    vt = ir.VectorType(elem, n)
    src0, _ = em._elem_ptr(s.src, s.src_at)
    dst0, _ = em._elem_ptr(s.dst, s.dst_at)

    def row_ptr(base: ir.Value, i: int, stride: int) -> ir.Value:
        p = b.gep(base, [ir.Constant(I64, i * stride)], inbounds=True, source_etype=elem)
        return b.bitcast(p, vt.as_pointer())  # (a no-op with opaque pointers)

    rows = [em.tag(b.load(row_ptr(src0, i, s.src_stride), align=4), private=True)
            for i in range(n)]
    for bit, lo, hi in stages(n):
        lo_mask, hi_mask = (ir.Constant(ir.VectorType(I32, n), m) for m in (lo, hi))
        out = list(rows)
        for p in range(n):
            if not p & bit:
                out[p] = b.shuffle_vector(rows[p], rows[p | bit], lo_mask)
                out[p | bit] = b.shuffle_vector(rows[p], rows[p | bit], hi_mask)
        rows = out
    for j, v in enumerate(rows):
        em.tag(b.store(v, row_ptr(dst0, j, s.dst_stride), align=4), private=True)
