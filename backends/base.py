"""The interface every backend implements, and the argument record the runtime hands to it.

A backend turns a `loop.Kernel` into source text with no device (`codegen`), builds that source
into something launchable (`build`, cached on disk through `serialize`/`deserialize`) and
launches it on a grid (`launch`).  The runtime (`kdsl/runtime/`) owns specialisation, caching
and argument checking; the backend owns memory: it copies NumPy arrays to its device and back
(only the parameters in `kernel.stored_indices()` are copied back) and uses its own
device arrays in place.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

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
           negative strides) and `view` the N-d NumPy view.  Backends copy `host` in and out
           whole and pass a pointer `origin` elements into it.
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


class Backend(ABC):
    """One code generator + runtime.  Subclasses are registered in `backends/__init__.py`."""

    name: str = ""
    #: "loop": codegen/build/launch receive the lowered `loop.Kernel`; "tile": they receive the
    #: optimised `tile.Function` instead (the NumPy interpreter, `backend="interp"`).
    level: str = "loop"
    #: capabilities the shared lowering may use (see `kdsl.target.Target.caps`)
    caps: frozenset[str] = frozenset()
    #: the Loop IR unary and binary ops `codegen` emits ("tanh", or "tanh:float64" for one
    #: type; None: all); the lowering's `legalize` decomposes the others (`Target.ops`)
    ops: frozenset[str] | None = None

    @abstractmethod
    def is_available(self) -> bool:
        """True when kernels can run here (imports optional packages lazily, never raises)."""

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

    @abstractmethod
    def launch(
        self, handle: Any, kernel: loop.Kernel, grid: tuple[int, int, int], args: list[BoundArg]
    ) -> None:
        """Run `grid[0]*grid[1]*grid[2]` program instances; `args` follow `kernel.params`."""

    def device_kind(self) -> str:
        """"cpu" or "gpu": the kind of device kernels run on (tuning tables key on it)."""
        return "cpu"

    def owns(self, array: Any) -> bool:
        """True when `array` is this backend's device array (used to pick a default backend)."""
        return False
