"""matmul: every dtype, ragged sizes, bias and each activation, batched, bad inputs."""

import numpy as np
import pytest
from kcases import DTYPES, check, rand, skip_heavy
from kdsl.kernels import matmul
from kdsl.kernels import reference as R

from kdsl.testing import assert_close


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtypes_ragged(backend, rng, dtype):
    skip_heavy(backend, dtype) if dtype == "bfloat16" else None
    M, K, N = 37, 45, 29
    a, b, bias = rand(rng, (M, K), dtype), rand(rng, (K, N), dtype), rand(rng, N, "float32")
    c = matmul(a, b, bias, activation="gelu", backend=backend)
    check(c, R.matmul(a, b, bias, "gelu"), dtype, k=K)


@pytest.mark.parametrize("activation", [None, "relu", "silu"])
def test_activations(backend, rng, activation):
    a, b = rand(rng, (20, 33), "float32"), rand(rng, (33, 70), "float32")
    c = matmul(a, b, activation=activation, backend=backend)
    assert c.dtype == np.float32 and c.shape == (20, 70)
    assert_close(c, R.matmul(a, b, activation=activation), k=33)


def test_large_tiles(backend, rng):
    if backend == "interp":
        pytest.skip("interp: covered by the small cases (NumPy per-op cost)")
    a, b = rand(rng, (130, 100), "float32"), rand(rng, (100, 67), "float32")
    assert_close(matmul(a, b, backend=backend), R.matmul(a, b), k=100)


def test_largest_table_tiles(backend, rng):
    """An output past the tables' last bound takes their biggest tile (on the CPU backends
    256 x 512 x 64, ~700 KiB of registers per program): ragged edges on every side."""
    if backend == "interp":
        pytest.skip("interp: covered by the small cases (NumPy per-op cost)")
    M, K, N = 1030, 70, 1040  # M * N > 1024^2: the last row of configs.MATMUL
    a, b = rand(rng, (M, K), "float32"), rand(rng, (K, N), "float32")
    assert_close(matmul(a, b, backend=backend), R.matmul(a, b), k=K)


def test_few_rows_get_a_tile_of_their_height(backend, rng, monkeypatch):
    """M = 3 against an output wide enough for the tables' tall tiles: BLOCK_M is cut to 4
    (configs.fit_rows; 16 on GPU dots), in the table's pick and in every autotuner candidate,
    instead of 64-256 rows of which all but 3 are masked."""
    import importlib

    from kdsl.kernels import configs
    mm = importlib.import_module("kdsl.kernels.matmul")
    M, K, N = 3, 40, 1030
    rows = configs.row_height(M, backend)
    tuner = mm._tuner(backend, configs.MATMUL, 1024 * 1024 * 4, M)  # the largest tiles
    assert all(c.kwargs["BLOCK_M"] <= rows for c in tuner.configs)
    assert len(set(tuner.configs)) == len(tuner.configs)
    launched = []
    real = mm.matmul_kernel

    class Spy:
        def __getitem__(self, grid):
            def run(*args, **kw):
                launched.append((grid, kw["BLOCK_M"]))
                return real[grid](*args, **kw)
            return run

    monkeypatch.setattr(mm, "matmul_kernel", Spy())
    monkeypatch.setenv("KDSL_AUTOTUNE", "0")
    a, b = rand(rng, (M, K), "float32"), rand(rng, (K, N), "float32")
    assert_close(matmul(a, b, backend=backend), R.matmul(a, b), k=K)
    want = min(rows, configs.pick(configs.MATMUL, backend, M * N)["BLOCK_M"])
    assert launched and all(bm == want for _, bm in launched), launched


def test_batched(backend, rng):
    a, b = rand(rng, (3, 10, 12), "float32"), rand(rng, (3, 12, 9), "float32")
    assert_close(matmul(a, b, backend=backend), R.matmul(a, b), k=12)
    shared = rand(rng, (12, 9), "float32")
    assert_close(matmul(a, shared, backend=backend), R.matmul(a, shared), k=12)


def test_bad_inputs():
    a32, b32 = np.zeros((4, 5), np.float32), np.zeros((5, 3), np.float32)
    with pytest.raises(ValueError, match="b: expected 5 rows"):
        matmul(a32, np.zeros((4, 3), np.float32))
    with pytest.raises(TypeError, match="b: dtype float16 differs"):
        matmul(a32, b32.astype(np.float16))
    with pytest.raises(ValueError, match="activation"):
        matmul(a32, b32, activation="tanh")
    with pytest.raises(ValueError, match=r"bias: expected shape \(3,\)"):
        matmul(a32, b32, bias=np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="a: expected a 2 or 3-D array"):
        matmul(np.zeros(5, np.float32), b32)


@pytest.mark.autotune
def test_autotuned_on_host_arrays(rng, monkeypatch, tmp_path):
    """Host-array matmul goes through the autotuner: every candidate is checked against the
    table's configuration, the fastest correct one is kept, and the result is right."""
    import importlib

    mm = importlib.import_module("kdsl.kernels.matmul")
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KDSL_AUTOTUNE", raising=False)
    monkeypatch.setattr(mm, "_TUNERS", {})
    a, b = rand(rng, (70, 45), "float32"), rand(rng, (45, 90), "float32")
    out = matmul(a, b, backend="llvm")
    check(out, R.matmul(a, b), "float32", k=45)
    (tuner,) = mm._TUNERS.values()
    assert tuner.best_config is not None and len(tuner.timings) == len(tuner.configs) > 1
    assert all(isinstance(t, float) for t in tuner.timings.values()), tuner.timings
