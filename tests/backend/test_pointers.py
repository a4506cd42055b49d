"""Pointers and integers: `ptr.to(kd.int64)`, `int.to(kd.pointer_type(T))`, pointer bitcasts,
and kernels that load pointers from memory (a grouped GEMM over a table of array addresses).
The addresses are host addresses on interp, llvm and OpenCL's CPU device (arrays in place);
CUDA (device addresses) is covered by tests/codegen/test_cuda_fp8_pointers.py."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd

HOST_ADDRESSES = ("interp", "llvm", "opencl")
RNG = np.random.default_rng(5)


def host_only(backend):
    if backend not in HOST_ADDRESSES:
        pytest.skip(f"{backend}: pointers in tables are device addresses")


@kd.jit
def addresses(x_ptr, out_ptr, back_ptr):
    a = x_ptr.to(kd.int64)
    kd.store(out_ptr, a)
    kd.store(out_ptr + 1, (x_ptr + 3).to(kd.int64))
    kd.store(out_ptr + 2, x_ptr.to(kd.uint64).to(kd.int64, bitcast=True))
    kd.store(out_ptr + 3, x_ptr.to(kd.int1).to(kd.int64))
    p = (a + 8).to(kd.pointer_type(kd.float32))           # 2 elements further
    kd.store(back_ptr, kd.load(p))
    q = kd.cast(a.to(kd.uint64) + 4, kd.pointer_type(kd.float32), bitcast=True)
    kd.store(back_ptr + 1, kd.load(q))


@kd.jit
def as_bytes(x_ptr, out_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    b = x_ptr.to(kd.pointer_type(kd.uint8))               # same address, bytes
    kd.store(out_ptr + offs, kd.load(b + offs))
    w = x_ptr.to(kd.pointer_type(kd.int32))               # the same bits as int32
    kd.store((out_ptr + BLOCK).to(kd.pointer_type(kd.int32)) + offs // 4,
             kd.load(w + offs // 4) ^ 1)


@kd.jit
def grouped_gemm(a_tab, b_tab, c_tab, sizes, G, BM: kd.constexpr, BN: kd.constexpr,
                 BK: kd.constexpr):
    """C_g = A_g @ B_g for g < G, each given by its address in a table (rows: M, N, K)."""
    tile = kd.program_id(0)
    g = kd.program_id(1)
    M = kd.load(sizes + g * 3)
    N = kd.load(sizes + g * 3 + 1)
    K = kd.load(sizes + g * 3 + 2)
    tiles_n = kd.cdiv(N, BN)
    if tile < kd.cdiv(M, BM) * tiles_n:
        a = kd.load(a_tab + g).to(kd.pointer_type(kd.float32))
        b = kd.load(b_tab + g).to(kd.pointer_type(kd.float32))
        c = kd.load(c_tab + g).to(kd.pointer_type(kd.float32))
        rm = (tile // tiles_n) * BM + kd.arange(0, BM)
        rn = (tile % tiles_n) * BN + kd.arange(0, BN)
        rk = kd.arange(0, BK)
        acc = kd.zeros((BM, BN), kd.float32)
        for k in range(0, K, BK):
            am = (rm[:, None] < M) & (k + rk[None, :] < K)
            bm = (k + rk[:, None] < K) & (rn[None, :] < N)
            x = kd.load(a + rm[:, None] * K + k + rk[None, :], mask=am, other=0.0)
            y = kd.load(b + (k + rk[:, None]) * N + rn[None, :], mask=bm, other=0.0)
            acc += kd.dot(x, y)
        kd.store(c + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def test_int_pointer_round_trip(backend):
    host_only(backend)
    x = np.arange(8, dtype=np.float32) + 0.5
    out = np.zeros(4, np.int64)
    back = np.zeros(2, np.float32)
    addresses[(1,)](x, out, back, backend=backend)
    base = x.ctypes.data
    assert list(out) == [base, base + 12, base, 1]
    assert list(back) == [2.5, 1.5]


def test_pointer_bitcast(backend):
    host_only(backend)
    x = RNG.standard_normal(4).astype(np.float32)
    out = np.zeros(32, np.uint8)
    as_bytes[(1,)](x, out, BLOCK=16, backend=backend)
    assert np.array_equal(out[:16], x.view(np.uint8))
    assert np.array_equal(out[16:].view(np.int32), x.view(np.int32) ^ 1)


@pytest.mark.parametrize("num_warps", [1, 4])
def test_grouped_gemm_from_a_pointer_table(backend, num_warps):
    host_only(backend)
    shapes = [(5, 7, 9), (16, 3, 20), (1, 17, 4)]
    A = [RNG.standard_normal((m, k)).astype(np.float32) for m, n, k in shapes]
    B = [RNG.standard_normal((k, n)).astype(np.float32) for m, n, k in shapes]
    C = [np.full((m, n), np.nan, np.float32) for m, n, k in shapes]
    # the arrays are reached only through their addresses: they must outlive the launch
    tab = [np.array([x.ctypes.data for x in xs], np.int64) for xs in (A, B, C)]
    sizes = np.array(shapes, np.int32).reshape(-1)
    BM = BN = 8
    tiles = max(kd.cdiv(m, BM) * kd.cdiv(n, BN) for m, n, k in shapes)
    grouped_gemm[(tiles, len(shapes))](*tab, sizes, len(shapes), BM=BM, BN=BN, BK=8,
                                      backend=backend, num_warps=num_warps)
    for a, b, c, (m, n, k) in zip(A, B, C, shapes):
        ref = a.astype(np.float64) @ b.astype(np.float64)
        np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5 * np.sqrt(k))


@kd.jit
def through_table(tab, out, n, BLOCK: kd.constexpr):
    g = kd.program_id(0)
    p = kd.load(tab + g).to(kd.pointer_type(kd.float32))
    offs = kd.arange(0, BLOCK)
    m = offs < n
    v = kd.load(p + offs, mask=m, other=-1.0)           # a pointer tile made from an integer
    kd.store(out + g * BLOCK + offs, v)
    kd.store(p + offs, v * 10, mask=m)                   # written in place, masked


def test_masked_accesses_through_pointer_tiles(backend):
    host_only(backend)
    arrs = [np.arange(5, dtype=np.float32) + 10 * i for i in range(3)]
    tab = np.array([a.ctypes.data for a in arrs], np.int64)
    out = np.zeros(3 * 8, np.float32)
    through_table[(3,)](tab, out, 5, BLOCK=8, backend=backend)
    for i, a in enumerate(arrs):
        base = np.arange(5, dtype=np.float32) + 10 * i
        assert list(out[8 * i: 8 * i + 8]) == list(base) + [-1.0] * 3
        assert np.array_equal(a, base * 10)


def test_checked_mode_and_pointers_made_from_integers(backend):
    host_only(backend)
    arrs = [np.arange(5, dtype=np.float32) for _ in range(2)]
    tab = np.array([a.ctypes.data for a in arrs], np.int64)
    out = np.zeros(16, np.float32)
    through_table[(2,)](tab, out, 5, BLOCK=8, backend=backend, check=True)
    assert list(out[:5]) == [0, 1, 2, 3, 4]
    with pytest.raises(kd.OutOfBoundsError, match="'out'"):  # argument arrays stay checked
        through_table[(2,)](tab, np.zeros(12, np.float32), 5, BLOCK=8, backend=backend,
                            check=True)
    # an out-of-bounds table entry reads as 0 in checked mode, and the kernel goes on: the
    # accesses through that null pointer are caught too (masked off, no crash)
    with pytest.raises(kd.OutOfBoundsError, match="'tab'") as e:
        through_table[(3,)](tab, np.zeros(24, np.float32), 5, BLOCK=8, backend=backend,
                            check=True)
    assert "3 checks failed" in str(e.value)
    with pytest.raises(kd.OutOfBoundsError, match="null pointer"):
        through_table[(1,)](np.zeros(1, np.int64), out, 5, BLOCK=8, backend=backend,
                            check=True)


def test_interp_refuses_an_unmapped_address():
    tab = np.array([16], np.int64)  # the first page is never mapped
    with pytest.raises(IndexError, match="not readable memory"):
        through_table[(1,)](tab, np.zeros(8, np.float32), 5, BLOCK=8, backend="interp")


def test_opencl_refuses_raw_pointers_without_the_host_address_space(monkeypatch):
    from kdsl.backends import get_backend

    from kdsl.runtime.registry import backend_status

    if not backend_status("opencl")[0]:
        pytest.skip("no OpenCL device")
    rt = get_backend("opencl").runtime()
    monkeypatch.setattr(rt, "zero_copy", False)
    monkeypatch.setenv("KDSL_CACHE", "0")
    x = np.zeros(16, np.float32)
    tab = np.array([x.ctypes.data], np.int64)  # valid here, were the check to fail
    with pytest.raises(kd.CompilationError, match="address space") as e:  # at the build
        through_table[(1,)](tab, np.zeros(16, np.float32), 5, BLOCK=16, backend="opencl")
    assert "to(kd.pointer_type(kd.float32))" in str(e.value)


@pytest.mark.parametrize("src,msg", [
    ("kd.load(t + 0).to(kd.int32).to(kd.pointer_type(kd.float32))", "64-bit integer"),
    ("kd.load(t + 0).to(kd.float32).to(kd.pointer_type(kd.float32))", "64-bit integer"),
    ("t.to(kd.int32)", "converts to int64"),
    ("kd.pointer_type(3)", "one dtype"),
])
def test_pointer_cast_errors(src, msg, tmp_path):
    import importlib.util

    path = tmp_path / "k.py"
    path.write_text("import kdsl as kd\n\n@kd.jit\ndef k(t, o):\n"
                    f"    x = {src}\n    kd.store(o, 1)\n")
    spec = importlib.util.spec_from_file_location("kptr", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(kd.CompilationError, match=msg) as e:
        mod.k.compile(np.zeros(2, np.int64), np.zeros(1, np.int32), backend="interp")
    assert "line 5" in str(e.value)
