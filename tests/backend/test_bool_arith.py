"""int1 arithmetic wraps modulo 2 on every backend (+ and - are xor, * and // are and, % is 0),
as the interpreter defines it; the C emitter used to have no form for it."""

import numpy as np
import pytest

import kdsl as kd


@kd.jit
def bool_arith(x_ptr, y_ptr, add_ptr, sub_ptr, mul_ptr, div_ptr, mod_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    a = kd.load(x_ptr + offs)
    b = kd.load(y_ptr + offs)
    kd.store(add_ptr + offs, a + b)
    kd.store(sub_ptr + offs, a - b)
    kd.store(mul_ptr + offs, a * b)
    kd.store(div_ptr + offs, a // b)
    kd.store(mod_ptr + offs, a % b)


@kd.jit
def bool_cumprod(x_ptr, out_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    kd.store(out_ptr + offs, kd.cumprod(kd.load(x_ptr + offs), 0))


def test_bool_arithmetic(backend):
    a = np.array([0, 0, 1, 1] * 4, bool)
    b = np.array([0, 1, 0, 1] * 4, bool)
    outs = [np.ones(16, bool) for _ in range(5)]
    bool_arith[(1,)](a, b, *outs, BLOCK=16, backend=backend)
    want = [a ^ b, a ^ b, a & b, a & b, np.zeros(16, bool)]  # x // 0 == x % 0 == 0
    for got, w, what in zip(outs, want, ["+", "-", "*", "//", "%"]):
        np.testing.assert_array_equal(got, w, err_msg=what)
    x = np.array([1, 1, 1, 0, 1, 1, 1, 1], bool)
    out = np.zeros(8, bool)
    bool_cumprod[(1,)](x, out, BLOCK=8, backend=backend)
    np.testing.assert_array_equal(out, np.logical_and.accumulate(x))


def test_bool_arithmetic_cuda_compiles():
    from kdsl.backends.cuda import compile_ptx, compiler_available
    if not compiler_available():
        pytest.skip("no NVRTC or nvcc")
    a = np.zeros(16, bool)
    for arch in ("sm_80", "sm_90"):
        compile_ptx(bool_arith.compile(a, a, a, a, a, a, a, backend="cuda", BLOCK=16).source,
                    arch)
