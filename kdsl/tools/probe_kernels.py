"""The kernels the tools measure the machine with: an empty kernel (launch overhead), a
STREAM-like copy (bandwidth) and independent FMA chains (peak arithmetic rate)."""

from __future__ import annotations

from typing import Any

import kdsl as kd  # (read when a kernel compiles; `kd.testing` is imported while kdsl loads)
from kdsl.runtime.jit import jit


@jit
def noop(x_ptr, n):
    offs = kd.program_id(0) + kd.arange(0, 1)
    kd.store(x_ptr + offs, 0.0, mask=offs < n)


@jit
def copy(src_ptr, dst_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(dst_ptr + offs, kd.load(src_ptr + offs, mask=m), mask=m)


@jit
def fma_chains(x_ptr, out_ptr, iters, BLOCK: kd.constexpr):
    # four independent chains per lane hide the FMA latency; every lane is independent too
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    a = kd.load(x_ptr + offs)
    b = a + 1.0
    c = a + 2.0
    d = a + 3.0
    for _ in range(iters):
        a = kd.fma(a, 0.999, 0.001)
        b = kd.fma(b, 0.999, 0.001)
        c = kd.fma(c, 0.999, 0.001)
        d = kd.fma(d, 0.999, 0.001)
    kd.store(out_ptr + offs, a + b + c + d)


def noop_kernel() -> Any:
    """An empty kernel (`noop[(1,)](x, 0)` stores nothing): launch overhead."""
    return noop


__all__ = ["copy", "fma_chains", "noop", "noop_kernel"]
