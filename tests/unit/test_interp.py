"""The NumPy interpreter of the Tile IR (`kdsl.ir.interp`), on hand-built programs checked
against NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kdsl.compile_options import CompileOptions
from kdsl.ir import interp, tile
from kdsl.ir import types as T
from kdsl.ir.types import PointerType, TileType


class KB:
    """A tiny builder of Tile IR functions for tests: `kb.op(kind, *operands, ...)` appends to
    the innermost open block and returns the single result (or the op when there is none)."""

    def __init__(self, name: str = "k"):
        self.fn = tile.Function(name, [], tile.Block())
        self.blocks = [self.fn.body]
        self.line = 0

    def param(self, name: str, elem, ptr: bool = False) -> tile.Value:
        t = TileType((), PointerType(elem) if ptr else elem)
        v = self.fn.body.add_arg(t, name)
        self.fn.params.append(tile.Param(name, t, v))
        return v

    def op(self, kind, *operands, type=None, attrs=None, regions=None, n=None, line=None):
        if type is None and operands:
            type = operands[0].type
            if kind in tile.COMPARE_OPS:
                type = type.with_elem(T.int1)
            elif kind in ("where", "load") and len(operands) > 1:
                type = operands[1].type if kind == "where" else type.with_elem(type.elem.pointee)
            elif kind == "load":
                type = type.with_elem(type.elem.pointee)
            elif kind in ("atomic_rmw", "atomic_cas"):
                type = operands[1].type
        types = [] if kind in ("store", "yield", "condition") or kind in tile.DEBUG_OPS else (
            [type] if n is None else list(type))
        self.line += 1
        loc = tile.Loc("kern.py", self.line if line is None else line, 0, f"line_{self.line}()")
        op = tile.Op(kind, list(operands), types, attrs, regions, loc)
        self.blocks[-1].append(op)
        if n is not None:
            return op.results
        return op.result if op.results else op

    # shorthands
    def const(self, value, elem, shape=()):
        return self.op("const", type=TileType(tuple(shape), elem), attrs={"value": value})

    def iota(self, n, start=0, shape=None, axis=0):
        shape = (n,) if shape is None else shape
        return self.op("iota", type=TileType(tuple(shape), T.int32),
                       attrs={"axis": axis, "start": start})

    def splat(self, x, shape):
        return self.op("splat", x, type=x.type.with_shape(tuple(shape)))

    def ptrs(self, p, offs):
        return self.op("addptr", self.splat(p, offs.shape), offs)

    def done(self, verify=True) -> tile.Function:
        if verify:
            tile.verify(self.fn)
        return self.fn


def run(fn, grid, *args):
    interp.run(fn, grid, list(args))


def binary_kernel(kind, elem, n, out_elem=None):
    """out[i] = kind(x[i], y[i]) for a whole 1-D tile."""
    kb = KB()
    x, y = kb.param("x", elem, True), kb.param("y", elem, True)
    o = kb.param("o", out_elem or elem, True)
    offs = kb.iota(n)
    a, b = kb.op("load", kb.ptrs(x, offs)), kb.op("load", kb.ptrs(y, offs))
    kb.op("store", kb.ptrs(o, offs), kb.op(kind, a, b))
    return kb.done()


def unary_kernel(kind, elem, n):
    kb = KB()
    x, o = kb.param("x", elem, True), kb.param("o", elem, True)
    offs = kb.iota(n)
    kb.op("store", kb.ptrs(o, offs), kb.op(kind, kb.op("load", kb.ptrs(x, offs))))
    return kb.done()


def bf16_ref(x: np.ndarray) -> np.ndarray:
    """Reference float32 -> bfloat16 bits, by exact rational rounding in Python."""
    out = []
    for v in np.asarray(x, np.float32).ravel().tolist():
        if math.isnan(v):
            out.append(0x7FC0)
            continue
        bits = int(np.float32(v).view(np.uint32))
        hi, lo = bits >> 16, bits & 0xFFFF
        if lo > 0x8000 or (lo == 0x8000 and hi & 1):
            hi += 1
        out.append(hi & 0xFFFF)
    return np.array(out, np.uint16)


# ---------------------------------------------------------------------------------- memory


def test_masked_add_ragged_grid():
    kb = KB()
    x, y, o = (kb.param(s, T.float32, True) for s in "xyo")
    n = kb.param("n", T.int32)
    pid = kb.op("program_id", type=TileType((), T.int32), attrs={"axis": 0})
    base = kb.op("mul", pid, kb.const(64, T.int32))
    offs = kb.op("add", kb.splat(base, (64,)), kb.iota(64))
    m = kb.op("lt", offs, kb.splat(n, (64,)))
    zero = kb.const(0.0, T.float32, (64,))
    a = kb.op("load", kb.ptrs(x, offs), m, zero)
    b = kb.op("load", kb.ptrs(y, offs), m, zero)
    kb.op("store", kb.ptrs(o, offs), kb.op("add", a, b), m)
    fn = kb.done()
    N = 1000
    xs, ys = np.random.rand(N).astype(np.float32), np.random.rand(N).astype(np.float32)
    out = np.full(N, -1, np.float32)
    run(fn, (math.ceil(N / 64), 1, 1), xs, ys, out, N)
    np.testing.assert_array_equal(out, xs + ys)


def test_masked_load_other_and_untouched_memory():
    kb = KB()
    x, o = kb.param("x", T.int32, True), kb.param("o", T.int32, True)
    offs = kb.iota(8)
    m = kb.op("lt", offs, kb.const(3, T.int32, (8,)))
    v = kb.op("load", kb.ptrs(x, offs), m, kb.const(-7, T.int32, (8,)))
    kb.op("store", kb.ptrs(o, offs), v)
    fn = kb.done()
    xs = np.arange(3, dtype=np.int32)  # only 3 elements: masked lanes must not be read
    out = np.zeros(8, np.int32)
    run(fn, (1, 1, 1), xs, out)
    np.testing.assert_array_equal(out, [0, 1, 2, -7, -7, -7, -7, -7])


@pytest.mark.parametrize("kind", ["load", "store"])
def test_out_of_bounds_names_line(kind):
    kb = KB()
    x = kb.param("x", T.float32, True)
    offs = kb.iota(16)
    p = kb.ptrs(x, offs)
    if kind == "load":
        kb.op("store", p, kb.op("exp", kb.op("load", p, line=42)), line=43)
    else:
        kb.op("store", p, kb.const(1.0, T.float32, (16,)), line=42)
    fn = kb.done()
    with pytest.raises(IndexError, match=r"kern.py:42.*element offset 1[0-9]"):
        run(fn, (1, 1, 1), np.zeros(10, np.float32))


def test_atomic_add_duplicates_and_old_values():
    kb = KB()
    acc, old = kb.param("acc", T.int32, True), kb.param("old", T.int32, True)
    idx = kb.op("mod", kb.iota(8), kb.const(3, T.int32, (8,)))
    ones = kb.op("add", kb.iota(8), kb.const(1, T.int32, (8,)))
    prev = kb.op("atomic_rmw", kb.ptrs(acc, idx), ones, attrs={"op": "add", "sem": "acq_rel", "scope": "gpu"})
    kb.op("store", kb.ptrs(old, kb.iota(8)), prev)
    fn = kb.done()
    a = np.zeros(3, np.int32)
    o = np.zeros(8, np.int32)
    run(fn, (2, 1, 1), a, o)
    ref = np.zeros(3, np.int64)
    np.add.at(ref, np.arange(8) % 3, 2 * (np.arange(8) + 1))
    np.testing.assert_array_equal(a, ref)
    # Second program: each lane saw the running sum at its own add (row-major order).
    run_sum = np.zeros(3, np.int64)
    np.add.at(run_sum, np.arange(8) % 3, np.arange(8) + 1)
    expect = []
    cur = run_sum.copy()
    for i in range(8):
        expect.append(cur[i % 3])
        cur[i % 3] += i + 1
    np.testing.assert_array_equal(o, expect)


def test_atomic_add_masked_float():
    kb = KB()
    acc = kb.param("acc", T.float32, True)
    idx = kb.const(0, T.int32, (16,))
    m = kb.op("lt", kb.iota(16), kb.const(5, T.int32, (16,)))
    kb.op("atomic_rmw", kb.ptrs(acc, idx), kb.const(0.5, T.float32, (16,)), m, attrs={"op": "add", "sem": "acq_rel", "scope": "gpu"})
    fn = kb.done()
    a = np.zeros(1, np.float32)
    run(fn, (3, 1, 1), a)
    assert a[0] == 7.5


# ------------------------------------------------------------------------- integer semantics

INT_CASES = [T.int8, T.int32, T.int64, T.uint8, T.uint32]


def _c_div(a: int, b: int) -> tuple[int, int]:
    if b == 0:
        return 0, 0
    q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
    return q, a - q * b


def _wrap(v: int, d: T.DType) -> int:
    return int(interp.wrap_int(v, d))


@pytest.mark.parametrize("elem", INT_CASES)
def test_int_floordiv_mod_follow_c(elem):
    info = np.iinfo(elem.np)
    vals = [0, 1, -1, 7, -7, 3, -3, int(info.min), int(info.max), 2, -2, 5]
    vals = [_wrap(v, elem) for v in vals]
    a = np.array([x for x in vals for _ in vals], elem.np)
    b = np.array([y for _ in vals for y in vals], elem.np)
    n = a.size
    for kind, pick in (("floordiv", 0), ("mod", 1)):
        out = np.zeros(n, elem.np)
        run(binary_kernel(kind, elem, n), (1, 1, 1), a, b, out)
        ref = [_wrap(_c_div(int(x), int(y))[pick], elem) for x, y in zip(a, b)]
        np.testing.assert_array_equal(out, np.array(ref, elem.np), err_msg=kind)


@pytest.mark.parametrize("elem", INT_CASES)
@pytest.mark.parametrize("kind,f", [("add", lambda a, b: a + b), ("sub", lambda a, b: a - b),
                                    ("mul", lambda a, b: a * b)])
def test_int_arith_wraps(elem, kind, f):
    rng = np.random.default_rng(0)
    info = np.iinfo(elem.np)
    a = rng.integers(info.min, info.max, 64, dtype=elem.np, endpoint=True)
    b = rng.integers(info.min, info.max, 64, dtype=elem.np, endpoint=True)
    out = np.zeros(64, elem.np)
    run(binary_kernel(kind, elem, 64), (1, 1, 1), a, b, out)
    ref = [_wrap(f(int(x), int(y)), elem) for x, y in zip(a, b)]
    np.testing.assert_array_equal(out, np.array(ref, elem.np))


@pytest.mark.parametrize("elem", [T.int32, T.uint32, T.int8])
def test_shifts_modulo_width(elem):
    a = np.array([1, -5 if elem.is_signed else 250, 96, 3], elem.np)
    b = np.array([3, 1, elem.bits + 2, elem.bits - 1], elem.np)
    outl, outr = np.zeros(4, elem.np), np.zeros(4, elem.np)
    run(binary_kernel("shl", elem, 4), (1, 1, 1), a, b, outl)
    run(binary_kernel("shr", elem, 4), (1, 1, 1), a, b, outr)
    mask = (1 << elem.bits) - 1
    for i in range(4):
        s = int(b[i]) % elem.bits
        assert int(outl[i]) == _wrap((int(a[i]) << s) & mask, elem)
        assert int(outr[i]) == _wrap(int(a[i]) >> s, elem)  # arithmetic for signed
    if elem.is_signed:
        assert outr[1] < 0


def test_bitwise_and_not():
    a = np.array([0b1100, -1, 5], np.int32)
    b = np.array([0b1010, 3, 2], np.int32)
    for kind, f in (("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor)):
        out = np.zeros(3, np.int32)
        run(binary_kernel(kind, T.int32, 3), (1, 1, 1), a, b, out)
        np.testing.assert_array_equal(out, f(a, b))
    out = np.zeros(3, np.int32)
    run(unary_kernel("not", T.int32, 3), (1, 1, 1), a, out)
    np.testing.assert_array_equal(out, ~a)


def test_int_pow_and_abs_wrap():
    a = np.array([2, -3, 7, 0, 1, -1, 2], np.int32)
    b = np.array([10, 3, 0, 5, -4, -3, -1], np.int32)
    out = np.zeros(7, np.int32)
    run(binary_kernel("pow", T.int32, 7), (1, 1, 1), a, b, out)
    np.testing.assert_array_equal(out, [1024, -27, 1, 0, 1, -1, 0])
    x = np.array([-2**31, -3, 4], np.int32)
    out = np.zeros(3, np.int32)
    run(unary_kernel("abs", T.int32, 3), (1, 1, 1), x, out)
    np.testing.assert_array_equal(out, [-2**31, 3, 4])


# --------------------------------------------------------------------------- float semantics


def test_float_ops_match_numpy():
    rng = np.random.default_rng(1)
    a = rng.standard_normal(64).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    b[:4] = [0.0, -0.0, np.inf, np.nan]
    with np.errstate(all="ignore"):
        refs = _float_refs(a, b)
    for kind, ref in refs.items():
        out = np.zeros(64, np.float32)
        x = np.abs(a) if kind == "pow" else a
        run(binary_kernel(kind, T.float32, 64), (1, 1, 1), x, b, out)
        np.testing.assert_array_equal(out, ref, err_msg=kind)
    # maximum/minimum propagate NaN
    assert np.isnan(refs["maximum"][3]) and np.isnan(refs["minimum"][3])


def _float_refs(a, b):
    return {
        "add": a + b, "sub": a - b, "mul": a * b, "div": a / b,
        "floordiv": np.floor(a / b), "mod": np.fmod(a, b),
        "maximum": np.maximum(a, b), "minimum": np.minimum(a, b),
        "pow": np.power(np.abs(a), b),
    }


@pytest.mark.parametrize("kind,ref", [
    ("exp", np.exp), ("exp2", np.exp2), ("log", np.log), ("log2", np.log2),
    ("sqrt", np.sqrt), ("rsqrt", lambda x: np.float32(1) / np.sqrt(x)), ("abs", np.abs),
    ("sin", np.sin), ("cos", np.cos), ("tanh", np.tanh), ("floor", np.floor),
    ("ceil", np.ceil), ("neg", np.negative),
    ("sigmoid", lambda x: np.float32(1) / (np.float32(1) + np.exp(-x))),
    ("erf", lambda x: np.array([math.erf(v) for v in x.astype(np.float64)]).astype(np.float32)),
])
def test_unary_float(kind, ref):
    x = np.array([0.5, -1.25, 100.0, -3.0, 0.0, 2.0, 1e-3, 89.0], np.float32)
    out = np.zeros(8, np.float32)
    run(unary_kernel(kind, T.float32, 8), (1, 1, 1), x, out)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out, ref(x))
    if kind == "exp":
        assert np.isinf(out[2])
    if kind == "log":
        assert np.isnan(out[1])


def test_f16_rounds_after_every_op():
    rng = np.random.default_rng(2)
    a = rng.standard_normal(256).astype(np.float16)
    b = rng.standard_normal(256).astype(np.float16)
    for kind, f in (("add", np.add), ("mul", np.multiply), ("div", np.divide)):
        out = np.zeros(256, np.float16)
        run(binary_kernel(kind, T.float16, 256), (1, 1, 1), a, b, out)
        # NumPy's float16 arithmetic is computed in float32 and rounded: the same definition.
        np.testing.assert_array_equal(out, f(a, b), err_msg=kind)
    # (a * b) + b: the product is rounded to float16 before the add.
    kb = KB()
    x, y, o = (kb.param(s, T.float16, True) for s in "xyo")
    offs = kb.iota(256)
    va, vb = kb.op("load", kb.ptrs(x, offs)), kb.op("load", kb.ptrs(y, offs))
    kb.op("store", kb.ptrs(o, offs), kb.op("add", kb.op("mul", va, vb), vb))
    out = np.zeros(256, np.float16)
    run(kb.done(), (1, 1, 1), a, b, out)
    np.testing.assert_array_equal(out, (a * b) + b)


def test_bf16_rounding_matches_reference():
    rng = np.random.default_rng(3)
    # bf16 inputs (bits), product computed in float32 and rounded to bf16 by the reference.
    a = bf16_ref(rng.standard_normal(512).astype(np.float32))
    b = bf16_ref(rng.standard_normal(512).astype(np.float32))
    out = np.zeros(512, np.uint16)
    run(binary_kernel("mul", T.bfloat16, 512), (1, 1, 1), a, b, out)
    fa, fb = interp.bf16_from_bits(a), interp.bf16_from_bits(b)
    np.testing.assert_array_equal(out, bf16_ref(fa * fb))
    # ties to even, NaN kept NaN, overflow to inf
    x = np.array([1.0 + 2**-8, 1.0 + 3 * 2**-8, np.nan, 3.4e38, -0.0], np.float32)
    bits = interp.bf16_bits(x)
    np.testing.assert_array_equal(bits[[0, 1, 4]], bf16_ref(x)[[0, 1, 4]])
    assert np.isnan(interp.bf16_from_bits(bits[2]))
    assert np.isinf(interp.bf16_from_bits(bits[3]))


def _cast_kernel(src, dst, n):
    kb = KB()
    x, o = kb.param("x", src, True), kb.param("o", dst, True)
    offs = kb.iota(n)
    v = kb.op("load", kb.ptrs(x, offs))
    kb.op("store", kb.ptrs(o, offs), kb.op("cast", v, type=v.type.with_elem(dst)))
    return kb.done()


def test_casts():
    x = np.array([2.7, -2.7, 0.5, -0.0, 1e10, np.nan, 65520.0, 1.0009765625], np.float32)
    out = np.zeros(8, np.int32)
    run(_cast_kernel(T.float32, T.int32, 8), (1, 1, 1), x, out)
    np.testing.assert_array_equal(out[:4], [2, -2, 0, 0])  # truncation toward zero
    h = np.zeros(8, np.float16)
    run(_cast_kernel(T.float32, T.float16, 8), (1, 1, 1), x, h)
    np.testing.assert_array_equal(h[:4], x[:4].astype(np.float16))
    assert np.isinf(h[6])  # 65520 rounds up to inf in float16 (ties to even)
    b = np.zeros(8, np.bool_)
    run(_cast_kernel(T.float32, T.int1, 8), (1, 1, 1), x, b)
    np.testing.assert_array_equal(b, x != 0)
    i = np.array([2**24 + 1, -5, 2**31 - 1, 7], np.int32)
    f = np.zeros(4, np.float32)
    run(_cast_kernel(T.int32, T.float32, 4), (1, 1, 1), i, f)
    np.testing.assert_array_equal(f, i.astype(np.float32))
    w = np.zeros(4, np.int8)
    run(_cast_kernel(T.int32, T.int8, 4), (1, 1, 1), i, w)
    np.testing.assert_array_equal(w, i.astype(np.int8))  # wraps
    bf = np.zeros(4, np.uint16)
    run(_cast_kernel(T.int32, T.bfloat16, 4), (1, 1, 1), i, bf)
    np.testing.assert_array_equal(bf, bf16_ref(i.astype(np.float64).astype(np.float32)))


def test_bitcast_roundtrip():
    kb = KB()
    x, o = kb.param("x", T.float16, True), kb.param("o", T.int16, True)
    offs = kb.iota(4)
    v = kb.op("load", kb.ptrs(x, offs))
    kb.op("store", kb.ptrs(o, offs), kb.op("bitcast", v, type=v.type.with_elem(T.int16)))
    xs = np.array([1.0, -2.5, np.inf, 0.0], np.float16)
    out = np.zeros(4, np.int16)
    run(kb.done(), (1, 1, 1), xs, out)
    np.testing.assert_array_equal(out, xs.view(np.int16))


def test_fma_and_where():
    kb = KB()
    x, y, z, o = (kb.param(s, T.float32, True) for s in "xyzo")
    offs = kb.iota(8)
    a, b, c = (kb.op("load", kb.ptrs(p, offs)) for p in (x, y, z))
    f = kb.op("fma", a, b, c)
    sel = kb.op("where", kb.op("gt", a, c), f, c)
    kb.op("store", kb.ptrs(o, offs), sel)
    r = np.random.default_rng(4)
    xs, ys, zs = (r.standard_normal(8).astype(np.float32) for _ in range(3))
    out = np.zeros(8, np.float32)
    run(kb.done(), (1, 1, 1), xs, ys, zs, out)
    exact = (xs.astype(np.float64) * ys + zs).astype(np.float32)
    np.testing.assert_array_equal(out, np.where(xs > zs, exact, zs))


# ---------------------------------------------------------------------- reductions and dot


def _reduce_kernel(kind, elem, shape, axis):
    kb = KB()
    x = kb.param("x", elem, True)
    out_elem = T.int32 if kind.startswith("arg") else elem
    o = kb.param("o", out_elem, True)
    rows, cols = shape
    offs = kb.op("add", kb.op("mul", kb.iota(rows, shape=shape, axis=0),
                              kb.const(cols, T.int32, shape)),
                 kb.iota(cols, shape=shape, axis=1))
    v = kb.op("load", kb.ptrs(x, offs))
    rshape = shape[:axis] + shape[axis + 1:]
    r = kb.op("reduce", v, type=TileType(rshape, out_elem), attrs={"op": kind, "axis": axis})
    kb.op("store", kb.ptrs(o, kb.iota(rshape[0])), r)
    return kb.done()


@pytest.mark.parametrize("kind", ["sum", "max", "min", "argmax", "argmin"])
@pytest.mark.parametrize("axis", [0, 1])
def test_reductions_with_nan_and_ties(kind, axis):
    x = np.array([[1, 5, 5, -2], [np.nan, 3, np.nan, 0], [7, 7, 1, 1]], np.float32)
    x = np.pad(x, ((0, 1), (0, 0)), constant_values=-1)  # 4x4
    n = 4
    out = np.zeros(n, np.int32 if kind.startswith("arg") else np.float32)
    run(_reduce_kernel(kind, T.float32, (4, 4), axis), (1, 1, 1), x.ravel(), out)
    ref = {"sum": np.sum, "max": np.max, "min": np.min,
           "argmax": np.argmax, "argmin": np.argmin}[kind](x, axis=axis)
    np.testing.assert_array_equal(out, ref)
    if kind == "argmax" and axis == 1:
        np.testing.assert_array_equal(out[[0, 1, 2]], [1, 0, 0])  # first tie, first NaN


def test_int_sum_wraps_in_result_type():
    x = np.full(16, 100, np.int8)
    out = np.zeros(4, np.int8)
    run(_reduce_kernel("sum", T.int8, (4, 4), 1), (1, 1, 1), x, out)
    np.testing.assert_array_equal(out, [_wrap(400, T.int8)] * 4)


@pytest.mark.parametrize("elem,acc", [(T.float32, T.float32), (T.float16, T.float32),
                                      (T.int8, T.int32), (T.float64, T.float64)])
def test_dot(elem, acc):
    M, K, N = 4, 8, 2
    kb = KB()
    a, b, c = kb.param("a", elem, True), kb.param("b", elem, True), kb.param("c", acc, True)

    def offs(r, cc):
        return kb.op("add", kb.op("mul", kb.iota(r, shape=(r, cc), axis=0),
                                  kb.const(cc, T.int32, (r, cc))),
                     kb.iota(cc, shape=(r, cc), axis=1))

    va, vb = kb.op("load", kb.ptrs(a, offs(M, K))), kb.op("load", kb.ptrs(b, offs(K, N)))
    oc = offs(M, N)
    init = kb.op("load", kb.ptrs(c, oc))
    d = kb.op("dot", va, vb, init, type=init.type, attrs={"precision": "ieee"})
    kb.op("store", kb.ptrs(c, oc), d)
    rng = np.random.default_rng(5)
    if elem.is_float:
        A = rng.standard_normal((M, K)).astype(elem.np)
        B = rng.standard_normal((K, N)).astype(elem.np)
        C = np.ones((M, N), acc.np)
        ref = (A.astype(np.float64) @ B.astype(np.float64) + 1).astype(acc.np)
    else:
        A = rng.integers(-128, 128, (M, K)).astype(np.int8)
        B = rng.integers(-128, 128, (K, N)).astype(np.int8)
        C = np.full((M, N), 2**31 - 1, np.int32)
        ref = (A.astype(np.int64) @ B + 2**31 - 1).astype(np.int32)  # wraps
    cflat = C.ravel().copy()
    run(kb.done(), (1, 1, 1), A.ravel(), B.ravel(), cflat)
    if elem.is_float:
        np.testing.assert_allclose(cflat.reshape(M, N), ref, rtol=1e-5)
    else:
        np.testing.assert_array_equal(cflat.reshape(M, N), ref)


# -------------------------------------------------------------------------- control flow


def test_for_loop_with_carried_tile():
    kb = KB()
    x, o = kb.param("x", T.float32, True), kb.param("o", T.float32, True)
    n = kb.param("n", T.int32)
    offs = kb.iota(4)
    acc0 = kb.const(0.0, T.float32, (4,))
    body = tile.Block()
    iv = body.add_arg(TileType((), T.int32), "i")
    acc = body.add_arg(acc0.type, "acc")
    kb.blocks.append(body)
    off_i = kb.op("add", offs, kb.splat(kb.op("mul", iv, kb.const(4, T.int32)), (4,)))
    nxt = kb.op("add", acc, kb.op("load", kb.ptrs(x, off_i)))
    kb.op("yield", nxt)
    kb.blocks.pop()
    res = kb.op("for", kb.const(0, T.int32), n, kb.const(1, T.int32), acc0,
                regions=[body], type=acc0.type)
    kb.op("store", kb.ptrs(o, offs), res)
    xs = np.arange(20, dtype=np.float32)
    out = np.zeros(4, np.float32)
    run(kb.done(), (1, 1, 1), xs, out, 5)
    np.testing.assert_array_equal(out, xs.reshape(5, 4).sum(0))
    out[:] = 9
    run(kb.fn, (1, 1, 1), xs, out, 0)  # zero trips: the init flows through
    np.testing.assert_array_equal(out, 0)


def test_while_and_if():
    # Collatz step count of the scalar argument, stored only if the program id is 0.
    kb = KB()
    o = kb.param("o", T.int32, True)
    n = kb.param("n", T.int32)
    i32 = TileType((), T.int32)
    cond = tile.Block()
    cv, cc = cond.add_arg(i32, "v"), cond.add_arg(i32, "c")
    kb.blocks.append(cond)
    kb.op("condition", kb.op("ne", cv, kb.const(1, T.int32)), cv, cc)
    kb.blocks.pop()
    body = tile.Block()
    bv, bc = body.add_arg(i32, "v"), body.add_arg(i32, "c")
    kb.blocks.append(body)
    even = kb.op("eq", kb.op("mod", bv, kb.const(2, T.int32)), kb.const(0, T.int32))
    then, els = tile.Block(), tile.Block()
    kb.blocks.append(then)
    kb.op("yield", kb.op("floordiv", bv, kb.const(2, T.int32)))
    kb.blocks[-1] = els
    kb.op("yield", kb.op("add", kb.op("mul", bv, kb.const(3, T.int32)), kb.const(1, T.int32)))
    kb.blocks.pop()
    nv = kb.op("if", even, regions=[then, els], type=i32)
    kb.op("yield", nv, kb.op("add", bc, kb.const(1, T.int32)))
    kb.blocks.pop()
    _, steps = kb.op("while", n, kb.const(0, T.int32), regions=[cond, body], type=[i32, i32],
                     n=2)
    is0 = kb.op("eq", kb.op("program_id", type=i32, attrs={"axis": 0}), kb.const(0, T.int32))
    then, els = tile.Block(), tile.Block()
    kb.blocks.append(then)
    kb.op("store", kb.ptrs(o, kb.iota(1)), kb.splat(steps, (1,)))
    kb.op("yield")
    kb.blocks[-1] = els
    kb.op("yield")
    kb.blocks.pop()
    kb.op("if", is0, regions=[then, els], n=0, type=[])
    out = np.zeros(1, np.int32)
    run(kb.done(), (3, 1, 1), out, 27)
    assert out[0] == 111


def test_num_programs_and_2d_grid():
    kb = KB()
    o = kb.param("o", T.int32, True)
    i32 = TileType((), T.int32)
    pid0 = kb.op("program_id", type=i32, attrs={"axis": 0})
    pid1 = kb.op("program_id", type=i32, attrs={"axis": 1})
    n0 = kb.op("num_programs", type=i32, attrs={"axis": 0})
    lin = kb.op("add", kb.op("mul", pid1, n0), pid0)
    kb.op("store", kb.ptrs(o, kb.splat(lin, (1,))), kb.splat(pid0, (1,)))
    out = np.full(6, -1, np.int32)
    run(kb.done(), (3, 2, 1), out)
    np.testing.assert_array_equal(out, [0, 1, 2, 0, 1, 2])


def test_shape_ops():
    kb = KB()
    o = kb.param("o", T.int32, True)
    r = kb.op("reshape", kb.iota(6), type=TileType((2, 3), T.int32))
    t = kb.op("trans", r, type=TileType((3, 2), T.int32), attrs={"perm": (1, 0)})
    col = kb.op("reshape", kb.iota(3), type=TileType((3, 1), T.int32))
    b = kb.op("broadcast", col, type=TileType((3, 2), T.int32))
    s = kb.op("add", t, kb.op("mul", b, kb.const(100, T.int32, (3, 2))))
    flat = kb.op("reshape", s, type=TileType((6,), T.int32))
    kb.op("store", kb.ptrs(o, kb.iota(6)), flat)
    out = np.zeros(6, np.int32)
    run(kb.done(), (1, 1, 1), out)
    ref = np.arange(6).reshape(2, 3).T + 100 * np.arange(3)[:, None]
    np.testing.assert_array_equal(out, ref.ravel())


def test_bf16_buffers_load_store():
    kb = KB()
    x, o = kb.param("x", T.bfloat16, True), kb.param("o", T.bfloat16, True)
    offs = kb.iota(8)
    v = kb.op("load", kb.ptrs(x, offs))
    kb.op("store", kb.ptrs(o, offs), kb.op("exp", v))
    xs = bf16_ref(np.linspace(-2, 2, 8).astype(np.float32))
    out = np.zeros(8, np.uint16)
    run(kb.done(), (1, 1, 1), xs, out)
    np.testing.assert_array_equal(out, bf16_ref(np.exp(interp.bf16_from_bits(xs))))


def test_scalar_args_and_evaluate():
    op = tile.Op("floordiv", [tile.Value(TileType((), T.int32))] * 2, [TileType((), T.int32)])
    (q,) = interp.evaluate(op, [np.int32(-7), np.int32(2)])
    assert int(q) == -3
    (z,) = interp.evaluate(op, [np.int32(5), np.int32(0)])
    assert int(z) == 0
    assert int(interp.scalar_value(2**32 + 5, T.int32)) == 5
    assert float(interp.scalar_value(1 / 3, T.float16)) == float(np.float16(1 / 3))


# ------------------------------------------------------------------------------- backend


def test_interp_backend_launch_in_place():
    from kdsl.backends.base import BoundArg
    from kdsl.backends.interp import InterpBackend

    be = InterpBackend()
    assert be.is_available() and be.level == "tile" and be.target(4).backend == "interp"
    assert np.__version__ in be.hash()
    kb = KB()
    x, o = kb.param("x", T.float32, True), kb.param("o", T.float32, True)
    offs = kb.iota(4)
    kb.op("store", kb.ptrs(o, offs), kb.op("exp", kb.op("load", kb.ptrs(x, offs))))
    fn = kb.done()
    src = be.codegen(fn)
    assert src.startswith("func @k") and "exp(" in src
    handle = be.build(fn, src)
    xs = np.arange(4, dtype=np.float32).reshape(2, 2)
    out = np.zeros((2, 2), np.float32)
    args = [BoundArg("x", "array", T.float32, xs, host=xs, nbytes=16, numel=4),
            BoundArg("o", "array", T.float32, out, host=out, nbytes=16, numel=4)]
    be.launch(handle, fn, (1, 1, 1), args)
    np.testing.assert_array_equal(out, np.exp(xs))  # written in place, nothing copied back
    args[1] = BoundArg("o", "array", T.float32, object(), host=None, nbytes=16, numel=4)
    with pytest.raises(TypeError, match="host"):
        be.launch(handle, fn, (1, 1, 1), args)


def test_checked_launch_raises_out_of_bounds_error():
    from kdsl.errors import OutOfBoundsError

    kb = KB()
    x = kb.param("x", T.float32, True)
    kb.op("store", kb.ptrs(x, kb.iota(8)), kb.const(1.0, T.float32, (8,)), line=7)
    fn = kb.done()
    fn.options = CompileOptions(check=True)
    with pytest.raises(OutOfBoundsError, match="kern.py:7"):
        run(fn, (1, 1, 1), np.zeros(4, np.float32))


def test_bf16_and_tf32_rounding_keep_scalar_shape():
    from kdsl.ir.interp import _tf32, round_bf16

    assert round_bf16(np.asarray(np.float32(1.5))).shape == ()
    assert _tf32(np.asarray(np.float32(1.5))).shape == ()
    assert round_bf16(np.ones((2, 3), np.float32)).shape == (2, 3)
