"""Warp-shuffle reductions and 16-byte vectors in CUDA code, proven without a GPU: the fused
softmax's source has `__shfl_xor_sync` and 16-byte accesses and compiles with NVRTC for sm_80
and sm_90 (PTX `shfl.sync.bfly`, `ld.global.v4`), its SASS (when cuobjdump is installed) has
SHFL and LDG.E.128 / STG.E.128; the shuffle compiles for every register type."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from kdsl.backends import cuda

import kdsl as kd
from kdsl.ir import loop

ROOT = Path(__file__).resolve().parents[2]
ARCHS = ["sm_80", "sm_90"]
needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")


@kd.jit
def fused_softmax(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols,
                  BLOCK_SIZE: kd.constexpr):
    row = kd.program_id(0)
    cols = kd.arange(0, BLOCK_SIZE)
    valid = cols < n_cols
    x = kd.load(in_ptr + row * in_row_stride + cols, mask=valid, other=-float("inf"))
    x = x.to(kd.float32)
    e = kd.exp(x - kd.max(x, axis=0))
    kd.store(out_ptr + row * out_row_stride + cols, (e / kd.sum(e, axis=0)).to(kd.float16),
             mask=valid)


def _softmax():
    f16 = np.zeros(16, np.float16)
    return fused_softmax.compile(f16, f16, 4096, 4096, 4096, BLOCK_SIZE=4096, backend="cuda",
                                 num_warps=8)


def _walk(stmts):
    for s in stmts:
        yield s
        for attr in ("body", "then", "orelse", "cond_body"):
            yield from _walk(getattr(s, attr, []) or [])


def test_fused_softmax_source_has_shuffles_and_16_byte_vectors():
    ck = _softmax()
    src = ck.source
    assert src.count("kd_shfl_xor(&") == 16  # 5 + 3 steps for each of max and sum (8 warps)
    assert "__shfl_xor_sync(0xffffffffu" in src
    vec = [s for s in _walk(ck.kernel.body) if isinstance(s, (loop.VecLoad, loop.VecStore))]
    assert [getattr(s, "dst", None) or s.src for s in vec] and all(
        (getattr(s, "dst", None) or s.src).size == 8 for s in vec)  # 8 x float16 = 16 bytes
    assert "*((uint4*)" in src
    # the input is never staged in shared memory: only the warps' partials are
    assert all(a.size <= 8 for a in ck.kernel.arrays if a.space == "shared")


@needs_compiler
@pytest.mark.parametrize("arch", ARCHS)
def test_fused_softmax_compiles_to_shuffles_and_v4(arch):
    ptx = cuda.compile_ptx(_softmax().source, arch)
    ops = [ln.split()[0] for ln in ptx.splitlines() if ln.strip()[:1].isalpha()]
    assert sum(op.startswith("shfl.sync.bfly") for op in ops) == 16, ops
    glob = [op for op in ops if op.startswith(("ld.global", "st.global"))]
    assert glob and all(".v4." in op for op in glob), glob


@needs_compiler
def test_fused_softmax_sass():
    spec = importlib.util.spec_from_file_location("gpu_static",
                                                  ROOT / "benchmarks" / "gpu_static.py")
    G = importlib.util.module_from_spec(spec)
    sys.modules["gpu_static"] = G
    spec.loader.exec_module(G)
    try:
        tool = G.cuobjdump()
    except SystemExit:
        pytest.skip("cuobjdump / nvdisasm not installed (kdsl[sass])")
    if shutil.which("nvdisasm", path=str(Path(tool).parent)) is None:
        pytest.skip("nvdisasm not beside cuobjdump")
    fig = G.figures_from_sass("kdsl", G.sass_of(cuda.compile_cubin(_softmax().source, "sm_90")),
                              0, 0)
    c = fig.counts
    assert c["SHFL"] == 16, c
    assert c["LDG.128"] == 2 and c["STG.128"] == 2, c
    assert c["LDG.64"] == 0 and c["LDG.other"] == 0 and c["STG.other"] == 0, c


# ------------------------------------------------------------------- every register type


@kd.jit
def max_rows(x_ptr, out_ptr, N: kd.constexpr):
    r = kd.program_id(0)
    x = kd.load(x_ptr + r * N + kd.arange(0, N))
    kd.store(out_ptr + r, kd.max(x, axis=0))


@kd.jit
def _or(a, b):
    return a | b


@kd.jit
def any_rows(x_ptr, out_ptr, N: kd.constexpr):
    r = kd.program_id(0)
    x = kd.load(x_ptr + r * N + kd.arange(0, N)) != 0
    kd.store(out_ptr + r, kd.reduce(x, 0, _or).to(kd.int32))


TYPES = ["float16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32",
         "uint32", "int64", "uint64"]


@pytest.mark.parametrize("dtype", [*TYPES, "bool"])
def test_the_shuffle_of_every_register_type(dtype):
    """`kd_shfl_xor` for every C register type (bool and the narrow integers go through an
    int), compiled with NVRTC; the kernel's results are checked in the simulator."""
    from kdsl.ir.loop_interp import run_kernel
    rows, N = 2, 256
    rng = np.random.default_rng(3)
    if dtype == "bool":
        x = (rng.random((rows, N)) < 0.01).astype(np.int32)
        x[1] = 0
        out = np.zeros(rows, np.int32)
        ck = any_rows.compile(x, out, N=N, backend="cuda", num_warps=2)
        want = x.any(1).astype(np.int32)
    else:
        info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
        x = (rng.integers(info.min, info.max, (rows, N), dtype=dtype, endpoint=True) if info
             else rng.standard_normal((rows, N)).astype(dtype))
        out = np.zeros(rows, dtype)
        ck = max_rows.compile(x, out, N=N, backend="cuda", num_warps=2)
        want = x.max(1)
    assert "__shfl_xor_sync" in ck.source
    if cuda.compiler_available():
        for arch in ARCHS:
            assert "shfl.sync.bfly" in cuda.compile_ptx(ck.source, arch)
    run_kernel(ck.kernel, (rows,), [x, out])
    np.testing.assert_array_equal(out, want)
