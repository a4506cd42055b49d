"""Scans (`cumsum`, `cumprod`, `associative_scan`) and Triton's reductions built on `reduce`
(tuple reductions, `max`/`min` with indices, `argmax`/`argmin`, `xor_sum`, `reduce_or`,
`softmax`, `sum(dtype=)`) on every available backend, against NumPy references; ragged tiles
read through masks; bad uses are compile errors.  tests/codegen/test_cuda_kernels.py compiles
these kernels' CUDA sources for sm_80 and sm_90."""

import numpy as np
import pytest

import kdsl as kd
from kdsl.errors import CompilationError
from kdsl.ir import parser, tile
from kdsl.testing import assert_close

RNG = np.random.default_rng(21)


def np_scan(x, axis, reverse, ufunc, dtype=None):
    x = np.asarray(x, dtype=dtype)
    if reverse:
        return np.flip(ufunc.accumulate(np.flip(x, axis), axis=axis), axis)
    return ufunc.accumulate(x, axis=axis)


# ------------------------------------------------------------------ cumsum and cumprod


@kd.jit
def scan2d(X, Y, M, N, AXIS: kd.constexpr, REV: kd.constexpr, PROD: kd.constexpr,
           BM: kd.constexpr, BN: kd.constexpr):
    """An (M, N) block in a (BM, BN) tile: masked lanes read the identity (0, or 1 for a
    product), which is what makes a ragged scan equal to the scan of the block."""
    rm = kd.arange(0, BM)
    rn = kd.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * N + rn[None, :]
    if PROD:
        x = kd.load(X + offs, mask=mask, other=1)
        y = kd.cumprod(x, AXIS, reverse=REV)
    else:
        x = kd.load(X + offs, mask=mask, other=0)
        y = x.cumsum(AXIS, reverse=REV)  # the tile method
    kd.store(Y + offs, y, mask=mask)


@kd.jit
def scan1d(X, Y, N, REV: kd.constexpr, BLOCK: kd.constexpr):
    r = kd.arange(0, BLOCK)
    x = kd.load(X + r, mask=r < N, other=0)
    kd.store(Y + r, kd.cumsum(x, 0, reverse=REV), mask=r < N)


def _run2d(backend, x, out_dt, axis, reverse, prod=False, BM=16, BN=16, **kw):
    M, N = x.shape
    y = np.zeros(M * N, out_dt)
    scan2d[(1,)](x.reshape(-1), y, M, N, AXIS=axis, REV=reverse, PROD=prod, BM=BM, BN=BN,
                 backend=backend, **kw)
    return y.reshape(M, N)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_2d(backend, axis, reverse):
    M, N = 13, 11  # ragged in both dims
    xi = RNG.integers(-1000, 1000, (M, N)).astype(np.int32)
    np.testing.assert_array_equal(_run2d(backend, xi, np.int32, axis, reverse),
                                  np_scan(xi, axis, reverse, np.add))
    xf = RNG.uniform(-1, 1, (M, N)).astype(np.float32)
    assert_close(_run2d(backend, xf, np.float32, axis, reverse),
                 np_scan(xf, axis, reverse, np.add, np.float64), k=(M, N)[axis])


@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_1d_float16_and_int8(backend, reverse):
    n = 100
    h = RNG.uniform(-1, 1, n).astype(np.float16)
    y = np.zeros(n, np.float16)  # float16 stays float16 (Triton's rule), rounding each step
    scan1d[(1,)](h, y, n, REV=reverse, BLOCK=128, backend=backend)
    assert_close(y, np_scan(h, 0, reverse, np.add, np.float64), k=n)
    # int8 sums widen to int32: no wrap-around although |sum| > 127
    b = RNG.integers(-128, 128, n).astype(np.int8)
    yi = np.zeros(n, np.int32)
    scan1d[(1,)](b, yi, n, REV=reverse, BLOCK=128, backend=backend)
    want = np_scan(b, 0, reverse, np.add, np.int64)
    assert np.abs(want).max() > 127
    np.testing.assert_array_equal(yi, want)


