"""Process memory at raw addresses, for the NumPy interpreters (`kdsl/ir/interp.py`,
`kdsl/ir/loop_interp.py`): what a pointer made from an integer (`int_to_ptr`) points at.

The addresses are the program's business (a table of `array.ctypes.data` values, say): the
memory they name must stay alive and hold what the kernel expects.  Before touching it, every
accessed byte range is checked against the process's memory map (`/proc/self/maps`, where the
system has one), so that a wrong address raises `IndexError` instead of crashing the process.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

_MAPS = "/proc/self/maps"
_GAP = 1 << 20  # addresses further apart than this are accessed through separate views


def _regions(write: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """Sorted (starts, ends) of the readable (or writable) mappings, adjacent ones merged;
    None when the system has no memory map to read."""
    if not os.path.exists(_MAPS):
        return None
    want = 1 if write else 0
    spans: list[tuple[int, int]] = []
    with open(_MAPS) as f:
        for line in f:
            rng, perms = line.split()[:2]
            if perms[want] != ("w" if write else "r"):
                continue
            lo, hi = (int(x, 16) for x in rng.split("-"))
            if spans and spans[-1][1] == lo:
                spans[-1] = (spans[-1][0], hi)
            else:
                spans.append((lo, hi))
    arr = np.array(spans, dtype=np.uint64).reshape(-1, 2)
    return arr[:, 0], arr[:, 1]


def check(addrs: np.ndarray, size: int, write: bool, what: str) -> None:
    """Raise IndexError unless every `[addr, addr + size)` is mapped (readable, or writable)."""
    if addrs.size == 0:
        return
    regions = _regions(write)
    if regions is None:
        return
    starts, ends = regions
    a = addrs.astype(np.uint64)
    i = np.searchsorted(starts, a, side="right").astype(np.int64) - 1
    ok = (i >= 0) & (a + np.uint64(size) <= ends[np.maximum(i, 0)]) & (addrs >= 0)
    if not ok.all():
        bad = int(addrs[~ok].flat[0])
        kind = "writable" if write else "readable"
        raise IndexError(f"{what}: address {bad:#x} ({size} bytes) is not {kind} memory of this "
                         f"process (a pointer made from an integer must hold a valid address)")


def _clusters(addrs: np.ndarray, size: int):
    """(indices, lo, hi) of groups of nearby addresses, each read through one view."""
    if addrs.size == 0:
        return
    order = np.argsort(addrs, kind="stable")
    s = addrs[order]
    cuts = np.nonzero(np.diff(s) > _GAP)[0] + 1
    for part in np.split(np.arange(s.size), cuts):
        idx = order[part]
        yield idx, int(s[part[0]]), int(s[part[-1]]) + size


def _view(lo: int, hi: int) -> np.ndarray:
    return np.frombuffer((ctypes.c_char * (hi - lo)).from_address(lo), dtype=np.uint8)


def read(addrs: np.ndarray, dtype: np.dtype, what: str = "load") -> np.ndarray:
    """Elements of `dtype` at byte addresses `addrs` (any shape; int64)."""
    dtype = np.dtype(dtype)
    flat = np.asarray(addrs, dtype=np.int64).reshape(-1)
    check(flat, dtype.itemsize, False, what)
    out = np.empty(flat.size, dtype=dtype)
    lanes = np.arange(dtype.itemsize)
    for idx, lo, hi in _clusters(flat, dtype.itemsize):
        mem = _view(lo, hi)
        out[idx] = mem[(flat[idx] - lo)[:, None] + lanes].reshape(-1).view(dtype)
    return out.reshape(np.shape(addrs))


def write(addrs: np.ndarray, values: np.ndarray, dtype: np.dtype, what: str = "store") -> None:
    """Write `values` (converted to `dtype`) at byte addresses `addrs`; with repeated addresses
    one of the values is written."""
    dtype = np.dtype(dtype)
    flat = np.asarray(addrs, dtype=np.int64).reshape(-1)
    vals = np.broadcast_to(np.asarray(values), np.shape(addrs)).reshape(-1).astype(dtype)
    check(flat, dtype.itemsize, True, what)
    lanes = np.arange(dtype.itemsize)
    for idx, lo, hi in _clusters(flat, dtype.itemsize):
        mem = _view(lo, hi)
        mem[(flat[idx] - lo)[:, None] + lanes] = np.ascontiguousarray(vals[idx]).view(
            np.uint8).reshape(-1, dtype.itemsize)


__all__ = ["check", "read", "write"]
