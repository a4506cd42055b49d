"""The launch of a kernel on a backend with device memory: copy-in, launch, copy-back.

Written once for every backend whose `memory` is "device" (`backends/base.py`); the backend
supplies only its memory and its launch of device values (`allocate`, `copy_in`, `copy_out`,
`pointer`, `host_buffer`, `enqueue`, ...).  Per array argument:

- one of the backend's own device arrays is used in place (`device_arg`);
- a host array (NumPy, DLPack CPU) is handed in place when the backend offers a buffer over
  its memory (`host_buffer`: a CPU device sharing the host's memory), else copied into a new
  buffer at the backend's `span_offset` (an alignment), and the kernel's pointer is the view's
  first element, `origin` elements into its span;
- after the launch only the arrays the kernel stores to (`kernel.stored_indices()`)
  come back: copied out, or their in-place buffer released (`release_host_buffer`).

Scalars become NumPy scalars of the parameter's type (booleans as uint8).  A backend that is
not `asynchronous` is synchronised at the end, so that a device array read on another queue
sees the kernel's writes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kdsl.backends.base import Backend, BoundArg


def stored_params(kernel: Any) -> set[int]:
    """Indices of the parameters whose host arrays are copied back after a launch (the Loop
    IR kernel's `stored_indices()`: every pointer when the lowering did not say)."""
    return set(kernel.stored_indices())


def scalar_value(dtype: Any, value: Any) -> Any:
    """A NumPy scalar of the parameter type `dtype` (a boolean travels as uint8)."""
    return np.dtype(np.uint8 if dtype.is_bool else dtype.np).type(value)


def _bytes(host: np.ndarray) -> np.ndarray:
    return host.reshape(-1).view(np.uint8)


def device_launch(be: Backend, handle: Any, kernel: Any, grid: tuple[int, int, int],
                  args: list[BoundArg]) -> None:
    """Launch `kernel` on device backend `be`: the bound `args` follow `kernel.params`."""
    be.check_launch(kernel, grid)
    stored = stored_params(kernel)
    values: list[Any] = []
    back: list[tuple[BoundArg, Any, int | None]] = []  # (arg, buffer, offset; None: in place)
    for i, (param, arg) in enumerate(zip(kernel.params, args)):
        if arg.kind != "array":
            values.append(scalar_value(param.dtype, arg.value))
            continue
        host = arg.host
        if host is None:
            if not be.owns(arg.value):
                raise TypeError(f"argument {arg.name!r}: {type(arg.value).__name__} is not a "
                                f"NumPy or {be.array_name} array")
            values.append(be.device_arg(arg))
            continue
        written = i in stored
        buf = be.host_buffer(host, written, kernel) if arg.nbytes and not arg.origin else None
        if buf is not None:
            values.append(buf)
            if written:
                back.append((arg, buf, None))
            continue
        pad = be.span_offset(arg)
        buf = be.allocate(pad + arg.nbytes)
        if arg.nbytes:
            be.copy_in(buf, pad, _bytes(host))
        first = pad + arg.origin * host.itemsize
        values.append(be.pointer(buf, first, pad + arg.nbytes) if first else buf)
        if written and arg.nbytes:
            back.append((arg, buf, pad))
    be.enqueue(handle, kernel, grid, values)
    for arg, buf, pad in back:
        if pad is None:
            be.release_host_buffer(buf, arg.host)
        else:
            be.copy_out(_bytes(arg.host), buf, pad)
    if not be.asynchronous:
        be.synchronize()


def launcher(be: Backend) -> Any:
    """The function `CompiledKernel` calls as `launch(handle, kernel, grid, args)` for `be`."""
    if be.memory == "device":
        def launch(handle: Any, kernel: Any, grid: tuple[int, int, int],
                   args: list[BoundArg]) -> None:
            device_launch(be, handle, kernel, grid, args)
        return launch
    return be.launch


def launch(be: Backend, handle: Any, kernel: Any, grid: tuple[int, int, int],
           args: list[BoundArg]) -> None:
    """Launch a built kernel on any backend with bound `args` (what `CompiledKernel.run`
    does, without specialisation or checks)."""
    launcher(be)(handle, kernel, grid, args)


def to_host(array: Any) -> np.ndarray:
    """A NumPy view or copy of an array of any kind kdsl takes (a device array through the
    backend that owns it)."""
    if isinstance(array, np.ndarray):
        return array
    from .registry import owner_of

    owner = owner_of(array)
    if owner is not None:
        from kdsl.backends import get_backend

        return get_backend(owner).to_host(array)
    return np.asarray(array)


__all__ = ["device_launch", "launch", "launcher", "scalar_value", "stored_params", "to_host"]
