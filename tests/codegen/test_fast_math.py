"""The fast-math opt-in (`fast_math=True` at launch or `@kd.jit(fast_math=True)`): IEEE code by
default, relaxed code only when asked, as separate specialisations."""

import numpy as np

import kdsl as kd


@kd.jit
def softmax_row(out_ptr, in_ptr, n, BLOCK: kd.constexpr):
    cols = kd.arange(0, BLOCK)
    x = kd.load(in_ptr + cols, mask=cols < n, other=-float("inf"))
    num = kd.exp(x - kd.max(x, axis=0))
    kd.store(out_ptr + cols, num / kd.sum(num, axis=0), mask=cols < n)


X = np.zeros(8, np.float32)


def test_opencl_fast_math_uses_native_functions():
    ieee = softmax_row.compile(X, X, 8, BLOCK=8, backend="opencl")
    fast = softmax_row.compile(X, X, 8, BLOCK=8, backend="opencl", fast_math=True)
    assert "native_exp" not in ieee.source and "-cl-fp32-correctly-rounded" in ieee.source
    assert "native_exp(" in fast.source and "-cl-fast-relaxed-math" in fast.source
    assert "correctly-rounded" not in fast.source


def test_llvm_fast_math_flags_only_when_asked():
    ieee = softmax_row.compile(X, X, 8, BLOCK=8, backend="llvm")
    fast = softmax_row.compile(X, X, 8, BLOCK=8, backend="llvm", fast_math=True)
    assert " fast " not in ieee.ir["llvm"] and " fast " in fast.ir["llvm"]


def test_fast_math_is_its_own_specialisation():
    a = softmax_row.compile(X, X, 8, BLOCK=8, backend="cuda")
    b = softmax_row.compile(X, X, 8, BLOCK=8, backend="cuda", fast_math=True)
    assert a is not b and a.source != b.source
