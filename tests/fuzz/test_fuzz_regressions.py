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
    for i in range(0, n_iter):
        if i == 1:
            acc += 1.0
    kd.store(o + r, kd.load(bp, boundary_check=(0,)) + acc, mask=r < n)


@kd.jit
def _bp_then_return_in_loop(x, o, n, n_iter, BM: kd.constexpr):
    r = kd.arange(0, BM)
    bp = kd.make_block_ptr(x, shape=(n,), strides=(1,), offsets=(0,), block_shape=(BM,),
                           order=(0,))
    for i in range(0, n_iter):
        if i == 2:
            return
    kd.store(o + r, kd.load(bp, boundary_check=(0,)), mask=r < n)


@kd.jit
def _tuple_then_if_in_loop(x, o, n, n_iter, BM: kd.constexpr):
    r = kd.arange(0, BM)
    a = kd.load(x + r, mask=r < n)
    t = (a, a + 1)
    acc = kd.zeros((BM,), kd.float32)
    for i in range(0, n_iter):
        if i == 1:
            acc += 1.0
    kd.store(o + r, t[0] + t[1] + acc, mask=r < n)


_AGGREGATE_BUG = ("frontend: a runtime `if` inside a runtime loop rebuilds every aggregate in "
                  "scope (block pointer, tuple) from the if's merge, and the loop then rejects "
                  "the untouched aggregate: 'variable ... cannot be reassigned inside a runtime "
                  "loop' (kdsl/frontend/control.py, build_if / check_untouched)")


@pytest.mark.xfail(strict=True, reason=_AGGREGATE_BUG)
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
