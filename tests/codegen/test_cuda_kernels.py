"""Every test kernel's CUDA source is generated with no GPU and compiled for sm_80 and sm_90
(NVRTC, or nvcc as the fallback); register use and spills are reported."""

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


ops = _load("test_ops")
tut = _load("test_tutorials")
scan = _load("test_scan")

f32 = np.zeros(4, np.float32)
f16 = np.zeros(4, np.float16)
i32 = np.zeros(4, np.int32)
i8 = np.zeros(4, np.int8)
u16 = np.zeros(4, np.uint16)

CASES = {
    "add": (tut.add, (f32, f32, f32, 4), dict(BLOCK=1024)),
    "softmax": (tut.softmax_kernel, (f32, f32, 4, 4, 4), dict(BLOCK=1024)),
    "matmul_f32": (tut.matmul_kernel, (f32, f32, f32) + (4,) * 9,
                   dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8)),
    "matmul_f16": (tut.matmul_kernel, (f16, f16, f32) + (4,) * 9,
                   dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8)),
    "layer_norm": (tut.layer_norm_kernel, (f32, f32, f32, f32, 4, 4, 1e-5), dict(BLOCK=1024)),
    "attention": (tut.attention_kernel, (f32, f32, f32, f32, 4, 0.1),
                  dict(D=64, BLOCK_M=64, BLOCK_N=32)),
    "erf": (ops.erf_kernel, (f32, f32, 4), dict(BLOCK=256)),
    "int_ops": (ops.int_ops_kernel, (i32, i32, i32, 4), dict(BLOCK=128)),
    "outer": (ops.outer_kernel, (f32, f32, f32, 4, 4), dict(BM=16, BN=32)),
    "full_reduce": (ops.full_reduce_kernel, (f32, f32, 4), dict(BLOCK=1024)),
    "nan_max": (ops.nan_max_kernel, (f32, f32), dict(BLOCK=64)),
    "loops": (ops.loop_kernel, (f32, f32, 4), dict(BLOCK=64)),
    "helper": (ops.helper_kernel, (f32, f32), dict(BLOCK=32)),
    "dot_f16": (ops.dot_kernel, (f16, f16, f32, 4, 4, 4), dict(BM=32, BN=32, BK=32)),
    "dot_int8": (ops.int8_dot_kernel, (i8, i8, i32), dict(B=16)),
    "casts": (ops.cast_kernel, (f32, f16, u16, f32, 4), dict(BLOCK=256)),
    "f16_math": (ops.f16_math_kernel, (f16, f16), dict(BLOCK=128)),
    "histogram": (ops.histogram_kernel, (i32, i32, 4), dict(BLOCK=256)),
}
CASES.update({  # scans and tuple reductions (tests/backend/test_scan.py)
    "cumsum_i32": (scan.scan2d, (i32, i32, 4, 4),
                   dict(AXIS=1, REV=False, PROD=False, BM=16, BN=16)),
    "cumprod_f32_rev": (scan.scan2d, (f32, f32, 4, 4),
                        dict(AXIS=0, REV=True, PROD=True, BM=16, BN=16)),
    "cumsum_f16_1d": (scan.scan1d, (f16, f16, 4), dict(REV=True, BLOCK=1024)),
    "scan_tuple": (scan.assoc_kernel, (f32, f32, i32, 4, 4),
                   dict(AXIS=1, REV=False, BM=8, BN=16)),
    "welford": (scan.welford_rows, (f32, f32, f32, 4, 4), dict(BM=8, BN=64)),
    "max_indices": (scan.max_kernel, (f32, f32, i32, 4, 4),
                    dict(AXIS=None, MIN=False, BM=8, BN=16)),
    "softmax_builtin": (scan.softmax_kernel, (f16, f16, 4, 4), dict(BM=8, BN=16)),
})
CASES.update({f"unary_{n}": (k, (f32, f32, 4), dict(BLOCK=512))
              for n, k in ops.UNARY_KERNELS.items()})
CASES.update({f"reduce_{op}_{ax}": (k, (f32, f32, 4, 4), dict(BM=16, BN=32))
              for (op, ax), k in ops.REDUCE_KERNELS.items()})

needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")


def test_codegen_needs_no_gpu():
    ck = tut.add.compile(f32, f32, f32, 4, BLOCK=1024, backend="cuda")
    assert ck.backend == "cuda" and '__global__' in ck.source
    assert "loop" in ck.ir and "tile" in ck.ir


@needs_compiler
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiles(case, arch):
    kernel, args, constexprs = CASES[case]
    ck = kernel.compile(*args, backend="cuda", num_warps=4, **constexprs)
    cubin = cuda.compile_cubin(ck.source, arch)
    assert cubin[:4] == b"\x7fELF"
    if arch == "sm_90":
        usage = cuda.resource_usage(ck.source, arch)
        print(f"{case}: {usage}")
        assert usage["registers"] > 0
