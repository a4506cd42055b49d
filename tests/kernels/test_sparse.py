"""Sparse kernels: block_sparse_matmul (block sizes, densities from no block to all, ragged M,
bias and activations, the cached layout index) and sparsify_2_4 / semi_structured_matmul
(selection rule and ties, ragged M and N, a leftover group, column-major x), all against the
float64 references; bad inputs."""

import numpy as np
import pytest
from kcases import DTYPES, check, rand, skip_heavy, slow_on_opencl
from kdsl.kernels import block_sparse_matmul, semi_structured_matmul, sparse, sparsify_2_4
from kdsl.kernels import reference as R


def blocks_for(rng, layout, block, dtype):
    return rand(rng, (int(np.count_nonzero(layout)), block, block), dtype)


# ------------------------------------------------------------------------------ block-sparse

@pytest.mark.parametrize("dtype", DTYPES)
def test_block_sparse_dtypes(backend, rng, dtype):
    skip_heavy(backend, dtype)
    M, block = 37, 16
    layout = rng.random((4, 3)) < 0.5
    layout[0, 0], layout[:, 2] = True, False  # one block column without blocks
    a = rand(rng, (M, 4 * block), dtype)
    bb = blocks_for(rng, layout, block, dtype)
    c = block_sparse_matmul(a, bb, layout, block, backend=backend)
    check(c, R.block_sparse_matmul(a, bb, layout, block), dtype, k=4 * block)
    c64 = R.to_float64(c)
    assert c64.shape == (M, 3 * block) and not c64[:, 2 * block:].any()


@pytest.mark.parametrize("block, density", [(16, 0.0), (32, 1.0), (48, 0.5), (64, 0.3),
                                            (128, 0.5)])
def test_block_sizes_densities(backend, rng, block, density):
    if backend == "interp" and block == 128:
        pytest.skip("interp: a 128-wide dot per step is covered by the smaller blocks")
    nbk, nbn = (2, 2) if block >= 64 else (3, 2)
    layout = rng.random((nbk, nbn)) < density
    if 0 < density < 1:
        layout[0, 0], layout[-1, -1] = True, False
    a = rand(rng, (70, nbk * block), "float32")  # ragged, several row tiles
    bb = blocks_for(rng, layout, block, "float32")
    c = block_sparse_matmul(a, bb, layout, block, backend=backend)
    check(c, R.block_sparse_matmul(a, bb, layout, block), "float32", k=nbk * block)


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
def test_block_sparse_epilogue(backend, rng, activation):
    if activation != "gelu":
        slow_on_opencl(backend, "one kernel variant per activation")
    layout = np.array([[1, 0], [1, 1]], np.uint8)  # any integer layout: nonzero = a block
    a = rand(rng, (9, 32), "float16")
    bb = blocks_for(rng, layout, 16, "float16")
    bias = rand(rng, 32, "float32")
    c = block_sparse_matmul(a, bb, layout, 16, bias=bias, activation=activation,
                            backend=backend)
    check(c, R.block_sparse_matmul(a, bb, layout, 16, bias, activation), "float16", k=32)


def test_block_sparse_transposed_a(rng):
    layout = np.array([[True, False], [True, True]])
    at = rand(rng, (32, 20), "float32")  # a = at.T: column-major, read in place
    bb = blocks_for(rng, layout, 16, "float32")
    check(block_sparse_matmul(at.T, bb, layout, 16), R.block_sparse_matmul(at.T, bb, layout, 16),
          "float32", k=32)


def test_layout_index_is_cached():
    layout = np.array([[1, 0, 1], [0, 0, 1], [1, 0, 1]], bool)
    col_ptr, row_idx, blk_idx = sparse.layout_index(layout)
    # column 0: rows 0, 2 (tiles 0, 3); column 1: none; column 2: rows 0, 1, 2 (tiles 1, 2, 4)
    assert col_ptr.tolist() == [0, 2, 2, 5]
    assert row_idx.tolist() == [0, 2, 0, 1, 2]
    assert blk_idx.tolist() == [0, 3, 1, 2, 4]
    assert all(x.dtype == np.int32 for x in (col_ptr, row_idx, blk_idx))
    again = sparse.layout_index(layout.copy())
    assert all(x is y for x, y in zip(again, (col_ptr, row_idx, blk_idx)))
    other = sparse.layout_index(layout.T.copy())
    assert other[0] is not col_ptr


