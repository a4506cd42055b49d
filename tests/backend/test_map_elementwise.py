"""`kd.map_elementwise` on every backend against NumPy: scalar functions that branch on an
element's value (selu, a piecewise function with early returns, nested ifs, returns in a
loop), tuple results, broadcasting of the arguments, memory accesses under a branch (masked
like the branch), helpers called from the scalar function, and `pack`."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd

RNG = np.random.default_rng(11)


@kd.jit
def selu_scalar(x, alpha):
    if x > 0:
        return x
    else:
        return alpha * (kd.exp(x) - 1)


@kd.jit
def selu_kernel(x_ptr, y_ptr, alpha, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    x = kd.load(x_ptr + offs, mask=m)
    kd.store(y_ptr + offs, kd.map_elementwise(selu_scalar, x, alpha), mask=m)


def test_selu(backend):
    n = 300
    x = (RNG.standard_normal(n) * 3).astype(np.float32)
    y = np.zeros_like(x)
    selu_kernel[(3,)](x, y, 1.6732, n, BLOCK=128, backend=backend)
    x64 = x.astype(np.float64)
    ref = np.where(x64 > 0, x64, np.float32(1.6732) * (np.exp(x64) - 1))
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)


@kd.jit
def piecewise(x, lo, hi):
    """Several branches, early returns, a variable changed in some branches, a Python
    constant on one path, and a call to a helper that branches too."""
    if x < lo:
        return 0.0, -1
    y = x * 2.0
    if x > hi:
        y = hi * 2.0
        k = 1
    elif x > 0:
        k = 2
        if y > hi:  # nested
            return clip_helper(x, hi), 3
    else:
        k = 0
    return y + 1.0, k


@kd.jit
def clip_helper(v, top):
    if v > top * 0.75:
        return top
    return v * 0.5


@kd.jit
def piecewise_kernel(x_ptr, lo_ptr, y_ptr, k_ptr, hi, BM: kd.constexpr, BN: kd.constexpr):
    rm = kd.arange(0, BM)[:, None]
    rn = kd.arange(0, BN)[None, :]
    x = kd.load(x_ptr + rm * BN + rn)
    lo = kd.load(lo_ptr + rm)  # [BM, 1]: broadcast against x's [BM, BN]
    y, k = kd.map_elementwise(piecewise, x, lo, hi)
    kd.store(y_ptr + rm * BN + rn, y)
    kd.store(k_ptr + rm * BN + rn, k)


def piecewise_ref(x, lo, hi):
    y = np.empty_like(x)
    k = np.empty(x.shape, np.int32)
    for i, (v, low) in enumerate(zip(x.flat, np.broadcast_to(lo, x.shape).flat)):
        if v < low:
            y.flat[i], k.flat[i] = 0.0, -1
        elif v > hi:
            y.flat[i], k.flat[i] = hi * 2 + 1, 1
        elif v > 0:
            if v * 2 > hi:
                y.flat[i], k.flat[i] = (hi if v > hi * 0.75 else v * 0.5), 3
            else:
                y.flat[i], k.flat[i] = v * 2 + 1, 2
        else:
            y.flat[i], k.flat[i] = v * 2 + 1, 0
    return y, k


def test_multi_branch_tuple_and_broadcast(backend):
    bm, bn = 8, 32
    x = RNG.uniform(-3, 3, (bm, bn)).astype(np.float32)
    lo = RNG.uniform(-2.5, 0, (bm, 1)).astype(np.float32)
    y = np.zeros_like(x)
    k = np.zeros(x.shape, np.int32)
    piecewise_kernel[(1,)](x, lo, y, k, 2.0, BM=bm, BN=bn, backend=backend)
    ry, rk = piecewise_ref(x.astype(np.float64), lo.astype(np.float64), 2.0)
    np.testing.assert_array_equal(k, rk)
    np.testing.assert_allclose(y, ry, rtol=1e-6)
    assert set(np.unique(k)) == {-1, 0, 1, 2, 3}  # every path was taken


@kd.jit
def first_multiple(x, step):
    """A runtime loop of uniform bounds with a per-element return and a carried scalar
    that becomes a tile (`total`)."""
    total = 0
    for i in range(1, 9):
        total += i
        if (x * i) % step == 0:
            return i, total
    return -1, total


@kd.jit
def loop_kernel(x_ptr, i_ptr, t_ptr, step, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    i, t = kd.map_elementwise(first_multiple, kd.load(x_ptr + offs), step)
    kd.store(i_ptr + offs, i)
    kd.store(t_ptr + offs, t)


def test_returns_from_a_loop(backend):
    x = RNG.integers(1, 40, 64).astype(np.int32)
    i = np.zeros_like(x)
    t = np.zeros_like(x)
    loop_kernel[(1,)](x, i, t, 12, BLOCK=64, backend=backend)
    ri, rt = [], []
    for v in x:
        hit = next((j for j in range(1, 9) if (v * j) % 12 == 0), -1)
        ri.append(hit)
        rt.append(sum(range(1, (hit if hit > 0 else 8) + 1)))
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_array_equal(t, rt)
    assert -1 in ri and 1 in ri


@kd.jit
def lookup(i, table, n):
    """A load that is only valid where the branch is taken: it is masked like the branch."""
    if i >= 0 and i < n:
        return kd.load(table + i)
    else:
        return -1.0


@kd.jit
def lookup_ternary(i, table, n):
    return kd.load(table + i) if (i >= 0) & (i < n) else -1.0


@kd.jit
def store_negatives(x, out, idx):
    if x < 0:
        kd.store(out + idx, x)  # only where the element is negative
        return 1
    return 0


@kd.jit
def memory_kernel(i_ptr, table, n, y_ptr, x_ptr, neg_ptr, cnt_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    i = kd.load(i_ptr + offs)
    y = kd.map_elementwise(lookup, i, table, n)
    kd.store(y_ptr + offs, y + kd.map_elementwise(lookup_ternary, i, table, n))
    c = kd.map_elementwise(store_negatives, kd.load(x_ptr + offs), neg_ptr, offs)
    kd.store(cnt_ptr, kd.sum(c))


def test_memory_accesses_follow_the_branch(backend):
    n = 16
    table = RNG.standard_normal(n).astype(np.float32)
    idx = RNG.integers(-1_000_000, 1_000_000, 64).astype(np.int32)
    idx[::3] = RNG.integers(0, n, len(idx[::3]))
    x = RNG.standard_normal(64).astype(np.float32)
    y = np.zeros(64, np.float32)
    neg = np.full(64, 7.0, np.float32)
    cnt = np.zeros(1, np.int32)
    memory_kernel[(1,)](idx, table, n, y, x, neg, cnt, BLOCK=64, backend=backend,
                        check=backend != "opencl")
    ok = (idx >= 0) & (idx < n)
    np.testing.assert_array_equal(y, 2 * np.where(ok, table[np.clip(idx, 0, n - 1)], -1.0))
    np.testing.assert_array_equal(neg, np.where(x < 0, x, 7.0))
    assert cnt[0] == (x < 0).sum()


@kd.jit
def swap_pairs(a0, a1, b0, b1):
    """pack=2: two consecutive elements of each argument, two values of each result."""
    return a1 + b0 * 0, a0 + b1 * 0, a0 * 10 + a1, a0 * 10 + a1


@kd.jit
def pack_kernel(a_ptr, b_ptr, s_ptr, t_ptr, BM: kd.constexpr, BN: kd.constexpr):
    r = kd.arange(0, BM)[:, None] * BN + kd.arange(0, BN)[None, :]
    s, t = kd.map_elementwise(swap_pairs, kd.load(a_ptr + r), kd.load(b_ptr + r), pack=2)
    kd.store(s_ptr + r, s)
    kd.store(t_ptr + r, t)


def test_pack_groups_consecutive_elements(backend):
    a = np.arange(32, dtype=np.int32).reshape(4, 8)
    b = np.zeros_like(a)
    s, t = np.zeros_like(a), np.zeros_like(a)
    pack_kernel[(1,)](a, b, s, t, BM=4, BN=8, backend=backend)
    flat = a.ravel()
    np.testing.assert_array_equal(s.ravel(), flat.reshape(-1, 2)[:, ::-1].ravel())
    pairs = flat[0::2] * 10 + flat[1::2]
    np.testing.assert_array_equal(t.ravel(), np.repeat(pairs, 2))


@kd.jit
def sign_and_abs(x):
    if x < 0:
        s = -1
    elif x == 0:
        s = 0
    else:
        s = 1
    return s, kd.abs(x)


@kd.jit
def scalar_kernel(x, out_ptr, BLOCK: kd.constexpr):
    # a runtime scalar argument: the results are scalars too (and a builtin as scalar_fn)
    s, a = kd.map_elementwise(sign_and_abs, x)
    e = kd.map_elementwise(kd.exp, kd.zeros((BLOCK,), kd.float32) + x)
    kd.store(out_ptr + kd.arange(0, BLOCK), s.to(kd.float32) * 100 + a + e)


@pytest.mark.parametrize("v", [-2.5, 0.0, 3.0])
def test_scalar_arguments_and_builtin_functions(backend, v):
    out = np.zeros(8, np.float32)
    scalar_kernel[(1,)](v, out, BLOCK=8, backend=backend)
    np.testing.assert_allclose(out, np.sign(v) * 100 + abs(v) + np.exp(v), rtol=1e-6)


@kd.jit
def checked_sqrt(x):
    if x >= 0:
        assert x >= 0 and x < 100, "too big"  # checked only where x >= 0
        return kd.sqrt(x)
    return -1.0


@kd.jit
def assert_kernel(x_ptr, y_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    kd.store(y_ptr + offs, kd.map_elementwise(checked_sqrt, kd.load(x_ptr + offs)))


def test_assertions_follow_the_branch(backend):
    x = np.linspace(-500, 99, 32).astype(np.float32)
    y = np.zeros_like(x)
    assert_kernel[(1,)](x, y, BLOCK=32, backend=backend, debug=True)
    np.testing.assert_allclose(y, np.where(x >= 0, np.sqrt(np.maximum(x, 0)), -1), rtol=1e-6)
    x[7] = 300.0
    with pytest.raises(kd.DeviceAssertionError, match="too big"):
        assert_kernel[(1,)](x, y, BLOCK=32, backend=backend, debug=True)
