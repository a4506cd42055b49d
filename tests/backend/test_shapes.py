"""Shape builtins that move elements (split, join, interleave, cat, flip, ravel, gather,
histogram), sort/topk/bitonic_merge and swizzle2d on every backend, against NumPy.  On OpenCL
and CUDA a tile is spread over many threads, so every rearrangement here crosses threads."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd

RNG = np.random.default_rng(42)


def values(shape, dtype, lo=-50, hi=50):
    if np.dtype(dtype).kind == "f":
        return RNG.standard_normal(shape).astype(dtype)
    return RNG.integers(lo, hi, shape).astype(dtype)


# ------------------------------------------------------------ split / join / interleave


@kd.jit
def split_join_kernel(x_ptr, o_ptr, s_ptr, M: kd.constexpr, N: kd.constexpr):
    rm = kd.arange(0, M)
    rh = kd.arange(0, N // 2)
    rn = kd.arange(0, N)
    x = kd.load(x_ptr + rm[:, None] * N + rn[None, :])
    a, b = kd.split(kd.reshape(x, (M, N // 2, 2)))           # even and odd columns
    half = rm[:, None] * (N // 2) + rh[None, :]
    kd.store(o_ptr + half, a)
    kd.store(o_ptr + M * N // 2 + half, b)
    full = rm[:, None] * N + rn[None, :]
    kd.store(o_ptr + M * N + full, kd.interleave(b, a))       # columns pairwise swapped
    j = kd.join(a, b)                                         # [M, N/2, 2]: x again
    kd.store(o_ptr + 2 * M * N + full, kd.reshape(j, (M, N)))
    c, d = j.split()                                          # the method spelling
    kd.store(o_ptr + 3 * M * N + half, c - d)
    # two scalars join into a tile of 2, which splits into two scalars
    p, q = kd.split(kd.join(kd.load(s_ptr), kd.load(s_ptr + 1)))
    kd.store(s_ptr + 2, q)
    kd.store(s_ptr + 3, p)
    kd.store(s_ptr + 4 + kd.arange(0, 2), kd.interleave(kd.load(s_ptr + 1), 7))
    kd.store(s_ptr + 6, kd.reshape(kd.load(s_ptr + 1 + kd.arange(0, 1)), ()) * 2)  # a scalar


@pytest.mark.parametrize("dtype, M, N", [(np.float32, 4, 16), (np.int32, 8, 32),
                                         (np.int8, 3, 6)])
def test_split_join_interleave(backend, dtype, M, N):
    x = values((M, N), dtype)
    o = np.zeros(4 * M * N, dtype)
    s = np.array([3, -5, 0, 0, 0, 0, 0], dtype)
    split_join_kernel[(1,)](x, o, s, M=M, N=N, backend=backend)
    a, b = x[:, 0::2], x[:, 1::2]
    np.testing.assert_array_equal(o[:M * N // 2].reshape(a.shape), a)
    np.testing.assert_array_equal(o[M * N // 2:M * N].reshape(b.shape), b)
    swapped = np.stack([b, a], -1).reshape(M, N)
    np.testing.assert_array_equal(o[M * N:2 * M * N].reshape(M, N), swapped)
    np.testing.assert_array_equal(o[2 * M * N:3 * M * N].reshape(M, N), x)
    np.testing.assert_array_equal(o[3 * M * N:3 * M * N + M * N // 2].reshape(a.shape),
                                  (a - b).astype(dtype))
    np.testing.assert_array_equal(s, np.array([3, -5, -5, 3, -5, 7, -10], dtype))


# ------------------------------------------------------------------ cat / flip / ravel


@kd.jit
def cat_flip_kernel(x_ptr, y_ptr, o_ptr, A: kd.constexpr, B: kd.constexpr,
                    C: kd.constexpr):
    ra = kd.arange(0, A)
    rb = kd.arange(0, B)
    rc = kd.arange(0, C)
    offs = ra[:, None, None] * (B * C) + rb[None, :, None] * C + rc[None, None, :]
    x = kd.load(x_ptr + offs)
    y = kd.load(y_ptr + offs)
    n = A * B * C
    kd.store(o_ptr + offs, kd.flip(x, 0))
    kd.store(o_ptr + n + offs, kd.flip(x, 1))
    kd.store(o_ptr + 2 * n + offs, x.flip())                  # the last dim
    kd.store(o_ptr + 3 * n + offs, kd.flip(x, -2))
    kd.store(o_ptr + 4 * n + kd.arange(0, n), kd.ravel(x) + kd.ravel(y, can_reorder=True))
    kd.store(o_ptr + 5 * n + kd.arange(0, n), x.ravel().flip())
    c = kd.cat(x, y, can_reorder=True)                        # [2A, B, C]: x then y
    r2 = kd.arange(0, 2 * A)
    kd.store(o_ptr + 6 * n + r2[:, None, None] * (B * C) + rb[None, :, None] * C
             + rc[None, None, :], c)
    kd.store(o_ptr + 8 * n + kd.arange(0, 2 * n), kd.cat(kd.ravel(y), kd.ravel(x)))


@pytest.mark.parametrize("dtype, shape", [(np.float32, (2, 4, 8)), (np.int64, (4, 2, 16)),
                                          (np.uint8, (3, 5, 4)), (np.float16, (1, 8, 2))])
def test_cat_flip_ravel(backend, dtype, shape):
    x, y = values(shape, dtype, 0, 100), values(shape, dtype, 0, 100)
    n = x.size
    o = np.zeros(10 * n, dtype)
    cat_flip_kernel[(1,)](x, y, o, A=shape[0], B=shape[1], C=shape[2], backend=backend)
    parts = [x[::-1], x[:, ::-1], x[:, :, ::-1], x[:, ::-1]]
    for i, want in enumerate(parts):
        np.testing.assert_array_equal(o[i * n:(i + 1) * n].reshape(shape), want, f"flip {i}")
    np.testing.assert_array_equal(o[4 * n:5 * n], (x + y).ravel())
    np.testing.assert_array_equal(o[5 * n:6 * n], x.ravel()[::-1])
    np.testing.assert_array_equal(o[6 * n:8 * n].reshape((2 * shape[0],) + shape[1:]),
                                  np.concatenate([x, y]))
    np.testing.assert_array_equal(o[8 * n:], np.concatenate([y.ravel(), x.ravel()]))


# --------------------------------------------------------------------------- gather


@kd.jit
def gather_kernel(src_ptr, idx_ptr, o_ptr, M: kd.constexpr, N: kd.constexpr,
                  K: kd.constexpr, AXIS: kd.constexpr):
    rm = kd.arange(0, M)
    rn = kd.arange(0, N)
    src = kd.load(src_ptr + rm[:, None] * N + rn[None, :])
    if AXIS == 0:
        rk = kd.arange(0, K)
        offs = rk[:, None] * N + rn[None, :]
    else:
        rk = kd.arange(0, K)
        offs = rm[:, None] * K + rk[None, :]
    idx = kd.load(idx_ptr + offs)
    kd.store(o_ptr + offs, kd.gather(src, idx, AXIS))
    # a gather from a transpose (read through it) and the method spelling
    kd.store(o_ptr + M * N * 4 + rn[:, None] * M + rm[None, :],
             kd.trans(src).gather(kd.flip(kd.arange(0, M))[None, :] + 0 * rn[:, None], 1))


@pytest.mark.parametrize("dtype, idx_dtype, M, N, K, axis", [
    (np.float32, np.int32, 8, 16, 16, 1),
    (np.float32, np.int64, 8, 16, 5, 1),
    (np.int32, np.uint8, 16, 8, 3, 0),
    (np.int16, np.int32, 4, 32, 4, 0),
])
def test_gather(backend, dtype, idx_dtype, M, N, K, axis):
    src = values((M, N), dtype)
    ishape = (M, K) if axis == 1 else (K, N)
    n = src.shape[axis]
    lo = 0 if np.dtype(idx_dtype).kind == "u" else -3
    idx = RNG.integers(lo, n + 3, ishape).astype(idx_dtype)  # some out of range: clamped
    o = np.zeros(M * N * 5, dtype)
    gather_kernel[(1,)](src, idx, o, M=M, N=N, K=K, AXIS=axis, backend=backend)
    want = np.take_along_axis(src, np.clip(idx.astype(np.int64), 0, n - 1), axis)
    np.testing.assert_array_equal(o[:idx.size].reshape(ishape), want)
    np.testing.assert_array_equal(o[M * N * 4:M * N * 5].reshape(N, M), src.T[:, ::-1])


# ------------------------------------------------------------------------ histogram


@kd.jit
def histogram_kernel(x_ptr, h_ptr, n, BLOCK: kd.constexpr, BINS: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    x = kd.load(x_ptr + offs, mask=m, other=0)
    h = kd.histogram(x, BINS, mask=m)
    kd.atomic_add(h_ptr + kd.arange(0, BINS), h)
    kd.atomic_add(h_ptr + BINS + kd.arange(0, BINS), x.histogram(BINS))  # no mask


@pytest.mark.parametrize("dtype, bins, block", [(np.int32, 16, 64), (np.int64, 10, 128),
                                                (np.uint8, 300, 32), (np.int8, 4, 256)])
def test_histogram_with_mask(backend, dtype, bins, block):
    n = 300
    info = np.iinfo(dtype)
    x = RNG.integers(max(info.min, -5), min(info.max, bins + 5), n).astype(dtype)
    h = np.zeros(2 * bins, np.int32)
    grid = -(-n // block)
    histogram_kernel[(grid,)](x, h, n, BLOCK=block, BINS=bins, backend=backend)
    ok = x[(x >= 0) & (x < bins)].astype(np.int64)
    np.testing.assert_array_equal(h[:bins], np.bincount(ok, minlength=bins))
    pad = grid * block - n  # masked-off lanes hold 0: counted by the unmasked histogram
    want = np.bincount(ok, minlength=bins)
    want[0] += pad
    np.testing.assert_array_equal(h[bins:], want)


# --------------------------------------------------------------------- sort and topk


@kd.jit
def sort_kernel(x_ptr, o_ptr, M: kd.constexpr, N: kd.constexpr, K: kd.constexpr):
    rm = kd.arange(0, M)
    rn = kd.arange(0, N)
    rk = kd.arange(0, K)
    x = kd.load(x_ptr + rm[:, None] * N + rn[None, :])
    full = rm[:, None] * N + rn[None, :]
    kd.store(o_ptr + full, kd.sort(x))
    kd.store(o_ptr + M * N + full, kd.sort(x, dim=1, descending=True))
    kd.store(o_ptr + 2 * M * N + full, x.sort(descending=1))
    kd.store(o_ptr + 3 * M * N + rm[:, None] * K + rk[None, :], kd.topk(x, K))
    # an ascending half then a descending half is bitonic: one merge sorts it
    s = kd.sort(kd.reshape(x, (M, 2, N // 2)))
    first = kd.arange(0, 2)[None, :, None] == 0
    bit = kd.reshape(kd.where(first, s, kd.flip(s, 2)), (M, N))
    kd.store(o_ptr + 4 * M * N + full, kd.bitonic_merge(bit, descending=True))


@pytest.mark.parametrize("dtype, M, N, K", [(np.float32, 4, 16, 4), (np.int32, 2, 64, 8),
                                            (np.float32, 1, 256, 1), (np.int8, 8, 8, 8)])
def test_sort_topk_bitonic_merge(backend, dtype, M, N, K):
    x = values((M, N), dtype, -10, 10)  # ints: many duplicates
    if dtype == np.float32:
        x[:, ::4] = x[:, 1::4]  # duplicates among floats too
    o = np.zeros(5 * M * N, dtype)
    sort_kernel[(1,)](x, o, M=M, N=N, K=K, backend=backend)
    asc = np.sort(x, axis=1)
    desc = asc[:, ::-1]
    np.testing.assert_array_equal(o[:M * N].reshape(M, N), asc)
    np.testing.assert_array_equal(o[M * N:2 * M * N].reshape(M, N), desc)
    np.testing.assert_array_equal(o[2 * M * N:3 * M * N].reshape(M, N), desc)
    np.testing.assert_array_equal(o[3 * M * N:3 * M * N + M * K].reshape(M, K), desc[:, :K])
    halves = np.sort(x.reshape(M, 2, N // 2), axis=2)
    bitonic = np.concatenate([halves[:, 0], halves[:, 1, ::-1]], axis=1)
    np.testing.assert_array_equal(o[4 * M * N:].reshape(M, N), np.sort(bitonic, 1)[:, ::-1])


def bitonic_reference(x, descending=False):
    """Triton's bitonic sort network along the last dim, in NumPy: at stage s, the
    compare-and-swaps at distances 2**(s-1) .. 1 of element c and c ^ 2**j keep, where
    `(x > partner) != (down ^ upper)`, the partner (upper: bit j of c; down: bit s of c, or
    the order at the last stage)."""
    n = x.shape[-1]
    log_n = n.bit_length() - 1
    h = x.reshape(-1, n).copy()
    cols = np.arange(n)
    for s in range(1, log_n + 1):
        down = (cols >> s) & 1 if s < log_n else np.full(n, int(descending))
        for j in reversed(range(s)):
            partner = h[:, cols ^ (1 << j)]
            upper = (cols >> j) & 1
            h = np.where((h > partner) != (down ^ upper).astype(bool), partner, h)
    return h.reshape(x.shape)


@kd.jit
def sort_bits_kernel(x_ptr, o_ptr, M: kd.constexpr, N: kd.constexpr):
    offs = kd.arange(0, M)[:, None] * N + kd.arange(0, N)[None, :]
    x = kd.load(x_ptr + offs)
    kd.store(o_ptr + offs, kd.sort(x))
    kd.store(o_ptr + M * N + offs, kd.sort(x, descending=True))


@pytest.mark.parametrize("M, N", [(4, 16), (1, 512)])
def test_sort_places_signed_zeros_as_triton(backend, M, N):
    x = RNG.integers(-2, 3, (M, N)).astype(np.float32)
    x[RNG.random((M, N)) < 0.5] *= -1.0  # -0.0 and 0.0, and equal values, all over
    o = np.zeros(2 * M * N, np.float32)
    sort_bits_kernel[(1,)](x, o, M=M, N=N, backend=backend)
    for i, desc in enumerate((False, True)):
        want = bitonic_reference(x, desc)
        np.testing.assert_array_equal(want, np.sort(x, 1)[:, ::-1] if desc else np.sort(x, 1))
        got = o[i * M * N:(i + 1) * M * N].reshape(M, N)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@kd.jit
def sort1024_kernel(x_ptr, o_ptr, N: kd.constexpr):
    offs = kd.arange(0, N)
    x = kd.load(x_ptr + offs)
    kd.store(o_ptr + offs, kd.sort(x))
    kd.store(o_ptr + N + kd.arange(0, 16), kd.topk(x, 16))


def test_sort_1024(backend):
    x = RNG.standard_normal(1024).astype(np.float32)
    x[::7] = 0.0
    x[1::7] = -0.0
    o = np.zeros(1024 + 16, np.float32)
    sort1024_kernel[(1,)](x, o, N=1024, backend=backend)
    np.testing.assert_array_equal(o[:1024], np.sort(x))
    np.testing.assert_array_equal(o[1024:], np.sort(x)[::-1][:16])


# ------------------------------------------------------------------------ swizzle2d


@kd.jit
def swizzle_kernel(o_ptr, SI: kd.constexpr, SJ: kd.constexpr, SG: kd.constexpr):
    i = kd.arange(0, SI)[:, None] + kd.zeros((SI, SJ), kd.int32)
    j = kd.arange(0, SJ)[None, :] + kd.zeros((SI, SJ), kd.int32)
    ni, nj = kd.swizzle2d(i, j, SI, SJ, SG)
    offs = kd.arange(0, SI)[:, None] * SJ + kd.arange(0, SJ)[None, :]
    kd.store(o_ptr + offs, ni * SJ + nj)
    # scalars, the usual use: program ids
    si, sj = kd.swizzle2d(kd.program_id(0), 1, SI, SJ, SG)
    kd.store(o_ptr + SI * SJ, si * SJ + sj)


def swizzle_ref(si, sj, sg):
    """New (row, col) of each (i, j): within each group of `sg` rows (the last may be
    shorter), the group's elements in row-major order are laid out column by column."""
    out = np.zeros((si, sj), np.int64)
    for g0 in range(0, si, sg):
        rows = min(sg, si - g0)
        for k in range(rows * sj):
            i, j = g0 + k // sj, k % sj
            out[i, j] = (g0 + k % rows) * sj + k // rows
    return out


