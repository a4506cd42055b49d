"""What the lowering computes, checked by running its Loop IR in the simulator against NumPy
and float64 references (never against its own text): the rules a string comparison cannot
see, each with inputs where breaking the rule changes the result.

- float16/bfloat16 arithmetic rounds after every op (a chain of two ops, where one rounding
  at the end gives other bits);
- integer division and remainder truncate toward zero, x / 0 == x % 0 == 0, shifts mask their
  amount, integers wrap;
- subtraction, division and comparisons are not commutative (operand order);
- reductions, scans and broadcasts cross threads correctly for 1, 4 and 8 threads.
"""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd
from kdsl.frontend import build_function
from kdsl.ir import interp
from kdsl.ir.float_bits import round_bf16
from kdsl.ir.loop_interp import run_kernel
from kdsl.ir.types import PointerType, bfloat16, float16, float32, int8, int32, scalar
from kdsl.lowering import lower
from kdsl.passes import run_tile_passes
from kdsl.target import Target

THREADS = (1, 4, 8)
RNG = np.random.default_rng(11)


def P(dt):
    return scalar(PointerType(dt))


def lowered(pyfn, types, **constexprs):
    fn, _ = run_tile_passes(build_function(pyfn.fn, types, constexprs))
    return fn


def simulate(fn, grid, make_args, threads=THREADS):
    """{T: args after the lowered kernel ran} and the interpreter's args."""
    ref = make_args()
    interp.run(fn, grid, ref)
    out = {}
    for t in threads:
        args = make_args()
        run_kernel(lower(fn, Target("sim", threads=t)), grid, args)
        out[t] = args
    return ref, out


