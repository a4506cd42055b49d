"""Reductions through warp shuffles (kdsl/lowering/reduce_warp.py), run by the Loop IR
simulator for 32, 64 and 256 threads (warps of 32, the "warp_shuffle" capability, with and
without the vector layout) and checked against NumPy; the shuffle's simulation; the generic
strategy where the warp one does not apply; the library's softmax, layer_norm and rms_norm
lowered for CUDA and simulated."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd
from kdsl.compile_options import CompileOptions
from kdsl.frontend import build_function
from kdsl.ir import loop
from kdsl.ir.loop_interp import run_kernel
from kdsl.ir.types import PointerType, TileType, float16, float32, int32, scalar
from kdsl.lowering import lower
from kdsl.lowering.reduce_warp import shfl_xor_lanes
from kdsl.passes import run_tile_passes
from kdsl.target import Target

THREADS = (32, 64, 256)
WARP = frozenset({"warp_shuffle"})
WARP_VEC = frozenset({"warp_shuffle", "vector_loads"})
RNG = np.random.default_rng(31)


def _walk(stmts):
    for s in stmts:
        yield s
        for attr in ("body", "then", "orelse", "cond_body"):
            yield from _walk(getattr(s, attr, []) or [])


def shuffles(k: loop.Kernel) -> int:
    return sum(isinstance(s, loop.Intrinsic) and s.name == "shfl_xor" for s in _walk(k.body))


def barriers(k: loop.Kernel) -> int:
    return sum(isinstance(s, loop.Barrier) for s in _walk(k.body))


def ptr(dtype) -> TileType:
    return scalar(PointerType(dtype))


# ------------------------------------------------------------------------------ kernels


def full_sum(x_ptr, out_ptr, n, N: kd.constexpr, FILL: kd.constexpr):
    offs = kd.arange(0, N)
    x = kd.load(x_ptr + offs, mask=offs < n, other=0)
    kd.store(out_ptr, kd.sum(x, axis=0))


def full_max(x_ptr, out_ptr, n, N: kd.constexpr, FILL: kd.constexpr):
    offs = kd.arange(0, N)
    x = kd.load(x_ptr + offs, mask=offs < n, other=FILL)
    kd.store(out_ptr, kd.max(x, axis=0))


def full_argmax(x_ptr, out_ptr, n, N: kd.constexpr, FILL: kd.constexpr):
    offs = kd.arange(0, N)
    x = kd.load(x_ptr + offs, mask=offs < n, other=FILL)
    kd.store(out_ptr, kd.argmax(x, axis=0))


def rows_sum(x_ptr, out_ptr, n, M: kd.constexpr, N: kd.constexpr, FILL: kd.constexpr):
    rows = kd.arange(0, M)
    cols = kd.arange(0, N)
    x = kd.load(x_ptr + rows[:, None] * N + cols[None, :], mask=cols[None, :] < n, other=0)
    kd.store(out_ptr + rows, kd.sum(x, axis=1))


def rows_max(x_ptr, out_ptr, n, M: kd.constexpr, N: kd.constexpr, FILL: kd.constexpr):
    rows = kd.arange(0, M)
    cols = kd.arange(0, N)
    x = kd.load(x_ptr + rows[:, None] * N + cols[None, :], mask=cols[None, :] < n,
                other=FILL)
    kd.store(out_ptr + rows, kd.max(x, axis=1))


def rows_argmax(x_ptr, out_ptr, n, M: kd.constexpr, N: kd.constexpr, FILL: kd.constexpr):
    rows = kd.arange(0, M)
    cols = kd.arange(0, N)
    x = kd.load(x_ptr + rows[:, None] * N + cols[None, :], mask=cols[None, :] < n,
                other=FILL)
    kd.store(out_ptr + rows, kd.argmax(x, axis=1))


def cols_sum(x_ptr, out_ptr, n, M: kd.constexpr, N: kd.constexpr, FILL: kd.constexpr):
    rows = kd.arange(0, M)
    cols = kd.arange(0, N)
    x = kd.load(x_ptr + rows[:, None] * N + cols[None, :], mask=cols[None, :] < n, other=0)
    kd.store(out_ptr + cols, kd.sum(x, axis=0))


@kd.jit
def _pick(a, ia, b, ib):
    """argmin with the first index on ties, as a combine function of (value, index)."""
    take = (b < a) | ((b == a) & (ib < ia))
    return kd.where(take, b, a), kd.where(take, ib, ia)


def rows_tuple_argmin(x_ptr, out_ptr, idx_ptr, M: kd.constexpr, N: kd.constexpr):
    rows = kd.arange(0, M)
    cols = kd.arange(0, N)
    x = kd.load(x_ptr + rows[:, None] * N + cols[None, :])
    ids = kd.broadcast_to(cols[None, :], (M, N))
    v, i = kd.reduce((x, ids), 1, _pick)
    kd.store(out_ptr + rows, v)
    kd.store(idx_ptr + rows, i)


def full_tuple_argmin(x_ptr, out_ptr, idx_ptr, N: kd.constexpr):
    offs = kd.arange(0, N)
    v, i = kd.reduce((kd.load(x_ptr + offs), offs), 0, _pick)
    kd.store(out_ptr, v)
    kd.store(idx_ptr, i)


def _fn(src, types, cx, aligned=()):
    if "FILL" in src.__code__.co_varnames:  # what masked elements read: the reduction's identity
        elem = types["x_ptr"].elem.pointee
        cx = {**cx, "FILL": 0 if src in (full_sum, rows_sum, cols_sum) else
              (-2**31 if elem == int32 else -float("inf"))}
    fn, _ = run_tile_passes(build_function(src, types, cx))
    fn.options = CompileOptions(multiple_of_16=tuple(aligned))
    return fn


def _run(fn, T, caps, args, grid=(1,)):
    k = lower(fn, Target("gpu", threads=T, warp_size=32, caps=caps))
    run_kernel(k, grid, args)  # race detection on
    return k


def _types(dtype, out_dtype):
    return {"x_ptr": ptr(dtype), "out_ptr": ptr(out_dtype), "n": scalar(int32)}


def _data(dtype, size):
    if dtype == int32:
        return RNG.integers(-1000, 1000, size).astype(np.int32)
    x = RNG.integers(-8, 9, size).astype(np.float32)  # ties for argmax
    x += RNG.random(size).astype(np.float32) * (RNG.random(size) < 0.5)
    return x.astype(np.float16) if dtype == float16 else x


def _want(kind, x, axis):
    if kind == "sum":
        acc = np.int64 if x.dtype == np.int32 else np.float64
        return x.astype(acc).sum(axis=axis)
    if kind == "max":
        return x.max(axis=axis)
    return x.argmax(axis=axis)


FULL = {"sum": full_sum, "max": full_max, "argmax": full_argmax}
ROWS = {"sum": rows_sum, "max": rows_max, "argmax": rows_argmax}


def _out_dtype(kind, dtype):
    if kind == "argmax":
        return int32, np.int32
    if kind == "sum" and dtype == float16:
        return float32, np.float32
    return dtype, {float32: np.float32, float16: np.float16, int32: np.int32}[dtype]


def _check(kind, got, want, dtype, length):
    if kind == "sum" and dtype != int32:
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5,
                                   atol=1e-5 * length)
    else:
        np.testing.assert_array_equal(got, want.astype(got.dtype))


# ---------------------------------------------------------------------------- whole tiles


@pytest.mark.parametrize("T", THREADS)
@pytest.mark.parametrize("kind", ["sum", "max", "argmax"])
@pytest.mark.parametrize("per_thread", [0.5, 1, 4])
def test_whole_tile(T, kind, per_thread):
    """N elements of T threads (half of them idle, one, or four each); the last elements
    masked off (ragged)."""
    N = int(T * per_thread)
    n = N - 3
    for dtype, caps in ((float32, WARP), (int32, WARP_VEC) if kind != "argmax" else
                        (float16, WARP_VEC)):
        out_t, out_np = _out_dtype(kind, dtype)
        fn = _fn(FULL[kind], _types(dtype, out_t), {"N": N})
        x = _data(dtype, N)
        out = np.zeros(1, out_np)
        k = _run(fn, T, caps, [x, out, n])
        assert shuffles(k) > 0
        _check(kind, out[0], _want(kind, x[:n], 0), dtype, n)


def test_three_warps():
    """A thread count that is not a power of two: the warps' slots are combined in order."""
    for src, kind in ((full_sum, "sum"), (full_argmax, "argmax")):
        fn = _fn(src, _types(float32, int32 if kind == "argmax" else float32), {"N": 192})
        x = _data(float32, 192)
        out = np.zeros(1, np.int32 if kind == "argmax" else np.float32)
        assert shuffles(_run(fn, 96, WARP, [x, out, 190])) == 5 * (2 if kind == "argmax" else 1)
        _check(kind, out[0], _want(kind, x[:190], 0), float32, 190)


