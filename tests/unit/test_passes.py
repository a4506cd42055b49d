"""Tile IR passes: constant folding, identities, broadcast rematerialisation, CSE, DCE, the pass
manager's verification and stages, and equal interpreter results before and after."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from kdsl.ir import interp, tile
from kdsl.ir import types as T
from kdsl.ir.types import TileType
from kdsl.passes import PassError, PassManager, canonicalize, cse, dce, run_tile_passes

sys.path.insert(0, os.path.dirname(__file__))
from test_interp import KB

I32 = TileType((), T.int32)


def kinds(fn: tile.Function) -> list[str]:
    return [op.kind for op in fn.walk()]


def matmul_tile_kernel(BM=16, BN=8):
    """The pointer pattern of a matmul tile, as the frontend writes it:
    ptrs = x + (offs_m[:, None] * stride + offs_n[None, :]), masked by m < M and n < N."""
    kb = KB("tile_copy")
    x, o = kb.param("x", T.float32, True), kb.param("o", T.float32, True)
    M, N, stride = kb.param("M", T.int32), kb.param("N", T.int32), kb.param("stride", T.int32)
    pid = kb.op("program_id", type=I32, attrs={"axis": 0})
    offs_m = kb.op("add", kb.splat(kb.op("mul", pid, kb.const(BM, T.int32)), (BM,)),
                   kb.iota(BM))
    offs_n = kb.iota(BN)
    col = kb.op("reshape", offs_m, type=TileType((BM, 1), T.int32))
    row = kb.op("reshape", offs_n, type=TileType((1, BN), T.int32))
    scaled = kb.op("mul", col, kb.splat(stride, (BM, 1)))
    full = TileType((BM, BN), T.int32)
    off = kb.op("add", kb.op("broadcast", scaled, type=full), kb.op("broadcast", row, type=full))
    mm = kb.op("reshape", kb.op("lt", offs_m, kb.splat(M, (BM,))),
               type=TileType((BM, 1), T.int1))
    mn = kb.op("reshape", kb.op("lt", offs_n, kb.splat(N, (BN,))),
               type=TileType((1, BN), T.int1))
    fm = TileType((BM, BN), T.int1)
    mask = kb.op("and", kb.op("broadcast", mm, type=fm), kb.op("broadcast", mn, type=fm))
    v = kb.op("load", kb.ptrs(x, off), mask, kb.const(0.0, T.float32, (BM, BN)))
    two = kb.op("mul", kb.const(1.0, T.float32, (BM, BN)), kb.const(2.0, T.float32, (BM, BN)))
    kb.op("store", kb.ptrs(o, off), kb.op("mul", v, two), mask)
    return kb.done()


def run_matmul_tile(fn):
    M, N, stride = 37, 5, 7
    x = np.arange(M * stride, dtype=np.float32)
    out = np.full(M * stride, -1.0, np.float32)
    interp.run(fn, (3, 1, 1), [x, out, M, N, stride])
    return out


def test_broadcast_rematerialised_in_matmul_pointers():
    fn, stages = run_tile_passes(matmul_tile_kernel())
    text = stages["tile.dce"]
    assert "broadcast" not in text and "reshape" not in text, text
    # the offsets are elementwise arithmetic on full-shape iotas along each axis
    iotas = {(op.result.shape, op.attrs["axis"]) for op in fn.walk() if op.kind == "iota"}
    assert iotas == {((16, 8), 0), ((16, 8), 1)}
    assert list(stages) == ["tile", "tile.canonicalize", "tile.loop_pointers", "tile.cse",
                            "tile.dce"]
    for s in stages.values():
        assert s.startswith("func @tile_copy")


def test_results_identical_before_and_after_passes():
    before = run_matmul_tile(matmul_tile_kernel())
    fn, _ = run_tile_passes(matmul_tile_kernel())
    after = run_matmul_tile(fn)
    np.testing.assert_array_equal(before, after)
    ref = np.full(37 * 7, -1.0, np.float32)
    rows = np.arange(37)[:, None] * 7 + np.arange(5)[None, :]
    ref[rows.ravel()] = 2 * rows.ravel()
    np.testing.assert_array_equal(after, ref)


def test_constant_folding_int_c_semantics_and_float_rounding():
    kb = KB()
    o = kb.param("o", T.int32, True)
    f = kb.param("f", T.float16, True)
    q = kb.op("floordiv", kb.const(-7, T.int32), kb.const(2, T.int32))  # -3 (C)
    r = kb.op("mod", kb.const(-7, T.int32), kb.const(0, T.int32))  # 0 (x % 0)
    big = kb.op("mul", kb.const(2**30, T.int32), kb.const(4, T.int32))  # wraps to 0
    s = kb.op("add", kb.op("add", q, r), big)
    kb.op("store", kb.ptrs(o, kb.iota(1)), kb.splat(s, (1,)))
    h = kb.op("div", kb.const(1.0, T.float16), kb.const(3.0, T.float16))
    kb.op("store", kb.ptrs(f, kb.iota(1)), kb.splat(h, (1,)))
    fn, _ = run_tile_passes(kb.done())
    ks = kinds(fn)
    assert not {"floordiv", "mod", "mul", "add", "div"} & set(ks), ks
    consts = [op.attrs["value"] for op in fn.walk() if op.kind == "const"]
    assert -3 in consts
    assert float(np.float16(1) / np.float16(3)) in consts  # folded in float16, not in float64
    out, fo = np.zeros(1, np.int32), np.zeros(1, np.float16)
    interp.run(fn, (1, 1, 1), [out, fo])
    assert out[0] == -3 and fo[0] == np.float16(1) / np.float16(3)


def test_identities_and_where_and_cast():
    kb = KB()
    x, o = kb.param("x", T.int32, True), kb.param("o", T.float32, True)
    offs = kb.iota(8)
    v = kb.op("load", kb.ptrs(x, offs))
    a = kb.op("add", kb.op("mul", v, kb.const(1, T.int32, (8,))), kb.const(0, T.int32, (8,)))
    b = kb.op("sub", a, kb.const(0, T.int32, (8,)))
    c = kb.op("cast", b, type=b.type)
    fv = kb.op("cast", c, type=c.type.with_elem(T.float32))
    fm = kb.op("mul", fv, kb.const(1.0, T.float32, (8,)))
    fz = kb.op("add", fm, kb.const(0.0, T.float32, (8,)))  # not an identity (-0.0 + 0.0)
    t = kb.op("ne", kb.const(1, T.int32), kb.const(0, T.int32))
    w = kb.op("where", kb.splat(t, (8,)), fz, kb.const(5.0, T.float32, (8,)))
    kb.op("store", kb.ptrs(o, offs), w)
    fn = canonicalize(kb.done())
    fn = dce(fn)
    tile.verify(fn)
    ks = kinds(fn)
    assert ks.count("cast") == 1 and "where" not in ks and "sub" not in ks
    assert ks.count("mul") == 0 and ks.count("add") == 1  # only the float + 0.0 is left
    xs = np.arange(-4, 4, dtype=np.int32)
    out = np.zeros(8, np.float32)
    interp.run(fn, (1, 1, 1), [xs, out])
    np.testing.assert_array_equal(out, xs.astype(np.float32))


def test_cse_merges_pure_ops_but_not_loads():
    kb = KB()
    x, o = kb.param("x", T.float32, True), kb.param("o", T.float32, True)
    p1 = kb.ptrs(x, kb.iota(4))
    p2 = kb.ptrs(x, kb.iota(4))
    a = kb.op("load", p1)
    kb.op("store", p1, kb.op("exp", a))
    b = kb.op("load", p2)  # after the store: must see the stored values
    s = kb.op("add", kb.op("exp", b), kb.op("exp", b))
    kb.op("store", kb.ptrs(o, kb.iota(4)), s)
    fn = dce(cse(kb.done()))
    tile.verify(fn)
    ks = kinds(fn)
    # one iota, one pointer tile per buffer (x and o)
    assert ks.count("iota") == 1 and ks.count("splat") == 2 and ks.count("addptr") == 2
    assert ks.count("load") == 2 and ks.count("exp") == 2
    xs = np.array([0.0, 1.0, 2.0, -1.0], np.float32)
    out = np.zeros(4, np.float32)
    interp.run(fn, (1, 1, 1), [xs.copy(), out])
    np.testing.assert_array_equal(out, 2 * np.exp(np.exp(xs)))


def test_cse_keeps_negative_zero_distinct():
    kb = KB()
    o = kb.param("o", T.float32, True)
    a, b = kb.const(0.0, T.float32, (2,)), kb.const(-0.0, T.float32, (2,))
    kb.op("store", kb.ptrs(o, kb.iota(2)), kb.op("div", kb.const(1.0, T.float32, (2,)),
                                                 kb.op("add", a, b)))
    fn = cse(kb.done())
    assert kinds(fn).count("const") == 3


def _loop_kernel(dead_in_body=True):
    kb = KB()
    o = kb.param("o", T.int32, True)
    n = kb.param("n", T.int32)
    body = tile.Block()
    iv = body.add_arg(I32, "i")
    acc = body.add_arg(I32, "acc")
    kb.blocks.append(body)
    if dead_in_body:
        kb.op("mul", iv, iv)  # dead
        kb.op("load", kb.ptrs(o, kb.iota(4)))  # dead load
    k = kb.const(3, T.int32)
    kb.op("yield", kb.op("add", acc, kb.op("mul", iv, k)))
    kb.blocks.pop()
    k_outer = kb.const(3, T.int32)
    res = kb.op("for", kb.const(0, T.int32), n, kb.const(1, T.int32), k_outer,
                regions=[body], type=I32)
    # an unused loop is kept (its results unused)
    body2 = tile.Block()
    body2.add_arg(I32, "j")
    kb.blocks.append(body2)
    kb.op("store", kb.ptrs(o, kb.iota(1)), kb.splat(kb.const(9, T.int32), (1,)))
    kb.op("yield")
    kb.blocks.pop()
    kb.op("for", kb.const(0, T.int32), kb.const(0, T.int32), kb.const(1, T.int32),
          regions=[body2], n=0, type=[])
    kb.op("store", kb.ptrs(o, kb.iota(1)), kb.splat(res, (1,)))
    return kb.done()


def test_cse_scoped_through_regions_and_dce_in_regions():
    fn = _loop_kernel()
    fn = dce(cse(fn))
    tile.verify(fn)
    loop = next(op for op in fn.body.ops if op.kind == "for")
    body_kinds = [op.kind for op in loop.regions[0].ops]
    assert body_kinds == ["mul", "add", "yield"]  # dead ops gone, const 3 reused from outside
    assert sum(op.kind == "for" for op in fn.body.ops) == 2
    out = np.zeros(1, np.int32)
    interp.run(fn, (1, 1, 1), [out, 5])
    assert out[0] == 3 + 3 * sum(range(5))


def test_cse_does_not_leak_between_sibling_regions():
    kb = KB()
    o = kb.param("o", T.int32, True)
    c = kb.op("eq", kb.op("program_id", type=I32, attrs={"axis": 0}), kb.const(0, T.int32))
    then, els = tile.Block(), tile.Block()
    kb.blocks.append(then)
    kb.op("yield", kb.op("add", kb.const(1, T.int32), kb.const(2, T.int32)))
    kb.blocks[-1] = els
    kb.op("yield", kb.op("add", kb.const(1, T.int32), kb.const(2, T.int32)))
    kb.blocks.pop()
    r = kb.op("if", c, regions=[then, els], type=I32)
    kb.op("store", kb.ptrs(o, kb.iota(1)), kb.splat(r, (1,)))
    fn = cse(kb.done())
    tile.verify(fn)  # each branch keeps its own definitions


def test_dce_removes_trivial_empty_if():
    kb = KB()
    kb.param("o", T.int32, True)
    c = kb.op("eq", kb.op("program_id", type=I32, attrs={"axis": 0}), kb.const(0, T.int32))
    then, els = tile.Block(), tile.Block()
    kb.blocks.append(then)
    kb.op("add", kb.const(1, T.int32), kb.const(2, T.int32))
    kb.op("yield")
    kb.blocks[-1] = els
    kb.op("yield")
    kb.blocks.pop()
    kb.op("if", c, regions=[then, els], n=0, type=[])
    fn = dce(kb.done())
    assert fn.body.ops == []


def test_every_stage_verifies_and_bad_pass_is_named():
    stages_seen = []

    def breaker(fn):
        op = next(op for op in fn.walk() if op.kind == "add")
        op.results[0].type = op.results[0].type.with_elem(T.float32)  # now ill-typed
        return fn

    def spy(fn):
        stages_seen.append(len(list(fn.walk())))
        return fn

    pm = PassManager([("canonicalize", canonicalize), ("spy", spy), ("breaker", breaker)])
    with pytest.raises(PassError, match="breaker"):
        pm.run(matmul_tile_kernel())
    assert list(pm.stages) == ["tile", "tile.canonicalize", "tile.spy"]
    assert stages_seen


def test_iota_shape_rules():
    kb = KB()
    o = kb.param("o", T.int32, True)
    i = kb.iota(4, start=2)
    col = kb.op("reshape", i, type=TileType((4, 1), T.int32))
    t = kb.op("trans", col, type=TileType((1, 4), T.int32), attrs={"perm": (1, 0)})
    b = kb.op("broadcast", t, type=TileType((3, 4), T.int32))
    unit = kb.op("broadcast", kb.iota(1, start=5, shape=(1, 1), axis=0),
                 type=TileType((3, 4), T.int32))
    flat = kb.op("reshape", kb.op("add", b, unit), type=TileType((12,), T.int32))
    kb.op("store", kb.ptrs(o, kb.iota(12)), flat)
    fn = kb.done()
    out_before = np.zeros(12, np.int32)
    interp.run(fn, (1, 1, 1), [out_before])
    fn, _ = run_tile_passes(fn)
    ks = kinds(fn)
    assert "broadcast" not in ks and "trans" not in ks
    assert ks.count("reshape") == 1  # [3,4] -> [12] is not a unit-dim reshape: kept
    out = np.zeros(12, np.int32)
    interp.run(fn, (1, 1, 1), [out])
    np.testing.assert_array_equal(out, out_before)
    np.testing.assert_array_equal(out, np.tile(np.arange(4) + 2 + 5, 3))


def test_broadcast_of_load_is_kept():
    kb = KB()
    x, o = kb.param("x", T.float32, True), kb.param("o", T.float32, True)
    row = kb.op("reshape", kb.op("load", kb.ptrs(x, kb.iota(4))),
                type=TileType((1, 4), T.float32))
    full = kb.op("broadcast", row, type=TileType((2, 4), T.float32))
    offs = kb.op("reshape", kb.iota(8), type=TileType((2, 4), T.int32))
    kb.op("store", kb.ptrs(o, offs), full)
    fn, _ = run_tile_passes(kb.done())
    assert "broadcast" in kinds(fn)  # data, not a cheap value
    out = np.zeros(8, np.float32)
    interp.run(fn, (1, 1, 1), [np.arange(4, dtype=np.float32), out])
    np.testing.assert_array_equal(out, np.tile(np.arange(4), 2))


# ------------------------------------------------------------------- through the frontend


def _frontend_matmul():
    build_function = pytest.importorskip("kdsl.frontend").build_function
    kd = pytest.importorskip("kdsl")

    def matmul(a, b, c, M, N, K, BM: kd.constexpr, BN: kd.constexpr, BK: kd.constexpr):
        offs_m = kd.program_id(0) * BM + kd.arange(0, BM)
        offs_n = kd.program_id(1) * BN + kd.arange(0, BN)
        offs_k = kd.arange(0, BK)
        acc = kd.zeros((BM, BN), dtype=kd.float32)
        for k in range(0, K, BK):
            am = (offs_m[:, None] < M) & ((offs_k[None, :] + k) < K)
            bm = ((offs_k[:, None] + k) < K) & (offs_n[None, :] < N)
            x = kd.load(a + offs_m[:, None] * K + (offs_k[None, :] + k), mask=am, other=0.0)
            y = kd.load(b + (offs_k[:, None] + k) * N + offs_n[None, :], mask=bm, other=0.0)
            acc = kd.dot(x, y, acc)
        cm = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        kd.store(c + offs_m[:, None] * N + offs_n[None, :], acc, mask=cm)

    ptr = TileType((), T.PointerType(T.float32))
    types = {"a": ptr, "b": ptr, "c": ptr, "M": I32, "N": I32, "K": I32}
    return build_function(matmul, types, {"BM": 16, "BN": 16, "BK": 8})


def test_frontend_matmul_passes_and_interp():
    M, N, K = 37, 29, 21
    rng = np.random.default_rng(0)
    A = rng.random((M, K), dtype=np.float32)
    B = rng.random((K, N), dtype=np.float32)
    grid = (3, 2, 1)
    before = np.zeros(M * N, np.float32)
    interp.run(_frontend_matmul(), grid, [A.ravel(), B.ravel(), before, M, N, K])
    fn, stages = run_tile_passes(_frontend_matmul())
    assert "broadcast" not in stages["tile.dce"] and "reshape" not in stages["tile.dce"]
    after = np.zeros(M * N, np.float32)
    interp.run(fn, grid, [A.ravel(), B.ravel(), after, M, N, K])
    np.testing.assert_array_equal(before, after)
    np.testing.assert_allclose(after.reshape(M, N), A.astype(np.float64) @ B, rtol=1e-5)


# ------------------------------------------------------------- random programs, same results

_INT_BIN = ["add", "sub", "mul", "floordiv", "mod", "maximum", "minimum", "and", "xor", "shl",
            "shr"]


def _random_program(seed: int) -> tile.Function:
    """Integer expressions over iotas, constants and a scalar argument, mixed with reshapes and
    broadcasts between [R], [R,1], [1,C] and [R,C], stored as an [R,C] tile."""
    rng = np.random.default_rng(seed)
    R, C = 4, 8
    kb = KB(f"rand{seed}")
    o = kb.param("o", T.int32, True)
    s = kb.param("s", T.int32)
    full = (R, C)

    def leaf(shape):
        pick = rng.integers(3)
        if pick == 0:
            return kb.const(int(rng.integers(-9, 10)), T.int32, shape)
        if pick == 1:
            axis = int(rng.integers(len(shape)))
            return kb.iota(shape[axis], start=int(rng.integers(-3, 4)), shape=shape, axis=axis)
        return kb.splat(kb.op("add", s, kb.const(int(rng.integers(5)), T.int32)), shape)

    def expr(shape, depth):
        if depth == 0:
            return leaf(shape)
        if shape == full and rng.random() < 0.5:  # grow a smaller tile into the full shape
            small = [(R, 1), (1, C)][int(rng.integers(2))]
            x = expr(small, depth - 1)
            return kb.op("broadcast", x, type=TileType(full, T.int32))
        if shape == (R, 1) and rng.random() < 0.5:
            return kb.op("reshape", expr((R,), depth - 1), type=TileType(shape, T.int32))
        kind = _INT_BIN[int(rng.integers(len(_INT_BIN)))]
        return kb.op(kind, expr(shape, depth - 1), expr(shape, depth - 1))

    val = expr(full, 4)
    offs = kb.iota(R * C)
    flat = kb.op("reshape", val, type=TileType((R * C,), T.int32))
    kb.op("store", kb.ptrs(o, offs), flat)
    return kb.done()


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_same_results_after_passes(seed):
    before = np.zeros(32, np.int32)
    interp.run(_random_program(seed), (1, 1, 1), [before, 3])
    fn, _ = run_tile_passes(_random_program(seed))
    after = np.zeros(32, np.int32)
    interp.run(fn, (1, 1, 1), [after, 3])
    np.testing.assert_array_equal(before, after)
    assert "broadcast" not in kinds(fn)


def test_replace_all_uses_follows_chains_into_regions():
    from kdsl.passes.manager import replace_all_uses

    fn = _loop_kernel(dead_in_body=False)
    loop = next(op for op in fn.body.ops if op.kind == "for")
    k_inner = loop.regions[0].ops[0].result  # const 3 inside the body
    k_outer = loop.operands[3]
    seven = tile.Op("const", [], [I32], {"value": 7})
    fn.body.ops.insert(0, seven)
    n = replace_all_uses(fn, {k_inner.id: k_outer, k_outer.id: seven.result})
    assert n == 2
    tile.verify(fn)
    out = np.zeros(1, np.int32)
    interp.run(fn, (1, 1, 1), [out, 4])
    assert out[0] == 7 + 7 * sum(range(4))
