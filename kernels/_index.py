"""Index width of the library kernels: element offsets past 2**31.

Offsets are int32 by default, as in Triton: `program_id`, `arange` and the integer arguments
are int32, and so is a product of them.  A tensor of 2**31 elements or more (a KV cache, the
logits of a long prefill) needs int64 offsets or its far elements are addressed through a
wrapped (negative) offset.  The kernels therefore

- widen every scalar index that multiplies a stride (`program_id` of a row, a batch, a head)
  to int64 unconditionally: one 64-bit multiply per program, nothing per element; and
- widen their per-element index vectors (the `arange`-based row and column indices of a tile)
  only when the wrapper passes `WIDE=True`, which it does when some operand spans 2**31
  elements or more (`wide_offsets`): int64 tiles of offsets cost registers and address
  arithmetic on the GPU, so they are a separate specialisation, not the default.
"""

from __future__ import annotations

import numpy as np

import kdsl as kd

from ._validate import Arg

INT32_LIMIT = 2**31


@kd.jit
def widen(x, WIDE: kd.constexpr):
    """`x` as int64 when WIDE, else unchanged."""
    if WIDE:
        x = x.to(kd.int64)
    return x


def span(arg: Arg) -> int:
    """Elements from the lowest to the highest element `arg` addresses, plus one (0 when it
    has none)."""
    if not arg.shape:
        return 1
    if 0 in arg.shape:
        return 0
    strides = getattr(arg.data, "strides", None)
    item = np.dtype(arg.data.dtype).itemsize
    if strides is None or len(strides) != len(arg.shape) or any(s % item for s in strides):
        return int(np.prod(arg.shape, dtype=np.int64))
    return 1 + sum((e - 1) * abs(s // item) for e, s in zip(arg.shape, strides))


def wide_offsets(*args: Arg | None) -> bool:
    """True when some operand spans 2**31 elements or more: its offsets need int64."""
    return any(a is not None and span(a) >= INT32_LIMIT for a in args)