def test_block_sparse_empty_sizes(rng):
    layout = np.array([[True]])
    bb = blocks_for(rng, layout, 16, "float32")
    assert block_sparse_matmul(np.zeros((0, 16), np.float32), bb, layout, 16).shape == (0, 16)
    c = block_sparse_matmul(np.zeros((3, 0), np.float32), np.zeros((0, 16, 16), np.float32),
                            np.zeros((0, 2), bool), 16, bias=np.ones(32, np.float32))
    assert c.shape == (3, 32) and (c == 1).all()


def test_block_sparse_bad_inputs():
    a = np.zeros((4, 64), np.float32)
    layout = np.array([[1, 0], [0, 1]], bool)
    bb = np.zeros((2, 32, 32), np.float32)
    with pytest.raises(ValueError, match="a: K = 64 is not a multiple of block = 48"):
        block_sparse_matmul(a, np.zeros((2, 48, 48), np.float32), layout, 48)
    with pytest.raises(ValueError, match=r"layout: expected K // block = 2 rows"):
        block_sparse_matmul(a, bb, np.ones((3, 2), bool), 32)
    with pytest.raises(ValueError, match=r"b_blocks: expected shape \(2, 32, 32\)"):
        block_sparse_matmul(a, np.zeros((3, 32, 32), np.float32), layout, 32)
    with pytest.raises(ValueError, match=r"b_blocks: expected shape \(2, 32, 32\)"):
        block_sparse_matmul(a, np.zeros((2, 16, 16), np.float32), layout, 32)
    with pytest.raises(ValueError, match="block: expected a multiple of 16 from 16 to 128"):
        block_sparse_matmul(a, bb, layout, 8)
    with pytest.raises(ValueError, match="block: expected a multiple of 16 from 16 to 128"):
        block_sparse_matmul(a, bb, layout, 256)
    with pytest.raises(ValueError, match="block: expected a positive int"):
        block_sparse_matmul(a, bb, layout, 32.0)
    with pytest.raises(TypeError, match="b_blocks: dtype float16 differs"):
        block_sparse_matmul(a, bb.astype(np.float16), layout, 32)
    with pytest.raises(TypeError, match="layout: dtype float32"):
        block_sparse_matmul(a, bb, layout.astype(np.float32), 32)
    with pytest.raises(ValueError, match="layout: expected a 2-D array"):
        block_sparse_matmul(a, bb, layout.ravel(), 32)
    with pytest.raises(ValueError, match=r"bias: expected shape \(64,\)"):
        block_sparse_matmul(a, bb, layout, 32, bias=np.zeros(32, np.float32))
    with pytest.raises(ValueError, match="activation"):
        block_sparse_matmul(a, bb, layout, 32, activation="tanh")


# ------------------------------------------------------------------------------ 2:4

