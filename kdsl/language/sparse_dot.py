"""`kd.sparse_dot(a, a_meta, b, acc=None)`: the product of a 2:4 structured-sparse matrix and a
dense one (a kdsl extension; Triton 3.6 has no counterpart).

The sparse operand A [M, K] keeps 2 values in every group of 4 consecutive elements of a row;
it is given compressed, as its kept values `a` [M, K // 2] (group g's values at columns 2g and
2g + 1) and `a_meta` [M, K // 2], the index 0-3 of each value in its group (an integer tile,
read as `a_meta & 3`):

    result[m, n] = acc[m, n] + sum_j a[m, j] * b[4 * (j // 2) + (a_meta[m, j] & 3), n]

so an element of b at a pruned position is never read (an infinity there stays harmless).
a and b are float16, bfloat16 or float32 (promoted to one type as for `dot`); the accumulator
and result are float32.  One op, `sparse_dot`, in the Tile IR: on CUDA (sm_80+) float16 and
bfloat16 operands use the sparse tensor-core instruction `mma.sp` (kdsl/passes/
kdsl/lowering/dot_sparse.py), which reads only the kept values; the two indices of a group must then
be increasing, as the instruction requires; every other case is a loop of fused
multiply-adds over the kept values.
"""

from __future__ import annotations

from typing import Any

from ..ir.types import TileType, bfloat16, float16, float32
from . import semantic
from .core import builtin

INPUTS = (float16, bfloat16, float32)


def build(b: Any, x: Any, meta: Any, y: Any, acc: Any = None) -> Any:
    """The `sparse_dot` op of x [M, K//2] (kept values), meta [M, K//2], y [K, N], acc."""
    for what, v in (("a", x), ("a_meta", meta), ("b", y)):
        if not semantic.is_value(v) or v.type.is_ptr or v.type.rank != 2:
            raise semantic.error(f"sparse_dot: {what} must be a 2-D tile, got "
                                 f"{semantic.describe(v)}")
    (m, half), (k, n) = x.shape, y.shape
    if k != 2 * half:
        raise semantic.error(f"sparse_dot: b has {k} rows but a holds the kept half of "
                             f"{2 * half} columns (a is {list(x.shape)})")
    if k % 4:
        raise semantic.error(f"sparse_dot: K = {k} is not a multiple of 4 (groups of 4)")
    if meta.shape != x.shape:
        raise semantic.error(f"sparse_dot: a_meta has shape {list(meta.shape)}, a has "
                             f"{list(x.shape)}")
    if not meta.type.elem.is_int:
        raise semantic.error(f"sparse_dot: a_meta must hold integers, got {meta.type.elem}")
    dt = semantic.promote(x.type.elem, y.type.elem)
    if dt not in INPUTS or not (x.type.elem.is_float and y.type.elem.is_float):
        raise semantic.error(f"sparse_dot operands must be float16, bfloat16 or float32, got "
                             f"{x.type.elem} and {y.type.elem}")
    x, y = semantic.cast(b, x, dt), semantic.cast(b, y, dt)
    if acc is None:
        acc = b.op("const", [], TileType((m, n), float32), value=semantic.const_value(0, float32))
    else:
        acc = semantic.broadcast_to(b, acc, (m, n))
        if acc.type.elem != float32:
            raise semantic.error(f"sparse_dot accumulates in float32, got an accumulator of "
                                 f"{acc.type.elem}")
    return b.op("sparse_dot", [x, meta, y, acc], acc.type)


@builtin
def sparse_dot(a, a_meta, b, acc=None, _builder=None):
    """2:4-sparse A (kept values `a` [M, K//2], their indices `a_meta`) @ b [K, N] (+ acc)."""
    return build(_builder, a, a_meta, b, acc)
