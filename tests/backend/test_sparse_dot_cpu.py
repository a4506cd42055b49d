"""`kd.sparse_dot` on every backend against a float64 reference, over the shapes that pick the
CPU micro-kernel's paths (kdsl/lowering/sparse_dot_cpu.py): full and narrow register blocks,
several column blocks, uint8 / uint16 / int32 row offsets, meta as a transposed view or as
stored, a transposed b (copied row-major first), 16-bit operands, an accumulator read after
the product; results that do not depend on the blocks; and the block table itself."""

from __future__ import annotations

import numpy as np
import pytest
from kcases import slow_on_opencl
from kdsl.kernels import reference as R

import kdsl as kd
from kdsl.lowering.dot_cpu import BLOCKS
from kdsl.lowering.sparse_dot_cpu import OFFSET_TYPES, blocks


@kd.jit
def _sdot(v_ptr, m_ptr, b_ptr, c_ptr, o_ptr, M: kd.constexpr, H: kd.constexpr,
          N: kd.constexpr, T_META: kd.constexpr, T_B: kd.constexpr, KEEP: kd.constexpr):
    # v, meta stored [H, M] (rows of the kept values, as the library stores them) and read
    # transposed when T_META, else stored [M, H]; b stored [N, K] and read transposed when
    # T_B, else [K, N]; o = sparse_dot(v, meta, b, c) (+ c again when KEEP: c stays live)
    rm, rh, rn, rk = kd.arange(0, M), kd.arange(0, H), kd.arange(0, N), kd.arange(0, 2 * H)
    if T_META:
        v = kd.trans(kd.load(v_ptr + rh[:, None] * M + rm[None, :]))
        e = kd.trans(kd.load(m_ptr + rh[:, None] * M + rm[None, :]))
    else:
        v = kd.load(v_ptr + rm[:, None] * H + rh[None, :])
        e = kd.load(m_ptr + rm[:, None] * H + rh[None, :])
    if T_B:
        b = kd.trans(kd.load(b_ptr + rn[:, None] * (2 * H) + rk[None, :]))
    else:
        b = kd.load(b_ptr + rk[:, None] * N + rn[None, :])
    c = kd.load(c_ptr + rm[:, None] * N + rn[None, :])
    o = kd.sparse_dot(v, e, b, c)
    if KEEP:
        o += c
    kd.store(o_ptr + rm[:, None] * N + rn[None, :], o)


def _case(rng, M, H, N, dtype="float32"):
    """(v [M, H], meta, b [K, N], c): float64 values already rounded to `dtype`."""
    K = 2 * H
    vals, meta = R.sparsify_2_4(rng.standard_normal((K, M)))  # [H, M]: along K, as stored

    def rounded(x):
        return R.to_float64(R.cast(x, dtype))

    b = rounded(rng.standard_normal((K, N)))
    c = rng.standard_normal((M, N)).astype(np.float32)
    return rounded(vals.T.copy()), np.ascontiguousarray(meta.T), b, c


