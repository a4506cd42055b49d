"""Argument binding: Python call arguments -> kernel parameters, types and `BoundArg`s.

Three steps, each raising TypeError/ValueError that names the offending argument:

1. `Signature.bind` matches positional and keyword arguments to the kernel's parameters
   (Python's rules, plus defaults), and tells constexpr parameters from runtime ones.
2. `bind_arg` turns one runtime argument into its specialisation signature (a short string:
   "*float32" for an array of float32, "int32" for a scalar) and a `BoundArg`:
     NumPy array (any shape, any strides)         -> pointer to its first element
     object with `__dlpack__` on the CPU          -> pointer (viewed with `np.from_dlpack`;
                                                     torch tensors as `views.torch_host`)
     a backend's device array (`Backend.owns`)    -> pointer, used in place (contiguous)
     `kd.bfloat16_view(uint16_array)`             -> pointer to bfloat16 (`dtype_views.py`)
     `kd.float8_view(uint8_array, kd.float8e4nv)`  -> pointer to that 8-bit float
     an ml_dtypes float8 array (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz) -> pointer to float8e4nv,
       float8e5, float8e4b8, float8e5b16; a torch float8 tensor -> the same, through its uint8
       view (DLPack has no 8-bit floats)
     bool -> int1, int -> int32 (int64, then uint64, when it does not fit), any float
     (numpy.float64 included: a float subclass) -> float32, as in Triton; other NumPy
     scalars keep their dtype.  A parameter annotated with a dtype converts its value to it
     (`annotations.py`).
   A non-contiguous view is bound as its memory span (`views.py`), so that the kernel, given
   the view's strides, reaches every element on every backend.
   bfloat16 arrays: an `ml_dtypes.bfloat16` array is accepted when ml_dtypes is installed;
   without it, pass the raw bits as a uint16 array wrapped in `kd.bfloat16_view`.
3. `normalize_grid` checks the launch grid and pads it to three dimensions.

The common cases (NumPy arrays, Python scalars) are tested first and their answers are kept
in small dicts: this code runs on every launch.
"""

from __future__ import annotations

import ctypes
import inspect
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kdsl.backends.base import BoundArg
from kdsl.ir import types as T

from .annotations import annotation_type, convert_scalar
from .dtype_views import DTypeView, bfloat16_view, float8_view  # noqa: F401  (old spellings)
from .registry import dlpack_owner, owner_of
from .views import is_torch, strided_span, torch_host

_MISSING = object()
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
_UINT64_MAX = (1 << 64) - 1
_F32_MAX = float(np.finfo(np.float32).max)
# Program ids are int32 in every backend.
_GRID_MAX = (1 << 31) - 1

# Spellings of a constexpr annotation when annotations are strings (`from __future__ import
# annotations`), as in Triton.
_CONSTEXPR_NAMES = frozenset({"constexpr", "kd.constexpr", "tl.constexpr", "kdsl.constexpr",
                              "triton.language.constexpr", "language.constexpr"})


# ------------------------------------------------------------------------------ parameters

@dataclass(frozen=True)
class ParamSpec:
    name: str
    constexpr: bool
    default: Any = _MISSING
    positional: bool = True  # False for keyword-only parameters
    #: the kdsl type a runtime parameter is annotated with (`annotations.py`), else None
    annotation: Any = None


def is_constexpr_annotation(ann: Any) -> bool:
    """True for `kd.constexpr` (the class or an instance) or one of its string spellings."""
    if ann is inspect.Parameter.empty:
        return False
    if isinstance(ann, str):
        # a quoted annotation under postponed evaluation arrives as "'kd.constexpr'"
        return ann.strip().strip("'\"").strip() in _CONSTEXPR_NAMES
    try:
        from kdsl import language
        cls = getattr(language, "constexpr", None)
    except Exception:  # pragma: no cover - language module being rewritten
        cls = None
    if cls is not None and (ann is cls or (isinstance(cls, type) and isinstance(ann, cls))):
        return True
    return getattr(ann, "__name__", None) == "constexpr"


