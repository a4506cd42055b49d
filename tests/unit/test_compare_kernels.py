"""Kernels the comparison tests launch (importable by name)."""

import kdsl as kd


@kd.jit
def axpy_like(x_ptr, out_ptr, n, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    m = offs < n
    kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=m) * 2.0 + 1.0, mask=m)
