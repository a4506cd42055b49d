"""Array kinds and the backend choice: device arrays stay on the device, bfloat16 comes back in
the spelling it came in, the default backend follows KDSL_BACKEND, mixed kinds are refused."""

import kdsl.kernels as K
import numpy as np
import pytest
from kcases import rand
from kdsl.kernels import reference as R

import kdsl as kd
from kdsl.runtime.binding import DTypeView
from kdsl.testing import assert_close


@pytest.fixture
def cl_queue():
    if "opencl" not in kd.available_backends():
        pytest.skip("opencl backend not available")
    from kdsl.backends import get_backend
    return get_backend("opencl").runtime().queue


def test_opencl_arrays_stay_on_device(cl_queue, rng):
    import pyopencl.array as cla

    x = rand(rng, (3, 50), "float32")
    y = K.softmax(cla.to_device(cl_queue, x))  # backend follows the arrays
    assert isinstance(y, cla.Array) and y.shape == (3, 50)
    assert_close(y.get(), R.softmax(x), k=50)
    a, b = rand(rng, (9, 12), "float32"), rand(rng, (12, 5), "float32")
    c = K.matmul(cla.to_device(cl_queue, a), cla.to_device(cl_queue, b), activation="relu")
    assert isinstance(c, cla.Array)
    assert_close(c.get(), R.matmul(a, b, activation="relu"), k=12)
    with pytest.raises(ValueError, match="opencl device array, which backend 'llvm'"):
        K.softmax(cla.to_device(cl_queue, x), backend="llvm")


def test_bfloat16_view_round_trip(rng):
    x = rand(rng, (2, 10), "bfloat16")
    y = K.rms_norm(x, np.ones(10, np.float32), backend="interp")
    assert isinstance(y, DTypeView) and y.array.dtype == np.uint16 and y.array.shape == (2, 10)
    z = K.softmax(y, backend="interp")  # a result feeds the next call as it is
    assert_close(R.to_float64(z), R.softmax(R.to_float64(y)), dtype="bfloat16", k=10)


def test_default_backend_from_environment(monkeypatch, rng):
    x = rand(rng, (2, 8), "float32")
    monkeypatch.setenv("KDSL_BACKEND", "no-such-backend")
    with pytest.raises(ValueError, match="no-such-backend"):
        K.softmax(x)
    monkeypatch.setenv("KDSL_BACKEND", "interp")
    assert_close(K.softmax(x), R.softmax(x), k=8)