def test_sparsify_rule(backend):
    # columns: distinct magnitudes, ties (to the lower index), signs, zeros, a NaN, infinities
    w = np.array([[1.0, 1.0, -3.0, 0.0, 1.0, 2.0],
                  [-4.0, -1.0, 2.0, 0.0, np.nan, np.inf],
                  [2.0, 1.0, -3.0, 0.0, 5.0, 3.0],
                  [3.0, 1.0, 1.0, 0.0, 1.0, -np.inf]], np.float32)
    values, meta = sparsify_2_4(w, backend=backend)
    assert meta.dtype == np.int8 and values.dtype == np.float32 and values.shape == (2, 6)
    assert meta.T.tolist() == [[1, 3], [0, 1], [0, 2], [0, 1], [1, 2], [1, 3]]
    np.testing.assert_array_equal(values.T, [[-4, 3], [1, -1], [-3, -3], [0, 0],
                                             [np.nan, 5], [np.inf, -np.inf]])
    rv, rm = R.sparsify_2_4(w)
    np.testing.assert_array_equal(meta, rm)
    np.testing.assert_array_equal(values, rv)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sparsify_dtypes(backend, rng, dtype):
    w = rand(rng, (24, 37), dtype)
    values, meta = sparsify_2_4(w, backend=backend)
    rv, rm = R.sparsify_2_4(w)
    np.testing.assert_array_equal(np.asarray(meta), rm)
    np.testing.assert_array_equal(R.to_float64(values), rv)  # exact: values are copied
    # the 2:4 matrix keeps half of w, the larger half of every group
    dense = R.semi_structured_dense(values, meta)
    w64 = R.to_float64(w)
    assert np.count_nonzero(dense) == w64.size // 2
    assert np.array_equal(dense[dense != 0], w64[dense != 0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_semi_structured_dtypes(backend, rng, dtype):
    skip_heavy(backend, dtype)
    M, K, N = 37, 24, 29  # ragged M and N; K // 4 = 6 groups: whole steps and a leftover
    x = rand(rng, (M, K), dtype)
    values, meta = R.sparsify_2_4(rand(rng, (K, N), dtype))
    values = R.cast(values, dtype)
    y = semi_structured_matmul(x, values, meta, backend=backend)
    assert R.to_float64(y).shape == (M, N)
    check(y, R.semi_structured_matmul(x, values, meta), dtype, k=K // 2)


@pytest.mark.parametrize("K", [4, 8, 36])
def test_semi_structured_k(backend, rng, K):
    if K != 36:
        slow_on_opencl(backend, "one K per compile is enough there")
    x = rand(rng, (5, K), "float32")
    values, meta = sparsify_2_4(rand(rng, (K, 10), "float32"))
    y = semi_structured_matmul(x, values, meta, backend=backend)
    check(y, R.semi_structured_matmul(x, values, meta), "float32", k=K // 2)


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
def test_semi_structured_epilogue(backend, rng, activation):
    if activation != "gelu":
        slow_on_opencl(backend, "one kernel variant per activation")
    x = rand(rng, (7, 16), "float32")
    values, meta = sparsify_2_4(rand(rng, (16, 20), "float32"))
    bias = rand(rng, 20, "float16")
    y = semi_structured_matmul(x, values, meta, bias=bias, activation=activation,
                               backend=backend)
    check(y, R.semi_structured_matmul(x, values, meta, bias, activation), "float32", k=8)


# Rows of SEMI_STRUCTURED for every profile: the panel kernel (kd.sparse_dot, BLOCK_K) and the
# gather-FMA one (GROUPS), small tiles so that the shapes below are ragged across several.
PANEL_ROW = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2, "num_warps": 1}
GATHER_ROW = {"BLOCK_M": 16, "BLOCK_N": 16, "GROUP_M": 2, "GROUPS": 2, "num_warps": 1}


@pytest.mark.parametrize("row", ["panel", "gather"])
@pytest.mark.parametrize("M,K,N", [(37, 72, 29), (16, 32, 16), (3, 4, 40)])
def test_semi_structured_kernels_ragged(backend, rng, monkeypatch, row, M, K, N):
    # M, N ragged across 16 x 16 tiles; K // 2 = 36: two whole steps of 16 kept rows and a
    # masked last one (panel), leftover groups (gather); exact tiles; one group, one row
    from kdsl.kernels import configs

    if (M, K, N) != (37, 72, 29):
        slow_on_opencl(backend, "one kernel variant per shape")
    cfg = PANEL_ROW if row == "panel" else GATHER_ROW
    for profile in ("default", "cpu", "tile", "simt-cpu"):
        monkeypatch.setitem(configs.SEMI_STRUCTURED, profile, [(configs.INF, dict(cfg))])
    x = rand(rng, (M, K), "float32")
    values, meta = sparsify_2_4(rand(rng, (K, N), "float32"))
    y = semi_structured_matmul(x, values, meta, backend=backend)
    check(y, R.semi_structured_matmul(x, values, meta), "float32", k=K // 2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_semi_structured_panel_kernel_dtypes_epilogue(backend, rng, monkeypatch, dtype):
    from kdsl.kernels import configs

    skip_heavy(backend, dtype)
    for profile in ("default", "cpu", "tile", "simt-cpu"):
        monkeypatch.setitem(configs.SEMI_STRUCTURED, profile, [(configs.INF, dict(PANEL_ROW))])
    M, K, N = 21, 40, 35
    x = rand(rng, (M, K), dtype)
    values, meta = R.sparsify_2_4(rand(rng, (K, N), dtype))
    values = R.cast(values, dtype)
    bias = rand(rng, N, "float32")
    y = semi_structured_matmul(x, values, meta, bias=bias, activation="gelu", backend=backend)
    check(y, R.semi_structured_matmul(x, values, meta, bias, "gelu"), dtype, k=K // 2)


def test_semi_structured_cpu_tiles(rng):
    # the CPU row's own tiles (llvm): several program tiles each way, ragged, and a K whose
    # kept rows fill whole steps and a masked last one
    M, K, N = 150, 200, 70
    x = rand(rng, (M, K), "float32")
    values, meta = sparsify_2_4(rand(rng, (K, N), "float32"))
    y = semi_structured_matmul(x, values, meta, backend="llvm")
    check(y, R.semi_structured_matmul(x, values, meta), "float32", k=K // 2)


def test_semi_structured_layouts(rng):
    # column-major x (a transposed view) and uint8 meta; and any increasing pairs of indices
    xt = rand(rng, (16, 6), "float32")
    meta = np.tile(np.array([[0], [3], [1], [2]], np.uint8), (2, 5))
    values = rand(rng, (8, 5), "float32")
    y = semi_structured_matmul(xt.T, values, meta)
    check(y, R.semi_structured_matmul(xt.T, values, meta), "float32", k=8)
    dense = R.semi_structured_dense(values, meta)
    np.testing.assert_allclose(y, xt.T.astype(np.float64) @ dense, rtol=1e-5, atol=1e-5)


def test_semi_structured_empty_sizes():
    values, meta = np.zeros((2, 3), np.float32), np.zeros((2, 3), np.int8)
    meta[1] = 1
    assert semi_structured_matmul(np.zeros((0, 4), np.float32), values, meta).shape == (0, 3)
    y = semi_structured_matmul(np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32),
                               np.zeros((0, 3), np.int8), bias=np.ones(3, np.float32))
    assert y.shape == (2, 3) and (y == 1).all()


def test_semi_structured_bad_inputs():
    x = np.zeros((3, 8), np.float32)
    values, meta = sparsify_2_4(np.ones((8, 5), np.float32))
    with pytest.raises(ValueError, match="x: K = 6 is not a multiple of 4"):
        semi_structured_matmul(np.zeros((3, 6), np.float32), values[:3], meta[:3])
    with pytest.raises(ValueError, match=r"values: expected shape \(4, 5\)"):
        semi_structured_matmul(x, values[:2], meta)
    with pytest.raises(ValueError, match=r"meta: expected shape \(4, 5\)"):
        semi_structured_matmul(x, values, meta[:, :4])
    bad = meta.copy()
    bad[2, 3] = 4
    with pytest.raises(ValueError, match=r"meta: value 4 at \(2, 3\) is outside 0-3"):
        semi_structured_matmul(x, values, bad)
    bad[2, 3] = -1
    with pytest.raises(ValueError, match=r"meta: value -1 at \(2, 3\) is outside 0-3"):
        semi_structured_matmul(x, values, bad)
    bad = meta.copy()
    bad[2, 1], bad[3, 1] = 2, 2
    with pytest.raises(ValueError, match="meta: the kept indices 2, 2 of group 1 in column 1"):
        semi_structured_matmul(x, values, bad)
    with pytest.raises(TypeError, match="meta: dtype int32"):
        semi_structured_matmul(x, values, meta.astype(np.int32))
    with pytest.raises(TypeError, match="values: dtype float16 differs"):
        semi_structured_matmul(x, values.astype(np.float16), meta)
    with pytest.raises(ValueError, match=r"bias: expected shape \(5,\)"):
        semi_structured_matmul(x, values, meta, bias=np.zeros(8, np.float32))
    with pytest.raises(ValueError, match="w: K = 6 \\(rows\\) is not a multiple of 4"):
        sparsify_2_4(np.zeros((6, 2), np.float32))
    with pytest.raises(TypeError, match="w: dtype int8"):
        sparsify_2_4(np.zeros((4, 2), np.int8))


def test_torch_tensors_come_back_as_torch(rng):
    torch = pytest.importorskip("torch")
    layout = torch.tensor([[True, False], [True, True]])
    a = torch.randn(5, 32).to(torch.bfloat16)
    bb = torch.randn(3, 16, 16).to(torch.bfloat16)
    c = block_sparse_matmul(a, bb, layout, 16)
    assert isinstance(c, torch.Tensor) and c.dtype == torch.bfloat16
    check(R.to_float64(c), R.block_sparse_matmul(a, bb, layout, 16), "bfloat16", k=32)
    values, meta = sparsify_2_4(torch.randn(16, 6))
    assert isinstance(values, torch.Tensor) and meta.dtype == torch.int8
    x = torch.randn(3, 16)
    y = semi_structured_matmul(x, values, meta)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    check(y, R.semi_structured_matmul(x, values, meta), "float32", k=8)
