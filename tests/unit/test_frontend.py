"""Frontend: Python kernels -> verified Tile IR (ops, shapes, types, printer, errors)."""
# ruff: noqa: F841  (kernels below assign values only to compile them)

from __future__ import annotations

import inspect

import pytest

import kdsl as kd
from kdsl.errors import CompilationError
from kdsl.frontend import build_function
from kdsl.ir.tile import UNARY_OPS, print_function, verify
from kdsl.ir.types import (
    PointerType,
    TileType,
    float16,
    float32,
    int1,
    int32,
    int64,
    uint32,
)


def P(d):
    return TileType((), PointerType(d))


def S(d):
    return TileType((), d)


class Jit:
    """Stands in for the runtime's JITFunction: the frontend only needs `__kdsl_jit__`."""

    def __init__(self, fn):
        self.__kdsl_jit__ = fn


def build(fn, constexprs=None, **arg_types):
    f = build_function(fn, arg_types, constexprs or {})
    verify(f)
    return f


def kinds(f):
    return [op.kind for op in f.walk()]


def first(f, kind):
    return next(op for op in f.walk() if op.kind == kind)


def line_of(fn, text):
    """Absolute file line of the first line of `fn` containing `text`."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


# --------------------------------------------------------------------------------- kernels


def vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: kd.constexpr):
    pid = kd.program_id(0)
    offs = pid * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=m) + kd.load(y_ptr + offs, mask=m), mask=m)


VADD_TYPES = {"x_ptr": P(float32), "y_ptr": P(float32), "out_ptr": P(float32), "n": S(int32)}


def test_vector_add_ops_and_types():
    f = build(vadd, {"BLOCK": 128}, **VADD_TYPES)
    assert f.name == "vadd" and f.src_file == __file__
    assert [p.name for p in f.params] == ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"]
    assert f.params[-1].is_constexpr and f.params[-1].constexpr == 128
    assert f.params[0].value is f.body.args[0]
    ks = kinds(f)
    assert ks.count("load") == 2 and ks.count("store") == 1 and ks.count("addptr") == 3
    iota = first(f, "iota")
    assert iota.result.type == TileType((128,), int32) and iota.attrs == {"axis": 0, "start": 0}
    for ld in (op for op in f.walk() if op.kind == "load"):
        assert len(ld.operands) == 3  # masked load always has `other`
        assert ld.operands[1].type == TileType((128,), int1)
        assert ld.result.type == TileType((128,), float32)
    st = first(f, "store")
    assert len(st.operands) == 3 and st.loc.line == line_of(vadd, "kd.store(")
    assert "kd.store(out_ptr" in st.loc.text


def test_printer_output_is_stable():
    a = print_function(build(vadd, {"BLOCK": 64}, **VADD_TYPES))
    b = print_function(build(vadd, {"BLOCK": 64}, **VADD_TYPES))
    assert a == b
    assert a.splitlines()[0] == ("func @vadd(%x_ptr: ptr<float32>, %y_ptr: ptr<float32>, "
                                 "%out_ptr: ptr<float32>, %n: int32, BLOCK: constexpr = 64) {")
    assert "%pid = program_id() {axis=0} : int32" in a
    assert "%m = lt(%offs" in a and ": tile<64xint1>" in a


def bcast2d(x_ptr, M, N, BM: kd.constexpr, BN: kd.constexpr):
    rm = kd.arange(0, BM)
    rn = kd.arange(0, BN)
    offs = rm[:, None] * N + rn[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = kd.load(x_ptr + offs, mask=mask, other=1.0)
    row = kd.sum(x, axis=1)
    kd.store(x_ptr + offs, x * row[:, None] + kd.expand_dims(rn, 0).to(kd.float32), mask=mask)


def test_2d_broadcasting():
    f = build(bcast2d, {"BM": 8, "BN": 16}, x_ptr=P(float32), M=S(int32), N=S(int32))
    shapes = {tuple(r.shape) for op in f.walk() for r in op.results}
    assert {(8, 1), (1, 16), (8, 16), (8,)} <= shapes
    bc = [op for op in f.walk() if op.kind == "broadcast"]
    assert bc and all(op.result.shape == (8, 16) for op in bc)
    red = first(f, "reduce")
    assert red.attrs == {"op": "sum", "axis": 1} and red.result.type == TileType((8,), float32)
    ld = first(f, "load")
    assert ld.operands[2].owner.kind == "const" and ld.operands[2].owner.attrs["value"] == 1.0


def softmax(x_ptr, y_ptr, stride, n_cols, BLOCK: kd.constexpr):
    row = kd.program_id(0)
    cols = kd.arange(0, BLOCK)
    m = cols < n_cols
    x = kd.load(x_ptr + row * stride + cols, mask=m, other=-float("inf")).to(kd.float32)
    x = x - kd.max(x, axis=0)
    e = kd.exp(x)
    kd.store(y_ptr + row * stride + cols, e / kd.sum(e, axis=0), mask=m)


def test_softmax_row_reduction():
    f = build(softmax, {"BLOCK": 64}, x_ptr=P(float16), y_ptr=P(float16), stride=S(int32),
              n_cols=S(int32))
    reds = [op for op in f.walk() if op.kind == "reduce"]
    assert [r.attrs["op"] for r in reds] == ["max", "sum"]
    assert all(r.result.type == S(float32) for r in reds)
    st = first(f, "store")
    assert st.operands[1].type == TileType((64,), float16)  # cast to the pointee on store
    assert st.operands[1].owner.kind == "cast"


def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: kd.constexpr, BN: kd.constexpr,
           BK: kd.constexpr):
    rm = kd.program_id(0) * BM + kd.arange(0, BM)
    rn = kd.program_id(1) * BN + kd.arange(0, BN)
    rk = kd.arange(0, BK)
    acc = kd.zeros((BM, BN), dtype=kd.float32)
    for k in range(0, K, BK):
        a = kd.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = kd.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += kd.dot(a, b)
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def test_matmul_loop_with_carried_accumulator():
    f = build(matmul, {"BM": 32, "BN": 16, "BK": 8}, a_ptr=P(float16), b_ptr=P(float16),
              c_ptr=P(float32), M=S(int32), N=S(int32), K=S(int32))
    loop = first(f, "for")
    body = loop.regions[0]
    assert [a.type for a in body.args] == [S(int32), TileType((32, 16), float32)]
    assert [r.type for r in loop.results] == [TileType((32, 16), float32)]
    assert loop.operands[1] is f.params[5].value  # hi = K
    dot = first(f, "dot")
    assert dot.attrs == {"precision": "ieee"}
    assert dot.operands[0].type == TileType((32, 8), float16)
    assert dot.result.type == TileType((32, 16), float32)
    assert first(f, "store").operands[1] is loop.results[0]


def while_kernel(x_ptr, n):
    i = 0
    s = 0.0
    while i < n:
        s += kd.load(x_ptr + i)
        i += 1
    kd.store(x_ptr, s)


def test_while_carries_python_constants_as_values():
    f = build(while_kernel, x_ptr=P(float32), n=S(int32))
    w = first(f, "while")
    assert [r.type for r in w.results] == [S(float32), S(int32)]
    cond, body = w.regions
    assert cond.ops[-1].kind == "condition" and cond.ops[-1].operands[0].type == S(int1)
    assert body.ops[-1].kind == "yield"
    assert first(f, "store").operands[1] is w.results[0]


def if_kernel(x_ptr, n, FLAG: kd.constexpr):
    v = kd.load(x_ptr)
    if n > 5:
        t = v * 2
        only_then = 1
        same = 3
    else:
        t = v
        same = 3
    if FLAG:
        t = t + same
    else:
        t = t + undefined_name  # noqa: F821  (never compiled: FLAG is a constexpr)
    kd.store(x_ptr, t)


def test_if_with_results_and_compile_time_if():
    f = build(if_kernel, {"FLAG": True}, x_ptr=P(float32), n=S(int32))
    ifs = [op for op in f.walk() if op.kind == "if"]
    assert len(ifs) == 1
    op = ifs[0]
    assert op.operands[0].type == S(int1)
    assert [r.type for r in op.results] == [S(float32)]  # only `t`; `same` stays a constant
    assert [len(r.ops[-1].operands) for r in op.regions] == [1, 1]
    with pytest.raises(CompilationError, match="undefined_name"):
        build(if_kernel, {"FLAG": False}, x_ptr=P(float32), n=S(int32))


def early_return(x_ptr, n):
    pid = kd.program_id(0)
    if pid >= n:
        return
    kd.store(x_ptr + pid, 1.0)


def test_early_return_becomes_if_else():
    f = build(early_return, x_ptr=P(float32), n=S(int32))
    op = first(f, "if")
    assert [o.kind for o in op.regions[0].ops] == ["yield"]
    assert "store" in [o.kind for o in op.regions[1].ops]


def static_kernel(x_ptr, N: kd.constexpr):
    acc = kd.zeros((4,), kd.float32)
    for i in kd.static_range(N):
        acc += kd.load(x_ptr + i * 4 + kd.arange(0, 4))
    for j in (1, 2):
        acc = acc * j
    kd.store(x_ptr + kd.arange(0, 4), acc)


def test_static_range_unrolls():
    f = build(static_kernel, {"N": 3}, x_ptr=P(float32))
    ks = kinds(f)
    assert "for" not in ks and ks.count("load") == 3
    assert ks.count("mul") >= 2


def _pair(x, y, SCALE: kd.constexpr = 2):
    return x * SCALE + y, x - y


def _scaled(x, factor):
    a, b = pair(x, x, SCALE=factor)
    return a + b


pair = Jit(_pair)
scaled = Jit(_scaled)
G_CONST = kd.constexpr(4)
G_INT = 3


def helper_kernel(x_ptr):
    offs = kd.arange(0, G_CONST)
    x = kd.load(x_ptr + offs)
    s, d = pair(x, x)
    y = scaled(s, G_INT) + d
    kd.store(x_ptr + offs, y)


def test_nested_helper_inlining_and_globals():
    f = build(helper_kernel, x_ptr=P(float32))
    assert first(f, "iota").result.shape == (4,)
    assert "call" not in kinds(f)
    consts = [op.attrs["value"] for op in f.walk() if op.kind == "const"]
    assert 2.0 in consts and 3.0 in consts
    # helper ops point at the helper's own lines
    lines = {op.loc.line for op in f.walk()}
    assert line_of(_pair, "return x * SCALE") in lines


def test_closure_values_resolve():
    width = 8

    def k(x_ptr):
        kd.store(x_ptr + kd.arange(0, width), 0.0)

    f = build(k, x_ptr=P(float32))
    assert first(f, "store").operands[0].shape == (8,)


def cast_kernel(x_ptr, y_ptr, n):
    x = kd.load(x_ptr + kd.arange(0, 16))
    a = x.to(kd.float16)
    b = x.to(kd.int32, bitcast=True)
    c = x.to(kd.int1)
    d = (n / 2) + x.to(kd.uint32)
    kd.store(y_ptr + kd.arange(0, 16), a.to(kd.float32) + b + c + d)


def test_casts():
    f = build(cast_kernel, x_ptr=P(float32), y_ptr=P(float32), n=S(int32))
    casts = [op.result.type.elem for op in f.walk() if op.kind == "cast"]
    assert float16 in casts and uint32 in casts
    assert first(f, "bitcast").result.type == TileType((16,), int32)
    assert any(op.kind == "ne" for op in f.walk())  # to int1 is x != 0
    div = first(f, "div")
    assert div.result.type == S(float32)  # int / int is float32


# the unary ops that are kd.* builtins (the others are reached through kd.extra.libdevice)
@pytest.mark.parametrize("name", sorted(n for n in UNARY_OPS - {"neg", "not"} if hasattr(kd, n)))
def test_every_math_op(name):
    fn = getattr(kd, name)

    def k(x_ptr, i_ptr):
        x = kd.load(x_ptr + kd.arange(0, 8))
        i = kd.load(i_ptr + kd.arange(0, 8))
        kd.store(x_ptr + kd.arange(0, 8), fn(x) + fn(i))

    f = build(k, x_ptr=P(float16), i_ptr=P(int32))
    ops = [op for op in f.walk() if op.kind == name]
    assert len(ops) == 2 and ops[0].result.type == TileType((8,), float16)
    if name == "abs":
        assert ops[1].result.type == TileType((8,), int32)
    else:  # float-only math casts ints to float32 first
        assert ops[1].result.type == TileType((8,), float32)


def binops_kernel(x_ptr, i_ptr, n):
    x = kd.load(x_ptr + kd.arange(0, 8))
    i = kd.load(i_ptr + kd.arange(0, 8))
    r = x + x - x * x / x // x % x ** 2
    j = (i & 3) | (i ^ n) | (i << 1) | (i >> 1) | ~i
    k = -i + i // 3 + i % 3
    w = kd.where((x > 0) & (i != 0), kd.maximum(x, 1.0), kd.minimum(x, i))
    z = kd.fma(x, x, x)
    kd.store(x_ptr + kd.arange(0, 8), r + j + k + w + z)


def test_operators():
    f = build(binops_kernel, x_ptr=P(float32), i_ptr=P(int64), n=S(int32))
    ks = set(kinds(f))
    assert {"add", "sub", "mul", "div", "floordiv", "mod", "pow", "and", "or", "xor", "shl",
            "shr", "not", "neg", "where", "maximum", "minimum", "fma", "gt", "ne"} <= ks
    xor = first(f, "xor")
    assert xor.result.type == TileType((8,), int64)  # int64 tile with int32 scalar


def test_reductions():
    def k(x_ptr, b_ptr):
        x = kd.load(x_ptr + kd.arange(0, 4)[:, None] * 8 + kd.arange(0, 8)[None, :])
        flag = kd.load(b_ptr + kd.arange(0, 8))
        a = kd.sum(x)
        b = kd.max(x, axis=-1, keep_dims=True)
        c = kd.argmax(x, axis=0)
        d = kd.sum(flag)
        e = x.min(axis=1)
        kd.store(x_ptr, a + d + kd.sum(c) + kd.sum(b) + kd.sum(e))

    f = build(k, x_ptr=P(float16), b_ptr=P(kd.int8))
    reds = {(op.attrs["op"], op.attrs["axis"], op.operands[0].shape): op.result.type
            for op in f.walk() if op.kind == "reduce"}
    assert reds[("sum", 0, (32,))] == S(float32)  # axis=None flattens; f16 sums in f32
    assert reds[("max", 1, (4, 8))] == TileType((4,), float32)  # widened, as in Triton
    assert reds[("argmax", 0, (4, 8))] == TileType((8,), int32)
    assert reds[("sum", 0, (8,))] in (S(int32), S(float32))
    assert reds[("min", 1, (4, 8))] == TileType((4,), float32)
    # keep_dims reshapes to (4, 1)
    assert any(op.kind == "reshape" and op.result.shape == (4, 1) for op in f.walk())
    int8_sum = [op for op in f.walk() if op.kind == "reduce" and op.operands[0].shape == (8,)
                and op.operands[0].type.elem in (int32,)]
    assert int8_sum and int8_sum[0].result.type == S(int32)


def shapes_kernel(x_ptr):
    x = kd.load(x_ptr + kd.arange(0, 16))
    a = kd.reshape(x, (4, 4))
    b = kd.trans(a)
    c = kd.broadcast_to(x[None, :], (2, 16))
    d = kd.multiple_of(kd.max_contiguous(kd.arange(0, 16), 16), 8)
    e = a.T + b
    kd.store(x_ptr + d, kd.reshape(e, 16) + kd.sum(c, axis=0) + kd.full((16,), 2, kd.float32))


def test_shape_ops_and_hints():
    f = build(shapes_kernel, x_ptr=P(float32))
    tr = first(f, "trans")
    assert tr.attrs == {"perm": (1, 0)} and tr.result.shape == (4, 4)
    hints = [op.attrs for op in f.walk() if op.kind == "hint"]
    assert {"max_contiguous": 16} in hints and {"multiple_of": 8} in hints
    assert any(op.kind == "broadcast" and op.result.shape == (2, 16) for op in f.walk())


def test_shape_attribute_and_int_python_folding():
    def k(x_ptr, BLOCK: kd.constexpr):
        x = kd.load(x_ptr + kd.arange(0, BLOCK // 2))
        kd.static_assert(x.shape == (BLOCK // 2,))
        kd.store(x_ptr + kd.arange(0, x.shape[0]), x)

    f = build(k, {"BLOCK": 32}, x_ptr=P(float32))
    assert first(f, "iota").result.shape == (16,)


def test_logical_ops_on_scalars():
    def k(x_ptr, n, m):
        if n > 0 and not m < 2 or n == 7:
            kd.store(x_ptr, 1.0)

    f = build(k, x_ptr=P(float32), n=S(int32), m=S(int32))
    assert first(f, "if").operands[0].type == S(int1)
    assert {"and", "or", "not"} <= set(kinds(f))


def test_atomic_add_and_runtime_full():
    def k(x_ptr, v):
        old = kd.atomic_add(x_ptr + kd.arange(0, 4), v, mask=kd.arange(0, 4) < 3)
        kd.store(x_ptr + kd.arange(0, 4), old + kd.full((4,), v, kd.float32))

    f = build(k, x_ptr=P(float32), v=S(int32))
    at = first(f, "atomic_rmw")
    assert at.result.type == TileType((4,), float32) and len(at.operands) == 3
    assert at.attrs == {"op": "add", "sem": "acq_rel", "scope": "gpu"}


def test_dot_int8_and_explicit_acc():
    def k(a_ptr, c_ptr):
        r = kd.arange(0, 16)
        a = kd.load(a_ptr + r[:, None] * 16 + r[None, :])
        c = kd.dot(a, a)
        d = kd.dot(a.to(kd.float32), a.to(kd.float32), acc=kd.zeros((16, 16), kd.float64),
                   input_precision="tf32")
        kd.store(c_ptr + r[:, None] * 16 + r[None, :], c + d.to(kd.int32))

    f = build(k, a_ptr=P(kd.int8), c_ptr=P(int32))
    dots = [op for op in f.walk() if op.kind == "dot"]
    assert dots[0].result.type == TileType((16, 16), int32)
    assert dots[1].result.type.elem == kd.float64 and dots[1].attrs["precision"] == "tf32"


def test_language_all_and_host_behaviour():
    import kdsl.language as lang

    for name in ("program_id", "arange", "load", "store", "dot", "sum", "float16", "constexpr",
                 "static_range", "where", "fma", "atomic_add", "multiple_of", "cdiv"):
        assert name in lang.__all__ and hasattr(kd, name)
    assert all(hasattr(lang, n) for n in lang.__all__)
    assert kd.cdiv(10, 3) == 4
    assert kd.constexpr(5).value == 5
    assert list(kd.static_range(2)) == [0, 1]
    with pytest.raises(RuntimeError, match="inside a @kd.jit kernel"):
        kd.load(None)


# ---------------------------------------------------------------------------------- errors


def _bad_shape(x_ptr, n):
    a = kd.arange(0, n)


def _bad_broadcast(x_ptr, n):
    a = kd.arange(0, 16) + kd.arange(0, 32)


def _bad_carry(x_ptr, n):
    acc = 0
    for i in range(n):
        acc += kd.load(x_ptr + i)


def _bad_name(x_ptr, n):
    y = no_such_thing + 1  # noqa: F821


def _bad_call(x_ptr, n):
    y = sorted(n)


def _bad_argc(x_ptr, n):
    y = kd.program_id()


def _bad_syntax(x_ptr, n):
    y = [i for i in range(3)]


def _bad_dtype(x_ptr, n):
    y = kd.zeros((4,), "float32")


def _bad_dot(x_ptr, n):
    a = kd.zeros((4, 8), kd.float32)
    b = kd.dot(a, a)


def _bad_helper_args(x_ptr, n):
    y = pair(n)


@pytest.mark.parametrize("fn, marker, message", [
    (_bad_shape, "kd.arange(0, n)", "tile shape must be a constexpr"),
    (_bad_broadcast, "kd.arange(0, 16) +", "[16] and [32]"),
    (_bad_carry, "for i in range(n)", "'acc' changes type"),
    (_bad_name, "no_such_thing", "unknown name 'no_such_thing'"),
    (_bad_call, "sorted(n)", "not a kdsl function"),
    (_bad_argc, "program_id()", "kd.program_id"),
    (_bad_syntax, "for i in range(3)]", "unsupported syntax"),
    (_bad_dtype, "kd.zeros", "expected a dtype"),
    (_bad_dot, "kd.dot(a, a)", "inner dimensions differ"),
    (_bad_helper_args, "pair(n)", "_pair()"),
])
def test_errors_name_file_line_and_source(fn, marker, message):
    with pytest.raises(CompilationError) as info:
        build(fn, x_ptr=P(float32), n=S(int32))
    err = info.value
    text = str(err)
    line = line_of(fn, marker)
    assert message in text
    assert __file__ in text and f"line {line}" in text
    assert marker in text  # the offending source line is quoted
    assert err.loc.line == line and err.loc.file == __file__ and err.kernel == fn.__name__


def test_error_inside_helper_points_at_helper_line():
    def _h(x):
        return x + kd.arange(0, 3)

    h = Jit(_h)

    def k(x_ptr):
        kd.store(x_ptr + kd.arange(0, 4), h(kd.arange(0, 4)))

    with pytest.raises(CompilationError) as info:
        build(k, x_ptr=P(float32))
    assert info.value.loc.line == line_of(_h, "return x +")


def test_missing_parameter_type():
    with pytest.raises(CompilationError, match="'y_ptr'"):
        build_function(vadd, {"x_ptr": P(float32)}, {"BLOCK": 4})


# ------------------------------------------- execution through the Tile IR interpreter


@pytest.fixture
def interp():
    return pytest.importorskip("kdsl.ir.interp")


def test_runs_vector_add_and_early_return(interp):
    import numpy as np

    f = build(vadd, {"BLOCK": 32}, **VADD_TYPES)
    x = np.random.rand(100).astype(np.float32)
    y = np.random.rand(100).astype(np.float32)
    out = np.zeros_like(x)
    interp.run(f, (4,), [x, y, out, 100])
    np.testing.assert_allclose(out, x + y)
    g = build(early_return, x_ptr=P(float32), n=S(int32))
    z = np.zeros(8, np.float32)
    interp.run(g, (8,), [z, 5])
    np.testing.assert_array_equal(z, [1, 1, 1, 1, 1, 0, 0, 0])


def test_runs_softmax_matmul_while_if(interp):
    import numpy as np

    f = build(softmax, {"BLOCK": 64}, x_ptr=P(float16), y_ptr=P(float16), stride=S(int32),
              n_cols=S(int32))
    x = np.random.rand(3, 50).astype(np.float16)
    out = np.zeros_like(x)
    interp.run(f, (3,), [x, out, 50, 50])
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(out, ref / ref.sum(1, keepdims=True), atol=1e-3)

    f = build(matmul, {"BM": 16, "BN": 16, "BK": 8}, a_ptr=P(float16), b_ptr=P(float16),
              c_ptr=P(float32), M=S(int32), N=S(int32), K=S(int32))
    a = np.random.rand(32, 24).astype(np.float16)
    bm = np.random.rand(24, 16).astype(np.float16)
    c = np.zeros((32, 16), np.float32)
    interp.run(f, (2, 1), [a, bm, c, 32, 16, 24])
    np.testing.assert_allclose(c, a.astype(np.float32) @ bm.astype(np.float32), rtol=1e-3)

    f = build(while_kernel, x_ptr=P(float32), n=S(int32))
    w = np.arange(5, dtype=np.float32)
    interp.run(f, (1,), [w, 5])
    assert w[0] == 10.0

    f = build(if_kernel, {"FLAG": True}, x_ptr=P(float32), n=S(int32))
    for n, want in ((7, 2 * 1.5 + 3), (2, 1.5 + 3)):
        v = np.array([1.5], np.float32)
        interp.run(f, (1,), [v, n])
        assert v[0] == want


@pytest.mark.parametrize("block", [2**23, 2**40])
def test_oversized_tile_is_a_compilation_error(block):
    with pytest.raises(CompilationError, match="at most") as e:
        build(vadd, {"BLOCK": block}, x_ptr=P(float32), y_ptr=P(float32), out_ptr=P(float32),
              n=S(int32))
    assert "kd.arange(0, BLOCK)" in str(e.value)


def if_bool_or_zero(x_ptr, out_ptr, si, BLOCK: kd.constexpr):
    r = kd.arange(0, BLOCK)
    c = kd.load(x_ptr + r) > 0
    if si > 0:
        b = kd.min(c, axis=0) != 0  # min of int1 is int32, as in Triton
    else:
        b = 0
    kd.store(out_ptr, b.to(kd.int32))


def test_if_branch_constant_takes_the_boolean_type():
    f = build(if_bool_or_zero, {"BLOCK": 8}, x_ptr=P(float32), out_ptr=P(int32), si=S(int32))
    (op,) = [o for o in f.walk() if o.kind == "if"]
    assert [r.type.elem for r in op.results] == [kd.int1]
