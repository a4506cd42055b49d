"""SIMD loops of one-thread kernels printed as OpenCL vector types (backends/c_simd.py): what
the plan vectorises, what it leaves scalar, the printed micro-kernel, and (on a CPU OpenCL
device) that the vector code computes bit for bit what the llvm backend computes."""

from __future__ import annotations

import re

import numpy as np
import pytest
from kdsl.backends.c_like import emit
from kdsl.backends.c_simd import PARALLEL_MIN_TRIP, SIMD_HINT, divisor, plan, unit_stride
from kdsl.backends.opencl import ONE_THREAD_CAPS, opencl_dialect

import kdsl as kd
from kdsl.frontend import build_function
from kdsl.ir import loop
from kdsl.ir.types import PointerType, float32, int8, int32, scalar
from kdsl.lowering import lower
from kdsl.passes import run_tile_passes
from kdsl.target import Target


@kd.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, M: kd.constexpr, N: kd.constexpr, K: kd.constexpr):
    m, n, k = kd.arange(0, M), kd.arange(0, N), kd.arange(0, K)
    a = kd.load(a_ptr + m[:, None] * K + k[None, :])
    b = kd.load(b_ptr + k[:, None] * N + n[None, :])
    kd.store(c_ptr + m[:, None] * N + n[None, :], kd.dot(a, b))


def one_thread(lanes: int) -> Target:
    regs = 32 if lanes >= 16 else 16
    return Target("opencl", threads=1, caps=frozenset({"fp64"}) | ONE_THREAD_CAPS,
                  vector_bits=lanes * 32, vector_regs=regs)


def loop_ir(M, N, K, lanes):
    p = scalar(PointerType(float32))
    fn, _ = run_tile_passes(build_function(dot_kernel.fn, {"a_ptr": p, "b_ptr": p, "c_ptr": p},
                                           {"M": M, "N": N, "K": K}))
    return lower(fn, one_thread(lanes))


def source(M, N, K, lanes):
    return emit(loop_ir(M, N, K, lanes), opencl_dialect(simd_lanes=lanes))


def test_micro_kernel_accumulators_are_vector_registers():
    src = source(64, 64, 32, 16)
    # 6 x 64 accumulators (a 4-row tail): 24 float16 vectors, indexed by constants once the
    # MR loop unrolls
    assert "float16 blk0[24]" in src
    # large register arrays start on a cache line (vector accesses never split across two)
    assert "float a1[2048] __attribute__((aligned(64)));" in src
    # a is read where it was loaded; b, which only the dot reads, straight from memory into
    # the dot's panels (dot_cpu.py `_pack_from_memory`), read with vector loads
    assert "float a1[" in src and "b1[" not in src and "bpack0[" in src
    fma = [line for line in src.splitlines() if "fma(((float16)(" in line]
    assert len(fma) == 2  # the 6-row panels and the 4-row tail
    assert all("vload16(0, &bpack0[" in line and "blk0[(" in line for line in fma)
    lines = src.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("for (kk"):
            assert "#pragma unroll" not in lines[i - 1]  # the K loop stays a loop
        if "// simd x16" in line:
            assert lines[i - 1].strip() == "#pragma unroll"
            assert "+= 16)" in line


def test_lane_count_follows_the_device():
    assert "float8 blk0[" in source(32, 32, 16, 8)  # an AVX2 device: 8 lanes
    scalar_src = source(32, 32, 16, 0)  # no vector width: the scalar loops of before
    assert "vload" not in scalar_src and "float16" not in scalar_src and "pragma" not in scalar_src
    assert "aligned(" not in scalar_src


def test_plan_leaves_other_loops_scalar():
    j, i = loop.Var("j", int32), loop.Var("i", int32)
    a = loop.Array("a", float32, 64)
    b = loop.Array("b", float32, 128)
    c32 = lambda v: loop.Const(v, int32)
    strided = loop.Binary("mul", j, c32(2))  # b[2 * j]: not unit stride
    bad = loop.For(j, c32(0), c32(32), c32(1),
                   [loop.Comment(SIMD_HINT), loop.ArrayStore(a, j, loop.Index(b, strided))])
    good = loop.For(j, c32(0), c32(32), c32(1),
                    [loop.Comment(SIMD_HINT),
                     loop.ArrayStore(a, loop.Binary("add", j, c32(32)),
                                     loop.Binary("add", loop.Index(b, j), loop.Var("x", float32)))])
    unhinted = loop.For(i, c32(0), c32(32), c32(1), [loop.ArrayStore(a, i, loop.Index(b, i))])
    k = loop.Kernel("k", [], [bad, good, unhinted], variables=[j, i, loop.Var("x", float32)],
                    arrays=[a, b], threads=1)
    p = plan(k, 16)
    assert id(good) in p.loops and id(bad) not in p.loops and id(unhinted) not in p.loops
    assert p.arrays == {}  # both arrays also have scalar accesses


def test_index_analysis():
    j, i = loop.Var("j", int32), loop.Var("i", int32)
    c = lambda v: loop.Const(v, int32)
    base = loop.Binary("shl", i, c(5))
    assert unit_stride(loop.Binary("add", base, j), "j") == [base]
    assert unit_stride(loop.Binary("add", j, j), "j") is None
    assert unit_stride(loop.Binary("mul", j, c(3)), "j") is None
    assert divisor(base, {"i": 1}) == 32
    assert divisor(loop.Binary("add", base, loop.Binary("mul", i, c(8))), {"i": 2}) == 16


