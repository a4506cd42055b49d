"""softmax: fused, online and CPU three-pass paths, every dtype, ragged rows, other axes, bad
inputs."""

import numpy as np
import pytest
from kcases import DTYPES, check, rand
from kdsl.kernels import configs, softmax
from kdsl.kernels import reference as R

from kdsl.runtime.launches import record_launches
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


@pytest.mark.parametrize("n", [1, 63, 64, 300, 511, 512, 2047, 2048, 4100])
def test_cpu_float32_rows_take_three_passes(backend, rng, n):
    """On a CPU profile a float32 row is softmaxed in three passes over memory (the output
    row is the exps' scratch) in steps of configs.SCRATCH_ROW; elsewhere, and for 16-bit
    inputs, by the fused or online kernel."""
    x = rand(rng, (3, n), "float32", scale=3.0)
    x[1, n // 2] = np.inf if n > 1 else x[1, 0]  # one +inf: the row is nan (exp(inf - inf))
    x[2, : n // 2] = -np.inf  # masked logits: exactly 0
    with record_launches() as launches:
        y = softmax(x, backend=backend)
    names = [ln.jit.fn.__name__ for ln in launches]
    step = configs.scratch_row_block(backend, n)
    if step is None:
        assert "softmax_scratch_kernel" not in names
    else:
        assert names == ["softmax_scratch_kernel"]
        assert launches[0].kwargs["BLOCK"] == step
    with np.errstate(invalid="ignore"):
        want = R.softmax(x)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    assert (y[2, : n // 2] == 0).all()
    ok = ~np.isnan(want)
    assert_close(y[ok], want[ok], k=n)
    with record_launches() as launches:
        softmax(rand(rng, (2, n), "float16"), backend=backend)
    assert "softmax_scratch_kernel" not in [ln.jit.fn.__name__ for ln in launches]
