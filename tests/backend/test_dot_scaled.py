"""`kd.dot_scaled` on every backend against a float64 NumPy reference written here: the
e2m1, e4m3 and e5m2 codes and the e8m0 scales are decoded bit by bit, each scaled operand is
rounded once to the compute type (bfloat16, or float16 beside an fp16 operand) as Triton's
emulation does, and the products are summed in float64."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd

ml_dtypes = pytest.importorskip("ml_dtypes", reason="float8 references need ml_dtypes (test extra)")

FORMATS = ["e2m1", "e4m3", "e5m2", "bf16", "fp16"]
RNG = np.random.default_rng(32)


# ------------------------------------------------------------------------- the reference


def decode_e2m1(nibbles: np.ndarray) -> np.ndarray:
    """4-bit codes: sign, 2 exponent bits (bias 1), 1 mantissa bit."""
    n = nibbles.astype(np.int64)
    e, m = (n >> 1) & 3, n & 1
    mag = np.where(e == 0, 0.5 * m, 2.0 ** (e - 1) * (1 + 0.5 * m))
    return np.where(n & 8, -mag, mag)


def decode_minifloat(codes: np.ndarray, ebits: int, mbits: int, ieee_specials: bool):
    """8-bit codes of a sign/exponent/mantissa format with bias 2**(ebits-1) - 1. e4m3 ("fn")
    has no infinity and one NaN magnitude (all ones); e5m2 has IEEE infinities and NaNs."""
    c = codes.astype(np.int64)
    bias = 2 ** (ebits - 1) - 1
    e = (c >> mbits) & (2 ** ebits - 1)
    m = c & (2 ** mbits - 1)
    frac = m / 2.0 ** mbits
    mag = np.where(e == 0, frac * 2.0 ** (1 - bias), (1 + frac) * 2.0 ** (e - bias))
    top = e == 2 ** ebits - 1
    if ieee_specials:
        mag = np.where(top, np.where(m == 0, np.inf, np.nan), mag)
    else:
        mag = np.where(top & (m == 2 ** mbits - 1), np.nan, mag)
    return np.where(c & 0x80, -mag, mag)


def decode_e8m0(s: np.ndarray, compute) -> np.ndarray:
    """A scale byte as the compute type, the way Triton's emulation builds it: 2**(s-127),
    but 0.0 for s == 0 (its bits) and NaN for 255; float16 rounds 2**(s-127) (saturating)."""
    s = s.astype(np.int64)
    v = np.where(s == 0, 0.0, 2.0 ** (s - 127.0))
    with np.errstate(over="ignore"):
        v = v.astype(compute).astype(np.float64)
    return np.where(s == 255, np.nan, v)


def operand_values(data: np.ndarray, fmt: str, packed_rows: bool) -> np.ndarray:
    """The float64 values of a stored operand."""
    if fmt == "e2m1":
        lo, hi = decode_e2m1(data & 15), decode_e2m1(data >> 4)
        if packed_rows:
            out = np.empty((2 * data.shape[0], data.shape[1]))
            out[0::2], out[1::2] = lo, hi
        else:
            out = np.empty((data.shape[0], 2 * data.shape[1]))
            out[:, 0::2], out[:, 1::2] = lo, hi
        return out
    bits = np.asarray(data).view(np.uint8 if fmt in ("e4m3", "e5m2") else np.uint16)
    if fmt == "e4m3":
        return decode_minifloat(bits, 4, 3, False)
    if fmt == "e5m2":
        return decode_minifloat(bits, 5, 2, True)
    if fmt == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return bits.view(np.float16).astype(np.float64)


def reference(a, sa, fa, pack_a, b, sb, fb, pack_b, acc, fast_math=False):
    compute = np.float16 if "fp16" in (fa, fb) else ml_dtypes.bfloat16
    x = operand_values(a, fa, not pack_a)
    y = operand_values(b, fb, pack_b)
    with np.errstate(over="ignore", invalid="ignore"):
        x, y = (v.astype(compute).astype(np.float64) for v in (x, y))  # the upcast
        for v, s, rhs in ((x, sa, False), (y, sb, True)):
            if s is None:
                continue
            sc = np.repeat(decode_e8m0(s, compute), 32, axis=1)  # [rows, K]
            if rhs:
                sc = sc.T
            scaled = np.where(np.isnan(sc), np.inf, sc) * v
            scaled = scaled.astype(compute).astype(np.float64)  # one rounding
            if not fast_math:
                scaled = np.where(np.isnan(sc), np.nan, scaled)
            v[...] = scaled
        out = x @ y
        bound = np.abs(x) @ np.abs(y)
    if acc is not None:
        out, bound = out + acc, bound + np.abs(acc)
    return out, bound


def random_operand(fmt: str, shape: tuple[int, int], dtype_form: str = "codes"):
    """Random finite data of `fmt` in its stored shape: uint8 bytes (or ml_dtypes float8 when
    `dtype_form` is "float"), uint16 bits or bfloat16/float16 arrays."""
    if fmt == "e2m1":
        return RNG.integers(0, 256, shape, dtype=np.uint8)
    if fmt in ("e4m3", "e5m2"):
        codes = RNG.integers(0, 256, shape, dtype=np.uint8)
        if fmt == "e4m3":  # no NaN codes here (specials have their own test)
            codes = np.where((codes & 0x7f) == 0x7f, codes ^ 1, codes).astype(np.uint8)
        else:  # no infinities or NaNs
            codes = np.where((codes & 0x7c) == 0x7c, codes & 0xf3, codes).astype(np.uint8)
        if dtype_form == "float":
            return codes.view(ml_dtypes.float8_e4m3fn if fmt == "e4m3" else ml_dtypes.float8_e5m2)
        return codes
    vals = RNG.standard_normal(shape) * 3
    arr = vals.astype(ml_dtypes.bfloat16 if fmt == "bf16" else np.float16)
    return arr.view(np.uint16) if dtype_form == "codes" else arr


def stored_shape(fmt: str, rows: int, cols: int, packed_dim: int | None) -> tuple[int, int]:
    if fmt != "e2m1":
        return rows, cols
    return (rows // 2, cols) if packed_dim == 0 else (rows, cols // 2)


# ----------------------------------------------------------------------------- the kernel


@kd.jit
def scaled_kernel(a_ptr, sa_ptr, b_ptr, sb_ptr, acc_ptr, c_ptr, M: kd.constexpr,
                  N: kd.constexpr, K: kd.constexpr, FA: kd.constexpr, FB: kd.constexpr,
                  PACK_A: kd.constexpr, PACK_B: kd.constexpr, FAST: kd.constexpr):
    # the stored shapes: an e2m1 byte holds two elements along K (k_pack) or along M / N
    AR = M // 2 if FA == "e2m1" and not PACK_A else M
    AC = K // 2 if FA == "e2m1" and PACK_A else K
    BR = K // 2 if FB == "e2m1" and PACK_B else K
    BC = N // 2 if FB == "e2m1" and not PACK_B else N
    a = kd.load(a_ptr + kd.arange(0, AR)[:, None] * AC + kd.arange(0, AC)[None, :])
    b = kd.load(b_ptr + kd.arange(0, BR)[:, None] * BC + kd.arange(0, BC)[None, :])
    rk = kd.arange(0, K // 32)[None, :]
    sa = kd.load(sa_ptr + kd.arange(0, M)[:, None] * (K // 32) + rk) \
        if sa_ptr is not None else None
    sb = kd.load(sb_ptr + kd.arange(0, N)[:, None] * (K // 32) + rk) \
        if sb_ptr is not None else None
    rc = kd.arange(0, M)[:, None] * N + kd.arange(0, N)[None, :]
    acc = kd.load(acc_ptr + rc) if acc_ptr is not None else None
    c = kd.dot_scaled(a, sa, FA, b, sb, FB, acc, fast_math=FAST, lhs_k_pack=PACK_A,
                      rhs_k_pack=PACK_B)
    kd.store(c_ptr + rc, c)


def run_case(backend, fa, fb, *, m=16, n=16, k=64, pack_a=True, pack_b=True, scales=(1, 1),
             with_acc=True, forms=("codes", "codes"), data=None, fast_math=False):
    if data is None:
        a = random_operand(fa, stored_shape(fa, m, k, 1 if pack_a else 0), forms[0])
        b = random_operand(fb, stored_shape(fb, k, n, 0 if pack_b else 1), forms[1])
        sa = RNG.integers(118, 137, (m, k // 32), dtype=np.uint8) if scales[0] else None
        sb = RNG.integers(118, 137, (n, k // 32), dtype=np.uint8) if scales[1] else None
        acc = RNG.standard_normal((m, n)).astype(np.float32) if with_acc else None
    else:
        a, sa, b, sb, acc = data
    c = np.full((m, n), np.nan, np.float32)
    scaled_kernel[(1,)](a, sa, b, sb, acc, c, m, n, k, fa, fb, pack_a, pack_b, fast_math,
                        backend=backend)
    ref, bound = reference(a, sa, fa, pack_a, b, sb, fb, pack_b,
                           None if acc is None else acc.astype(np.float64), fast_math)
    return c, ref, bound


def check(c, ref, bound):
    assert np.array_equal(np.isnan(c), np.isnan(ref)), "NaN positions differ"
    assert np.array_equal(c[np.isinf(ref)], ref[np.isinf(ref)]), "infinities differ"
    fin = np.isfinite(ref)
    err = np.abs(c[fin].astype(np.float64) - ref[fin])
    assert (err <= 1e-5 * bound[fin] + 1e-30).all(), f"max error {err.max()}"


# ------------------------------------------------------------------------------- tests

# every format on each side, each pair of different kinds at least once
PAIRS = [("e2m1", "e2m1"), ("e2m1", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e2m1"),
         ("bf16", "e2m1"), ("e4m3", "bf16"), ("fp16", "e4m3"), ("e2m1", "fp16"),
         ("bf16", "fp16"), ("fp16", "e5m2")]


@pytest.mark.parametrize("fa,fb", PAIRS)
def test_format_pairs(backend, fa, fb):
    with_acc = PAIRS.index((fa, fb)) % 2 == 0
    check(*run_case(backend, fa, fb, with_acc=with_acc))


@pytest.mark.parametrize("fa", FORMATS)
@pytest.mark.parametrize("fb", FORMATS)
def test_all_pairs_interp(fa, fb):
    """All 25 pairs, with the 8-bit and 16-bit operands given as float tiles, on the
    interpreter (the reference semantics every backend lowers)."""
    check(*run_case("interp", fa, fb, forms=("float", "float"), k=32, m=8, n=8,
                    with_acc=(fa < fb)))


@pytest.mark.parametrize("pack_a,pack_b", [(True, False), (False, True), (False, False)])
def test_fp4_packed_along_m_and_n(backend, pack_a, pack_b):
    check(*run_case(backend, "e2m1", "e2m1", pack_a=pack_a, pack_b=pack_b, m=16, n=32,
                    with_acc=pack_a))


def test_fp4_packing_mixed_with_fp8(backend):
    check(*run_case(backend, "e2m1", "e5m2", pack_a=False, with_acc=False,
                    forms=("codes", "float")))
    check(*run_case(backend, "bf16", "e2m1", pack_b=False, forms=("float", "codes")))


@pytest.mark.parametrize("scales", [(0, 0), (1, 0), (0, 1)])
def test_without_scales(backend, scales):
    check(*run_case(backend, "e4m3", "e2m1", scales=scales, k=96, with_acc=False))


def test_special_scales_and_codes(backend):
    """e8m0 255 (NaN) poisons its group of 32, s = 0 gives zero, scales that overflow
    float16, and e4m3 NaN / e5m2 infinity codes; fast_math skips the NaN of the scales."""
    m = n = 8
    k = 64
    a = RNG.integers(0, 256, (m, k // 2), dtype=np.uint8)          # e2m1 along K
    b = RNG.integers(0, 0x70, (k, n), dtype=np.uint8)               # small e4m3 codes
    b[3, 5] = 0x7f                                                  # e4m3 NaN
    sa = RNG.integers(120, 134, (m, k // 32), dtype=np.uint8)
    sb = RNG.integers(120, 134, (n, k // 32), dtype=np.uint8)
    sa[2, 1] = 255
    sa[4, 0] = 0
    sb[6, 1] = 255
    for fast in (False, True):
        c, ref, bound = run_case(backend, "e2m1", "e4m3", m=m, n=n, k=k,
                                 data=(a, sa, b, sb, None), fast_math=fast)
        check(c, ref, bound)
        assert np.isnan(c[:, 5]).all()  # the NaN code, fast or not
        if not fast:
            assert np.isnan(c[2]).all() and np.isnan(c[:, 6]).all()
    # float16 compute: 2**(s-127) saturates to inf above 2**15, flushes below 2**-24
    a16 = (RNG.standard_normal((m, k)) * 0.01).astype(np.float16)
    b5 = RNG.integers(0, 0x40, (k, n), dtype=np.uint8)             # small e5m2 codes
    b5[7, 2] = 0x7c                                                 # e5m2 +inf
    sa16 = RNG.integers(127, 135, (m, k // 32), dtype=np.uint8)
    sa16[1, 0] = 143                                                # 2**16: inf in fp16
    sa16[5, 1] = 100                                                # 2**-27: 0 in fp16
    sb16 = np.full((n, k // 32), 127, np.uint8)
    check(*run_case(backend, "fp16", "e5m2", m=m, n=n, k=k,
                    data=(a16, sa16, b5, sb16, np.ones((m, n), np.float32))))


def test_a_matmul_loop(backend):
    """dot_scaled accumulating over K blocks in a runtime loop (the MX GEMM pattern)."""

    @kd.jit
    def mx_matmul(a_ptr, sa_ptr, b_ptr, sb_ptr, c_ptr, K, BM: kd.constexpr, BN: kd.constexpr,
                  BK: kd.constexpr):
        rm = kd.arange(0, BM)
        rn = kd.arange(0, BN)
        acc = kd.zeros((BM, BN), kd.float32)
        for k0 in range(0, K, BK):
            a = kd.load(a_ptr + rm[:, None] * (K // 2) + k0 // 2 + kd.arange(0, BK // 2)[None, :])
            b = kd.load(b_ptr + (k0 + kd.arange(0, BK))[:, None] * BN + rn[None, :])
            sk = k0 // 32 + kd.arange(0, BK // 32)[None, :]
            sa = kd.load(sa_ptr + rm[:, None] * (K // 32) + sk)
            sb = kd.load(sb_ptr + rn[:, None] * (K // 32) + sk)
            acc = kd.dot_scaled(a, sa, "e2m1", b, sb, "e4m3", acc)
        kd.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)

    m, n, k = 16, 16, 128
    a = random_operand("e2m1", (m, k // 2))
    b = random_operand("e4m3", (k, n))
    sa = RNG.integers(118, 137, (m, k // 32), dtype=np.uint8)
    sb = RNG.integers(118, 137, (n, k // 32), dtype=np.uint8)
    c = np.zeros((m, n), np.float32)
    mx_matmul[(1,)](a, sa, b, sb, c, k, BM=m, BN=n, BK=64, backend=backend)
    check(c, *reference(a, sa, "e2m1", True, b, sb, "e4m3", True, None))


@kd.jit
def e4m3_scaled(a_ptr, sa_ptr, b_ptr, sb_ptr, c_ptr, M: kd.constexpr, N: kd.constexpr,
                K: kd.constexpr):
    a = kd.load(a_ptr + kd.arange(0, M)[:, None] * (K // 2) + kd.arange(0, K // 2)[None, :])
    b = kd.load(b_ptr + kd.arange(0, K)[:, None] * N + kd.arange(0, N)[None, :])
    rk = kd.arange(0, K // 16)[None, :]
    sa = kd.load(sa_ptr + kd.arange(0, M)[:, None] * (K // 16) + rk)
    sb = kd.load(sb_ptr + kd.arange(0, N)[:, None] * (K // 16) + rk)
    c = kd.dot_scaled(a, sa, "e2m1", b, sb, "bf16")
    kd.store(c_ptr + kd.arange(0, M)[:, None] * N + kd.arange(0, N)[None, :], c)


def test_fp8_scales_in_groups_of_16(backend):
    """float8e4nv scales (Triton's nvfp4 form) cover 16 elements each and are converted."""
    m, n, k = 8, 8, 32
    a = random_operand("e2m1", (m, k // 2))
    b = random_operand("bf16", (k, n), "float")
    sa = RNG.integers(0x30, 0x48, (m, k // 16), dtype=np.uint8)
    sb = RNG.integers(0x30, 0x48, (n, k // 16), dtype=np.uint8)
    sa[3, 1] = 0x7f  # NaN
    c = np.zeros((m, n), np.float32)
    e4m3_scaled[(1,)](a, sa.view(ml_dtypes.float8_e4m3fn), b, sb.view(ml_dtypes.float8_e4m3fn),
                      c, m, n, k, backend=backend)
    bf = ml_dtypes.bfloat16
    x = operand_values(a, "e2m1", False) * np.repeat(decode_minifloat(sa, 4, 3, False), 16, 1)
    y = operand_values(b, "bf16", False) * np.repeat(decode_minifloat(sb, 4, 3, False), 16, 1).T
    x, y = x.astype(bf).astype(np.float64), y.astype(bf).astype(np.float64)
    check(c, x @ y, np.abs(x) @ np.abs(y))
    assert np.isnan(c[3]).all()
