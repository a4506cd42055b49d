"""Triton's `tl.target_info`: compile-time questions about the target a kernel is compiled
for, answered from the kdsl backend of the compilation (`is_cuda()` is true only on the cuda
backend; `cuda_capability_geq` reads its architecture, sm_XY).  Called outside a compilation
they describe no target, as Triton's do without an active driver."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .type_objects import compile_time


@dataclass(frozen=True)
class Target:
    """Triton's GPUTarget fields: `backend` ("cuda", "llvm", "opencl", ...), `arch` (an int
    such as 90 on CUDA, else None) and `warp_size`."""

    backend: str
    arch: Any = None
    warp_size: int = 32


_current: contextvars.ContextVar[Target | None] = contextvars.ContextVar("kdsl_target",
                                                                          default=None)


@contextlib.contextmanager
def compiling(backend: Any) -> Iterator[None]:
    """Make `backend` (a kdsl Backend) the target of the compilation in this block."""
    arch = None
    get_arch = getattr(backend, "arch", None)
    if callable(get_arch):
        text = str(get_arch())
        arch = int(text[3:]) if text.startswith("sm_") and text[3:].isdigit() else text
    token = _current.set(Target(getattr(backend, "name", ""), arch))
    try:
        yield
    finally:
        _current.reset(token)


@compile_time
def current_target() -> Target | None:
    return _current.get()


@compile_time
def is_cuda() -> bool:
    t = _current.get()
    return t is not None and t.backend == "cuda"


@compile_time
def cuda_capability_geq(major: int, minor: int = 0) -> bool:
    """Whether the target is CUDA with compute capability >= (major, minor)."""
    t = _current.get()
    return is_cuda() and isinstance(t.arch, int) and t.arch >= major * 10 + minor


@compile_time
def is_hip() -> bool:
    t = _current.get()
    return t is not None and t.backend == "hip"


@compile_time
def is_hip_cdna3() -> bool:
    return False  # no HIP backend in kdsl


@compile_time
def is_hip_cdna4() -> bool:
    return False


__all__ = ["cuda_capability_geq", "current_target", "is_cuda", "is_hip", "is_hip_cdna3",
           "is_hip_cdna4"]