def _opencl_one_thread():
    from kdsl.runtime.registry import backend_status

    ok, why = backend_status("opencl")
    if not ok:
        pytest.skip(f"opencl backend not available: {why}")
    from kdsl.backends import get_backend

    be = get_backend("opencl")
    if be.lowering() != "one-thread":
        pytest.skip("the OpenCL device is not a CPU device (it uses the work-group lowering)")


@pytest.mark.parametrize("M,N,K", [(64, 64, 32), (16, 32, 16), (32, 16, 48), (8, 128, 8)])
def test_vector_code_equals_llvm_bit_for_bit(M, N, K):
    """The same fused multiply-adds in the same order on both backends: equal bits."""
    _opencl_one_thread()
    rng = np.random.default_rng(M + N + K)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    out = {}
    for be in ("llvm", "opencl"):
        c = np.zeros((M, N), np.float32)
        dot_kernel[(1,)](a, b, c, M=M, N=N, K=K, backend=be)
        out[be] = c
    np.testing.assert_allclose(out["opencl"], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert np.array_equal(out["opencl"], out["llvm"])


def test_element_loops_marked_only_without_carried_scalars():
    j = loop.Var("j", int32)
    acc, t = loop.Var("acc", float32), loop.Var("t", float32)
    a, b = loop.Array("a", float32, 256), loop.Array("b", float32, 256)
    c = lambda v: loop.Const(v, int32)
    # t is assigned before it is read in each iteration: no value crosses iterations
    elementwise = loop.For(j, c(0), c(256), c(1), [
        loop.Assign(t, loop.Binary("mul", loop.Index(b, j), loop.Index(b, j))),
        loop.ArrayStore(a, j, loop.Binary("add", t, loop.Const(1.0, float32)))])
    # a serial float sum: forcing a width would let the compiler reassociate it
    serial = loop.For(j, c(0), c(256), c(1), [
        loop.Assign(acc, loop.Binary("add", acc, loop.Index(b, j)))])
    # shorter than PARALLEL_MIN_TRIP: left to the compiler's cost model
    short = loop.For(j, c(0), c(PARALLEL_MIN_TRIP // 2), c(1),
                     [loop.ArrayStore(a, j, loop.Index(b, j))])
    k = loop.Kernel("k", [], [elementwise, serial, short], variables=[j, acc, t],
                    arrays=[a, b], threads=1)
    p = plan(k, 16)
    assert p.parallel == {id(elementwise): 16}
    src = emit(k, opencl_dialect(simd_lanes=16))
    assert src.count("#pragma clang loop vectorize_width(16)") == 1
    assert "__attribute__((min_vector_width(512)))" in src
    assert plan(k, 0).parallel == {}  # no vector width: nothing marked


def test_unprintable_simd_loops_get_their_width_forced():
    # a `simd` loop the plan cannot print (a row of b converted from int8 loads, dot_cpu.py
    # `_b_row`) is still the vector dimension: marked with the lanes whatever its trip count,
    # where an element loop that short is left to the compiler
    j = loop.Var("j", int32)
    w = loop.Var("w", PointerType(int8))
    row = loop.Array("brow", float32, 32)
    c = lambda v: loop.Const(v, int32)
    convert = loop.For(j, c(0), c(32), c(1), [
        loop.Comment(SIMD_HINT),
        loop.ArrayStore(row, j, loop.Cast(loop.Load(loop.PtrAdd(w, j)), float32))])
    short = loop.For(j, c(0), c(32), c(1), [loop.ArrayStore(row, j, loop.Const(0.0, float32))])
    k = loop.Kernel("k", [w], [convert, short], variables=[j], arrays=[row], threads=1)
    p = plan(k, 16)
    assert p.loops == {} and p.parallel == {id(convert): 16}
    src = emit(k, opencl_dialect(simd_lanes=16))
    assert src.count("#pragma clang loop vectorize_width(16)") == 1


def test_one_thread_builds_are_quiet():
    from kdsl.backends.opencl import QUIET, build_options

    k = loop_ir(32, 32, 16, 16)
    assert QUIET in build_options(k)  # (the pragmas' "loop not vectorized" remarks)
    assert QUIET not in build_options(loop.Kernel("k", [], [], threads=128))


def test_example_runs(capsys):
    """examples/opencl_cpu.py: the lowering it reports, its vector FMA line, equal bits."""
    import runpy
    from pathlib import Path

    _opencl_one_thread()
    path = Path(__file__).parents[2] / "examples" / "opencl_cpu.py"
    runpy.run_path(str(path), run_name="__main__")
    out = capsys.readouterr().out
    # float lanes of the device's vectors: 16 with AVX-512, 8 with AVX2 (PoCL's target)
    lanes = int(re.search(r"vector width (\d+) bits", out).group(1)) // 32
    assert "lowering: one-thread" in out and f"fma(((float{lanes})(" in out
    assert "bit-identical to llvm: True" in out
