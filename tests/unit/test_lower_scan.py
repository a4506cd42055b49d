"""Scans and tuple reductions through the shared lowering, executed by the Loop IR simulator for
1, 4 and 8 threads per program (shapes that T does not divide included), checked against NumPy
references and the Tile IR interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd
from kdsl.frontend import build_function
from kdsl.ir import interp, loop
from kdsl.ir.loop_interp import run_kernel
from kdsl.ir.types import PointerType, float16, float32, int32, scalar
from kdsl.passes import run_tile_passes
from kdsl.lowering import lower
from kdsl.target import Target

THREADS = (1, 4, 8)
RNG = np.random.default_rng(11)


def P(dt):
    return scalar(PointerType(dt))


def compiled(pyfn, arg_types, **constexprs):
    fn, _ = run_tile_passes(build_function(pyfn, arg_types, constexprs))
    return fn


def run_all(fn, make_args, grid=(1,), threads=THREADS):
    """(interpreter args, {T: simulated args}) for fresh `make_args()` each time."""
    ref = make_args()
    interp.run(fn, grid, ref)
    outs = {}
    for t in threads:
        args = make_args()
        run_kernel(lower(fn, Target("test", threads=t)), grid, args)
        outs[t] = args
    return ref, outs


def np_scan(x, axis, reverse, ufunc):
    """Sequential inclusive scan (NumPy's accumulate is sequential)."""
    if reverse:
        return np.flip(ufunc.accumulate(np.flip(x, axis), axis=axis), axis)
    return ufunc.accumulate(x, axis=axis)


def walk(stmts):
    for s in stmts:
        yield s
        for attr in ("body", "then", "orelse", "cond_body"):
            yield from walk(getattr(s, attr, []) or [])


# ------------------------------------------------------------------------ kernels


def scan_kernel(X, Y, SHAPE: kd.constexpr, AXIS: kd.constexpr, REV: kd.constexpr,
                KIND: kd.constexpr):
    n = 1
    for d in SHAPE:
        n *= d
    offs = kd.arange(0, n)
    x = kd.reshape(kd.load(X + offs), SHAPE)
    if KIND == "sum":
        y = kd.cumsum(x, AXIS, reverse=REV)
    else:
        y = kd.cumprod(x, AXIS, reverse=REV)
    kd.store(Y + offs, kd.reshape(y, (n,)))


SHAPES = [((7,), 0), ((16,), 0), ((3, 5), 0), ((3, 5), 1), ((4, 8), 1), ((2, 3, 4), 1),
          ((2, 3, 4), 0), ((2, 3, 4), 2), ((9, 2), 0), ((1, 6), 1), ((6, 1), 1)]


def _dims(shape):
    return {"SHAPE": tuple(shape)}


@pytest.mark.parametrize("shape,axis", SHAPES)
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_int32(shape, axis, reverse):
    fn = compiled(scan_kernel, {"X": P(int32), "Y": P(int32)}, **_dims(shape), AXIS=axis,
                  REV=reverse, KIND="sum")
    n = int(np.prod(shape))
    x = RNG.integers(-1000, 1000, n).astype(np.int32)
    want = np_scan(x.reshape(shape), axis, reverse, np.add).reshape(-1)
    ref, outs = run_all(fn, lambda: [x.copy(), np.zeros(n, np.int32)])
    np.testing.assert_array_equal(ref[1], want)
    for t, args in outs.items():
        np.testing.assert_array_equal(args[1], want, err_msg=f"threads={t}")


@pytest.mark.parametrize("shape,axis", [((13,), 0), ((3, 5), 0), ((4, 6), 1)])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumprod_and_float16_cumsum(shape, axis, reverse):
    n = int(np.prod(shape))
    x = RNG.uniform(0.8, 1.25, n).astype(np.float32)
    fn = compiled(scan_kernel, {"X": P(float32), "Y": P(float32)}, **_dims(shape), AXIS=axis,
                  REV=reverse, KIND="prod")
    want = np_scan(x.reshape(shape).astype(np.float64), axis, reverse, np.multiply).reshape(-1)
    ref, outs = run_all(fn, lambda: [x.copy(), np.zeros(n, np.float32)])
    for args in [ref, *outs.values()]:
        np.testing.assert_allclose(args[1], want, rtol=2e-6 * shape[axis])
    # float16 sums round after every step: the parallel order stays within the bound
    h = RNG.uniform(-2, 2, n).astype(np.float16)
    fn = compiled(scan_kernel, {"X": P(float16), "Y": P(float16)}, **_dims(shape), AXIS=axis,
                  REV=reverse, KIND="sum")
    want = np_scan(h.reshape(shape).astype(np.float64), axis, reverse, np.add).reshape(-1)
    ref, outs = run_all(fn, lambda: [h.copy(), np.zeros(n, np.float16)])
    # the interpreter is the sequential definition: NumPy's float16 accumulate, bit for bit
    np.testing.assert_array_equal(ref[1], np_scan(h.reshape(shape), axis, reverse,
                                                   np.add).reshape(-1))
    for args in [ref, *outs.values()]:
        np.testing.assert_allclose(args[1], want, atol=2e-3 * shape[axis] * 2)


@kd.jit
def compose(a1, b1, a2, b2):
    """(a1, b1) then (a2, b2) of the affine maps h -> a*h + b: associative, not commutative."""
    return a1 * a2, b1 * a2 + b2


def recurrence_kernel(A, B, H, M: kd.constexpr, N: kd.constexpr, AXIS: kd.constexpr,
                      REV: kd.constexpr):
    offs = kd.arange(0, M)[:, None] * N + kd.arange(0, N)[None, :]
    _, b = kd.associative_scan((kd.load(A + offs), kd.load(B + offs)), AXIS, compose,
                               reverse=REV)
    kd.store(H + offs, b)


def _recurrence(a, b, axis, reverse):
    """h[i] = a[i] * h[i-1] + b[i], h[-1] = 0, in int32 wrapping arithmetic (sequential)."""
    a, b = np.moveaxis(a, axis, 0).astype(np.int64), np.moveaxis(b, axis, 0).astype(np.int64)
    order = range(a.shape[0] - 1, -1, -1) if reverse else range(a.shape[0])
    h = np.zeros(a.shape[1:], np.int64)
    out = np.zeros_like(a)
    for i in order:
        h = (a[i] * h + b[i]) % 2**32
        out[i] = h
    return np.moveaxis(out.astype(np.uint32).view(np.int32), 0, axis)


@pytest.mark.parametrize("M,N,axis", [(5, 7, 1), (6, 3, 0), (1, 16, 1), (2, 9, 1)])
@pytest.mark.parametrize("reverse", [False, True])
def test_tuple_scan_is_ordered(M, N, axis, reverse):
    """A non-commutative combine: every thread count keeps (earlier, later) argument order."""
    fn = compiled(recurrence_kernel, {"A": P(int32), "B": P(int32), "H": P(int32)}, M=M, N=N,
                  AXIS=axis, REV=reverse)
    a = RNG.integers(-3, 4, M * N).astype(np.int32)
    b = RNG.integers(-100, 100, M * N).astype(np.int32)
    want = _recurrence(a.reshape(M, N), b.reshape(M, N), axis, reverse).reshape(-1)
    ref, outs = run_all(fn, lambda: [a, b, np.zeros(M * N, np.int32)])
    np.testing.assert_array_equal(ref[2], want)
    for t, args in outs.items():
        np.testing.assert_array_equal(args[2], want, err_msg=f"threads={t}")


def test_scan_structure():
    """T == 1: no barrier and no shared memory; T > 1: log2(P) Hillis-Steele steps of two
    barriers, not a loop over every pair of positions."""
    fn = compiled(scan_kernel, {"X": P(int32), "Y": P(int32)}, **_dims((64,)), AXIS=0,
                  REV=False, KIND="sum")
    k1 = lower(fn, Target("cpu", threads=1))
    assert not any(isinstance(s, loop.Barrier) for s in walk(k1.body))
    assert not any(a.space == "shared" for a in k1.arrays)
    k8 = lower(fn, Target("gpu", threads=8))
    barriers = sum(isinstance(s, loop.Barrier) for s in walk(k8.body))
    # staging (2), after the chunk scans (1), 3 steps of 2 for P = 8 chunks
    assert barriers == 2 + 1 + 2 * 3
    tot = [a for a in k8.arrays if a.name.startswith("tot")]
    assert tot and tot[0].size == 8


# -------------------------------------------------------------------- tuple reductions


@kd.jit
def welford(m1, s1, n1, m2, s2, n2):
    n = n1 + n2
    w = kd.where(n == 0.0, 0.0, n2 / n)
    d = m2 - m1
    return m1 + d * w, s1 + s2 + d * d * n1 * w, n


def welford_kernel(X, MEAN, VAR, M: kd.constexpr, N: kd.constexpr, BN: kd.constexpr):
    rm = kd.arange(0, M)
    rn = kd.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = kd.load(X + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    cnt = kd.where(mask, 1.0, 0.0)
    mean, m2, n = kd.reduce((x, kd.zeros_like(x), cnt), 1, welford)
    kd.store(MEAN + rm, mean)
    kd.store(VAR + rm, m2 / n)


@pytest.mark.parametrize("M,N,BN", [(3, 5, 8), (2, 16, 16), (5, 7, 8)])
def test_welford_tuple_reduce(M, N, BN):
    """Three operands and results; ragged rows (masked lanes have count 0)."""
    fn = compiled(welford_kernel, {"X": P(float32), "MEAN": P(float32), "VAR": P(float32)},
                  M=M, N=N, BN=BN)
    x = RNG.uniform(-3, 3, M * N).astype(np.float32)
    ref, outs = run_all(fn, lambda: [x, np.zeros(M, np.float32), np.zeros(M, np.float32)])
    x64 = x.reshape(M, N).astype(np.float64)
    for args in [ref, *outs.values()]:
        np.testing.assert_allclose(args[1], x64.mean(1), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(args[2], x64.var(1), rtol=1e-5, atol=1e-6)


@kd.jit
def argmax_pair(v1, i1, v2, i2):
    take = (v1 > v2) | ((v1 == v2) & (i1 < i2))
    return kd.where(take, v1, v2), kd.where(take, i1, i2)


def argmax_kernel(X, V, I, M: kd.constexpr, N: kd.constexpr, AXIS: kd.constexpr):
    offs = kd.arange(0, M)[:, None] * N + kd.arange(0, N)[None, :]
    x = kd.load(X + offs)
    idx = kd.broadcast_to(kd.arange(0, N)[None, :], (M, N)) if AXIS == 1 else \
        kd.broadcast_to(kd.arange(0, M)[:, None], (M, N))
    v, i = kd.reduce((x, idx), AXIS, argmax_pair)
    v2, i2 = kd.max(x, AXIS, return_indices=True)
    if AXIS == 1:
        r = kd.arange(0, M)
    else:
        r = kd.arange(0, N)
    kd.store(V + r, v)
    kd.store(I + r, i)
    kd.store(V + r + N * M, v2)
    kd.store(I + r + N * M, i2)


@pytest.mark.parametrize("M,N,axis", [(3, 8, 1), (4, 5, 0), (2, 3, 1)])
def test_argmax_pairs_with_ties(M, N, axis):
    fn = compiled(argmax_kernel, {"X": P(int32), "V": P(int32), "I": P(int32)}, M=M, N=N,
                  AXIS=axis)
    x = RNG.integers(0, 3, M * N).astype(np.int32)  # many ties
    x2 = x.reshape(M, N)
    k = x2.shape[1 - axis]
    want_v, want_i = x2.max(axis), x2.argmax(axis)
    ref, outs = run_all(fn, lambda: [x, np.zeros(2 * M * N, np.int32),
                                     np.zeros(2 * M * N, np.int32)])
    for t, args in [("interp", ref), *outs.items()]:
        for base in (0, M * N):
            np.testing.assert_array_equal(args[1][base:base + k], want_v, err_msg=f"T={t}")
            np.testing.assert_array_equal(args[2][base:base + k], want_i, err_msg=f"T={t}")


def test_two_phase_tuple_reduce_structure():
    fn = compiled(argmax_kernel, {"X": P(int32), "V": P(int32), "I": P(int32)}, M=2, N=16,
                  AXIS=1)
    k = lower(fn, Target("gpu", threads=8))
    parts = [a for a in k.arrays if a.space == "shared" and a.name.startswith("part")]
    assert len(parts) >= 2 and all(p.size == 8 for p in parts)  # O * P = 2 * 4, per operand



@kd.jit
def swapped(a1, b1, a2, b2):
    """Returns the accumulators exchanged (a1 + a2 is only there to read the later pair)."""
    return b1 + a2 * 0, a1 + b2 * 0


def swap_kernel(X, Y, Z, N: kd.constexpr):
    r = kd.arange(0, N)
    a, b = kd.reduce((kd.load(X + r), kd.load(Y + r)), 0, swapped)
    kd.store(Z, a)
    kd.store(Z + 1, b)


@pytest.mark.parametrize("N", [4, 5])
def test_combine_returning_its_accumulators_swapped(N):
    """Not associative, so only one thread's left fold is compared with the interpreter: the
    accumulators are assigned all at once, never one from the other's new value."""
    fn = compiled(swap_kernel, {"X": P(int32), "Y": P(int32), "Z": P(int32)}, N=N)
    x, y = np.arange(N, dtype=np.int32) + 10, np.arange(N, dtype=np.int32) + 20
    ref, outs = run_all(fn, lambda: [x, y, np.zeros(2, np.int32)], threads=(1,))
    want = [10, 20] if (N - 1) % 2 == 0 else [20, 10]
    np.testing.assert_array_equal(ref[2], want)
    np.testing.assert_array_equal(outs[1][2], want)


def loop_kernel(X, Y, S, ITERS, M: kd.constexpr, N: kd.constexpr):
    offs = kd.arange(0, M)[:, None] * N + kd.arange(0, N)[None, :]
    acc = kd.zeros((M, N), kd.int32)
    tot = kd.zeros((N,), kd.int32)
    for i in range(ITERS):
        x = kd.load(X + offs + i * (M * N))
        c = kd.cumsum(kd.trans(x), 1, reverse=True)   # (N, M): scans a transposed view
        acc += kd.trans(c) * 2 + kd.cumsum(x, 0)       # a gather of the result, a second scan
        tot += kd.sum(c, 1)                              # a reduction of the result
    kd.store(Y + offs, acc)
    kd.store(S + kd.arange(0, N), tot)


@pytest.mark.parametrize("M,N", [(3, 4), (4, 8)])
def test_scans_in_a_loop_of_views_gathers_and_reductions(M, N):
    """Shared memory reused across iterations, a scan of trans(x), gathers and reductions of
    scan results, two scans in one group's reach."""
    fn = compiled(loop_kernel, {"X": P(int32), "Y": P(int32), "S": P(int32),
                                "ITERS": scalar(int32)}, M=M, N=N)
    it = 3
    x = RNG.integers(-50, 50, it * M * N).astype(np.int32)
    xs = x.reshape(it, M, N)
    acc = np.zeros((M, N), np.int64)
    tot = np.zeros(N, np.int64)
    for i in range(it):
        c = np_scan(xs[i].T, 1, True, np.add)
        acc += c.T * 2 + np.cumsum(xs[i], 0)
        tot += c.sum(1)
    ref, outs = run_all(fn, lambda: [x, np.zeros(M * N, np.int32), np.zeros(N, np.int32), it])
    for t, args in [("interp", ref), *outs.items()]:
        np.testing.assert_array_equal(args[1], acc.reshape(-1), err_msg=f"T={t}")
        np.testing.assert_array_equal(args[2], tot, err_msg=f"T={t}")


def vector_kernel(X, Y, I, M: kd.constexpr, N: kd.constexpr, AXIS: kd.constexpr):
    offs = kd.arange(0, M)[:, None] * N + kd.arange(0, N)[None, :]
    x = kd.load(X + offs)
    v, i = kd.max(x, AXIS, return_indices=True)
    kd.store(Y + offs, kd.cumsum(x, AXIS) + kd.cumprod(x, 1 - AXIS, reverse=True))
    r = kd.arange(0, N if AXIS == 0 else M)
    kd.store(I + r, i + v)


@pytest.mark.parametrize("axis", [0, 1])
def test_scan_with_vector_layout(axis):
    """CUDA's capabilities: element e lives in a run of 4 per thread (layout width 4); the scan
    reads and writes shared memory by flat element, whatever the layout."""
    M, N = 4, 16
    fn = compiled(vector_kernel, {"X": P(int32), "Y": P(int32), "I": P(int32)}, M=M, N=N,
                  AXIS=axis)
    caps = frozenset({"vector_loads", "warp_shuffle", "native_fp16"})
    x = RNG.integers(-3, 4, M * N).astype(np.int32)
    x2 = x.reshape(M, N)
    want = (np.cumsum(x2, axis) + np_scan(x2, 1 - axis, True, np.multiply)).reshape(-1)
    want_i = x2.argmax(axis) + x2.max(axis)
    for t in (4, 8):
        target = Target("gpu", threads=t, warp_size=4, caps=caps)
        kernel = lower(fn, target)
        assert target.has("vector_loads")
        args = [x, np.zeros(M * N, np.int32), np.zeros(max(M, N), np.int32)]
        run_kernel(kernel, (1,), args)
        np.testing.assert_array_equal(args[1], want, err_msg=f"T={t}")
        np.testing.assert_array_equal(args[2][:len(want_i)], want_i, err_msg=f"T={t}")


_BAD_IR = {
    "reverse is a bool": "%y = scan(%x) {axis=0, op='sum', reverse=1} : tile<4xfloat32>",
    "one operand": "%y, %z = scan(%x, %x) {axis=0, op='sum', reverse=False} : "
                   "tile<4xfloat32>, tile<4xfloat32>",
    "keeps the type": "%y = scan(%x) {axis=0, op='prod', reverse=False} : tile<4xint32>",
    "scan op/axis": "%y = scan(%x) {axis=1, op='sum', reverse=False} : tile<4xfloat32>",
    "combine takes 4 scalars": (
        "%y, %z = reduce(%x, %x) {axis=0, op='custom'} : float32, float32 {\n"
        "  ^region0(%a: float32, %b: float32):\n    yield(%a, %b)\n  }"),
    "combine yields": (
        "%y = scan(%x) {axis=0, op='custom', reverse=True} : tile<4xfloat32> {\n"
        "  ^region0(%a: float32, %b: float32):\n    yield(%a, %b)\n  }"),
}


@pytest.mark.parametrize("message", sorted(_BAD_IR))
def test_verifier_rejects_malformed_scans_and_reduces(message):
    from kdsl.ir import parser, tile

    text = ("func @k(%p: ptr<float32>) {\n  %i = iota() {axis=0, start=0} : tile<4xint32>\n"
            "  %s = splat(%p) : tile<4xptr<float32>>\n"
            "  %q = addptr(%s, %i) : tile<4xptr<float32>>\n"
            "  %x = load(%q) : tile<4xfloat32>\n  " + _BAD_IR[message] + "\n}")
    fn = parser.parse_function(text, verify=False)
    with pytest.raises(tile.VerifyError, match=message):
        tile.verify(fn)
