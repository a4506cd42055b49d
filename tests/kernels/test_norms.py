"""layer_norm and rms_norm: every dtype, ragged and long rows, float32 weights with 16-bit
activations, bad inputs."""

import numpy as np
import pytest
from kcases import DTYPES, check, rand
from kdsl.kernels import layer_norm, rms_norm
from kdsl.kernels import reference as R

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
