"""Semantic rules: promotion, weak literals, broadcasting, pointers, reductions, dot."""

from __future__ import annotations

import pytest

from kdsl.errors import CompilationError
from kdsl.frontend.builder import Builder
from kdsl.ir.tile import Block
from kdsl.ir.types import (
    PointerType,
    TileType,
    bfloat16,
    float16,
    float32,
    float64,
    int1,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from kdsl.language import semantic as sem


@pytest.fixture
def b():
    return Builder(Block())


def val(b, shape, dt):
    """A runtime value of the given type (a block argument)."""
    return b.block.add_arg(TileType(tuple(shape), dt))


@pytest.mark.parametrize("a, c, want", [
    (float16, bfloat16, float32),
    (float16, float32, float32),
    (bfloat16, float64, float64),
    (float16, int64, float16),
    (int32, float32, float32),
    (int8, int32, int32),
    (int32, uint32, uint32),
    (uint8, int16, int16),
    (int64, uint32, int64),
    (uint16, int16, uint16),
    (int1, int8, int8),
    (int1, int1, int1),
    (uint64, int64, uint64),
])
def test_promote(a, c, want):
    assert sem.promote(a, c) == want
    assert sem.promote(c, a) == want


@pytest.mark.parametrize("lit, want", [
    (True, int1), (1, int32), (-2**31, int32), (2**31, int64), (2**63, uint64), (1.5, float32),
])
def test_literal_dtype(lit, want):
    assert sem.literal_dtype(lit) == want


def test_literal_too_big():
    with pytest.raises(CompilationError, match="64 bits"):
        sem.literal_dtype(2**64)


@pytest.mark.parametrize("lit, other, want", [
    (2, int8, int8), (2, uint16, uint16), (2, float16, float16), (2, int1, int32),
    (2.0, int8, float32), (2.0, bfloat16, bfloat16), (2.0, float64, float64),
    (True, int1, int1),
])
def test_weak_literals(b, lit, other, want):
    x = val(b, (4,), other)
    assert sem.binary(b, "add", x, lit).type == TileType((4,), want)
    assert sem.binary(b, "mul", lit, x).type == TileType((4,), want)


def test_broadcast_shapes():
    assert sem.broadcast_shapes((4, 1), (1, 8)) == (4, 8)
    assert sem.broadcast_shapes((8,), (4, 1)) == (4, 8)
    assert sem.broadcast_shapes((), (3,)) == (3,)
    with pytest.raises(CompilationError, match=r"\[4, 2\] and \[3\]"):
        sem.broadcast_shapes((4, 2), (3,))


def test_broadcast_rank_extends_then_broadcasts(b):
    x = val(b, (8,), float32)
    y = sem.broadcast_to(b, x, (4, 8))
    assert y.type == TileType((4, 8), float32)
    assert [op.kind for op in b.block.ops] == ["reshape", "broadcast"]
    s = sem.broadcast_to(b, val(b, (), int32), (2, 2))
    assert s.owner.kind == "splat"


def test_div_always_float(b):
    i = val(b, (4,), int32)
    assert sem.truediv(b, i, i).type.elem == float32
    assert sem.binary(b, "div", val(b, (4,), float16), 2).type.elem == float16
    assert sem.binary(b, "floordiv", i, 2).type.elem == int32
    assert sem.binary(b, "floordiv", val(b, (), float32), 2).owner.kind == "floordiv"
    assert sem.binary(b, "pow", i, 2).type.elem == float32


def test_bitwise_needs_ints(b):
    with pytest.raises(CompilationError, match="integer"):
        sem.binary(b, "and", val(b, (4,), float32), 1)
    assert sem.binary(b, "shl", val(b, (4,), uint8), 1).type.elem == uint8


def test_compare_gives_int1(b):
    c = sem.compare(b, "lt", val(b, (4,), int32), 2.5)
    assert c.type == TileType((4,), int1)
    assert c.owner.operands[0].type.elem == float32


def test_float_math_on_ints_casts_to_float32(b):
    y = sem.unary(b, "exp", val(b, (4,), int16))
    assert y.type.elem == float32 and y.owner.operands[0].owner.kind == "cast"
    assert sem.unary(b, "abs", val(b, (4,), int16)).type.elem == int16
    assert sem.unary(b, "sqrt", val(b, (4,), bfloat16)).type.elem == bfloat16


def test_pointer_arithmetic(b):
    p = val(b, (), PointerType(float32))
    offs = val(b, (16,), int32)
    q = sem.binary(b, "add", p, offs)
    assert q.type == TileType((16,), PointerType(float32)) and q.owner.kind == "addptr"
    assert sem.binary(b, "add", offs, p).type == q.type
    r = sem.binary(b, "sub", p, 1)
    assert r.owner.kind == "addptr" and r.owner.operands[1].owner.kind == "neg"
    with pytest.raises(CompilationError, match="integers"):
        sem.binary(b, "add", p, val(b, (16,), float32))
    with pytest.raises(CompilationError, match="pointers"):
        sem.binary(b, "mul", p, 2)


def test_load_mask_other(b):
    p = sem.binary(b, "add", val(b, (), PointerType(float16)), val(b, (1, 8), int32))
    m = val(b, (4, 1), int1)
    x = sem.load(b, p, m)
    assert x.type == TileType((4, 8), float16)
    ld = x.owner
    assert len(ld.operands) == 3 and ld.operands[2].owner.attrs["value"] == 0.0
    assert ld.operands[2].type == TileType((4, 8), float16)
    with pytest.raises(CompilationError, match="int1"):
        sem.load(b, p, val(b, (1, 8), int32))
    assert len(sem.load(b, p).owner.operands) == 1


def test_store_casts_and_broadcasts(b):
    p = sem.binary(b, "add", val(b, (), PointerType(int8)), val(b, (8,), int32))
    sem.store(b, p, val(b, (), float32))
    st = b.block.ops[-1]
    assert st.kind == "store" and st.operands[1].type == TileType((8,), int8)


@pytest.mark.parametrize("dt, op, want", [
    (int1, "sum", int32), (int8, "sum", int32), (int16, "sum", int32), (uint8, "sum", int32),
    (int64, "sum", int64), (float16, "sum", float32), (bfloat16, "sum", float32),
    (float16, "max", float16), (float32, "argmax", int32), (int8, "argmin", int32),
])
def test_reduce_dtypes(b, dt, op, want):
    r = sem.reduce(b, op, val(b, (4, 8), dt), axis=1)
    assert r.type == TileType((4,), want)


def test_reduce_all_axes_and_keep_dims(b):
    x = val(b, (4, 8), float32)
    assert sem.reduce(b, "sum", x).type == TileType((), float32)
    assert sem.reduce(b, "sum", x, keep_dims=True).type == TileType((1, 1), float32)
    assert sem.reduce(b, "max", x, axis=0, keep_dims=True).type == TileType((1, 8), float32)
    with pytest.raises(CompilationError, match="out of range"):
        sem.reduce(b, "sum", x, axis=2)


@pytest.mark.parametrize("a, c, acc", [
    (float16, float16, float32), (bfloat16, bfloat16, float32), (float32, float32, float32),
    (int8, int8, int32), (float64, float64, float64), (float16, float32, float32),
])
def test_dot_types(b, a, c, acc):
    d = sem.dot(b, val(b, (16, 8), a), val(b, (8, 32), c))
    assert d.type == TileType((16, 32), acc)
    assert d.owner.attrs == {"precision": "ieee"}


def test_dot_errors_and_acc(b):
    with pytest.raises(CompilationError, match=r"\[16, 8\].*\[4, 32\]"):
        sem.dot(b, val(b, (16, 8), float32), val(b, (4, 32), float32))
    with pytest.raises(CompilationError, match="int32"):
        sem.dot(b, val(b, (2, 2), int32), val(b, (2, 2), int32))
    acc = val(b, (2, 2), float64)
    assert sem.dot(b, val(b, (2, 2), float16), val(b, (2, 2), float16), acc).type == acc.type


def test_where_and_fma(b):
    w = sem.where(b, val(b, (4,), int1), val(b, (4,), int32), 1.5)
    assert w.type == TileType((4,), float32)
    f = sem.fma(b, val(b, (4,), int32), 2, val(b, (), float16))
    assert f.type == TileType((4,), float16)


def test_tile_shapes_must_be_constexpr(b):
    with pytest.raises(CompilationError, match="tile shape must be a constexpr"):
        sem.full(b, (val(b, (), int32),), 0, float32)
    with pytest.raises(CompilationError, match="tile shape must be a constexpr"):
        sem.arange(b, 0, val(b, (), int32))
    with pytest.raises(CompilationError, match="end > start"):
        sem.arange(b, 4, 4)
    with pytest.raises(CompilationError, match="cannot reshape"):
        sem.reshape(b, val(b, (4, 4), float32), (3, 5))


def test_cast_rules(b):
    x = val(b, (4,), float32)
    assert sem.cast(b, x, float32) is x
    assert sem.cast(b, x, int1).owner.kind == "ne"
    assert sem.cast(b, x, uint32, bitcast=True).owner.kind == "bitcast"
    with pytest.raises(CompilationError, match="equal widths"):
        sem.cast(b, x, float16, bitcast=True)


def test_const_value_wraps_ints():
    assert sem.const_value(255, int8) == -1
    assert sem.const_value(3, float32) == 3.0 and isinstance(sem.const_value(3, float32), float)
    assert sem.const_value(2, int1) is True
