"""The CPU matrix-unit dot (kdsl/lowering/dot_tile.py) and its Loop IR statement `TileDot`,
without the hardware: what the lowering emits for a target with the "tile_dot_*"
capabilities, the statement's meaning in the simulator against NumPy (every kernel here runs
in the Loop IR simulator), the verifier's rules, and the host-feature rules of
backends/llvm_host.py.  tests/backend/test_tile_dot_llvm.py runs the same kernels on AMX."""

from __future__ import annotations

import numpy as np
import pytest
from kcases import tile_mm
from kdsl.backends import llvm_host

from kdsl.frontend import build_function
from kdsl.ir import loop as L
from kdsl.ir.float_bits import bf16_bits, bf16_from_bits
from kdsl.ir.loop_interp import run_kernel
from kdsl.ir.loop_verify import LoopVerifyError, verify
from kdsl.ir.types import PointerType, bfloat16, float16, float32, int8, int32, scalar
from kdsl.lowering import lower
from kdsl.lowering.dot_tile import choose_block
from kdsl.passes import run_tile_passes
from kdsl.target import Target

CPU = frozenset({"fp64", "reduce_partials", "cpu_microkernel", "prefetch", "transpose_block"})
TILES = CPU | {"tile_dot", "tile_dot_bf16", "tile_dot_int8"}


def _lower(elem, caps, BM=32, BN=32, BK=64, b_t=False, b_cm=False) -> L.Kernel:
    p, i = scalar(PointerType(elem)), scalar(int32)
    out = scalar(PointerType(int32 if elem == int8 else float32))
    fn, _ = run_tile_passes(build_function(
        tile_mm.fn, {"a_ptr": p, "b_ptr": p, "c_ptr": out, "M": i, "N": i, "K": i},
        {"BM": BM, "BN": BN, "BK": BK, "ACC_INT": elem == int8, "B_T": b_t, "B_CM": b_cm}))
    return lower(fn, Target("llvm", threads=1, caps=caps, vector_bits=512, vector_regs=32))


def _stmts(k: L.Kernel, cls) -> list:
    return [s for s in L.walk(k.body) if isinstance(s, cls)]


def _data(rng, elem, M, N, K, b_t=False):
    """(a, b as the kernel reads them, a and b as float64 / int64 for the reference)."""
    bshape = (N, K) if b_t else (K, N)
    if elem == int8:
        a = rng.integers(-128, 128, (M, K), dtype=np.int8)
        b = rng.integers(-128, 128, bshape, dtype=np.int8)
        return a, b, a.astype(np.int64), (b.T if b_t else b).astype(np.int64)
    a = bf16_bits(rng.standard_normal((M, K)).astype(np.float32))
    b = bf16_bits(rng.standard_normal(bshape).astype(np.float32))
    af, bf = (bf16_from_bits(x).astype(np.float64) for x in (a, b))
    return a, b, af, bf.T if b_t else bf