class Signature:
    """The parameters of a kernel, and the binding of call arguments to them."""

    def __init__(self, fn: Callable):
        params = []
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(
                    f"kernel {fn.__name__!r}: *args/**kwargs parameters are not supported")
            cx = is_constexpr_annotation(p.annotation)
            params.append(ParamSpec(
                p.name, cx, _MISSING if p.default is p.empty else p.default,
                p.kind != p.KEYWORD_ONLY, None if cx else annotation_type(p.annotation)))
        self.params: tuple[ParamSpec, ...] = tuple(params)
        self.names: tuple[str, ...] = tuple(p.name for p in params)
        self.index: dict[str, int] = {p.name: i for i, p in enumerate(params)}
        self.n_positional = sum(p.positional for p in params)
        self.constexpr_names = tuple(p.name for p in params if p.constexpr)
        self.runtime_names = tuple(p.name for p in params if not p.constexpr)
        self.is_constexpr = tuple(p.constexpr for p in params)

    def bind(self, args: tuple, kwargs: dict[str, Any]) -> list[Any]:
        """Values of all parameters in order (defaults applied)."""
        n = len(args)
        if n > self.n_positional:
            raise TypeError(
                f"too many arguments: the kernel takes {self.n_positional} positional "
                f"argument(s) ({', '.join(self.names[:self.n_positional])}), got {n}")
        values = list(args)
        if n < len(self.params):
            values.extend([_MISSING] * (len(self.params) - n))
        for k, v in kwargs.items():
            i = self.index.get(k)
            if i is None:
                raise TypeError(f"unknown keyword argument {k!r}; the kernel's parameters are: "
                                f"{', '.join(self.names)}")
            if values[i] is not _MISSING:
                raise TypeError(f"argument {k!r} given both by position and by keyword")
            values[i] = v
        if n < len(self.params) or kwargs:
            for i, v in enumerate(values):
                if v is _MISSING:
                    p = self.params[i]
                    if p.default is _MISSING:
                        what = "constexpr argument" if p.constexpr else "argument"
                        raise TypeError(f"missing {what} {p.name!r}")
                    values[i] = p.default
        return values


# ------------------------------------------------------------------------------ arguments

# torch's 8-bit float dtypes (by name: torch is optional) -> kdsl's
_TORCH_FP8 = {"torch.float8_e4m3fn": T.float8e4nv, "torch.float8_e5m2": T.float8e5,
              "torch.float8_e4m3fnuz": T.float8e4b8, "torch.float8_e5m2fnuz": T.float8e5b16}


def _torch_float8(name: str, v: Any) -> tuple[str, BoundArg, str | None]:
    """A torch float8 tensor, bound through its uint8 view (same storage, in place)."""
    import sys

    torch = sys.modules["torch"]
    return bind_arg(name, DTypeView(v.view(torch.uint8), _TORCH_FP8[str(v.dtype)]))


# NumPy dtype -> (kdsl dtype, array signature); filled on first sight of each dtype.
_ARRAY_SIG: dict[np.dtype, tuple[T.DType, str]] = {}


def _array_sig(name: str, dt: Any) -> tuple[T.DType, str]:
    try:
        return _ARRAY_SIG[dt]
    except (KeyError, TypeError):
        pass
    try:
        kd = T.from_numpy(dt)
    except TypeError:
        raise TypeError(f"argument {name!r}: unsupported array dtype {dt}") from None
    res = (kd, "*" + kd.name)
    try:
        _ARRAY_SIG[np.dtype(dt)] = res
    except TypeError:  # pragma: no cover - dtype-like objects NumPy does not know
        pass
    return res


def _host_array(name: str, arr: np.ndarray, value: Any, kd: T.DType, sig: str):
    if arr.flags.c_contiguous:
        return sig, BoundArg(name, "array", kd, value, arr, arr.nbytes, arr.size,
                             _address(arr)), None
    # A strided view: the pointer is its first element, the memory is its span (views.py).
    flat, origin, first = strided_span(name, arr)
    return sig, BoundArg(name, "array", kd, value, flat, flat.nbytes, flat.size, first,
                         origin, arr), None


