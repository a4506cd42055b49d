"""Host arrays as Triton takes them: strided views and torch tensors.

A kernel argument that is an array is a pointer to the array's first element, whatever its
layout (Triton's `x.data_ptr()`); the kernel addresses the other elements through the strides
the user passes (`x.stride(0)` in torch, `x.strides[0] // x.itemsize` in NumPy).  A
non-contiguous view (transposed, sliced, negative strides) therefore reaches memory around its
first element: its *span*, from the lowest to the highest address of the view's elements.

`strided_span(arr)` describes that memory as a `BoundArg` would hold it:

  host    a flat, C-contiguous 1-D NumPy view of the span (lowest address first), so every
          backend sees the user's memory: llvm and interp in place, opencl and cuda copy it in
          and, for stored arguments, back out;
  origin  the index of the first element in `host` (> 0 only with negative strides);
  address the first element's address (the pointer the kernel gets).

Checked mode allows element offsets in [-origin, len(host) - origin) from the pointer.

torch tensors are read through DLPack: one with `requires_grad=True` is read through
`.detach()` (the same memory, no autograd), and bfloat16 tensors (which NumPy cannot import)
through their `view(torch.int16)` bits, marked as bfloat16.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kdsl.ir import types as T


def strided_span(name: str, arr: np.ndarray) -> tuple[np.ndarray, int, int]:
    """(flat view of the span, origin in elements, address of the first element) of a
    non-C-contiguous NumPy array.  Raises ValueError for strides that are not whole elements
    (the kernel could not address them)."""
    item = arr.itemsize
    lo = hi = 0
    for n, s in zip(arr.shape, arr.strides):
        if s % item:
            raise ValueError(f"argument {name!r}: stride {s} bytes is not a multiple of the "
                             f"element size {item} (strides {arr.strides}); pass a copy")
        if n > 1:
            if s < 0:
                lo += (n - 1) * s
            else:
                hi += (n - 1) * s
    first = arr.__array_interface__["data"][0]
    # Reversing the axes with negative strides gives a view whose first element is the
    # lowest address; the span is read from there, element by element.
    lowest = arr[tuple(slice(None, None, -1) if s < 0 else slice(None) for s in arr.strides)]
    n = (hi - lo) // item + 1 if arr.size else 0
    flat = np.lib.stride_tricks.as_strided(lowest, shape=(n,), strides=(item,),
                                           writeable=arr.flags.writeable)
    return flat, -lo // item, first


def is_torch(v: Any) -> bool:
    return type(v).__module__.split(".", 1)[0] == "torch"


def torch_host(name: str, t: Any) -> tuple[np.ndarray, T.DType | None]:
    """(NumPy view of a CPU torch tensor's memory, kdsl dtype when NumPy's differs)."""
    if getattr(t, "requires_grad", False):
        t = t.detach()  # the same memory; the kernel is not part of the autograd graph
    dev = getattr(t, "device", None)
    if dev is not None and getattr(dev, "type", "cpu") != "cpu":
        raise TypeError(f"argument {name!r}: a torch tensor on {dev}; kdsl reads torch tensors "
                        f"on the CPU (pass tensor.cpu(), and copy results back)")
    dtype = str(getattr(t, "dtype", ""))
    try:
        if dtype == "torch.bfloat16":
            import torch

            return np.from_dlpack(t.view(torch.int16)).view(np.uint16), T.bfloat16
        return np.from_dlpack(t), None
    except Exception as e:
        raise TypeError(f"argument {name!r}: cannot view the {dtype or 'torch'} tensor through "
                        f"DLPack: {e}") from None


def copy_like(a: Any) -> Any:
    """A copy of array `a` with the same strides (over a copy of its memory span), so that a
    kernel given the original's strides addresses the copy as it would the original (the
    autotuner and `kd.testing.compare` run candidates on copies); torch tensors are copied with
    their strides, other arrays with `.copy()`, anything else is returned as is."""
    if isinstance(a, np.ndarray):
        if a.flags.c_contiguous or a.size == 0:
            return a.copy()
        try:
            flat, origin, _ = strided_span("a", a)
        except ValueError:
            return a.copy()
        c = flat.copy()
        return np.lib.stride_tricks.as_strided(c[origin:], a.shape, a.strides)
    if is_torch(a) and hasattr(a, "stride"):
        import torch

        t = a.detach()
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype,
                                   device=t.device).copy_(t)
    if hasattr(a, "copy") and getattr(a, "shape", None) is not None and np.ndim(a) > 0:
        return a.copy()
    return a


__all__ = ["copy_like", "is_torch", "strided_span", "torch_host"]
