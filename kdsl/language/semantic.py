"""Type, promotion, broadcasting and pointer rules of the language, one function per rule.

Every builtin in `core.py` and every operator the frontend meets ends here. Operands are Tile IR
`Value`s or Python scalars (int, float, bool: compile-time constants, weakly typed); results are
`Value`s created through the builder `b` (anything with `op(kind, operands, type, **attrs)`).
A rule that rejects its operands raises `CompilationError` without a location; the frontend adds
the kernel's file and line.
"""

from __future__ import annotations

import builtins as _py
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import CompilationError
from ..ir.atomics import CAS_DTYPES, RMW_DTYPES
from ..ir.tile import (
    BINARY_OPS,
    COMPARE_OPS,
    FLOAT_ONLY_UNARY,
    MEM_SCOPES,
    MEM_SEMANTICS,
    UNARY_OPS,
    Block,
    Value,
)
from ..ir.types import (
    DType,
    PointerType,
    TileType,
    bfloat16,
    float16,
    float32,
    float64,
    int1,
    int8,
    int16,
    int32,
    int64,
    uint64,
)
from . import type_objects

Operand = Any  # Value | int | float | bool

_PY_SCALARS = (bool, int, float)


def error(msg: str) -> CompilationError:
    return CompilationError(msg)


def is_value(x: Any) -> bool:
    return isinstance(x, Value)


def is_scalar_const(x: Any) -> bool:
    return isinstance(x, _PY_SCALARS)


def _check_operand(x: Any) -> None:
    if not (is_value(x) or is_scalar_const(x)):
        raise error(f"a value of type {type(x).__name__} ({x!r}) cannot be used as a tile "
                    "or scalar in a kernel")


def elem(x: Operand) -> DType | PointerType:
    """Element type of a value, or the standalone type of a Python scalar."""
    return x.type.elem if is_value(x) else literal_dtype(x)


def shape(x: Operand) -> tuple[int, ...]:
    return x.type.shape if is_value(x) else ()


def is_ptr(x: Operand) -> bool:
    return is_value(x) and x.type.is_ptr


# ---------------------------------------------------------------------------- promotion


def literal_dtype(x: Any) -> DType:
    """Type of a Python scalar on its own: bool -> int1, int -> int32 (int64 when it does not
    fit, uint64 above that), float -> float32. Kernels mostly index with 32-bit ints, and
    float32 is the type every backend computes fast."""
    _check_operand(x)
    if isinstance(x, bool):
        return int1
    if isinstance(x, int):
        for dt, lo, hi in ((int32, -2**31, 2**31), (int64, -2**63, 2**63), (uint64, 0, 2**64)):
            if lo <= x < hi:
                return dt
        raise error(f"integer constant {x} does not fit in 64 bits")
    return float32


def promote(a: DType, b: DType) -> DType:
    """Result type of a binary op on typed operands (Triton's rules). Floats win over ints and
    the wider float wins; float16 with bfloat16 gives float32 (neither holds the other). Ints
    take the wider width; at equal width a signed/unsigned mix is unsigned (as in C). int1 is
    an int of width 1, so it always yields to the other int.  Two different 8-bit floats give
    float16 (which holds both exactly), an 8-bit float with bfloat16 float32 (Triton's rule)."""
    if a == b:
        return a
    if a.is_float or b.is_float:
        if not (a.is_float and b.is_float):
            return a if a.is_float else b
        if a.is_fp8 and b.is_fp8:
            return float16
        if bfloat16 in (a, b) and (a.is_fp8 or b.is_fp8):
            return float32
        if a.bits == b.bits:
            return float32
        return a if a.bits > b.bits else b
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    return a if a.kind == "u" else b


def weak_dtype(lit: Any, other: DType) -> DType:
    """Type a Python literal takes next to a typed operand: it is weakly typed, so `x * 2`
    keeps x's type. An int literal takes the other's type (int32 next to int1, whose range
    it exceeds); a float literal keeps a float type and turns an int one into float32; a bool
    literal next to int1 stays int1."""
    if isinstance(lit, bool) and other == int1:
        return int1
    if isinstance(lit, float):
        return other if other.is_float else float32
    if other == int1:
        return promote(int1, literal_dtype(lit))
    return other


def binary_dtype(x: Operand, y: Operand) -> DType:
    """Common type of two operands, honouring weakly typed literals on either side."""
    xv, yv = is_value(x), is_value(y)
    if xv and yv:
        return promote(x.type.elem, y.type.elem)
    if xv:
        return weak_dtype(y, x.type.elem)
    if yv:
        return weak_dtype(x, y.type.elem)
    return promote(literal_dtype(x), literal_dtype(y))