@pytest.mark.parametrize("T", THREADS)
def test_whole_tile_shuffles_within_and_across_warps(T):
    """Five steps in each warp, then log2(warps) steps over the warps' slots; two barriers."""
    fn = _fn(full_sum, _types(float32, float32), {"N": 4 * T})
    k = lower(fn, Target("gpu", threads=T, warp_size=32, caps=WARP))
    warps = T // 32
    assert shuffles(k) == 5 + (warps.bit_length() - 1 if warps > 1 else 0)
    assert barriers(k) == 2
    assert not any(a.space == "shared" and a.size > warps for a in k.arrays)


# ----------------------------------------------------------------------------------- rows


ROW_SHAPES = [
    (4, 8),      # a row in 8 lanes of a warp (several rows per warp)
    (2, 32),     # one warp per row (T = 32: a row in each of 2 slots)
    (8, 64),     # two warps per row at T >= 64
    (2, 1024),   # every thread holds part of every row
    (64, 4),     # a row is one vector run (T = 32): one thread per row, no shuffle
]


@pytest.mark.parametrize("T", THREADS)
@pytest.mark.parametrize("kind", ["sum", "max", "argmax"])
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_row_reductions(T, kind, shape):
    M, N = shape
    if M * N > 4 * T and T == 256 or M * N > 64 * T:
        pytest.skip("slow in the simulator")
    for dtype, caps in ((float32, WARP), (float32, WARP_VEC),
                        (int32 if kind != "argmax" else float16, WARP_VEC)):
        out_t, out_np = _out_dtype(kind, dtype)
        fn = _fn(ROWS[kind], _types(dtype, out_t), {"M": M, "N": N})
        x = _data(dtype, (M, N))
        for n in (N, max(N - 3, 1)):  # full rows, then ragged masked rows
            out = np.zeros(M, out_np)
            _run(fn, T, caps, [x.ravel(), out, n])
            _check(kind, out, _want(kind, x[:, :n], 1), dtype, n)


