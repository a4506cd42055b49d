"""softmax: fused and online paths, every dtype, ragged rows, other axes, bad inputs."""

import numpy as np
import pytest
from kcases import DTYPES, check, rand
from kdsl.kernels import reference as R
from kdsl.kernels import softmax

from kdsl.testing import assert_close


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 100), (2, 3, 33)])
def test_fused(backend, rng, dtype, shape):
    x = rand(rng, shape, dtype, scale=3.0)
    y = softmax(x, backend=backend)
    check(y, R.softmax(x), dtype, k=shape[-1])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_online_long_rows(backend, rng, dtype):
    x = rand(rng, (2, 9001), dtype, scale=4.0)
    y = softmax(x, backend=backend)
    assert y.dtype == np.dtype(dtype)
    check(y, R.softmax(x), dtype, k=9001)


def test_other_axis_and_infinities(backend, rng):
    x = rand(rng, (5, 4, 6), "float32")
    x[0, 0, :3] = -np.inf  # masked logits: exactly 0
    y = softmax(x, axis=1, backend=backend)
    assert_close(y, R.softmax(x, axis=1), k=4)
    y = softmax(x, axis=-1, backend=backend)
    assert (y[0, 0, :3] == 0).all()
    assert_close(y, R.softmax(x), k=6)


def test_empty(backend):
    assert softmax(np.zeros((0, 7), np.float32), backend=backend).shape == (0, 7)


def test_bad_inputs():
    with pytest.raises(TypeError, match="x: dtype int32"):
        softmax(np.zeros((2, 3), np.int32))
    with pytest.raises(ValueError, match="axis"):
        softmax(np.zeros((2, 3), np.float32), axis=2)
    with pytest.raises(TypeError, match="x: expected a NumPy"):
        softmax([1.0, 2.0])