@kd.jit
def half_chain(x_ptr, y_ptr, z_ptr, o_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    x, y, z = kd.load(x_ptr + offs), kd.load(y_ptr + offs), kd.load(z_ptr + offs)
    kd.store(o_ptr + offs, x * y + z)
    kd.store(o_ptr + BLOCK + offs, (x - z) / y)


@pytest.mark.parametrize("half", [float16, bfloat16])
def test_16_bit_floats_round_after_every_op(half):
    n = 256
    vals = RNG.uniform(-4, 4, (3, n)).astype(np.float32)
    if half == float16:
        x, y, z = (v.astype(np.float16) for v in vals)
        want = np.concatenate([x * y + z, (x - z) / y]).astype(np.float16).view(np.uint16)
        store = np.float16
    else:
        x, y, z = (round_bf16(v) for v in vals)
        r = round_bf16
        want_f = np.concatenate([r(r(x * y) + z), r(r(x - z) / y)])
        want = (want_f.view(np.uint32) >> 16).astype(np.uint16)
        x, y, z = ((v.view(np.uint32) >> 16).astype(np.uint16) for v in (x, y, z))
        store = np.uint16
    once = None
    if half == float16:  # the same chain rounded only at the end differs somewhere
        xf, yf, zf = (v.astype(np.float32) for v in (x, y, z))
        once = np.concatenate([xf * yf + zf, (xf - zf) / yf]).astype(np.float16).view(np.uint16)
        assert (once != want).any()
    fn = lowered(half_chain, {"x_ptr": P(half), "y_ptr": P(half), "z_ptr": P(half),
                              "o_ptr": P(half)}, BLOCK=n)
    ref, outs = simulate(fn, (1,), lambda: [x.copy(), y.copy(), z.copy(),
                                            np.zeros(2 * n, store)])
    for t, args in [("interp", ref), *outs.items()]:
        np.testing.assert_array_equal(args[3].view(np.uint16), want, err_msg=f"T={t}")


@kd.jit
def int_rules(a_ptr, b_ptr, o_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    a, b = kd.load(a_ptr + offs), kd.load(b_ptr + offs)
    kd.store(o_ptr + offs, a // b)
    kd.store(o_ptr + BLOCK + offs, a % b)
    kd.store(o_ptr + 2 * BLOCK + offs, a - b)
    kd.store(o_ptr + 3 * BLOCK + offs, a << (b & 7))
    kd.store(o_ptr + 4 * BLOCK + offs, (a < b).to(kd.int8) * 2 + (a >= b).to(kd.int8))


def test_integer_rules():
    n = 64
    a = RNG.integers(-128, 128, n).astype(np.int8)
    b = RNG.integers(-9, 9, n).astype(np.int8)
    b[:4] = 0
    a[4], b[4] = -128, -1  # wraps
    fn = lowered(int_rules, {"a_ptr": P(int8), "b_ptr": P(int8), "o_ptr": P(int8)}, BLOCK=n)
    ref, outs = simulate(fn, (1,), lambda: [a, b, np.zeros(5 * n, np.int8)])
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    safe = np.where(b64 == 0, 1, b64)
    q = np.where(b64 == 0, 0, np.trunc(a64 / safe)).astype(np.int64)
    r = np.where(b64 == 0, 0, a64 - q * safe)
    want = np.concatenate([q, r, a64 - b64, a64 << (b64 & 7),
                           (a64 < b64) * 2 + (a64 >= b64)])
    want = ((want + 128) % 256 - 128).astype(np.int8)
    for t, args in [("interp", ref), *outs.items()]:
        np.testing.assert_array_equal(args[2], want, err_msg=f"T={t}")


@kd.jit
def cross_threads(x_ptr, o_ptr, M: kd.constexpr, N: kd.constexpr):
    rm, rn = kd.arange(0, M), kd.arange(0, N)
    x = kd.load(x_ptr + rm[:, None] * N + rn[None, :])
    row_max = kd.max(x, axis=1)
    e = x - row_max[:, None]  # a broadcast of loaded data, subtracted (not commutative)
    kd.store(o_ptr + rm[:, None] * N + rn[None, :], e / kd.sum(e, axis=1)[:, None])
    kd.store(o_ptr + M * N + rn, kd.cumsum(kd.min(x, axis=0), axis=0))
    kd.store(o_ptr + M * N + N + rn[:, None] * M + rm[None, :], kd.trans(x))


def test_reductions_scans_and_broadcasts_cross_threads():
    M, N = 4, 8
    x = RNG.standard_normal((M, N)).astype(np.float32)
    fn = lowered(cross_threads, {"x_ptr": P(float32), "o_ptr": P(float32)}, M=M, N=N)
    ref, outs = simulate(fn, (1,), lambda: [x.reshape(-1), np.zeros(2 * M * N + N, np.float32)])
    x64 = x.astype(np.float64)
    e = x64 - x64.max(axis=1, keepdims=True)
    want = np.concatenate([(e / e.sum(axis=1, keepdims=True)).reshape(-1),
                           np.cumsum(x64.min(axis=0)), x64.T.reshape(-1)])
    for t, args in [("interp", ref), *outs.items()]:
        np.testing.assert_allclose(args[1], want, rtol=2e-6, atol=1e-6, err_msg=f"T={t}")


@kd.jit
def loop_carry(x_ptr, o_ptr, n_iter, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    acc = kd.zeros((BLOCK,), kd.float32)
    prev = kd.zeros((BLOCK,), kd.float32)
    for i in range(n_iter):
        x = kd.load(x_ptr + i * BLOCK + offs)
        acc, prev = acc * 0.5 - x, acc  # a swap through the carry
    kd.store(o_ptr + offs, acc - prev)


def test_loop_carried_tiles():
    B, n_iter = 16, 5
    x = RNG.standard_normal(B * n_iter).astype(np.float32)
    fn = lowered(loop_carry, {"x_ptr": P(float32), "o_ptr": P(float32),
                              "n_iter": scalar(int32)}, BLOCK=B)
    ref, outs = simulate(fn, (1,), lambda: [x, np.zeros(B, np.float32), n_iter])
    acc = prev = np.zeros(B)
    for i in range(n_iter):
        acc, prev = acc * 0.5 - x[i * B:(i + 1) * B], acc
    for t, args in [("interp", ref), *outs.items()]:
        np.testing.assert_allclose(args[1], acc - prev, rtol=1e-6, atol=1e-6, err_msg=f"T={t}")
