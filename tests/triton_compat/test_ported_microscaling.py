"""Triton-form microscaling GEMM (`tl.dot_scaled`) and a branching activation
(`tl.map_elementwise`) from kernels/microscaling.py, ported by the rename and checked on every
backend against float64 NumPy."""

from __future__ import annotations

import numpy as np

from .conftest import stride

RNG = np.random.default_rng(36)
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def e4m3(codes):
    c = codes.astype(np.int64)
    e, m = (c >> 3) & 15, c & 7
    mag = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - 7))
    return np.where(c & 0x80, -mag, mag)


def test_mxfp4_mxfp8_matmul(ported, backend):
    k = ported("microscaling")
    m, n, kk = 40, 24, 128
    a = RNG.integers(0, 256, (m, kk // 2), dtype=np.uint8)
    b = RNG.integers(0, 0x7e, (kk, n), dtype=np.uint8)  # finite e4m3 codes
    sa = RNG.integers(120, 134, (m, kk // 32), dtype=np.uint8)
    sb = RNG.integers(120, 134, (n, kk // 32), dtype=np.uint8)
    c = np.zeros((m, n), np.float32)
    grid = (2, 2)
    k.mxfp4_mxfp8_matmul[grid](a, sa, b, sb, c, m, n, kk, stride(a, 0), stride(a, 1),
                               stride(b, 0), stride(b, 1), stride(c, 0), stride(c, 1),
                               BLOCK_M=32, BLOCK_N=16, BLOCK_K=64, num_warps=4,
                               backend=backend)
    av = np.empty((m, kk))
    av[:, 0::2], av[:, 1::2] = E2M1[a & 15], E2M1[a >> 4]
    av *= np.repeat(2.0 ** (sa.astype(np.int64) - 127), 32, axis=1)
    bv = e4m3(b) * np.repeat(2.0 ** (sb.astype(np.int64) - 127), 32, axis=1).T
    ref = av @ bv  # the scaled values are exact in bfloat16 here
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5 * (np.abs(av) @ np.abs(bv)).max())


def test_piecewise_activation(ported, backend):
    k = ported("microscaling")
    n = 200
    x = (RNG.standard_normal(n) * 4).astype(np.float32)
    y = np.zeros_like(x)
    region = np.zeros(n, np.int32)
    k.piecewise_activation[(2,)](x, y, region, n, 0.1, 3.0, BLOCK=128, backend=backend)
    x64 = x.astype(np.float64)
    ref_region = np.where(x64 > 3, 2, np.where(x64 < 0, 1, 0))
    ref = np.where(x64 > 3, 3.0, np.where(x64 < 0, x64 * np.float32(0.1), x64))
    np.testing.assert_array_equal(region, ref_region)
    np.testing.assert_allclose(y, ref, rtol=1e-6)