@pytest.mark.parametrize("T", THREADS)
def test_rows_use_shuffles_and_no_staging(T):
    """A 4 x 256 row sum: the input is never copied to shared memory (only the partials)."""
    M, N = 4, 256
    fn = _fn(rows_sum, _types(float32, float32), {"M": M, "N": N})
    k = lower(fn, Target("gpu", threads=T, warp_size=32, caps=WARP_VEC))
    assert shuffles(k) == 5
    assert sum(a.size for a in k.arrays if a.space == "shared") <= M * max(N // 32, T // 32)
    generic = lower(fn, Target("gpu", threads=T, warp_size=32, caps=frozenset({"vector_loads"})))
    assert shuffles(generic) == 0
    assert any(a.space == "shared" and a.size == M * N for a in generic.arrays)


@pytest.mark.parametrize("T", (32, 256))
def test_exactly_the_generic_strategy_where_order_is_not_observable(T):
    """Integer sums, max and argmax: bitwise the generic strategy's results."""
    M, N = 4, 128
    for kind, dtype in (("sum", int32), ("max", float32), ("argmax", float32)):
        out_t, out_np = _out_dtype(kind, dtype)
        fn = _fn(ROWS[kind], _types(dtype, out_t), {"M": M, "N": N})
        x = _data(dtype, (M, N))
        x.ravel()[5] = np.nan if dtype == float32 else x.ravel()[5]  # NaN wins max and argmax
        outs = []
        for caps in (WARP, frozenset()):
            out = np.zeros(M, out_np)
            _run(fn, T, caps, [x.ravel(), out, N - 5])
            outs.append(out)
        np.testing.assert_array_equal(outs[0], outs[1])
        if kind == "max":
            assert np.isnan(outs[0][0])


@pytest.mark.parametrize("T", THREADS)
def test_tuple_reductions_with_a_combine_function(T):
    M, N = 4, 64
    types = {"x_ptr": ptr(float32), "out_ptr": ptr(float32), "idx_ptr": ptr(int32)}
    x = RNG.integers(-4, 5, (M, N)).astype(np.float32)  # ties: the first index wins
    v, i = np.zeros(M, np.float32), np.zeros(M, np.int32)
    k = _run(_fn(rows_tuple_argmin, types, {"M": M, "N": N}), T, WARP_VEC, [x.ravel(), v, i])
    assert shuffles(k) > 0
    np.testing.assert_array_equal(v, x.min(1))
    np.testing.assert_array_equal(i, x.argmin(1))
    xf = RNG.integers(-4, 5, 2 * T).astype(np.float32)
    v1, i1 = np.zeros(1, np.float32), np.zeros(1, np.int32)
    _run(_fn(full_tuple_argmin, types, {"N": 2 * T}), T, WARP, [xf, v1, i1])
    assert (v1[0], i1[0]) == (xf.min(), xf.argmin())


@pytest.mark.parametrize("T", (32, 64))
def test_other_axes_and_gathers_use_the_generic_strategy(T):
    """A column sum (rows not contiguous) falls back, and gives the right numbers."""
    M, N = 8, 16
    fn = _fn(cols_sum, _types(float32, float32), {"M": M, "N": N})
    x = _data(float32, (M, N))
    out = np.zeros(N, np.float32)
    k = _run(fn, T, WARP, [x.ravel(), out, N])
    assert shuffles(k) == 0
    np.testing.assert_allclose(out, x.astype(np.float64).sum(0), rtol=1e-6, atol=1e-5)


def test_no_shuffles_without_the_capability_or_with_other_warps():
    fn = _fn(full_sum, _types(float32, float32), {"N": 256})
    for t in (Target("gpu", threads=64, warp_size=32), Target("gpu", threads=8, caps=WARP),
              Target("gpu", threads=64, warp_size=16, caps=WARP)):
        assert shuffles(lower(fn, t)) == 0


def test_inside_a_loop_the_partials_are_protected():
    """A reduction per loop iteration: the slots of one iteration are not overwritten while
    another thread reads them (the simulator's race detector)."""
    def k(x_ptr, out_ptr, n, N: kd.constexpr):
        acc = 0.0
        for i in range(n):
            acc += kd.max(kd.load(x_ptr + i * N + kd.arange(0, N)), axis=0)
        kd.store(out_ptr, acc)

    x = _data(float32, (5, 128))
    out = np.zeros(1, np.float32)
    _run(_fn(k, _types(float32, float32), {"N": 128}), 64, WARP, [x.ravel(), out, 5])
    want = np.float32(0)
    for m in x.max(1):  # the loop's float32 sum, in order
        want = np.float32(want + m)
    assert out[0] == want


def attention(q_ptr, k_ptr, v_ptr, o_ptr, M: kd.constexpr, N: kd.constexpr, D: kd.constexpr):
    rm, rn, rd = kd.arange(0, M), kd.arange(0, N), kd.arange(0, D)
    q = kd.load(q_ptr + rm[:, None] * D + rd[None, :])
    k = kd.load(k_ptr + rn[:, None] * D + rd[None, :])
    v = kd.load(v_ptr + rn[:, None] * D + rd[None, :])
    s = kd.dot(q, kd.trans(k))
    p = kd.exp(s - kd.max(s, 1)[:, None])
    kd.store(o_ptr + rm[:, None] * D + rd[None, :], kd.dot(p / kd.sum(p, 1)[:, None], v))


@pytest.mark.parametrize("T", (32, 64))
def test_row_reductions_of_a_dot_feeding_a_dot(T):
    """Attention's row max and sum of a score tile (4 lanes per row at T = 64)."""
    M = N = D = 16
    types = {n: ptr(float32) for n in ("q_ptr", "k_ptr", "v_ptr", "o_ptr")}
    q, k, v = (RNG.standard_normal((M, D)).astype(np.float32) for _ in range(3))
    o = np.zeros((M, D), np.float32)
    kern = _run(_fn(attention, types, {"M": M, "N": N, "D": D}), T, WARP_VEC,
                [q.ravel(), k.ravel(), v.ravel(), o.ravel()])
    assert shuffles(kern) > 0
    s = q.astype(np.float64) @ k.T
    p = np.exp(s - s.max(1, keepdims=True))
    np.testing.assert_allclose(o, (p / p.sum(1, keepdims=True)) @ v, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------- the shuffle


def test_shfl_xor_lanes_exchanges_across_the_warp():
    lanes = [[np.float32(i), np.int32(4)] for i in range(32)]
    assert [r[0] for r in shfl_xor_lanes(lanes)] == [float(i ^ 4) for i in range(32)]
    with pytest.raises(AssertionError, match="offset"):
        shfl_xor_lanes([[np.float32(i), np.int32(i % 2 + 1)] for i in range(32)])
    with pytest.raises(AssertionError, match="leaves"):
        shfl_xor_lanes([[np.float32(i), np.int32(32)] for i in range(32)])


# --------------------------------------------------------------------- library kernels


def _library(name):
    import importlib
    norms = importlib.import_module("kdsl.kernels.norms")
    softmax = importlib.import_module("kdsl.kernels.softmax")
    return {"softmax": softmax.softmax_fused_kernel, "layer_norm": norms.layer_norm_kernel,
            "rms_norm": norms.rms_norm_kernel}[name]


@pytest.mark.parametrize("num_warps,n", [(1, 200), (2, 192), (8, 192)])
@pytest.mark.parametrize("name", ["softmax", "layer_norm", "rms_norm"])
def test_library_row_kernels_lowered_for_cuda(name, num_warps, n):
    """The library's row kernels as CUDA lowers them (shuffles; 16-byte vectors where the row
    length is a multiple of 16), simulated, against the float64 references."""
    from kdsl.kernels import reference
    rows = 3
    block = max(256, 128 * num_warps)  # whole runs of 4 per thread
    x = RNG.standard_normal((rows, n)).astype(np.float32)
    w = RNG.standard_normal(n).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    y = np.zeros_like(x)
    kern = _library(name)
    if name == "softmax":
        args, want = [x, y, n, n], reference.softmax(x)
    elif name == "layer_norm":
        args, want = [x, w, b, y, n, n, 1e-5], reference.layer_norm(x, w, b, 1e-5)
    else:
        args, want = [x, w, y, n, n, 1e-5], reference.rms_norm(x, w, 1e-5)
    ck = kern.compile(*args, BLOCK=block, backend="cuda", num_warps=num_warps)
    assert shuffles(ck.kernel) > 0
    assert "__shfl_xor_sync" in ck.source
    vectors = [s for s in _walk(ck.kernel.body) if isinstance(s, (loop.VecLoad, loop.VecStore))]
    assert bool(vectors) == (n % 16 == 0)
    run_kernel(ck.kernel, (rows,), args)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


# ------------------------------------------- the lowering's tests with warps and shuffles

_LT = __import__("pathlib").Path(__file__).resolve().parent / "test_lower_tiles.py"


@pytest.fixture(scope="module")
def lt():
    """test_lower_tiles.py with every multi-thread target made a CUDA-like one: 4 threads ->
    one warp of 32, 8 -> two warps, with warp shuffles and the vector layout."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("kdsl_lt_warp", _LT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    lower_, count = mod.lower, []

    def warp_target(backend, threads=1, **kw):
        if threads == 1:
            return Target(backend, threads=1)
        return Target(backend, threads=32 if threads <= 4 else 64, warp_size=32, caps=WARP_VEC)

    def warp_lower(fn, target):
        k = lower_(fn, target)
        count.append(shuffles(k))
        return k

    mod.Target, mod.lower, mod.shuffle_count = warp_target, warp_lower, count
    return mod


LT_CASES = [
    ("test_reductions", {"kind": "sum", "shape": (4, 8), "axis": 1}),
    ("test_reductions", {"kind": "argmax", "shape": (16,), "axis": 0}),
    ("test_reductions", {"kind": "max", "shape": (4, 8), "axis": 0}),
    ("test_through_the_frontend", {}),
    ("test_for_loop_carried_accumulator_and_swap", {}),
    ("test_if_and_while", {}),
]


@pytest.mark.parametrize("name,kw", LT_CASES, ids=[f"{n}{list(k.values())}" for n, k in LT_CASES])
def test_lowering_kernels_with_warps(lt, name, kw):
    getattr(lt, name)(**kw)


def test_lowering_kernels_with_warps_used_shuffles(lt):
    lt.test_through_the_frontend()
    assert sum(lt.shuffle_count) > 0
