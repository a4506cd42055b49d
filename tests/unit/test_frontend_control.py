"""Frontend control flow: `and`/`or`/`not` on tiles, chained comparisons, early returns nested
in runtime ifs and loops (kernels and helpers), tuples and block pointers through loops,
branches and helpers, block pointer and descriptor errors; every kernel also runs in the Tile
IR interpreter and, lowered, in the Loop IR simulator at 1 and 4 threads."""
# ruff: noqa: F841  (kernels below assign values only to compile them)

from __future__ import annotations

import inspect

import numpy as np
import pytest

import kdsl as kd
from kdsl.errors import CompilationError
from kdsl.frontend import build_function
from kdsl.ir import interp
from kdsl.ir.loop_interp import run_kernel
from kdsl.ir.parser import parse_function
from kdsl.ir.tile import print_function, verify
from kdsl.ir.types import PointerType, TileType, float32, int1, int32
from kdsl.passes import run_tile_passes
from kdsl.lowering import lower
from kdsl.target import Target


def P(d):
    return TileType((), PointerType(d))


def S(d):
    return TileType((), d)


class Jit:
    def __init__(self, fn):
        self.__kdsl_jit__ = fn


def build(fn, constexprs=None, **arg_types):
    f = build_function(fn, arg_types, constexprs or {})
    verify(f)
    text = print_function(f)
    assert print_function(parse_function(text)) == text  # every stage round-trips
    return f


def kinds(f):
    return [op.kind for op in f.walk()]


def line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


def run_everywhere(fn, grid, make_args):
    """Run in the Tile IR interpreter and, after the tile passes and the lowering, in the Loop
    IR simulator at 1 and 4 threads; returns the argument lists after each run."""
    outs = []
    args = make_args()
    interp.run(fn, grid, args)
    outs.append(args)
    opt, _ = run_tile_passes(fn)
    for t in (1, 4):
        args = make_args()
        run_kernel(lower(opt, Target("t", threads=t)), grid, args)
        outs.append(args)
    return outs


# ------------------------------------------------------------------- and / or / not


def logic(x_ptr, o_ptr, lo, hi):
    offs = kd.arange(0, 8)
    x = kd.load(x_ptr + offs)
    a = x > lo and x < hi
    b = not (x == 0) or x > hi  # noqa: SIM201  (the `not` operator on a tile)
    c = lo < x <= hi
    d = 0 < offs < 4 < 8  # noqa: PLR0133  (a chain with a compile-time link)
    e = x > lo and True
    kd.store(o_ptr + offs, kd.where(a & b & c & d & e, x, -1.0))


def test_and_or_not_and_chains_on_tiles():
    f = build(logic, x_ptr=P(float32), o_ptr=P(float32), lo=S(float32), hi=S(float32))
    ands = [op for op in f.walk() if op.kind == "and"]
    assert ands and all(op.results[0].type == TileType((8,), int1) for op in ands)
    assert any(op.kind == "not" and op.results[0].type == TileType((8,), int1)
               for op in f.walk())
    x = np.array([-2, -0.5, 0, 0.5, 1, 1.5, 2, 3], np.float32)
    for args in run_everywhere(f, (1,), lambda: [x, np.zeros(8, np.float32), -1.0, 1.5]):
        i = np.arange(8)
        keep = (x > -1) & (x < 1.5) & (~(x == 0) | (x > 1.5)) & (-1 < x) & (x <= 1.5) & \
            (0 < i) & (i < 4)
        np.testing.assert_array_equal(args[1], np.where(keep, x, -1.0))


def _short_circuit(x_ptr):
    y = 1 > 2 < kd.load(x_ptr)  # noqa: PLR0133  (stops at the compile-time False: no load)
    kd.static_assert(y is False)


def test_compile_time_chain_short_circuits():
    assert "load" not in kinds(build(_short_circuit, x_ptr=P(float32)))


def _and_on_pointer(x_ptr):
    y = (x_ptr + kd.arange(0, 4)) and True


def test_and_on_pointers_is_an_error():
    with pytest.raises(CompilationError, match="truth value of a pointer"):
        build(_and_on_pointer, x_ptr=P(float32))


# ------------------------------------------------------------------------- early returns


def ret_in_loop(x_ptr, o_ptr, n):
    pid = kd.program_id(0)
    for i in range(n):
        v = kd.load(x_ptr + pid * n + i)
        if v < 0:
            kd.store(o_ptr + pid, i)
            return
        if v > 100:
            return
    kd.store(o_ptr + pid, -1)