# --------------------------------------------------------------------------- broadcasting


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy rule: align on the right; each pair of dims must be equal or contain a 1."""
    out = []
    for i in range(1, _py.max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and 1 not in (da, db):
            raise error(f"shapes {list(a)} and {list(b)} cannot be broadcast together")
        out.append(_py.max(da, db) if 1 in (da, db) else da)
    return tuple(reversed(out))


def to_value(b, x: Operand, dtype: DType | None = None) -> Value:
    """Materialise a Python scalar as a `const` op (of `dtype`, else its literal type); IR
    values pass through unchanged."""
    if is_value(x):
        return x
    dt = dtype or literal_dtype(x)
    return b.op("const", [], TileType((), dt), value=const_value(x, dt))


def const_value(x: Any, dt: DType) -> Any:
    """Python value of constant `x` as held by a `const` attr of type `dt`."""
    if dt.is_float:
        return float(x)
    if dt == int1:
        return bool(x)
    v = int(x)
    if dt.is_int:  # wrap into the type's range, as a C conversion does
        v &= (1 << dt.bits) - 1
        if dt.is_signed and v >= 1 << (dt.bits - 1):
            v -= 1 << dt.bits
    return v


def broadcast_to(b, x: Operand, shp: Sequence[int]) -> Value:
    """`x` expanded to `shp`: scalars are splat; lower ranks are reshaped with leading 1s
    (numpy's left extension), then dims of size 1 are broadcast."""
    shp = _static_shape(shp)
    if not is_value(x):
        return coerce(b, x, literal_dtype(x), shp)
    if x.shape == shp:
        return x
    if broadcast_shapes(x.shape, shp) != shp:
        raise error(f"cannot broadcast shape {list(x.shape)} to {list(shp)}")
    if x.type.is_scalar:
        return b.op("splat", [x], TileType(shp, x.type.elem))
    if len(x.shape) < len(shp):
        ext = (1,) * (len(shp) - len(x.shape)) + x.shape
        x = b.op("reshape", [x], TileType(ext, x.type.elem))
        if ext == shp:
            return x
    return b.op("broadcast", [x], TileType(shp, x.type.elem))


def coerce(b, x: Operand, dt: DType, shp: Sequence[int]) -> Value:
    """`x` of type `dt` and shape `shp`: one `const` op for a Python scalar (no splat of a
    scalar constant), else a cast then a broadcast (casting the smaller value)."""
    if not is_value(x):
        _check_operand(x)
        return b.op("const", [], TileType(tuple(shp), dt), value=const_value(x, dt))
    return broadcast_to(b, cast(b, x, dt), shp)


def broadcast_pair(b, x: Operand, y: Operand) -> tuple[Operand, Operand]:
    """Both operands at their common shape (Python scalars stay scalars only if both are)."""
    if not is_value(x) and not is_value(y):
        return x, y
    shp = broadcast_shapes(shape(x), shape(y))
    return broadcast_to(b, x, shp), broadcast_to(b, y, shp)


# ---------------------------------------------------------------------------------- casts


def cast(b, x: Operand, dtype: Any, bitcast: bool = False,
         fp_downcast_rounding: str | None = None) -> Value:
    """Conversion to `dtype`. To int1 it is `x != 0` (C's truth), not a truncation of bits.
    A bitcast needs equal widths. Casting to the same type is a no-op. A float to a narrower
    float rounds to nearest even ("rtne", the default) or toward zero ("rtz"); the rounding
    mode is only accepted for such conversions (as in Triton). Pointers convert to and from
    64-bit integers and to other pointers (`pointer_cast`, with or without `bitcast=True`,
    as in Triton)."""
    if isinstance(dtype, PointerType) or is_ptr(x):
        return pointer_cast(b, x, dtype)
    dtype = _dtype_arg(dtype)
    if fp_downcast_rounding is not None and isinstance(x, float):
        x = to_value(b, x, float32)  # a literal is a float32 to round from, as in Triton
    x = to_value(b, x, None if is_value(x) else weak_dtype(x, dtype))
    src = x.type.elem
    if fp_downcast_rounding is not None and not bitcast:
        if fp_downcast_rounding not in ("rtne", "rtz"):
            raise error(f"fp_downcast_rounding must be 'rtne' or 'rtz', got "
                        f"{fp_downcast_rounding!r}")
        if not (src.is_float and dtype.is_float and dtype.bits < src.bits):
            raise error(f"fp_downcast_rounding is only for casts to a narrower float, not "
                        f"{src} to {dtype}")
        if fp_downcast_rounding == "rtz":
            return _cast_toward_zero(b, x, dtype)
    if src == dtype:
        return x
    if bitcast:
        if src.bits != dtype.bits:
            raise error(f"bitcast needs equal widths: {src} ({src.bits} bits) to {dtype} "
                        f"({dtype.bits} bits)")
        return b.op("bitcast", [x], x.type.with_elem(dtype))
    if dtype == int1:
        return compare(b, "ne", x, 0)
    return b.op("cast", [x], x.type.with_elem(dtype))


_BITS_INT = {16: int16, 32: int32, 64: int64}


def _cast_toward_zero(b, x: Value, dtype: DType) -> Value:
    """Float narrowing rounded toward zero, from the round-to-nearest-even result: where that
    result is farther from zero than `x` (it rounded away, possibly to infinity), step its bit
    pattern one toward zero, which is the next representable magnitude below (down to the
    largest finite value). NaN and infinities compare false and are kept. Exact on every
    backend since it only uses casts, compares and integer ops of the narrow type's bits."""
    r = b.op("cast", [x], x.type.with_elem(dtype))
    back = b.op("cast", [r], x.type)  # exact: the narrow type is a subset
    away = compare(b, "gt", unary(b, "abs", back), unary(b, "abs", x))
    ity = x.type.with_elem(_BITS_INT[dtype.bits])
    bits = b.op("bitcast", [r], ity)
    less = b.op("bitcast", [binary(b, "sub", bits, 1)], r.type)
    return b.op("where", [away, less, r], r.type)


def pointer_cast(b, x: Operand, dtype: Any) -> Value:
    """`int.to(pointer_type(T))` is `int_to_ptr` (the integer is an address: of process memory
    on the CPU backends, of device memory on CUDA), `ptr.to(int64)` (or uint64) `ptr_to_int`,
    `ptr.to(int1)` `ptr != 0`, and `ptr.to(pointer_type(U))` a bitcast (same address, elements
    of U). Only 64-bit integers hold addresses, as Triton's int_to_ptr requires."""
    if not isinstance(dtype, (DType, PointerType)):
        raise error(f"expected a dtype (kd.float32, kd.pointer_type(kd.int8), ...), got {dtype!r}")
    x = to_value(b, x, int64 if not is_value(x) else None)
    src = x.type.elem
    if src == dtype:
        return x
    if isinstance(src, PointerType) and isinstance(dtype, PointerType):
        return b.op("bitcast", [x], x.type.with_elem(dtype))
    if isinstance(src, PointerType):
        if dtype == int1:
            return compare(b, "ne", b.op("ptr_to_int", [x], x.type.with_elem(int64)), 0)
        if dtype in (int64, uint64):
            return b.op("ptr_to_int", [x], x.type.with_elem(dtype))
        raise error(f"a pointer converts to int64, uint64, int1 or another pointer type, not "
                    f"{dtype}")
    if src in (int64, uint64):
        return b.op("int_to_ptr", [x], x.type.with_elem(dtype))
    hint = " (cast it to int64 first)" if src.is_int or src == int1 else ""
    raise error(f"only a 64-bit integer (int64 or uint64) converts to a pointer, got "
                f"{src}{hint}")


def _dtype_arg(dtype: Any) -> DType:
    if not isinstance(dtype, DType):
        raise error(f"expected a dtype (kd.float32, kd.int32, ...), got {dtype!r}")
    return dtype


def to_int1(b, x: Operand) -> Value:
    """Truth value of a scalar or tile as int1 (non-zero is true)."""
    if is_ptr(x):
        raise error("the truth value of a pointer is not defined")
    x = to_value(b, x)
    return x if x.type.elem == int1 else cast(b, x, int1)


# ------------------------------------------------------------------------ binary operators

_INT_ONLY = {"and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}


def binary(b, op: str, x: Operand, y: Operand) -> Value:
    """Arithmetic `op` (an IR binary kind) on promoted, broadcast operands. Pointer `+`/`-`
    become `addptr`; `/` is true division; `**` computes in float."""
    _check_operand(x)
    _check_operand(y)
    if op in ("add", "sub") and (is_ptr(x) or is_ptr(y)):
        return pointer_arith(b, op, x, y)
    if is_ptr(x) or is_ptr(y):
        raise error(f"operator {op!r} is not defined on pointers (only + and - an integer)")
    if op == "div":
        return truediv(b, x, y)
    dt = binary_dtype(x, y)
    if op in _INT_ONLY and dt.is_float:
        raise error(f"operator {_INT_ONLY[op]} needs integer operands, got {dt}")
    if op == "pow" and not dt.is_float:
        # pow is a float function on every backend; int ** int computes in float32.
        dt = float32
    x, y = _coerce(b, x, y, dt)
    return b.op(op, [x, y], x.type)


def _coerce(b, x: Operand, y: Operand, dt: DType) -> tuple[Value, Value]:
    shp = broadcast_shapes(shape(x), shape(y))
    return coerce(b, x, dt, shp), coerce(b, y, dt, shp)


def truediv(b, x: Operand, y: Operand) -> Value:
    """`/` always gives a float (as in Python and Triton): int / int is float32."""
    dt = binary_dtype(x, y)
    if not dt.is_float:
        dt = float32
    x, y = _coerce(b, x, y, dt)
    return b.op("div", [x, y], x.type)


def pointer_arith(b, op: str, x: Operand, y: Operand) -> Value:
    """ptr + int, int + ptr, ptr - int: offsets count elements and must be integers; a scalar
    pointer is splat to the offsets' shape."""
    if is_ptr(y):
        if op == "sub":
            raise error("int - pointer is not defined")
        x, y = y, x
    if is_ptr(y):
        raise error("cannot add two pointers")
    off_dt = elem(y)
    if not (isinstance(off_dt, DType) and off_dt.is_int or off_dt == int1):
        raise error(f"pointer offsets must be integers, got {off_dt}")
    if op == "sub":
        y = neg(b, y)
    ptr, off = broadcast_pair(b, x, to_value(b, y))
    return b.op("addptr", [ptr, off], ptr.type)


def compare(b, op: str, x: Operand, y: Operand) -> Value:
    """Comparisons promote like arithmetic and give int1."""
    assert op in COMPARE_OPS
    if is_ptr(x) or is_ptr(y):
        raise error("pointers cannot be compared")
    x, y = _coerce(b, x, y, binary_dtype(x, y))
    return b.op(op, [x, y], x.type.with_elem(int1))


def logical(b, op: str, x: Operand, y: Operand) -> Value:
    """`and`/`or` of runtime values: both sides as int1 (non-zero is true), combined element
    by element after broadcasting, as Triton does for tiles (Python's short-circuit has no
    meaning once the left side is a runtime value: both sides are evaluated)."""
    for v in (x, y):
        _check_operand(v)
    xv, yv = broadcast_pair(b, to_int1(b, x), to_int1(b, y))
    return b.op(op, [xv, yv], xv.type)


def extreme_ignoring_nan(b, op: str, x: Operand, y: Operand) -> Value:
    """`maximum`/`minimum` with `PropagateNan.NONE` (IEEE maxNum/minNum): a NaN operand gives
    the other one (NaN only when both are). Integers have no NaN: the plain op."""
    r = binary(b, op, x, y)
    if not r.type.elem.is_float:
        return r
    xv, yv = (coerce(b, v, r.type.elem, r.shape) for v in (x, y))
    x_nan, y_nan = compare(b, "ne", xv, xv), compare(b, "ne", yv, yv)
    return where(b, x_nan, yv, where(b, y_nan, xv, r))


def item(b, x: Operand) -> Value:
    """The scalar of a one-element tile (`x.item()`)."""
    x = to_value(b, x)
    if x.type.numel != 1:
        raise error(f"item() needs a tile of one element, got shape {list(x.shape)}")
    return x if x.type.is_scalar else b.op("reshape", [x], TileType((), x.type.elem))


def logical_not(b, x: Operand) -> Value:
    """`not x` on a runtime scalar or tile: int1, element by element."""
    x = to_int1(b, x)
    return b.op("not", [x], x.type)


# ------------------------------------------------------------------------- unary operators


def neg(b, x: Operand) -> Value:
    x = to_value(b, x)
    if x.type.is_ptr or x.type.elem == int1:
        raise error(f"unary - is not defined on {x.type.elem}")
    return b.op("neg", [x], x.type)


def invert(b, x: Operand) -> Value:
    """`~x`: bitwise not of an int (logical not of int1)."""
    x = to_value(b, x)
    if not isinstance(x.type.elem, DType) or x.type.elem.is_float:
        raise error(f"~ needs an integer or int1 operand, got {x.type.elem}")
    return b.op("not", [x], x.type)


def unary(b, op: str, x: Operand) -> Value:
    """Math functions. The float-only ones (exp, sqrt, ...) cast ints to float32 first, since
    an integer result would be meaningless; `abs` keeps ints."""
    _check_operand(x)
    x = to_value(b, x, float32 if op in FLOAT_ONLY_UNARY and not is_value(x) else None)
    if x.type.is_ptr:
        raise error(f"{op} is not defined on pointers")
    if op in FLOAT_ONLY_UNARY and not x.type.elem.is_float:
        x = cast(b, x, float32)
    if op == "abs" and x.type.elem.kind in ("u", "b"):
        return x  # already non-negative
    return b.op(op, [x], x.type)


def where(b, cond: Operand, x: Operand, y: Operand) -> Value:
    """`x if cond else y` per element: cond becomes int1; all three broadcast; x and y promote."""
    dt = binary_dtype(x, y)
    shp = broadcast_shapes(broadcast_shapes(shape(cond), shape(x)), shape(y))
    c = broadcast_to(b, to_int1(b, cond), shp)
    xv, yv = (coerce(b, v, dt, shp) for v in (x, y))
    return b.op("where", [c, xv, yv], xv.type)


def fma(b, x: Operand, y: Operand, z: Operand) -> Value:
    """x * y + z rounded once; operands promote together, ints compute in float32."""
    dt = binary_dtype(binary_dtype(x, y), z) if is_value(z) else binary_dtype(x, y)
    if not dt.is_float:
        dt = float32
    shp = broadcast_shapes(broadcast_shapes(shape(x), shape(y)), shape(z))
    vals = [coerce(b, v, dt, shp) for v in (x, y, z)]
    return b.op("fma", vals, vals[0].type)


def cdiv(b, x: Operand, y: Operand) -> Value:
    """(x + y - 1) // y on integers."""
    if elem(x).is_float or elem(y).is_float:
        raise error("cdiv needs integer operands")
    return binary(b, "floordiv", binary(b, "sub", binary(b, "add", x, y), 1), y)


# -------------------------------------------------------------------------- control flow


def condition(b, c: Operand, what: str) -> Value:
    """Condition of a runtime `if`/`while`: a scalar (a tile's truth is ambiguous; kd.where
    selects per element), as int1."""
    if shape(c):
        raise error(f"{what} condition must be a scalar, got a tile of shape {list(shape(c))}; "
                    "use kd.where for tiles")
    return to_int1(b, c)


def loop_bounds(b, lo: Operand, hi: Operand, step: Operand) -> tuple[Value, Value, Value]:
    """Bounds of a runtime `range` loop: integer scalars, all of the induction variable's type,
    int32 unless a bound is int64 (so that the common case indexes with 32-bit ints)."""
    for v in (lo, hi, step):
        dt = elem(v) if is_value(v) or is_scalar_const(v) else None
        if not isinstance(dt, DType) or not (dt.is_int or dt == int1) or shape(v):
            raise error(f"range bounds must be integer scalars, got {describe(v)}")
    if step == 0:
        raise error("range step must not be zero")
    iv = int64 if any(elem(v) == int64 for v in (lo, hi, step)) else int32
    return tuple(cast(b, to_value(b, v, iv), iv) for v in (lo, hi, step))


# ------------------------------------------------------------------------------ indexing


def describe(x: Any) -> str:
    """How an operand reads in an error message."""
    if is_value(x):
        return f"a runtime value of type {x.type}"
    return repr(x)


def _constexpr_int(x: Any, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise error(f"{what} must be a constexpr int, got {describe(x)}")
    return x


# A tile lives in one program's registers (on the CPU: its stack). Anything near 2**31 elements
# would overflow the int32 element index of the lowering long before it fit; 2**22 elements is far
# above any useful tile and keeps every index computation in range.
MAX_TILE_NUMEL = 1 << 22


def _check_numel(shp: tuple[int, ...]) -> tuple[int, ...]:
    n = 1
    for d in shp:
        n *= d
    if n > MAX_TILE_NUMEL:
        raise error(f"tile of shape {list(shp)} has {n} elements; at most {MAX_TILE_NUMEL} "
                    f"are allowed per tile")
    return shp


def _static_shape(shp: Any) -> tuple[int, ...]:
    """Tile shapes are compile-time: Python ints (literals, constexprs, folded expressions)."""
    if isinstance(shp, (int, Value)):
        shp = (shp,)
    if len(shp) == 1 and isinstance(shp[0], (tuple, list)):
        shp = shp[0]
    out = []
    for d in shp:
        if isinstance(d, bool) or not isinstance(d, int):
            raise error(f"tile shape must be a constexpr (got {describe(d)} in the shape)")
        if d < 1:
            raise error(f"tile dims must be positive, got shape {list(shp)}")
        out.append(d)
    return _check_numel(tuple(out))


def program_id(b, axis: Any) -> Value:
    """Grid coordinate of this program instance; the grid has at most 3 axes."""
    axis = _constexpr_int(axis, "program_id axis")
    if axis not in (0, 1, 2):
        raise error(f"program_id axis must be 0, 1 or 2, got {axis}")
    return b.op("program_id", [], TileType((), int32), axis=axis)


def num_programs(b, axis: Any) -> Value:
    axis = _constexpr_int(axis, "num_programs axis")
    if axis not in (0, 1, 2):
        raise error(f"num_programs axis must be 0, 1 or 2, got {axis}")
    return b.op("num_programs", [], TileType((), int32), axis=axis)


def arange(b, start: Any, end: Any) -> Value:
    """int32 tile [start, end): the bounds fix the tile's shape, so they are compile-time."""
    for v in (start, end):
        if isinstance(v, bool) or not isinstance(v, int):
            raise error(f"tile shape must be a constexpr: arange bounds must be compile-time "
                        f"ints, got {describe(v)}")
    if end <= start:
        raise error(f"arange needs end > start, got arange({start}, {end})")
    _check_numel((end - start,))
    return b.op("iota", [], TileType((end - start,), int32), axis=0, start=start)


def full(b, shp: Any, value: Operand, dtype: Any) -> Value:
    """A tile filled with a constant (one `const` op) or with a runtime scalar (cast + splat)."""
    shp, dtype = _static_shape(shp), _dtype_arg(dtype)
    if is_value(value):
        if value.shape:
            raise error(f"full needs a scalar value, got a tile of shape {list(value.shape)}")
        return broadcast_to(b, cast(b, value, dtype), shp)
    _check_operand(value)
    return b.op("const", [], TileType(shp, dtype), value=const_value(value, dtype))


# -------------------------------------------------------------------------------- memory


def _pointer_arg(ptr: Any, what: str) -> Value:
    if not is_ptr(ptr):
        raise error(f"{what} needs a pointer (an array argument plus offsets), got "
                    f"{ptr.type if is_value(ptr) else repr(ptr)}")
    return ptr


def _mask_arg(b, mask: Operand, shp: tuple[int, ...]) -> Value:
    """A mask is int1 (a comparison or combination of comparisons) broadcast to the shape."""
    if elem(mask) != int1:
        raise error(f"mask must be int1 (e.g. offs < n), got {elem(mask)}")
    return broadcast_to(b, mask, shp)


def load(b, ptr: Operand, mask: Operand = None, other: Operand = None,
         volatile: bool = False) -> Value:
    """Pointer, mask and other broadcast to one shape. With a mask, masked-off lanes read
    `other`, 0 of the pointee type by default, so a masked load always has 3 operands."""
    ptr = _pointer_arg(ptr, "load")
    if mask is None and other is not None:
        raise error("load: `other` needs a `mask`")
    attrs = {"volatile": True} if volatile else {}
    pointee = ptr.type.elem.pointee
    if mask is None:
        return b.op("load", [ptr], TileType(ptr.shape, pointee), **attrs)
    shp = broadcast_shapes(ptr.shape, shape(mask))
    if other is not None:
        shp = broadcast_shapes(shp, shape(other))
    ptr = broadcast_to(b, ptr, shp)
    m = _mask_arg(b, mask, shp)
    other = 0 if other is None else other
    o = coerce(b, other, pointee, shp)
    return b.op("load", [ptr, m, o], TileType(shp, pointee), **attrs)


def _store_operands(b, what: str, ptr: Operand, value: Operand, mask: Operand) -> list[Value]:
    """Pointer, value and mask at one shape; the value cast to the pointee type."""
    ptr = _pointer_arg(ptr, what)
    _check_operand(value)
    shp = broadcast_shapes(ptr.shape, shape(value))
    if mask is not None:
        shp = broadcast_shapes(shp, shape(mask))
    ptr = broadcast_to(b, ptr, shp)
    ops = [ptr, coerce(b, value, ptr.type.elem.pointee, shp)]
    if mask is not None:
        ops.append(_mask_arg(b, mask, shp))
    return ops


def store(b, ptr: Operand, value: Operand, mask: Operand = None) -> None:
    b.op("store", _store_operands(b, "store", ptr, value, mask), None)


def prefetch(b, ptr: Operand, mask: Operand = None) -> None:
    """A hint op: the pointer (and mask) at one shape; no value, nothing read."""
    ptr = _pointer_arg(ptr, "prefetch")
    shp = ptr.shape if mask is None else broadcast_shapes(ptr.shape, shape(mask))
    ops = [broadcast_to(b, ptr, shp)]
    if mask is not None:
        ops.append(_mask_arg(b, mask, shp))
    b.op("prefetch", ops, None)


def _atomic_attrs(what: str, sem: Any, scope: Any) -> dict[str, str]:
    """Memory semantics and scope of an atomic: Triton's names, defaults acq_rel and gpu.
    Backends emit code at least as strong as asked (docs/language.md)."""
    sem = MEM_SEMANTICS[0] if sem is None else sem
    scope = MEM_SCOPES[0] if scope is None else scope
    if sem not in MEM_SEMANTICS:
        raise error(f"{what}: sem must be one of {', '.join(map(repr, MEM_SEMANTICS))}, "
                    f"got {sem!r}")
    if scope not in MEM_SCOPES:
        raise error(f"{what}: scope must be one of {', '.join(map(repr, MEM_SCOPES))}, "
                    f"got {scope!r}")
    return {"sem": sem, "scope": scope}


def _atomic_pointee(what: str, ptr: Value, allowed: Sequence[str]) -> None:
    """Triton's atomic type rules: no 8-bit or int1 elements, 16-bit floats only for add and
    compare-and-swap, bit operations on integers only (kdsl/ir/atomics.py)."""
    pointee = ptr.type.elem.pointee
    if pointee.name not in allowed:
        raise error(f"{what} does not support {pointee} elements (it supports "
                    f"{', '.join(allowed)})")


def atomic_rmw(b, op: str, ptr: Operand, value: Operand, mask: Operand = None, sem: Any = None,
               scope: Any = None) -> Value:
    """`atomic_<op>(ptr, value, mask)`: one `atomic_rmw {op}`; returns the old values."""
    what = f"atomic_{op}"
    ops = _store_operands(b, what, ptr, value, mask)
    _atomic_pointee(what, ops[0], RMW_DTYPES[op])
    return b.op("atomic_rmw", ops, ops[1].type, op=op, **_atomic_attrs(what, sem, scope))


def atomic_add(b, ptr: Operand, value: Operand, mask: Operand = None) -> Value:
    return atomic_rmw(b, "add", ptr, value, mask)


def atomic_cas(b, ptr: Operand, cmp: Operand, value: Operand, sem: Any = None,
               scope: Any = None) -> Value:
    """`atomic_cas(ptr, cmp, value)`: pointer, cmp and value broadcast to one shape, cmp and
    value cast to the pointee type; 16-, 32- and 64-bit elements."""
    ptr = _pointer_arg(ptr, "atomic_cas")
    _check_operand(cmp)
    _check_operand(value)
    _atomic_pointee("atomic_cas", ptr, CAS_DTYPES)
    shp = broadcast_shapes(broadcast_shapes(ptr.shape, shape(cmp)), shape(value))
    ptr = broadcast_to(b, ptr, shp)
    pointee = ptr.type.elem.pointee
    ops = [ptr, coerce(b, cmp, pointee, shp), coerce(b, value, pointee, shp)]
    return b.op("atomic_cas", ops, ops[1].type, **_atomic_attrs("atomic_cas", sem, scope))


# ---------------------------------------------------------------------------- reductions

_SUM_PROMOTE_INT_BELOW = 32


def reduce_dtype(op: str, dt: DType) -> DType:
    """Accumulator/result type of a reduction. `sum` of narrow ints accumulates in int32 and
    of float16/bfloat16 in float32 (their own precision loses most of a long sum; the result
    stays float32, as in Triton); `argmax`/`argmin` give int32 indices."""
    if op in ("argmax", "argmin"):
        return int32
    if op == "sum":
        if (dt.is_int or dt == int1) and dt.bits < _SUM_PROMOTE_INT_BELOW:
            return int32
        if dt in (float16, bfloat16) or dt.is_fp8:
            return float32
    return dt


def reduce(b, op: str, x: Operand, axis: Any = None, keep_dims: bool = False,
           dtype: DType | None = None) -> Value:
    """Reduction along `axis` (negative counts from the end); axis=None reduces every axis
    to a scalar (the tile is flattened first). keep_dims leaves a dim of size 1. `dtype`
    (sum's `dtype=`) replaces the default accumulator and result type."""
    x = to_value(b, x)
    if x.type.is_ptr:
        raise error(f"{op} is not defined on pointers")
    if dtype is not None:
        dtype = _dtype_arg(dtype)
    if x.type.is_scalar:
        return cast(b, x, dtype or reduce_dtype(op, x.type.elem)) \
            if op not in ("argmax", "argmin") else to_value(b, 0)
    in_shape = x.shape
    if axis is None:
        if x.type.rank > 1:
            x = b.op("reshape", [x], TileType((x.type.numel,), x.type.elem))
        ax = 0
    else:
        ax = _constexpr_int(axis, f"{op} axis")
        if not -x.type.rank <= ax < x.type.rank:
            raise error(f"{op} axis {ax} is out of range for shape {list(x.shape)}")
        ax %= x.type.rank
    dt = dtype or reduce_dtype(op, x.type.elem)
    if op not in ("argmax", "argmin"):
        x = cast(b, x, dt)
    out_shape = x.shape[:ax] + x.shape[ax + 1:]
    r = b.op("reduce", [x], TileType(out_shape, dt), op=op, axis=ax)
    if keep_dims:
        kept = tuple(1 for _ in in_shape) if axis is None else \
            in_shape[:ax] + (1,) + in_shape[ax + 1:]
        r = b.op("reshape", [r], TileType(kept, dt))
    return r


# Tile IR ops a combine function may contain: scalar arithmetic on its two arguments.
_COMBINE_KINDS = BINARY_OPS | COMPARE_OPS | UNARY_OPS | {"const", "fma", "where", "cast",
                                                          "bitcast", "hint"}


def combine_region(b, elems: Sequence[DType], combine: Callable[..., Any], what: str) -> Block:
    """The region of a `reduce`/`scan` with a user combine function over n inputs of types
    `elems`: block arguments (a_1..a_n, b_1..b_n), scalars of those types; `combine(*args)`
    builds the function's body at the builder's insertion point (the frontend inlines the
    @kd.jit function) and must return n scalars of the inputs' types (a tuple when n > 1),
    which the region yields. Only scalar arithmetic may appear in it."""
    sts = [TileType((), e) for e in elems]
    n = len(sts)
    region = Block()
    if n == 1:
        args = [region.add_arg(sts[0], "a"), region.add_arg(sts[0], "b")]
    else:
        args = [region.add_arg(t, f"a{i}") for i, t in enumerate(sts)]
        args += [region.add_arg(t, f"b{i}") for i, t in enumerate(sts)]
    with b.at_block(region):
        r = combine(*args)
        rs = list(r) if isinstance(r, (tuple, list)) else [r]
        if len(rs) != n:
            want = "one scalar" if n == 1 else f"a tuple of {n} scalars"
            raise error(f"{what}: combine_fn returns {len(rs)} values for {n} input"
                        f"{'s' if n > 1 else ''} (it must return {want})")
        for i, (v, st) in enumerate(zip(rs, sts)):
            if is_scalar_const(v):
                v = rs[i] = to_value(b, v, weak_dtype(v, st.elem))
            if not is_value(v) or v.type != st:
                got = v.type if is_value(v) else type(v).__name__
                which = "" if n == 1 else f" as result {i}"
                raise error(f"{what}: combine_fn must return one {st.elem} scalar{which} (the "
                            f"type of its arguments), got {got}")
        b.create("yield", rs)
    for op in region.ops[:-1]:
        k = op.kind
        if k not in _COMBINE_KINDS or op.regions:
            raise error(f"{what}: combine_fn may only compute on its scalar arguments "
                        f"(found '{k}')")
    return region


def combine_inputs(b, x: Any, what: str) -> tuple[list[Value], bool]:
    """The inputs of a reduce/scan with a combine function: one tile or a tuple of tiles of one
    shape (Triton's `reduce((v, i), ...)`); returns (values, whether a tuple was given)."""
    is_tuple = isinstance(x, (tuple, list))
    xs = [to_value(b, v) for v in (x if is_tuple else [x])]
    if not xs:
        raise error(f"{what} of an empty tuple")
    for v in xs:
        if v.type.is_ptr:
            raise error(f"{what} is not defined on pointers")
    if any(v.shape != xs[0].shape for v in xs):
        raise error(f"{what}: all inputs must have the same shape, got "
                    + ", ".join(str(list(v.shape)) for v in xs))
    return xs, is_tuple


def reduce_custom(b, x: Operand, axis: Any, combine: Callable[..., Any],
                  keep_dims: bool = False) -> Value | tuple[Value, ...]:
    """`kd.reduce(x, axis, combine_fn)`: combine the elements along `axis` (None: all, after
    flattening) with a user function (see `combine_region`). `x` may be a tuple of n tiles of
    one shape, reduced together by a function of 2n scalars returning n: the result is then a
    tuple. The results keep their inputs' element types (no promotion)."""
    xs, is_tuple = combine_inputs(b, x, "reduce")
    if xs[0].type.is_scalar:
        return tuple(xs) if is_tuple else xs[0]  # one element: the combination of itself
    in_shape = xs[0].shape
    if axis is None:
        if len(in_shape) > 1:
            xs = [b.op("reshape", [v], TileType((v.type.numel,), v.type.elem)) for v in xs]
        ax = 0
    else:
        ax = _constexpr_int(axis, "reduce axis")
        if not -len(in_shape) <= ax < len(in_shape):
            raise error(f"reduce axis {ax} is out of range for shape {list(in_shape)}")
        ax %= len(in_shape)
    region = combine_region(b, [v.type.elem for v in xs], combine, "reduce")
    shp = xs[0].shape
    out_shape = shp[:ax] + shp[ax + 1:]
    rs = b.create("reduce", xs, [TileType(out_shape, v.type.elem) for v in xs],
                  {"op": "custom", "axis": ax}, [region]).results
    if keep_dims:
        kept = tuple(1 for _ in in_shape) if axis is None else \
            in_shape[:ax] + (1,) + in_shape[ax + 1:]
        rs = [b.op("reshape", [r], TileType(kept, r.type.elem)) for r in rs]
    return tuple(rs) if is_tuple else rs[0]


# -------------------------------------------------------------------------------- matrix

_DOT_INPUTS = (float16, bfloat16, float32, float64, int8)
_DOT_PRECISIONS = ("ieee", "tf32", "tf32x3")


def dot_acc_dtype(dt: DType) -> DType:
    """Default accumulator: float32 for 16/32-bit floats, float64 for float64, int32 for int8."""
    return {int8: int32, float64: float64}.get(dt, float32)


def dot(b, x: Operand, y: Operand, acc: Operand = None, precision: str = "ieee",
        out_dtype: Any = None) -> Value:
    """x [M,K] @ y [K,N] (+ acc). Inputs are promoted to one type among float16, bfloat16,
    float32, float64 and int8; the accumulator (and result) is acc's type when given, else
    `out_dtype`, else float32 (int32 for int8, float64 for float64). 8-bit float inputs (any
    two formats, as in Triton) are upcast to float16, which holds every value of every format
    exactly: their products are exact and accumulate in float32."""
    if not (is_value(x) and is_value(y)) or x.type.rank != 2 or y.type.rank != 2:
        raise error(f"dot needs two 2-D tiles, got shapes {list(shape(x))} and "
                    f"{list(shape(y))}")
    (m, k), (k2, n) = x.shape, y.shape
    if k != k2:
        raise error(f"dot: inner dimensions differ: a is {list(x.shape)}, b is "
                    f"{list(y.shape)}")
    if precision not in _DOT_PRECISIONS:
        raise error(f"dot input_precision must be one of {_DOT_PRECISIONS}, got {precision!r}")
    dt = promote(x.type.elem, y.type.elem)
    if dt.is_fp8:
        dt = float16
    if dt not in _DOT_INPUTS:
        raise error(f"dot operands must be float16, bfloat16, float32, float64 or int8, "
                    f"got {x.type.elem} and {y.type.elem}")
    x, y = cast(b, x, dt), cast(b, y, dt)
    if acc is None:
        acc_dt = _dtype_arg(out_dtype) if out_dtype is not None else dot_acc_dtype(dt)
        acc = b.op("const", [], TileType((m, n), acc_dt), value=const_value(0, acc_dt))
    else:
        acc = broadcast_to(b, acc, (m, n))
    if acc.type.elem.is_fp8:
        raise error(f"dot accumulator cannot be {acc.type.elem}: accumulate in float32 (or "
                    "float16) and convert the result")
    if acc.type.elem.is_float != dt.is_float:
        raise error(f"dot accumulator {acc.type.elem} does not match inputs {dt}")
    attrs = {"precision": precision}
    return b.op("dot", [x, y, acc], acc.type, **attrs)


def trans(b, x: Operand, dims: Sequence[int] = ()) -> Value:
    """Permutation of dims; with no `dims`, 2-D tiles swap their dims (1-D and scalars are
    returned as they are)."""
    x = to_value(b, x)
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    rank = x.type.rank
    if not dims:
        if rank < 2:
            return x
        dims = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    if sorted(dims) != list(range(rank)):
        raise error(f"trans: {tuple(dims)} is not a permutation of the dims of "
                    f"{list(x.shape)}")
    perm = tuple(dims)
    if perm == tuple(range(rank)):
        return x
    out = tuple(x.shape[p] for p in perm)
    return b.op("trans", [x], TileType(out, x.type.elem), perm=perm)


# --------------------------------------------------------------------------------- shape


def expand_dims(b, x: Operand, axis: Any) -> Value:
    """Insert dims of size 1 (a reshape); axes index the result."""
    x = to_value(b, x)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    rank = x.type.rank + len(axes)
    norm = sorted(_constexpr_int(a, "expand_dims axis") % rank for a in axes)
    out = list(x.shape)
    for a in norm:
        out.insert(a, 1)
    return b.op("reshape", [x], TileType(tuple(out), x.type.elem))


def reshape(b, x: Operand, shp: Any) -> Value:
    """New static shape with the same number of elements (row-major)."""
    x = to_value(b, x)
    shp = _static_shape(shp)
    if TileType(shp, x.type.elem).numel != x.type.numel:
        raise error(f"cannot reshape {list(x.shape)} ({x.type.numel} elements) to {list(shp)}")
    if shp == x.shape:
        return x
    return b.op("reshape", [x], TileType(shp, x.type.elem))


def subscript(b, x: Operand, index: tuple) -> Value:
    """`x[:, None]`, `x[None, :]`, `x[None]`: `None` inserts a dim of size 1, `:` keeps one."""
    x = to_value(b, x)
    out, src = [], iter(x.shape)
    for i in index:
        if i is None:
            out.append(1)
        elif isinstance(i, slice) and i == slice(None):
            out.append(next(src, None))
            if out[-1] is None:
                raise error(f"too many indices for a tile of shape {list(x.shape)}")
        else:
            raise error("tiles can only be indexed with ':' and None (to add dims)")
    out.extend(src)
    return reshape(b, x, tuple(out)) if tuple(out) != x.shape else x


def hint(b, x: Operand, kind: str, values: Any) -> Operand:
    """A promise about `x`'s values for the optimiser; on a Python constant it is moot."""
    if not is_value(x):
        return x
    vals = tuple(values) if isinstance(values, (tuple, list)) else (values,)
    for v in vals:
        _constexpr_int(v, kind)
    attr = vals[0] if len(vals) == 1 else vals
    return b.op("hint", [x], x.type, **{kind: attr})


def static_assert(b, cond: Any, msg: str = "") -> None:
    if is_value(cond):
        raise error("static_assert needs a compile-time condition")
    if not cond:
        raise error(f"static_assert failed: {msg}" if msg else "static_assert failed")


# ------------------------------------------------------------------------------ debugging


def debug_barrier(b) -> None:
    """A barrier of the program's threads (none with one thread)."""
    b.op("barrier", [], None)


def static_print(values: Sequence[Any], sep: str = " ", end: str = "\n", file: Any = None,
                 flush: bool = False) -> None:
    """Python's print at compile time; a runtime value prints as its type."""
    _py.print(*(v.type if is_value(v) else v for v in values), sep=sep, end=end, file=file,
              flush=flush)


def device_print(b, prefix: Any, args: Sequence[Operand], hex: bool = False) -> None:
    """A `print` op of the values (Python scalars become constants), with Triton's spacing of
    the prefix (kdsl/ir/debug_print.py)."""
    from ..ir.debug_print import munge_prefix

    if not isinstance(prefix, str) or not prefix.isascii():
        raise error(f"device_print: the prefix must be an ASCII string, got {prefix!r}")
    vals = []
    for a in args:
        if isinstance(a, str):
            raise error(f"device_print: {a!r} is a string; only the prefix (the first argument) "
                        "may be one (kd.static_print prints compile-time values)")
        _check_operand(a)
        if is_ptr(a):
            raise error("device_print cannot print pointers")
        vals.append(to_value(b, a))
    b.op("print", vals, None, prefix=munge_prefix(prefix, len(vals)), hex=bool(hex))


def device_assert(b, cond: Operand, msg: Any = "", mask: Operand = None) -> None:
    """An `assert` op on `cond | ~mask` (int1); it has effect only when debug is on (the tile
    passes drop it otherwise, kdsl/passes/checks.py)."""
    if not isinstance(msg, str):
        raise error(f"device_assert: the message must be a string, got {msg!r}")
    _check_operand(cond)
    c = to_int1(b, cond)
    if mask is not None:
        _check_operand(mask)
        m = to_int1(b, mask)
        shp = broadcast_shapes(c.shape, m.shape)
        c = binary(b, "or", broadcast_to(b, c, shp), broadcast_to(b, invert(b, m), shp))
    b.op("assert", [c], None, msg=msg)


# ------------------------------------------------------------------------- value attributes


def value_attr(b, x: Value, name: str) -> Any:
    """Attributes of a tile that kernels may read: shape (tuple of ints), dtype, ndim, numel,
    T (transpose)."""
    table = {
        "shape": lambda: tuple(x.shape),
        "dtype": lambda: x.type.elem,
        # Triton's view: a tile's type is a block_type, a scalar's its dtype
        "type": lambda: (type_objects.block_type(x.type.elem, x.shape) if x.shape
                         else x.type.elem),
        "ndim": lambda: x.type.rank,
        "numel": lambda: x.type.numel,
        "T": lambda: trans(b, x),
    }
    if name not in table:
        raise error(f"tiles have no attribute {name!r}")
    return table[name]()


def type_attr(t: Any, name: str) -> Any:
    """Attributes of compile-time objects: Triton's view of dtypes (`ptr.dtype.element_ty`,
    `dt.is_fp16()`, `dt.primitive_bitwidth`, ...; `kdsl/language/type_objects.py`), and
    `.value` / `.type` of a constexpr, which kernels see as its plain value."""
    if name in ("value", "type") and not hasattr(t, name) and \
            (t is None or isinstance(t, (bool, int, float, str, tuple))):
        return t if name == "value" else type_objects.constexpr_type(t)
    return type_objects.attr(t, name)
