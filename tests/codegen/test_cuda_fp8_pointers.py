"""CUDA code generation, with no GPU, of the 8-bit float kernels and the pointer-cast kernels
of tests/backend/test_fp8.py and test_pointers.py: every one compiles for sm_80 and sm_90, fp8
dots use the tensor cores (through float16), and the grouped GEMM loads device pointers from
its tables."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from kdsl.backends import cuda

import kdsl as kd

ml_dtypes = pytest.importorskip("ml_dtypes", reason="float8 references need ml_dtypes (test extra)")

HERE = Path(__file__).resolve().parent.parent / "backend"
needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"kdsl_cuda_{name}", HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


f8 = _load("test_fp8")
ptrs = _load("test_pointers")

u8 = np.zeros(256, np.uint8)
f32 = np.zeros(256, np.float32)
i64 = np.zeros(4, np.int64)
i32 = np.zeros(9, np.int32)


def fp8(dt):
    return kd.float8_view(u8, dt)


CASES = {
    "copy_codes_e4nv": (f8.copy_codes, (fp8(kd.float8e4nv), fp8(kd.float8e4nv), f32, u8),
                        {"BLOCK": 256}),
    "from_bits_e5": (f8.from_bits, (u8, fp8(kd.float8e5)), {"BLOCK": 256}),
    "convert_f32_e4b15": (f8.convert, (f32, fp8(kd.float8e4b15), 4), {"BLOCK": 256}),
    "convert_f16_e4b8": (f8.convert, (np.zeros(4, np.float16), fp8(kd.float8e4b8), 4),
                         {"BLOCK": 256}),
    "convert_f64_e5b16": (f8.convert, (np.zeros(4), fp8(kd.float8e5b16), 4), {"BLOCK": 256}),
    "add_e5": (f8.add_fp8, (fp8(kd.float8e5), fp8(kd.float8e5), fp8(kd.float8e5), 4),
               {"BLOCK": 256}),
    "quantize_e4nv": (f8.quantize_rows, (f32, np.zeros(4, ml_dtypes.float8_e4m3fn), f32, 4),
                      {"BLOCK": 256}),
    "quantize_e5": (f8.quantize_rows, (f32, np.zeros(4, ml_dtypes.float8_e5m2), f32, 4),
                    {"BLOCK": 256}),
    "dot_e4nv_e5": (f8.dot_fp8, (fp8(kd.float8e4nv), fp8(kd.float8e5), f32),
                    {"M": 16, "N": 16, "K": 32}),
    "addresses": (ptrs.addresses, (f32, i64, f32), {}),
    "as_bytes": (ptrs.as_bytes, (f32, u8), {"BLOCK": 16}),
    "grouped_gemm": (ptrs.grouped_gemm, (i64, i64, i64, i32, 3), {"BM": 32, "BN": 32, "BK": 16}),
    "through_table": (ptrs.through_table, (i64, f32, 5), {"BLOCK": 128}),
}


def source(case: str, **options) -> str:
    fn, args, constexprs = CASES[case]
    return fn.compile(*args, backend="cuda", **constexprs, **options).source


@needs_compiler
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiles(case, arch):
    ptx = cuda.compile_ptx(source(case), arch)
    assert ".entry" in ptx and f".target {arch}" in ptx


@needs_compiler
def test_fp8_dot_uses_tensor_cores():
    ptx = cuda.compile_ptx(source("dot_e4nv_e5"), "sm_90")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx


def test_fp8_memory_is_bytes_and_pointers_are_cast():
    src = source("copy_codes_e4nv")
    assert "unsigned char* src" in src and "__half" not in src
    src = source("grouped_gemm")
    assert "((float*)" in src  # the table's integers become pointers
    src = source("addresses")
    assert "((long long)" in src or "(long long)(x_ptr" in src


@needs_compiler
def test_fast_math_keeps_fp8_rounding():
    # the conversions rely on no float arithmetic that fast math may change
    ptx = cuda.compile_ptx(source("convert_f32_e4b15", fast_math=True), "sm_80")
    assert ".entry" in ptx
