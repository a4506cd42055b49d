"""CUDA code generation, with no GPU, of the `kd.dot_scaled` kernels of
tests/backend/test_dot_scaled.py: each compiles for sm_80 and sm_90, and the emulated product
runs on the tensor cores (a bfloat16 or float16 mma)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from kdsl.backends import cuda

ml_dtypes = pytest.importorskip("ml_dtypes", reason="float8 references need ml_dtypes (test extra)")

HERE = Path(__file__).resolve().parent.parent / "backend"
needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")

_spec = importlib.util.spec_from_file_location("kdsl_cuda_dot_scaled",
                                               HERE / "test_dot_scaled.py")
mx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mx)

u8 = np.zeros(64, np.uint8)
u16 = np.zeros(64, np.uint16)
f16 = np.zeros(64, np.float16)
f32 = np.zeros(64, np.float32)
e5 = np.zeros(64, ml_dtypes.float8_e5m2)

# name: (lhs, rhs, acc, lhs format, rhs format, lhs_k_pack, rhs_k_pack, fast_math)
CASES = {
    "e2m1_e4m3": (u8, u8, f32, "e2m1", "e4m3", True, True, False),
    "e2m1_e2m1_mn": (u8, u8, None, "e2m1", "e2m1", False, False, False),
    "e5m2_bf16": (e5, u16, f32, "e5m2", "bf16", True, True, True),
    "fp16_e2m1": (f16, u8, None, "fp16", "e2m1", True, False, False),
}


def source(case: str) -> str:
    a, b, acc, fa, fb, pa, pb, fast = CASES[case]
    ck = mx.scaled_kernel.compile(a, u8, b, u8, acc, f32, 32, 32, 64, fa, fb, pa, pb, fast,
                                  backend="cuda", num_warps=4)
    return ck.source


@needs_compiler
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiles(case, arch):
    ptx = cuda.compile_ptx(source(case), arch)
    assert ".entry" in ptx and f".target {arch}" in ptx
    kind = "f16" if "fp16" in case else "bf16"
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32" in ptx
