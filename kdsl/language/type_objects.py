"""Triton's type surface as kernels see it: `kd.tensor`, `kd.dtype`, `kd.block_type`,
`kd.pointer_type`, `kd.void`, `kd.tuple`, `kd.constexpr_type`, `kd.const`, and the Triton view of
a dtype's attributes (`is_fp16()`, `primitive_bitwidth`, `name == "fp16"`, ...).

kdsl's own types are `kdsl.ir.types.DType` / `PointerType` / `TileType`; this module does not
replace them. The classes here are what a Triton kernel names: annotations
(`def f(x: kd.tensor, dt: kd.dtype)`), `isinstance` targets (answered at compile time), and a
few constructors (`kd.pointer_type(kd.float32)`, `kd.block_type(kd.float32, [16])`). Inside a
kernel the frontend reads a dtype's attributes through `attr` below, which gives Triton's
meaning (e.g. `is_int()` includes int1, `name` is `"fp32"`); kdsl's own attributes of the same
objects (`is_float`, `bits`, `kind`) keep working too.
"""

from __future__ import annotations

import builtins as _py
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..ir.tile import Value
from ..ir.types import BY_NAME, DType, PointerType

# Objects of these kinds may be called inside a kernel on compile-time arguments (the
# frontend calls them directly): dtype predicates, type constructors, `kd.tuple(...)`.
COMPILE_TIME = "__kdsl_compile_time__"


def compile_time(fn: Callable) -> Callable:
    setattr(fn, COMPILE_TIME, True)
    return fn


# ------------------------------------------------------------------------------- aggregates


class Aggregate:
    """A compile-time structure over runtime values (a block pointer, a tensor descriptor).

    The frontend carries it through loops, branches and helper calls by its *leaves* (plain IR
    values), so control flow never sees anything but Tile IR values. A subclass gives its
    leaves and a static part (compile-time, compared with ==) and rebuilds itself from both."""

    kd_is_tensor = False  # isinstance(x, kd.tensor) (Triton's block pointers are tensors)
    kd_methods: ClassVar[dict[str, Callable]] = {}  # name -> builtin taking it first

    def kd_flatten(self) -> tuple[list[Value], Any]:
        raise NotImplementedError

    @classmethod
    def kd_unflatten(cls, static: Any, leaves: list[Value]) -> Aggregate:
        raise NotImplementedError

    def kd_attr(self, name: str) -> Any:
        raise AttributeError(name)

    @classmethod
    def kd_describe(cls, static: Any) -> str:
        """How a value of this static part reads in an error message."""
        return f"a {cls.__name__}"


# ------------------------------------------------------------------------------ type objects


class _TensorMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, Value) or getattr(type(obj), "kd_is_tensor", False)


class tensor(metaclass=_TensorMeta):
    """A runtime scalar or tile (or a block pointer). Kernels get tensors from builtins; the
    class is an annotation and an `isinstance` target."""

    def __new__(cls, *args: Any, **kwargs: Any):
        raise TypeError("kd.tensor values are created by kernel code, not constructed")


@dataclass(frozen=True)
class block_type:
    """Triton's type of a tile: `element_ty` and a static `shape` (what `x.type` gives for a
    tile inside a kernel)."""

    element_ty: Any
    shape: tuple[int, ...]

    def __init__(self, element_ty: Any, shape: Any):
        shape = tuple(int(s) for s in shape)
        if not shape:
            raise TypeError("0d block_type is forbidden")
        object.__setattr__(self, "element_ty", element_ty)
        object.__setattr__(self, "shape", shape)

    @property
    def scalar(self) -> Any:
        return self.element_ty

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * (self.element_ty.bits // 8)

    @property
    def name(self) -> str:
        return f"<{list(self.shape)}, {triton_name(self.element_ty)}>"

    def is_block(self) -> bool:
        return True

    def is_ptr(self) -> bool:
        return False

    def is_void(self) -> bool:
        return False

    def get_block_shapes(self) -> tuple[int, ...]:
        return self.shape

    def with_element_ty(self, scalar_ty: Any) -> block_type:
        return block_type(scalar_ty, self.shape)

    def __str__(self) -> str:
        return self.name


for _m in ("is_block", "is_ptr", "is_void", "get_block_shapes", "with_element_ty"):
    compile_time(getattr(block_type, _m))
compile_time(block_type)


class _PointerMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, PointerType)


