"""The shared lowering (Tile IR -> Loop IR), executed by the Loop IR simulator for 1, 4 and 8
threads per program and checked against NumPy and the Tile IR interpreter."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest

from kdsl.errors import CompilationError
from kdsl.ir import interp, loop, tile
from kdsl.ir.loop_interp import round_bf16, run_kernel
from kdsl.ir.types import (
    PointerType,
    TileType,
    bfloat16,
    float16,
    float32,
    int1,
    int8,
    int32,
    scalar,
)
from kdsl.lowering import lower
from kdsl.lowering.mask_version import masked_path
from kdsl.target import Target

THREADS = (1, 4, 8)

# ------------------------------------------------------------- a hand builder of Tile IR


def ptr(dtype) -> TileType:
    return scalar(PointerType(dtype))


class FB:
    """Appends ops to the innermost open block; `fn()` verifies and returns the Function."""

    def __init__(self, name: str, params: list[tuple[str, TileType]]):
        self.name = name
        self.body = tile.Block()
        self.params = [tile.Param(n, t, self.body.add_arg(t, n)) for n, t in params]
        self.args = [p.value for p in self.params]
        self.stack = [self.body]

    def fn(self) -> tile.Function:
        f = tile.Function(self.name, self.params, self.body)
        tile.verify(f)
        return f

    def op(self, kind, operands, rtype=None, regions=None, **attrs):
        types = rtype if isinstance(rtype, list) else ([rtype] if rtype is not None else [])
        o = tile.Op(kind, operands, types, attrs, regions)
        self.stack[-1].append(o)
        if isinstance(rtype, list):
            return o.results
        return o.results[0] if rtype is not None else o

    # ---- conveniences
    def const(self, value, dtype, shape=()):
        return self.op("const", [], TileType(tuple(shape), dtype), value=value)

    def pid(self, axis=0):
        return self.op("program_id", [], scalar(int32), axis=axis)

    def iota(self, n, start=0):
        return self.op("iota", [], TileType((n,), int32), axis=0, start=start)

    def iota2(self, shape, axis):
        return self.op("iota", [], TileType(tuple(shape), int32), axis=axis, start=0)

    def splat(self, x, shape):
        return self.op("splat", [x], TileType(tuple(shape), x.elem))

    def bin(self, kind, a, b):
        elem = int1 if kind in tile.COMPARE_OPS else a.elem
        return self.op(kind, [a, b], TileType(a.shape, elem))

    def un(self, kind, a):
        return self.op(kind, [a], a.type)

    def cast(self, x, dtype):
        return self.op("cast", [x], TileType(x.shape, dtype))

    def reshape(self, x, shape):
        return self.op("reshape", [x], TileType(tuple(shape), x.elem))

    def broadcast(self, x, shape):
        return self.op("broadcast", [x], TileType(tuple(shape), x.elem))

    def trans(self, x, perm=(1, 0)):
        return self.op("trans", [x], TileType(tuple(x.shape[p] for p in perm), x.elem),
                       perm=tuple(perm))

    def addptr(self, p, offs):
        if not p.type.is_scalar or offs.type.is_scalar:
            return self.op("addptr", [p, offs], TileType(offs.shape, p.elem))
        return self.op("addptr", [self.splat(p, offs.shape), offs], TileType(offs.shape, p.elem))

    def load(self, p, mask=None, other=None):
        t = TileType(p.shape, p.elem.pointee)
        if mask is None:
            return self.op("load", [p], t)
        if other is None:
            other = self.const(0, p.elem.pointee, p.shape)
        return self.op("load", [p, mask, other], t)

    def store(self, p, v, mask=None):
        return self.op("store", [p, v] + ([mask] if mask is not None else []))

    def reduce(self, x, kind, axis):
        shape = x.shape[:axis] + x.shape[axis + 1:]
        elem = int32 if kind.startswith("arg") else x.elem
        return self.op("reduce", [x], TileType(shape, elem), op=kind, axis=axis)

    def dot(self, a, b, acc):
        return self.op("dot", [a, b, acc], acc.type, precision="ieee")

    def yield_(self, *vals):
        return self.op("yield", list(vals))

    @contextmanager
    def for_(self, lo, hi, step, inits):
        body = tile.Block()
        iv = body.add_arg(lo.type, "i")
        args = [body.add_arg(v.type, "c") for v in inits]
        o = tile.Op("for", [lo, hi, step, *inits], [v.type for v in inits], {}, [body])
        self.stack[-1].append(o)
        self.stack.append(body)
        yield iv, args, o.results
        self.stack.pop()

    @contextmanager
    def region(self, block):
        self.stack.append(block)
        yield block
        self.stack.pop()


def run_all(fn, grid, make_args, threads=THREADS):
    """Run `fn` through the Tile IR interpreter and through lowering + simulation for each
    thread count; returns (interp args, {T: args})."""
    ref = make_args()
    interp.run(fn, grid, ref)
    outs = {}
    for t in threads:
        args = make_args()
        kernel = lower(fn, Target("test", threads=t))
        run_kernel(kernel, grid, args)
        outs[t] = args
    return ref, outs


def assert_close(a, b, **kw):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                               **kw)


def walk(stmts):
    for s in stmts:
        yield s
        for attr in ("body", "then", "orelse", "cond_body"):
            yield from walk(getattr(s, attr, []) or [])


def offsets_1d(b, block):
    """pid * block + arange(block)."""
    base = b.bin("mul", b.pid(), b.const(block, int32))
    return b.bin("add", b.splat(base, (block,)), b.iota(block))


def offsets_2d(b, rows, cols, row_stride):
    r = b.broadcast(b.reshape(b.iota(rows), (rows, 1)), (rows, cols))
    c = b.broadcast(b.reshape(b.iota(cols), (1, cols)), (rows, cols))
    return b.bin("add", b.bin("mul", r, b.const(row_stride, int32, (rows, cols))), c)


# ----------------------------------------------------------------------------- element-wise


def _axpy(block):
    b = FB("axpy", [("x", ptr(float32)), ("y", ptr(float32)), ("out", ptr(float32)),
                    ("n", scalar(int32))])
    x, y, out, n = b.args
    offs = offsets_1d(b, block)
    m = b.bin("lt", offs, b.splat(n, (block,)))
    xv = b.load(b.addptr(x, offs), m)
    yv = b.load(b.addptr(y, offs), m)
    v = b.un("exp", b.bin("sub", b.bin("mul", xv, yv), xv))
    b.store(b.addptr(out, offs), v, m)
    return b.fn()


@pytest.mark.parametrize("block", [16, 12])
def test_elementwise_masked_ragged(block):
    fn = _axpy(block)
    rng = np.random.default_rng(0)
    x, y = rng.random(37, dtype=np.float32), rng.random(37, dtype=np.float32)
    grid = (-(-37 // block),)
    ref, outs = run_all(fn, grid, lambda: [x.copy(), y.copy(), np.zeros(40, np.float32), 37])
    want = np.exp(x * y - x)
    assert_close(ref[2][:37], want, rtol=1e-6)
    for args in outs.values():
        assert_close(args[2][:37], want, rtol=1e-6)
        assert not args[2][37:].any(), "masked-off elements written"


def test_elementwise_chain_is_one_loop_and_cpu_has_no_barrier():
    fn = _axpy(16)
    k1 = masked_path(lower(fn, Target("cpu", threads=1)))  # (the unmasked copy aside)
    fors = [s for s in k1.body if isinstance(s, loop.For)]
    assert len(fors) == 1
    assert not any(isinstance(s, (loop.Barrier, loop.For)) for s in walk(fors[0].body))
    assert not any(a.space == "shared" for a in k1.arrays)
    assert k1.stored_params == {2}
    assert k1.shared_bytes == 0
    assert k1.name == "axpy" and [p.name for p in k1.params] == ["x", "y", "out", "n"]
    k8 = lower(fn, Target("gpu", threads=8))
    assert k8.threads == 8
    assert sum(isinstance(s, loop.For) for s in k8.body) == 1
    text = loop.print_kernel(k8)
    assert "tid" in text and "kernel axpy" in text
    names = [v.name for v in k8.variables] + [a.name for a in k8.arrays]
    assert len(names) == len(set(names)) and all(n.isidentifier() for n in names)
    loads = [s for s in walk(k8.body) if isinstance(s, loop.Store)]
    assert loads and all(s.loc is not None for s in loads)


def test_int_semantics_division_shifts_int8():
    b = FB("ints", [("a", ptr(int32)), ("b", ptr(int32)), ("o", ptr(int32)),
                    ("c", ptr(int8)), ("o8", ptr(int8))])
    a, bb, o, c, o8 = b.args
    offs = b.iota(8)
    av, bv = b.load(b.addptr(a, offs)), b.load(b.addptr(bb, offs))
    q = b.bin("floordiv", av, bv)
    r = b.bin("mod", av, bv)
    s = b.bin("shl", av, bv)
    res = b.bin("add", b.bin("mul", q, b.const(1000, int32, (8,))), r)
    b.store(b.addptr(o, offs), b.bin("xor", res, s))
    cv = b.load(b.addptr(c, offs))
    b.store(b.addptr(o8, offs), b.bin("mul", cv, cv))
    fn = b.fn()
    av_ = np.array([7, -7, 7, -7, 5, 0, 1, 100], np.int32)
    bv_ = np.array([2, 2, -2, -2, 0, 3, 33, 7], np.int32)
    cv_ = np.array([100, -100, 3, 16, 127, -128, 0, 12], np.int8)
    ref, outs = run_all(fn, (1,), lambda: [av_, bv_, np.zeros(8, np.int32), cv_,
                                           np.zeros(8, np.int8)])
    q = np.where(bv_ == 0, 0, np.trunc(av_ / np.where(bv_ == 0, 1, bv_))).astype(np.int32)
    r = np.where(bv_ == 0, 0, av_ - q * bv_)
    want = (q * 1000 + r) ^ (av_ << (bv_ & 31))
    with np.errstate(all="ignore"):
        want8 = (cv_ * cv_).astype(np.int8)
    np.testing.assert_array_equal(ref[2], want)
    for args in outs.values():
        np.testing.assert_array_equal(args[2], want)
        np.testing.assert_array_equal(args[4], want8)


def test_float16_bfloat16_casts():
    b = FB("half", [("x", ptr(float32)), ("h", ptr(float16)), ("bf", ptr(bfloat16)),
                    ("back", ptr(float32))])
    x, h, bf, back = b.args
    offs = b.iota(16)
    xv = b.load(b.addptr(x, offs))
    xh = b.cast(xv, float16)
    s = b.bin("add", xh, xh)              # float16 arithmetic, rounded
    b.store(b.addptr(h, offs), b.bin("mul", s, xh))
    xb = b.cast(xv, bfloat16)
    b.store(b.addptr(bf, offs), b.bin("add", xb, b.const(1.0, bfloat16, (16,))))
    b.store(b.addptr(back, offs), b.cast(b.cast(xh, bfloat16), float32))
    fn = b.fn()
    rng = np.random.default_rng(1)
    xs = (rng.standard_normal(16) * 100).astype(np.float32)
    ref, outs = run_all(fn, (1,), lambda: [xs, np.zeros(16, np.float16),
                                           np.zeros(16, np.uint16), np.zeros(16, np.float32)])
    xh_ = xs.astype(np.float16)
    want_h = ((xh_ + xh_) * xh_).astype(np.float16)
    bf_vals = np.array([round_bf16(round_bf16(v) + np.float32(1)) for v in xs], np.float32)
    want_back = np.array([round_bf16(v) for v in xh_.astype(np.float32)], np.float32)
    for args in [ref, *outs.values()]:
        np.testing.assert_array_equal(args[1], want_h)
        got_bf = (args[2].astype(np.uint32) << 16).view(np.float32)
        np.testing.assert_array_equal(got_bf, bf_vals)
        np.testing.assert_array_equal(args[3], want_back)


# ----------------------------------------------------------------------- gathers (staging)


def test_broadcast_of_loaded_data_and_trans():
    M, N = 4, 8
    b = FB("outer", [("x", ptr(float32)), ("y", ptr(float32)), ("o", ptr(float32)),
                     ("ot", ptr(float32))])
    x, y, o, ot = b.args
    xv = b.load(b.addptr(x, b.iota(N)))            # (N,)
    yv = b.load(b.addptr(y, b.iota(M)))            # (M,)
    xb = b.broadcast(b.reshape(xv, (1, N)), (M, N))
    yb = b.broadcast(b.reshape(yv, (M, 1)), (M, N))
    prod_ = b.bin("add", b.bin("mul", xb, yb), yb)
    b.store(b.addptr(o, offsets_2d(b, M, N, N)), prod_)
    b.store(b.addptr(ot, offsets_2d(b, N, M, M)), b.trans(prod_))
    fn = b.fn()
    xs, ys = np.arange(N, dtype=np.float32) + 1, np.arange(M, dtype=np.float32) * 10
    ref, outs = run_all(fn, (1,), lambda: [xs, ys, np.zeros(M * N, np.float32),
                                           np.zeros(M * N, np.float32)])
    want = ys[:, None] * xs[None, :] + ys[:, None]
    for args in [ref, *outs.values()]:
        np.testing.assert_array_equal(args[2].reshape(M, N), want)
        np.testing.assert_array_equal(args[3].reshape(N, M), want.T)
    k1 = lower(fn, Target("cpu", threads=1))
    assert not any(isinstance(s, loop.Barrier) for s in walk(k1.body))
    assert not any(a.space == "shared" for a in k1.arrays)
    k4 = lower(fn, Target("gpu", threads=4))
    assert any(isinstance(s, loop.Barrier) for s in walk(k4.body))
    # Offsets built from iota are recomputed, not staged: only xv, yv and prod_ are staged.
    assert sum(a.space == "shared" for a in k4.arrays) == 3
    assert k4.shared_bytes == 4 * (N + M + M * N)


# ------------------------------------------------------------------------------ reductions


def _reduce_fn(shape, kind, axis, dtype=float32):
    b = FB("red", [("x", ptr(dtype)), ("o", ptr(int32 if kind.startswith("arg") else dtype))])
    x, o = b.args
    n = int(np.prod(shape))
    xv = b.load(b.addptr(x, b.reshape(b.iota(n), shape)))
    r = b.reduce(xv, kind, axis)
    if r.type.is_scalar:
        b.store(o, r)
    else:
        b.store(b.addptr(o, b.iota(r.type.numel)), b.reshape(r, (r.type.numel,)))
    return b.fn()


_NP_RED = {"sum": np.sum, "max": np.max, "min": np.min, "argmax": np.argmax,
           "argmin": np.argmin}


@pytest.mark.parametrize("kind", ["sum", "max", "min", "argmax", "argmin"])
@pytest.mark.parametrize("shape,axis", [((4, 8), 0), ((4, 8), 1), ((16,), 0), ((2, 3), 1),
                                        ((2, 4, 2), 1)])
def test_reductions(kind, shape, axis):
    fn = _reduce_fn(shape, kind, axis)
    rng = np.random.default_rng(2)
    xs = rng.integers(-5, 6, size=int(np.prod(shape))).astype(np.float32)  # ties included
    nout = max(1, int(np.prod(shape)) // shape[axis])
    odt = np.int32 if kind.startswith("arg") else np.float32
    ref, outs = run_all(fn, (1,), lambda: [xs, np.zeros(nout, odt)])
    want = np.asarray(_NP_RED[kind](xs.reshape(shape), axis=axis)).reshape(-1)
    np.testing.assert_array_equal(ref[1], want)
    for t, args in outs.items():
        np.testing.assert_array_equal(args[1], want, err_msg=f"threads={t}")


@pytest.mark.parametrize("kind", ["argmax", "argmin", "max", "min"])
def test_argmax_nan_and_ties(kind):
    fn = _reduce_fn((2, 8), kind, 1)
    xs = np.array([1, 3, 3, np.nan, 2, np.nan, 3, 0,
                   -1, -1, 5, 5, -np.inf, 5, 0, 0], np.float32)
    odt = np.int32 if kind.startswith("arg") else np.float32
    ref, outs = run_all(fn, (1,), lambda: [xs, np.zeros(2, odt)])
    want = _NP_RED[kind](xs.reshape(2, 8), axis=1)
    for args in [ref, *outs.values()]:
        np.testing.assert_array_equal(args[1], want)


def test_int_reduce_and_all_neg_inf_argmax():
    fn = _reduce_fn((8,), "max", 0, int32)
    xs = np.array([-7, -9, -2**31, -3, -3, -100, -5, -4], np.int32)
    _, outs = run_all(fn, (1,), lambda: [xs, np.zeros(1, np.int32)])
    assert all(a[1][0] == -3 for a in outs.values())
    fn = _reduce_fn((8,), "argmax", 0)
    xs = np.full(8, -np.inf, np.float32)
    _, outs = run_all(fn, (1,), lambda: [xs, np.full(1, 7, np.int32)])
    assert all(a[1][0] == 0 for a in outs.values())


def test_two_phase_reduction_structure():
    fn = _reduce_fn((2, 16), "sum", 1)
    k = lower(fn, Target("gpu", threads=8))
    parts = [a for a in k.arrays if a.space == "shared" and a.name.startswith("part")]
    assert parts and parts[0].size == 8  # O * P = 2 * 4 partials, one per thread


def test_scalar_reduction_is_uniform():
    """A reduction to a scalar then used by every thread (store by thread 0, and a tile op)."""
    b = FB("norm", [("x", ptr(float32)), ("o", ptr(float32))])
    x, o = b.args
    offs = b.iota(16)
    xv = b.load(b.addptr(x, offs))
    s = b.reduce(xv, "sum", 0)
    b.store(b.addptr(o, offs), b.bin("div", xv, b.splat(s, (16,))))
    fn = b.fn()
    xs = np.arange(16, dtype=np.float32) + 1
    ref, outs = run_all(fn, (1,), lambda: [xs, np.zeros(16, np.float32)])
    for args in [ref, *outs.values()]:
        assert_close(args[1], xs / xs.sum(), rtol=1e-6)


# ------------------------------------------------------------------------------------- dot


def _dot_fn(M, K, N, mask_m=None, mask_n=None, mask_k=None, dtype=float32):
    b = FB("mm", [("a", ptr(dtype)), ("b", ptr(dtype)), ("c", ptr(float32))])
    pa, pb, pc = b.args
    a_offs, b_offs, c_offs = offsets_2d(b, M, K, K), offsets_2d(b, K, N, N), offsets_2d(b, M, N, N)
    if mask_m is None:
        av, bv = b.load(b.addptr(pa, a_offs)), b.load(b.addptr(pb, b_offs))
    else:
        def m2(rows, cols, rmax, cmax):
            r = b.bin("lt", b.iota2((rows, cols), 0), b.const(rmax, int32, (rows, cols)))
            c = b.bin("lt", b.iota2((rows, cols), 1), b.const(cmax, int32, (rows, cols)))
            return b.bin("and", r, c)
        av = b.load(b.addptr(pa, a_offs), m2(M, K, mask_m, mask_k))
        bv = b.load(b.addptr(pb, b_offs), m2(K, N, mask_k, mask_n))
    acc = b.dot(av, bv, b.const(0.0, float32, (M, N)))
    b.store(b.addptr(pc, c_offs), acc)
    return b.fn()


@pytest.mark.parametrize("M,K,N", [(16, 16, 16), (8, 32, 16)])
def test_dot(M, K, N):
    fn = _dot_fn(M, K, N)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((M, K)).astype(np.float32)
    bm = rng.standard_normal((K, N)).astype(np.float32)
    threads = (1, 8) if M * N * K > 2048 else THREADS
    ref, outs = run_all(fn, (1,), lambda: [a.ravel(), bm.ravel(), np.zeros(M * N, np.float32)],
                        threads)
    want = a.astype(np.float64) @ bm
    for args in [ref, *outs.values()]:
        assert_close(args[2].reshape(M, N), want, rtol=1e-4, atol=1e-5)


def test_dot_ragged_float16_inputs():
    M, K, N = 8, 8, 8
    fn = _dot_fn(M, K, N, mask_m=5, mask_n=6, mask_k=7, dtype=float16)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((M, K)).astype(np.float16)
    bm = rng.standard_normal((K, N)).astype(np.float16)
    ref, outs = run_all(fn, (1,), lambda: [a.ravel(), bm.ravel(), np.zeros(M * N, np.float32)])
    a64, b64 = a.astype(np.float64), bm.astype(np.float64)
    a64[5:, :], a64[:, 7:], b64[7:, :], b64[:, 6:] = 0, 0, 0, 0
    want = a64 @ b64
    for args in [ref, *outs.values()]:
        assert_close(args[2].reshape(M, N), want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- control flow


def test_for_loop_carried_accumulator_and_swap():
    """acc += x[i*8 : i*8+8] over a runtime trip count; (p, q) = (q, p) each iteration."""
    b = FB("accum", [("x", ptr(float32)), ("o", ptr(float32)), ("n", scalar(int32)),
                     ("o2", ptr(float32))])
    x, o, n, o2 = b.args
    offs = b.iota(8)
    zero, one = b.const(0, int32), b.const(1, int32)
    init = b.const(0.0, float32, (8,))
    p0 = b.const(1.0, float32, (8,))
    q0 = b.const(2.0, float32, (8,))
    s0 = b.const(0, int32)
    with b.for_(zero, n, one, [init, p0, q0, s0]) as (i, (acc, p, q, s), res):
        row = b.bin("mul", i, b.const(8, int32))
        v = b.load(b.addptr(x, b.bin("add", b.splat(row, (8,)), offs)))
        b.yield_(b.bin("add", acc, v), q, p, b.bin("add", s, i))
    total, pf, _, sf = res
    tail = b.bin("add", total, b.splat(b.cast(sf, float32), (8,)))
    b.store(b.addptr(o, offs), tail)
    b.store(b.addptr(o2, offs), pf)
    fn = b.fn()
    xs = np.arange(40, dtype=np.float32)
    ref, outs = run_all(fn, (1,), lambda: [xs, np.zeros(8, np.float32), 5,
                                           np.zeros(8, np.float32)])
    want = xs.reshape(5, 8).sum(0) + sum(range(5))
    for args in [ref, *outs.values()]:
        np.testing.assert_array_equal(args[1], want)
        np.testing.assert_array_equal(args[3], np.full(8, 2.0, np.float32))  # 5 swaps


def test_if_and_while():
    b = FB("ctl", [("x", ptr(float32)), ("o", ptr(float32)), ("lim", scalar(int32))])
    x, o, lim = b.args
    offs = b.iota(8)
    xv = b.load(b.addptr(x, offs))
    is0 = b.bin("eq", b.pid(), b.const(0, int32))
    then, els = tile.Block(), tile.Block()
    with b.region(then):
        b.yield_(b.bin("mul", xv, b.const(2.0, float32, (8,))))
    with b.region(els):
        b.yield_(b.bin("add", xv, b.const(1.0, float32, (8,))))
    (v,) = b.op("if", [is0], [xv.type], regions=[then, els])
    # while c < lim: c = 2c + 1, t = t + 1
    cond, body = tile.Block(), tile.Block()
    cc, ct = cond.add_arg(scalar(int32), "c"), cond.add_arg(v.type, "t")
    bc, bt = body.add_arg(scalar(int32), "c"), body.add_arg(v.type, "t")
    with b.region(cond):
        b.op("condition", [b.bin("lt", cc, lim), cc, ct])
    with b.region(body):
        b.yield_(b.bin("add", b.bin("mul", bc, b.const(2, int32)), b.const(1, int32)),
                 b.bin("add", bt, b.const(1.0, float32, (8,))))
    c_fin, t_fin = b.op("while", [b.const(0, int32), v], [scalar(int32), v.type],
                        regions=[cond, body])
    base = b.bin("mul", b.pid(), b.const(8, int32))
    out = b.bin("add", t_fin, b.splat(b.cast(c_fin, float32), (8,)))
    b.store(b.addptr(o, b.bin("add", b.splat(base, (8,)), offs)), out)
    fn = b.fn()
    xs = np.arange(8, dtype=np.float32)
    ref, outs = run_all(fn, (2,), lambda: [xs, np.zeros(16, np.float32), 10])
    # c: 0 -> 1 -> 3 -> 7 -> 15 (4 iterations)
    want = np.concatenate([xs * 2 + 4 + 15, xs + 1 + 4 + 15])
    for args in [ref, *outs.values()]:
        np.testing.assert_array_equal(args[1], want)


def test_scalar_store_and_atomic_once_per_program():
    b = FB("once", [("cnt", ptr(int32)), ("o", ptr(int32))])
    cnt, o = b.args
    old = b.op("atomic_rmw", [cnt, b.const(1, int32)], scalar(int32), op="add", sem="acq_rel",
               scope="gpu")
    b.store(b.addptr(o, b.pid()), old)
    fn = b.fn()
    for t in THREADS:
        c, out = np.zeros(1, np.int32), np.full(3, -1, np.int32)
        k = lower(fn, Target("t", threads=t))
        assert k.stored_params == {0, 1}
        run_kernel(k, (3,), [c, out])
        assert c[0] == 3 and sorted(out) == [0, 1, 2]


def test_shared_memory_limit_names_the_op():
    fn = _reduce_fn((4, 8), "sum", 1)
    with pytest.raises(CompilationError, match="reduce"):
        lower(fn, Target("tiny", threads=8, shared_bytes=16))


def test_mask_type_is_bool():
    fn = _axpy(8)
    k = lower(fn, Target("cpu"))
    loads = [s.value for s in walk(k.body) if isinstance(s, loop.Assign)
             and isinstance(s.value, loop.Load)]
    assert loads and all(ld.mask.dtype == int1 for ld in loads)
    assert TileType((8,), float32).numel == 8


# ------------------------------------------------------------- shared memory and structure


def test_shared_memory_reused_across_stagings_in_a_loop():
    """Two broadcasts of loaded rows per iteration: the second staging reuses the first's
    shared array, and iterations stay correct (barriers protect the previous readers)."""
    N = 8
    b = FB("rows", [("x", ptr(float32)), ("o", ptr(float32)), ("n", scalar(int32))])
    x, o, n = b.args
    offs = b.iota(N)
    zero, one = b.const(0, int32), b.const(1, int32)
    init = b.const(0.0, float32, (N, N))
    with b.for_(zero, n, one, [init]) as (i, (acc,), res):
        row = b.splat(b.bin("mul", i, b.const(N, int32)), (N,))
        xv = b.load(b.addptr(x, b.bin("add", row, offs)))
        outer = b.broadcast(b.reshape(xv, (1, N)), (N, N))     # staging 1: x as a row
        acc1 = b.bin("add", acc, outer)
        yv = b.un("exp2", b.load(b.addptr(x, b.bin("add", row, offs))))
        col = b.broadcast(b.reshape(yv, (N, 1)), (N, N))       # staging 2: exp2(x) as a column
        b.yield_(b.bin("add", acc1, col))
    b.store(b.addptr(o, offsets_2d(b, N, N, N)), res[0])
    fn = b.fn()
    xs = np.arange(3 * N, dtype=np.float32) / 8
    ref, outs = run_all(fn, (1,), lambda: [xs, np.zeros(N * N, np.float32), 3])
    rows = xs.reshape(3, N)
    want = rows.sum(0)[None, :] + np.exp2(rows).sum(0)[:, None]
    for args in [ref, *outs.values()]:
        assert_close(args[1].reshape(N, N), want, rtol=1e-6)
    k = lower(fn, Target("gpu", threads=4))
    assert [a.size for a in k.arrays if a.space == "shared"] == [N]
    assert k.shared_bytes == 4 * N


def test_loop_accumulator_is_updated_in_place():
    """`acc = acc + x` in a loop writes the carried array directly: no copy loop."""
    b = FB("acc", [("x", ptr(float32)), ("o", ptr(float32)), ("n", scalar(int32))])
    x, o, n = b.args
    offs = b.iota(16)
    with b.for_(b.const(0, int32), n, b.const(1, int32),
                [b.const(0.0, float32, (16,))]) as (i, (acc,), res):
        row = b.splat(b.bin("mul", i, b.const(16, int32)), (16,))
        b.yield_(b.bin("add", acc, b.load(b.addptr(x, b.bin("add", row, offs)))))
    b.store(b.addptr(o, offs), res[0])
    fn = b.fn()
    for t in (1, 4):
        k = lower(fn, Target("t", threads=t))
        (body,) = [s.body for s in k.body if isinstance(s, loop.For) and s.var.name.startswith("i")]
        assert sum(isinstance(s, loop.For) for s in body) == 1, loop.print_kernel(k)
        xs = np.arange(48, dtype=np.float32)
        out = np.zeros(16, np.float32)
        run_kernel(k, (1,), [xs, out, 3])
        np.testing.assert_array_equal(out, xs.reshape(3, 16).sum(0))


def test_dot_operands_staged_together():
    k = lower(_dot_fn(8, 8, 8), Target("gpu", threads=8))
    assert sum(isinstance(s, loop.Barrier) for s in walk(k.body)) == 2
    assert sum(a.space == "shared" for a in k.arrays) == 2


def test_through_the_frontend():
    """Kernels written in the DSL, through the frontend and the Tile IR passes."""
    kd = pytest.importorskip("kdsl")
    try:
        from kdsl.frontend import build_function
        from kdsl.passes import run_tile_passes
    except ImportError:
        pytest.skip("frontend not available")

    def softmax(x_ptr, out_ptr, n_cols, BLOCK: kd.constexpr):
        row = kd.program_id(0)
        offs = kd.arange(0, BLOCK)
        m = offs < n_cols
        x = kd.load(x_ptr + row * n_cols + offs, mask=m, other=-float("inf"))
        x = x - kd.max(x, axis=0)
        e = kd.exp(x)
        kd.store(out_ptr + row * n_cols + offs, e / kd.sum(e, axis=0), mask=m)

    def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: kd.constexpr, BN: kd.constexpr,
               BK: kd.constexpr):
        rm = kd.program_id(0) * BM + kd.arange(0, BM)
        rn = kd.program_id(1) * BN + kd.arange(0, BN)
        rk = kd.arange(0, BK)
        acc = kd.zeros((BM, BN), kd.float32)
        for k in range(0, K, BK):
            a = kd.load(a_ptr + rm[:, None] * K + (k + rk)[None, :],
                        mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
            b = kd.load(b_ptr + (k + rk)[:, None] * N + rn[None, :],
                        mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += kd.dot(a, b)
        kd.store(c_ptr + rm[:, None] * N + rn[None, :], acc,
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    P, i32 = ptr(float32), scalar(int32)
    fn, _ = run_tile_passes(build_function(softmax, {"x_ptr": P, "out_ptr": P, "n_cols": i32},
                                           {"BLOCK": 16}))
    x = np.random.default_rng(5).random((3, 13), dtype=np.float32)
    want = np.exp(x - x.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    _, outs = run_all(fn, (3,), lambda: [x.ravel(), np.zeros(39, np.float32), 13])
    for args in outs.values():
        assert_close(args[1].reshape(3, 13), want, rtol=1e-6)

    fn, _ = run_tile_passes(build_function(
        matmul, {"a_ptr": P, "b_ptr": P, "c_ptr": P, "M": i32, "N": i32, "K": i32},
        {"BM": 8, "BN": 8, "BK": 4}))
    M, N, K = 10, 9, 7
    a = np.random.default_rng(6).random((M, K), dtype=np.float32)
    bm = np.random.default_rng(7).random((K, N), dtype=np.float32)
    _, outs = run_all(fn, (2, 2), lambda: [a.ravel(), bm.ravel(), np.zeros(M * N, np.float32),
                                           M, N, K], threads=(1, 8))
    for args in outs.values():
        assert_close(args[2].reshape(M, N), a.astype(np.float64) @ bm, rtol=1e-5)


@pytest.mark.parametrize("kind", ["sum", "argmax"])
def test_reduce_and_dot_of_a_transpose_read_its_source(kind):
    """reduce(trans(x)) and dot(a, trans(b)): the transpose is never materialised."""
    M, N = 4, 8
    b = FB("tr", [("x", ptr(float32)), ("o", ptr(float32)), ("r", ptr(float32)),
                  ("ri", ptr(int32))])
    x, o, r, ri = b.args
    xv = b.load(b.addptr(x, offsets_2d(b, M, N, N)))           # (M, N)
    xt = b.trans(xv)                                              # (N, M)
    red = b.reduce(xt, kind, 1)                                   # (N,)
    if kind == "sum":
        b.store(b.addptr(r, b.iota(N)), red)
    else:
        b.store(b.addptr(ri, b.iota(N)), red)
    gram = b.dot(xv, xt, b.const(0.0, float32, (M, M)))           # x @ x.T
    b.store(b.addptr(o, offsets_2d(b, M, M, M)), gram)
    fn = b.fn()
    xs = np.random.default_rng(8).integers(-3, 4, (M, N)).astype(np.float32)
    ref, outs = run_all(fn, (1,), lambda: [xs.ravel(), np.zeros(M * M, np.float32),
                                           np.zeros(N, np.float32), np.zeros(N, np.int32)])
    for args in [ref, *outs.values()]:
        np.testing.assert_array_equal(args[1].reshape(M, M), xs @ xs.T)
        if kind == "sum":
            np.testing.assert_array_equal(args[2], xs.T.sum(1))
        else:
            np.testing.assert_array_equal(args[3], xs.T.argmax(1))
    for t in (1, 4):
        k = lower(fn, Target("t", threads=t))
        assert [a.size for a in k.arrays if a.space == "reg" and a.size * t == M * N] == \
            [M * N // t], "only x itself is held in registers"


def test_tile_atomic_add_returns_old_values():
    b = FB("atom", [("cnt", ptr(int32)), ("old", ptr(int32))])
    cnt, old = b.args
    offs = b.iota(12)
    bucket = b.bin("mod", offs, b.const(3, int32, (12,)))
    prev = b.op("atomic_rmw", [b.addptr(cnt, bucket), b.const(1, int32, (12,))],
                TileType((12,), int32), op="add", sem="relaxed", scope="gpu")
    b.store(b.addptr(old, b.bin("add", b.splat(b.bin("mul", b.pid(), b.const(12, int32)),
                                                (12,)), offs)), prev)
    fn = b.fn()
    for t in THREADS:
        c, o = np.zeros(3, np.int32), np.full(24, -1, np.int32)
        run_kernel(lower(fn, Target("t", threads=t)), (2,), [c, o])
        np.testing.assert_array_equal(c, [8, 8, 8])
        for j in range(3):  # each bucket handed out 0..7 exactly once
            assert sorted(o[j::3]) == list(range(8))


def test_attention_through_the_frontend():
    import kdsl as kd

    try:
        from kdsl.frontend import build_function
        from kdsl.passes import run_tile_passes
    except ImportError:
        pytest.skip("frontend not available")

    def attn(q_ptr, k_ptr, v_ptr, o_ptr, S, BM: kd.constexpr, BN: kd.constexpr,
             D: kd.constexpr):
        rm = kd.program_id(0) * BM + kd.arange(0, BM)
        rd = kd.arange(0, D)
        q = kd.load(q_ptr + rm[:, None] * D + rd[None, :])
        m_i = kd.full((BM,), -float("inf"), kd.float32)
        l_i = kd.zeros((BM,), kd.float32)
        acc = kd.zeros((BM, D), kd.float32)
        for start in range(0, S, BN):
            rn = start + kd.arange(0, BN)
            k = kd.load(k_ptr + rn[:, None] * D + rd[None, :], mask=rn[:, None] < S, other=0.0)
            qk = kd.where(rn[None, :] < S, kd.dot(q, kd.trans(k)), -float("inf"))
            m_ij = kd.maximum(m_i, kd.max(qk, axis=1))
            p = kd.exp(qk - m_ij[:, None])
            alpha = kd.exp(m_i - m_ij)
            l_i = l_i * alpha + kd.sum(p, axis=1)
            v = kd.load(v_ptr + rn[:, None] * D + rd[None, :], mask=rn[:, None] < S, other=0.0)
            acc = acc * alpha[:, None] + kd.dot(p, v)
            m_i = m_ij
        kd.store(o_ptr + rm[:, None] * D + rd[None, :], acc / l_i[:, None])

    P = ptr(float32)
    fn, _ = run_tile_passes(build_function(
        attn, {"q_ptr": P, "k_ptr": P, "v_ptr": P, "o_ptr": P, "S": scalar(int32)},
        {"BM": 4, "BN": 4, "D": 8}))
    S, rng = 7, np.random.default_rng(9)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for shape in
               [(8, 8), (S, 8), (S, 8)])
    s = q.astype(np.float64) @ k.T
    p = np.exp(s - s.max(1, keepdims=True))
    want = (p / p.sum(1, keepdims=True)) @ v
    _, outs = run_all(fn, (2,), lambda: [q.ravel(), k.ravel(), v.ravel(),
                                         np.zeros(64, np.float32), S], threads=(1, 4))
    for args in outs.values():
        assert_close(args[3].reshape(8, 8), want, rtol=1e-5, atol=1e-6)
    k4 = lower(fn, Target("gpu", threads=4, shared_bytes=48 * 1024))
    assert k4.shared_bytes == 2 * 4 * 32  # two 4x8 float32 buffers, reused


@pytest.mark.parametrize("half", [float16, bfloat16])
def test_bitcast_of_16_bit_floats(half):
    """bits -> half -> stored half, and half -> bits, for normals, subnormals, zeros, inf, NaN."""
    from kdsl.ir.types import int16, uint16

    b = FB("bits", [("bits", ptr(uint16)), ("h", ptr(half)), ("back", ptr(int16))])
    pb, ph, pback = b.args
    offs = b.bin("add", b.splat(b.bin("mul", b.pid(), b.const(16, int32)), (16,)), b.iota(16))
    bits = b.load(b.addptr(pb, offs))
    hv = b.op("bitcast", [bits], TileType((16,), half))
    b.store(b.addptr(ph, offs), hv)
    hl = b.load(b.addptr(ph, offs))
    b.store(b.addptr(pback, offs), b.op("bitcast", [hl], TileType((16,), int16)))
    fn = b.fn()
    pats = np.array([0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x7BFF, 0x7C00,
                     0xFC00, 0x7E00, 0x3555, 0x8201, 0x4049, 0x3F80, 0xC2F7, 0x0080, 0x007F,
                     0x7F80, 0xFF80, 0x7FC0, 0x1234, 0x9ABC, 0x5678, 0x0200, 0x8001, 0x00FF,
                     0x6C00, 0xEC01, 0x3001, 0x2000, 0xA000], np.uint16)
    store = np.float16 if half == float16 else np.uint16
    ref, outs = run_all(fn, (2,), lambda: [pats.copy(), np.zeros(32, store),
                                           np.zeros(32, np.int16)], threads=(1, 4))
    # NaN payloads may be quietened; every other pattern round-trips exactly.
    if half == float16:
        nan = ((pats & 0x7C00) == 0x7C00) & ((pats & 0x3FF) != 0)
    else:
        nan = ((pats & 0x7F80) == 0x7F80) & ((pats & 0x7F) != 0)
    for args in [ref, *outs.values()]:
        got = args[1].view(np.uint16)
        np.testing.assert_array_equal(got[~nan], pats[~nan])
        np.testing.assert_array_equal(args[2].view(np.uint16)[~nan], pats[~nan])
        assert ((got[nan] & 0x7FFF) > (0x7C00 if half == float16 else 0x7F80)).all()


def test_yield_of_a_scalar_read_by_the_last_group():
    """x = x + s; s = s + 1: the tile update must see the old s."""
    b = FB("sc", [("o", ptr(float32)), ("n", scalar(int32))])
    o, n = b.args
    with b.for_(b.const(0, int32), n, b.const(1, int32),
                [b.const(0.0, float32, (8,)), b.const(1.0, float32)]) as (_i, (x, s), res):
        b.yield_(b.bin("add", x, b.splat(s, (8,))), b.bin("add", s, b.const(1.0, float32)))
    b.store(b.addptr(o, b.iota(8)), res[0])
    fn = b.fn()
    ref, outs = run_all(fn, (1,), lambda: [np.zeros(8, np.float32), 4])
    for args in [ref, *outs.values()]:
        np.testing.assert_array_equal(args[0], np.full(8, 1.0 + 2 + 3 + 4, np.float32))


def test_dot_accumulating_in_a_loop():
    """acc = dot(a_i, b_i, acc) over K blocks: on the CPU the carried array is updated in
    place (no copy loop); every thread count gives bitwise the same result."""
    M, BK, N, KB = 4, 2, 8, 3
    b = FB("kloop", [("a", ptr(float32)), ("b", ptr(float32)), ("c", ptr(float32))])
    pa, pb, pc = b.args
    a_offs, b_offs = offsets_2d(b, M, BK, BK * KB), offsets_2d(b, BK, N, N)
    with b.for_(b.const(0, int32), b.const(KB, int32), b.const(1, int32),
                [b.const(0.0, float32, (M, N))]) as (i, (acc,), res):
        ka = b.splat(b.bin("mul", i, b.const(BK, int32)), (M, BK))
        kb = b.splat(b.bin("mul", i, b.const(BK * N, int32)), (BK, N))
        av = b.load(b.addptr(pa, b.bin("add", a_offs, ka)))
        bv = b.load(b.addptr(pb, b.bin("add", b_offs, kb)))
        b.yield_(b.dot(av, bv, acc))
    b.store(b.addptr(pc, offsets_2d(b, M, N, N)), res[0])
    fn = b.fn()
    rng = np.random.default_rng(10)
    a = rng.standard_normal((M, BK * KB)).astype(np.float32)
    bm = rng.standard_normal((BK * KB, N)).astype(np.float32)
    ref, outs = run_all(fn, (1,), lambda: [a.ravel(), bm.ravel(), np.zeros(M * N, np.float32)])
    assert_close(ref[2].reshape(M, N), a.astype(np.float64) @ bm, rtol=1e-5, atol=1e-6)
    for args in outs.values():
        np.testing.assert_array_equal(args[2], outs[1][2])
    k1 = lower(fn, Target("cpu", threads=1))
    (body,) = [s.body for s in k1.body if isinstance(s, loop.For) and s.var.name.startswith("i")]
    stored = {s.array.name for s in walk(body) if isinstance(s, loop.ArrayStore)}
    carried = [a.name for a in k1.arrays if a.size == M * N]
    assert len(carried) == 1 and carried[0] in stored  # accumulated in place, no second array
