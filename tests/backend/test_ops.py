"""Small kernels exercising each language feature on every available backend, checked against
float64 NumPy references (never against another backend alone)."""

import numpy as np
import pytest

import kdsl as kd
from kdsl.testing import assert_close

RNG = np.random.default_rng(1)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounding to nearest even."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), r)


def bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


# ------------------------------------------------------------------------------ elementwise

UNARY = {
    "exp": (kd.exp, np.exp, (-80, 80)),
    "exp2": (kd.exp2, np.exp2, (-100, 100)),
    "log": (kd.log, np.log, (1e-30, 1e30)),
    "log2": (kd.log2, np.log2, (1e-30, 1e30)),
    "sqrt": (kd.sqrt, np.sqrt, (0, 1e6)),
    "rsqrt": (kd.rsqrt, lambda x: 1 / np.sqrt(x), (1e-6, 1e6)),
    "abs": (kd.abs, np.abs, (-10, 10)),
    "sin": (kd.sin, np.sin, (-100, 100)),
    "cos": (kd.cos, np.cos, (-100, 100)),
    "tanh": (kd.tanh, np.tanh, (-20, 20)),
    "sigmoid": (kd.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-30, 30)),
}


def make_unary(fn):
    @kd.jit
    def k(x_ptr, y_ptr, n, BLOCK: kd.constexpr):
        offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
        m = offs < n
        kd.store(y_ptr + offs, fn(kd.load(x_ptr + offs, mask=m, other=1.0)), mask=m)
    return k


UNARY_KERNELS = {name: make_unary(f) for name, (f, _, _) in UNARY.items()}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_math(backend, name):
    _, ref, (lo, hi) = UNARY[name]
    if lo > 0:
        x = np.exp(RNG.uniform(np.log(lo), np.log(hi), 3000)).astype(np.float32)
    else:
        x = RNG.uniform(lo, hi, 3000).astype(np.float32)
    y = np.empty_like(x)
    UNARY_KERNELS[name][(kd.cdiv(x.size, 512),)](x, y, x.size, BLOCK=512, backend=backend)
    with np.errstate(all="ignore"):
        expected = ref(x.astype(np.float64))
    # sin/cos of large arguments: absolute error relative to the argument's ulp
    k = 64 if name in ("sin", "cos") else 1
    assert_close(y, expected, k=k * k, what=name)


