"""Library kernels address elements past 2**31 (kernels/_index.py), and decode attention takes
device tables without a host copy.

An operand spanning 2**31 elements is a strided view over a sparse file (np.memmap): gigabytes
of address space, a few pages of memory, so the far rows exist without being allocated.  They
run on llvm, which reads host memory in place (OpenCL would copy the whole span to a buffer).
With int32 offsets, `row * stride` wraps negative at 2**31 and the launch reads far outside
the array.
"""

from __future__ import annotations

import kdsl.kernels as K
import numpy as np
import pytest
from kdsl.kernels import reference as R
from kdsl.kernels._index import INT32_LIMIT, span, wide_offsets
from kdsl.kernels._validate import as_arg
from kdsl.runtime.registry import backend_status

import kdsl as kd

needs_llvm = pytest.mark.skipif(not backend_status("llvm")[0], reason="llvm backend unavailable")


def _sparse(tmp_path, name: str, elements: int, dtype) -> np.memmap:
    return np.memmap(tmp_path / name, dtype=dtype, mode="w+", shape=(elements,))


def test_span_counts_strided_extent():
    base = np.zeros(1000, np.float32)
    view = np.lib.stride_tricks.as_strided(base, (4, 10), (100 * 4, 4))
    assert span(as_arg("x", view, ("float32",), strided=True)) == 3 * 100 + 10
    assert span(as_arg("x", np.zeros((0, 5), np.float32), ("float32",))) == 0
    assert not wide_offsets(as_arg("x", base, ("float32",)), None)


@needs_llvm
def test_softmax_rows_past_2_31(tmp_path):
    stride = 2**30  # rows 2 and 3 start at 2**31 and 3 * 2**30 elements
    n = 100
    mm = _sparse(tmp_path, "x.bin", 3 * stride + n, np.float16)
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((4, n)).astype(np.float16)
    for r in range(4):
        mm[r * stride:r * stride + n] = rows[r]
    x = np.lib.stride_tricks.as_strided(mm, (4, n), (stride * 2, 2))
    assert span(as_arg("x", x, ("float16",), strided=True)) >= INT32_LIMIT
    y = K.softmax(x, backend="llvm")
    ref = R.softmax(rows)
    np.testing.assert_allclose(y.astype(np.float64), ref, atol=2e-3, rtol=2e-3)


@needs_llvm
def test_matmul_rows_past_2_31(tmp_path):
    lda = 2**28  # a's rows 8.. start past 2**31 elements: WIDE tile offsets
    M, Kd, N = 16, 32, 24
    mm = _sparse(tmp_path, "a.bin", (M - 1) * lda + Kd, np.float16)
    rng = np.random.default_rng(1)
    a_rows = (rng.standard_normal((M, Kd)) * 0.5).astype(np.float16)
    for r in range(M):
        mm[r * lda:r * lda + Kd] = a_rows[r]
    a = np.lib.stride_tricks.as_strided(mm, (M, Kd), (lda * 2, 2))
    b = (rng.standard_normal((Kd, N)) * 0.5).astype(np.float16)
    assert wide_offsets(as_arg("a", a, ("float16",), strided=True))
    c = K.matmul(a, b, backend="llvm")
    np.testing.assert_allclose(c.astype(np.float64), R.matmul(a_rows, b), atol=2e-2, rtol=2e-2)


