"""Dynamic shared memory of the CUDA backend (no GPU needed).

Kernels whose shared arrays need more than the static 48 KiB declare them as aligned slices of
one `extern __shared__` buffer whose size is recorded (source header, `dynamic_shared_bytes`)
and passed at launch; smaller ones keep plain `__shared__` arrays.  The Loop IR simulator runs
the same kernel (it does not depend on the C spelling), so correctness is checked there.
"""

from __future__ import annotations

import numpy as np
import pytest
from kdsl.backends import cuda

from kdsl.ir import loop
from kdsl.ir.loop import (
    Array,
    ArrayStore,
    Assign,
    Barrier,
    For,
    If,
    Index,
    Kernel,
    KParam,
    PtrAdd,
    Special,
    Store,
    Var,
)
from kdsl.ir.loop_interp import run_kernel
from kdsl.ir.types import PointerType, float32, int32

needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")
F32P = PointerType(float32)


def reverse_kernel(n: int, threads: int = 128, extra: int = 0) -> Kernel:
    """out[i] = x[n - 1 - i] through a shared float buffer of n elements (plus an int32
    array of `extra` elements, to check the alignment of the second slice)."""
    x, out = Var("x", F32P), Var("out", F32P)
    k, e = Var("k", int32), Var("e", int32)
    buf = Array("buf", float32, n, "shared")
    tag = Array("tag", int32, max(extra, 1), "shared")
    tid = Special("tid")
    c = lambda v: loop.Const(v, int32)
    e_of_k = loop.Binary("add", tid, loop.Binary("mul", k, c(threads)))
    fill = For(k, c(0), c(n // threads), c(1), [
        Assign(e, e_of_k), ArrayStore(buf, e, loop.Load(PtrAdd(x, e))),
        # one writer: every thread writing tag[0] would be a shared-memory race
        If(loop.Binary("eq", tid, c(0)), [ArrayStore(tag, c(0), c(1))])])
    back = For(k, c(0), c(n // threads), c(1), [
        Assign(e, e_of_k),
        Store(PtrAdd(out, e), Index(buf, loop.Binary("sub", c(n - 1), e)))])
    return Kernel("reverse", [KParam("x", F32P), KParam("out", F32P)],
                  [fill, Barrier(), back], [k, e], [buf, tag], threads)


def test_small_kernels_stay_static():
    src = cuda.CUDABackend().codegen(reverse_kernel(1024))
    assert "__shared__ float buf[1024];" in src and "extern __shared__" not in src
    assert cuda.dynamic_shared_bytes(reverse_kernel(1024)) == 0


def test_large_kernels_use_dynamic_shared_memory():
    n = 16384 + 128  # 64.5 KiB of floats
    k = reverse_kernel(n, extra=3)
    src = cuda.CUDABackend().codegen(k)
    assert "extern __shared__ __align__(16) unsigned char kd_smem[];" in src
    assert "float* buf = (float*)(kd_smem + 0);" in src
    assert f"int* tag = (int*)(kd_smem + {n * 4});" in src  # n * 4 is a multiple of 16
    assert cuda.dynamic_shared_bytes(k) == n * 4 + 12 and "__shared__ float buf[" not in src
    assert f"// dynamic shared memory: {n * 4 + 12} bytes" in src.split("\n", 4)[2]
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    run_kernel(k, (1,), [x, out])
    np.testing.assert_array_equal(out, x[::-1])


def test_target_advertises_the_opt_in_limit():
    assert cuda.shared_limit("sm_80") == 163 * 1024
    assert cuda.shared_limit("sm_90") == 227 * 1024
    assert cuda.shared_limit("sm_86") == 99 * 1024
    assert cuda.shared_limit("sm_75") == 48 * 1024
    backend = cuda.CUDABackend()
    if not backend.is_available():  # no device: the default arch's limit
        assert backend.target(4).shared_bytes == cuda.shared_limit(backend.arch())


@needs_compiler
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_dynamic_kernel_compiles(arch):
    src = cuda.CUDABackend().codegen(reverse_kernel(32768))  # 128 KiB
    ptx = cuda.compile_ptx(src, arch)
    assert ".extern .shared .align 16 .b8 kd_smem[]" in ptx
    usage = cuda.resource_usage(src, arch)
    assert usage["shared_bytes"] == 0 and usage["spill_stores"] == 0  # all of it is dynamic