def test_return_inside_a_runtime_loop():
    f = build(ret_in_loop, x_ptr=P(float32), o_ptr=P(int32), n=S(int32))
    loop = next(op for op in f.walk() if op.kind == "for")
    assert loop.results[-1].type == S(int1)  # the carried "returned" flag
    guard = loop.regions[0].ops[1]
    assert guard.kind == "if"  # the body runs only while nothing returned
    x = np.array([[1, 2, -1, 5], [1, 2, 3, 4], [200, -1, 0, 0]], np.float32)
    for args in run_everywhere(f, (3,), lambda: [x, np.full(3, 9, np.int32), 4]):
        np.testing.assert_array_equal(args[1], [2, -1, 9])


def ret_in_while(x_ptr, o_ptr, n):
    i = 0
    while i < n:
        v = kd.load(x_ptr + i)  # reading x[n] after returning would be out of bounds
        i += 1
        if v == 0:
            kd.store(o_ptr, i)
            return
    kd.store(o_ptr, -i)


def test_return_inside_while_skips_the_condition_afterwards():
    f = build(ret_in_while, x_ptr=P(float32), o_ptr=P(int32), n=S(int32))
    w = next(op for op in f.walk() if op.kind == "while")
    assert w.regions[0].ops[-2].kind == "if"  # the condition is evaluated only if not returned
    for x, want in [([3, 1, 0], 3), ([3, 1, 2], -3)]:
        x = np.array(x, np.float32)
        for args in run_everywhere(f, (1,), lambda x=x: [x, np.zeros(1, np.int32), 3]):
            assert args[1][0] == want


def _search(x_ptr, n, target):
    for i in range(n):
        if kd.load(x_ptr + i) == target:
            return i, True
    return -1, False


search = Jit(_search)


def _sign(x):
    if x > 0:
        return 1.0
    elif x < 0:
        return -1.0
    return 0.0


sign = Jit(_sign)


def helper_returns(x_ptr, o_ptr, n):
    i, found = search(x_ptr, n, 5.0)
    kd.store(o_ptr, i)
    kd.store(o_ptr + 1, found.to(kd.int32))
    kd.store(o_ptr + 2, sign(kd.load(x_ptr)).to(kd.int32))


def test_helpers_return_values_from_loops_and_branches():
    f = build(helper_returns, x_ptr=P(float32), o_ptr=P(int32), n=S(int32))
    for x, want in [([1, 5, 5], [1, 1, 1]), ([-1, 2, 3], [-1, 0, -1]), ([0, 0, 5], [2, 1, 0])]:
        x = np.array(x, np.float32)
        for args in run_everywhere(f, (1,), lambda x=x: [x, np.zeros(3, np.int32), 3]):
            np.testing.assert_array_equal(args[1], want)


def tail_return(x_ptr, n):
    pid = kd.program_id(0)
    if pid >= n:
        return
    y = pid * 2
    kd.store(x_ptr + pid, y.to(kd.float32))


def test_tail_return_takes_the_rest_into_the_else_branch():
    f = build(tail_return, x_ptr=P(float32), n=S(int32))
    ifs = [op for op in f.walk() if op.kind == "if"]
    assert len(ifs) == 1 and not ifs[0].results  # no flag: nothing follows
    assert [o.kind for o in ifs[0].regions[0].ops] == ["yield"]


def defined_after_return(x_ptr, n):
    for i in range(n):
        if i == 2:
            if kd.load(x_ptr) > 0:
                return
            y = i + 1  # defined after a return on the other path, used below
            kd.store(x_ptr + y, 1.0)


def test_variables_defined_after_a_possible_return():
    f = build(defined_after_return, x_ptr=P(float32), n=S(int32))
    for first, want in [(1.0, [1, 0, 0, 0]), (-1.0, [-1, 0, 0, 1])]:
        for args in run_everywhere(f, (1,), lambda first=first: [
                np.array([first, 0, 0, 0], np.float32), 4]):
            np.testing.assert_array_equal(args[0], want)


def _returns_on_some_paths(x):
    if x > 0:
        return x


some_paths = Jit(_returns_on_some_paths)


def _use_some_paths(x_ptr):
    kd.store(x_ptr, some_paths(kd.load(x_ptr)))


def _kernel_returns_value(x_ptr):
    return kd.load(x_ptr)


def _inconsistent(x):
    if x > 0:
        return x, x
    return x


inconsistent = Jit(_inconsistent)


def _use_inconsistent(x_ptr):
    y = inconsistent(kd.load(x_ptr))


def _types_differ(x, n):
    for i in range(n):
        if x > i:
            return i
    return x


types_differ = Jit(_types_differ)


def _use_types_differ(x_ptr, n):
    kd.store(x_ptr, types_differ(kd.load(x_ptr), n))


