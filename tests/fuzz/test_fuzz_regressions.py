"""Regression tests for what the differential fuzzer (kdsl/fuzz/) found: each is the minimal
kernel of a finding, checked against a NumPy reference on every backend (docs/fuzzing.md,
"Findings"). Known, unfixed bugs are `xfail(strict=True)`, so a fix shows up as XPASS."""

import numpy as np
import pytest

import kdsl as kd


@kd.jit
def _bp_then_if_in_loop(x, o, n, n_iter, BM: kd.constexpr):
    r = kd.arange(0, BM)
    bp = kd.make_block_ptr(x, shape=(n,), strides=(1,), offsets=(0,), block_shape=(BM,),
                           order=(0,))
    acc = kd.zeros((BM,), kd.float32)
    for i in range(n_iter):
        if i == 1:
            acc += 1.0
    kd.store(o + r, kd.load(bp, boundary_check=(0,)) + acc, mask=r < n)


@kd.jit
def _bp_then_return_in_loop(x, o, n, n_iter, BM: kd.constexpr):
    r = kd.arange(0, BM)
    bp = kd.make_block_ptr(x, shape=(n,), strides=(1,), offsets=(0,), block_shape=(BM,),
                           order=(0,))
    for i in range(n_iter):
        if i == 2:
            return
    kd.store(o + r, kd.load(bp, boundary_check=(0,)), mask=r < n)


@kd.jit
def _tuple_then_if_in_loop(x, o, n, n_iter, BM: kd.constexpr):
    r = kd.arange(0, BM)
    a = kd.load(x + r, mask=r < n)
    t = (a, a + 1)
    acc = kd.zeros((BM,), kd.float32)
    for i in range(n_iter):
        if i == 1:
            acc += 1.0
    kd.store(o + r, t[0] + t[1] + acc, mask=r < n)


# Found: a runtime `if` inside a runtime loop rebuilt every aggregate in scope (block pointer,
# tuple) from the if's merge, and the loop then rejected the untouched aggregate as reassigned.
@pytest.mark.parametrize("kernel,expect", [
    (_bp_then_if_in_loop, lambda x, n_iter: x + (1.0 if n_iter > 1 else 0.0)),
    (_bp_then_return_in_loop, lambda x, n_iter: x if n_iter <= 2 else np.zeros_like(x)),
    (_tuple_then_if_in_loop, lambda x, n_iter: 2 * x + 1 + (1.0 if n_iter > 1 else 0.0)),
], ids=["block_ptr_if", "block_ptr_return", "tuple_if"])
@pytest.mark.parametrize("n_iter", [1, 3])
def test_aggregate_live_across_loop_with_runtime_if(backend, kernel, expect, n_iter):
    x = np.arange(8, dtype=np.float32) - 3
    o = np.zeros(8, np.float32)
    kernel[(1,)](x, o, 6, n_iter, BM=8, backend=backend)
    np.testing.assert_array_equal(o[:6], expect(x[:6], n_iter))
    assert (o[6:] == 0).all()


@kd.jit
def _while_or_after_return(x, o, o2, n, n_iter, si, BN: kd.constexpr):
    r = kd.arange(0, BN)
    v1 = kd.load(x + r[None, :], mask=r[None, :] < n, other=1.0)
    v2 = kd.trans(v1)  # through shared memory: v1 is live across a barrier
    w = 0
    while w < n_iter:
        w += 1
    if si % 2 == 0:
        kd.store(o2 + r[:, None], v2, mask=r[:, None] < n)
        return
    w2 = 0
    while w2 < n_iter or w2 < si:
        w2 += 1
    kd.store(o + r[None, :], v1, mask=r[None, :] < n)


# The generated OpenCL C is correct (it runs right with -cl-opt-disable); PoCL's optimiser
# drops the value. The same failure in plain OpenCL C, 16 lines:
#     float v; const int tid = get_local_id(0);
#     if (tid < 8) v = in0[tid];
#     barrier(CLK_LOCAL_MEM_FENCE);
#     if (si % 2 != 0) {
#         int w = 0; while ((w < n_iter) | (w < si)) w = w + 1;
#         if (tid < 8) { int t = tid & 7; if (t < nN) out2[t] = v; }
#     }
_POCL_BUG = ("PoCL 3.1 (LLVM 15) miscompiles a value live across a barrier and read after a "
             "`while ((w < a) | (w < b))` loop inside an `if`: the store writes garbage; "
             "correct with -cl-opt-disable")