def test_cumsum_promotion_types():
    """int8/int16 -> int32, uint8/int1 -> uint32, bfloat16 -> float32, float16 kept, dtype=."""
    @kd.jit
    def k(X, Y, DT: kd.constexpr):
        r = kd.arange(0, 8)
        x = kd.load(X + r)
        if DT is None:
            kd.store(Y + r, kd.cumsum(x, 0))
        else:
            kd.store(Y + r, kd.cumsum(x, 0, dtype=DT))

    cases = [(np.int8, None, "int32"), (np.int16, None, "int32"), (np.uint8, None, "uint32"),
             (np.bool_, None, "uint32"), (np.float16, None, "float16"),
             (np.int32, None, "int32"), (np.float16, kd.float32, "float32"),
             (np.int8, kd.int8, "int8")]
    for dt, want_dt, want in cases:
        x = np.zeros(8, dt)
        text = k.compile(x, np.zeros(8, np.float32), DT=want_dt, backend="interp").ir["tile"]
        scans = [line for line in text.splitlines() if "scan(" in line]
        assert scans and scans[0].endswith(f"tile<8x{want}>  # line {scans[0].split()[-1]}"), \
            (dt, scans)


def test_cumsum_int1_and_bfloat16(backend):
    @kd.jit
    def k(X, Y, Z, N: kd.constexpr):
        r = kd.arange(0, N)
        x = kd.load(X + r)
        kd.store(Y + r, kd.cumsum(x > 0.0, 0))           # int1 -> uint32 counts
        kd.store(Z + r, kd.cumsum(x.to(kd.bfloat16), 0))  # bfloat16 -> float32

    x = RNG.uniform(-1, 1, 32).astype(np.float32)
    y, z = np.zeros(32, np.uint32), np.zeros(32, np.float32)
    k[(1,)](x, y, z, N=32, backend=backend)
    np.testing.assert_array_equal(y, np.cumsum(x > 0))
    bf = (x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1)) >> 16 << 16
    assert_close(z, np.cumsum(bf.astype(np.uint32).view(np.float32).astype(np.float64)), k=32)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumprod(backend, axis, reverse):
    M, N = 9, 12
    xf = RNG.uniform(0.8, 1.25, (M, N)).astype(np.float32)
    assert_close(_run2d(backend, xf, np.float32, axis, reverse, prod=True),
                 np_scan(xf, axis, reverse, np.multiply, np.float64), k=(M, N)[axis])
    xi = RNG.integers(-3, 4, (M, N)).astype(np.int32)  # products wrap in int32, exactly
    want = np_scan(xi, axis, reverse, np.multiply, np.int64)
    np.testing.assert_array_equal(_run2d(backend, xi, np.int32, axis, reverse, prod=True),
                                  (want % 2**32).astype(np.uint32).view(np.int32))


@pytest.mark.parametrize("num_warps", [1, 4])
def test_scan_many_threads(num_warps):
    """OpenCL work-groups of 32..128 threads: chunked lines (fewer lines than threads) and
    lines shared out to threads (more lines than threads)."""
    from kdsl.runtime.registry import backend_status

    if not backend_status("opencl")[0]:
        pytest.skip("opencl backend not available")
    for M, N, BM, BN in ((3, 50, 4, 64), (60, 5, 64, 8), (16, 16, 16, 16)):
        x = RNG.integers(-9, 10, (M, N)).astype(np.int32)
        for axis, rev in ((0, True), (1, False)):
            got = _run2d("opencl", x, np.int32, axis, rev, BM=BM, BN=BN, num_warps=num_warps)
            np.testing.assert_array_equal(got, np_scan(x, axis, rev, np.add))


# ------------------------------------------------------------------ associative_scan


@kd.jit
def running_max(a, b):
    return kd.maximum(a, b)


@kd.jit
def argmax_combine(v1, i1, v2, i2):
    take = (v1 > v2) | ((v1 == v2) & (i1 < i2))
    return kd.where(take, v1, v2), kd.where(take, i1, i2)


