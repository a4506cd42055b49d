"""LLVM backend: hand-built Loop IR kernels run on NumPy arrays and checked against NumPy."""

from __future__ import annotations

import itertools
import math
import re
import time

import numpy as np
import pytest

import kdsl as kd

from kdsl.compile_options import CompileOptions
from kdsl.ir import loop as L
from kdsl.ir.loop_verify import verify
from kdsl.ir.types import (
    PointerType,
    bfloat16,
    float16,
    float32,
    float64,
    int1,
    int8,
    int32,
    int64,
    uint32,
)
from kdsl.lowering.legalize import legalize

llvm_backend = pytest.importorskip("kdsl.backends.llvm")
from kdsl.backends.base import BoundArg
from kdsl.backends.llvm_runtime import run_grid

BE = llvm_backend.LLVMBackend()
if not BE.is_available():  # pragma: no cover
    pytest.skip("llvmlite cannot initialise the native target", allow_module_level=True)

P = PointerType


def c(v, t=int32) -> L.Const:
    return L.Const(v, t)


def var(name: str, t=int32) -> L.Var:
    return L.Var(name, t)


def kernel(name, params, body, variables=(), arrays=(), **attrs) -> L.Kernel:
    return L.Kernel(name, [L.KParam(n, t) for n, t in params], body, list(variables),
                    list(arrays), attrs=attrs)


def run(k: L.Kernel, grid, *values):
    """Build and launch `k`; arrays are passed as NumPy arrays, scalars as Python numbers.
    The kernel is first legalized for the backend's ops, as the lowering does."""
    k = verify(legalize(k, BE.target(4)), BE.ops)
    h = BE.build(k, BE.codegen(k))
    args = []
    for p, v in zip(k.params, values):
        if isinstance(p.dtype, PointerType):
            args.append(BoundArg(p.name, "array", p.dtype.pointee, v, v, v.nbytes, v.size))
        else:
            args.append(BoundArg(p.name, "scalar", p.dtype, v))
    BE.launch(h, k, tuple(grid) + (1,) * (3 - len(grid)), args)
    return h


def elementwise(name, dt_in, dt_out, fn) -> L.Kernel:
    """for k in [0, n): o[k] = fn(x[k])"""
    x, o, n, k = var("x", P(dt_in)), var("o", P(dt_out)), var("n"), var("k")
    body = [L.For(k, c(0), n, c(1), [L.Store(L.PtrAdd(o, k), fn(L.Load(L.PtrAdd(x, k))))])]
    return kernel(name, [("x", P(dt_in)), ("o", P(dt_out)), ("n", int32)], body, [k])


def binary_elementwise(name, dt, fn) -> L.Kernel:
    """for k in [0, n): o[k] = fn(a[k], b[k])"""
    a, b, o, n, k = var("a", P(dt)), var("b", P(dt)), var("o", P(dt)), var("n"), var("k")
    body = [L.For(k, c(0), n, c(1), [L.Store(
        L.PtrAdd(o, k), fn(L.Load(L.PtrAdd(a, k)), L.Load(L.PtrAdd(b, k))))])]
    return kernel(name, [("a", P(dt)), ("b", P(dt)), ("o", P(dt)), ("n", int32)], body, [k])


def vector_add(block: int) -> L.Kernel:
    x, y, o = (var(n, P(float32)) for n in "xyo")
    n, k, offs, m = var("n"), var("k"), var("offs"), var("m", int1)
    pid = L.Special("pid", 0)
    body = [L.For(k, c(0), c(block), c(1), [
        L.Assign(offs, L.Binary("add", L.Binary("mul", pid, c(block)), k)),
        L.Assign(m, L.Binary("lt", offs, n)),
        L.Store(L.PtrAdd(o, offs),
                L.Binary("add", L.Load(L.PtrAdd(x, offs), m, c(0.0, float32)),
                         L.Load(L.PtrAdd(y, offs), m, c(0.0, float32))), m)])]
    return kernel("vadd", [("x", P(float32)), ("y", P(float32)), ("o", P(float32)),
                           ("n", int32)], body, [k, offs, m])