def _reference(v, e, b, c):
    H = v.shape[1]
    rows = 4 * (np.arange(H) // 2)[None, :] + (e.astype(np.int64) & 3)  # [M, H]
    return c.astype(np.float64) + np.einsum("mh,mhn->mn", v, b[rows])


def _run(backend, v, e, b, c, dtype="float32", t_meta=True, t_b=False, keep=False, jit=_sdot):
    M, H = v.shape
    N = b.shape[1]
    vs = R.cast(np.ascontiguousarray(v.T) if t_meta else v, dtype)
    es = np.ascontiguousarray(e.T) if t_meta else e
    bs = R.cast(np.ascontiguousarray(b.T) if t_b else b, dtype)
    o = np.empty((M, N), np.float32)
    jit[(1,)](vs, es, bs, c, o, M=M, H=H, N=N, T_META=t_meta, T_B=t_b, KEEP=keep,
              backend=backend)
    return o


# (M, H, N) and the AVX-512 block: 4 x 64 and 2 x 128 (uint16 offsets); 7 rows by a narrow
# 24 columns (1 x 8, uint8 offsets); 6 x 16 (uint8); 8 x 256 (2 x 128 blocks, two column
# blocks, K * N = 65536: uint16 at its bound); 4 x 256 with K = 512 (int32 offsets, bounded)
SHAPES = [(16, 8, 64), (4, 16, 128), (7, 4, 24), (6, 2, 16), (8, 128, 256), (4, 256, 256)]


@pytest.mark.parametrize("M,H,N", SHAPES)
def test_sparse_dot_shapes(backend, rng, M, H, N):
    if (M, H, N) not in SHAPES[:2]:
        slow_on_opencl(backend, "one kernel variant per shape")
    v, e, b, c = _case(rng, M, H, N)
    try:
        o = _run(backend, v, e, b, c)
    except kd.CompilationError as err:
        # a work-group target stages the operands in local memory, whose size is the
        # device's (PoCL: its cache size); a refusal that says so is the right answer
        if "bytes of shared memory, more than" not in str(err):
            raise
        pytest.skip(f"{backend}: {str(err).splitlines()[-1]}")
    np.testing.assert_allclose(o, _reference(v, e, b, c), rtol=1e-5, atol=1e-5 * np.sqrt(H))


@pytest.mark.parametrize("t_meta,t_b,keep", [(False, False, False), (True, True, False),
                                             (True, False, True)])
def test_sparse_dot_layouts(backend, rng, t_meta, t_b, keep):
    slow_on_opencl(backend, "one kernel variant per layout")
    v, e, b, c = _case(rng, 8, 16, 32)
    o = _run(backend, v, e, b, c, t_meta=t_meta, t_b=t_b, keep=keep)
    ref = _reference(v, e, b, c) + (c if keep else 0)
    np.testing.assert_allclose(o, ref, rtol=1e-5, atol=1e-5 * np.sqrt(16))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sparse_dot_16_bit_operands(backend, rng, dtype):
    slow_on_opencl(backend, "one kernel variant per dtype")
    v, e, b, c = _case(rng, 8, 16, 32, dtype)
    o = _run(backend, v, e, b, c, dtype)
    np.testing.assert_allclose(o, _reference(v, e, b, c), rtol=1e-5, atol=1e-4)


def test_llvm_results_do_not_depend_on_the_blocks(monkeypatch, rng):
    # the blocks follow the SIMD profile; every output element sees the same FMAs in the
    # same order whatever they are (the generic strategy's order), so results are bitwise equal
    from kdsl.backends import llvm_host

    v, e, b, c = _case(rng, 8, 16, 128)
    outs = []
    for env in ("auto", "llvm", "256", "128"):
        monkeypatch.setenv(llvm_host.ENV, env)
        outs.append(_run("llvm", v, e, b, c, jit=kd.jit(_sdot.fn)))  # a fresh compile
    np.testing.assert_allclose(outs[0], _reference(v, e, b, c), rtol=1e-5, atol=1e-4)
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


# --------------------------------------------------------------------------- block table


@pytest.mark.parametrize("bits,regs,first", [(512, 32, (3, 128)), (256, 32, (3, 64)),
                                              (256, 16, (1, 64)), (128, 32, (3, 32)),
                                              (128, 16, (1, 32))])
def test_blocks_fit_the_register_file(bits, regs, first):
    shapes = blocks(bits, regs)
    assert shapes[0] == first
    W = bits // 32
    for mr, nr in shapes:
        assert mr * -(-nr // W) + 2 <= regs, (mr, nr)  # accumulators, a broadcast, a spare
    assert shapes[-1] == (1, 1)


def test_library_tiles_take_a_full_width_block():
    # the CPU row of semi_structured_matmul: its BLOCK_N x BLOCK_M tile takes a block of
    # whole 512-bit vectors at least 4 wide (not a narrow fallback)
    from kdsl.kernels import configs

    for _, meta in configs.SEMI_STRUCTURED["cpu"]:
        mr, nr = next((mr, nr) for mr, nr in blocks(512, 32)
                      if meta["BLOCK_N"] % mr == 0 and meta["BLOCK_M"] % nr == 0)
        assert nr % 16 == 0 and nr // 16 >= 4, (meta, mr, nr)


def test_width_agnostic_blocks_are_the_dense_table():
    assert blocks(0, 0) == BLOCKS


def test_offset_types_cover_their_bounds():
    assert [b for b, _ in OFFSET_TYPES] == sorted(b for b, _ in OFFSET_TYPES)
    for bound, t in OFFSET_TYPES:
        assert bound - 1 < 1 << t.bits
