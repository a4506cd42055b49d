"""The lowering of `slice`, `gather`, `histogram` and one-element `reshape` to a scalar,
simulated at 1, 4 and 8 threads per program against NumPy and the Tile IR interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd
from kdsl.frontend import build_function
from kdsl.ir import interp, loop
from kdsl.ir.loop_interp import run_kernel
from kdsl.ir.types import PointerType, float32, int32, int64, scalar, uint8
from kdsl.passes import run_tile_passes
from kdsl.lowering import lower
from kdsl.target import Target

THREADS = (1, 4, 8)


def P(dt):
    return scalar(PointerType(dt))


def compile_fn(pyfn, types, constexprs):
    fn, _ = run_tile_passes(build_function(pyfn, types, constexprs))
    return fn


def run_everywhere(fn, grid, make_args, threads=THREADS):
    """[interp args, args for each T] after running `fn` on fresh `make_args()`."""
    ref = make_args()
    interp.run(fn, grid, ref)
    outs = [ref]
    for t in threads:
        args = make_args()
        run_kernel(lower(fn, Target("test", threads=t)), grid, args)
        outs.append(args)
    return outs


def walk(stmts):
    for s in stmts:
        yield s
        for attr in ("body", "then", "orelse", "cond_body"):
            yield from walk(getattr(s, attr, []) or [])


def flips(x_ptr, o_ptr, M: kd.constexpr, N: kd.constexpr):
    rm = kd.arange(0, M)
    rn = kd.arange(0, N)
    offs = rm[:, None] * N + rn[None, :]
    x = kd.load(x_ptr + offs)
    kd.store(o_ptr + offs, kd.flip(x, 0) * 10 + kd.flip(x, 1))
    a, b = kd.split(kd.reshape(x, (M, N // 2, 2)))
    kd.store(o_ptr + M * N + offs, kd.interleave(b, a))
    kd.store(o_ptr + 2 * M * N + kd.arange(0, 2 * M * N), kd.cat(kd.ravel(x), kd.ravel(x).flip()))
    kd.store(o_ptr + 4 * M * N + offs, kd.flip(kd.flip(x, 1), 1) + kd.flip(rn[None, :], 1))


@pytest.mark.parametrize("M, N", [(3, 4), (4, 8)])
def test_static_gathers(M, N):
    fn = compile_fn(flips, {"x_ptr": P(float32), "o_ptr": P(float32)}, {"M": M, "N": N})
    x = np.random.default_rng(0).integers(0, 9, (M, N)).astype(np.float32)
    outs = run_everywhere(fn, (1,), lambda: [x.ravel().copy(), np.zeros(5 * M * N, np.float32)])
    want = np.concatenate([
        (x[::-1] * 10 + x[:, ::-1]).ravel(),
        np.stack([x[:, 1::2], x[:, 0::2]], -1).ravel(),
        x.ravel(), x.ravel()[::-1],
        (x + np.arange(N)[::-1]).ravel()])
    for args in outs:
        np.testing.assert_array_equal(args[1], want)
    # flip(flip(x)) composes to nothing and the flip of an index is an index again
    k1 = lower(fn, Target("cpu", threads=1))
    assert not any(a.space == "shared" for a in k1.arrays)


def gathers(s_ptr, i_ptr, o_ptr, M: kd.constexpr, N: kd.constexpr, K: kd.constexpr):
    rm = kd.arange(0, M)
    rn = kd.arange(0, N)
    rk = kd.arange(0, K)
    src = kd.load(s_ptr + rm[:, None] * N + rn[None, :])
    idx = kd.load(i_ptr + rm[:, None] * K + rk[None, :])
    kd.store(o_ptr + rm[:, None] * K + rk[None, :], kd.gather(src, idx, 1))
    # through a transpose: read from src's storage with permuted coordinates
    idx0 = kd.load(i_ptr + rk[:, None] * M + rm[None, :])
    t = kd.gather(kd.trans(src), idx0 % N, 0)  # [K, M]
    kd.store(o_ptr + M * K + rk[:, None] * M + rm[None, :], t)
    # a gather from index math (rematerialised, never stored)
    ramp = (rm[:, None] * 100 + rn[None, :]).to(kd.float32)
    kd.store(o_ptr + 2 * M * K + rm[:, None] * K + rk[None, :], kd.gather(ramp, idx, 1))


@pytest.mark.parametrize("idx_dt", [int32, int64, uint8])
def test_gather(idx_dt):
    M, N, K = 4, 8, 5
    fn = compile_fn(gathers, {"s_ptr": P(float32), "i_ptr": P(idx_dt), "o_ptr": P(float32)},
                    {"M": M, "N": N, "K": K})
    rng = np.random.default_rng(1)
    src = rng.standard_normal((M, N)).astype(np.float32)
    lo = 0 if idx_dt == uint8 else -2
    idx = rng.integers(lo, N + 2, M * K).astype(idx_dt.np)
    outs = run_everywhere(fn, (1,), lambda: [src.ravel(), idx.copy(),
                                              np.zeros(3 * M * K, np.float32)])
    i2 = np.clip(idx.astype(np.int64), 0, N - 1).reshape(M, K)
    ramp = (np.arange(M)[:, None] * 100 + np.arange(N)[None, :]).astype(np.float32)
    for args in outs:
        o = args[2]
        np.testing.assert_array_equal(o[:M * K].reshape(M, K), np.take_along_axis(src, i2, 1))
        # C remainder: a negative index stays negative and is clamped to 0
        c0 = np.clip(np.fmod(idx.astype(np.int64).reshape(K, M), N), 0, N - 1)
        np.testing.assert_array_equal(o[M * K:2 * M * K].reshape(K, M),
                                      np.take_along_axis(src.T, c0, 0))
        np.testing.assert_array_equal(o[2 * M * K:].reshape(M, K), np.take_along_axis(ramp, i2, 1))
    k4 = lower(fn, Target("gpu", threads=4))
    staged = [s for s in walk(k4.body) if isinstance(s, loop.ArrayStore)
              and s.array.space == "shared"]
    # src once for both gathers (its transpose is never materialised), then the index math
    assert len(staged) == 2


def hist(x_ptr, h_ptr, n, BLOCK: kd.constexpr, BINS: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    x = kd.load(x_ptr + offs, mask=m, other=-1)
    kd.store(h_ptr + kd.program_id(0) * BINS + kd.arange(0, BINS), kd.histogram(x, BINS, m))


@pytest.mark.parametrize("dt, bins", [(int32, 6), (int64, 8), (uint8, 300)])
def test_histogram(dt, bins):
    BLOCK, n = 16, 37
    fn = compile_fn(hist, {"x_ptr": P(dt), "h_ptr": P(int32), "n": scalar(int32)},
                    {"BLOCK": BLOCK, "BINS": bins})
    x = np.random.default_rng(2).integers(0, bins + 3, n).astype(dt.np)
    grid = (-(-n // BLOCK),)
    outs = run_everywhere(fn, grid, lambda: [x, np.zeros(grid[0] * bins, np.int32), n])
    for args in outs:
        h = args[1].reshape(grid[0], bins)
        for p in range(grid[0]):
            part = x[p * BLOCK:(p + 1) * BLOCK].astype(np.int64)
            np.testing.assert_array_equal(h[p], np.bincount(part[part < bins], minlength=bins))
    for t in (1, 8):  # one loop over the input per bin: no BLOCK x BINS intermediate
        k = lower(fn, Target("t", threads=t))
        assert max(a.size * (t if a.space == "reg" else 1) for a in k.arrays) < BLOCK * bins


def unsplat(x_ptr, o_ptr):
    x = kd.load(x_ptr + kd.arange(0, 2))
    a, b = kd.split(x * 2.0)  # a [2] tile splits into two scalars
    c, d = kd.split(kd.arange(0, 2).to(kd.float32) + 5.0)  # index math: recomputed
    kd.store(o_ptr, a - b)
    kd.store(o_ptr + 1, c * d)
    kd.store(o_ptr + 2 + kd.arange(0, 4), kd.zeros((4,), kd.float32) + a)


def test_one_element_tile_to_scalar():
    fn = compile_fn(unsplat, {"x_ptr": P(float32), "o_ptr": P(float32)}, {})
    x = np.array([3.0, 0.5], np.float32)
    for args in run_everywhere(fn, (1,), lambda: [x, np.zeros(6, np.float32)]):
        np.testing.assert_array_equal(args[1], [5.0, 30.0, 6.0, 6.0, 6.0, 6.0])
    k = lower(fn, Target("t", threads=8))
    assert sum(isinstance(s, loop.Barrier) for s in walk(k.body)) == 2  # one staging of x * 2