@pytest.mark.parametrize("si, sj, sg", [(4, 4, 2), (6, 5, 4), (8, 3, 3)])
def test_swizzle2d(backend, si, sj, sg):
    o = np.zeros(si * sj + 1, np.int32)
    swizzle_kernel[(3,)](o, SI=si, SJ=sj, SG=sg, backend=backend)
    want = swizzle_ref(si, sj, sg)
    np.testing.assert_array_equal(o[:-1].reshape(si, sj), want)
    assert o[-1] == want[2, 1]  # every program stores the same element: program 2 or another
    if si == sj == 4:  # Triton's documented example: where each old index lands
        landed = np.zeros(16, np.int64)
        landed[want.ravel()] = np.arange(16)
        np.testing.assert_array_equal(landed.reshape(4, 4), [[0, 2, 4, 6], [1, 3, 5, 7],
                                                             [8, 10, 12, 14], [9, 11, 13, 15]])


# --------------------------------------------------------------------------- errors


def _kernel(body: str):
    src = ("import kdsl as kd\n\n@kd.jit\ndef bad(x_ptr, o_ptr):\n"
           "    x = kd.load(x_ptr + kd.arange(0, 8)[:, None] * 8 + kd.arange(0, 8)[None, :])\n"
           f"    r = {body}\n")
    import linecache
    import types
    name = f"<bad {body}>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    mod = types.ModuleType("bad_kernels")
    exec(compile(src, name, "exec"), mod.__dict__)  # noqa: S102  (a kernel per error case)
    return mod.bad


