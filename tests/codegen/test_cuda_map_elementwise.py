"""CUDA code generation, with no GPU, of the `kd.map_elementwise` kernels of
tests/backend/test_map_elementwise.py: each compiles for sm_80 and sm_90."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from kdsl.backends import cuda

HERE = Path(__file__).resolve().parent.parent / "backend"
needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")

_spec = importlib.util.spec_from_file_location("kdsl_cuda_map_elementwise",
                                               HERE / "test_map_elementwise.py")
me = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(me)

f32 = np.zeros(64, np.float32)
i32 = np.zeros(64, np.int32)

CASES = {
    "selu": (me.selu_kernel, (f32, f32, 1.5, 64), {"BLOCK": 128}),
    "piecewise": (me.piecewise_kernel, (f32, f32, f32, i32, 2.0), {"BM": 8, "BN": 32}),
    "loop_return": (me.loop_kernel, (i32, i32, i32, 12), {"BLOCK": 256}),
    "memory": (me.memory_kernel, (i32, f32, 16, f32, f32, f32, i32), {"BLOCK": 64}),
    "pack": (me.pack_kernel, (i32, i32, i32, i32), {"BM": 4, "BN": 64}),
}


@needs_compiler
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiles(case, arch):
    fn, args, constexprs = CASES[case]
    src = fn.compile(*args, backend="cuda", num_warps=4, **constexprs).source
    ptx = cuda.compile_ptx(src, arch)
    assert ".entry" in ptx and f".target {arch}" in ptx
