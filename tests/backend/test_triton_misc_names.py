"""Triton's smaller names: functional add/sub/mul, PropagateNan, `while kd.condition(...)`,
`x.item()`, `logical_and`/`logical_or`, `pi32_t`, `TRITON_MAX_TENSOR_NUMEL` and
`kd.target_info` (compile-time answers from the backend compiling the kernel)."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd


@kd.jit
def arith(x_ptr, y_ptr, out_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    x = kd.load(x_ptr + offs)
    y = kd.load(y_ptr + offs)
    kd.store(out_ptr + offs, kd.add(x, y))
    kd.store(out_ptr + BLOCK + offs, kd.sub(x, y, sanitize_overflow=False))
    kd.store(out_ptr + 2 * BLOCK + offs, kd.mul(x, 2))


def test_functional_arithmetic(backend):
    x = np.arange(8, dtype=np.int32) - 3
    y = np.full(8, 5, np.int32)
    out = np.zeros(24, np.int32)
    arith[(1,)](x, y, out, BLOCK=8, backend=backend)
    np.testing.assert_array_equal(out, np.concatenate([x + y, x - y, x * 2]))


@kd.jit
def nan_modes(x_ptr, out_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    x = kd.load(x_ptr + offs)
    kd.store(out_ptr + offs, kd.maximum(x, 0.0))
    kd.store(out_ptr + BLOCK + offs, kd.maximum(x, 0.0, propagate_nan=kd.PropagateNan.ALL))
    kd.store(out_ptr + 2 * BLOCK + offs, kd.maximum(x, 0.0, propagate_nan=kd.PropagateNan.NONE))
    kd.store(out_ptr + 3 * BLOCK + offs, kd.clamp(x, -1.0, 1.0,
                                                  propagate_nan=kd.PropagateNan.NONE))
    kd.store(out_ptr + 4 * BLOCK + offs, kd.minimum(x, x, propagate_nan=kd.PropagateNan.NONE))


def test_propagate_nan(backend):
    x = np.array([np.nan, -2.0, 3.0, 0.5], np.float32)
    out = np.zeros(20, np.float32)
    nan_modes[(1,)](x, out, BLOCK=4, backend=backend)
    prop = np.maximum(x, 0)
    np.testing.assert_array_equal(out[0:4], prop)
    np.testing.assert_array_equal(out[4:8], prop)
    np.testing.assert_array_equal(out[8:12], np.fmax(x, 0))
    np.testing.assert_array_equal(out[12:16], [-1.0, -1.0, 1.0, 0.5])  # NaN gives the bound
    assert np.isnan(out[16]) and (out[17:20] == x[1:]).all()  # both NaN: NaN


@kd.jit
def countdown(n_ptr, out_ptr):
    n = kd.load(n_ptr)
    steps = 0
    while kd.condition(n > 0, disable_licm=True):
        n = n - 3
        steps += 1
    kd.store(out_ptr, steps)


def test_while_condition(backend):
    out = np.zeros(1, np.int32)
    countdown[(1,)](np.array([10], np.int32), out, backend=backend)
    assert out[0] == 4


@kd.jit
def misc(x_ptr, out_ptr, flags_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    x = kd.load(x_ptr + offs)
    first = kd.load(x_ptr + kd.arange(0, 1)).item()
    kd.store(out_ptr + offs, x + first)
    a = x > 2
    b = x < 6
    kd.store(flags_ptr + offs, a.logical_and(b).to(kd.int32)
             + 2 * a.logical_or(b).to(kd.int32))
    p = out_ptr.to(kd.int64).to(kd.pi32_t)  # a pointer to int32, Triton's pi32_t
    kd.store(p + BLOCK, kd.TRITON_MAX_TENSOR_NUMEL // 1024)


def test_item_logical_and_constants(backend):
    x = np.arange(8, dtype=np.int32) + 1
    out = np.zeros(9, np.int32)
    flags = np.zeros(8, np.int32)
    if backend == "cuda":
        pytest.skip("pointer casts of host arrays need device addresses")
    misc[(1,)](x, out, flags, BLOCK=8, backend=backend)
    np.testing.assert_array_equal(out[:8], x + 1)
    assert out[8] == kd.TRITON_MAX_TENSOR_NUMEL // 1024
    a, b = x > 2, x < 6
    np.testing.assert_array_equal(flags, (a & b) + 2 * (a | b))


@kd.jit
def which_target(out_ptr):
    if kd.target_info.is_cuda():
        kd.store(out_ptr, 1 + kd.target_info.cuda_capability_geq(8, 0))
    else:
        kd.store(out_ptr, 0)


def test_target_info(backend):
    out = np.full(1, -1, np.int32)
    if backend == "cuda":
        src = which_target.compile(out, backend="cuda").ir["tile"]
        assert "2" in src  # is_cuda and an sm_80+ architecture
        return
    which_target[(1,)](out, backend=backend)
    assert out[0] == 0
    assert kd.target_info.is_cuda() is False and kd.target_info.current_target() is None


def test_target_info_in_cuda_codegen():
    out = np.zeros(1, np.int32)
    ir = which_target.compile(out, backend="cuda").ir["tile"]
    assert "value=2" in ir and "value=0" not in ir
