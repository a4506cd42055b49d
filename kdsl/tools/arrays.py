"""Arrays of any kind kdsl takes, for the tools: private copies (same strides, same device),
host copies, a kernel's or reference's outputs by name, and an output's dtype name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kdsl.runtime.device import to_host
from kdsl.runtime.dtype_views import DTypeView

from .tolerance import dtype_name


def copy_array(a: Any) -> Any:
    """A private copy of an argument: arrays (NumPy and torch with their strides, device arrays,
    the bits of a `DTypeView`) are copied, anything else is returned as it is."""
    if isinstance(a, DTypeView):  # bfloat16 / fp8 bits: copy the bits, keep the reading
        return DTypeView(copy_array(a.array), a.dtype)
    if isinstance(a, np.ndarray) or type(a).__module__.startswith("torch"):
        from kdsl.runtime.views import copy_like  # same strides: the kernel's are the original's
        return copy_like(a)
    if hasattr(a, "copy") and hasattr(a, "shape") and not np.isscalar(a):
        return a.copy()
    return a


def host_array(a: Any) -> np.ndarray:
    """A NumPy view or copy of an array of any kind (a `DTypeView`: its bits; `out_dtype`
    says how to read them)."""
    if isinstance(a, DTypeView):
        return host_array(a.array)
    return to_host(a)


def out_dtype(a: Any) -> str:
    """The dtype name an output is read as (float64 when it has none)."""
    dt = getattr(a, "dtype", None)
    return dtype_name(dt) if dt is not None else "float64"


def outputs_of(value: Any, names: Sequence[str]) -> dict[str, Any]:
    """A reference's or library function's return value as {output name: array}."""
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return dict(zip(names, value)) if len(names) == len(value) else \
            {f"out{i}": v for i, v in enumerate(value)}
    return {names[0] if names else "out": value}


__all__ = ["copy_array", "host_array", "out_dtype", "outputs_of"]
