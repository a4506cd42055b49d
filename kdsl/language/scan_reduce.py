"""Rules of the scans (`cumsum`, `cumprod`, `associative_scan`) and of Triton's reductions that
are compositions of `reduce` ops (`max`/`min` with indices, `argmax`/`argmin` with a tie
break, `sum(dtype=)`, `xor_sum`, `reduce_or`, `softmax`), as `triton/language/standard.py`
defines them. The general rules (promotion, `reduce`, combine regions) live in `semantic.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..ir.tile import Value
from ..ir.types import DType, bfloat16, float32, int32, uint32
from . import semantic as sem
from .semantic import Operand, error

# ------------------------------------------------------------------------------------ scans


def sum_dtype(dt: DType, dtype: Any = None) -> DType | None:
    """Type a cumulative sum computes in (Triton's `_pick_sum_dtype`): the given `dtype`, else
    int32 for signed ints narrower than 32 bits and uint32 for unsigned ones and int1 (Triton
    counts int1 as unsigned), else None (the input's own type, float16 included)."""
    if dtype is not None:
        return sem._dtype_arg(dtype)
    if dt.bits < 32 and not dt.is_float:
        return int32 if dt.is_signed else uint32
    return None


def _scan_axis(x: Value, axis: Any, what: str) -> int:
    if x.type.is_scalar:
        raise error(f"{what} needs a tile, got a scalar")
    ax = sem._constexpr_int(axis, f"{what} axis")
    if not -x.type.rank <= ax < x.type.rank:
        raise error(f"{what} axis {ax} is out of range for shape {list(x.shape)}")
    return ax % x.type.rank


def _reverse_arg(reverse: Any, what: str) -> bool:
    if sem.is_value(reverse) or not isinstance(reverse, (bool, int)):
        raise error(f"{what}: reverse must be a constexpr bool, got {sem.describe(reverse)}")
    return bool(reverse)


def scan(b, kind: str, x: Operand, axis: Any, reverse: Any = False) -> Value:
    """A built-in inclusive scan (`kind` "sum" or "prod") along `axis`, in x's own type."""
    what = "cumsum" if kind == "sum" else "cumprod"
    x = sem.to_value(b, x)
    if x.type.is_ptr:
        raise error(f"{what} is not defined on pointers")
    ax = _scan_axis(x, axis, what)
    return b.op("scan", [x], x.type, op=kind, axis=ax, reverse=_reverse_arg(reverse, what))


def _promote_bf16(b, x: Operand) -> Value:
    """bfloat16 inputs compute in float32 (Triton's `_promote_bfloat16_to_float32`)."""
    x = sem.to_value(b, x)
    return sem.cast(b, x, float32) if x.type.elem == bfloat16 else x


def cumsum(b, x: Operand, axis: Any = 0, reverse: Any = False, dtype: Any = None) -> Value:
    """Inclusive cumulative sum: bfloat16 becomes float32, then the input is cast to
    `sum_dtype` (narrow ints widen to 32 bits); float16 sums in float16, rounding each step."""
    x = _promote_bf16(b, x)
    if not x.type.is_ptr:
        dt = sum_dtype(x.type.elem, dtype)
        if dt is not None:
            x = sem.cast(b, x, dt)
    return scan(b, "sum", x, axis, reverse)


def cumprod(b, x: Operand, axis: Any = 0, reverse: Any = False) -> Value:
    """Inclusive cumulative product in the input's type (bfloat16 computes in float32)."""
    return scan(b, "prod", _promote_bf16(b, x), axis, reverse)


def associative_scan(b, x: Any, axis: Any, combine: Callable[..., Any],
                     reverse: Any = False) -> Value | tuple[Value, ...]:
    """`kd.associative_scan(x, axis, combine_fn, reverse)`: inclusive scan with a user
    function (`sem.combine_region`); `x` a tile or a tuple of n tiles of one shape scanned
    together by a function of 2n scalars returning n (then the result is a tuple)."""
    xs, is_tuple = sem.combine_inputs(b, x, "associative_scan")
    ax = _scan_axis(xs[0], axis, "associative_scan")
    rev = _reverse_arg(reverse, "associative_scan")
    region = sem.combine_region(b, [v.type.elem for v in xs], combine, "associative_scan")
    rs = b.create("scan", xs, [v.type for v in xs], {"op": "custom", "axis": ax, "reverse": rev},
                  [region]).results
    return tuple(rs) if is_tuple else rs[0]


# ------------------------------------------------------------------------------- reductions


def sum(b, x: Operand, axis: Any = None, keep_dims: bool = False, dtype: Any = None) -> Value:
    """`sum(x, axis, keep_dims, dtype)`: with `dtype`, x is cast to it and summed in it;
    without, the default of `sem.reduce_dtype` (narrow ints and 16-bit floats widen)."""
    if dtype is not None:
        x = sem.cast(b, x, sem._dtype_arg(dtype))
    return sem.reduce(b, "sum", x, axis, keep_dims, dtype)


def max_min(b, op: str, x: Operand, axis: Any = None, return_indices: bool = False,
            tie_break_left: bool = True, keep_dims: bool = False) -> Any:
    """Triton's `max`/`min`. Without indices, inputs narrower than 32 bits are widened first
    (floats to float32, ints and int1 to int32), as Triton does; with `return_indices`, the
    values keep their type (bfloat16 becomes float32 in both cases) and come with the int32
    index of the first extreme. Both propagate NaN (a NaN is the extreme, its first index
    wins). `tie_break_left=False` allows any index among ties: the first is one of them."""
    x = _promote_bf16(b, x)
    if x.type.is_ptr:
        raise error(f"{op} is not defined on pointers")
    if return_indices:
        values = sem.reduce(b, op, x, axis, keep_dims)
        return values, sem.reduce(b, "arg" + op, x, axis, keep_dims)
    elem = x.type.elem
    if elem.bits < 32:
        x = sem.cast(b, x, float32 if elem.is_float else int32)
    return sem.reduce(b, op, x, axis, keep_dims)


def arg_max_min(b, op: str, x: Operand, axis: Any = None, tie_break_left: bool = True,
                keep_dims: bool = False) -> Value:
    """`argmax`/`argmin`: the int32 index of the first extreme along `axis`."""
    return max_min(b, op, x, axis, True, tie_break_left, keep_dims)[1]


def _int_reduce(b, what: str, kind: str, x: Operand, axis: Any, keep_dims: bool) -> Value:
    """A bitwise reduction of integers (int1 included), in their own type."""
    x = sem.to_value(b, x)
    elem = x.type.elem
    if x.type.is_ptr or elem.is_float:
        raise error(f"{what} is only supported for integers, got {elem}")
    return sem.reduce_custom(b, x, axis, lambda p, q: sem.binary(b, kind, p, q), keep_dims)


def xor_sum(b, x: Operand, axis: Any = None, keep_dims: bool = False) -> Value:
    """Bitwise xor of the elements along `axis` (None: all)."""
    return _int_reduce(b, "xor_sum", "xor", x, axis, keep_dims)


def reduce_or(b, x: Operand, axis: Any, keep_dims: bool = False) -> Value:
    """Bitwise or of the elements along `axis` (None: all), as Triton 3.6 defines it."""
    return _int_reduce(b, "reduce_or", "or", x, axis, keep_dims)


def softmax(b, x: Operand, dim: Any = None, keep_dims: bool = False,
            ieee_rounding: bool = False) -> Value:
    """`exp(x - max(x, dim)) / sum(of that, dim)` along `dim` (None: 0), as Triton's
    `standard.softmax`, including its broadcast of the keep_dims=False reductions against x
    (right-aligned). Division is always IEEE, so `ieee_rounding` changes nothing."""
    d = 0 if dim is None else dim
    x = sem.to_value(b, x)
    z = sem.binary(b, "sub", x, max_min(b, "max", x, d, keep_dims=keep_dims))
    num = sem.unary(b, "exp", z)
    return sem.truediv(b, num, sem.reduce(b, "sum", num, d, keep_dims))


__all__ = [
    "arg_max_min", "associative_scan", "cumprod", "cumsum", "max_min",
    "reduce_or", "scan", "softmax", "sum", "sum_dtype", "xor_sum",
]