@kd.jit
def erf_kernel(x_ptr, y_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(y_ptr + offs, kd.erf(kd.load(x_ptr + offs, mask=m)), mask=m)


def test_erf(backend):
    import math
    x = np.linspace(-5, 5, 1001).astype(np.float32)
    y = np.empty_like(x)
    erf_kernel[(kd.cdiv(x.size, 256),)](x, y, x.size, BLOCK=256, backend=backend)
    assert_close(y, np.array([math.erf(v) for v in x.astype(np.float64)]), k=16)


@kd.jit
def int_ops_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    a = kd.load(a_ptr + offs, mask=m)
    b = kd.load(b_ptr + offs, mask=m)
    kd.store(out_ptr + 0 * n + offs, a // b, mask=m)
    kd.store(out_ptr + 1 * n + offs, a % b, mask=m)
    kd.store(out_ptr + 2 * n + offs, (a & b) ^ (a | 3), mask=m)
    kd.store(out_ptr + 3 * n + offs, kd.maximum(a, b) - kd.minimum(a, b), mask=m)
    kd.store(out_ptr + 4 * n + offs, kd.where(a > b, a * 3, -b), mask=m)


def c_div(a, b):
    q = np.zeros_like(a)
    nz = b != 0
    q[nz] = np.trunc(a[nz] / b[nz]).astype(a.dtype)
    return q


def test_int_semantics(backend):
    a = RNG.integers(-100, 100, 500).astype(np.int32)
    b = RNG.integers(-7, 8, 500).astype(np.int32)
    out = np.empty(5 * 500, np.int32)
    int_ops_kernel[(kd.cdiv(500, 128),)](a, b, out, 500, BLOCK=128, backend=backend)
    q = c_div(a, b)
    np.testing.assert_array_equal(out[:500], q)
    np.testing.assert_array_equal(out[500:1000], np.where(b != 0, a - q * b, 0))
    np.testing.assert_array_equal(out[1000:1500], (a & b) ^ (a | 3))
    np.testing.assert_array_equal(out[1500:2000], np.abs(a - b))
    np.testing.assert_array_equal(out[2000:], np.where(a > b, a * 3, -b))


# -------------------------------------------------------------------------------- 2-D tiles


@kd.jit
def outer_kernel(x_ptr, y_ptr, out_ptr, M, N, BM: kd.constexpr, BN: kd.constexpr):
    pm = kd.program_id(0)
    pn = kd.program_id(1)
    rm = pm * BM + kd.arange(0, BM)
    rn = pn * BN + kd.arange(0, BN)
    x = kd.load(x_ptr + rm, mask=rm < M, other=0.0)
    y = kd.load(y_ptr + rn, mask=rn < N, other=0.0)
    val = x[:, None] * y[None, :] + pm
    kd.store(out_ptr + rm[:, None] * N + rn[None, :], val, mask=(rm[:, None] < M) & (rn[None, :] < N))


def test_broadcast_2d_grid(backend):
    M, N = 37, 70
    x = RNG.standard_normal(M).astype(np.float32)
    y = RNG.standard_normal(N).astype(np.float32)
    out = np.empty((M, N), np.float32)
    outer_kernel[(kd.cdiv(M, 16), kd.cdiv(N, 32))](x, y, out, M, N, BM=16, BN=32,
                                                   backend=backend)
    ref = np.outer(x, y).astype(np.float64) + (np.arange(M) // 16)[:, None]
    assert_close(out, ref)


REDUCTIONS = ["sum", "max", "min", "argmax", "argmin"]


def make_reduce(op, axis):
    fn = getattr(kd, op)
    fill = FILL[op]

    @kd.jit
    def k(x_ptr, out_ptr, M, N, BM: kd.constexpr, BN: kd.constexpr):
        rm = kd.arange(0, BM)
        rn = kd.arange(0, BN)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        x = kd.load(x_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=fill)
        r = fn(x, axis=axis)
        if axis == 1:
            kd.store(out_ptr + rm, r, mask=rm < M)
        else:
            kd.store(out_ptr + rn, r, mask=rn < N)
    return k


FILL = {"sum": 0.0, "max": -float("inf"), "min": float("inf"), "argmax": -float("inf"),
        "argmin": float("inf")}
REDUCE_KERNELS = {(op, ax): make_reduce(op, ax) for op in REDUCTIONS for ax in (0, 1)}


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("op", REDUCTIONS)
def test_reduce_axis(backend, op, axis):
    M, N = 13, 29
    x = RNG.standard_normal((M, N)).astype(np.float32)
    x[3, 5] = x[3, 7] = 9.0  # ties: first index wins
    x[8, 2] = x[10, 2] = -9.0
    out = np.empty(M if axis == 1 else N, np.int32 if op.startswith("arg") else np.float32)
    REDUCE_KERNELS[(op, axis)][(1,)](x, out, M, N, BM=16, BN=32, backend=backend)
    ref = getattr(np, op)(x.astype(np.float64), axis=axis)
    if op.startswith("arg"):
        np.testing.assert_array_equal(out, ref)
    else:
        assert_close(out, ref, k=M if axis == 0 else N)


@kd.jit
def full_reduce_kernel(x_ptr, out_ptr, n, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    x = kd.load(x_ptr + offs, mask=offs < n, other=0.0)
    kd.store(out_ptr, kd.sum(x))
    kd.store(out_ptr + 1, kd.max(kd.where(offs < n, x, -float("inf")), axis=0))
    kd.store(out_ptr + 2, kd.argmin(kd.where(offs < n, x, float("inf")), axis=0).to(kd.float32))


def test_reduce_to_scalar(backend):
    x = RNG.standard_normal(1000).astype(np.float32)
    out = np.zeros(3, np.float32)
    full_reduce_kernel[(1,)](x, out, x.size, BLOCK=1024, backend=backend)
    assert_close(out[:2], [x.astype(np.float64).sum(), x.max()], k=1000)
    assert out[2] == np.argmin(x)


@kd.jit
def nan_max_kernel(x_ptr, out_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    x = kd.load(x_ptr + offs)
    kd.store(out_ptr, kd.max(x, axis=0))
    kd.store(out_ptr + 1, kd.min(x, axis=0))
    kd.store(out_ptr + 2 + offs, kd.maximum(x, 0.0))


def test_nan_propagation(backend):
    x = np.arange(64, dtype=np.float32)
    x[17] = np.nan
    out = np.zeros(66, np.float32)
    nan_max_kernel[(1,)](x, out, BLOCK=64, backend=backend)
    assert np.isnan(out[0]) and np.isnan(out[1])
    assert np.isnan(out[2 + 17]) and (out[2:][np.arange(64) != 17] == np.delete(x, 17)).all()


# ----------------------------------------------------------------------------- control flow


@kd.jit
def loop_kernel(x_ptr, out_ptr, n_iter, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    acc = kd.zeros((BLOCK,), kd.float32)
    x = kd.load(x_ptr + offs)
    for i in range(0, n_iter):
        acc = acc * 0.5 + x * i
    j = 0
    total = 0.0
    while j < n_iter:
        total += j
        j += 1
    if n_iter > 3:
        acc = acc + total
    else:
        acc = acc - total
    for s in kd.static_range(3):
        acc += s
    kd.store(out_ptr + offs, acc)


@pytest.mark.parametrize("n_iter", [0, 2, 7])
def test_loops_and_ifs(backend, n_iter):
    x = RNG.standard_normal(64).astype(np.float32)
    out = np.empty_like(x)
    loop_kernel[(1,)](x, out, n_iter, BLOCK=64, backend=backend)
    acc = np.zeros(64)
    for i in range(n_iter):
        acc = acc * 0.5 + x * i
    total = sum(range(n_iter))
    acc = acc + total if n_iter > 3 else acc - total
    assert_close(out, acc + 3, k=8)


@kd.jit
def helper_scale(x, factor):
    return x * factor, x + factor


@kd.jit
def helper_kernel(x_ptr, out_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    a, b = helper_scale(kd.load(x_ptr + offs), 3.0)
    kd.store(out_ptr + offs, a - b)


def test_inlined_helper(backend):
    x = RNG.standard_normal(32).astype(np.float32)
    out = np.empty_like(x)
    helper_kernel[(1,)](x, out, BLOCK=32, backend=backend)
    assert_close(out, x.astype(np.float64) * 3 - (x + 3.0))


# ---------------------------------------------------------------------------- dot and casts


@kd.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: kd.constexpr, BN: kd.constexpr,
               BK: kd.constexpr):
    rm = kd.arange(0, BM)
    rn = kd.arange(0, BN)
    rk = kd.arange(0, BK)
    a = kd.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K),
                other=0.0)
    b = kd.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N),
                other=0.0)
    c = kd.dot(a, b)
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], c, mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("shape", [(16, 16, 16), (8, 32, 16), (32, 8, 64), (13, 27, 9)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_dot_shapes(backend, shape, dtype):
    M, N, K = shape
    bm, bn, bk = (max(8, 1 << (v - 1).bit_length()) for v in shape)
    a = RNG.standard_normal((M, K)).astype(dtype)
    b = RNG.standard_normal((K, N)).astype(dtype)
    c = np.empty((M, N), np.float32)
    dot_kernel[(1,)](a, b, c, M, N, K, BM=bm, BN=bn, BK=bk, backend=backend)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), dtype=np.float32, k=K)


@kd.jit
def int8_dot_kernel(a_ptr, b_ptr, c_ptr, B: kd.constexpr):
    r = kd.arange(0, B)
    a = kd.load(a_ptr + r[:, None] * B + r[None, :])
    b = kd.load(b_ptr + r[:, None] * B + r[None, :])
    kd.store(c_ptr + r[:, None] * B + r[None, :], kd.dot(a, b))


def test_int8_dot(backend):
    a = RNG.integers(-128, 128, (16, 16)).astype(np.int8)
    b = RNG.integers(-128, 128, (16, 16)).astype(np.int8)
    c = np.empty((16, 16), np.int32)
    int8_dot_kernel[(1,)](a, b, c, B=16, backend=backend)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@kd.jit
def cast_kernel(x_ptr, h_ptr, bits_ptr, back_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    x = kd.load(x_ptr + offs, mask=m)
    kd.store(h_ptr + offs, x.to(kd.float16), mask=m)
    b = x.to(kd.bfloat16)
    kd.store(bits_ptr + offs, b.to(kd.uint16, bitcast=True), mask=m)
    h = kd.load(h_ptr + offs, mask=m)
    kd.store(back_ptr + offs, h.to(kd.float32) + b.to(kd.float32), mask=m)


def test_f16_bf16_rounding(backend):
    # values half-way between representable float16/bfloat16 numbers test ties-to-even
    halfway16 = (np.arange(1, 200, dtype=np.float32) * 2 + 1) * 2.0**-11 + 1
    x = np.concatenate([RNG.standard_normal(500).astype(np.float32) * 100, halfway16,
                        np.array([np.inf, -np.inf, 65520.0, 1e-8, -0.0], np.float32)])
    n = x.size
    h = np.empty(n, np.float16)
    bits = np.empty(n, np.uint16)
    back = np.empty(n, np.float32)
    cast_kernel[(kd.cdiv(n, 256),)](x, h, bits, back, n, BLOCK=256, backend=backend)
    with np.errstate(over="ignore", invalid="ignore"):  # 65520 and inf overflow float16 on purpose
        h16 = x.astype(np.float16)
        ref = h16.astype(np.float32) + bf16_value(bf16_bits(x))
    np.testing.assert_array_equal(h.view(np.uint16), h16.view(np.uint16))
    np.testing.assert_array_equal(bits, bf16_bits(x))
    np.testing.assert_array_equal(back, ref)


@kd.jit
def f16_math_kernel(x_ptr, y_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    x = kd.load(x_ptr + offs)
    kd.store(y_ptr + offs, x * x + x)  # float16 arithmetic: rounded after each op


def test_f16_arithmetic_rounds_each_op(backend):
    x = RNG.standard_normal(128).astype(np.float16) * 30
    y = np.empty_like(x)
    f16_math_kernel[(1,)](x, y, BLOCK=128, backend=backend)
    ref = (x * x) + x  # NumPy float16 rounds after each op too
    np.testing.assert_array_equal(y.view(np.uint16), ref.view(np.uint16))


@kd.jit
def histogram_kernel(x_ptr, hist_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    bins = kd.load(x_ptr + offs, mask=m, other=0)
    kd.atomic_add(hist_ptr + bins, kd.full((BLOCK,), 1, kd.int32), mask=m)
    kd.atomic_add(hist_ptr + 16, 1)  # scalar atomic: once per program


def test_atomic_add(backend):
    x = RNG.integers(0, 16, 5000).astype(np.int32)
    hist = np.zeros(17, np.int32)
    grid = kd.cdiv(x.size, 256)
    histogram_kernel[(grid,)](x, hist, x.size, BLOCK=256, backend=backend)
    np.testing.assert_array_equal(hist[:16], np.bincount(x, minlength=16))
    assert hist[16] == grid


@kd.jit
def dot_trans_kernel(a_ptr, b_ptr, c_ptr, d_ptr, M: kd.constexpr, N: kd.constexpr,
                     K: kd.constexpr):
    rm = kd.arange(0, M)
    rn = kd.arange(0, N)
    rk = kd.arange(0, K)
    a = kd.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = kd.trans(kd.load(b_ptr + rn[:, None] * K + rk[None, :]))  # unmasked, transposed
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], kd.dot(a, b))
    # an operand computed from indices only (never stored unless addressed)
    ramp = (rk[:, None] + rn[None, :]).to(kd.float32)
    kd.store(d_ptr + rm[:, None] * N + rn[None, :], kd.dot(a, ramp))


def test_dot_of_transposed_load_and_index_tile(backend):
    M, N, K = 16, 64, 24
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = RNG.standard_normal((N, K)).astype(np.float32)
    c = np.empty((M, N), np.float32)
    d = np.empty((M, N), np.float32)
    dot_trans_kernel[(1,)](a, b, c, d, M=M, N=N, K=K, backend=backend)
    a64 = a.astype(np.float64)
    assert_close(c, a64 @ b.T, k=K)
    ramp = (np.arange(K)[:, None] + np.arange(N)[None, :]).astype(np.float64)
    # terms up to ~80 cancel: bound the error by the magnitude of the summed terms
    scale = np.abs(a64) @ ramp
    np.testing.assert_array_less(np.abs(d - a64 @ ramp), 8 * 2.0**-23 * np.sqrt(K) * scale + 1e-30)


class _DLPackOnly:
    """An array that only exports DLPack (as a torch CPU tensor does)."""

    def __init__(self, a: np.ndarray):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


@kd.jit
def axpy_kernel(x_ptr, y_ptr, a, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(y_ptr + offs, a * kd.load(x_ptr + offs, mask=m) + kd.load(y_ptr + offs, mask=m),
             mask=m)


def test_dlpack_arrays_in_and_out(backend):
    x = RNG.standard_normal(300).astype(np.float32)
    y = RNG.standard_normal(300).astype(np.float32)
    expected = 2.0 * x.astype(np.float64) + y
    axpy_kernel[(kd.cdiv(300, 128),)](_DLPackOnly(x), _DLPackOnly(y), 2.0, 300, BLOCK=128,
                                      backend=backend)
    assert_close(y, expected)  # the output was written through the DLPack view