def _scalar_int(name: str, v: int) -> tuple[str, BoundArg, None]:
    if _INT32[0] <= v <= _INT32[1]:
        return "int32", BoundArg(name, "scalar", T.int32, v), None
    if _INT64[0] <= v <= _INT64[1]:
        return "int64", BoundArg(name, "scalar", T.int64, v), None
    if 0 <= v <= _UINT64_MAX:  # as Triton: [2**63, 2**64) is uint64
        return "uint64", BoundArg(name, "scalar", T.uint64, v), None
    raise ValueError(f"argument {name!r}: integer {v} does not fit in int64 or uint64")


def _scalar_float(name: str, v: float) -> tuple[str, BoundArg, None]:
    if abs(v) > _F32_MAX and math.isfinite(v):
        raise ValueError(f"argument {name!r}: {v} overflows float32 (Python floats, "
                         f"numpy.float64 included, are passed as float32, as in Triton); "
                         f"annotate the parameter `{name}: kd.float64` for a float64 scalar")
    return "float32", BoundArg(name, "scalar", T.float32, v), None


def _np_scalar(name: str, v: np.generic) -> tuple[str, BoundArg, None]:
    try:
        kd = T.from_numpy(v.dtype)
    except TypeError:
        raise TypeError(f"argument {name!r}: unsupported scalar dtype {v.dtype}") from None
    if kd.is_fp8:
        raise TypeError(f"argument {name!r}: {kd} scalars are not kernel arguments; pass a "
                        f"float (float32) and convert it in the kernel")
    item = v.item()
    if kd.is_bool:
        item = bool(item)
    return kd.name, BoundArg(name, "scalar", kd, item), None


def _device_array(name: str, v: Any, owner: str,
                  dtype: T.DType | None = None) -> tuple[str, BoundArg, str]:
    """A backend's device array, used in place: the kernel's pointer is its first element.
    A strided CuPy view (transposed, sliced, negative strides) is passed as Triton passes it,
    with `numel`/`origin` giving its memory span for checked mode; its data pointer is read
    for the `% 16` alignment specialisation, as a host array's address is."""
    kd, sig = (dtype, "*" + dtype.name) if dtype is not None else _array_sig(name, v.dtype)
    size = int(v.size)
    ptr = _device_pointer(v)
    numel, origin = size, 0
    flags = getattr(v, "flags", None)
    if flags is not None and not getattr(flags, "c_contiguous", True):
        strides = getattr(v, "strides", None)
        if strides is None or ptr is None:
            raise ValueError(f"argument {name!r}: this non-contiguous device array cannot be "
                             "addressed by a kernel; pass a contiguous copy")
        item = kd.itemsize
        lo = hi = 0
        for n, st in zip(v.shape, strides):
            if st % item:
                raise ValueError(f"argument {name!r}: stride {st} bytes is not a multiple of "
                                 f"the element size {item}; pass a copy")
            if n > 1:
                lo, hi = (lo + (n - 1) * st, hi) if st < 0 else (lo, hi + (n - 1) * st)
        numel = (hi - lo) // item + 1 if size else 0
        origin = -lo // item
    ba = BoundArg(name, "array", kd, v, None, numel * kd.itemsize, numel, ptr or 0, origin)
    return sig, ba, owner