@pytest.mark.parametrize("fn, where, line_fn, msg", [
    (_use_some_paths, "def _returns_on_some_paths", _returns_on_some_paths,
     "returns a value on some paths"),
    (_kernel_returns_value, "return kd.load", _kernel_returns_value,
     "a kernel cannot return a value"),
    (_use_inconsistent, "return x\n", _inconsistent,
     "_inconsistent() returns (a value, a value) on one path and a value on another"),
    (_use_types_differ, "return x", _types_differ,
     "_types_differ() returns float32 on one path and int32 on another"),
])
def test_return_errors_name_the_line(fn, where, line_fn, msg):
    types = {"x_ptr": P(float32)}
    if "n" in inspect.signature(fn).parameters:
        types["n"] = S(int32)
    with pytest.raises(CompilationError, match=msg.replace("(", r"\(").replace(")", r"\)")) as e:
        build(fn, **types)
    assert e.value.loc.line == line_of(line_fn, where)


# ---------------------------------------------------------------------------- aggregates


def _advance2(bp, step):
    return kd.advance(bp, (step, 0)), step


advance2 = Jit(_advance2)


def tuples_and_block_pointers(x_ptr, o_ptr, n, M, N, BM: kd.constexpr, BN: kd.constexpr):
    bp = kd.make_block_ptr(x_ptr, (M, N), (N, 1), (0, 0), (BM, BN), (1, 0))
    state = (kd.zeros((BM, BN), kd.float32), 0)
    for i in range(n):
        acc, count = state
        acc += kd.load(bp, boundary_check=(0, 1))
        bp, _ = advance2(bp, BM)
        state = (acc, count + 1)
    acc, count = state
    if count > 1:
        bp = kd.advance(bp, (-BM, 0))
        acc = acc / count
    kd.store(kd.make_block_ptr(o_ptr, (BM, BN), (BN, 1), (0, 0), (BM, BN), (1, 0)), acc)
    kd.store(bp, acc + 100.0, boundary_check=(0, 1))


def test_tuples_and_block_pointers_through_loops_ifs_and_helpers():
    f = build(tuples_and_block_pointers, {"BM": 4, "BN": 8}, x_ptr=P(float32),
              o_ptr=P(float32), n=S(int32), M=S(int32), N=S(int32))
    loop = next(op for op in f.walk() if op.kind == "for")
    # carried: acc, count and the advanced row offset; base, shape, strides and the column
    # offset come back unchanged and are not carried
    assert sorted(str(r.type) for r in loop.results) == ["int32", "int32", "tile<4x8xfloat32>"]
    M, N = 10, 6
    x = np.arange(M * N, dtype=np.float32).reshape(M, N)
    blocks = [np.pad(x[r:r + 4], ((0, max(0, r + 4 - M)), (0, 2))) for r in (0, 4, 8)]
    want = sum(blocks) / 3
    for args in run_everywhere(f, (1,), lambda: [x.copy(), np.zeros(32, np.float32), 3, M, N]):
        np.testing.assert_allclose(args[1].reshape(4, 8), want, rtol=1e-6)
        np.testing.assert_allclose(args[0][8:], (want + 100)[:2, :6], rtol=1e-6)


def _carry_changes_structure(x_ptr, n):
    t = (1.0, 2.0)
    for i in range(n):
        t = (t[0], t[1], 3.0)


def _if_different_aggregates(x_ptr, n):
    bp = kd.make_block_ptr(x_ptr, (n,), (1,), (0,), (4,), (0,))
    if n > 2:
        bp = kd.make_block_ptr(x_ptr, (n,), (1,), (0,), (8,), (0,))
    kd.store(bp, 1.0)


def _bp_mask(x_ptr, n):
    bp = kd.make_block_ptr(x_ptr, (n,), (1,), (0,), (4,), (0,))
    y = kd.load(bp, mask=kd.arange(0, 4) < n)


def _bp_int64_offset(x_ptr, n):
    bp = kd.make_block_ptr(x_ptr, (n,), (1,), (n.to(kd.int64),), (4,), (0,))


def _bp_lengths(x_ptr, n):
    bp = kd.make_block_ptr(x_ptr, (n, n), (1,), (0, 0), (4, 4), (1, 0))


def _bp_nan_int(i_ptr, n):
    bp = kd.make_block_ptr(i_ptr, (n,), (1,), (0,), (4,), (0,))
    y = kd.load(bp, boundary_check=(0,), padding_option="nan")


def _bp_boundary_dim(x_ptr, n):
    bp = kd.make_block_ptr(x_ptr, (n,), (1,), (0,), (4,), (0,))
    y = kd.load(bp, boundary_check=(1,))


def _desc_stride(x_ptr, n):
    d = kd.make_tensor_descriptor(x_ptr, [n, n], [1, 2], [4, 4])


def _desc_offsets(x_ptr, n):
    d = kd.make_tensor_descriptor(x_ptr, [n, n], [n, 1], [4, 4])
    y = d.load([0])


