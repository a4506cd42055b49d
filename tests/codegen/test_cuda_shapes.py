"""The shape, sort and random-number test kernels generate CUDA C that compiles for sm_80 and
sm_90 (NVRTC or nvcc; no GPU needed)."""

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


shapes = _load("test_shapes")
rnd = _load("test_random")


def z(dtype, n=64):
    return np.zeros(n, dtype)


f32, f16, i32, i64, u8, u32, u64 = (np.float32, np.float16, np.int32, np.int64, np.uint8,
                                    np.uint32, np.uint64)
CASES = {
    "split_join": (shapes.split_join_kernel, (z(f32), z(f32), z(f32)), {"M": 4, "N": 16}),
    "cat_flip_f16": (shapes.cat_flip_kernel, (z(f16), z(f16), z(f16)), {"A": 2, "B": 4, "C": 8}),
    "cat_flip_i64": (shapes.cat_flip_kernel, (z(i64), z(i64), z(i64)), {"A": 3, "B": 5, "C": 4}),
    "gather": (shapes.gather_kernel, (z(f32), z(i64), z(f32)),
               {"M": 8, "N": 16, "K": 5, "AXIS": 1}),
    "gather_axis0": (shapes.gather_kernel, (z(i32), z(u8), z(i32)),
                     {"M": 16, "N": 8, "K": 3, "AXIS": 0}),
    "histogram": (shapes.histogram_kernel, (z(i32), z(i32), 4), {"BLOCK": 64, "BINS": 16}),
    "histogram_u8": (shapes.histogram_kernel, (z(u8), z(i32), 4), {"BLOCK": 32, "BINS": 300}),
    "sort": (shapes.sort_kernel, (z(f32), z(f32)), {"M": 4, "N": 16, "K": 4}),
    "sort_1024": (shapes.sort1024_kernel, (z(f32), z(f32)), {"N": 1024}),
    "swizzle": (shapes.swizzle_kernel, (z(i32),), {"SI": 6, "SJ": 5, "SG": 4}),
    "random_i32": (rnd.random_kernel, (z(u32), z(f32), 5, 3), {"BLOCK": 64}),
    "random_i64": (rnd.random_kernel, (z(u32), z(f32), 2**40, 2**33), {"BLOCK": 64}),
    "philox4x64": (rnd.philox64_kernel, (z(u64), z(u64), 7), {"BLOCK": 32}),
    "randn": (rnd.randn_kernel, (z(f32), 2024), {"BLOCK": 1024}),
}

needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")


@needs_compiler
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiles(case, arch):
    kernel, args, constexprs = CASES[case]
    ck = kernel.compile(*args, backend="cuda", num_warps=4, **constexprs)
    assert cuda.compile_cubin(ck.source, arch)[:4] == b"\x7fELF"
