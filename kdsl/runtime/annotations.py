"""Type annotations of runtime kernel parameters, as in Triton.

    @kd.jit
    def k(x_ptr, scale: kd.float64, n: "i64", out_ptr: "*fp16", BLOCK: kd.constexpr): ...

A runtime parameter annotated with a dtype (a `kd` dtype, or a string naming one in kdsl's or
Triton's spelling: "fp64", "float64", "kd.float64", "tl.float64", "i64", "u32", "bf16", ...,
and the Python types int -> int32, float -> float32, bool -> int1 as Triton reads them) has that
type whatever value it is given: the value is converted, and is an error when it does not fit
(an integer out of range, a float beyond float32's range for a float32 parameter).  A pointer
annotation ("*fp16", "*bf16", `kd.pointer_type(kd.float16)`) reads an array of the same element
size as that type.  As in Triton, float and bool annotated parameters are not specialised on
their value; integer ones keep the `% 16` specialisation.  Other annotations are ignored.
"""

from __future__ import annotations

import inspect
import math
import operator
from typing import Any

import numpy as np

from kdsl.ir import types as T

# Triton's short names (triton/_utils.py type canonicalisation) and C spellings -> kdsl names
_ALIASES = {
    "i1": "int1", "u1": "int1", "bool": "int1", "uint1": "int1",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "int": "int32",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32",
    "float": "float32", "fp64": "float64", "double": "float64",
}
_PREFIXES = ("triton.language.", "kdsl.language.", "language.", "kdsl.", "tl.", "kd.")
_F32_MAX = float(np.finfo(np.float32).max)
_F16_MAX = 65504.0
_BF16_MAX = float.fromhex("0x1.fep127")


def _dtype_name(text: str) -> str | None:
    text = text.strip()
    for p in _PREFIXES:
        if text.startswith(p):
            text = text[len(p):]
            break
    text = text.removesuffix("_t")
    name = _ALIASES.get(text, text)
    return name if name in T.BY_NAME else None


def annotation_type(ann: Any) -> T.DType | T.PointerType | None:
    """The kdsl type an annotation names, or None (no annotation, constexpr, or another
    annotation, which has no effect)."""
    if ann is None or ann is inspect.Parameter.empty:
        return None
    if isinstance(ann, (T.DType, T.PointerType)):
        return ann
    if ann is int:
        return T.int32
    if ann is float:
        return T.float32
    if ann is bool:
        return T.int1
    if not isinstance(ann, str):
        return None
    text = ann.strip().strip("'\"").strip()
    if text.startswith("const "):  # Triton's read-only pointers ("const *fp32" = "*kfp32")
        text = text[len("const "):].strip()
    if text.startswith("*"):
        text = text[1:]
        if text.startswith("k") and _dtype_name(text[1:]):
            text = text[1:]
        name = _dtype_name(text)
        return T.PointerType(T.BY_NAME[name]) if name else None
    if text.endswith("*"):
        name = _dtype_name(text[:-1])
        return T.PointerType(T.BY_NAME[name]) if name else None
    name = _dtype_name(text)
    return T.BY_NAME[name] if name else None


def _int_range(t: T.DType) -> tuple[int, int]:
    if t.is_bool:
        return 0, 1
    if t.is_signed:
        return -(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1
    return 0, (1 << t.bits) - 1


def convert_scalar(name: str, v: Any, t: T.DType) -> Any:
    """`v` as a Python value of the annotated scalar type `t` (ValueError/TypeError naming the
    argument when it does not convert)."""
    if not isinstance(v, (int, float, np.generic)):
        raise TypeError(f"argument {name!r}: the parameter is annotated {t.name}, a scalar; "
                        f"got {type(v).__name__}")
    if t.is_bool:
        return bool(v)
    if t.is_float:
        try:
            f = float(v)
        except OverflowError:
            raise ValueError(f"argument {name!r}: {v} overflows the parameter's type "
                             f"{t.name}") from None
        except (TypeError, ValueError):
            raise TypeError(f"argument {name!r}: expected a number for a {t.name} parameter, "
                            f"got {type(v).__name__}") from None
        limit = {"float32": _F32_MAX, "float16": _F16_MAX, "bfloat16": _BF16_MAX}.get(t.name)
        if limit is not None and math.isfinite(f) and abs(f) > limit:
            raise ValueError(f"argument {name!r}: {f} overflows the parameter's type {t.name}")
        return f
    try:
        i = operator.index(v)
    except TypeError:
        if isinstance(v, float) and v.is_integer():
            i = int(v)
        else:
            raise TypeError(f"argument {name!r}: expected an integer for a {t.name} parameter, "
                            f"got {v!r}") from None
    lo, hi = _int_range(t)
    if not lo <= i <= hi:
        raise ValueError(f"argument {name!r}: {i} does not fit in the parameter's type "
                         f"{t.name} [{lo}, {hi}]")
    return int(i)


__all__ = ["annotation_type", "convert_scalar"]
