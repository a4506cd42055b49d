"""Helpers of the kernel library tests: the dtypes swept, random inputs in the library's
spellings, and the rule for which cases run by default.

Compiling a kernel variant for PoCL takes seconds (up to ~10 s for fp16 attention), so on
the opencl backend the float16/bfloat16 variants of the heavier kernels are marked slow
(`skip_heavy`); llvm and interp run every dtype by default.
"""

from __future__ import annotations

import pytest
from kdsl.kernels import reference

import kdsl as kd

DTYPES = ["float32", "float16", "bfloat16"]


def rand(rng, shape, dtype, scale=1.0, shift=0.0):
    """Standard normal values * scale + shift, rounded to `dtype` (library spelling)."""
    return reference.cast(rng.standard_normal(shape) * scale + shift, dtype)


def skip_heavy(backend: str, dtype: str) -> None:
    """Skip, visibly, a 16-bit variant of a heavy kernel on opencl unless slow tests run."""
    import os

    if backend == "opencl" and dtype != "float32" and os.environ.get("KDSL_SLOW", "") in ("", "0"):
        pytest.skip(f"slow: {dtype} variant compiles for seconds on PoCL; set KDSL_SLOW=1")


def slow_on_opencl(backend: str, why: str) -> None:
    """Skip, visibly, a test on opencl unless slow tests run: its many kernel variants would
    take PoCL minutes to compile, and the code it checks does not depend on the backend."""
    import os

    if backend == "opencl" and os.environ.get("KDSL_SLOW", "") in ("", "0"):
        pytest.skip(f"slow on opencl ({why}); set KDSL_SLOW=1")


def check(actual, expected, dtype: str, k: int, k_out: int = 1) -> None:
    """Compare a kernel's output with its float64 reference under the library's tolerance rule
    (docs/numerics.md, the rule `kdsl compare` applies): a float32 reduction of length `k`, then
    `k_out` roundings to `dtype` (1: the output only; 2 where an intermediate is also rounded
    to the input dtype: mlp's h, attention's p, quant_matmul's dequantised weights)."""
    from kdsl.testing import assert_close

    assert_close(actual, expected, dtype=dtype, k=k, acc_dtype="float32", k_out=k_out)


@kd.jit
def tile_mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: kd.constexpr, BN: kd.constexpr, BK: kd.constexpr,
       ACC_INT: kd.constexpr, B_T: kd.constexpr = False, B_CM: kd.constexpr = False):
    """A matmul tile program for the matrix-unit dot's tests (tests/unit/test_tile_dot.py,
    tests/backend/test_tile_dot_llvm.py): int32 accumulation with ACC_INT, b in rows, as
    trans() of a [N, K] load (B_T) or loaded column-major by its addresses (B_CM)."""
    rm = kd.program_id(0) * BM + kd.arange(0, BM)
    rn = kd.program_id(1) * BN + kd.arange(0, BN)
    rk = kd.arange(0, BK)
    if ACC_INT:
        acc = kd.zeros((BM, BN), dtype=kd.int32)
    else:
        acc = kd.zeros((BM, BN), dtype=kd.float32)
    for k0 in range(0, K, BK):
        a = kd.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0)
        if B_T:  # b stored [N, K]: read as its transpose
            bt = kd.load(b_ptr + rn[:, None] * K + (k0 + rk)[None, :],
                         mask=(rn[:, None] < N) & ((k0 + rk)[None, :] < K), other=0)
            b = kd.trans(bt)
        elif B_CM:  # b stored [N, K], loaded [K, N] by its addresses (the library's B_T)
            b = kd.load(b_ptr + (k0 + rk)[:, None] + rn[None, :] * K,
                        mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0)
        else:
            b = kd.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :],
                        mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0)
        acc = kd.dot(a, b, acc)
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))
