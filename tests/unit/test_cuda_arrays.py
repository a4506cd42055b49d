"""CUDA arrays as users pass them, checked without a GPU: CuPy-like device arrays (contiguous
or strided) bind in place with their data pointer's alignment, a CUDA DLPack tensor goes to the
cuda backend (through CuPy), and grids beyond CUDA's limits fail with a clear error before any
device call."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from kdsl.backends.cuda import GRID_LIMITS, CUDABackend, check_grid
from kdsl.ir import types as T
from kdsl.runtime.binding import _device_array, bind_arg, multiple_of_16
from kdsl.runtime.device import device_launch


class FakeDeviceArray:
    """The attributes of a CuPy ndarray the binder reads (no device memory behind it)."""

    def __init__(self, shape, dtype, strides=None, ptr=0x7F0000001000):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.size = int(np.prod(shape))
        item = self.dtype.itemsize
        contiguous = tuple(item * int(np.prod(shape[i + 1:])) for i in range(len(shape)))
        self.strides = tuple(strides) if strides is not None else contiguous
        self.flags = SimpleNamespace(c_contiguous=self.strides == contiguous)
        self.data = SimpleNamespace(ptr=ptr)


def test_contiguous_device_array_binds_in_place_with_its_alignment():
    sig, ba, owner = _device_array("x", FakeDeviceArray((4, 8), np.float32), "cuda")
    assert (sig, owner, ba.numel, ba.origin, ba.host) == ("*float32", "cuda", 32, 0, None)
    assert multiple_of_16(ba)
    _, ba, _ = _device_array("x", FakeDeviceArray((4, 8), np.float32, ptr=0x7F0000001004),
                             "cuda")
    assert not multiple_of_16(ba)


def test_strided_device_arrays_are_passed_as_views():
    # a transposed [8, 4] view of a [4, 8] float32 array: strides (4, 32)
    _, ba, _ = _device_array("xt", FakeDeviceArray((8, 4), np.float32, strides=(4, 32)), "cuda")
    assert (ba.numel, ba.origin) == (32, 0)
    # a row-reversed view: the first element is the last row's
    _, ba, _ = _device_array("xr", FakeDeviceArray((4, 8), np.float32, strides=(-32, 4)), "cuda")
    assert (ba.numel, ba.origin) == (32, 24)
    with pytest.raises(ValueError, match="stride 6 bytes"):
        _device_array("bad", FakeDeviceArray((4, 2), np.float32, strides=(6, 4)), "cuda")


def test_bfloat16_dtype_override():
    sig, ba, _ = _device_array("b", FakeDeviceArray((16,), np.int16), "cuda", T.bfloat16)
    assert sig == "*bfloat16" and ba.dtype == T.bfloat16


class CudaDLPack:
    """A DLPack object on a CUDA device (device type 2) that is not a CuPy array."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        raise RuntimeError("no GPU here")


def test_cuda_dlpack_tensors_go_to_the_cuda_backend():
    try:
        bind_arg("t", CudaDLPack())
    except TypeError as e:  # no GPU: CuPy cannot import it, and says so for this argument
        assert "argument 't'" in str(e) and "cuda" in str(e).lower()
    else:  # pragma: no cover - a machine with a GPU and a real tensor would bind
        pass


@pytest.mark.parametrize("grid,axis", [((GRID_LIMITS[0] + 1, 1, 1), 0), ((1, 65536, 1), 1),
                                       ((1, 1, 70000), 2)])
def test_grid_limits(grid, axis):
    with pytest.raises(ValueError, match=rf"grid\[{axis}\] = \d+ exceeds CUDA's limit"):
        check_grid(grid)
    with pytest.raises(ValueError, match="exceeds CUDA's limit"):
        device_launch(CUDABackend(), None, None, grid, [])  # before any device call
    check_grid((GRID_LIMITS[0], 65535, 65535))