# ------------------------------------------------------------------------------ basics


def test_interface():
    t = BE.target(4)
    assert (t.backend, t.threads, t.warp_size) == ("llvm", 1, 1) and t.has("fp64")
    assert BE.name == "llvm" and "llvmlite" in BE.hash() and BE.hash() == BE.hash()


def test_vector_add_ragged():
    n = 10_000
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    y = np.random.default_rng(1).random(n, dtype=np.float32)
    out = np.full(n + 7, -1.0, np.float32)  # elements past n must stay untouched
    run(vector_add(1024), (math.ceil(n / 1024),), x, y, out, n)
    np.testing.assert_array_equal(out[:n], x + y)
    assert (out[n:] == -1).all()


def test_masked_load_does_not_touch_memory():
    # offsets far outside any mapping: only safe if masked-off lanes never access memory
    x, o, k, offs = var("x", P(float32)), var("o", P(float32)), var("k"), var("offs", int64)
    m = L.Binary("lt", k, c(3))
    body = [L.For(k, c(0), c(64), c(1), [
        L.Assign(offs, L.Select(m, L.Cast(k, int64), c(1 << 40, int64))),
        L.Store(L.PtrAdd(o, k), L.Load(L.PtrAdd(x, offs), m, c(7.0, float32)))])]
    kern = kernel("masked", [("x", P(float32)), ("o", P(float32))], body, [k, offs])
    xs = np.arange(3, dtype=np.float32) + 1
    out = np.zeros(64, np.float32)
    run(kern, (1,), xs, out)
    assert out[:3].tolist() == [1, 2, 3] and (out[3:] == 7).all()


def test_stages_and_vectorised_exp():
    st: dict[str, str] = {}
    BE.add_stages(elementwise("vexp", float32, float32, lambda v: L.Unary("exp", v)), st)
    assert {"llvm", "llvm.opt", "asm"} <= set(st)
    opt = st["llvm.opt"]
    assert re.search(r"<(4|8|16) x float>", opt), "exp loop was not vectorised"
    assert not re.search(r"@(expf|llvm\.exp\.)", opt)
    assert "fast" not in opt.split("define")[1]  # IEEE by default


def test_fast_math_attr():
    k = elementwise("fm", float32, float32, lambda v: L.Binary("add", v, v))
    assert "fadd fast" not in BE.codegen(k)
    k.options = CompileOptions(fast_math=True)
    assert "fadd fast" in BE.codegen(k)


def test_serialize_roundtrip():
    k = elementwise("ser", float32, float32, lambda v: L.Binary("mul", v, c(3.0, float32)))
    h = BE.build(k, BE.codegen(k))
    h2 = BE.deserialize(k, BE.serialize(h))
    x = np.arange(10, dtype=np.float32)
    o = np.zeros_like(x)
    BE.launch(h2, k, (1, 1, 1), [BoundArg("x", "array", float32, x, x),
                                  BoundArg("o", "array", float32, o, o),
                                  BoundArg("n", "scalar", int32, 10)])
    np.testing.assert_array_equal(o, x * 3)


# -------------------------------------------------------------------------------- math