@pytest.mark.parametrize("body, msg", [
    ("kd.split(x)", "last dim of size 2"),
    ("kd.gather(x, kd.arange(0, 8), 0)", "rank"),
    ("kd.gather(x, kd.zeros((4, 4), kd.int32), 0)", "differ in dim 1"),
    ("kd.gather(x, x, 1)", "integer"),
    ("kd.histogram(x, 4)", "1-D"),
    ("kd.histogram(kd.ravel(x), 4)", "integer values"),
    ("kd.sort(kd.reshape(x, (4, 16))[:, None, :] + kd.zeros((4, 3, 16), kd.float32), 1)",
     "last dim only"),
    ("kd.sort(x, dim=0)", "last dim only"),
    ("kd.topk(x, 3)", "power of two"),
    ("kd.topk(x, 16)", "exceeds"),
    ("kd.flip(x, 2)", "out of range"),
    ("kd.cat(x, kd.ravel(x))", "same shape"),
    ("kd.join(x_ptr, x_ptr)", "pointers"),
    ("kd.sort(x, descending=kd.program_id(0) > 0)", "compile-time bool"),
])
def test_errors_name_the_kernel_line(body, msg):
    k = _kernel(body)
    x = np.zeros(64, np.float32)
    with pytest.raises(kd.CompilationError, match=msg) as e:
        k[(1,)](x, x, backend="interp")
    assert body in str(e.value)
