"""bfloat16 and int8 dots on the CPU's matrix unit (Intel AMX) through the llvm backend
(kdsl/lowering/dot_tile.py, backends/llvm_tile_dot.py): the tile instructions in the machine code,
results against float64 / int64 references, the library's matmul, and KDSL_LLVM_MATRIX=none.
Skipped, saying why, on a CPU without AMX or where Linux refuses the tile state;
tests/unit/test_tile_dot.py checks the lowering in the simulator everywhere."""

from __future__ import annotations

import kdsl.kernels as K
import numpy as np
import pytest
from kcases import rand, tile_mm
from kdsl.backends import get_backend, llvm_host
from kdsl.kernels import configs
from kdsl.kernels import reference as R

import kdsl as kd
from kdsl.ir.float_bits import bf16_bits, bf16_from_bits
from kdsl.testing import assert_close

if "llvm" not in kd.available_backends():
    pytest.skip("the llvm backend is not available", allow_module_level=True)
if "tile_dot_bf16" not in llvm_host.matrix_caps():
    pytest.skip("no matrix unit: this CPU has no AMX (amx-tile, amx-bf16), Linux refused the "
                "tile state, or KDSL_LLVM_MATRIX=none", allow_module_level=True)


def _bf16(rng, shape):
    bits = bf16_bits(rng.standard_normal(shape).astype(np.float32))
    return bits, bf16_from_bits(bits).astype(np.float64)


def _run_bf16(rng, M, N, Kd, BM=64, BN=64, BK=64):
    """A fresh compile (KDSL_LLVM_MATRIX is read when a kernel compiles) and its run."""
    (a, af), (b, bf) = _bf16(rng, (M, Kd)), _bf16(rng, (Kd, N))
    a, b = kd.bfloat16_view(a), kd.bfloat16_view(b)
    c = np.zeros((M, N), np.float32)
    args = (a, b, c, M, N, Kd)
    meta = dict(BM=BM, BN=BN, BK=BK, ACC_INT=False)
    kernel = kd.jit(tile_mm.fn)
    kernel[(-(-M // BM), -(-N // BN))](*args, **meta, backend="llvm")
    return c, af @ bf, kernel.compile(*args, **meta, backend="llvm")


def test_bf16_dot_runs_on_the_tiles(rng):
    # ragged edges in every dimension, many programs over the pool's threads
    c, ref, ck = _run_bf16(rng, 200, 136, 300)
    asm = ck.ir["asm"]
    assert "tdpbf16ps" in asm and "ldtilecfg" in asm and "tilerelease" in asm
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=2e-5 * np.abs(ref).max())


def test_int8_dot_is_exact_on_the_tiles(rng):
    M, N, Kd = 96, 80, 320
    a = rng.integers(-128, 128, (M, Kd), dtype=np.int8)
    b = rng.integers(-128, 128, (Kd, N), dtype=np.int8)
    c = np.zeros((M, N), np.int32)
    meta = dict(BM=32, BN=16, BK=128, ACC_INT=True)
    tile_mm[(3, 5)](a, b, c, M, N, Kd, **meta, backend="llvm")
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))
    assert "tdpbssd" in tile_mm.compile(a, b, c, M, N, Kd, **meta, backend="llvm").ir["asm"]


def test_matrix_unit_off_gives_the_vector_micro_kernel(rng, monkeypatch):
    monkeypatch.setenv(llvm_host.MATRIX_ENV, "none")
    assert "tile_dot" not in get_backend("llvm").target(1).caps
    c, ref, ck = _run_bf16(rng, 64, 64, 128)
    assert "tdpbf16ps" not in ck.ir["asm"] and "vfmadd" in ck.ir["asm"]
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=2e-5 * np.abs(ref).max())
    monkeypatch.setenv(llvm_host.MATRIX_ENV, "auto")
    _, _, ck = _run_bf16(rng, 64, 64, 128)
    assert "tdpbf16ps" in ck.ir["asm"]


