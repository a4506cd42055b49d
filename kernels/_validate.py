"""Argument handling shared by the library kernels: array kinds, bfloat16, validation, the
backend choice and output allocation.

Every library function turns its array arguments into `Arg`s first.  An `Arg` records where
the storage lives (`device`: None for host NumPy memory, else the name of the backend owning
the device array, as the registry answers it), the storage array a kernel receives, the
element type by name and the caller's kind (``torch`` for torch tensors), so that the result
comes back as the kind of array the caller passed, in the caller's dtype.  Device arrays are
created, copied and read through the owning backend's device half (`backends/base.py`), so
the library names no backend.
bfloat16 arrives in one of three spellings (docs/kernels.md):

- `kd.bfloat16_view(bits)` over a uint16 array of any kind (always works);
  the result comes back the same way, as a `bfloat16_view` over a new uint16 array;
- an `ml_dtypes.bfloat16` NumPy array (when ml_dtypes is installed); the result is one too;
- a `torch.bfloat16` tensor, read through its int16 view; the result is a bfloat16 tensor.

torch tensors are read in place through DLPack (a CPU tensor as a NumPy view, a device tensor
as the array of the backend that views its DLPack device, e.g. CuPy); one with
`requires_grad=True` is read through `.detach()`: the same memory, no copy, and the library
call is not recorded by autograd (`kdsl.torch` adds gradients).

Layouts: `as_arg(..., strided=True)` keeps a non-contiguous host array as it is, for kernels
that take strides (`row_layout`, `blas_layout`, `unit_inner`: they copy only the layouts they
cannot address); otherwise a non-contiguous input is copied to a contiguous array first (on
its device).

All checks run on the host before any launch and raise TypeError (wrong kind or dtype) or
ValueError (shape, values), naming the argument.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from kdsl.backends import get_backend

from kdsl.runtime import host_pool
from kdsl.runtime.dtype_views import DTypeView, bfloat16_view
from kdsl.runtime.registry import default_backend, dlpack_owner, owner_of

FLOATS = ("float32", "float16", "bfloat16")


@dataclass
class Arg:
    """One array argument, normalised."""

    name: str
    device: str | None   # the backend owning the device array; None: host (NumPy) memory
    data: Any            # storage handed to the kernel (uint16 bits for bfloat16)
    dtype: str           # element type name: "float32", "bfloat16", "int8", ...
    shape: tuple[int, ...]
    spelling: str = "plain"  # "plain", "view" (bfloat16_view) or "ml_dtypes"
    ml_dtype: Any = None
    caller: str = ""         # "torch" when the caller passed a torch tensor, else ""

    @property
    def kernel_arg(self) -> Any:
        """What a kernel launch receives: the array, or a bfloat16 view of its bits."""
        return bfloat16_view(self.data) if self.dtype == "bfloat16" else self.data

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def with_data(self, data: Any, shape: tuple[int, ...] | None = None) -> Arg:
        """The same argument over other storage (and shape): `dataclasses.replace` without
        its field introspection, which costs microseconds per library call."""
        return Arg(self.name, self.device, data, self.dtype,
                   self.shape if shape is None else shape, self.spelling, self.ml_dtype,
                   self.caller)


#: NumPy dtype -> its name (`np.dtype.name` is computed on every read, microseconds each)
_DTYPE_NAMES: dict[Any, str] = {}
_STORAGE: dict[str, np.dtype] = {}


def _storage(dtype: str) -> np.dtype:
    """`np.dtype(dtype)` of a dtype name, kept."""
    dt = _STORAGE.get(dtype)
    if dt is None:
        dt = _STORAGE[dtype] = np.dtype(dtype)
    return dt


def _dtype_name(dt: Any) -> str:
    try:
        return _DTYPE_NAMES[dt]
    except (KeyError, TypeError):
        pass
    name = np.dtype(dt).name
    try:
        _DTYPE_NAMES[dt] = name
    except TypeError:  # an unhashable dtype-like
        pass
    return name


_NOT_AN_ARRAY = "not an array"


def _device(x: Any) -> str | None:
    """None for a NumPy array, the owning backend's name for a device array, else
    `_NOT_AN_ARRAY`."""
    if isinstance(x, np.ndarray):
        return None
    owner = owner_of(x)
    return owner if owner is not None else _NOT_AN_ARRAY


def _contiguous(x: Any) -> bool:
    flags = getattr(x, "flags", None)
    if flags is None:
        return True
    return bool(getattr(flags, "c_contiguous", True))


def _is_torch(x: Any) -> bool:
    return (type(x).__module__ or "").split(".", 1)[0] == "torch"


def _from_torch(name: str, t: Any) -> tuple[Any, str]:
    """(storage array viewing tensor `t` in place, kdsl dtype name).  bfloat16 goes through
    the int16 view (NumPy and DLPack consumers lack bfloat16), as uint16 bits."""
    import torch

    if t.requires_grad:
        t = t.detach()  # same memory; no autograd record
    bf16 = t.dtype == torch.bfloat16
    if bf16:
        t = t.view(torch.int16)
    owner = None
    if t.device.type != "cpu":
        try:
            owner = dlpack_owner(int(t.__dlpack_device__()[0]))
        except (ValueError, TypeError, RuntimeError):  # a device DLPack cannot name ("meta")
            owner = None
    if t.device.type == "cpu":
        data = np.from_dlpack(t)
    elif owner is not None:
        data = get_backend(owner).from_dlpack(t)
    else:
        raise TypeError(f"{name}: a torch tensor on {t.device}; kdsl reads CPU tensors and "
                        f"those of the devices its backends view")
    if bf16:
        return data.view(np.uint16), "bfloat16"
    return data, np.dtype(data.dtype).name


def _to_torch(data: Any, dtype: str) -> Any:
    """A torch tensor sharing storage array `data` (NumPy or a device array exporting DLPack)
    of kdsl dtype `dtype`."""
    import torch

    if dtype == "bfloat16":
        return torch.from_dlpack(data.view(np.int16)).view(torch.bfloat16)
    return torch.from_dlpack(data)


def _contiguous_copy(data: Any, device: str | None) -> Any:
    if device is None:
        return np.ascontiguousarray(data)
    return get_backend(device).ascontiguous(data)


def as_arg(name: str, x: Any, dtypes: tuple[str, ...], ndim: int | tuple[int, ...] | None = None,
           strided: bool = False) -> Arg:
    """Check array argument `name` (kind, dtype among `dtypes`, rank).  A non-contiguous input
    is copied unless `strided` (the caller then addresses it through its strides)."""
    spelling, ml, caller = "plain", None, ""
    if isinstance(x, DTypeView):
        if x.dtype.name != "bfloat16":
            raise TypeError(f"{name}: only bfloat16 views are accepted, got a {x.dtype} view")
        spelling, data, dtype = "view", x.array, "bfloat16"
    elif _is_torch(x) and hasattr(x, "requires_grad"):
        data, dtype = _from_torch(name, x)
        caller = "torch"
    else:
        if hasattr(x, "__dlpack__") and _device(x) == _NOT_AN_ARRAY and hasattr(x, "numpy"):
            x = np.from_dlpack(x)  # a CPU tensor of another library: view it as NumPy
        data = x
        dt = getattr(x, "dtype", None)
        try:
            dtype = _dtype_name(dt) if dt is not None else None
        except TypeError:
            dtype = str(dt)
        if dtype == "bfloat16":  # ml_dtypes: hand the kernel the raw bits
            spelling, ml, data = "ml_dtypes", x.dtype, x.view(np.uint16)
    device = _device(data)
    if device == _NOT_AN_ARRAY:
        raise TypeError(f"{name}: expected a NumPy, CuPy or PyOpenCL array, a torch tensor "
                        f"(or a bfloat16_view of an array), got {type(x).__name__}")
    if spelling == "view" and np.dtype(data.dtype).itemsize != 2:
        raise TypeError(f"{name}: a bfloat16 view needs 16-bit storage, got {data.dtype}")
    if dtype not in dtypes:
        raise TypeError(f"{name}: dtype {dtype} is not supported here (expected one of "
                        f"{', '.join(dtypes)})")
    shape = data.shape if type(data) is np.ndarray else tuple(int(s) for s in data.shape)
    if ndim is not None:
        ranks = (ndim,) if isinstance(ndim, int) else ndim
        if len(shape) not in ranks:
            want = " or ".join(str(r) for r in ranks)
            raise ValueError(f"{name}: expected a {want}-D array, got shape {shape}")
    if not _contiguous(data) and not (strided and device is None):
        data = _contiguous_copy(data, device)
    return Arg(name, device, data, dtype, shape, spelling, ml, caller)


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
    else the registry's default (the rule of kernel launches).  Mixed devices are refused."""
    for a in args:
        if a.device is not None:
            break
    else:  # host arrays only (the common case, on every call)
        return backend if backend is not None else default_backend()
    owners = {a.device: a.name for a in args if a.device is not None}
    if len(owners) > 1:
        (k1, n1), (k2, n2) = list(owners.items())[:2]
        raise ValueError(f"{n1} is a {k1} device array but {n2} is a {k2} device array")
    owner = next(iter(owners), None)
    if backend is None:
        return owner or default_backend()
    if owner is not None and owner != backend:
        name = next(iter(owners.values()))
        raise ValueError(f"{name} is a {owner} device array, which backend {backend!r} "
                         f"cannot use")
    return backend


