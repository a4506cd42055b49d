"""quant_matmul: int8 and packed int4 weights with per-group scales, every activation dtype,
ragged sizes, the nibble convention, bad inputs."""

import numpy as np
import pytest
from kcases import DTYPES, check, rand
from kdsl.backends import get_backend
from kdsl.kernels import configs, quant_matmul
from kdsl.kernels import reference as R
from kdsl.kernels.configs import INF

from kdsl.runtime.launches import record_launches


def weights(rng, bits, K, N, group_size):
    scales = (rng.random((K // group_size, N)) * 0.05 + 0.01).astype(np.float32)
    if bits == 8:
        return rng.integers(-128, 128, (K, N)).astype(np.int8), scales
    return rng.integers(0, 256, (K // 2, N)).astype(np.uint8), scales


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bits", [8, 4])
def test_quant_matmul(backend, rng, dtype, bits):
    M, K, N, gs = 9, 96, 37, 32
    x = rand(rng, (M, K), dtype)
    w, s = weights(rng, bits, K, N, gs)
    y = quant_matmul(x, w, s, gs, bits, backend=backend)
    # w is rounded to x's dtype before the dot: a second rounding (k_out=2)
    check(y, R.quant_matmul(x, w, s, gs, bits), dtype, k=K, k_out=2)


@pytest.mark.parametrize("M", [1, 3, 8, 12])
@pytest.mark.parametrize("bits", [8, 4])
def test_quant_matmul_few_rows(backend, rng, M, bits):
    # decode-sized x: the tile is cut to M's power of two (configs.fit_rows), with a ragged N
    # and K of several groups and tiles; on CPU targets strips of columns whose dequantised
    # weights the dot computes in its FMA loop, once per block of rows (configs.quant_meta)
    K, N, gs = 192, 150, 64
    x = rand(rng, (M, K), "float32")
    w, s = weights(rng, bits, K, N, gs)
    check(quant_matmul(x, w, s, gs, bits, backend=backend), R.quant_matmul(x, w, s, gs, bits),
          "float32", k=K, k_out=2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bits,gs", [(8, 32), (4, 32), (4, 2), (4, 3)])
def test_quant_matvec(backend, rng, dtype, bits, gs):
    # M = 1 with a ragged N and K: the column-sum kernel on CPU targets (int4 with an odd
    # group size, whose byte rows may straddle two groups, takes the dot path)
    K, N = 96, 300
    x = rand(rng, (1, K), dtype)
    w, s = weights(rng, bits, K, N, gs)
    check(quant_matmul(x, w, s, gs, bits, backend=backend), R.quant_matmul(x, w, s, gs, bits),
          dtype, k=K, k_out=2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gs", [64, 128])
def test_quant_matvec_blocks_within_a_group(backend, rng, dtype, gs):
    # int4, M = 1, groups of several byte rows: the nibbles' sums are scaled once per group
    # and the offset of 8 taken off as one scalar (quant_matvec_kernel)
    K, N = 3 * gs, 300
    x = rand(rng, (1, K), dtype)
    w, s = weights(rng, 4, K, N, gs)
    check(quant_matmul(x, w, s, gs, 4, backend=backend), R.quant_matmul(x, w, s, gs, 4),
          dtype, k=K, k_out=2)


@pytest.mark.parametrize("bits", [8, 4])
def test_matvec_strips_follow_the_devices_parallelism(backend, rng, bits):
    """M = 1: strips of at most the table's width, at least as many as the device runs
    programs at once (configs.matvec_meta); a ragged last strip."""
    K, N, gs = 256, 1000, 64
    x = rand(rng, (1, K), "float32")
    w, s = weights(rng, bits, K, N, gs)
    with record_launches() as launches:
        y = quant_matmul(x, w, s, gs, bits, backend=backend)
    check(y, R.quant_matmul(x, w, s, gs, bits), "float32", k=K, k_out=2)
    meta = configs.matvec_meta(backend, N)
    (ln,) = launches
    if not meta:
        assert ln.jit.fn.__name__ == "quant_matmul_kernel"
        return
    assert ln.jit.fn.__name__ == "quant_matvec_kernel"
    par = get_backend(backend).parallelism()
    widest = configs.QUANT_MATVEC["cpu"][-1][1]["BLOCK_N"]
    want = widest if not par else max(configs.MATVEC_MIN_BLOCK,
                                      min(widest, 1 << (-(-N // par) - 1).bit_length()))
    assert ln.kwargs["BLOCK_N"] == meta["BLOCK_N"] == want


@pytest.mark.parametrize("gs", [32, 3])
@pytest.mark.parametrize("bits", [8, 4])
def test_few_rows_are_scaled_once_per_group(backend, rng, bits, gs):
    # 2..16 rows on one-thread CPU targets: quant_rows_kernel sums x times the integer
    # weights per group and scales the sum (configs.quant_rows_meta); a group size that is
    # not a multiple of its BLOCK_K takes the dequantising kernel
    M, K, N = 5, 3 * 32 * (1 if gs == 32 else 3), 70
    x = rand(rng, (M, K), "float32")
    w, s = weights(rng, bits, K, N, gs)
    with record_launches() as launches:
        y = quant_matmul(x, w, s, gs, bits, backend=backend)
    check(y, R.quant_matmul(x, w, s, gs, bits), "float32", k=K, k_out=2)
    rows = configs.quant_rows_meta(backend, M, N, gs)
    (ln,) = launches
    assert ln.jit.fn.__name__ == ("quant_rows_kernel" if rows else "quant_matmul_kernel")
    if gs == 3:
        assert not rows


@pytest.mark.parametrize("bits,gs", [(8, 32), (4, 32), (4, 3)])
def test_split_k_sums_runs_of_k(backend, rng, monkeypatch, bits, gs):
    # the dequantising kernel over runs of K (configs.quant_split_k, the GPU profiles' decode
    # shapes), forced here on every backend: float32 partials summed in split order
    monkeypatch.setattr(configs, "QUANT_SPLIT_K", {"default": {"PROGRAMS": 64, "MAX_SPLIT": 3,
                                                                "MIN_STEPS": 1}})
    monkeypatch.setattr(configs, "QUANT_FEW_ROWS", {"default": [(INF, {})]})
    M, K, N = 20, 3 * 96, 70
    x = rand(rng, (M, K), "float32")
    w, s = weights(rng, bits, K, N, gs)
    with record_launches() as launches:
        y = quant_matmul(x, w, s, gs, bits, backend=backend)
    check(y, R.quant_matmul(x, w, s, gs, bits), "float32", k=K, k_out=2)
    names = [ln.jit.fn.__name__ for ln in launches]
    assert names == ["quant_matmul_kernel", "sum_splits_kernel"], names
    assert launches[0].kwargs["SPLIT_K"] == 3


def test_quant_meta_gives_few_rows_long_strips():
    # 2..16 rows on the llvm backend: QUANT_FEW_ROWS' strips (narrowed to the device's
    # parallelism) and K steps; more rows, or a dot on a matrix unit, keep QUANT's tiles
    par = get_backend("llvm").parallelism()
    widest = configs.QUANT_FEW_ROWS["cpu"][0][1]["BLOCK_N"]
    for M in (2, 5, 16):
        meta = configs.quant_meta("llvm", M, 4096, "float32")
        want = widest if not par else max(configs.MATVEC_MIN_BLOCK,
                                          min(widest, 1 << (-(-4096 // par) - 1).bit_length()))
        assert meta["BLOCK_N"] == want and meta["BLOCK_K"] == 32, meta
        assert meta["BLOCK_M"] == configs.row_height(M, "llvm")
        rows = configs.quant_rows_meta("llvm", M, 4096, 128)
        assert {k: rows[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")} == \
            {k: meta[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")}
    tile = configs.fit_rows(configs.pick(configs.QUANT, "llvm", 17 * 4096), 17, "llvm")
    assert configs.quant_meta("llvm", 17, 4096, "float32") == tile
    assert configs.quant_rows_meta("llvm", 17, 4096, 128) == {}
    assert configs.quant_rows_meta("llvm", 4, 4096, 48) == {}  # 48 % 32
    if configs.matrix_unit("llvm", "bfloat16"):
        assert configs.quant_meta("llvm", 4, 4096, "bfloat16")["BLOCK_N"] != want


def test_fit_rows_cuts_block_m_to_the_problem():
    from kdsl.kernels.configs import fit_rows

    meta = {"BLOCK_M": 64, "BLOCK_N": 128}
    assert [fit_rows(meta, M, "llvm")["BLOCK_M"] for M in (1, 2, 3, 16, 17, 500)] == \
        [1, 2, 4, 16, 32, 64]
    assert fit_rows(meta, 1, "cuda")["BLOCK_M"] == 16  # GPU dots keep 16-row tiles
    assert fit_rows({"BLOCK_M": 8}, 100, "llvm") == {"BLOCK_M": 8}  # never grows


def test_int4_convention(backend):
    # byte 0x2F: low nibble 15 -> k=0 weight 7, high nibble 2 -> k=1 weight -6
    w = np.array([[0x2F]], np.uint8)
    y = quant_matmul(np.array([[1.0, 10.0]], np.float32), w, np.ones((1, 1), np.float32), 2, 4,
                     backend=backend)
    assert y[0, 0] == 7 - 60


def test_bad_inputs(rng):
    x = np.zeros((2, 8), np.float32)
    w8, s = weights(rng, 8, 8, 3, 4)
    w4, _ = weights(rng, 4, 8, 3, 4)
    with pytest.raises(TypeError, match="w_q: dtype uint8"):
        quant_matmul(x, w4, s, 4, 8)
    with pytest.raises(ValueError, match="w_q: expected K // 2 rows"):
        quant_matmul(x, w8.view(np.uint8), s, 4, 4)
    with pytest.raises(ValueError, match="group_size: 3 does not divide K = 8"):
        quant_matmul(x, w8, s, 3, 8)
    with pytest.raises(ValueError, match=r"scales: expected shape \(2, 3\)"):
        quant_matmul(x, w8, s[:1].copy(), 4, 8)
    with pytest.raises(ValueError, match="bits: expected 4 or 8"):
        quant_matmul(x, w8, s, 4, 2)
