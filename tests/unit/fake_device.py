"""A backend with device memory that lives outside `backends/`: what a new backend module needs,
and nothing more (docs/adding_a_backend.md).  Registered by a test (`register_backend`), it
must appear in `kd.available_backends()`, `kdsl info`, the tests' `backend` fixture and
`kdsl compare`, and run kernels through the runtime's one copy-in / launch / copy-back.

Its "device" is the Loop IR simulator (`kdsl.ir.loop_interp`): programs of 4 x num_warps
threads, with barriers, shared memory and race detection; its memory is byte arrays that only
its own methods touch, and it counts what the runtime asked of it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from kdsl.backends.base import Backend, BoundArg

from kdsl.ir import loop
from kdsl.ir.loop_interp import run_kernel
from kdsl.target import Target

NAME = "fakedev"


class Buffer:
    """Device memory: bytes only the backend reads and writes."""

    def __init__(self, nbytes: int):
        self.bytes = np.zeros(nbytes, np.uint8)


class View:
    """A kernel argument `offset` bytes into a buffer."""

    def __init__(self, buf: Buffer, offset: int):
        self.buf, self.offset = buf, offset


class FakeDeviceArray:
    """The backend's device array: a shape and dtype over a buffer."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, buf: Buffer | None = None):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.buf = buf or Buffer(self.size * self.dtype.itemsize)
        self.flags = np.ones(1).flags  # C-contiguous

    def get(self) -> np.ndarray:
        return self.buf.bytes[:self.size * self.dtype.itemsize].view(self.dtype).reshape(
            self.shape).copy()

    def reshape(self, shape: tuple[int, ...]) -> FakeDeviceArray:
        return FakeDeviceArray(shape, self.dtype, self.buf)


class FakeDeviceBackend(Backend):
    name = NAME
    memory = "device"
    caps = frozenset({"fp64"})
    source_suffix = "loop"
    short_name = "fkd"
    array_name = "FakeDevice"
    #: what the runtime asked of the device half
    calls: ClassVar[dict[str, int]] = {}

    def _count(self, what: str) -> None:
        self.calls[what] = self.calls.get(what, 0) + 1

    # -- compile half

    def is_available(self) -> bool:
        return True

    def target(self, num_warps: int) -> Target:
        return Target(NAME, threads=4 * num_warps, warp_size=4, shared_bytes=48 * 1024,
                      caps=self.caps)

    def hash(self) -> str:
        return "fakedev-1"

    def codegen(self, kernel: loop.Kernel) -> str:
        return loop.print_kernel(kernel)

    def build(self, kernel: loop.Kernel, source: str) -> loop.Kernel:
        return kernel

    # -- device half

    def devices(self) -> list[str]:
        return ["the Loop IR simulator (4 threads per warp)"]

    def allocate(self, nbytes: int) -> Buffer:
        self._count("allocate")
        return Buffer(max(nbytes, 1))

    def copy_in(self, buf: Buffer, offset: int, host: np.ndarray) -> None:
        self._count("copy_in")
        buf.bytes[offset:offset + host.size] = host

    def copy_out(self, host: np.ndarray, buf: Buffer, offset: int) -> None:
        self._count("copy_out")
        host[...] = buf.bytes[offset:offset + host.size]

    def pointer(self, buf: Buffer, offset: int, nbytes: int) -> View:
        return View(buf, offset)

    def device_arg(self, arg: BoundArg) -> Buffer:
        return arg.value.buf

    def enqueue(self, handle: loop.Kernel, kernel: loop.Kernel, grid: tuple[int, int, int],
                values: list[Any]) -> None:
        self._count("enqueue")
        args = [v.buf.bytes[v.offset:] if isinstance(v, View) else
                v.bytes if isinstance(v, Buffer) else v for v in values]
        run_kernel(handle, grid, args)

    def synchronize(self) -> None:
        self._count("synchronize")

    def owns(self, array: Any) -> bool:
        return isinstance(array, FakeDeviceArray)

    def to_device(self, host: np.ndarray, like: Any = None) -> FakeDeviceArray:
        host = np.ascontiguousarray(host)
        out = FakeDeviceArray(host.shape, host.dtype)
        out.buf.bytes[:host.nbytes] = host.reshape(-1).view(np.uint8)
        return out

    def empty(self, shape: tuple[int, ...], dtype: Any, like: Any = None) -> FakeDeviceArray:
        return FakeDeviceArray(shape, dtype)

    def zeros(self, shape: tuple[int, ...], dtype: Any, like: Any = None) -> FakeDeviceArray:
        return FakeDeviceArray(shape, dtype)

    def to_host(self, array: FakeDeviceArray) -> np.ndarray:
        return array.get()

    def ascontiguous(self, array: FakeDeviceArray) -> FakeDeviceArray:
        return array