def empty(like: Arg, shape: tuple[int, ...], dtype: str, name: str = "out") -> Arg:
    """A new array of `like`'s kind (same device / queue), element type `dtype`."""
    return _new(like, shape, dtype, name, zero=False)


def output(out: Any, like: Arg, shape: tuple[int, ...], dtype: str,
           reads: tuple[Arg, ...] = ()) -> Arg:
    """The result array: a new one (`empty`) when `out` is None, else the caller's `out=`
    checked: an array of `like`'s kind and device, contiguous, of exactly `shape` and `dtype`,
    sharing no memory with the arrays the kernel `reads` (a NumPy `out` is checked, as torch's
    `out=` is).  Writing into a reused buffer skips the page faults of a fresh output (a
    fresh 128 MiB array costs ~10 ms of them on these hosts)."""
    if out is None:
        return empty(like, shape, dtype)
    raw = out.array if isinstance(out, DTypeView) else out
    contiguous = raw.is_contiguous() if _is_torch(raw) and hasattr(raw, "is_contiguous") \
        else _contiguous(raw)
    if not contiguous:
        raise ValueError("out: expected a contiguous array")
    o = as_arg("out", out, (dtype,), strided=True)
    if o.device != like.device:
        raise ValueError(f"out: expected an array on the same device as {like.name} "
                         f"({like.device or 'host'}), got one on {o.device or 'host'}")
    if tuple(o.shape) != tuple(shape):
        raise ValueError(f"out: expected shape {tuple(shape)}, got {tuple(o.shape)}")
    if o.device is None:
        for r in reads:
            if r.device is None and np.shares_memory(o.data, r.data):
                raise ValueError(f"out: must not share memory with {r.name}")
    return o


