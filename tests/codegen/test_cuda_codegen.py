"""CUDA code generation with no GPU: the hand-built kernels of tests/codegen/test_c_like.py
compile with NVRTC (or nvcc) for sm_80 and sm_90, PTX and resource usage come out."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kdsl.compile_options import CompileOptions
from kdsl.backends import cuda
from kdsl.backends.cuda import CUDABackend, compile_cubin, compile_ptx, resource_usage
from kdsl.runtime.device import launch

_spec = importlib.util.spec_from_file_location(
    "kdsl_c_like_samples", Path(__file__).with_name("test_c_like.py"))
samples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(samples)

BACKEND = CUDABackend()
needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")


def test_target_needs_no_device():
    t = BACKEND.target(8)
    assert (t.backend, t.threads, t.warp_size) == ("cuda", 256, 32)
    assert t.shared_bytes == cuda.shared_limit(BACKEND.arch())  # the arch's opt-in limit
    assert {"fp64", "native_fp16", "warp_shuffle", "tensor_cores"} <= t.caps


def test_codegen_imports_no_cupy():
    src = BACKEND.codegen(samples.vector_add(128))
    assert 'extern "C" __global__' in src and "__launch_bounds__(128)" in src


@needs_compiler
@pytest.mark.parametrize("sample", samples.SAMPLES)
def test_samples_compile_sm80(sample):
    src = BACKEND.codegen(samples.SAMPLES[sample](128))
    ptx = compile_ptx(src, "sm_80")
    assert ".entry" in ptx and ".target sm_80" in ptx


@needs_compiler
@pytest.mark.parametrize("sample", ["vector_add", "block_sum", "half", "atomics", "int64_ops",
                                    "control", "sigmoid_f64"])
def test_samples_compile_sm90_cubin(sample):
    cubin = compile_cubin(BACKEND.codegen(samples.SAMPLES[sample](32)), "sm_90")
    assert cubin[:4] == b"\x7fELF"


@needs_compiler
def test_compile_error_carries_the_log():
    with pytest.raises(cuda.CUDACompileError, match="undefined_thing"):
        compile_ptx('extern "C" __global__ void k() { undefined_thing(); }', "sm_80")


@needs_compiler
def test_resource_usage_reports_numbers():
    src = BACKEND.codegen(samples.block_sum(128))
    usage = resource_usage(src, "sm_80")
    assert usage["registers"] > 0
    assert usage["shared_bytes"] == 128 * 4  # __shared__ float buf[128]
    assert usage["spill_stores"] == 0
    assert resource_usage(compile_ptx(src, "sm_90"), "sm_90")["registers"] > 0


@needs_compiler
def test_fast_math_reaches_the_compiler():
    k = samples.unary("sqrt", 32)
    precise = compile_ptx(BACKEND.codegen(k), "sm_80")
    k.options = CompileOptions(fast_math=True)
    fast = compile_ptx(BACKEND.codegen(k), "sm_80")
    assert "sqrt.rn.f32" in precise and "sqrt.approx" not in precise
    assert "sqrt.approx" in fast


@needs_compiler
def test_add_stages_adds_ptx_and_resources():
    from kdsl.runtime.stages import Stages

    stages = Stages()
    BACKEND.add_stages(samples.vector_add(32), stages)
    assert ".entry add_kernel" in stages["ptx"]
    assert "registers=" in stages["resources"] and "spill_stores=0" in stages["resources"]


@pytest.mark.gpu
def test_vector_add_runs_on_gpu():
    if not BACKEND.is_available():
        pytest.skip("no CUDA GPU")
    import numpy as np

    from kdsl.backends.base import BoundArg

    n = 1000
    x = np.arange(n, dtype=np.float32)
    out = np.zeros_like(x)
    k = samples.vector_add(128)
    args = [BoundArg(name, "array", samples.float32, v, host=v, nbytes=v.nbytes, numel=v.size)
            for name, v in (("x", x), ("y", x), ("out", out))]
    handle = BACKEND.build(k, BACKEND.codegen(k))
    launch(BACKEND, handle, k, (4, 1, 1), args + [BoundArg("n", "scalar", samples.int32, n)])
    np.testing.assert_array_equal(out, 2 * x)
    assert BACKEND.serialize(handle)[:4] == b"\x7fELF"
