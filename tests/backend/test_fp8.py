"""8-bit floats on every backend: all 256 codes of each format through loads, stores and
bitcasts; conversions from float32 (halfway cases, overflow, subnormals, NaN, infinities),
float16, bfloat16, float64 and int32; arithmetic; an fp8 dot against float64; a Triton-style
quantisation kernel.  Expected values come from the NumPy reference (kdsl/ir/fp8.py, itself
checked against ml_dtypes in tests/unit/test_fp8_formats.py) and from ml_dtypes directly."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd
from kdsl.ir import fp8
from kdsl.runtime.binding import bfloat16_view

ml_dtypes = pytest.importorskip("ml_dtypes", reason="float8 references need ml_dtypes (test extra)")

FORMATS = [kd.float8e4nv, kd.float8e5, kd.float8e4b15, kd.float8e4b8, kd.float8e5b16]
ML = {"float8e4nv": ml_dtypes.float8_e4m3fn, "float8e5": ml_dtypes.float8_e5m2,
      "float8e4b8": ml_dtypes.float8_e4m3fnuz, "float8e5b16": ml_dtypes.float8_e5m2fnuz}
CODES = np.arange(256, dtype=np.uint8)
RNG = np.random.default_rng(8)


def codes_of(x, dt):
    return kd.float8_view(np.asarray(x, np.uint8).copy(), dt)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(np.asarray(a, np.float32).view(np.uint32),
                          np.asarray(b, np.float32).view(np.uint32))


def edge_values(dt) -> np.ndarray:
    """float32 values around every rounding decision of the format: its values, the halfway
    points between neighbours and the floats next to them, subnormal halves, overflow,
    infinities, NaN, signed zeros and float32 subnormals."""
    vals = fp8.decode(CODES, dt)
    fin = np.unique(np.abs(vals[np.isfinite(vals)]).astype(np.float64))
    mids = ((fin[1:] + fin[:-1]) / 2).astype(np.float32)
    big = np.float32([fin[-1] * 1.0625, fin[-1] * 1.125, fin[-1] * 2, 1e30, 3.4e38])
    tiny = np.float32([fin[1] / 2, fin[1] / 4, fin[1] * 0.5000001, 1e-40, 1e-45])
    mag = np.concatenate([fin.astype(np.float32), mids, np.nextafter(mids, np.float32(0)),
                          np.nextafter(mids, np.float32(np.inf)), big, tiny,
                          np.float32([np.inf])])
    return np.concatenate([mag, -mag, np.float32([np.nan, -np.nan, 0.0, -0.0])])


def ml_convert(x: np.ndarray, dt) -> np.ndarray:
    """ml_dtypes' conversion with kdsl's (Triton's) saturation: codes."""
    f = fp8.fmt(dt)
    y = np.where(np.isnan(x), x, np.clip(x, -f.max_value, f.max_value)).astype(np.float32)
    with np.errstate(invalid="ignore"):
        c = y.astype(ML[dt.name]).view(np.uint8)
    nan = np.isnan(x) | (np.isinf(x) if f.special == "fnuz" else False)
    return np.where(nan, f.nan_code, c).astype(np.uint8)


# ------------------------------------------------------------------------------ kernels


@kd.jit
def copy_codes(src, dst, values, bits, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    v = kd.load(src + offs)
    kd.store(dst + offs, v)                                   # fp8 -> fp8: the same bytes
    kd.store(values + offs, v.to(kd.float32))                 # exact values
    kd.store(bits + offs, v.to(kd.uint8, bitcast=True))       # the code


@kd.jit
def from_bits(src, dst, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    kd.store(dst + offs, kd.load(src + offs).to(dst.dtype.element_ty, bitcast=True))


@kd.jit
def convert(x_ptr, y_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    x = kd.load(x_ptr + offs, mask=m)
    kd.store(y_ptr + offs, x.to(y_ptr.dtype.element_ty), mask=m)


@kd.jit
def add_fp8(a_ptr, b_ptr, c_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    a = kd.load(a_ptr + offs, mask=m, other=1.5)
    b = kd.load(b_ptr + offs, mask=m, other=1.5)
    kd.store(c_ptr + offs, a + b, mask=m)     # computed in float32, rounded to the type


@kd.jit
def masked_other(src, dst, n, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    kd.store(dst + offs, kd.load(src + offs, mask=offs < n, other=-2.5))


@kd.jit
def dot_fp8(a_ptr, b_ptr, c_ptr, M: kd.constexpr, N: kd.constexpr, K: kd.constexpr):
    rm = kd.arange(0, M)
    rn = kd.arange(0, N)
    rk = kd.arange(0, K)
    a = kd.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = kd.load(b_ptr + rk[:, None] * N + rn[None, :])
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], kd.dot(a, b))


@kd.jit
def quantize_rows(x_ptr, q_ptr, scale_ptr, N, BLOCK: kd.constexpr):
    # Triton-style per-row scaling to the largest magnitude of the fp8 type of `q_ptr`
    row = kd.program_id(0)
    offs = kd.arange(0, BLOCK)
    m = offs < N
    x = kd.load(x_ptr + row * N + offs, mask=m, other=0.0)
    if q_ptr.dtype.element_ty == kd.float8e5:
        FP8_MAX = 57344.0
    else:
        FP8_MAX = 448.0
    scale = kd.maximum(kd.max(kd.abs(x), axis=0), 1e-12) / FP8_MAX
    kd.store(q_ptr + row * N + offs, (x / scale).to(q_ptr.dtype.element_ty), mask=m)
    kd.store(scale_ptr + row, scale)


# -------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("dt", FORMATS, ids=str)
def test_all_codes_round_trip(backend, dt):
    dst = codes_of(np.zeros(256), dt)
    values = np.zeros(256, np.float32)
    bits = np.zeros(256, np.uint8)
    copy_codes[(1,)](codes_of(CODES, dt), dst, values, bits, BLOCK=256, backend=backend)
    assert np.array_equal(dst.array, CODES)      # every code, NaNs and -0 included
    assert np.array_equal(bits, CODES)
    ref = fp8.decode(CODES, dt)
    assert same_bits(values, ref)
    if dt.name in ML:
        theirs = CODES.view(ML[dt.name]).astype(np.float32)
        assert np.array_equal(values, theirs, equal_nan=True)
    else:  # float8e4b15 is float8_e4m3b11fnuz scaled by 2^-4, with -0 and no NaN
        theirs = CODES.view(ml_dtypes.float8_e4m3b11fnuz).astype(np.float32) / 16
        theirs[0x80] = -0.0
        assert np.array_equal(values, theirs)
    back = codes_of(np.zeros(256), dt)
    from_bits[(1,)](CODES.copy(), back, BLOCK=256, backend=backend)
    assert np.array_equal(back.array, CODES)


@pytest.mark.parametrize("dt", FORMATS, ids=str)
def test_conversion_from_float32_edges(backend, dt):
    x = edge_values(dt)
    n = x.size
    y = codes_of(np.zeros(n), dt)
    convert[(kd.cdiv(n, 512),)](x, y, n, BLOCK=512, backend=backend)
    want = fp8.convert(x, dt)
    bad = np.nonzero(y.array != want)[0]
    assert not bad.size, f"{x[bad][:4]} -> {y.array[bad][:4]}, want {want[bad][:4]}"
    if dt.name in ML:
        assert np.array_equal(y.array, ml_convert(x, dt))


@pytest.mark.parametrize("dt", [kd.float8e4nv, kd.float8e5, kd.float8e4b8], ids=str)
@pytest.mark.parametrize("src", ["float16", "bfloat16"])
def test_conversion_from_every_16_bit_float(backend, dt, src):
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    if src == "float16":
        x_arg, x = bits.view(np.float16), bits.view(np.float16).astype(np.float32)
    else:
        x_arg, x = bfloat16_view(bits), (bits.astype(np.uint32) << 16).view(np.float32)
    n = bits.size
    y = codes_of(np.zeros(n), dt)
    convert[(n // 1024,)](x_arg, y, n, BLOCK=1024, backend=backend)
    assert np.array_equal(y.array, fp8.convert(x, dt))
    assert np.array_equal(y.array, ml_convert(x, dt))


def test_conversion_from_float64_rounds_once(backend):
    if backend == "opencl" and "fp64" not in _caps(backend):
        pytest.skip("no fp64 on this OpenCL device")
    dt = kd.float8e4nv
    vals = fp8.decode(CODES, dt).astype(np.float64)
    fin = np.unique(np.abs(vals[np.isfinite(vals)]))
    mids = (fin[1:] + fin[:-1]) / 2
    # just above / below a halfway point: float32 would round these onto the tie
    x = np.concatenate([mids * (1 + 2.0**-40), mids * (1 - 2.0**-40), mids, [1e300, -1e300]])
    y = codes_of(np.zeros(x.size), dt)
    convert[(kd.cdiv(x.size, 512),)](x, y, x.size, BLOCK=512, backend=backend)
    assert np.array_equal(y.array, fp8.convert(x, dt))
    k = mids.size  # just above a tie rounds up, just below down (ml_dtypes rounds twice here)
    up, down = fp8.encode(fin[1:], dt), fp8.encode(fin[:-1], dt)
    assert np.array_equal(y.array[:k], up) and np.array_equal(y.array[k:2 * k], down)
    assert list(y.array[-2:]) == [0x7E, 0xFE]


def test_conversion_from_int32(backend):
    x = np.concatenate([np.arange(-600, 600), [2**31 - 1, -2**31, 57344, 61440, 61441]]).astype(
        np.int32)
    for dt in (kd.float8e5, kd.float8e4nv):
        y = codes_of(np.zeros(x.size), dt)
        convert[(kd.cdiv(x.size, 512),)](x, y, x.size, BLOCK=512, backend=backend)
        assert np.array_equal(y.array, fp8.convert(x.astype(np.float64), dt)), dt


@pytest.mark.parametrize("dt", [kd.float8e5, kd.float8e4nv, kd.float8e5b16], ids=str)
def test_arithmetic_rounds_to_the_type(backend, dt):
    n = 300
    a = RNG.integers(0, 256, n).astype(np.uint8)
    b = RNG.integers(0, 256, n).astype(np.uint8)
    if dt == kd.float8e5:  # infinities and overflow: inf + 1 = inf, max + max saturates
        a[:4], b[:4] = [0x7C, 0xFC, 0x7B, 0x7C], [0x3C, 0x3C, 0x7B, 0x7C]
    c = codes_of(np.zeros(n), dt)
    add_fp8[(2,)](codes_of(a, dt), codes_of(b, dt), c, n, BLOCK=256, backend=backend)
    s = fp8.decode(a, dt) + fp8.decode(b, dt)  # exact in float32
    want = fp8.encode(s, dt)
    ok = (c.array == want) | (np.isnan(s) & np.isnan(fp8.decode(c.array, dt)))
    assert ok.all(), (a[~ok][:4], b[~ok][:4], c.array[~ok][:4], want[~ok][:4])
    if dt == kd.float8e5:
        assert list(c.array[:4]) == [0x7C, 0xFC, 0x7B, 0x7C]


def test_masked_load_other(backend):
    dst = np.zeros(16, np.float32)
    masked_other[(1,)](codes_of(np.full(16, 0x38), kd.float8e4nv), dst, 5, BLOCK=16,
                       backend=backend)
    assert list(dst) == [1.0] * 5 + [-2.5] * 11


@pytest.mark.parametrize("da,db", [(kd.float8e4nv, kd.float8e4nv), (kd.float8e4nv, kd.float8e5),
                                   (kd.float8e5b16, kd.float8e4b15)], ids=str)
def test_dot_of_fp8_tiles(backend, da, db):
    M, N, K = 16, 16, 32
    a = _finite_codes(da, M * K)
    b = _finite_codes(db, K * N)
    c = np.zeros(M * N, np.float32)
    dot_fp8[(1,)](codes_of(a, da), codes_of(b, db), c, M=M, N=N, K=K, backend=backend)
    av = fp8.decode(a, da).astype(np.float64).reshape(M, K)
    bv = fp8.decode(b, db).astype(np.float64).reshape(K, N)
    # products of 8-bit floats are exact in float32; only the float32 sum rounds
    bound = K * 2.0**-24 * (np.abs(av) @ np.abs(bv))
    assert np.all(np.abs(c.reshape(M, N) - av @ bv) <= bound)


@pytest.mark.parametrize("dt", [kd.float8e4nv, kd.float8e5], ids=str)
def test_quantize_kernel(backend, dt):
    R, N = 4, 200
    x = (RNG.standard_normal((R, N)) * RNG.uniform(0.01, 100, (R, 1))).astype(np.float32)
    x[1, :5] = 0.0
    q = codes_of(np.zeros(R * N), dt)
    scales = np.zeros(R, np.float32)
    quantize_rows[(R,)](x, q, scales, N, BLOCK=256, backend=backend)
    fmax = np.float32(57344.0 if dt == kd.float8e5 else 448.0)
    s = np.maximum(np.abs(x).max(axis=1), np.float32(1e-12)) / fmax
    assert np.array_equal(scales, s)
    want = fp8.convert(x / s[:, None], dt).reshape(-1)
    assert np.array_equal(q.array, want)
    assert np.array_equal(want, ml_convert((x / s[:, None]).reshape(-1), dt))
    deq = fp8.decode(q.array, dt).reshape(R, N) * s[:, None]
    rel = 2.0 ** -(fp8.fmt(dt).man_bits + 1)
    assert np.all(np.abs(deq - x) <= rel * np.abs(x) + s[:, None] * 2.0 ** -9)


def _finite_codes(dt, n):
    vals = fp8.decode(CODES, dt)
    ok = CODES[np.isfinite(vals) & (np.abs(vals) <= 64)]
    return RNG.choice(ok, n).astype(np.uint8)


def _caps(backend):
    from kdsl.backends import get_backend

    return get_backend(backend).caps


@pytest.mark.parametrize("dt", [kd.float8e4nv, kd.float8e5], ids=str)
def test_conversion_under_fast_math(backend, dt):
    # fast math assumes no NaN or infinity: finite edge values still round exactly, since the
    # conversion uses no float arithmetic that fast math may reassociate
    x = edge_values(dt)
    x = x[np.isfinite(x)]
    y = codes_of(np.zeros(x.size), dt)
    convert[(kd.cdiv(x.size, 512),)](x, y, x.size, BLOCK=512, backend=backend, fast_math=True)
    assert np.array_equal(y.array, fp8.convert(x, dt))


def test_poison_marks_unwritten_fp8_elements(backend):
    x = np.ones(8, np.float32)
    for dt, nan in ((kd.float8e4nv, 0x7F), (kd.float8e4b8, 0x80)):
        y = codes_of(np.zeros(16), dt)
        convert[(1,)](x, y, 8, BLOCK=8, backend=backend, poison=True)
        assert list(y.array) == [fp8.code_of(1.0, dt)] * 8 + [nan] * 8