def returned(out: Arg, given: Any) -> Any:
    """What a library call returns: the caller's `out=` array itself when one was `given`,
    else `result(out)`."""
    return result(out) if given is None else given


def zeros(like: Arg, shape: tuple[int, ...], dtype: str, name: str = "out") -> Arg:
    """`empty`, filled with zeros (accumulation buffers)."""
    return _new(like, shape, dtype, name, zero=True)


def _new(like: Arg, shape: tuple[int, ...], dtype: str, name: str, zero: bool) -> Arg:
    store = np.uint16 if dtype == "bfloat16" else _storage(dtype)
    if like.device is None:  # large results reuse idle blocks (kdsl/runtime/host_pool.py)
        data = (np.zeros if zero else host_pool.empty)(shape, store)
    else:
        be = get_backend(like.device)
        data = (be.zeros if zero else be.empty)(tuple(shape), store, like=like.data)
    spelling = like.spelling if dtype == "bfloat16" else "plain"
    return Arg(name, like.device, data, dtype, tuple(shape), spelling, like.ml_dtype,
               like.caller)


def reshaped(arg: Arg, shape: tuple[int, ...]) -> Arg:
    """The same contiguous storage under another shape (no copy); `arg` itself when the
    shape is its own (a device array's reshape builds a new array object: ~10 us each on
    PyOpenCL)."""
    shape = tuple(shape)
    if shape == arg.shape:
        return arg
    return arg.with_data(arg.data.reshape(shape), shape)


def contiguous(arg: Arg) -> Arg:
    """`arg` itself when C-contiguous, else a contiguous copy."""
    if _contiguous(arg.data):
        return arg
    return arg.with_data(_contiguous_copy(arg.data, arg.device))