@pytest.mark.parametrize("elem", [bfloat16, int8], ids=["bf16", "int8"])
@pytest.mark.parametrize("layout", ["b", "b_t", "b_cm"])
def test_simulated_tile_dot_matches_numpy(elem, layout):
    # ragged M, N and K: the masked loads feed the packing loops (zeros past the edges); b
    # in rows, as trans() of a load, and loaded column-major by its addresses
    rng = np.random.default_rng(1)
    M, N, K = 40, 48, 100
    BM, BN, BK = 32, 32, 64 if elem == bfloat16 else 128
    b_t = layout != "b"
    k = _lower(elem, TILES, BM, BN, BK, layout == "b_t", layout == "b_cm")
    assert _stmts(k, L.TileDot)
    # a bfloat16 b with k contiguous goes through words and 16 x 16 word transposes
    words = elem == bfloat16 and b_t
    assert bool(_stmts(k, L.Transpose)) == words
    assert all((s.b.dtype.name == "uint32") == words for s in _stmts(k, L.TileDot))
    a, b, af, bf = _data(rng, elem, M, N, K, b_t)
    c = np.zeros((M, N), np.int32 if elem == int8 else np.float32)
    run_kernel(k, (-(-M // BM), -(-N // BN)), [a, b, c, M, N, K])
    ref = af @ bf
    if elem == int8:
        np.testing.assert_array_equal(c, ref)
    else:
        np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4 * np.abs(ref).max())


def test_transposed_b_without_block_transposes():
    # a target without `transpose_block` copies a transposed b element by element: right
    rng = np.random.default_rng(5)
    M, N, K = 32, 32, 64
    k = _lower(bfloat16, TILES - {"transpose_block"}, 32, 32, 64, b_t=True)
    assert _stmts(k, L.TileDot) and not _stmts(k, L.Transpose)
    a, b, af, bf = _data(rng, bfloat16, M, N, K, True)
    c = np.zeros((M, N), np.float32)
    run_kernel(k, (1, 1), [a, b, c, M, N, K])
    np.testing.assert_allclose(c, af @ bf, rtol=1e-5, atol=1e-4 * np.abs(af @ bf).max())


def test_operands_go_from_memory_to_their_packed_copies():
    # the loads only the dot reads are recomputed in its packing loops: no float32 register
    # array of a or b, only the uint16 copies the unit reads (b's rows interleaved in pairs)
    k = _lower(bfloat16, TILES, 32, 64, 64)
    regs = {a.name: a for a in k.arrays}
    dots = _stmts(k, L.TileDot)  # (one per version of the masked loop: mask_version.py)
    assert dots and all((s.kind, s.rows, s.cols, s.depth) == ("bf16", 32, 32, 64)
                        for s in dots)
    s = dots[0]
    assert [a.name for a in k.arrays if a.dtype == float32] == [s.out.name]  # the accumulator
    assert regs[s.a.name].dtype.name == "uint16" and s.a_stride == 64
    assert s.b_stride == 2 * 64  # rows of b's copy: 64 columns x 2 values of k
    assert not _stmts(k, L.Prefetch)  # a loop feeding the unit gets no hints
    # without the capability: the vector micro-kernel, and the loop's hints
    plain = _lower(bfloat16, CPU, 32, 64, 64)
    assert not _stmts(plain, L.TileDot) and _stmts(plain, L.Prefetch)


@pytest.mark.parametrize("elem, caps", [
    (float16, TILES),                       # no float16 kind
    (bfloat16, TILES - {"tile_dot_bf16"}),  # the kind is missing
    (int8, TILES - {"tile_dot_int8"}),
], ids=["f16", "no-bf16", "no-int8"])
def test_other_types_and_targets_keep_the_micro_kernel(elem, caps):
    assert not _stmts(_lower(elem, caps), L.TileDot)


@pytest.mark.parametrize("BM, BN, BK", [(8, 32, 64), (32, 8, 64), (32, 32, 16)])
def test_shapes_off_the_units_grain_fall_back(BM, BN, BK):
    # M, N multiples of 16 and K of 32 (bf16): otherwise no TileDot, and still right
    k = _lower(bfloat16, TILES, BM, BN, BK)
    assert not _stmts(k, L.TileDot)
    rng = np.random.default_rng(2)
    M, N, K = 16, 32, 40
    a, b, af, bf = _data(rng, bfloat16, M, N, K)
    c = np.zeros((M, N), np.float32)
    run_kernel(k, (-(-M // BM), -(-N // BN)), [a, b, c, M, N, K])
    np.testing.assert_allclose(c, af @ bf, rtol=1e-5, atol=1e-4)


def test_blocks_fill_at_most_eight_tiles():
    assert choose_block(256, 256) == (32, 32)
    assert choose_block(48, 16) == (48, 16)
    assert choose_block(16, 48) == (16, 48)
    assert choose_block(16, 16) == (16, 16)
    assert choose_block(32, 16) == (32, 16)


def _tile_kernel(kind: str, depth: int, zero: bool) -> L.Kernel:
    """a, b (operand bits) -> register arrays -> one 32 x 32 TileDot -> out."""
    acc_t, g, part = L.TILE_DOT_KINDS[kind]
    pa, pb = L.KParam("a", PointerType(part)), L.KParam("b", PointerType(part))
    po = L.KParam("o", PointerType(acc_t))
    A, B = L.Array("A", part, 32 * depth), L.Array("B", part, depth * 32)
    O = L.Array("O", acc_t, 32 * 32)
    i = L.Var("i", int32)
    c = lambda v: L.Const(v, int32)  # noqa: E731
    va, vb, vo = (L.Var(p.name, p.dtype) for p in (pa, pb, po))
    body = [
        L.For(i, c(0), c(A.size), c(1), [L.ArrayStore(A, i, L.Load(L.PtrAdd(va, i)))]),
        L.For(i, c(0), c(B.size), c(1), [L.ArrayStore(B, i, L.Load(L.PtrAdd(vb, i)))]),
        L.For(i, c(0), c(O.size), c(1), [L.ArrayStore(O, i, L.Load(L.PtrAdd(vo, i)))]),
        L.TileDot(kind, O, c(0), 32, A, c(0), depth, B, c(0), 32 * g, 32, 32, depth, zero),
        L.For(i, c(0), c(O.size), c(1), [L.Store(L.PtrAdd(vo, i), L.Index(O, i))]),
    ]
    return L.Kernel("k", [pa, pb, po], body, [i], [A, B, O], 1)


@pytest.mark.parametrize("zero", [False, True])
def test_statement_meaning_in_the_simulator(zero):
    # B(k, j) = b[(k // g) * b_stride + g * j + k % g]: b's rows interleaved g at a time
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (32, 128), dtype=np.int8)
    b = rng.integers(-128, 128, (128, 32), dtype=np.int8)
    vnni = b.reshape(32, 4, 32).transpose(0, 2, 1).reshape(-1)
    o = rng.integers(-1000, 1000, (32, 32)).astype(np.int32)
    want = (0 if zero else o.astype(np.int64)) + a.astype(np.int64) @ b.astype(np.int64)
    k = _tile_kernel("int8", 128, zero)
    assert "tile_dot_int8<32x32x128>" in L.print_kernel(k)
    run_kernel(k, (1,), [a.reshape(-1), vnni, o])
    np.testing.assert_array_equal(o, want)


def test_statement_of_bfloat16_pairs():
    rng = np.random.default_rng(4)
    a = bf16_bits(rng.standard_normal((32, 64)).astype(np.float32))
    b = bf16_bits(rng.standard_normal((64, 32)).astype(np.float32))
    pairs = b.reshape(32, 2, 32).transpose(0, 2, 1).reshape(-1)
    o = rng.standard_normal((32, 32)).astype(np.float32)
    want = o + bf16_from_bits(a).astype(np.float64) @ bf16_from_bits(b).astype(np.float64)
    run_kernel(_tile_kernel("bf16", 64, False), (1,), [a.reshape(-1), pairs, o])
    np.testing.assert_allclose(o, want, rtol=1e-6, atol=1e-6)


def _broken(**change) -> L.Kernel:
    k = _tile_kernel("bf16", 64, False)
    s = next(x for x in k.body if isinstance(x, L.TileDot))
    for name, value in change.items():
        setattr(s, name, value)
    return k


@pytest.mark.parametrize("change, says", [
    ({"kind": "fp8"}, "kind 'fp8'"),
    ({"rows": 48, "cols": 48}, "at most 8 tiles"),
    ({"depth": 48}, "multiples of 16 x 16 x 32"),
    ({"a_stride": 16}, "overlap"),
    ({"out": L.Array("A", L.TILE_DOT_KINDS["bf16"][2], 32 * 64)}, "float32 output"),
], ids=["kind", "tiles", "depth", "stride", "out-type"])
def test_verifier_names_the_broken_rule(change, says):
    with pytest.raises(LoopVerifyError, match=says):
        verify(_broken(**change))


def test_matrix_units_follow_features_and_the_grant():
    amx = "+avx512f,+amx-tile,+amx-bf16,+amx-int8"
    assert llvm_host.matrix_units(amx, True) == {"tile_dot", "tile_dot_bf16", "tile_dot_int8"}
    assert llvm_host.matrix_units(amx, False) == frozenset()  # Linux refused the tile state
    assert llvm_host.matrix_units("+avx512f,+amx-tile,+amx-int8", True) == {
        "tile_dot", "tile_dot_int8"}
    assert llvm_host.matrix_units("+avx512f,+avx512bf16", True) == frozenset()
    assert llvm_host.matrix_units("+avx512f,-amx-tile,+amx-bf16", True) == frozenset()


def test_vector_unit_where_it_beats_the_micro_kernel():
    # AVX512-BF16 without AMX: `auto` takes it on AMD cores (vdpbf16ps as fast as an FMA)
    # only; a named unit is taken anywhere it exists, and refused where it does not
    bf16 = "+avx512f,+avx512bf16"
    assert llvm_host.matrix_units(bf16, True, "znver5") == {"tile_dot", "tile_dot_bf16"}
    assert llvm_host.matrix_units(bf16, True, "cooperlake") == frozenset()
    assert llvm_host.choose_unit(bf16, True, "avx512bf16", "cooperlake") == (
        "avx512bf16", ("bf16",))
    amx = bf16 + ",+amx-tile,+amx-bf16,+amx-int8"
    assert llvm_host.choose_unit(amx, True, "auto", "sapphirerapids") == ("amx",
                                                                          ("bf16", "int8"))
    assert llvm_host.choose_unit(amx, False, "auto", "znver5")[0] == "avx512bf16"
    assert llvm_host.choose_unit(amx, True, "none", "x") == (None, ())
    with pytest.raises(ValueError, match="KDSL_LLVM_MATRIX=amx: this CPU"):
        llvm_host.choose_unit(bf16, True, "amx", "znver5")
    assert llvm_host.choose_unit(bf16 + ",-evex512", True, "auto", "znver5") == (None, ())


def test_matrix_env_turns_the_units_off(monkeypatch):
    monkeypatch.setenv(llvm_host.MATRIX_ENV, "none")
    assert llvm_host.matrix_caps() == frozenset()
    monkeypatch.setenv(llvm_host.MATRIX_ENV, "bogus")
    with pytest.raises(ValueError, match="KDSL_LLVM_MATRIX='bogus'"):
        llvm_host.matrix_caps()


def test_pair_bits_of_a_uint16_register_array():
    # PairBits reads two 16-bit patterns of a register array as one word, the low one first
    from kdsl.ir.types import uint16, uint32

    x, y = L.KParam("x", PointerType(uint16)), L.KParam("y", PointerType(uint32))
    h, i = L.Array("h", uint16, 8), L.Var("i", int32)
    c = lambda v: L.Const(v, int32)  # noqa: E731
    xv, yv = L.Var("x", x.dtype), L.Var("y", y.dtype)
    body = [L.For(i, c(0), c(8), c(1), [L.ArrayStore(h, i, L.Load(L.PtrAdd(xv, i)))]),
            L.For(i, c(0), c(4), c(1), [L.Store(L.PtrAdd(yv, i), L.PairBits(
                h, L.Binary("mul", i, c(2))))])]
    k = L.Kernel("k", [x, y], body, [i], [h], 1)
    src = np.arange(0x1111, 0x1111 * 9, 0x1111, dtype=np.uint16)
    out = np.zeros(4, np.uint32)
    run_kernel(k, (1,), [src, out])
    want = src[0::2].astype(np.uint32) | src[1::2].astype(np.uint32) << 16
    np.testing.assert_array_equal(out, want)
    g = L.Array("g", float32, 8)  # a float32 register array has no pairs of patterns
    bad = L.Kernel("k", [x, y], [L.For(i, c(0), c(4), c(1), [L.Store(L.PtrAdd(yv, i), L.PairBits(
        g, L.Binary("mul", i, c(2))))])], [i], [g], 1)
    with pytest.raises(LoopVerifyError, match="uint16 register arrays"):
        verify(bad)


def test_interleaved_groups_are_versioned_lone_strides_are_not():
    from kdsl.lowering.mask_version import _dense

    assert _dense([1, 1, 0]) and _dense([2, 2]) and _dense([4, 4, 4, 4, 0])
    assert not _dense([2]) and not _dense([4, 4]) and not _dense([3, 3, 3])
    assert not _dense([1, 2, 2]) and not _dense([None, 1])
