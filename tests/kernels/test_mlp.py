"""mlp (SwiGLU): every dtype, ragged sizes, bad inputs."""

import numpy as np
import pytest
from kcases import DTYPES, check, rand, skip_heavy
from kdsl.kernels import mlp
from kdsl.kernels import reference as R


@pytest.mark.parametrize("dtype", DTYPES)
def test_swiglu(backend, rng, dtype):
    skip_heavy(backend, dtype)
    M, D, F, O = 13, 40, 50, 21
    x = rand(rng, (M, D), dtype)
    wg, wu = rand(rng, (D, F), dtype, scale=0.2), rand(rng, (D, F), dtype, scale=0.2)
    wd = rand(rng, (F, O), dtype, scale=0.2)
    y = mlp(x, wg, wu, wd, backend=backend)
    # two chained reductions; h is rounded to the input dtype in between
    check(y, R.mlp(x, wg, wu, wd), dtype, k=D + F, k_out=2)


def test_largest_table_tiles(backend, rng):
    """M x F past the table's last bound: the biggest gate/up tile (on the CPU backends 256 x
    128 x 64, two accumulators), ragged in M, F and D."""
    if backend == "interp":
        pytest.skip("interp: covered by the small cases (NumPy per-op cost)")
    M, D, F, O = 300, 70, 260, 33  # M * F > 256^2: the last row of configs.MLP
    x = rand(rng, (M, D), "float32")
    wg, wu = rand(rng, (D, F), "float32", scale=0.2), rand(rng, (D, F), "float32", scale=0.2)
    wd = rand(rng, (F, O), "float32", scale=0.2)
    check(mlp(x, wg, wu, wd, backend=backend), R.mlp(x, wg, wu, wd), "float32", k=D + F,
          k_out=2)


def test_bad_inputs():
    x = np.zeros((2, 4), np.float32)
    w = np.zeros((4, 6), np.float32)
    with pytest.raises(ValueError, match=r"w_up: expected shape \(4, 6\)"):
        mlp(x, w, np.zeros((4, 5), np.float32), np.zeros((6, 3), np.float32))
    with pytest.raises(ValueError, match="w_down: expected 6 rows"):
        mlp(x, w, w, np.zeros((5, 3), np.float32))
    with pytest.raises(ValueError, match="w_gate: expected 4 rows"):
        mlp(x, np.zeros((3, 6), np.float32), w, np.zeros((6, 3), np.float32))