@kd.jit
def assoc_kernel(X, V, I, M, N, AXIS: kd.constexpr, REV: kd.constexpr, BM: kd.constexpr,
                 BN: kd.constexpr):
    rm = kd.arange(0, BM)
    rn = kd.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * N + rn[None, :]
    x = kd.load(X + offs, mask=mask, other=-float("inf"))
    if AXIS == 1:
        idx = kd.broadcast_to(rn[None, :], (BM, BN))
    else:
        idx = kd.broadcast_to(rm[:, None], (BM, BN))
    m = kd.associative_scan(x, AXIS, running_max, reverse=REV)
    v, i = kd.associative_scan((x, idx), AXIS, argmax_combine, REV)
    kd.store(V + offs, m + v, mask=mask)
    kd.store(I + offs, i, mask=mask)


def _running_argmax(x, axis, reverse):
    """Sequential (value, index) running maximum; ties keep the smaller index."""
    x = np.moveaxis(x, axis, 0)
    out_v, out_i = np.zeros_like(x), np.zeros(x.shape, np.int32)
    order = list(range(x.shape[0]))[::-1] if reverse else range(x.shape[0])
    best_v = best_i = None
    for q, r in enumerate(order):
        if q == 0:
            best_v, best_i = x[r].copy(), np.full(x.shape[1:], r, np.int32)
        else:
            take = x[r] > best_v
            take |= (x[r] == best_v) & (r < best_i)
            best_v, best_i = np.where(take, x[r], best_v), np.where(take, r, best_i)
        out_v[r], out_i[r] = best_v, best_i
    return np.moveaxis(out_v, 0, axis), np.moveaxis(out_i, 0, axis)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
def test_associative_scan_running_max_and_argmax(backend, axis, reverse):
    M, N = 7, 10
    x = RNG.integers(-4, 5, (M, N)).astype(np.float32)  # ties
    v, i = np.zeros(M * N, np.float32), np.zeros(M * N, np.int32)
    assoc_kernel[(1,)](x.reshape(-1), v, i, M, N, AXIS=axis, REV=reverse, BM=8, BN=16,
                       backend=backend)
    want_v, want_i = _running_argmax(x, axis, reverse)
    np.testing.assert_array_equal(v.reshape(M, N), 2 * want_v)
    np.testing.assert_array_equal(i.reshape(M, N), want_i)


# -------------------------------------------------------------------- tuple reductions


@kd.jit
def welford_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    n = n_a + n_b
    w = kd.where(n == 0.0, 0.0, n_b / n)
    delta = mean_b - mean_a
    return mean_a + delta * w, m2_a + m2_b + delta * delta * n_a * w, n