class pointer_type(metaclass=_PointerMeta):
    """`kd.pointer_type(kd.float32)`: the type of a pointer to float32 (a kdsl PointerType);
    Triton's `address_space` and `const` are accepted (global memory only)."""

    def __new__(cls, element_ty: Any, address_space: int = 1, const: bool = False):
        if not isinstance(element_ty, (DType, PointerType, block_type)):
            raise TypeError(f"kd.pointer_type takes one dtype, as in kd.pointer_type(kd.float16), "
                            f"got {element_ty!r}")
        return PointerType(element_ty)


compile_time(pointer_type)


class _VoidType:
    """Triton's `void`: the type of nothing (what `kd.store` returns in Triton)."""

    name = "void"

    def is_void(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "void"


void = _VoidType()


class _DtypeMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, (DType, PointerType, block_type, _VoidType))


class dtype(metaclass=_DtypeMeta):
    """Any element or tile type (`isinstance(kd.float32, kd.dtype)`); `kd.dtype("fp16")`
    (Triton's spelling) or `kd.dtype("float16")` gives that dtype."""

    def __new__(cls, name: Any):
        if isinstance(name, DType):
            return name
        dt = BY_NAME.get(_FROM_TRITON.get(name, name))
        if dt is None:
            if name == "void":
                return void
            raise TypeError(f"unknown dtype {name!r}")
        return dt


compile_time(dtype)


class _TupleMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _py.tuple)


class tuple(metaclass=_TupleMeta):  # Triton's name
    """Triton's `tl.tuple`: a kernel's tuples are Python tuples; `kd.tuple([a, b])` makes one."""

    def __new__(cls, args: Any = (), type: Any = None):
        return _py.tuple(args)


compile_time(tuple)


@dataclass(frozen=True)
class tuple_type:
    """Triton's type of a tuple: the types of its elements."""

    types: _py.tuple

    def __init__(self, types: Any, fields: Any = None):
        object.__setattr__(self, "types", _py.tuple(types))


@dataclass(frozen=True)
class constexpr_type:
    """Triton's type of a compile-time value (`N.type` for a constexpr `N`)."""

    value: Any


compile_time(constexpr_type)


class const:
    """Annotation of a kernel parameter that points to read-only data
    (`def k(x_ptr: kd.const, ...)`): storing through it is a compilation error."""


# ------------------------------------------------------------------------ Triton's dtype view

_TRITON_NAMES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64"}
_FROM_TRITON = {v: k for k, v in _TRITON_NAMES.items()}
_MANTISSA = {"float16": (10, 15), "bfloat16": (7, 127), "float32": (23, 127),
             "float64": (52, 1023)}
_FP8 = ("is_fp8", "is_fp8e4nv", "is_fp8e4b8", "is_fp8e4b15", "is_fp8e5", "is_fp8e5b16")


def triton_name(t: Any) -> str:
    """Triton's spelling of a type: fp32, bf16, int1, pointer<fp16>, ..."""
    if isinstance(t, DType):
        return _TRITON_NAMES.get(t.name, t.name)
    if isinstance(t, PointerType):
        return f"pointer<{triton_name(t.pointee)}>"
    return str(getattr(t, "name", t))


def same_dtype_name(t: Any, s: str) -> bool:
    """`dtype == "fp16"` inside a kernel: true when `s` spells `t` (Triton's or kdsl's name)."""
    return isinstance(t, (DType, PointerType)) and s in (triton_name(t), str(t))


