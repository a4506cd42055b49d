"""The Tile IR ops `slice`, `gather` and `histogram`: text round trip, verifier, interpreter
semantics (clamped indices, values outside the bins) and the canonicalisation of slices."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd
from kdsl.frontend import build_function
from kdsl.ir import interp, tile
from kdsl.ir.parser import parse_function
from kdsl.ir.types import PointerType, float32, int32, scalar
from kdsl.passes import run_tile_passes

TEXT = """\
func @k(%x: ptr<float32>, %i: ptr<uint64>, %o: ptr<float32>, %h: ptr<int32>) {
  %0 = iota() {axis=0, start=0} : tile<8xint32>  # line 2
  %1 = splat(%x) : tile<8xptr<float32>>  # line 3
  %2 = addptr(%1, %0) : tile<8xptr<float32>>  # line 3
  %3 = load(%2) : tile<8xfloat32>  # line 3
  %4 = reshape(%3) : tile<2x4xfloat32>  # line 4
  %5 = slice(%4) {start=(1, 3), step=(-1, -2)} : tile<2x2xfloat32>  # line 5
  %6 = splat(%i) : tile<8xptr<uint64>>  # line 6
  %7 = addptr(%6, %0) : tile<8xptr<uint64>>  # line 6
  %8 = load(%7) : tile<8xuint64>  # line 6
  %9 = reshape(%8) : tile<2x4xuint64>  # line 6
  %10 = gather(%4, %9) {axis=1} : tile<2x4xfloat32>  # line 7
  %11 = reshape(%10) : tile<8xfloat32>  # line 8
  %12 = splat(%o) : tile<8xptr<float32>>  # line 8
  %13 = addptr(%12, %0) : tile<8xptr<float32>>  # line 8
  store(%13, %11)  # line 8
  %14 = reshape(%5) : tile<4xfloat32>  # line 9
  %15 = iota() {axis=0, start=8} : tile<4xint32>  # line 9
  %16 = splat(%o) : tile<4xptr<float32>>  # line 9
  %17 = addptr(%16, %15) : tile<4xptr<float32>>  # line 9
  store(%17, %14)  # line 9
  %18 = cast(%8) : tile<8xint64>  # line 10
  %19 = const() {value=True} : tile<8xint1>  # line 10
  %20 = histogram(%18, %19) {num_bins=5} : tile<5xint32>  # line 10
  %21 = iota() {axis=0, start=0} : tile<5xint32>  # line 11
  %22 = splat(%h) : tile<5xptr<int32>>  # line 11
  %23 = addptr(%22, %21) : tile<5xptr<int32>>  # line 11
  store(%23, %20)  # line 11
}"""


def test_text_roundtrip_and_semantics():
    text = tile.print_function(parse_function(TEXT))  # the printer's own numbering
    fn = parse_function(text)
    tile.verify(fn)
    assert tile.print_function(fn) == text
    assert "slice(%8) {start=(1, 3), step=(-1, -2)}" in text
    x = np.arange(8, dtype=np.float32)
    # indices in range, beyond the dim (clamped to 3) and above 2**63 (large, not negative)
    idx = np.array([0, 3, 4, 2**63 + 5, 1, 9, 2, 0], np.uint64)
    o = np.zeros(12, np.float32)
    h = np.zeros(5, np.int32)
    interp.run(fn, (1,), [x, idx, o, h])
    xs = x.reshape(2, 4)
    np.testing.assert_array_equal(o[:8].reshape(2, 4),
                                  np.take_along_axis(xs, np.array([[0, 3, 3, 3], [1, 3, 2, 0]]),
                                                     1))
    np.testing.assert_array_equal(o[8:].reshape(2, 2), xs[1::-1, 3::-2])
    # int64 values: 2**63 + 5 wraps to a negative number, 9 is above the bins: not counted
    np.testing.assert_array_equal(h, [2, 1, 1, 1, 1])


def _op(kind, operands, t, **attrs):
    return tile.Op(kind, operands, [t], attrs)


def _verify_one(op: tile.Op) -> None:
    fn = tile.Function("k", [], tile.Block())
    for v in op.operands:
        fn.params.append(tile.Param(f"p{len(fn.params)}", v.type, v))
        fn.body.args.append(v)
    fn.body.append(op)
    tile.verify(fn)


@pytest.mark.parametrize("make, msg", [
    (lambda x, i: _op("slice", [x], x.type, start=(0, 4), step=(1, 1)), "slice dim 1"),
    (lambda x, i: _op("slice", [x], x.type, start=(3, 0), step=(1, 1)), "slice dim 0"),
    (lambda x, i: _op("slice", [x], x.type.with_shape((4,)), start=(0,), step=(1,)),
     "keeps the rank"),
    (lambda x, i: _op("gather", [x, x], x.type, axis=1), "integer"),
    (lambda x, i: _op("gather", [x, i], x.type.with_shape((3, 2)), axis=2), "rank"),
    (lambda x, i: _op("gather", [x, i], x.type.with_shape((3, 2)), axis=1), "index's shape"),
    (lambda x, i: _op("histogram", [x], tile.TileType((4,), int32), num_bins=4), "1-D integer"),
    (lambda x, i: _op("histogram", [i], tile.TileType((4,), int32), num_bins=4), "1-D integer"),
])
def test_verifier_rejects(make, msg):
    x = tile.Value(tile.TileType((4, 4), float32), "x")
    i = tile.Value(tile.TileType((2, 2), int32), "i")
    with pytest.raises(tile.VerifyError, match=msg):
        _verify_one(make(x, i))


def flips(x_ptr, o_ptr, N: kd.constexpr):
    r = kd.arange(0, N)
    x = kd.load(x_ptr + r)
    twice = kd.flip(kd.flip(x))                 # composes to the identity: x
    ramp = kd.flip(r * 2 + 1)                   # pushed into the index math
    half, _ = kd.split(kd.reshape(r, (N // 2, 2)))  # a strided slice of an iota
    kd.store(o_ptr + r, twice + ramp.to(kd.float32))
    kd.store(o_ptr + N + kd.arange(0, N // 2), half.to(kd.float32))
    kd.store(o_ptr + 2 * N + r, kd.flip(kd.full((N,), 3.0, kd.float32)))


def test_canonical_slices():
    P = scalar(PointerType(float32))
    fn, _ = run_tile_passes(build_function(flips, {"x_ptr": P, "o_ptr": P}, {"N": 8}))
    slices = [op for op in fn.walk() if op.kind == "slice"]
    # only split's slice (of a reshape) is left: flip(flip(x)) is x, the flip of the ramp
    # is arithmetic on an iota, the flip of a constant is the constant
    assert len(slices) == 1, tile.print_function(fn)
    assert slices[0].operands[0].owner.kind == "reshape"
    x = np.arange(8, dtype=np.float32) * 10
    o = np.zeros(24, np.float32)
    interp.run(fn, (1,), [x, o])
    np.testing.assert_array_equal(o[:8], x + (np.arange(8) * 2 + 1)[::-1])
    np.testing.assert_array_equal(o[8:12], [0, 2, 4, 6])
    np.testing.assert_array_equal(o[16:], 3.0)
