"""Large host arrays for the library's results, reused once nothing references them.

A fresh NumPy array of 32 MiB or more is a fresh `mmap` (glibc serves every request above its
largest dynamic mmap threshold, 32 MiB on 64-bit, from new pages), and the OS zeroes each page
on its first touch: on the Emerald Rapids host a 64 MiB `np.empty` plus one fill took 10.2 ms
against 3.3 ms for the fill of a reused array, more than a softmax spends reading and writing
the same bytes.  Smaller arrays come back from malloc's heap without faults and are not pooled.

The library's kernels write every element of their result, so memory that an earlier result
held serves as well as fresh pages.  A block is idle exactly when the pool's own reference is
the only one left (`sys.getrefcount`): every array derived from a result (views, reshapes,
`torch.from_numpy`, a `memoryview`, a DLPack capsule) keeps NumPy's base array, the block,
alive, and CPython drops references deterministically.  A result held only by a reference
cycle stays busy until the cycle collector runs; nothing is ever handed out twice.

Blocks are page aligned (a NumPy array's data sits 16 bytes past a 64-byte line, so every
64-byte vector access of a fresh array straddles two cache lines: 3-12% of a softmax or
rms_norm) and sized in 2 MiB steps (transparent huge pages).  At most `cap()` bytes of idle
blocks stay allocated after a request: `KDSL_HOST_POOL` bytes (suffixes K, M, G), by default
the smaller of 1 GiB and an eighth of the physical memory; `0` turns pooling off (every result
a plain `np.empty`).  `release()` frees the idle blocks now.
"""

from __future__ import annotations

import math
import os
import sys
import threading

import numpy as np

#: requests below this are left to malloc (its heap reuses them without page faults)
MIN_BYTES = 32 << 20
#: block sizes are multiples of this (one transparent huge page)
GRAIN = 2 << 20
PAGE = 4096
ENV = "KDSL_HOST_POOL"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _default_cap() -> int:
    try:
        phys = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - no sysconf
        phys = 8 << 30
    return min(1 << 30, phys // 8)


def cap() -> int:
    """The most idle bytes the pool keeps (`KDSL_HOST_POOL`, read at each request)."""
    raw = os.environ.get(ENV, "").strip().upper().removesuffix("B").removesuffix("I")
    if not raw:
        return _default_cap()
    unit = raw[-1] if raw[-1] in _UNITS else ""
    try:
        value = int(raw[: len(raw) - len(unit)])
    except ValueError:
        raise ValueError(f"{ENV}={os.environ[ENV]!r}: expected a byte count such as 0, "
                         f"512M or 2G") from None
    return max(value, 0) * _UNITS[unit]


class _Block:
    """One allocation: `raw` (the NumPy array owning the memory), the page-aligned `offset`
    into it, and the usable `size`."""

    __slots__ = ("raw", "offset", "size")

    def __init__(self, size: int):
        self.raw = np.empty(size + PAGE, np.uint8)
        self.offset = -self.raw.ctypes.data % PAGE
        self.size = size

    def idle(self) -> bool:
        # references: this object's attribute and getrefcount's own argument
        return sys.getrefcount(self.raw) <= 2

    def array(self, shape: tuple[int, ...], dtype: np.dtype, nbytes: int) -> np.ndarray:
        return self.raw[self.offset:self.offset + nbytes].view(dtype).reshape(shape)


class HostPool:
    """Idle-block reuse with a bound on the idle bytes kept (see the module docstring)."""

    def __init__(self) -> None:
        self._blocks: list[_Block] = []  # least recently handed out first
        self._lock = threading.Lock()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type | str) -> np.ndarray:
        """An uninitialised C-contiguous array, like `np.empty(shape, dtype)`."""
        if math.prod(shape) < MIN_BYTES >> 3:  # too small whatever the dtype: the fast path
            return np.empty(shape, dtype)
        dt = np.dtype(dtype)
        nbytes = math.prod(shape) * dt.itemsize
        if nbytes < MIN_BYTES:
            return np.empty(shape, dt)
        limit = cap()
        if limit <= 0:
            return np.empty(shape, dt)
        size = -(-nbytes // GRAIN) * GRAIN
        with self._lock:
            block = self._take(size)
            if block is None:
                self._trim(max(limit - size, 0))  # room first: the peak stays bounded
                block = _Block(size)
            self._blocks.append(block)
            out = block.array(tuple(shape), dt, nbytes)
            self._trim(limit)
        return out

    def _take(self, size: int) -> _Block | None:
        """The smallest idle block of `size` to twice `size` bytes, removed from the list."""
        fits = [b for b in self._blocks if size <= b.size < 2 * size and b.idle()]
        if not fits:
            return None
        best = min(fits, key=lambda b: b.size)
        self._blocks.remove(best)
        return best

    def _trim(self, keep: int) -> None:
        """Free the least recently used idle blocks until at most `keep` idle bytes remain."""
        idle = [b for b in self._blocks if b.idle()]
        total = sum(b.size for b in idle)
        for b in idle:
            if total <= keep:
                break
            total -= b.size
            self._blocks.remove(b)

    def release(self) -> int:
        """Free every idle block now; returns the bytes freed."""
        with self._lock:
            before = sum(b.size for b in self._blocks)
            self._trim(0)
            return before - sum(b.size for b in self._blocks)

    def stats(self) -> dict[str, int]:
        """{"blocks", "busy_bytes", "idle_bytes"}: what the pool holds now."""
        with self._lock:
            idle_bytes = sum(b.size for b in self._blocks if b.idle())
            return {"blocks": len(self._blocks), "idle_bytes": idle_bytes,
                    "busy_bytes": sum(b.size for b in self._blocks) - idle_bytes}


POOL = HostPool()
empty = POOL.empty
release = POOL.release
stats = POOL.stats