def _elem_strides(arg: Arg) -> tuple[int, ...] | None:
    """Element strides of a host array, None when a stride is not a whole element."""
    item = arg.data.itemsize
    st = arg.data.strides
    if any(s % item for s in st):
        return None
    return tuple(s // item for s in st)


def row_layout(arg: Arg) -> tuple[Arg, int]:
    """(`arg` as a [rows, n] array whose columns are adjacent, its row stride in elements):
    the kernels of row operations take a row stride, so a slice of rows or of a wider
    buffer is read in place; a layout whose leading dimensions do not collapse into one row
    stride is copied."""
    n = arg.shape[-1] if arg.shape else 1
    rows = math.prod(arg.shape[:-1])
    if not _contiguous(arg.data):
        st = _elem_strides(arg)
        if st is not None and (n <= 1 or st[-1] == 1):
            # leading dims collapse when each stride is the next one times its extent
            lead = [(e, s) for e, s in zip(arg.shape[:-1], st[:-1]) if e != 1]
            if all(s0 == s1 * e1 for (_, s0), (e1, s1) in itertools.pairwise(lead)):
                rs = lead[-1][1] if lead else n
                view = np.lib.stride_tricks.as_strided(
                    arg.data, (rows, n), (rs * arg.data.itemsize, arg.data.itemsize),
                    writeable=False)
                return arg.with_data(view, (rows, n)), rs
        arg = contiguous(arg)
    return reshaped(arg, (rows, n)), n


def unit_inner(arg: Arg) -> tuple[Arg, tuple[int, ...]]:
    """(`arg` with adjacent elements along its last axis, its element strides): the layout a
    kernel taking one stride per leading axis reads in place; others are copied."""
    if not _contiguous(arg.data):
        st = _elem_strides(arg)
        if st is not None and (arg.shape[-1] <= 1 or st[-1] == 1):
            return arg, st
        arg = contiguous(arg)
    st = [1] * arg.ndim
    for i in range(arg.ndim - 2, -1, -1):
        st[i] = st[i + 1] * arg.shape[i + 1]
    return arg, tuple(st)


def blas_layout(arg: Arg) -> tuple[Arg, bool, int, int]:
    """(arg, transposed, leading dimension, batch stride) of a [.., R, C] matrix operand, as
    BLAS takes it: row-major with a row stride (`ld`) or column-major (`transposed`: element
    (r, c) at `r + c * ld`, e.g. a `w.T` view); any other layout is copied."""
    st = _elem_strides(arg) if not _contiguous(arg.data) else None
    if st is None:
        arg = contiguous(arg)
        R, C = arg.shape[-2:]
        return arg, False, C, R * C
    R, C = arg.shape[-2:]
    s0, s1 = st[-2:]
    batch = st[0] if arg.ndim == 3 else 0
    if C <= 1 or s1 == 1:
        return arg, False, s0 if R > 1 else C, batch
    if R <= 1 or s0 == 1:
        return arg, True, s1 if C > 1 else R, batch
    arg = contiguous(arg)
    return arg, False, C, R * C


def result(out: Arg) -> Any:
    """`out` in the kind and spelling its inputs used (torch tensors; bfloat16: a view, an
    ml_dtypes array or a bfloat16 tensor)."""
    if out.caller == "torch":
        return _to_torch(out.data, out.dtype)
    if out.dtype != "bfloat16":
        return out.data
    if out.spelling == "ml_dtypes":
        return out.data.view(out.ml_dtype)
    return bfloat16_view(out.data)


def to_host(arg: Arg) -> np.ndarray:
    """A NumPy copy (or view) of a small array, for checks on its values."""
    if arg.device is None:
        return arg.data
    return get_backend(arg.device).to_host(arg.data)


def moved_axis(arg: Arg, source: int, destination: int) -> Arg:
    """A contiguous copy of `arg` (on its device) with axis `source` moved to
    `destination`."""
    if arg.device is None:
        data = np.ascontiguousarray(np.moveaxis(arg.data, source, destination))
    else:
        order = [i for i in range(arg.ndim) if i != source % arg.ndim]
        order.insert(destination % arg.ndim, source % arg.ndim)
        data = get_backend(arg.device).ascontiguous(arg.data.transpose(order))
    return arg.with_data(data, tuple(int(s) for s in data.shape))


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
