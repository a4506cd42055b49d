"""Vectorised global access on CUDA (kdsl/lowering/vector.py), proven without a GPU: the
PTX of hinted kernels has `ld.global.v4`/`st.global.v4` for sm_80 and sm_90, unhinted kernels
(unaligned possible) have none, and the lowered kernels give the right numbers in the Loop IR
simulator, which also checks that every vector access is aligned."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd
from kdsl.compile_options import CompileOptions
from kdsl.backends import cuda
from kdsl.ir import loop
from kdsl.ir.loop_interp import run_kernel
from kdsl.runtime.compiler import build_tile, finish_kernel

needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")
ARCHS = ["sm_80", "sm_90"]
RNG = np.random.default_rng(11)


@kd.jit
def add_hinted(x_ptr, y_ptr, out_ptr, n, BLOCK: kd.constexpr):
    x_ptr = kd.multiple_of(x_ptr, 16)
    y_ptr = kd.multiple_of(y_ptr, 16)
    out_ptr = kd.multiple_of(out_ptr, 16)
    n = kd.multiple_of(n, 16)
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=m) + kd.load(y_ptr + offs, mask=m),
             mask=m)


@kd.jit
def add_plain(x_ptr, y_ptr, out_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=m) + kd.load(y_ptr + offs, mask=m),
             mask=m)


@kd.jit
def softmax_hinted(out_ptr, in_ptr, stride, n_cols, BLOCK: kd.constexpr):
    in_ptr = kd.multiple_of(in_ptr, 16)
    out_ptr = kd.multiple_of(out_ptr, 16)
    stride = kd.multiple_of(stride, 16)
    n_cols = kd.multiple_of(n_cols, 16)
    row = kd.program_id(0)
    cols = kd.arange(0, BLOCK)
    mask = cols < n_cols
    x = kd.load(in_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    num = kd.exp(x - kd.max(x, axis=0))
    kd.store(out_ptr + row * stride + cols, num / kd.sum(num, axis=0), mask=mask)


@kd.jit
def matmul_hinted(a_ptr, b_ptr, c_ptr, M, N, K, BM: kd.constexpr, BN: kd.constexpr,
                  BK: kd.constexpr):
    """Row-major a (MxK), b (KxN), c (MxN) with K and N multiples of 16 (hinted)."""
    a_ptr = kd.multiple_of(a_ptr, 16)
    b_ptr = kd.multiple_of(b_ptr, 16)
    c_ptr = kd.multiple_of(c_ptr, 16)
    N = kd.multiple_of(N, 16)
    K = kd.multiple_of(K, 16)
    rm = kd.program_id(0) * BM + kd.arange(0, BM)
    rn = kd.program_id(1) * BN + kd.arange(0, BN)
    rk = kd.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * N + rn[None, :]
    acc = kd.zeros((BM, BN), kd.float32)
    for k in range(0, K, BK):
        a = kd.load(a_ptrs, mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = kd.load(b_ptrs, mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += kd.dot(a, b)
        a_ptrs += BK
        b_ptrs += BK * N
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


f32 = np.zeros(4, np.float32)
f16 = np.zeros(4, np.float16)

KERNELS = {
    "add": (add_hinted, (f32, f32, f32, 4), dict(BLOCK=1024)),
    "softmax": (softmax_hinted, (f32, f32, 4, 4), dict(BLOCK=1024)),
    "matmul": (matmul_hinted, (f32, f32, f32, 4, 4, 4), dict(BM=64, BN=64, BK=32)),
}


def _vec_count(kernel: loop.Kernel) -> tuple[int, int]:
    def walk(stmts):
        for s in stmts:
            yield s
            for attr in ("body", "then", "orelse", "cond_body"):
                yield from walk(getattr(s, attr, []) or [])
    stmts = list(walk(kernel.body))
    return (sum(isinstance(s, loop.VecLoad) for s in stmts),
            sum(isinstance(s, loop.VecStore) for s in stmts))


def _global_accesses(ptx: str) -> list[str]:
    return [ln.split()[0] for ln in ptx.splitlines()
            if ln.strip().startswith(("ld.global", "st.global"))]


@pytest.mark.parametrize("case", sorted(KERNELS))
def test_hinted_kernels_get_vector_accesses_in_the_loop_ir(case):
    kernel, args, cx = KERNELS[case]
    ck = kernel.compile(*args, backend="cuda", num_warps=4, **cx)
    loads, stores = _vec_count(ck.kernel)
    assert loads >= (2 if case != "softmax" else 1) and stores == 1
    assert "float4" in ck.source


@needs_compiler
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("case", sorted(KERNELS))
def test_hinted_kernels_have_v4_in_ptx(case, arch):
    kernel, args, cx = KERNELS[case]
    ck = kernel.compile(*args, backend="cuda", num_warps=4, **cx)
    ops = _global_accesses(cuda.compile_ptx(ck.source, arch))
    assert "ld.global.v4.f32" in ops and "st.global.v4.f32" in ops, ops
    assert all(".v4." in op for op in ops), ops  # every global access is a vector


@needs_compiler
@pytest.mark.parametrize("arch", ARCHS)
def test_without_hints_accesses_stay_scalar(arch):
    ck = add_plain.compile(f32, f32, f32, 4, BLOCK=1024, backend="cuda", num_warps=4)
    assert _vec_count(ck.kernel) == (0, 0)
    ops = _global_accesses(cuda.compile_ptx(ck.source, arch))
    assert ops and not any(".v" in op for op in ops), ops


def test_unhinted_mask_or_pointer_falls_back():
    """Aligned pointers but `offs < n` with n unknown: the mask may change inside a run."""
    @kd.jit
    def k(x_ptr, out_ptr, n, BLOCK: kd.constexpr):
        x_ptr = kd.multiple_of(x_ptr, 16)
        out_ptr = kd.multiple_of(out_ptr, 16)
        offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
        y = kd.load(x_ptr + offs)  # aligned, unmasked: a vector load
        kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=offs < n), mask=offs < n)
        kd.store(out_ptr + offs + 1, y)  # misaligned by one element

    ck = k.compile(f32, f32, 4, BLOCK=512, backend="cuda", num_warps=4)
    assert _vec_count(ck.kernel) == (1, 0)  # only the unmasked, aligned load


@needs_compiler
def test_runtime_alignment_attribute_and_float16():
    """`CompileOptions.multiple_of_16` (what a runtime specialisation on `ptr % 16 == 0` sets)
    enables vector access with no hint in the kernel; float16 uses 16-byte accesses (runs of
    8 elements, as 32-bit words)."""
    fn, ir = build_tile(add_plain, _arg_types(add_plain, (f16, f16, f16, 4)),
                        {"BLOCK": 1024}, 4)
    fn.options = CompileOptions(num_warps=4, multiple_of_16=("x_ptr", "y_ptr", "out_ptr", "n"))
    ck = finish_kernel(fn, ir, "cuda", 4)
    assert _vec_count(ck.kernel) == (2, 1)
    ops = _global_accesses(cuda.compile_ptx(ck.source, "sm_90"))
    assert ops and all(_is_16_bytes(op) for op in ops), ops


def _is_16_bytes(op: str) -> bool:
    """A PTX global access of 128 bits (`ld.global.v4.u32`, `st.global.v2.f64`)."""
    parts = op.split(".")
    return ("v4" in parts and parts[-1][1:] == "32") or ("v2" in parts and parts[-1][1:] == "64")


@kd.jit
def copy_masked(x_ptr, out_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=m), mask=m)


@kd.jit
def widen_masked(x_ptr, out_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=m).to(kd.float32), mask=m)


DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "int32",
          "int64", "bool"]


def _array(dtype: str, n: int):
    """(what the kernel is given, the bits the simulator reads) for an aligned array."""
    if dtype == "bfloat16":
        bits = RNG.integers(0, 0x7F00, n).astype(np.uint16)
        return kd.bfloat16_view(bits), bits
    a = (RNG.standard_normal(n) * 50).astype(dtype)
    return a, a


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_gets_16_byte_runs(dtype):
    """A run is 16 bytes of the narrowest type the tile's accesses move: 8 x float16, 16 x
    int8, 4 x float32, 2 x float64 (in a layout of at least 4: two pieces)."""
    n = 2048
    x, _ = _array(dtype, n)
    out, _ = _array(dtype, n)
    ck = copy_masked.compile(x, out, n, BLOCK=n, backend="cuda", num_warps=4)
    itemsize = np.dtype(np.uint16 if dtype == "bfloat16" else dtype).itemsize
    want = max(16 // itemsize, 4)
    sizes = [s.dst.size if isinstance(s, loop.VecLoad) else s.src.size
             for s in _walk(ck.kernel.body) if isinstance(s, (loop.VecLoad, loop.VecStore))]
    assert sizes == [want, want], sizes
    if cuda.compiler_available():
        for arch in ARCHS:
            ops = _global_accesses(cuda.compile_ptx(ck.source, arch))
            assert ops and all(_is_16_bytes(op) for op in ops), (arch, ops)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8", "bool", "float64"])
def test_16_byte_runs_on_the_simulator(dtype):
    """The packed words (8 halves, 16 bytes) and the pieces (two double2) move the right
    elements: a masked copy through the simulator, which checks every vector access's
    alignment (16 bytes) and bounds."""
    n, live = 1024, 1008  # a multiple of 16: the mask is constant over runs
    x, xb = _array(dtype, n)
    out, ob = _array(dtype, n)
    ob[:] = 0
    ck = copy_masked.compile(x, out, live, BLOCK=512, backend="cuda", num_warps=1)
    assert _vec_count(ck.kernel) == (1, 1)
    run_kernel(ck.kernel, (2,), [xb, ob, live])
    np.testing.assert_array_equal(ob[:live], xb[:live])
    assert not ob[live:].any()


@needs_compiler
def test_float32_runs_of_8_are_two_16_byte_pieces():
    """float16 in, float32 out: the layout of 8 that makes the load 16 bytes makes the store
    two 16-byte pieces; the simulator checks the values."""
    n = 1024
    x = RNG.standard_normal(n).astype(np.float16)
    out = np.zeros(n, np.float32)
    ck = widen_masked.compile(x, out, n - 16, BLOCK=512, backend="cuda", num_warps=2)
    ops = _global_accesses(cuda.compile_ptx(ck.source, "sm_90"))
    assert sorted(ops) == ["ld.global.v4.u32", "st.global.v4.f32", "st.global.v4.f32"], ops
    run_kernel(ck.kernel, (2,), [x, out, n - 16])
    np.testing.assert_array_equal(out[:n - 16], x[:n - 16].astype(np.float32))
    assert not out[n - 16:].any()


def _walk(stmts):
    for s in stmts:
        yield s
        for attr in ("body", "then", "orelse", "cond_body"):
            yield from _walk(getattr(s, attr, []) or [])


def _arg_types(kernel, args):
    from kdsl.runtime.binding import bind_arg, sig_type
    names = kernel.signature.runtime_names
    return {n: sig_type(bind_arg(n, a)[0]) for n, a in zip(names, args)}


# ------------------------------------------------------------------- correctness (simulator)


def _simulate(kernel, args, cx, grid, num_warps=1):
    ck = kernel.compile(*args, backend="cuda", num_warps=num_warps, **cx)
    run_kernel(ck.kernel, grid, list(args))
    return ck


def test_vector_add_on_the_simulator():
    n = 256
    x, y = RNG.random(n, dtype=np.float32), RNG.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    ck = _simulate(add_hinted, (x, y, out, n - 32), dict(BLOCK=128), (2,))
    assert _vec_count(ck.kernel) == (2, 1)
    want = x.astype(np.float64) + y
    np.testing.assert_allclose(out[:n - 32], want[:n - 32], rtol=1e-6)
    assert not out[n - 32:].any()  # masked runs are not written


def test_softmax_on_the_simulator():
    rows, cols = 3, 48
    x = RNG.standard_normal((rows, 64)).astype(np.float32)
    out = np.zeros_like(x)
    _simulate(softmax_hinted, (out, x, 64, cols), dict(BLOCK=128), (rows,))
    e = np.exp(x[:, :cols].astype(np.float64) - x[:, :cols].max(1, keepdims=True))
    np.testing.assert_allclose(out[:, :cols], e / e.sum(1, keepdims=True), rtol=1e-5)
    assert not out[:, cols:].any()


def test_matmul_on_the_simulator():
    M, N, K = 40, 32, 48
    a = RNG.random((M, K), dtype=np.float32)
    b = RNG.random((K, N), dtype=np.float32)
    c = np.zeros((M, N), np.float32)
    ck = _simulate(matmul_hinted, (a, b, c, M, N, K), dict(BM=32, BN=32, BK=16), (2, 1))
    assert _vec_count(ck.kernel)[0] >= 2
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5)