def _wide_kernels():
    """(kernel, args, constexprs) of the WIDE specialisations, with small stand-in arrays."""
    from kdsl.kernels.attention import flash_attention_kernel
    from kdsl.kernels.matmul import matmul_kernel
    from kdsl.kernels.mlp import gate_up_kernel
    from kdsl.kernels.quant import quant_matmul_kernel

    f = np.zeros(64 * 64, np.float16)
    yield matmul_kernel, (f, f, f, f, 64, 64, 64, 0, 0, 64, 64), dict(
        BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4, HAS_BIAS=False, ACT=0, WIDE=True)
    yield gate_up_kernel, (f, f, f, f, 64, 64, 64), dict(
        BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4, WIDE=True)
    yield quant_matmul_kernel, (f, np.zeros(64 * 64, np.int8), f, f, 64, 64, 64), dict(
        group_size=32, BITS=8, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4, WIDE=True)
    yield flash_attention_kernel, (f, f, f, f, 2, 2, 64, 64, 64, 0.1,
                                   *(8192, 4096, 64) * 3), dict(
        CAUSAL=True, BLOCK_M=32, BLOCK_N=32, BLOCK_D=64, WIDE=True)


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_wide_specialisations_agree(backend):
    """WIDE changes index types only: a small matmul gives the same bits either way."""
    if not backend_status(backend)[0]:
        pytest.skip(f"{backend} backend unavailable")
    from kdsl.kernels.matmul import matmul_kernel

    rng = np.random.default_rng(2)
    a = rng.standard_normal((40, 24)).astype(np.float32)
    b = rng.standard_normal((24, 36)).astype(np.float32)
    outs = []
    for wide in (False, True):
        c = np.zeros((40, 36), np.float32)
        grid = (kd.cdiv(40, 16) * kd.cdiv(36, 16), 1)
        matmul_kernel[grid](a, b, a, c, 40, 36, 24, 0, 0, 24, 36, BLOCK_M=16, BLOCK_N=16,
                            BLOCK_K=8, GROUP_M=2, HAS_BIAS=False, ACT=0, WIDE=wide,
                            backend=backend)
        outs.append(c)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_wide_specialisations_compile_for_cuda():
    from kdsl.backends import cuda

    if not cuda.compiler_available():
        pytest.skip("neither NVRTC nor nvcc works here")
    for kern, args, meta in _wide_kernels():
        ck = kern.compile(*args, backend="cuda", num_warps=4, **meta)
        assert "long long" in ck.source or "int64_t" in ck.source, kern.__name__
        assert cuda.compile_cubin(ck.source, "sm_90")[:4] == b"\x7fELF", kern.__name__


# ------------------------------------------------------------------ decode with device tables

def _decode_case(rng):
    B, H, KVH, D, NB, BS = 2, 4, 2, 32, 6, 8
    q = rng.standard_normal((B, H, D)).astype(np.float32)
    kc = rng.standard_normal((NB, BS, KVH, D)).astype(np.float32)
    vc = rng.standard_normal((NB, BS, KVH, D)).astype(np.float32)
    return q, kc, vc, NB, BS


def test_decode_host_tables_are_checked():
    q, kc, vc, NB, BS = _decode_case(np.random.default_rng(3))
    table = np.array([[0, 99], [2, 3]], np.int32)
    with pytest.raises(ValueError, match=r"block_table: entry \[0, 1\] = 99"):
        K.decode_attention(q, kc, vc, table, np.array([2 * BS, BS], np.int32), backend="interp")


def test_decode_device_tables_are_not_copied_back(monkeypatch):
    """OpenCL arrays: no host copy of the table (`.get()` is never called on it); a block id
    outside the cache reads nothing (its tokens are masked) and a length past the table's
    capacity is clamped."""
    if not backend_status("opencl")[0]:
        pytest.skip("opencl backend unavailable")
    import pyopencl.array as cla
    from kdsl.backends import get_backend

    q, kc, vc, NB, BS = _decode_case(np.random.default_rng(4))
    queue = get_backend("opencl").runtime().queue
    table_h = np.array([[0, 99], [2, 3]], np.int32)
    lens_h = np.array([2 * BS, 5 * BS], np.int32)  # sequence 1 claims more than 2 blocks
    table, lens = cla.to_device(queue, table_h), cla.to_device(queue, lens_h)
    gets = []
    real_get = cla.Array.get
    monkeypatch.setattr(cla.Array, "get", lambda self, *a, **k: (
        gets.append(self.shape), real_get(self, *a, **k))[1])
    out = K.decode_attention(cla.to_device(queue, q), cla.to_device(queue, kc),
                             cla.to_device(queue, vc), table, lens, backend="opencl")
    assert table_h.shape not in gets and lens_h.shape not in gets
    got = out.get() if hasattr(out, "get") else np.asarray(out)
    # sequence 0: block 1 is outside the cache, so only block 0's tokens count
    ref0 = R.decode_attention(q[:1], kc, vc, np.array([[0, 0]], np.int32),
                              np.array([BS], np.int32))
    # sequence 1: its length is clamped to its table's 2 blocks
    ref1 = R.decode_attention(q[1:], kc, vc, np.array([[2, 3]], np.int32),
                              np.array([2 * BS], np.int32))
    np.testing.assert_allclose(got[0], ref0[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1], ref1[0], rtol=1e-4, atol=1e-4)
