"""The interface every backend implements, and the argument record the runtime hands to it.

A backend has two halves.  The **compile half** turns a `loop.Kernel` (or, for a tile-level
backend, the optimised `tile.Function`) into source text with no device (`codegen`), builds
that source into something launchable (`build`, cached on disk through
`serialize`/`deserialize`) and says what the shared lowering may use (`target`, `caps`).

The **device half** is everything the rest of kdsl needs of a device, so that nothing outside
`backends/` names a backend: whether it can run here and why not (`is_available`,
`unavailable_reason`), the devices it sees (`devices`, `device_kind`), its memory (`allocate`,
`copy_in`, `copy_out`, `pointer`, `host_buffer`), the launch of device values (`enqueue`),
`synchronize`, a clock (`timer`), its arrays (`owns`, `to_device`, `empty`, `zeros`,
`to_host`, `ascontiguous`, `from_dlpack`) and a few declared facts (`memory`, `is_cpu`,
`source_suffix`, `short_name`, `extra`).  The base class implements the device half for host
memory (NumPy arrays are the device's arrays), which the CPU backends keep.

Launching: a backend whose `memory` is "host" receives the bound arguments themselves in
`launch` (NumPy arrays in place).  For a "device" backend the runtime
(`kdsl/runtime/device.py`) does the copy-in, the launch and the copy-back, once for every
backend, through the device half: the backend implements memory and `enqueue`, never a copy
loop of its own.
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from kdsl.ir import loop
from kdsl.target import Target


@dataclass
class BoundArg:
    """One runtime argument after binding.

    kind   "array": `value` is the user's array object (NumPy array, or the backend's device
           array); `host` is a C-contiguous NumPy view of the memory the kernel may address
           when it lives on the host (NumPy or DLPack CPU object), else None; `nbytes` its
           size in bytes.  For a contiguous array `host` is the array itself; for a strided
           view it is the flat span of the view's memory (kdsl/runtime/views.py), `origin` the
           index in it of the view's first element (the kernel's pointer; > 0 only with
           negative strides) and `view` the N-d NumPy view.  Device backends copy `host` in
           and out whole and pass a pointer `origin` elements into it.
           "scalar": `value` is a Python int/float already range-checked for `dtype`.
    """

    name: str
    kind: str
    dtype: Any  # kdsl DType (array element type, or scalar type)
    value: Any
    host: Any = None
    nbytes: int = 0
    numel: int = 0
    #: data address of the first element (0 when there is no host view), read at binding
    address: int = 0
    #: elements of `host` before the first element (strided views with negative strides)
    origin: int = 0
    #: the N-d NumPy view of a strided array (None when `host` is the array itself)
    view: Any = None


class Timer:
    """A backend's clock (`Backend.timer()`): `time(fn)` runs `fn()` once and returns
    (device milliseconds, wall milliseconds); `session()` brackets a series of calls (a
    device clock may swap in a profiling queue for its duration).  This one is the host's
    `time.perf_counter`, for backends whose kernels run on the calling thread's CPU."""

    name = "cpu clock"

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        yield

    def time(self, fn: Callable[[], Any]) -> tuple[float, float]:
        t0 = time.perf_counter()
        fn()
        dt = (time.perf_counter() - t0) * 1e3
        return dt, dt


@dataclass(frozen=True)
class DirectLauncher:
    """How the launch fast path (kdsl/runtime/fastpath.py) runs one built kernel, skipping
    `BoundArg`s.  `slots` are the runtime arguments in parameter order, NumPy array addresses
    and scalar values already classified and range-checked by the caller.

    launch(grid, slots)   any normalised grid
    call(pack(g0, g1, g2, *slots))
                          the same for a grid of fewer than `inline_limit` programs, in two
                          calls the fast path makes itself (no Python frame of the backend's
                          in between); `call` None: `launch` only
    """

    launch: Callable[[tuple[int, int, int], Any], None]
    call: Callable[[Any], Any] | None = None
    pack: Callable[..., Any] | None = None
    inline_limit: int = 0


