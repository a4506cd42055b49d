"""Loop IR `Transpose` in the LLVM backend: an n x n float32 block as n vector loads, n log2(n)
two-vector `shufflevector`s and n vector stores.

The loop nest (`dst[j][i] = src[i][j]`) is what LLVM's vectoriser sees otherwise, and it turns
it into scatters or gathers: the CPU dot's packing of a transposed 64 x 64 operand took ~2.2 us
that way on one Emerald Rapids core, ~0.35 us as shuffles (a C loop against AVX-512
intrinsics, 2026-12-02).  The network swaps one bit of the row index with the same bit of the
column index per stage: for rows p (bit t clear) and p | 2**t, the stage's outputs are

    lo[j] = p[j]          if bit t of j is clear, else (p | 2**t)[j - 2**t]
    hi[j] = p[j + 2**t]   if bit t of j is clear, else (p | 2**t)[j]

and after every bit has been swapped, row j holds column j.  LLVM lowers each two-source
shuffle to one `vunpck`/`vpermt2ps`/`vshuff` on x86 (or `zip`/`trn` on ARM).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from kdsl.ir import loop as L

from .llvm_math import F32
from .llvm_types import I32, I64

if TYPE_CHECKING:
    from .llvm import _FnEmitter


def _stage_masks(n: int, bit: int) -> tuple[list[int], list[int]]:
    """Shuffle masks of the two outputs of one stage (indices >= n take the second vector)."""
    lo = [j if not j & bit else n + j - bit for j in range(n)]
    hi = [j + bit if not j & bit else n + j for j in range(n)]
    return lo, hi


def emit_transpose(em: _FnEmitter, s: L.Transpose) -> None:
    b, n = em.b, s.n
    vt = ir.VectorType(F32, n)
    src0, _ = em._elem_ptr(s.src, s.src_at)
    dst0, _ = em._elem_ptr(s.dst, s.dst_at)

    def row_ptr(base: ir.Value, i: int, stride: int) -> ir.Value:
        p = b.gep(base, [ir.Constant(I64, i * stride)], inbounds=True, source_etype=F32)
        return b.bitcast(p, vt.as_pointer())  # (a no-op with opaque pointers)

    rows = [b.load(row_ptr(src0, i, s.src_stride), align=4) for i in range(n)]
    bit = 1
    while bit < n:
        lo_mask, hi_mask = (ir.Constant(ir.VectorType(I32, n), m) for m in _stage_masks(n, bit))
        out = list(rows)
        for p in range(n):
            if not p & bit:
                out[p] = b.shuffle_vector(rows[p], rows[p | bit], lo_mask)
                out[p | bit] = b.shuffle_vector(rows[p], rows[p | bit], hi_mask)
        rows = out
        bit *= 2
    for j, v in enumerate(rows):
        b.store(v, row_ptr(dst0, j, s.dst_stride), align=4)
