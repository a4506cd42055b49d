"""Argument handling shared by the library kernels: array kinds, bfloat16, validation, the
backend choice and output allocation.

Every library function turns its array arguments into `Arg`s first.  An `Arg` records the
array kind (``numpy``, ``cupy`` or ``opencl``), the storage array a kernel receives, and the
element type by name.  bfloat16 arrives in one of two spellings (docs/kernels.md):

- `kdsl.runtime.binding.bfloat16_view(bits)` over a uint16 array of any kind (always works);
  the result comes back the same way, as a `bfloat16_view` over a new uint16 array;
- an `ml_dtypes.bfloat16` NumPy array (when ml_dtypes is installed); the result is one too.

All checks run on the host before any launch and raise TypeError (wrong kind or dtype) or
ValueError (shape, contiguity, values), naming the argument.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from kdsl.runtime.binding import DTypeView, bfloat16_view

FLOATS = ("float32", "float16", "bfloat16")


@dataclass
class Arg:
    """One array argument, normalised."""

    name: str
    kind: str            # "numpy", "cupy" or "opencl"
    data: Any            # storage handed to the kernel (uint16 bits for bfloat16)
    dtype: str           # element type name: "float32", "bfloat16", "int8", ...
    shape: tuple[int, ...]
    spelling: str = "plain"  # "plain", "view" (bfloat16_view) or "ml_dtypes"
    ml_dtype: Any = None

    @property
    def kernel_arg(self) -> Any:
        """What a kernel launch receives: the array, or a bfloat16 view of its bits."""
        return bfloat16_view(self.data) if self.dtype == "bfloat16" else self.data

    @property
    def ndim(self) -> int:
        return len(self.shape)


def _kind(x: Any) -> str | None:
    if isinstance(x, np.ndarray):
        return "numpy"
    mod = type(x).__module__ or ""
    if mod.startswith("cupy"):
        return "cupy"
    if mod.startswith("pyopencl"):
        return "opencl"
    return None


def _contiguous(x: Any, kind: str) -> bool:
    flags = getattr(x, "flags", None)
    if flags is None:
        return True
    if kind == "numpy":
        return bool(flags.c_contiguous)
    return bool(getattr(flags, "c_contiguous", True))


def as_arg(name: str, x: Any, dtypes: tuple[str, ...], ndim: int | tuple[int, ...] | None = None
           ) -> Arg:
    """Check array argument `name` (kind, dtype among `dtypes`, rank, C-contiguity)."""
    spelling, ml = "plain", None
    if isinstance(x, DTypeView):
        if x.dtype.name != "bfloat16":
            raise TypeError(f"{name}: only bfloat16 views are accepted, got a {x.dtype} view")
        spelling, data, dtype = "view", x.array, "bfloat16"
    else:
        if hasattr(x, "__dlpack__") and _kind(x) is None and hasattr(x, "numpy"):
            x = np.from_dlpack(x)  # a CPU tensor of another library: view it as NumPy
        data = x
        dt = getattr(x, "dtype", None)
        dtype = np.dtype(dt).name if dt is not None else None
        if dtype == "bfloat16":  # ml_dtypes: hand the kernel the raw bits
            spelling, ml, data = "ml_dtypes", x.dtype, x.view(np.uint16)
    kind = _kind(data)
    if kind is None:
        raise TypeError(f"{name}: expected a NumPy, CuPy or PyOpenCL array (or a "
                        f"bfloat16_view of one), got {type(x).__name__}")
    if spelling == "view" and np.dtype(data.dtype).itemsize != 2:
        raise TypeError(f"{name}: a bfloat16 view needs 16-bit storage, got {data.dtype}")
    if dtype not in dtypes:
        raise TypeError(f"{name}: dtype {dtype} is not supported here (expected one of "
                        f"{', '.join(dtypes)})")
    shape = tuple(int(s) for s in data.shape)
    if ndim is not None:
        ranks = (ndim,) if isinstance(ndim, int) else ndim
        if len(shape) not in ranks:
            want = " or ".join(str(r) for r in ranks)
            raise ValueError(f"{name}: expected a {want}-D array, got shape {shape}")
    if not _contiguous(data, kind):
        raise ValueError(f"{name}: array is not C-contiguous (shape {shape}); pass a "
                         f"contiguous copy")
    return Arg(name, kind, data, dtype, shape, spelling, ml)


def same_dtype(*args: Arg) -> None:
    """All `args` have the dtype of the first."""
    for a in args[1:]:
        if a.dtype != args[0].dtype:
            raise TypeError(f"{a.name}: dtype {a.dtype} differs from {args[0].name}'s "
                            f"{args[0].dtype}")


def check_shape(arg: Arg, expected: tuple[int, ...], what: str = "") -> None:
    if arg.shape != tuple(expected):
        extra = f" ({what})" if what else ""
        raise ValueError(f"{arg.name}: expected shape {tuple(expected)}{extra}, got {arg.shape}")


def resolve_backend(backend: str | None, *args: Arg) -> str:
    """The backend for a call: `backend`, else the device arrays' owner, else KDSL_BACKEND,
    else llvm (the rule of kernel launches).  Mixed device kinds are refused."""
    owners = {a.kind: a.name for a in args if a.kind != "numpy"}
    if len(owners) > 1:
        (k1, n1), (k2, n2) = list(owners.items())[:2]
        raise ValueError(f"{n1} is a {k1} array but {n2} is a {k2} array")
    owner = {"cupy": "cuda", "opencl": "opencl"}.get(next(iter(owners), ""))
    if backend is None:
        return owner or os.environ.get("KDSL_BACKEND") or "llvm"
    if owner is not None and owner != backend:
        name = next(iter(owners.values()))
        raise ValueError(f"{name} is a {owner} device array, which backend {backend!r} "
                         f"cannot use")
    return backend


def empty(like: Arg, shape: tuple[int, ...], dtype: str, name: str = "out") -> Arg:
    """A new array of `like`'s kind (same device / queue), element type `dtype`."""
    store = np.uint16 if dtype == "bfloat16" else np.dtype(dtype)
    if like.kind == "numpy":
        data = np.empty(shape, store)
    elif like.kind == "cupy":
        import cupy
        data = cupy.empty(shape, store)
    else:
        import pyopencl.array as cla
        data = cla.empty(like.data.queue, shape, store)
    spelling = like.spelling if dtype == "bfloat16" else "plain"
    return Arg(name, like.kind, data, dtype, tuple(shape), spelling, like.ml_dtype)


def reshaped(arg: Arg, shape: tuple[int, ...]) -> Arg:
    """The same contiguous storage under another shape (no copy)."""
    return Arg(arg.name, arg.kind, arg.data.reshape(shape), arg.dtype, tuple(shape),
               arg.spelling, arg.ml_dtype)


def result(out: Arg) -> Any:
    """`out` in the spelling its inputs used (bfloat16: a view or an ml_dtypes array)."""
    if out.dtype != "bfloat16":
        return out.data
    if out.spelling == "ml_dtypes":
        return out.data.view(out.ml_dtype)
    return bfloat16_view(out.data)


def to_host(arg: Arg) -> np.ndarray:
    """A NumPy copy (or view) of a small array, for checks on its values."""
    if arg.kind == "numpy":
        return arg.data
    return arg.data.get()


def positive_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise ValueError(f"{name}: expected a positive int, got {v!r}")
    return int(v)


def finite_float(name: str, v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a float, got {type(v).__name__}") from None
    if not np.isfinite(f):
        raise ValueError(f"{name}: expected a finite float, got {f}")
    return f


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())
