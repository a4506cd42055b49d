"""Errors users see: every rejected kernel is a `kd.CompilationError` showing file, line, the
source line and a caret; every bad launch is a TypeError/ValueError naming the argument, caught
before anything runs (no crash from anything a launch check can catch)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import kdsl as kd

HERE = str(Path(__file__).resolve())


def plain_python(x):
    return x


@kd.jit
def unknown_name(x_ptr, BLOCK: kd.constexpr):
    kd.store(x_ptr + kd.arange(0, BLOCK), undefined_thing)  # noqa: F821


@kd.jit
def bad_shape(x_ptr, BLOCK: kd.constexpr):
    a = kd.arange(0, BLOCK) + kd.arange(0, 2 * BLOCK)
    kd.store(x_ptr + kd.arange(0, BLOCK), a)


@kd.jit
def unsupported_op(x_ptr, BLOCK: kd.constexpr):
    a = kd.arange(0, BLOCK) @ kd.arange(0, BLOCK)
    kd.store(x_ptr, a)


@kd.jit
def dot_dtype(x_ptr, BLOCK: kd.constexpr):
    a = kd.zeros((BLOCK, BLOCK), kd.int32)
    kd.store(x_ptr + kd.arange(0, BLOCK), kd.sum(kd.dot(a, a), axis=0))


@kd.jit
def dot_shapes(x_ptr, BLOCK: kd.constexpr):
    a = kd.zeros((BLOCK, BLOCK), kd.float32)
    b = kd.zeros((2 * BLOCK, BLOCK), kd.float32)
    kd.store(x_ptr + kd.arange(0, BLOCK), kd.sum(kd.dot(a, b), axis=0))


@kd.jit
def runtime_shape(x_ptr, n):
    a = kd.arange(0, n)
    kd.store(x_ptr + a, a)


@kd.jit
def with_statement(x_ptr, BLOCK: kd.constexpr):
    with open("f"):
        pass


@kd.jit
def try_statement(x_ptr, BLOCK: kd.constexpr):
    try:
        pass
    except Exception:  # noqa: BLE001, S110 - kernel source the frontend must reject
        pass


@kd.jit
def unknown_builtin(x_ptr, BLOCK: kd.constexpr):
    kd.store(x_ptr, kd.nonexistent(1))


@kd.jit
def tile_condition(x_ptr, BLOCK: kd.constexpr):
    if kd.arange(0, BLOCK) > 2:
        kd.store(x_ptr, 1.0)


@kd.jit
def load_from_scalar(x_ptr, n, BLOCK: kd.constexpr):
    kd.store(x_ptr, kd.load(n))


@kd.jit
def calls_python(x_ptr, BLOCK: kd.constexpr):
    kd.store(x_ptr, plain_python(1.0))


@kd.jit
def carried_type_changes(x_ptr, n, BLOCK: kd.constexpr):
    acc = 0
    for _ in range(n):
        acc = acc + 0.5
    kd.store(x_ptr, acc)


@kd.jit
def zero_step(x_ptr, BLOCK: kd.constexpr):
    for _ in range(0, 4, 0):
        kd.store(x_ptr, 1.0)


@kd.jit
def bad_keyword(x_ptr, BLOCK: kd.constexpr):
    kd.store(x_ptr, 1.0, maskk=None)


@kd.jit
def float_offset(x_ptr, BLOCK: kd.constexpr):
    kd.store(x_ptr + 1.5, 1.0)


@kd.jit
def bitwise_on_float(x_ptr, BLOCK: kd.constexpr):
    kd.store(x_ptr, 1.0 & kd.load(x_ptr))


@kd.jit
def returns_value(x_ptr, BLOCK: kd.constexpr):
    return 1


BAD_KERNELS = {
    # kernel, extra args, a phrase of the message, the text the caret line starts under
    "unknown name": (unknown_name, (), "unknown name 'undefined_thing'", "undefined_thing"),
    "bad shape": (bad_shape, (), "cannot be broadcast", "kd.arange"),
    "unsupported op": (unsupported_op, (), "unsupported operator", "kd.arange"),
    "dot dtype": (dot_dtype, (), "dot operands must be", "kd.dot"),
    "dot shapes": (dot_shapes, (), "inner dimensions differ", None),
    "runtime shape": (runtime_shape, (4,), "must be a constexpr", "kd.arange"),
    "with": (with_statement, (), "unsupported syntax", "with"),
    "try": (try_statement, (), "unsupported syntax", "try"),
    "unknown builtin": (unknown_builtin, (), "no attribute 'nonexistent'", "kd.nonexistent"),
    "tile condition": (tile_condition, (), "must be a scalar", None),
    "load from scalar": (load_from_scalar, (3,), "needs a pointer", None),
    "python call": (calls_python, (), "not a kdsl function", None),
    "carried type": (carried_type_changes, (3,), "changes type", None),
    "zero step": (zero_step, (), "step must not be zero", None),
    "bad keyword": (bad_keyword, (), "unexpected keyword argument 'maskk'", None),
    "float offset": (float_offset, (), "offsets must be integers", None),
    "bitwise float": (bitwise_on_float, (), "needs integer operands", None),
    "return": (returns_value, (), "cannot return a value", None),
}


@pytest.mark.parametrize("case", sorted(BAD_KERNELS))
def test_compilation_error_format(case):
    kernel, extra, phrase, under = BAD_KERNELS[case]
    x = np.zeros(16, np.float32)
    cx = {} if kernel is runtime_shape else {"BLOCK": 4}
    with pytest.raises(kd.CompilationError) as info:
        kernel.compile(x, *extra, backend="interp", **cx)
    e = info.value
    lines = str(e).splitlines()
    m = re.fullmatch(r'File "(.+)", line (\d+), in (\w+)', lines[0])
    assert m, str(e)
    assert m.group(1) == HERE and m.group(3) == kernel.__name__
    source = Path(HERE).read_text().splitlines()[int(m.group(2)) - 1]
    assert lines[1].strip() == source.strip()  # the offending source line
    assert lines[2].strip() == "^"  # and a caret under it
    if under is not None:
        col = lines[2].index("^")
        assert lines[1][col:].startswith(under), (lines[1], col)
    assert phrase in lines[-1]
    assert e.loc is not None and e.loc.line == int(m.group(2))


# ------------------------------------------------------------------------- launch validation

@kd.jit
def add(x_ptr, y_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    kd.store(y_ptr + offs, kd.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def _readonly() -> np.ndarray:
    a = np.zeros(16, np.float32)
    a.setflags(write=False)
    return a


X = np.zeros(16, np.float32)
BAD_LAUNCHES = {
    # name: (grid, args, kwargs, exception, phrase)
    "too many": ((1,), (X, X, 16, 4, 5), {}, TypeError, "too many arguments"),
    "given twice": ((1,), (X, X, 16, 4), {"BLOCK": 4}, TypeError, "given both"),
    "missing": ((1,), (X, X), {"BLOCK": 16}, TypeError, "missing argument 'n'"),
    "missing constexpr": ((1,), (X, X, 16), {}, TypeError, "missing constexpr argument 'BLOCK'"),
    "unknown keyword": ((1,), (X, X, 16), {"BLOCK": 16, "BLOK": 1}, TypeError, "'BLOK'"),
    # None is a compile-time None, as in Triton: using it as a pointer is a compile error
    "None array": ((1,), (X, None, 16), {"BLOCK": 16}, kd.CompilationError, "NoneType"),
    "string scalar": ((1,), (X, X, "16"), {"BLOCK": 16}, TypeError, "'n'"),
    "complex dtype": ((1,), (X.astype(np.complex64), X, 16), {"BLOCK": 16}, TypeError,
                      "unsupported array dtype complex64"),
    "object dtype": ((1,), (np.zeros(4, object), X, 16), {"BLOCK": 16}, TypeError,
                     "unsupported array dtype"),
    "unaddressable stride": ((1,), (np.zeros(32, "f4,i1")["f0"], X, 16), {"BLOCK": 16},
                             ValueError, "not a multiple of the element size"),
    "read-only output": ((1,), (X, _readonly(), 16), {"BLOCK": 16}, ValueError, "read-only"),
    "int too big": ((1,), (X, X, 2**70), {"BLOCK": 16}, ValueError, "does not fit in int64"),
    "float too big": ((1,), (X, X, 1e300), {"BLOCK": 16}, ValueError, "overflows float32"),
    "unhashable constexpr": ((1,), (X, X, 16), {"BLOCK": np.zeros(2)}, TypeError,
                             "not hashable"),
    "grid zero": ((0,), (X, X, 16), {"BLOCK": 16}, ValueError, "must be positive"),
    "grid negative": ((-3,), (X, X, 16), {"BLOCK": 16}, ValueError, "must be positive"),
    "grid huge": ((2**40,), (X, X, 16), {"BLOCK": 16}, ValueError, "int32 program id range"),
    "grid 4-d": ((1, 1, 1, 1), (X, X, 16), {"BLOCK": 16}, ValueError, "1 to 3 dimensions"),
    "grid float": ((1.5,), (X, X, 16), {"BLOCK": 16}, TypeError, "expected an int"),
    "grid None": (None, (X, X, 16), {"BLOCK": 16}, TypeError, "grid"),
    "grid callable raises": (lambda meta: meta["nope"], (X, X, 16), {"BLOCK": 16}, TypeError,
                             "grid callable raised KeyError"),
    "unknown backend": ((1,), (X, X, 16), {"BLOCK": 16, "backend": "metal"}, ValueError,
                        "unknown backend 'metal'"),
    "num_warps": ((1,), (X, X, 16), {"BLOCK": 16, "num_warps": 3}, ValueError, "num_warps"),
}


@pytest.mark.parametrize("case", sorted(BAD_LAUNCHES))
def test_launch_validation(case):
    grid, args, kwargs, exc, phrase = BAD_LAUNCHES[case]
    kwargs = {"backend": "interp", **kwargs}
    y = args[1] if len(args) > 1 and isinstance(args[1], np.ndarray) else None
    before = None if y is None else y.copy()
    with pytest.raises(exc) as info:
        add[grid](*args, **kwargs)
    assert phrase in str(info.value)
    if before is not None:
        np.testing.assert_array_equal(y, before)  # nothing ran


def test_unavailable_backend_is_refused_before_running():
    from kdsl.runtime.registry import backend_status
    if backend_status("cuda")[0]:
        pytest.skip("a CUDA GPU is present")
    with pytest.raises(RuntimeError, match="not available"):
        add[(1,)](X, X.copy(), 16, BLOCK=16, backend="cuda")


def test_scalar_where_a_pointer_was_compiled_is_a_new_specialisation():
    # the specialisation key holds each argument's kind: a scalar never reaches code compiled
    # for a pointer; the compiler rejects the kernel for it, naming the line
    y = np.zeros(16, np.float32)
    add[(1,)](X, y, 16, BLOCK=16, backend="interp")
    with pytest.raises(kd.CompilationError, match="needs a pointer"):
        add[(1,)](X, 5, 16, BLOCK=16, backend="interp")


def test_checked_launch_refuses_wrong_hidden_argument_count():
    from kdsl.backends.base import BoundArg

    from kdsl.ir import types as T
    from kdsl.runtime.checked import hidden_args

    info = {"nparams": 2, "extents": (0,), "kernel": "k", "sites": ()}
    arr = np.zeros(4, np.float32)
    a = BoundArg("x", "array", T.float32, arr, arr, arr.nbytes, arr.size)
    with pytest.raises(TypeError, match="takes 2 runtime arguments"):
        hidden_args(info, [a])
    with pytest.raises(TypeError, match="compiled for an array"):
        hidden_args(info, [BoundArg("x", "scalar", T.int32, 3), a])
    extra, record = hidden_args(info, [a, BoundArg("n", "scalar", T.int32, 3)])
    assert extra[0].value == 4 and extra[-1].value is record and not record.any()