def test_vector_unit_when_named(rng, monkeypatch):
    # KDSL_LLVM_MATRIX=avx512bf16: the same TileDot blocks as vdpbf16ps register blocks;
    # int8 dots have no kind on that unit and keep the micro-kernel (exact either way)
    import llvmlite.binding as llvm

    if "+avx512bf16" not in llvm.get_host_cpu_features().flatten():
        pytest.skip("this CPU has no AVX512-BF16")
    monkeypatch.setenv(llvm_host.MATRIX_ENV, "avx512bf16")
    assert get_backend("llvm").target(1).caps >= {"tile_dot", "tile_dot_bf16"}
    assert "tile_dot_int8" not in get_backend("llvm").target(1).caps
    c, ref, ck = _run_bf16(rng, 100, 80, 200, BM=64, BN=48, BK=64)
    asm = ck.ir["asm"]
    assert "vdpbf16ps" in asm and "tdpbf16ps" not in asm and "ldtilecfg" not in asm
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=2e-5 * np.abs(ref).max())
    M, N, Kd = 32, 32, 128
    a = rng.integers(-128, 128, (M, Kd), dtype=np.int8)
    b = rng.integers(-128, 128, (Kd, N), dtype=np.int8)
    c8 = np.zeros((M, N), np.int32)
    kd.jit(tile_mm.fn)[(1, 1)](a, b, c8, M, N, Kd, BM=32, BN=32, BK=64, ACC_INT=True,
                          backend="llvm")
    np.testing.assert_array_equal(c8, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("M, N, Kd", [(300, 200, 130), (1, 256, 512), (512, 512, 512)])
def test_library_matmul_in_bfloat16(rng, M, N, Kd):
    # the table of the matrix unit (BLOCK_K 256) and its ragged edges; bias and activation
    assert configs.table_for(configs.MATMUL, "llvm", "bfloat16") is configs.MATMUL_TILE
    assert configs.table_for(configs.MATMUL, "llvm", "float16") is configs.MATMUL
    a16, b16, bias16 = (rand(rng, s, "bfloat16") for s in ((M, Kd), (Kd, N), (N,)))
    got = K.matmul(a16, b16, bias=bias16, activation="silu", backend="llvm")
    want = R.matmul(a16, b16, bias=bias16, activation="silu")
    assert_close(got, want, k=Kd)


def test_example_shows_the_unit_and_the_micro_kernel(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "examples" / "cpu_matrix_unit.py"
    spec = importlib.util.spec_from_file_location("cpu_matrix_unit", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main()
    auto, none = [line for line in capsys.readouterr().out.splitlines() if "=auto" in line
                  or "=none" in line]
    assert "'tdpbf16ps': 0" not in auto and "'vfmadd231ps': 0" in auto
    assert "'tdpbf16ps': 0" in none and "'vfmadd231ps': 0" not in none


def test_library_mlp_in_bfloat16(rng):
    # both kernels on the unit: the fused gate/up (x read by two dots) and the down matmul
    M, D, F = 70, 256, 320
    x = rand(rng, (M, D), "bfloat16")
    wg, wu = rand(rng, (D, F), "bfloat16", 1 / 16), rand(rng, (D, F), "bfloat16", 1 / 16)
    wd = rand(rng, (F, D), "bfloat16", 1 / 18)
    assert configs.table_for(configs.MLP, "llvm", "bfloat16") is configs.MLP_TILE
    assert_close(K.mlp(x, wg, wu, wd, backend="llvm"), R.mlp(x, wg, wu, wd), k=D + F, k_out=2)


def test_library_matmul_of_a_transposed_weight(rng):
    # `x @ w.t()` (w stored [N, K], as a linear layer's weight): b's columns are copied as
    # they lie, read as words and transposed 16 x 16 at a time (dot_tile.py `_pack_b`)
    M, N, Kd = 100, 200, 320
    x = rand(rng, (M, Kd), "bfloat16")
    w = bf16_bits(rng.standard_normal((N, Kd)).astype(np.float32))
    wt = kd.bfloat16_view(w.T)  # a transposed view: column-major [K, N]
    got = K.matmul(x, wt, backend="llvm")
    assert_close(got, R.matmul(x, wt), k=Kd)


def test_info_names_the_unit():
    (device,) = get_backend("llvm").devices()
    assert f"matrix unit {llvm_host.matrix_unit()} (bf16" in device
