"""Launching LLVM-backend kernels: argument packing and the parallel grid.

The generated `<name>_grid(ptr args, i64 start, i64 end, i32 g0, i32 g1, i32 g2)` reads
parameter i from bytes [8i, 8i+8) of `args` (a pointer or a scalar in the low bytes).  The
block is packed with one precompiled `struct.Struct` per kernel: a few hundred nanoseconds plus
one data-pointer lookup per array.  Each call gets its own immutable `bytes` block, so
concurrent launches of one kernel from several Python threads are safe.

The linear program-id range is cut into one chunk per worker of a persistent thread pool; the
calling thread runs the first chunk itself.  ctypes releases the GIL during the native call,
so the chunks run in parallel.  Small grids run inline on the calling thread.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kdsl.ir import loop as L
from kdsl.ir.types import PointerType

from .base import BoundArg

# void <name>_grid(const char *args, int64 start, int64 end, int32 g0, int32 g1, int32 g2)
GRID_FN = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64,
                           ctypes.c_int32, ctypes.c_int32, ctypes.c_int32)

# struct code of each scalar type, padded to an 8-byte slot (float16/bfloat16 travel as float32)
_SLOT = {"int1": "?7x", "int8": "b7x", "int16": "h6x", "int32": "i4x", "int64": "q",
         "uint8": "B7x", "uint16": "H6x", "uint32": "I4x", "uint64": "Q", "float16": "f4x",
         "bfloat16": "f4x", "float32": "f4x", "float64": "d"}


def _address(array: Any) -> int:
    """Data pointer of a NumPy array (from_buffer is the fast path; it needs a writable,
    non-empty buffer)."""
    try:
        return ctypes.addressof(_CHAR.from_buffer(array))
    except (TypeError, ValueError, BufferError):
        return array.__array_interface__["data"][0]


_CHAR = ctypes.c_char


class ArgPacker:
    """Packs `BoundArg`s in `kernel.params` order into the 8-byte slots the grid function reads."""

    def __init__(self, kernel: L.Kernel):
        codes = []
        self.is_ptr = []
        for p in kernel.params:
            ptr = isinstance(p.dtype, PointerType)
            self.is_ptr.append(ptr)
            codes.append("Q" if ptr else _SLOT[p.dtype.name])
        self.struct = struct.Struct("=" + "".join(codes))
        self.names = [p.name for p in kernel.params]

    def pack(self, args: list[BoundArg]) -> bytes:
        if len(args) != len(self.is_ptr):
            raise TypeError(f"expected {len(self.is_ptr)} arguments, got {len(args)}")
        try:
            return self.struct.pack(*[(a.address or _address(a.host)) if p else a.value
                                      for p, a in zip(self.is_ptr, args)])
        except (TypeError, AttributeError):
            for p, a in zip(self.is_ptr, args):
                if p and a.host is None:
                    raise TypeError(f"argument {a.name!r}: the llvm backend needs a host "
                                    "array") from None
            raise


_POOL_LOCK = threading.Lock()
_POOL: dict[str, Any] = {}


_WORKERS = os.cpu_count() or 1  # os.cpu_count() reads /sys: far too slow per launch


def workers() -> int:
    return _WORKERS


def _pool() -> ThreadPoolExecutor:
    """The process's worker pool (recreated after a fork, whose child has no threads)."""
    with _POOL_LOCK:
        if _POOL.get("pid") != os.getpid():
            _POOL["pool"] = ThreadPoolExecutor(max_workers=workers(),
                                               thread_name_prefix="kdsl-llvm")
            _POOL["pid"] = os.getpid()
        return _POOL["pool"]


_LIMIT = 1 << 31


def run_grid(fn: Any, packed: bytes, grid: tuple[int, int, int]) -> None:
    """Run program ids [0, g0*g1*g2) of `fn` on the pool (inline for small grids)."""
    g0, g1, g2 = grid if len(grid) == 3 else (tuple(grid) + (1, 1))[:3]
    if not (0 <= g0 < _LIMIT and 0 <= g1 < _LIMIT and 0 <= g2 < _LIMIT):
        raise ValueError(f"grid {tuple(grid)}: each dimension must be in [0, 2**31)")
    total = g0 * g1 * g2
    if total == 0:
        return
    n = _WORKERS
    if total < 2 * n or n == 1:  # small grids: inline, no pool round trip
        fn(packed, 0, total, g0, g1, g2)
        return
    bounds = [total * i // n for i in range(n + 1)]
    pool = _pool()
    futures = [pool.submit(fn, packed, bounds[i], bounds[i + 1], g0, g1, g2)
               for i in range(1, n)]
    try:
        fn(packed, bounds[0], bounds[1], g0, g1, g2)
    finally:
        for f in futures:
            f.result()  # re-raises a worker's exception here