def _predicates(d: DType) -> dict[str, bool]:
    n, k = d.name, d.kind
    out = {f"is_{x}": n == x for x in ("int1", "int8", "int16", "int32", "int64", "uint8",
                                       "uint16", "uint32", "uint64")}
    out.update({"is_fp16": n == "float16", "is_bf16": n == "bfloat16", "is_fp32": n == "float32",
                "is_fp64": n == "float64", "is_floating": k == "f",
                "is_standard_floating": k == "f", "is_int_signed": k == "i",
                # Triton counts int1 among the unsigned integers
                "is_int_unsigned": k in ("u", "b"), "is_int": k in ("i", "u", "b"),
                "is_bool": k == "b", "is_signed": k == "i", "is_void": False,
                "is_block": False, "is_ptr": False, "is_const": False})
    out.update({f: False for f in _FP8})
    return out


def _const_fn(value: Any) -> Callable:
    return compile_time(lambda *a, **k: value)


def _dtype_attr(d: DType, name: str) -> Any:
    preds = _predicates(d)
    if name in preds:
        return _const_fn(preds[name])
    if name == "name":
        return triton_name(d)
    if name == "primitive_bitwidth":
        return d.bits
    if name == "itemsize":
        return d.bits // 8  # Triton: int1 has itemsize 0
    if name == "scalar":
        return d
    if name in ("int_bitwidth", "get_int_max_value", "get_int_min_value") and d.kind != "f":
        lo, hi = ((-(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1) if d.kind == "i"
                  else (0, (1 << d.bits) - 1))
        return {"int_bitwidth": d.bits, "get_int_max_value": _const_fn(hi),
                "get_int_min_value": _const_fn(lo)}[name]
    if name in ("fp_mantissa_width", "exponent_bias") and d.kind == "f":
        return _MANTISSA[d.name][name == "exponent_bias"]
    if name == "with_element_ty":
        return compile_time(lambda t: t)
    if name == "codegen_name":
        return _const_fn(d.name)
    if name == "cache_key_part":
        return triton_name(d)
    return getattr(d, name)


def _pointer_attr(p: PointerType, name: str) -> Any:
    table = {"element_ty": p.pointee, "address_space": 1, "const": False, "scalar": p,
             "name": triton_name(p), "is_ptr": _const_fn(True), "is_const": _const_fn(False),
             "is_block": _const_fn(False), "is_void": _const_fn(False),
             "with_element_ty": compile_time(lambda t: t)}
    if name in table:
        return table[name]
    if name.startswith("is_"):  # every number predicate is false for a pointer
        return _const_fn(False)
    return getattr(p, name)


def attr(obj: Any, name: str) -> Any:
    """Attribute `name` of a compile-time type object as a Triton kernel reads it."""
    if isinstance(obj, DType):
        return _dtype_attr(obj, name)
    if isinstance(obj, PointerType):
        return _pointer_attr(obj, name)
    if isinstance(obj, Aggregate):
        if name in obj.kd_methods:
            return obj.kd_methods[name]  # the frontend binds it to the aggregate
        return obj.kd_attr(name)
    return getattr(obj, name)


@compile_time
def is_dtype(type_str: str) -> bool:
    """Triton's `dtype.is_dtype(name)`."""
    return type_str in _FROM_TRITON or type_str in BY_NAME or type_str in _TRITON_NAMES.values()


dtype.is_dtype = staticmethod(is_dtype)


def kernel_isinstance(x: Any, classes: Any, constexpr_cls: type) -> bool:
    """`isinstance` inside a kernel: the usual answer, except that `kd.constexpr` matches every
    compile-time value (kernels see constexprs as plain Python values)."""
    if not isinstance(classes, _py.tuple):
        classes = (classes,)
    for c in classes:
        if c is constexpr_cls:
            if not isinstance(x, Value) and not isinstance(x, Aggregate):
                return True
        elif isinstance(x, c):
            return True
    return False


__all__ = ["Aggregate", "block_type", "const", "constexpr_type", "dtype", "pointer_type",
           "tensor", "tuple", "tuple_type", "void"]
