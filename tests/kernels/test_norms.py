"""layer_norm and rms_norm: every dtype, ragged and long rows, float32 weights with 16-bit
activations, bad inputs."""

import numpy as np
import pytest
from kcases import DTYPES, check, rand
from kdsl.kernels import configs, layer_norm, rms_norm
from kdsl.kernels import reference as R

from kdsl.runtime.launches import record_launches
from kdsl.testing import assert_close


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 300), (2, 3, 7)])
def test_layer_norm(backend, rng, dtype, shape):
    n = shape[-1]
    x = rand(rng, shape, dtype, shift=3.0)
    w, b = rand(rng, n, dtype), rand(rng, n, "float32")  # mixed: fp32 bias
    y = layer_norm(x, w, b, backend=backend)
    check(y, R.layer_norm(x, w, b), dtype, k=n)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 300), (1, 1)])
def test_rms_norm(backend, rng, dtype, shape):
    n = shape[-1]
    x, w = rand(rng, shape, dtype), rand(rng, n, "float32")
    y = rms_norm(x, w, eps=1e-5, backend=backend)
    check(y, R.rms_norm(x, w, eps=1e-5), dtype, k=n)


def test_long_rows(backend, rng):
    x, w, b = rand(rng, (2, 9000), "float32", shift=1.0), rand(rng, 9000, "float32"), \
        rand(rng, 9000, "float32")
    assert_close(layer_norm(x, w, b, backend=backend), R.layer_norm(x, w, b), k=9000)
    assert_close(rms_norm(x, w, backend=backend), R.rms_norm(x, w), k=9000)


@pytest.mark.parametrize("n", [1023, 1024, 1030])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_row_tile_or_walk_follows_the_table(backend, rng, n, dtype):
    """configs.norm_block: float32 rows from NORM_ROW_MAX on are walked in NORM_LOOP_BLOCK
    steps on CPU profiles (ragged last step masked); 16-bit rows stay one tile."""
    x, w, b = rand(rng, (3, n), dtype, shift=2.0), rand(rng, n, "float32"), rand(rng, n, dtype)
    block, walk = configs.norm_block(backend, n, dtype)
    with record_launches() as launches:
        y_ln = layer_norm(x, w, b, backend=backend)
        y_rms = rms_norm(x, w, backend=backend)
    names = [ln.jit.fn.__name__ for ln in launches]
    want = ["layer_norm_kernel", "rms_norm_kernel"] if walk else \
        ["layer_norm_row_kernel", "rms_norm_row_kernel"]
    assert names == want and all(ln.kwargs["BLOCK"] == block for ln in launches)
    if "cpu" in configs.profiles(backend):
        assert walk == (dtype == "float32" and n >= 1024)
    check(y_ln, R.layer_norm(x, w, b), dtype, k=n)
    check(y_rms, R.rms_norm(x, w), dtype, k=n)


def test_bad_inputs():
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError, match=r"weight: expected shape \(8,\)"):
        layer_norm(x, np.ones(7, np.float32), np.ones(8, np.float32))
    with pytest.raises(ValueError, match=r"bias: expected shape \(8,\)"):
        layer_norm(x, np.ones(8, np.float32), np.ones(9, np.float32))
    with pytest.raises(TypeError, match="weight: dtype int64"):
        rms_norm(x, np.ones(8, np.int64))
    with pytest.raises(ValueError, match="eps"):
        rms_norm(x, np.ones(8, np.float32), eps=float("nan"))