def _device_pointer(v: Any) -> int | None:
    """Data pointer of the first element of a device array (CuPy's `data.ptr`, or the CUDA
    array interface), or None."""
    data = getattr(v, "data", None)
    ptr = getattr(data, "ptr", None)
    if isinstance(ptr, int):
        return ptr
    cai = getattr(v, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        return int(cai["data"][0])
    return None


def _device_dlpack(name: str, v: Any, owner: str) -> tuple[str, BoundArg, str]:
    """A device tensor of another library (torch) on a device backend `owner` views through
    DLPack (`Backend.dlpack_devices`): that backend's array over the same memory, bfloat16
    through its int16 bits, `requires_grad` tensors through `detach()`."""
    from kdsl.backends import get_backend

    dtype = None
    if is_torch(v):
        import torch

        if v.requires_grad:
            v = v.detach()
        if v.dtype == torch.bfloat16:
            v, dtype = v.view(torch.int16), T.bfloat16
    be = get_backend(owner)
    try:
        arr = be.from_dlpack(v)
    except ImportError as e:
        raise TypeError(f"argument {name!r}: {e}") from None
    except Exception as e:
        raise TypeError(f"argument {name!r}: the {owner} backend cannot view this array as a "
                        f"{be.array_name} array through DLPack: {e}") from None
    return _device_array(name, arr, owner, dtype)


def _dlpack(name: str, v: Any) -> tuple[str, BoundArg, None]:
    dev = getattr(v, "__dlpack_device__", None)
    if dev is not None:
        try:
            dev_type = int(dev()[0])
        except Exception as e:
            raise TypeError(f"argument {name!r}: __dlpack_device__() failed: {e}") from None
        if dev_type != 1:  # not kDLCPU: a device backend's, else nobody's
            owner = dlpack_owner(dev_type)
            if owner is not None:
                return _device_dlpack(name, v, owner)
            raise TypeError(
                f"argument {name!r}: a DLPack array on device type {dev_type} that no "
                f"available backend owns; pass a NumPy array or the backend's device array")
    if is_torch(v):
        arr, as_dtype = torch_host(name, v)
    else:
        as_dtype = None
        try:
            arr = np.from_dlpack(v)
        except Exception as e:
            raise TypeError(f"argument {name!r}: cannot view it through DLPack: {e}") from None
    kd, sig = (as_dtype, "*" + as_dtype.name) if as_dtype else _array_sig(name, arr.dtype)
    return _host_array(name, arr, v, kd, sig)


def bind_arg(name: str, v: Any) -> tuple[str, BoundArg, str | None]:
    """(signature, BoundArg, owning backend or None) for one runtime argument."""
    t = type(v)
    if t is np.ndarray:
        kd, sig = _ARRAY_SIG.get(v.dtype) or _array_sig(name, v.dtype)
        if v.flags.c_contiguous:  # inlined `_host_array`: this is the hottest line
            return sig, BoundArg(name, "array", kd, v, v, v.nbytes, v.size, _address(v)), None
        return _host_array(name, v, v, kd, sig)
    if t is int:
        return _scalar_int(name, v)
    if t is float:
        return _scalar_float(name, v)
    if t is bool:
        return "int1", BoundArg(name, "scalar", T.int1, v), None
    return _bind_other(name, v)


def _bind_other(name: str, v: Any) -> tuple[str, BoundArg, str | None]:
    if isinstance(v, bool):
        return "int1", BoundArg(name, "scalar", T.int1, bool(v)), None
    if isinstance(v, int):
        return _scalar_int(name, int(v))
    if isinstance(v, float):  # numpy.float64 is a float: float32, as Triton types it
        return _scalar_float(name, float(v))
    if isinstance(v, np.generic):
        return _np_scalar(name, v)
    if isinstance(v, np.ndarray):  # subclasses
        kd, sig = _array_sig(name, v.dtype)
        return _host_array(name, np.asarray(v), v, kd, sig)
    if isinstance(v, DTypeView):
        sig, ba, owner = bind_arg(name, v.array)
        if ba.kind != "array" or ba.dtype.itemsize != v.dtype.itemsize:
            raise TypeError(f"argument {name!r}: a {v.dtype} view needs an array of "
                            f"{v.dtype.itemsize}-byte elements")
        ba.dtype = v.dtype
        return "*" + v.dtype.name, ba, owner
    dt = getattr(v, "dtype", None)
    # a device array's NumPy dtype is never torch's: its str() costs microseconds per launch
    if dt is not None and not isinstance(dt, np.dtype) and str(dt) in _TORCH_FP8 \
            and hasattr(v, "view"):
        return _torch_float8(name, v)
    owner = owner_of(v)
    if owner is not None:
        return _device_array(name, v, owner)
    if hasattr(v, "__dlpack__"):
        return _dlpack(name, v)
    raise TypeError(f"argument {name!r}: expected an array (NumPy, DLPack or a backend's "
                    f"device array) or a scalar, got {type(v).__name__}")


def bind_annotated(name: str, v: Any, ann: T.DType | T.PointerType
                   ) -> tuple[str, BoundArg, str | None]:
    """`bind_arg` for a parameter annotated with a type (`annotations.py`)."""
    if isinstance(ann, T.PointerType):
        s, ba, owner = bind_arg(name, v)
        if ba.kind != "array":
            raise TypeError(f"argument {name!r}: the parameter is annotated as a pointer "
                            f"to {ann.pointee}; got {type(v).__name__}")
        if ba.dtype != ann.pointee:
            if ba.dtype.itemsize != ann.pointee.itemsize:
                raise TypeError(f"argument {name!r}: the parameter is annotated as a pointer "
                                f"to {ann.pointee} but the array holds {ba.dtype}")
            ba.dtype = ann.pointee
        return "*" + ann.pointee.name, ba, owner
    return ann.name, BoundArg(name, "scalar", ann, convert_scalar(name, v, ann)), None


def sig_type(sig: str) -> T.TileType:
    """Tile IR type of a signature string from `bind_arg`."""
    if sig[0] == "*":
        return T.TileType((), T.PointerType(T.BY_NAME[sig[1:]]))
    return T.TileType((), T.BY_NAME[sig])


def _address(array: np.ndarray) -> int:
    """Data pointer of a host array (ctypes' buffer view is the fast way; it needs a
    writable, non-empty buffer)."""
    try:
        return ctypes.addressof(_CHAR.from_buffer(array))
    except (TypeError, ValueError, BufferError):
        return array.__array_interface__["data"][0]


_CHAR = ctypes.c_char


def multiple_of_16(ba: BoundArg) -> bool:
    """Whether a bound argument is a multiple of 16: an array's address in bytes (a host
    array's, or a device array's data pointer), an integer scalar's value (Triton's `% 16`
    specialisation)."""
    if ba.kind == "array":
        if ba.host is None:  # a device array: its data pointer, when the binder read one
            return bool(ba.address) and not ba.address & 15
        return not (ba.address or _address(ba.host)) & 15
    v = ba.value
    return type(v) is int and not v & 15 and ba.dtype is not T.int1


# ------------------------------------------------------------------------------ grid

def normalize_grid(grid: Any, meta: Callable[[], dict[str, Any]] | None = None
                   ) -> tuple[int, int, int]:
    """Check a launch grid and pad it to 3 dims.  `grid` is a tuple/list of 1-3 positive ints
    (any integer type) or a callable of the dict `meta()` (constexprs and named arguments)."""
    if type(grid) is tuple:  # the common cases first: a tuple of in-range Python ints
        n = len(grid)
        if n == 1:
            a = grid[0]
            if type(a) is int and 0 < a <= _GRID_MAX:
                return (a, 1, 1)
        elif n == 3:
            a, b, c = grid
            if type(a) is int and type(b) is int and type(c) is int and 0 < a <= _GRID_MAX \
                    and 0 < b <= _GRID_MAX and 0 < c <= _GRID_MAX:
                return grid
    if callable(grid):
        try:
            grid = grid(meta() if meta is not None else {})
        except Exception as e:
            raise TypeError(f"grid: the grid callable raised {type(e).__name__}: {e}") from e
    if isinstance(grid, (int, np.integer)) and not isinstance(grid, (bool, np.bool_)):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)):
        raise TypeError(f"grid: expected a tuple of 1 to 3 positive ints (or a callable "
                        f"returning one), got {type(grid).__name__}")
    if not 1 <= len(grid) <= 3:
        raise ValueError(f"grid: expected 1 to 3 dimensions, got {len(grid)}: {tuple(grid)}")
    out = []
    for i, g in enumerate(grid):
        if isinstance(g, (bool, np.bool_)):
            raise TypeError(f"grid[{i}]: expected an int, got bool")
        try:
            g = operator.index(g)
        except TypeError:
            raise TypeError(f"grid[{i}]: expected an int, got {type(g).__name__}") from None
        if g <= 0:
            raise ValueError(f"grid[{i}]: must be positive, got {g}")
        if g > _GRID_MAX:
            raise ValueError(f"grid[{i}]: {g} exceeds the int32 program id range")
        out.append(g)
    while len(out) < 3:
        out.append(1)
    return tuple(out)
