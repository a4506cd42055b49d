"""Generated code of the atomics and the debugging ops: CUDA C for every op x dtype x scope
compiles with NVRTC for sm_80 and sm_90 (no GPU needed), and the memory semantics asked for
reach the OpenCL, CUDA and LLVM code (fences, `_system` atomics, orderings)."""

from __future__ import annotations

import numpy as np
import pytest
from kdsl.backends import cuda

import kdsl as kd
from kdsl.ir.atomics import CAS_DTYPES, RMW_DTYPES
from kdsl.runtime.binding import bfloat16_view

needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")

DTYPES = sorted(set(CAS_DTYPES) | {d for ds in RMW_DTYPES.values() for d in ds})


@kd.jit
def every_atomic(p_ptr, o_ptr, OPS: kd.constexpr, CAS: kd.constexpr, SCOPE: kd.constexpr,
                 SEM: kd.constexpr):
    offs = kd.arange(0, 64)
    m = offs < 50
    v = kd.load(p_ptr + offs)
    k = 0
    for op in OPS:
        f = getattr(kd, f"atomic_{op}")
        old = f(p_ptr + offs % 7, v, mask=m, sem=SEM, scope=SCOPE)  # tile, masked
        kd.store(o_ptr + k * 64 + offs, old)
        s = f(p_ptr + 9, kd.load(p_ptr + 10), sem=SEM, scope=SCOPE)  # scalar, once
        kd.store(o_ptr + k * 64, s)
        k += 1
    if CAS:
        old = kd.atomic_cas(p_ptr + offs % 5, v, v + 1, sem=SEM, scope=SCOPE)
        kd.store(o_ptr + k * 64 + offs, old)
        while kd.atomic_cas(p_ptr + 11, 0, 1, sem=SEM, scope=SCOPE) == 1:
            pass


def _args(dt: str):
    a = np.zeros(64 * 9, np.uint16 if dt == "bfloat16" else np.dtype(dt))
    return (bfloat16_view(a), bfloat16_view(a.copy())) if dt == "bfloat16" else (a, a.copy())


def _source(dt: str, backend: str, scope: str = "gpu", sem: str = "acq_rel") -> str:
    ops = tuple(op for op, dts in RMW_DTYPES.items() if dt in dts)
    return every_atomic.compile(*_args(dt), OPS=ops, CAS=dt in CAS_DTYPES, SCOPE=scope,
                                SEM=sem, backend=backend).source


@needs_compiler
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("scope", ["gpu", "sys"])
def test_cuda_atomics_compile(dt, scope):
    src = _source(dt, "cuda", scope)
    for arch in ("sm_80", "sm_90"):
        ptx = cuda.compile_ptx(src, arch)
        assert "atom." in ptx or "red." in ptx
        if scope == "sys":
            assert ".sys." in ptx and ("membar.sys" in ptx or "fence.sc.sys" in ptx)


def test_opencl_spellings_and_fences():
    src = _source("int64", "opencl", sem="relaxed")
    assert "atom_max(" in src and "atom_cmpxchg(" in src and "mem_fence" not in src
    assert "cl_khr_int64_extended_atomics : enable" in src
    src = _source("int32", "opencl")  # acq_rel: a fence on both sides of each atomic
    assert src.count("mem_fence(CLK_GLOBAL_MEM_FENCE);") == 2 * src.count("= atomic_")
    src = _source("float16", "opencl", sem="release")
    assert "kd_atomic_add_float16(" in src and "kd_cas16(" in src
    assert src.count("mem_fence(") == src.count("= kd_atomic_")


def test_cuda_spellings_and_fences():
    src = _source("float32", "cuda", scope="sys", sem="acquire")
    assert "atomicAdd_system(" in src and "atomicExch_system(" in src
    assert "__threadfence_system();" in src and "__threadfence();" not in src
    src = _source("uint64", "cuda", scope="cta")
    assert "__threadfence_block();" in src and "atomicMax(" in src
    src = _source("float16", "cuda")  # device scope: the native half add
    assert "atomicAdd(" in src and "__float2half_rn" in src
    src = _source("bfloat16", "cuda", scope="gpu")
    assert "kd_atomic_add_bfloat16(" in src


def test_llvm_orderings():
    src = _source("float32", "llvm", sem="relaxed")
    assert "atomicrmw fadd" in src and "monotonic" in src and "acq_rel" not in src
    src = _source("int32", "llvm")
    assert "atomicrmw max" in src and "cmpxchg" in src and "acq_rel acquire" in src
    src = _source("uint32", "llvm", sem="release")
    assert "atomicrmw umin" in src and "release monotonic" in src


@kd.jit
def debug_kernel(x_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    x = kd.load(x_ptr + offs, mask=offs < n)
    kd.device_print("x", x, (x * 3).to(kd.int64), x.to(kd.bfloat16))
    kd.device_print("hex", x.to(kd.float16), x.to(kd.uint8), hex=True)
    print("n", n)
    kd.device_assert(x < 100, "small")
    kd.debug_barrier()


@needs_compiler
def test_cuda_debug_ops_compile():
    x = np.zeros(64, np.float32)
    src = debug_kernel.compile(x, 64, BLOCK=64, backend="cuda", debug=True).source
    assert 'printf("pid (%d, %d, %d) idx (%2d) x: (operand 1) %lld\\n"' in src
    assert "0x%04x" in src and "__syncthreads();" in src and "kd_errors" in src
    for arch in ("sm_80", "sm_90"):
        assert "vprintf" in cuda.compile_ptx(src, arch)


def test_opencl_printf_spelling():
    x = np.zeros(64, np.float32)
    src = debug_kernel.compile(x, 64, BLOCK=64, backend="opencl").source
    assert 'printf("pid (%d, %d, %d) idx (%2d) x: (operand 1) %ld\\n"' in src
    assert 'printf("pid (%d, %d, %d) idx () n: %d\\n"' in src
