"""The kernels of tests/backend/test_frontend_kernels.py (block pointers, tensor descriptors,
early returns in loops, tuple-carrying loops, and/or masks, rtz casts): CUDA source generated
with no GPU and compiled for sm_80 and sm_90."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from kdsl.backends import cuda

HERE = Path(__file__).resolve().parent.parent / "backend"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"kdsl_cuda_{name}", HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fk = _load("test_frontend_kernels")

f32 = np.zeros(4, np.float32)
f16 = np.zeros(4, np.float16)
i32 = np.zeros(4, np.int32)
u16 = np.zeros(4, np.uint16)

CASES = {
    "bp_matmul_f32": (fk.bp_matmul_kernel, (f32, f32, f32) + (4,) * 9,
                      {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}),
    "bp_matmul_f16": (fk.bp_matmul_kernel, (f16, f16, f16) + (4,) * 9,
                      {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}),
    "bp_attention": (fk.bp_attention_kernel, (f32, f32, f32, f32, 4, 0.1),
                     {"D": 64, "BLOCK_M": 64, "BLOCK_N": 32}),
    "descriptor": (fk.descriptor_kernel, (f32, f32, 4, 4, 1), {"BM": 32, "BN": 32}),
    "descriptor_sum": (fk.descriptor_sum_kernel, (f32, f32, 4, 4), {"BM": 16, "BN": 16}),
    "find_first": (fk.find_first_kernel, (f32, i32, 4, 0.5), {"BLOCK": 128}),
    "early_return": (fk.early_return_kernel, (f32, f32, 4, 2), {}),
    "tuple_loop": (fk.tuple_loop_kernel, (f32, f32, 4, 4), {"BLOCK": 128}),
    "logical_mask": (fk.logical_mask_kernel, (f32, f32, 4, 0.5, 1.5), {"BLOCK": 256}),
    "rtz": (fk.rtz_kernel, (f32, f16, u16, f16), {"BLOCK": 256}),
}

needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")


@needs_compiler
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiles(case, arch):
    kernel, args, constexprs = CASES[case]
    ck = kernel.compile(*args, backend="cuda", num_warps=4, **constexprs)
    assert "__global__" in ck.source
    cubin = cuda.compile_cubin(ck.source, arch)
    assert cubin[:4] == b"\x7fELF"


def test_num_stages_reaches_the_tile_ir():
    kernel, args, constexprs = CASES["bp_matmul_f16"]
    ck = kernel.compile(*args, backend="cuda", num_warps=4, **constexprs)
    assert "{num_stages=3}" in ck.ir["tile"]