@kd.jit
def welford_rows(X, MEAN, VAR, M, N, BM: kd.constexpr, BN: kd.constexpr):
    rm = kd.program_id(0) * BM + kd.arange(0, BM)
    rn = kd.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = kd.load(X + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    count = mask.to(kd.float32)
    mean, m2, n = kd.reduce((x, kd.zeros((BM, BN), kd.float32), count), 1, welford_combine)
    kd.store(MEAN + rm, mean, mask=rm < M)
    kd.store(VAR + rm, m2 / n, mask=rm < M)


def test_welford_mean_var_of_rows(backend):
    M, N = 10, 37  # ragged: masked lanes are empty samples (count 0)
    x = (RNG.standard_normal((M, N)) * 3 + 5).astype(np.float32)
    mean, var = np.zeros(M, np.float32), np.zeros(M, np.float32)
    welford_rows[(2,)](x.reshape(-1), mean, var, M, N, BM=8, BN=64, backend=backend)
    x64 = x.astype(np.float64)
    assert_close(mean, x64.mean(1), k=N)
    assert_close(var, x64.var(1), k=4 * N)


@kd.jit
def max_kernel(X, V, I, M, N, AXIS: kd.constexpr, MIN: kd.constexpr, BM: kd.constexpr,
               BN: kd.constexpr):
    rm = kd.arange(0, BM)
    rn = kd.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    fill = float("inf") if MIN else -float("inf")
    x = kd.load(X + rm[:, None] * N + rn[None, :], mask=mask, other=fill)
    if MIN:
        v, i = kd.min(x, AXIS, return_indices=True)
        j = kd.argmin(x, AXIS, tie_break_left=False)
    else:
        v, i = x.max(AXIS, return_indices=True, return_indices_tie_break_left=True)
        j = x.argmax(AXIS, False)
    if AXIS is None:
        kd.store(V, v)
        kd.store(I, i)
        kd.store(I + 1, j)
    else:
        r = rn if AXIS == 0 else rm
        lim = N if AXIS == 0 else M
        kd.store(V + r, v, mask=r < lim)
        kd.store(I + r, i, mask=r < lim)
        kd.store(I + lim + r, j, mask=r < lim)


@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("is_min", [False, True])
def test_max_min_return_indices_with_ties(backend, axis, is_min):
    M, N = 6, 13
    x = RNG.integers(-2, 3, (M, N)).astype(np.float32)  # many ties
    x[2, 4] = np.nan  # NaN is the extreme: max/min propagate it, its index wins
    k = 1 if axis is None else (N if axis == 0 else M)
    v, i = np.zeros(k, np.float32), np.zeros(2 * k, np.int32)
    max_kernel[(1,)](x.reshape(-1), v, i, M, N, AXIS=axis, MIN=is_min, BM=8, BN=16,
                     backend=backend)
    red, arg = (np.min, np.argmin) if is_min else (np.max, np.argmax)
    padded = np.full((8, 16), np.inf if is_min else -np.inf, np.float32)
    padded[:M, :N] = x
    flat = padded.reshape(-1) if axis is None else x  # axis=None: flat index in the tile
    ax = 0 if axis is None else axis
    np.testing.assert_array_equal(v, np.atleast_1d(red(flat, axis=ax)))
    np.testing.assert_array_equal(i[:k], np.atleast_1d(arg(flat, axis=ax)))  # first index
    np.testing.assert_array_equal(i[k:], i[:k])  # the fast tie break picks one of the ties


def test_max_min_types():
    """Without indices, types narrower than 32 bits widen (float16 -> float32, int8 -> int32),
    as Triton's `max`; with indices the values keep their type; bfloat16 is float32."""
    @kd.jit
    def k(X, Y, IDX: kd.constexpr):
        x = kd.load(X + kd.arange(0, 8))
        if IDX:
            v, i = kd.max(x, 0, return_indices=True)
            kd.store(Y, v + i)
        else:
            kd.store(Y, kd.min(x, 0))

    for dt, idx, want in [(np.float16, False, "float32"), (np.int8, False, "int32"),
                          (np.float16, True, "float16"), (np.int8, True, "int8"),
                          (np.float64, False, "float64")]:
        text = k.compile(np.zeros(8, dt), np.zeros(1, np.float32), IDX=idx,
                         backend="interp").ir["tile"]
        red = next(line for line in text.splitlines() if "reduce(" in line)
        assert f": {want}  #" in red, (dt, idx, red)


@pytest.mark.parametrize("axis", [0, 1, None])
def test_xor_sum_and_reduce_or(backend, axis):
    @kd.jit
    def k(X, Y, Z, M, N, AXIS: kd.constexpr, BM: kd.constexpr, BN: kd.constexpr):
        rm = kd.arange(0, BM)
        rn = kd.arange(0, BN)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        x = kd.load(X + rm[:, None] * N + rn[None, :], mask=mask, other=0)
        a = kd.xor_sum(x, AXIS)
        b = x.reduce_or(AXIS)
        if AXIS is None:
            kd.store(Y, a)
            kd.store(Z, b)
        else:
            r = rn if AXIS == 0 else rm
            lim = N if AXIS == 0 else M
            kd.store(Y + r, a, mask=r < lim)
            kd.store(Z + r, b, mask=r < lim)

    M, N = 5, 7
    x = RNG.integers(-2**31, 2**31 - 1, (M, N)).astype(np.int32)
    k_ = 1 if axis is None else (N if axis == 0 else M)
    y, z = np.zeros(k_, np.int32), np.zeros(k_, np.int32)
    k[(1,)](x.reshape(-1), y, z, M, N, AXIS=axis, BM=8, BN=8, backend=backend)
    src = x.reshape(-1) if axis is None else x
    ax = 0 if axis is None else axis
    np.testing.assert_array_equal(y, np.atleast_1d(np.bitwise_xor.reduce(src, axis=ax)))
    np.testing.assert_array_equal(z, np.atleast_1d(np.bitwise_or.reduce(src, axis=ax)))


@kd.jit
def softmax_kernel(X, Y, M, N, BM: kd.constexpr, BN: kd.constexpr):
    rm = kd.arange(0, BM)
    rn = kd.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * N + rn[None, :]
    x = kd.load(X + offs, mask=mask, other=-float("inf"))
    kd.store(Y + offs, kd.softmax(x, 1, keep_dims=True), mask=mask)
    kd.store(Y + M * N + offs, x.softmax(0), mask=mask)  # dim 0, reductions broadcast as (N,)


def test_softmax(backend):
    M, N = 5, 11
    x = RNG.uniform(-3, 3, (M, N)).astype(np.float16)
    y = np.zeros(2 * M * N, np.float16)
    softmax_kernel[(1,)](x.reshape(-1), y, M, N, BM=8, BN=16, backend=backend)
    x64 = x.astype(np.float64)
    for ax, got in ((1, y[:M * N]), (0, y[M * N:])):
        e = np.exp(x64 - x64.max(ax, keepdims=True))
        assert_close(got.reshape(M, N), e / e.sum(ax, keepdims=True), k=8)


def test_sum_dtype(backend):
    @kd.jit
    def k(X, A, B, C, N: kd.constexpr):
        x = kd.load(X + kd.arange(0, N))
        kd.store(A, kd.sum(x, 0))                      # int8 -> int32
        kd.store(B, kd.sum(x, 0, dtype=kd.int8))       # wraps in int8
        kd.store(C, x.sum(dtype=kd.float32) * 0.5)

    x = RNG.integers(50, 120, 16).astype(np.int8)
    a, b, c = np.zeros(1, np.int32), np.zeros(1, np.int8), np.zeros(1, np.float32)
    k[(1,)](x, a, b, c, N=16, backend=backend)
    total = int(x.astype(np.int64).sum())
    assert a[0] == total
    assert b[0] == ((total + 128) % 256) - 128
    assert c[0] == total * 0.5


# --------------------------------------------------------------------------- IR form


def test_ir_forms_round_trip():
    x = np.zeros(64, np.float32)
    texts = [
        assoc_kernel.compile(x, x, np.zeros(64, np.int32), 8, 8, AXIS=1, REV=True, BM=8, BN=8,
                             backend="interp").ir["tile.dce"],
        welford_rows.compile(x, x, x, 8, 8, BM=8, BN=8, backend="interp").ir["tile.dce"],
    ]
    assert "scan(" in texts[0] and "reverse=True" in texts[0] and "op='custom'" in texts[0]
    assert "%mean, %m2, %n = reduce(" in texts[1]
    for text in texts:
        fn = parser.parse_function(text)
        tile.verify(fn)
        assert tile.print_function(fn) == text


# ----------------------------------------------------------------------------- errors


@kd.jit
def add(a, b):
    return a + b


@kd.jit
def two_of_one(a, b):
    return a + b, a


def _scan_error(body):
    @kd.jit
    def k(X, MODE: kd.constexpr):
        x = kd.load(X + kd.arange(0, 8))
        body(x, MODE)

    with pytest.raises(CompilationError) as e:
        k[(1,)](np.zeros(8, np.float32), MODE=0, backend="interp")
    return str(e.value)


@kd.jit
def bad_axis_none(x, MODE):
    kd.associative_scan(x, None, add)


@kd.jit
def bad_result_count(x, MODE):
    kd.associative_scan(x, 0, two_of_one)


@kd.jit
def bad_shapes(x, MODE):
    kd.associative_scan((x, kd.reshape(x, (2, 4))), 0, add)


@kd.jit
def bad_or_of_floats(x, MODE):
    kd.reduce_or(x, 0)


@kd.jit
def bad_scan_of_scalar(x, MODE):
    kd.cumsum(kd.sum(x), 0)


@kd.jit
def bad_reverse(x, MODE):
    kd.cumsum(x, 0, reverse=kd.program_id(0) > 0)


@pytest.mark.parametrize("body, message", [
    (bad_axis_none, "axis must be a constexpr int"),
    (bad_result_count, "returns 2 values for 1 input"),
    (bad_shapes, "same shape"),
    (bad_or_of_floats, "only supported for integers"),
    (bad_scan_of_scalar, "needs a tile"),
    (bad_reverse, "reverse must be a constexpr bool"),
])
def test_errors(body, message):
    assert message in _scan_error(body)
