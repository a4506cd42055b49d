"""`kd.map_elementwise` in the frontend: a scalar function's runtime `if` on an element
becomes `where` (no `if` op), memory accesses under a branch are masked by it, the IR
round-trips, and what cannot be per element is a CompilationError at the scalar function's
line."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import kdsl as kd
from kdsl.errors import CompilationError
from kdsl.frontend import build_function
from kdsl.ir.parser import parse_function
from kdsl.ir.tile import print_function, verify
from kdsl.ir.types import PointerType, TileType, float32, int32


def P(d):
    return TileType((), PointerType(d))


def S(d):
    return TileType((), d)


def line_of(fn, text):
    fn = getattr(fn, "fn", fn)
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


def build(fn, constexprs=None, **arg_types):
    f = build_function(fn, arg_types, constexprs or {})
    verify(f)
    text = print_function(f)
    assert print_function(parse_function(text)) == text
    return f


@kd.jit
def selu_scalar(x, alpha):
    if x > 0:
        return x
    else:
        return alpha * (kd.exp(x) - 1)


def selu(x_ptr, alpha):
    offs = kd.arange(0, 32)
    kd.store(x_ptr + offs, kd.map_elementwise(selu_scalar, kd.load(x_ptr + offs), alpha))


def test_an_element_condition_selects():
    f = build(selu, x_ptr=P(float32), alpha=S(float32))
    kinds = [op.kind for op in f.walk()]
    assert "if" not in kinds and kinds.count("where") == 1
    where = next(op for op in f.walk() if op.kind == "where")
    assert where.result.type == TileType((32,), float32)
    assert where.loc.line == line_of(selu_scalar, "if x > 0")


@kd.jit
def guarded_load(i, p):
    if i > 0:
        return kd.load(p + i)
    return 0.0


def masked(p, q):
    offs = kd.arange(0, 16)
    kd.store(q + offs, kd.map_elementwise(guarded_load, offs, p))


def test_a_load_under_a_branch_is_masked():
    f = build(masked, p=P(float32), q=P(float32))
    loads = [op for op in f.walk() if op.kind == "load"]
    assert len(loads) == 1 and len(loads[0].operands) == 3  # ptr, mask, other


def test_results_take_the_broadcast_shape():
    @kd.jit
    def const_fn(x, y):
        return 1.5, x + y

    def k(p, r):
        a, b = kd.map_elementwise(const_fn, kd.arange(0, 4)[:, None], kd.arange(0, 8)[None, :])
        kd.static_assert(a.shape == (4, 8) and a.dtype == kd.float32)
        kd.static_assert(b.shape == (4, 8) and b.dtype == kd.int32)
        kd.store(p + kd.arange(0, 4)[:, None] * 8 + kd.arange(0, 8)[None, :], a + b)
        kd.store(r, kd.map_elementwise(const_fn, 2, 3)[1])  # scalars give scalars

    build(k, p=P(float32), r=P(int32))


# ----------------------------------------------------------------------------- errors


@kd.jit
def loop_on_element(x):
    acc = 0
    for i in range(x):  # loop bound
        acc += i
    return acc


@kd.jit
def while_on_element(x):
    while x > 0:  # while cond
        x = x - 1
    return x


@kd.jit
def return_in_while(x):
    i = 0
    while i < 4:  # while return
        if x > i:
            return i
        i += 1
    return -1


@kd.jit
def print_in_branch(x):
    if x > 0:
        print("x", x)  # print
    return x


@kd.jit
def mixed_returns(x):
    if x > 0:
        return x
    return x.to(kd.int32)  # mixed returns


@kd.jit
def no_return(x):
    y = x + 1  # noqa: F841


@kd.jit
def single(x):
    return x


@kd.jit
def add_pair(x0, x1):
    return x0 + x1


def bad(p, CASE: kd.constexpr):
    x = kd.load(p + kd.arange(0, 16))
    xi = x.to(kd.int32)
    if CASE == "loop":
        kd.map_elementwise(loop_on_element, xi)
    if CASE == "while":
        kd.map_elementwise(while_on_element, x)
    if CASE == "while_return":
        kd.map_elementwise(return_in_while, x)
    if CASE == "print":
        kd.map_elementwise(print_in_branch, x)
    if CASE == "mixed":
        kd.map_elementwise(mixed_returns, x)
    if CASE == "no_return":
        kd.map_elementwise(no_return, x)  # no_return
    if CASE == "pack3":
        kd.map_elementwise(single, x, pack=3)  # pack3
    if CASE == "pack_single":
        kd.map_elementwise(add_pair, x, pack=2)  # pack_single
    if CASE == "pack0":
        kd.map_elementwise(single, x, pack=0)  # pack0
    if CASE == "not_jit":
        kd.map_elementwise(np.exp, x)  # not_jit
    if CASE == "no_args":
        kd.map_elementwise(single)  # no_args


@pytest.mark.parametrize("case,fn,marker,msg", [
    ("loop", loop_on_element, "# loop bound", ("the bounds of a loop cannot depend on the "
     r"element \(got a tile of shape \[16\]\)")),
    ("while", while_on_element, "# while cond", "a while condition cannot depend on the element"),
    ("while_return", return_in_while, "# while return",
     # `i += 1` runs per element after a return, so i is per element too
     ("a while (condition|loop) cannot (depend on|return under a condition that depends "
     "on) the element")),
    ("print", print_in_branch, "# print", "printing cannot be under a condition that depends"),
    ("mixed", mixed_returns, "# mixed returns", "returns float32 on one path and int32"),
    ("no_return", bad, "# no_return", ("scalar_fn must return a value or a tuple of values, "
     "got None")),
    ("pack3", bad, "# pack3", "pack=3 does not divide the 16 elements"),
    ("pack_single", bad, "# pack_single", ("with pack=2, scalar_fn must return 2 values per "
     "result, got 1")),
    ("pack0", bad, "# pack0", "pack must be a compile-time int >= 1, got 0"),
    ("not_jit", bad, "# not_jit", "scalar_fn must be a @kd.jit function"),
    ("no_args", bad, "# no_args", "needs at least one argument tile"),
])
def test_errors_name_the_line(case, fn, marker, msg):
    with pytest.raises(CompilationError, match=msg) as e:
        build_function(bad, {"p": P(float32)}, {"CASE": case})
    assert e.value.loc.line == line_of(fn, marker)


def test_an_element_condition_outside_map_elementwise_is_still_an_error():
    def k(p):
        x = kd.load(p + kd.arange(0, 16))
        if x > 0:
            kd.store(p + kd.arange(0, 16), x)

    with pytest.raises(CompilationError, match="an if condition must be a scalar"):
        build_function(k, {"p": P(float32)}, {})