@pytest.mark.parametrize("num_warps", [1, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_value_across_barrier_read_after_while_in_if(backend, dtype, num_warps):
    # On PoCL this kernel's code used to hit the miscompile above (`_POCL_BUG`, a strict
    # xfail); since the lowering reads one-element runs as vectors of two the code PoCL gets
    # no longer has the shape, and it runs right, so it is checked on every backend again.
    x = (np.arange(8) - 2.5).astype(dtype)
    o = np.full(8, -7, dtype)
    o2 = np.full(8, -7, dtype)
    _while_or_after_return[(1,)](x, o, o2, 3, 0, 1, BN=8, backend=backend, num_warps=num_warps)
    np.testing.assert_array_equal(o[:3], x[:3])
    assert (o[3:] == -7).all() and (o2 == -7).all()


@kd.jit
def _while_and_reduction(x, o, n, n_iter, BM: kd.constexpr):
    r = kd.arange(0, BM)
    v = kd.zeros((BM,), kd.float32)
    w = 0
    while w < n_iter + 1 and kd.max(v) < 2.0:  # a reduction (barriers) in the condition
        v = v * 0.5 + kd.load(x + r, mask=r < n, other=0.0)
        w = w + 1
    kd.store(o + r, v, mask=r < n)


# Found: PoCL 3.1 dropped the private values written in the body of a `while` whose condition
# runs a barrier (the reduction) and whose body does not (zeros came back; right with
# -cl-opt-disable). backends/opencl_loops.py closes such bodies with a barrier.
@pytest.mark.parametrize("num_warps", [1, 4])
@pytest.mark.parametrize("n_iter", [0, 3])
def test_while_with_reduction_in_condition(backend, num_warps, n_iter):
    x = np.array([-0.92, 0.5, 0.25], np.float32)
    o = np.full(8, -7, np.float32)
    _while_and_reduction[(1,)](x, o, 3, n_iter, BM=8, backend=backend, num_warps=num_warps)
    v = np.zeros(8, np.float64)
    w = 0
    xs = np.concatenate([x, np.zeros(5)]).astype(np.float64)
    while w < n_iter + 1 and v.max() < 2.0:
        v = v * 0.5 + xs
        w += 1
    np.testing.assert_allclose(o[:3], v[:3], rtol=1e-6)
    assert (o[3:] == -7).all()


@kd.jit
def _return_then_while_reduction(x, o, n, n_iter, sf, BM: kd.constexpr):
    r = kd.arange(0, BM)
    a = kd.load(x + r, mask=r < n, other=0.0)
    if sf > 0.0:
        return
    v = kd.zeros((BM,), kd.float32)
    w = 0
    while w < n_iter + 1 and kd.max(v) < 2.0:
        v = v + 0.75
        w = w + 1
    kd.store(o + r, v + a, mask=r < n)


# Found (seed 103): after an early return every later statement runs under the return flag;
# lifting the barriers of a `while` whose condition reduces out of that guard met the
# condition's own barrier and failed ("cannot lift a barrier out of Barrier") on OpenCL.
@pytest.mark.parametrize("sf", [0.0, 1.0])
@pytest.mark.parametrize("n_iter", [0, 5])
def test_early_return_then_while_with_reduction(backend, sf, n_iter):
    x = np.arange(3, dtype=np.float32)
    o = np.full(8, -7, np.float32)
    _return_then_while_reduction[(1,)](x, o, 3, n_iter, sf, BM=8, backend=backend)
    if sf > 0.0:
        assert (o == -7).all()
        return
    v, w = 0.0, 0
    while w < n_iter + 1 and v < 2.0:
        v, w = v + 0.75, w + 1
    np.testing.assert_array_equal(o[:3], x + np.float32(v))


@kd.jit
def _argmax_pair(v1, i1, v2, i2):
    take = (v1 > v2) | ((v1 == v2) & (i1 < i2))
    return kd.where(take, v1, v2), kd.where(take, i1, i2)


@kd.jit
def _tuple_reduce_of_transposed_load(x, o, n, BM: kd.constexpr):
    r = kd.arange(0, BM)
    t = kd.load(x + r[:, None] * n + r[None, :], mask=(r[:, None] < n) & (r[None, :] < n),
                other=0.0)
    _, idx = kd.reduce((kd.trans(t), kd.broadcast_to(r[:, None], (BM, BM))), 0, _argmax_pair)
    kd.store(o + r, idx, mask=r < n)


# Found (seed 103), fixed: on the one-thread lowering, `view` does not look through a gather of
# a recomputable source, but the gather was skipped as read through it, so its array was never
# written (KeyError in Lowerer.addressable).
def test_tuple_reduce_of_transposed_load(backend):
    x = np.random.default_rng(5).standard_normal((3, 3)).astype(np.float32)
    o = np.full(8, -7, np.int32)
    _tuple_reduce_of_transposed_load[(1,)](x, o, 3, BM=8, backend=backend)
    xt = np.zeros((8, 8), np.float32)
    xt[:3, :3] = x.T
    np.testing.assert_array_equal(o[:3], np.argmax(xt, axis=0)[:3])


@kd.jit
def _reduce_of_kept_dims_index(x, o, n, BM: kd.constexpr):
    r = kd.arange(0, BM)
    v = kd.load(x + r, mask=r < n, other=0.0)
    _, idx = kd.reduce((v + v, r), 0, _argmax_pair, keep_dims=True)  # a (1,)-tile of a scalar
    best, where = kd.max(idx, axis=0, return_indices=True)
    kd.store(o, best)
    kd.store(o + 1, where)


# Found (seed 105), fixed: with several threads per program, staging a one-element tile that
# aliases a scalar (`keep_dims=True` of a reduction) read a register array it never had
# (KeyError in Lowerer.addressable); the staging now reads the value as the group does.
def test_reduction_of_a_kept_dims_reduction(backend):
    x = np.array([0.5, 1.0, 5.0, 2.0, 9.0, 0.0, 0.0, 0.0], np.float32)
    o = np.full(2, -7, np.int32)
    _reduce_of_kept_dims_index[(1,)](x, o, 4, BM=8, backend=backend)
    np.testing.assert_array_equal(o, [2, 0])


@kd.jit
def _returned_branch_placeholder(x, o0, o1, o2, n, si, BM: kd.constexpr):
    r = kd.arange(0, BM)
    offs = r[:, None] * n + r[None, :]
    mask = (r[:, None] < n) & (r[None, :] < n)
    v = kd.load(x + offs, mask=mask, other=1)
    if si % 2 == 0:
        if si > 0:
            kd.store(o0 + offs, v, mask=mask)
            return
        b = v
    else:
        b = v
    kd.store(o1 + offs, b, mask=mask)
    kd.store(o2 + offs, v, mask=mask)


# Found (seed 107), fixed: a branch that returns yields some tile of the right type as its
# placeholder for `b` -- here the offsets tile (`n` == 1 is a constant) -- and the lowering
# wrote it in place into `b`'s storage and made that the offsets' storage; the other branch
# then overwrote it, so the stores after the `if` went to offset 6: outside the arrays (the
# fuzz run's "double free or corruption" abort of seed 106 is this kind of write).  A value
# is written in place only when its yield is its one reader.
def test_placeholder_of_a_returned_branch_keeps_its_other_uses(backend):
    x = np.array([6], np.int32)
    guard = np.full(16, -77, np.int32)  # o1 and o2 are views into it: stray writes show
    o0, o1, o2 = guard[0:1], guard[4:5], guard[8:9]
    _returned_branch_placeholder[(1,)](x, o0, o1, o2, 1, 0, BM=1, backend=backend)
    want = np.full(16, -77, np.int32)
    want[4] = want[8] = 6
    np.testing.assert_array_equal(guard, want)