@pytest.mark.parametrize("fn, marker, msg", [
    (_carry_changes_structure, "for i in range(n)", "changes structure in the loop"),
    (_if_different_aggregates, "if n > 2",
     r"variable 'bp' is a block pointer of block shape \[8\], order \(0,\) in one"),
    (_bp_mask, "kd.load(bp", "`mask` and `other` cannot be given with a block pointer"),
    (_bp_int64_offset, "make_block_ptr", "32-bit offsets"),
    (_bp_lengths, "make_block_ptr", "must have the same length"),
    (_bp_nan_int, "padding_option=", "'nan' needs a float element type"),
    (_bp_boundary_dim, "boundary_check=(1,)", "boundary_check dim 1 is out of range"),
    (_desc_stride, "make_tensor_descriptor", "last dim must be contiguous"),
    (_desc_offsets, "d.load", "expected 2 offsets, got 1"),
])
def test_aggregate_errors_name_the_line(fn, marker, msg):
    ptr = next(iter(inspect.signature(fn).parameters))
    with pytest.raises(CompilationError, match=msg) as e:
        build(fn, **{ptr: P(int32 if ptr == "i_ptr" else float32)}, n=S(int32))
    assert e.value.loc.line == line_of(fn, marker)


def block_ptr_ir(x_ptr, o_ptr, M, N):
    bp = kd.make_block_ptr(x_ptr, (M, N), (N, 1), (2, 0), (4, 8), (1, 0))
    kd.static_assert(isinstance(bp, kd.tensor) and bp.type.element_ty.shape == (4, 8))
    kd.static_assert(bp.type.element_ty.element_ty == kd.float32 and bp.type.is_ptr())
    y = kd.load(bp, boundary_check=(1,), padding_option="nan")
    kd.store(kd.make_block_ptr(o_ptr, (4, 8), (8, 1), (0, 0), (4, 8), (1, 0)), y + 1.0)
    kd.store(bp, y * 2.0, boundary_check=(0, 1))


def test_block_pointer_is_pointer_arithmetic_plus_masks():
    f = build(block_ptr_ir, x_ptr=P(float32), o_ptr=P(float32), M=S(int32), N=S(int32))
    load = next(op for op in f.walk() if op.kind == "load")
    stores = [op for op in f.walk() if op.kind == "store"]
    assert load.operands[0].type == TileType((4, 8), PointerType(float32))
    assert len(load.operands) == 3 and np.isnan(load.operands[2].owner.attrs["value"])
    assert [len(op.operands) for op in stores] == [2, 3]  # no boundary_check: no mask
    M, N = 6, 6
    x = np.arange(M * N, dtype=np.float32).reshape(M, N)
    for args in run_everywhere(f, (1,), lambda: [x.copy(), np.zeros(32, np.float32), M, N]):
        window = np.full((4, 8), np.nan)
        window[:, :6] = x[2:6]
        np.testing.assert_array_equal(args[1].reshape(4, 8), window + 1)
        want = x.copy()
        want[2:6] *= 2
        np.testing.assert_array_equal(args[0].reshape(M, N), want)


def while_reads_body_values(x_ptr, o_ptr):
    i = 0
    v = kd.load(x_ptr)
    while v > 0:  # the condition reads what the body computed
        i += 1
        v = kd.load(x_ptr + i)
    state = (i, v)
    while state[1] <= 0 and state[0] < 7:  # a tuple carried by a while
        j, _w = state
        state = (j + 1, kd.load(x_ptr + j + 1))
    kd.store(o_ptr, i)
    kd.store(o_ptr + 1, state[0])


def test_while_conditions_read_body_values_and_tuples():
    f = build(while_reads_body_values, x_ptr=P(float32), o_ptr=P(int32))
    x = np.array([3, 2, 1, 0, -1, -2, 5, 6], np.float32)
    for args in run_everywhere(f, (1,), lambda: [x, np.zeros(2, np.int32)]):
        np.testing.assert_array_equal(args[1], [3, 6])


def descriptor_atomics(x_ptr, M, N):
    d = kd.make_tensor_descriptor(x_ptr, [M, N], [N, 1], [4, 4])
    d.atomic_add([M - 2, N - 2], kd.full((4, 4), 1.0, kd.float32))


def test_descriptor_atomic_add_skips_out_of_bounds():
    f = build(descriptor_atomics, x_ptr=P(float32), M=S(int32), N=S(int32))
    for args in run_everywhere(f, (2,), lambda: [np.zeros(20, np.float32), 4, 5]):
        want = np.zeros((4, 5), np.float32)
        want[2:, 3:] = 2.0  # two programs, the in-bounds 2x2 corner
        np.testing.assert_array_equal(args[0].reshape(4, 5), want)