def ulp_distance(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in float32 units in the last place (NaN == NaN)."""
    with np.errstate(over="ignore", invalid="ignore"):
        g, w = got.astype(np.float32), want.astype(np.float32)
    gi, wi = (v.view(np.int32).astype(np.int64) for v in (g, w))
    gi, wi = (np.where(v < 0, -(1 << 31) - v, v) for v in (gi, wi))
    d = np.abs(gi - wi)
    return np.where(np.isnan(g) & np.isnan(w), 0, np.where(np.isnan(g) != np.isnan(w), 1 << 40, d))


_ERF = np.vectorize(math.erf, otypes=[np.float64])
REFERENCES = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sin": np.sin,
    "cos": np.cos, "tanh": np.tanh, "erf": _ERF, "sigmoid": lambda v: np.exp(np.minimum(v, 0)) / (1 + np.exp(-np.abs(v))),
}
SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, 1.1754944e-38, 3.4e38,
            -3.4e38, 88.72, 88.73, 89.0, -87.3, -103.9, -104.0, -150.0, 128.0, 127.99, -126.0,
            -149.0, -149.5, 1.0, -1.0, 0.625, -0.625, 3.99, 4.0, 1e5, -1e5, 8e8, 1e30, 0.7071068]


def math_inputs() -> np.ndarray:
    rng = np.random.default_rng(42)
    return np.concatenate([
        np.array(SPECIALS), rng.uniform(-10, 10, 3000), rng.uniform(-200, 200, 2000),
        np.exp(rng.uniform(-103, 88, 3000)), -np.exp(rng.uniform(-103, 88, 1000)),
        rng.uniform(-1e6, 1e6, 500), np.ldexp(rng.uniform(1, 2, 500), rng.integers(-149, 127, 500)),
    ]).astype(np.float32)


@pytest.mark.parametrize("op", sorted(REFERENCES))
def test_float32_math_ulps(op):
    xs = math_inputs()
    out = np.empty_like(xs)
    run(elementwise(f"m_{op}", float32, float32, lambda v: L.Unary(op, v)), (1,), xs, out, xs.size)
    with np.errstate(all="ignore"):
        want = REFERENCES[op](xs.astype(np.float64))
    d = ulp_distance(out, want)
    worst = int(np.argmax(d))
    assert d.max() <= 3, f"{op}({xs[worst]!r}) = {out[worst]!r}, want {want[worst]!r}"


@pytest.mark.parametrize("op", ["exp", "log", "sin", "tanh", "erf", "sigmoid", "sqrt", "rsqrt"])
def test_float64_math(op):
    refs = {**REFERENCES, "sqrt": np.sqrt, "rsqrt": lambda v: 1 / np.sqrt(v)}
    xs = np.array([0.5, 1.5, -2.0, 10.0, 100.0, np.nan, np.inf, -np.inf, 0.0, 1e-300])
    out = np.empty_like(xs)
    run(elementwise(f"d_{op}", float64, float64, lambda v: L.Unary(op, v)), (1,), xs, out, xs.size)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(out, refs[op](xs), rtol=1e-14, atol=0)


def test_maximum_minimum_propagate_nan():
    a = np.array([1, np.nan, 3, -np.inf, 0], np.float32)
    b = np.array([2, 0, np.nan, 5, -0.0], np.float32)
    for op, ref in (("maximum", np.maximum), ("minimum", np.minimum)):
        out = np.zeros_like(a)
        run(binary_elementwise(op, float32, lambda u, v, op=op: L.Binary(op, u, v)), (1,),
            a, b, out, a.size)
        np.testing.assert_array_equal(out, ref(a, b))


def test_pow_and_fmod():
    a = np.array([2, 9, -8, 0, 1.5, np.inf], np.float32)
    b = np.array([10, 0.5, 3, -1, -2, 0], np.float32)
    out = np.zeros_like(a)
    run(binary_elementwise("pw", float32, lambda u, v: L.Binary("pow", u, v)), (1,), a, b, out, 6)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(out, np.power(a, b), rtol=1e-6)
    run(binary_elementwise("fm", float32, lambda u, v: L.Binary("mod", u, v)), (1,), a, b, out, 6)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out, np.fmod(a, b))


# ----------------------------------------------------------------------------- integers


def c_div(a: int, b: int, bits: int) -> tuple[int, int]:
    """C semantics with the kdsl guards: x/0 == x%0 == 0, MIN/-1 == MIN, MIN%-1 == 0."""
    if b == 0:
        return 0, 0
    if a == -(1 << (bits - 1)) and b == -1:
        return a, 0
    q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    return q, a - q * b


@pytest.mark.parametrize("dt", [int32, int8, int64])
def test_int_div_mod_never_trap(dt):
    lo = -(1 << (dt.bits - 1))
    pairs = [(7, 2), (-7, 2), (7, -2), (-7, -2), (5, 0), (0, 0), (lo, -1), (lo, 0), (lo, 1),
             (lo, 3), (-(lo + 1), -1), (1, lo)]
    a = np.array([p[0] for p in pairs], dt.np)
    b = np.array([p[1] for p in pairs], dt.np)
    q, r = np.zeros_like(a), np.zeros_like(a)
    run(binary_elementwise("div", dt, lambda u, v: L.Binary("div", u, v)), (1,), a, b, q, a.size)
    run(binary_elementwise("mod", dt, lambda u, v: L.Binary("mod", u, v)), (1,), a, b, r, a.size)
    want = [c_div(int(x), int(y), dt.bits) for x, y in pairs]
    assert q.tolist() == [w[0] for w in want] and r.tolist() == [w[1] for w in want]


def test_unsigned_div_and_shifts():
    a = np.array([7, 0xFFFFFFFF, 5, 0x80000000], np.uint32)
    b = np.array([2, 16, 0, 4], np.uint32)
    q = np.zeros_like(a)
    run(binary_elementwise("udiv", uint32, lambda u, v: L.Binary("div", u, v)), (1,), a, b, q, 4)
    assert q.tolist() == [3, 0x0FFFFFFF, 0, 0x20000000]
    run(binary_elementwise("ushr", uint32, lambda u, v: L.Binary("shr", u, v)), (1,), a, b, q, 4)
    assert q.tolist() == [1, 0x0FFFF, 5, 0x08000000]
    s = np.array([-8, 1, -1, 3], np.int32)
    t = np.array([1, 4, 31, 0], np.int32)
    o = np.zeros_like(s)
    run(binary_elementwise("sshr", int32, lambda u, v: L.Binary("shr", u, v)), (1,), s, t, o, 4)
    assert o.tolist() == [-4, 0, -1, 3]


def test_float_to_int_casts_are_defined():
    xs = np.array([1.9, -1.9, np.nan, 1e20, -1e20, np.inf], np.float32)
    out = np.zeros(6, np.int32)
    run(elementwise("f2i", float32, int32, lambda v: L.Cast(v, int32)), (1,), xs, out, 6)
    assert out[:2].tolist() == [1, -1]  # the others are unspecified but must not crash


# ----------------------------------------------------------------------- half precision


def bf16_rne_bits(x: np.ndarray) -> np.ndarray:
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = ((bits | 0x400000) >> 16)
    return np.where(np.isnan(x), nan, rounded).astype(np.uint16)


def half_inputs() -> np.ndarray:
    rng = np.random.default_rng(3)
    ties = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 65520, 65519,
                     1e-8, 3e-8, 6e-8, np.inf, -np.inf, np.nan, 0.0, -0.0, 3.4e38], np.float32)
    return np.concatenate([ties, rng.standard_normal(2000).astype(np.float32) * 100])


def test_round_float16_and_bfloat16():
    xs = half_inputs()
    out = np.empty_like(xs)
    run(elementwise("r16", float32, float32, lambda v: L.Round(v, "float16")), (1,), xs, out,
        xs.size)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, xs.astype(np.float16).astype(np.float32))
    run(elementwise("rbf", float32, float32, lambda v: L.Round(v, "bfloat16")), (1,), xs, out,
        xs.size)
    want = (bf16_rne_bits(xs).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(out, want)


def test_float16_load_store():
    xs = half_inputs()
    h = np.empty(xs.size, np.float16)
    run(elementwise("st16", float32, float16, lambda v: L.Round(v, "float16")), (1,), xs, h,
        xs.size)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(h, xs.astype(np.float16))
    back = np.empty(xs.size, np.float32)
    run(elementwise("ld16", float16, float32, lambda v: v), (1,), h, back, xs.size)
    np.testing.assert_array_equal(back, h.astype(np.float32))


def test_bfloat16_load_store():
    xs = half_inputs()
    bits = np.empty(xs.size, np.uint16)  # bfloat16 arrays are uint16 bit patterns in NumPy
    run(elementwise("stbf", float32, bfloat16, lambda v: L.Round(v, "bfloat16")), (1,), xs,
        bits, xs.size)
    np.testing.assert_array_equal(bits, bf16_rne_bits(xs))
    back = np.empty(xs.size, np.float32)
    run(elementwise("ldbf", bfloat16, float32, lambda v: v), (1,), bits, back, xs.size)
    np.testing.assert_array_equal(back, (bits.astype(np.uint32) << 16).view(np.float32))


# ------------------------------------------------------------------- grids and atomics


@pytest.mark.parametrize("dt", [float32, int32, float16, bfloat16, float64])
def test_atomic_add_many_programs(dt):
    acc, res = var("acc", P(dt)), var("old", dt if dt.bits > 16 else float32)
    val = c(1.0, float32) if dt.bits == 16 else c(1, dt)
    body = [L.AtomicAdd(L.PtrAdd(acc, L.Binary("mod", L.Special("pid", 0), c(3))), val,
                        L.Binary("lt", L.Special("pid", 0), c(600)), res)]
    k = kernel(f"atomic_{dt}", [("acc", P(dt))], body, [res])
    out = np.zeros(3, dt.np)
    run(k, (601,), out)  # program 600 is masked off; 200 is exact even in bfloat16
    if dt == bfloat16:
        out = (out.astype(np.uint32) << 16).view(np.float32)
    assert out.tolist() == [200, 200, 200]


def test_2d_grid_and_nprog():
    o = var("o", P(int32))
    pid0, pid1, pid2 = (L.Special("pid", a) for a in range(3))
    g0, g1 = L.Special("nprog", 0), L.Special("nprog", 1)
    lin = L.Binary("add", L.Binary("mul", L.Binary("add", L.Binary("mul", pid2, g1), pid1), g0),
                   pid0)
    code = L.Binary("add", L.Binary("add", pid0, L.Binary("mul", pid1, c(1000))),
                    L.Binary("mul", pid2, c(1000000)))
    k = kernel("grid2d", [("o", P(int32))], [L.Store(L.PtrAdd(o, lin), code)])
    for grid in ((7, 5, 1), (3, 4, 2), (1, 1, 1)):
        out = np.full(grid[::-1], -1, np.int32)
        run(k, grid, out.reshape(-1))
        i2, i1, i0 = np.indices(grid[::-1])
        np.testing.assert_array_equal(out, i0 + 1000 * i1 + 1000000 * i2)


def test_row_sum_over_register_array():
    rows, cols = 37, 64
    x, o = var("x", P(float32)), var("o", P(float32))
    k, s = var("k"), var("s", float32)
    buf = L.Array("buf", float32, cols)
    pid = L.Special("pid", 0)
    body = [
        L.For(k, c(0), c(cols), c(1), [L.ArrayStore(buf, k, L.Load(
            L.PtrAdd(x, L.Binary("add", L.Binary("mul", pid, c(cols)), k))))]),
        L.Assign(s, c(0.0, float32)),
        L.For(k, c(0), c(cols), c(1), [L.Assign(s, L.Binary("add", s, L.Index(buf, k)))]),
        L.Store(L.PtrAdd(o, pid), s),
    ]
    kern = kernel("rowsum", [("x", P(float32)), ("o", P(float32))], body, [k, s], [buf])
    xs = np.random.default_rng(5).random((rows, cols), dtype=np.float32)
    out = np.zeros(rows, np.float32)
    run(kern, (rows,), xs, out)
    want = np.zeros(rows, np.float32)
    for j in range(cols):  # same (sequential) order: IEEE results are bit-identical
        want += xs[:, j]
    np.testing.assert_array_equal(out, want)


def test_register_arrays_of_a_cache_line_are_line_aligned():
    # vector loads of an array that starts mid-line split across two lines (backends/llvm.py
    # ARRAY_ALIGN); arrays smaller than a line keep their element alignment
    x, k = var("x", P(float32)), var("k")
    big, wide, small = (L.Array("big", float32, 16), L.Array("wide", int8, 64),
                        L.Array("small", float32, 15))
    body = [L.For(k, c(0), c(15), c(1), [
        L.ArrayStore(a, k, L.Cast(L.Load(L.PtrAdd(x, k)), a.dtype)) for a in (big, wide, small)])]
    ir = BE.codegen(kernel("aligned", [("x", P(float32))], body, [k], [big, wide, small]))
    assert '%"big" = alloca [16 x float], align 64' in ir
    assert '%"wide" = alloca [64 x i8], align 64' in ir
    assert re.search(r'%"small" = alloca \[15 x float\]$', ir, re.MULTILINE)


def test_while_if_bool_array_and_descending_for():
    # collatz steps of n (While + If/else), and a bool register array filled by a descending loop
    o, n, steps, k = var("o", P(int32)), var("n"), var("steps"), var("k")
    flags = L.Array("flags", int1, 8)
    even = L.Binary("eq", L.Binary("and", n, c(1)), c(0))
    body = [
        L.Assign(n, L.Binary("add", L.Special("pid", 0), c(1))),
        L.Assign(steps, c(0)),
        L.While([], L.Binary("ne", n, c(1)), [
            L.If(even, [L.Assign(n, L.Binary("div", n, c(2)))],
                 [L.Assign(n, L.Binary("add", L.Binary("mul", n, c(3)), c(1)))]),
            L.Assign(steps, L.Binary("add", steps, c(1)))]),
        L.For(k, c(7), c(-1), c(-1), [L.ArrayStore(flags, k, L.Binary("gt", k, c(3)))]),
        L.If(L.Index(flags, c(5)), [L.Assign(steps, L.Binary("add", steps, c(100)))]),
        L.If(L.Index(flags, c(2)), [L.Assign(steps, L.Binary("add", steps, c(10000)))]),
        L.Store(L.PtrAdd(o, L.Special("pid", 0)), steps),
    ]
    kern = kernel("collatz", [("o", P(int32))], body, [n, steps, k], [flags])
    out = np.zeros(10, np.int32)
    run(kern, (10,), out)

    def collatz(v):
        s = 0
        while v != 1:
            v, s = (v // 2 if v % 2 == 0 else 3 * v + 1), s + 1
        return s
    assert out.tolist() == [collatz(i + 1) + 100 for i in range(10)]


# ------------------------------------------------------------------------ thread pool


def test_run_grid_covers_range_and_propagates_errors():
    seen = []

    def fn(packed, start, end, g0, g1, g2):
        seen.append((start, end))

    run_grid(fn, b"", (1000, 3, 1))
    seen.sort()
    assert seen[0][0] == 0 and seen[-1][1] == 3000
    assert all(a[1] == b[0] for a, b in itertools.pairwise(seen))

    def boom(packed, start, end, *g):
        if start > 0:
            raise RuntimeError("worker failed")
        if start == 0 and end == 5000:  # a single inline chunk (one worker): fail there too
            raise RuntimeError("worker failed")

    with pytest.raises(RuntimeError, match="worker failed"):
        run_grid(boom, b"", (5000, 1, 1))
    run_grid(fn, b"", (0, 1, 1))  # empty grid: nothing runs


def test_vector_add_timing_16m():
    n, block = 1 << 24, 4096
    x = np.ones(n, np.float32)
    y = np.full(n, 2.0, np.float32)
    out = np.empty_like(x)
    k = vector_add(block)
    h = BE.build(k, BE.codegen(k))
    args = [BoundArg(nm, "array", float32, a, a) for nm, a in zip("xyo", (x, y, out))]
    args.append(BoundArg("n", "scalar", int32, n))
    grid = (n // block, 1, 1)
    BE.launch(h, k, grid, args)
    t0 = time.perf_counter()
    BE.launch(h, k, grid, args)
    t1 = time.perf_counter()
    np.add(x, y, out=out)
    t2 = time.perf_counter()
    small = (1, 1, 1)
    for _ in range(100):
        BE.launch(h, k, small, args)
    t3 = time.perf_counter()
    print(f"\nvector add 16M: kdsl llvm {1e3 * (t1 - t0):.2f} ms, numpy {1e3 * (t2 - t1):.2f} ms; "
          f"launch of one program {1e6 * (t3 - t2) / 100:.1f} us")
    assert out[0] == 3 and out[-1] == 3


def test_concurrent_launches_from_python_threads():
    from concurrent.futures import ThreadPoolExecutor

    k = elementwise("conc", float32, float32, lambda v: L.Binary("add", v, c(1.0, float32)))
    h = BE.build(k, BE.codegen(k))
    xs = [np.full(1000, i, np.float32) for i in range(16)]
    outs = [np.zeros(1000, np.float32) for _ in range(16)]

    def one(i):
        BE.launch(h, k, (1, 1, 1), [BoundArg("x", "array", float32, xs[i], xs[i]),
                                     BoundArg("o", "array", float32, outs[i], outs[i]),
                                     BoundArg("n", "scalar", int32, 1000)])

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(16)))
    assert all((o == i + 1).all() for i, o in enumerate(outs))


def test_never_noalias_and_bad_cache_entry():
    k = vector_add(64)
    text = BE.codegen(k)
    # user arrays may alias (in and out the same array): no parameter is noalias, and the only
    # scope user accesses are kept apart from is the private one of register arrays
    assert not re.search(r"ptr noalias|noalias ptr", text)
    scopes = re.findall(r'!"(kdsl\.[a-z]+)"', text)
    assert set(scopes) <= {"kdsl.memory", "kdsl.private", "kdsl.user"}
    for line in text.splitlines():
        if "load" in line or "store" in line:
            assert "!noalias" not in line or "!alias.scope" in line
    with pytest.raises(RuntimeError):
        BE.deserialize(k, b"this is not LLVM IR")


@kd.jit
def _row_sum_squares(x_ptr, y_ptr, N, BLOCK: kd.constexpr):
    row = kd.program_id(0).to(kd.int64)
    x = kd.load(x_ptr + row * N + kd.arange(0, BLOCK))
    kd.store(y_ptr + row, kd.sum(x * x, axis=0))


def test_register_arrays_kept_apart_from_user_memory():
    """A row reduction's per-lane partials (a register array) updated from user memory: the
    accesses carry the private/user scopes, so LLVM needs no runtime overlap check (and no
    scalar copy of the loop) and keeps the partials in registers (no alloca left)."""
    x = np.random.default_rng(3).standard_normal((4, 1024)).astype(np.float32)
    y = np.zeros(4, np.float32)
    ck = _row_sum_squares[(4,)](x, y, 1024, BLOCK=1024, backend="llvm")
    np.testing.assert_allclose(y, (x.astype(np.float64) ** 2).sum(1), rtol=1e-5)
    assert any(a.space == "reg" for a in ck.kernel.arrays)  # the partials exist in Loop IR
    opt = ck.ir["llvm.opt"]
    assert "found.conflict" not in opt and " alloca " not in opt, opt
