"""Launch options that change the CUDA code, and arguments Triton passes, with no GPU: maxnreg
becomes `__maxnreg__` (PTX `.maxnreg`), num_stages reaches the Tile IR, and kernels with None
and strided arguments compile for sm_80 and sm_90."""

from __future__ import annotations

import numpy as np
import pytest
from kdsl.backends import cuda

import kdsl as kd

needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")


@kd.jit
def axpy(x_ptr, y_ptr, b_ptr, n, sx, a, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    v = kd.load(x_ptr + offs * sx, mask=m) * a
    if b_ptr is not None:
        v += kd.load(b_ptr + offs, mask=m)
    kd.store(y_ptr + offs, v, mask=m)


X = np.zeros((64, 2), np.float32)[:, 1]  # strided: pointer to the first element, stride 2
Y = np.zeros(64, np.float32)


def test_maxnreg_replaces_launch_bounds():
    plain = axpy.compile(X, Y, None, 64, 2, 1.5, BLOCK=64, backend="cuda")
    capped = axpy.compile(X, Y, None, 64, 2, 1.5, BLOCK=64, backend="cuda", maxnreg=40)
    assert "__launch_bounds__(128)" in plain.source and "__maxnreg__" not in plain.source
    assert "__maxnreg__(40)" in capped.source and "__launch_bounds__" not in capped.source
    assert "b_ptr" not in plain.source  # None: a compile-time constant, not a parameter


@needs_compiler
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_options_and_arguments_compile(arch):
    ck = axpy.compile(X, Y, None, 64, 2, 1.5, BLOCK=64, backend="cuda", maxnreg=40,
                      num_stages=2, num_ctas=1, enable_fp_fusion=False)
    ptx = cuda.compile_ptx(ck.source, arch)
    assert ".maxnreg 40" in ptx
    ck = axpy.compile(X, Y, Y, 64, 2, 1.5, BLOCK=64, backend="cuda", num_stages=4)
    assert "b_ptr" in ck.source and ".entry" in cuda.compile_ptx(ck.source, arch)