class Backend(ABC):
    """One code generator + device.  Subclasses are registered in `backends/__init__.py`."""

    # -- declared facts (class attributes; the tools and the library read them) -----------

    name: str = ""
    #: "loop": codegen/build/launch receive the lowered `loop.Kernel`; "tile": they receive the
    #: optimised `tile.Function` instead (the NumPy interpreter, the reference backend).
    level: str = "loop"
    #: capabilities the shared lowering may use (see `kdsl.target.Target.caps`)
    caps: frozenset[str] = frozenset()
    #: the Loop IR unary and binary ops `codegen` emits ("tanh", or "tanh:float64" for one
    #: type; None: all); the lowering's `legalize` decomposes the others (`Target.ops`)
    ops: frozenset[str] | None = None
    #: where kernels find their arrays: "host" (NumPy memory in place, `launch` receives the
    #: bound arguments) or "device" (the runtime copies through the device half, `enqueue`)
    memory: str = "host"
    #: programs run on the host CPU, one CPU thread each (or interpreted): the CPU rows of the
    #: library's tuning tables, NumPy's figures as a witness in the roofline
    is_cpu: bool = False
    #: launches return before the kernel has finished (a CUDA stream); otherwise the runtime
    #: calls `synchronize()` at the end of every device launch
    asynchronous: bool = False
    #: file extension of the generated source (`kdsl compare`'s repro bundles)
    source_suffix: str = "txt"
    #: a short column label (`kdsl info`'s capability matrix); default: the name's first 3
    short_name: str = ""
    #: the package extra that installs the optional modules in `packages` (`pip install
    #: 'kdsl[EXTRA]'`), named in messages when one is missing (`kdsl.extras`)
    extra: str = ""
    packages: tuple[str, ...] = ()
    #: the library whose arrays this backend owns, in messages ("CuPy", "PyOpenCL")
    array_name: str = "NumPy"
    #: DLPack device types (`__dlpack_device__()[0]`) whose arrays this backend can view
    dlpack_devices: tuple[int, ...] = ()

    # -- compile half -----------------------------------------------------------------------

    @abstractmethod
    def is_available(self) -> bool:
        """True when kernels can run here (imports optional packages lazily, never raises)."""

    def unavailable_reason(self) -> str:
        """Why `is_available()` is False, for messages (empty: the registry says something
        generic)."""
        return ""

    @abstractmethod
    def target(self, num_warps: int) -> Target:
        """The lowering target for a launch with `num_warps` (ignored by the CPU backend).
        Must not need a device (code generation works everywhere)."""

    @abstractmethod
    def hash(self) -> str:
        """Identity of the compiler toolchain and device, part of the cache key."""

    def add_stages(self, kernel: loop.Kernel, stages: dict[str, str]) -> None:
        """Add backend-specific IR stages (e.g. optimised LLVM IR, PTX) to `stages`."""

    @abstractmethod
    def codegen(self, kernel: loop.Kernel) -> str:
        """Source text (LLVM IR, OpenCL C, CUDA C) for `kernel`; needs no device."""

    @abstractmethod
    def build(self, kernel: loop.Kernel, source: str) -> Any:
        """Compile `source` into a launchable handle (may return cached binaries)."""

    def serialize(self, handle: Any) -> bytes | None:
        """Bytes to store in the on-disk cache, or None when the handle cannot be stored."""
        return None

    def deserialize(self, kernel: loop.Kernel, data: bytes) -> Any:
        """Inverse of `serialize`."""
        raise NotImplementedError

    # -- launch -------------------------------------------------------------------------------

    def launch(self, handle: Any, kernel: loop.Kernel, grid: tuple[int, int, int],
               args: list[BoundArg]) -> None:
        """Run `grid[0]*grid[1]*grid[2]` program instances on the bound `args` (following
        `kernel.params`): the launch of a "host" memory backend.  A "device" backend
        implements `enqueue` instead and the runtime calls it."""
        raise NotImplementedError(f"backend {self.name!r} launches through enqueue()")

    def direct_launcher(self, handle: Any) -> DirectLauncher | None:
        """The launch fast path (kdsl/runtime/fastpath.py) of a built kernel, or None."""
        return None

    def check_launch(self, kernel: loop.Kernel, grid: tuple[int, int, int]) -> None:
        """Raise a clear error for a launch the device cannot run, before any copy."""

    def enqueue(self, handle: Any, kernel: loop.Kernel, grid: tuple[int, int, int],
                values: list[Any]) -> None:
        """Launch on device values: per parameter, a device pointer (`allocate`, `pointer`,
        `host_buffer`, `device_arg`) or a NumPy scalar of the parameter's type."""
        raise NotImplementedError(f"backend {self.name!r} has no device memory")

    def synchronize(self) -> None:
        """Wait until every launch and copy queued so far has finished."""

    def timer(self) -> Timer:
        """The clock `kd.testing.do_bench` times this backend's launches with."""
        return Timer()

    # -- devices ------------------------------------------------------------------------------

    def devices(self) -> list[str]:
        """One line per device this backend sees (`kdsl info`)."""
        return []

    def device_kind(self) -> str:
        """"cpu" or "gpu": the kind of device kernels run on (tuning tables key on it)."""
        return "cpu"

    def parallelism(self) -> int:
        """Programs the device runs at once (a CPU backend's threads), 0 where it is not known
        or not the measure (a GPU's occupancy): the library splits small grids by it."""
        return 0

    # -- memory of a "device" backend ----------------------------------------------------------

    def allocate(self, nbytes: int) -> Any:
        """A new device buffer of `nbytes` bytes (at least one byte: empty arrays need a
        valid buffer)."""
        return np.empty(max(nbytes, 1), np.uint8)

    def copy_in(self, buf: Any, offset: int, host: np.ndarray) -> None:
        """Copy the bytes `host` (a flat uint8 view) into `buf` at byte `offset`."""
        buf[offset:offset + host.size] = host

    def copy_out(self, host: np.ndarray, buf: Any, offset: int) -> None:
        """Copy `host.size` bytes of `buf` from byte `offset` into `host` (a flat uint8 view)."""
        host[...] = buf[offset:offset + host.size]

    def span_offset(self, arg: BoundArg) -> int:
        """Bytes placed before a host array's span in its device buffer (an alignment the
        kernel's pointer needs)."""
        return 0

    def pointer(self, buf: Any, offset: int, nbytes: int) -> Any:
        """The kernel argument pointing `offset` bytes into `buf` (of `nbytes` bytes)."""
        return buf[offset:]

    def host_buffer(self, host: np.ndarray, written: bool, kernel: loop.Kernel) -> Any | None:
        """A device buffer over the host array's own memory (no copy), or None to copy.
        `written`: the kernel stores to it."""
        return None

    def release_host_buffer(self, buf: Any, host: np.ndarray) -> None:
        """After a launch: make the host memory of a `host_buffer` current."""

    def device_arg(self, arg: BoundArg) -> Any:
        """The kernel argument of one of this backend's own device arrays (`owns`)."""
        return arg.value

    # -- arrays -------------------------------------------------------------------------------

    def owns(self, array: Any) -> bool:
        """True when `array` is this backend's device array (used to pick a default backend)."""
        return False

    def to_device(self, host: np.ndarray, like: Any = None) -> Any:
        """A device array holding a copy of `host` (on the device/queue of `like`)."""
        return np.array(host)

    def empty(self, shape: tuple[int, ...], dtype: Any, like: Any = None) -> Any:
        """An uninitialised device array (on the device/queue of `like`)."""
        return np.empty(shape, dtype)

    def zeros(self, shape: tuple[int, ...], dtype: Any, like: Any = None) -> Any:
        return np.zeros(shape, dtype)

    def to_host(self, array: Any) -> np.ndarray:
        """A NumPy copy (or view) of a device array."""
        return np.asarray(array)

    def ascontiguous(self, array: Any) -> Any:
        """`array` itself when C-contiguous, else a contiguous copy on the same device."""
        return np.ascontiguousarray(array)

    def from_dlpack(self, obj: Any) -> Any:
        """This backend's view of another library's array on one of `dlpack_devices`."""
        return np.from_dlpack(obj)

    @property
    def label(self) -> str:
        """`short_name`, else the first three letters of the name."""
        return self.short_name or self.name[:3]
