"""Numerical edge cases, identical on every backend (docs/debugging.md, "Numerics").

NaN propagation of maximum/minimum and of the max/min reductions, exp overflow, IEEE division by
zero, C integer division and remainder (signs, x / 0 == x % 0 == 0, INT_MIN / -1), float -> int
casts of NaN and out-of-range values (saturating, NaN -> 0), and float16/bfloat16 rounding (to
nearest, ties to even, overflow to inf).  References are NumPy float64 computations or exact
values, never another backend.
"""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd
from kdsl.ir.interp import bf16_bits

NAN, INF = np.nan, np.inf


def _kw(backend: str) -> dict:
    return {"backend": backend}


@kd.jit
def minmax_kernel(a_ptr, b_ptr, out_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    a = kd.load(a_ptr + offs)
    b = kd.load(b_ptr + offs)
    kd.store(out_ptr + offs, kd.maximum(a, b))
    kd.store(out_ptr + BLOCK + offs, kd.minimum(a, b))
    kd.store(out_ptr + 2 * BLOCK + offs, kd.full((BLOCK,), kd.max(a, axis=0), kd.float32))
    kd.store(out_ptr + 3 * BLOCK + offs, kd.full((BLOCK,), kd.min(a, axis=0), kd.float32))


def test_nan_propagation_of_max_min(backend):
    a = np.array([1, NAN, -2, 3, INF, -INF, 0, 5], np.float32)
    b = np.array([NAN, 2, -3, 3, 1, -1, -0.0, NAN], np.float32)
    out = np.zeros(32, np.float32)
    minmax_kernel[(1,)](a, b, out, BLOCK=8, **_kw(backend))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_array_equal(out[:8], np.maximum(a64, b64))   # NaN wins
    np.testing.assert_array_equal(out[8:16], np.minimum(a64, b64))
    assert np.isnan(out[16:24]).all() and np.isnan(out[24:]).all()  # reductions too
    finite = a.copy()
    finite[1] = 7
    minmax_kernel[(1,)](finite, b, out, BLOCK=8, **_kw(backend))
    assert (out[16:24] == INF).all() and (out[24:] == -INF).all()


@kd.jit
def float_special_kernel(x_ptr, y_ptr, out_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    x = kd.load(x_ptr + offs)
    y = kd.load(y_ptr + offs)
    kd.store(out_ptr + offs, kd.exp(x))
    kd.store(out_ptr + BLOCK + offs, x / y)
    kd.store(out_ptr + 2 * BLOCK + offs, kd.log(x))


def test_exp_overflow_division_by_zero_log(backend):
    x = np.array([100, -100, 89, 0, -1, 1, NAN, INF], np.float32)
    y = np.array([0, 0, -0.0, 0, 2, -0.0, 1, INF], np.float32)
    out = np.zeros(24, np.float32)
    float_special_kernel[(1,)](x, y, out, BLOCK=8, **_kw(backend))
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(all="ignore"):
        exp_ref = np.exp(x64).astype(np.float32)
        div_ref = (x64 / y64).astype(np.float32)
        log_ref = np.log(x64).astype(np.float32)
    assert out[0] == INF and 0 <= out[1] < 1e-40 and out[2] == INF  # overflow: inf, not NaN
    np.testing.assert_allclose(out[:8], exp_ref, rtol=2e-6)
    np.testing.assert_array_equal(out[8:16], div_ref)  # x/0 = +-inf, 0/0 = NaN, inf/inf NaN
    assert np.signbit(out[10]) and np.isnan(out[11])
    np.testing.assert_allclose(out[16:24], log_ref, rtol=2e-6)  # log(-1) NaN, log(0) -inf
    assert out[19] == -INF and np.isnan(out[20])


@kd.jit
def int_divmod_kernel(a_ptr, b_ptr, out_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    a = kd.load(a_ptr + offs)
    b = kd.load(b_ptr + offs)
    kd.store(out_ptr + offs, a // b)
    kd.store(out_ptr + BLOCK + offs, a % b)


def _c_divmod(a: int, b: int, bits: int) -> tuple[int, int]:
    """C semantics made total: truncation, x / 0 == x % 0 == 0, MIN / -1 wraps to MIN."""
    if b == 0:
        return 0, 0
    q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    r = a - q * b
    lo, span = -(1 << (bits - 1)), 1 << bits
    return (q - lo) % span + lo, r


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_integer_division_signs_and_zero(backend, dtype):
    info = np.iinfo(dtype)
    a = np.array([7, -7, 7, -7, 5, -5, info.min, info.min], dtype)
    b = np.array([2, 2, -2, -2, 0, 0, -1, 3], dtype)
    out = np.zeros(16, dtype)
    int_divmod_kernel[(1,)](a, b, out, BLOCK=8, **_kw(backend))
    ref = [_c_divmod(int(x), int(y), info.bits) for x, y in zip(a, b)]
    np.testing.assert_array_equal(out[:8], [q for q, _ in ref])
    np.testing.assert_array_equal(out[8:], [r for _, r in ref])
    assert list(out[:4]) == [3, -3, -3, 3] and list(out[8:12]) == [1, -1, 1, -1]


@kd.jit
def float_to_int_kernel(x_ptr, i32_ptr, u8_ptr, i64_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    x = kd.load(x_ptr + offs)
    kd.store(i32_ptr + offs, x.to(kd.int32))
    kd.store(u8_ptr + offs, x.to(kd.uint8))
    kd.store(i64_ptr + offs, x.to(kd.int64))


def test_float_to_int_casts_saturate_and_nan_is_zero(backend):
    x = np.array([NAN, INF, -INF, 3e9, -3e9, 2.9, -2.9, 300], np.float32)
    i32 = np.zeros(8, np.int32)
    u8 = np.zeros(8, np.uint8)
    i64 = np.zeros(8, np.int64)
    float_to_int_kernel[(1,)](x, i32, u8, i64, BLOCK=8, **_kw(backend))

    def sat(v: float, dt) -> int:
        if np.isnan(v):
            return 0
        info = np.iinfo(dt)
        return int(min(max(np.trunc(np.float64(v)), info.min), info.max))

    np.testing.assert_array_equal(i32, [sat(v, np.int32) for v in x])
    np.testing.assert_array_equal(u8, [sat(v, np.uint8) for v in x])
    np.testing.assert_array_equal(i64, [sat(v, np.int64) for v in x])


@kd.jit
def half_round_kernel(x_ptr, h_ptr, b_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    x = kd.load(x_ptr + offs)
    kd.store(h_ptr + offs, x.to(kd.float16))
    kd.store(b_ptr + offs, x.to(kd.bfloat16))


def test_fp16_bf16_rounding_nearest_even(backend):
    x = np.array([
        1 + 2.0**-11,            # f16 tie -> even (1.0)
        1 + 3 * 2.0**-11,        # f16 tie -> even (1 + 2^-9)
        1 + 2.0**-8,             # bf16 tie -> even (1.0)
        1 + 3 * 2.0**-8,         # bf16 tie -> even (1 + 2^-6)
        65520.0,                 # f16 overflow -> inf
        2.0**-25,                # f16: tie between 0 and the smallest subnormal -> 0
        3.4e38,                  # bf16 overflow -> inf
        NAN,
    ], np.float32)
    h = np.zeros(8, np.float16)
    b = np.zeros(8, np.uint16)
    half_round_kernel[(1,)](x, h, _bf16(b), BLOCK=8, **_kw(backend))
    with np.errstate(over="ignore"):  # 65520 and 3.4e38 overflow float16 on purpose
        ref = x[:7].astype(np.float16)
    np.testing.assert_array_equal(h.view(np.uint16)[:7], ref.view(np.uint16))
    assert h[0] == 1.0 and h[4] == INF and h[5] == 0 and np.isnan(h[7])
    np.testing.assert_array_equal(b[:7], bf16_bits(x[:7]))
    assert b[2] == 0x3F80 and b[6] == 0x7F80
    assert (b[7] & 0x7F80) == 0x7F80 and (b[7] & 0x7F) != 0  # NaN stays NaN


def _bf16(a):
    from kdsl.runtime.binding import bfloat16_view
    return bfloat16_view(a)


def test_cuda_source_of_every_numerics_kernel_compiles():
    from kdsl.backends import cuda
    if not cuda.compiler_available():
        pytest.skip("neither NVRTC nor nvcc works here")
    f32, i8 = np.zeros(8, np.float32), np.zeros(8, np.int8)
    i32, u8, i64 = np.zeros(8, np.int32), np.zeros(8, np.uint8), np.zeros(8, np.int64)
    cases = [(minmax_kernel, (f32, f32, f32)), (float_special_kernel, (f32, f32, f32)),
             (int_divmod_kernel, (i8, i8, i8)), (float_to_int_kernel, (f32, i32, u8, i64)),
             (half_round_kernel, (f32, np.zeros(8, np.float16), _bf16(np.zeros(8, np.uint16))))]
    for kernel, args in cases:
        ck = kernel.compile(*args, BLOCK=8, backend="cuda")
        assert cuda.compile_cubin(ck.source, "sm_80")[:4] == b"\x7fELF"
