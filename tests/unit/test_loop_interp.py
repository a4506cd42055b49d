"""The Loop IR simulator implements the semantics stated in kdsl/ir/loop.py."""

from __future__ import annotations

import numpy as np
import pytest

from kdsl.ir import loop as L
from kdsl.ir.loop_interp import round_bf16, run_kernel
from kdsl.ir.types import PointerType, bfloat16, float16, float32, int1, int8, int32

I = lambda v: L.Const(v, int32)
F = lambda v: L.Const(v, float32)


def _kernel(body, params, variables=(), arrays=(), threads=1):
    return L.Kernel("k", list(params), list(body), list(variables), list(arrays), threads)


def _eval(expr, dtype):
    """Value of `expr` stored through a one-element output buffer."""
    out = L.KParam("out", PointerType(dtype))
    k = _kernel([L.Store(L.Var("out", out.dtype), expr)], [out])
    buf = np.zeros(1, dtype=np.uint16 if dtype == bfloat16 else dtype.np)
    run_kernel(k, (1,), [buf])
    return buf[0]


@pytest.mark.parametrize("a,b,q,r", [(7, 2, 3, 1), (-7, 2, -3, -1), (7, -2, -3, 1),
                                     (-7, -2, 3, -1), (5, 0, 0, 0)])
def test_c_integer_division(a, b, q, r):
    assert _eval(L.Binary("div", I(a), I(b)), int32) == q
    assert _eval(L.Binary("mod", I(a), I(b)), int32) == r


def test_integer_wrapping_and_shifts():
    assert _eval(L.Binary("add", I(2**31 - 1), I(1)), int32) == -2**31
    assert _eval(L.Binary("mul", L.Const(100, int8), L.Const(3, int8)), int8) == 44
    assert _eval(L.Binary("shr", I(-16), I(2)), int32) == -4
    assert _eval(L.Binary("shl", I(1), I(4)), int32) == 16


def test_float_ops():
    assert _eval(L.Binary("maximum", F(1.0), F(float("nan"))), float32) != \
        _eval(L.Binary("maximum", F(1.0), F(float("nan"))), float32)  # NaN propagates
    assert _eval(L.Binary("mod", F(-7.5), F(2.0)), float32) == np.fmod(-7.5, 2.0)
    assert _eval(L.Unary("sqrt", F(9.0)), float32) == 3.0
    assert _eval(L.Fma(F(2.0), F(3.0), F(1.0)), float32) == 7.0
    assert _eval(L.Cast(F(-2.7), int32), int32) == -2
    assert _eval(L.Select(L.Binary("lt", I(1), I(2)), F(5.0), F(6.0)), float32) == 5.0


def test_rounding_to_half_types():
    x = np.float32(1.0009765625 + 2**-12)  # halfway-ish: exercised against NumPy
    assert _eval(L.Round(F(float(x)), "float16"), float32) == np.float32(np.float16(x))
    # bfloat16: 1 + 2^-8 is a tie between 1 and 1 + 2^-7: rounds to even (1.0)
    assert round_bf16(np.float32(1 + 2**-8)) == 1.0
    assert round_bf16(np.float32(1 + 3 * 2**-8)) == np.float32(1 + 2**-6)
    assert np.isnan(round_bf16(np.float32("nan")))
    bits = _eval(L.Round(F(3.14159), "bfloat16"), bfloat16)
    assert (np.uint32(bits) << 16).view(np.float32) == np.float32(3.140625)
    assert _eval(L.Round(F(3.14159), "float16"), float16) == np.float16(3.14159)


def test_masked_load_does_not_touch_memory():
    x = L.KParam("x", PointerType(float32))
    px = L.Var("x", x.dtype)
    bad = L.PtrAdd(px, I(100))
    v = L.Var("v", float32)
    out = L.KParam("out", PointerType(float32))
    k = _kernel([L.Assign(v, L.Load(bad, L.Const(False, int1), F(4.0))),
                 L.Store(L.Var("out", out.dtype), v)], [x, out], [v])
    buf = np.zeros(1, np.float32)
    run_kernel(k, (1,), [np.zeros(2, np.float32), buf])
    assert buf[0] == 4.0
    k.body[0] = L.Assign(v, L.Load(bad))
    with pytest.raises(IndexError):
        run_kernel(k, (1,), [np.zeros(2, np.float32), buf])


def test_threads_shared_memory_and_barriers():
    """Each thread writes its id to shared memory, then reads its neighbour's."""
    T = 4
    sh = L.Array("sh", int32, T, "shared")
    out = L.KParam("out", PointerType(int32))
    tid = L.Special("tid")
    nxt = L.Binary("mod", L.Binary("add", tid, I(1)), I(T))
    row = L.Binary("mul", L.Special("pid"), I(T))
    body = [L.ArrayStore(sh, tid, L.Binary("mul", tid, I(10))), L.Barrier(),
            L.Store(L.PtrAdd(L.Var("out", out.dtype), L.Binary("add", row, tid)),
                    L.Index(sh, nxt))]
    k = _kernel(body, [out], arrays=[sh], threads=T)
    buf = np.zeros(2 * T, np.int32)
    run_kernel(k, (2,), [buf])
    np.testing.assert_array_equal(buf, [10, 20, 30, 0] * 2)


def test_divergent_barrier_raises():
    body = [L.If(L.Binary("eq", L.Special("tid"), I(0)), [L.Barrier()])]
    with pytest.raises(RuntimeError, match="barrier"):
        run_kernel(_kernel(body, [], threads=2), (1,), [])


def test_loops_registers_and_atomics():
    """sum of i for i in range(10, 0, -2), accumulated in a register array, then atomically
    added to out[0] by every program."""
    out = L.KParam("out", PointerType(int32))
    reg = L.Array("r", int32, 1)
    i = L.Var("i", int32)
    old = L.Var("old", int32)
    cnt = L.Var("cnt", int32)
    body = [
        L.ArrayStore(reg, I(0), I(0)),
        L.For(i, I(10), I(0), I(-2), [
            L.ArrayStore(reg, I(0), L.Binary("add", L.Index(reg, I(0)), i))]),
        L.Assign(cnt, I(0)),
        L.While([L.Assign(cnt, L.Binary("add", cnt, I(1)))], L.Binary("lt", cnt, I(3)), []),
        L.AtomicAdd(L.Var("out", out.dtype), L.Binary("add", L.Index(reg, I(0)), cnt), None,
                    old),
    ]
    k = _kernel(body, [out], [i, old, cnt], [reg])
    buf = np.zeros(1, np.int32)
    run_kernel(k, (2, 2), [buf])
    assert buf[0] == 4 * (30 + 3)
