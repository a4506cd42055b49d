"""The names a kernel calls (`kd.load`, `kd.sum`, ...): their Python signatures, and nothing else.

Each builtin is a plain function whose last keyword argument `_builder` is supplied by the frontend
when it compiles a call; the function forwards to the rule of the same name in `semantic.py`.
Called on the host (no builder), a builtin raises a clear error, except `cdiv` on Python ints,
the dtypes, `constexpr` and `static_range`, which are meaningful outside a kernel too.
"""

from __future__ import annotations

import builtins as _py
import functools
from collections.abc import Callable
from typing import Any

from ..ir.types import (  # noqa: F401  (re-exported dtypes)
    ALL_DTYPES,
    DType,
    PointerType,
    bfloat16,
    float16,
    float32,
    float64,
    int1,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from . import semantic, semantic_shape

pointer_type = PointerType


class constexpr:
    """A compile-time constant: the annotation of a constexpr kernel parameter
    (`BLOCK: kd.constexpr`) and a wrapper for module-level constants (`N = kd.constexpr(5)`),
    which kernels see as their plain value."""

    def __init__(self, value: Any):
        self.value = value.value if isinstance(value, constexpr) else value

    def __repr__(self) -> str:
        return f"constexpr({self.value!r})"

    def __index__(self) -> int:
        return self.value.__index__()

    def __eq__(self, other: object) -> bool:
        other = other.value if isinstance(other, constexpr) else other
        return self.value == other

    def __hash__(self) -> int:
        return hash(self.value)


class static_range:
    """`for i in kd.static_range(lo, hi, step)`: a loop unrolled at compile time; `i` is a Python
    int in each copy of the body. Bounds must be compile-time ints."""

    def __init__(self, start: int, end: int | None = None, step: int = 1):
        if end is None:
            start, end = 0, start
        self.start, self.end, self.step = int(start), int(end), int(step)

    def __iter__(self):
        return iter(_py.range(self.start, self.end, self.step))

    def __repr__(self) -> str:
        return f"static_range({self.start}, {self.end}, {self.step})"


def builtin(fn: Callable) -> Callable:
    """Mark `fn` as a kernel builtin: the frontend calls it with `_builder`; on the host it
    raises, since it has no meaning outside a kernel."""

    @functools.wraps(fn)
    def wrapper(*args, _builder=None, **kwargs):
        if _builder is None:
            raise RuntimeError(
                f"kd.{fn.__name__} can only be called inside a @kd.jit kernel")
        return fn(*args, _builder=_builder, **kwargs)

    wrapper.__kdsl_builtin__ = True
    return wrapper


# ------------------------------------------------------------------------------ indexing


@builtin
def program_id(axis, _builder=None):
    """Index of this program instance along grid `axis` (0, 1 or 2): an int32 scalar."""
    return semantic.program_id(_builder, axis)


@builtin
def num_programs(axis, _builder=None):
    """Number of program instances along grid `axis`: an int32 scalar."""
    return semantic.num_programs(_builder, axis)


@builtin
def arange(start, end, _builder=None):
    """int32 tile [start, start+1, ..., end-1]; bounds are compile-time ints."""
    return semantic.arange(_builder, start, end)


def cdiv(a, b, _builder=None):
    """Ceiling division (a + b - 1) // b, on Python ints (host or kernel) or integer values."""
    if _builder is None or not (semantic.is_value(a) or semantic.is_value(b)):
        return -(-a // b)
    return semantic.cdiv(_builder, a, b)


cdiv.__kdsl_builtin__ = True


# ------------------------------------------------------------------------------ creation


@builtin
def zeros(shape, dtype, _builder=None):
    """Tile of `shape` (compile-time) filled with 0 of `dtype`."""
    return semantic.full(_builder, shape, 0, dtype)


@builtin
def zeros_like(x, _builder=None):
    """Tile of zeros with the shape and dtype of `x`."""
    return semantic.full(_builder, x.shape, 0, x.type.elem)


@builtin
def full(shape, value, dtype, _builder=None):
    """Tile of `shape` filled with `value` (a constant or a runtime scalar) cast to `dtype`."""
    return semantic.full(_builder, shape, value, dtype)


# -------------------------------------------------------------------------------- memory


@builtin
def load(pointer, mask=None, other=None, cache_modifier="", eviction_policy="",
         volatile=False, _builder=None):
    """Elements at `pointer`; where `mask` is false, `other` (default 0)."""
    return semantic.load(_builder, pointer, mask, other, volatile)


@builtin
def store(pointer, value, mask=None, cache_modifier="", eviction_policy="", _builder=None):
    """Write `value` (broadcast and cast to the pointee type) at `pointer` where `mask`."""
    return semantic.store(_builder, pointer, value, mask)


@builtin
def atomic_add(pointer, val, mask=None, sem=None, scope=None, _builder=None):
    """Atomically add `val` at `pointer` where `mask`; returns the old values."""
    return semantic.atomic_add(_builder, pointer, val, mask)


# ---------------------------------------------------------------------------------- math


def _unary(name: str, doc: str) -> Callable:
    def fn(x, _builder=None):
        return semantic.unary(_builder, name, x)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return builtin(fn)


exp = _unary("exp", "e ** x")
exp2 = _unary("exp2", "2 ** x")
log = _unary("log", "natural logarithm")
log2 = _unary("log2", "base-2 logarithm")
sqrt = _unary("sqrt", "square root")
rsqrt = _unary("rsqrt", "1 / sqrt(x)")
abs = _unary("abs", "absolute value (ints stay ints)")
sin = _unary("sin", "sine")
cos = _unary("cos", "cosine")
tanh = _unary("tanh", "hyperbolic tangent")
erf = _unary("erf", "error function")
sigmoid = _unary("sigmoid", "1 / (1 + exp(-x))")
floor = _unary("floor", "round toward -inf")
ceil = _unary("ceil", "round toward +inf")


@builtin
def maximum(x, y, propagate_nan=None, _builder=None):
    """Elementwise maximum, after promotion and broadcasting."""
    return semantic.binary(_builder, "maximum", x, y)


@builtin
def minimum(x, y, propagate_nan=None, _builder=None):
    """Elementwise minimum, after promotion and broadcasting."""
    return semantic.binary(_builder, "minimum", x, y)


@builtin
def clamp(x, min, max, propagate_nan=None, _builder=None):
    """minimum(maximum(x, min), max)."""
    return semantic.binary(_builder, "minimum", semantic.binary(_builder, "maximum", x, min), max)


@builtin
def where(condition, x, y, _builder=None):
    """x where condition else y (all three broadcast; x and y promoted)."""
    return semantic.where(_builder, condition, x, y)


@builtin
def fma(x, y, z, _builder=None):
    """x * y + z with a single rounding (float)."""
    return semantic.fma(_builder, x, y, z)


# ---------------------------------------------------------------------------- reductions


def _reduction(name: str, doc: str) -> Callable:
    def fn(input, axis=None, keep_dims=False, _builder=None):
        return semantic.reduce(_builder, name, input, axis, keep_dims)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return builtin(fn)


sum = _reduction("sum", "sum along `axis` (None: all); small ints accumulate in int32, "
                        "float16/bfloat16 give float32")
max = _reduction("max", "maximum along `axis` (None: all)")
min = _reduction("min", "minimum along `axis` (None: all)")
argmax = _reduction("argmax", "int32 index of the first maximum along `axis`")
argmin = _reduction("argmin", "int32 index of the first minimum along `axis`")


@builtin
def reduce(input, axis, combine_fn, keep_dims=False, _builder=None):
    """Combine the elements along `axis` (None: all) with `combine_fn`, a @kd.jit function of
    two scalars returning one scalar of the same type. It must be associative and commutative:
    the order and association of the combinations are unspecified. The frontend passes
    `combine_fn` as a Python callable that inlines the function (see `__kdsl_fn_params__`)."""
    return semantic.reduce_custom(_builder, input, axis, combine_fn, keep_dims)


# Parameters of a builtin that take a kdsl function: the frontend replaces the function by a
# callable that inlines it at the builder's insertion point.
reduce.__kdsl_fn_params__ = ("combine_fn",)


# -------------------------------------------------------------------------------- matrix


@builtin
def dot(a, b, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
        out_dtype=None, _builder=None):
    """Matrix product a [M,K] @ b [K,N] (+ acc [M,N]); accumulates in float32 (int32 for int8)."""
    if input_precision is None:
        input_precision = "tf32" if allow_tf32 else "ieee"
    return semantic.dot(_builder, a, b, acc, input_precision, out_dtype)


@builtin
def trans(input, *dims, _builder=None):
    """Transpose (2-D: swap the dims; else permute by `dims`)."""
    return semantic.trans(_builder, input, dims)


@builtin
def permute(input, *dims, _builder=None):
    """Permute the dims of `input`."""
    return semantic.trans(_builder, input, dims)


# --------------------------------------------------------------------------------- hints


@builtin
def multiple_of(input, values, _builder=None):
    """Promise that the values of `input` are multiples of `values`."""
    return semantic.hint(_builder, input, "multiple_of", values)


@builtin
def max_contiguous(input, values, _builder=None):
    """Promise that the first `values` elements of `input` are contiguous."""
    return semantic.hint(_builder, input, "max_contiguous", values)


# --------------------------------------------------------------------------------- shape


@builtin
def expand_dims(input, axis, _builder=None):
    """Insert dims of size 1 at `axis` (an int or a tuple of ints)."""
    return semantic.expand_dims(_builder, input, axis)


@builtin
def reshape(input, *shape, can_reorder=False, _builder=None):
    """Same elements in row-major order with a new (compile-time) shape."""
    return semantic.reshape(_builder, input, shape)


view = reshape


@builtin
def broadcast_to(input, *shape, _builder=None):
    """Expand dims of size 1 (and missing leading dims) to `shape`."""
    return semantic.broadcast_to(_builder, input, shape)


@builtin
def broadcast(input, other, _builder=None):
    """Both operands broadcast to their common shape."""
    return semantic.broadcast_pair(_builder, input, other)


@builtin
def cast(input, dtype, bitcast=False, fp_downcast_rounding=None, _builder=None):
    """`input` converted to `dtype` (bitcast=True: same bits, equal width)."""
    return semantic.cast(_builder, input, dtype, bitcast)


# ------------------------------------------------------------------ moving elements (shape)


@builtin
def split(a, _builder=None):
    """The two halves (a[..., 0], a[..., 1]) of a tile whose last dim has size 2."""
    return semantic_shape.split(_builder, a)


@builtin
def join(a, b, _builder=None):
    """a and b side by side along a new last dim of size 2 (two scalars: a tile of [2])."""
    return semantic_shape.join(_builder, a, b)


@builtin
def interleave(a, b, _builder=None):
    """a and b alternating along the last dim: join(a, b) with its last two dims merged."""
    return semantic_shape.interleave(_builder, a, b)


@builtin
def cat(input, other, can_reorder=False, _builder=None):
    """input then other along dim 0 (tiles of the same shape); the order is always kept."""
    return semantic_shape.cat(_builder, input, other, can_reorder)


@builtin
def flip(x, dim=None, _builder=None):
    """x reversed along `dim` (default: the last dim)."""
    return semantic_shape.flip(_builder, x, dim)


@builtin
def ravel(x, can_reorder=False, _builder=None):
    """The elements of x as a 1-D tile (row-major order, whatever `can_reorder` says)."""
    return semantic_shape.ravel(_builder, x)


@builtin
def gather(src, index, axis, _builder=None):
    """src read along `axis` at the coordinates of the integer tile `index` (same rank)."""
    return semantic_shape.gather(_builder, src, index, axis)


@builtin
def histogram(input, num_bins, mask=None, _builder=None):
    """int32 counts of the values 0 .. num_bins-1 of a 1-D integer tile (where `mask`)."""
    return semantic_shape.histogram(_builder, input, num_bins, mask)


# --------------------------------------------------------------------------- compile time


@builtin
def static_assert(cond, msg="", _builder=None):
    """Fail compilation unless the compile-time `cond` holds."""
    return semantic.static_assert(_builder, cond, msg)


# Tile methods: `x.to(...)`, `x.sum(axis)`, ... call the builtin with `x` first.
TILE_METHODS: dict[str, Callable] = {
    "to": cast, "sum": sum, "reduce": reduce, "max": max, "min": min, "argmax": argmax, "argmin": argmin,
    "reshape": reshape, "view": view, "broadcast_to": broadcast_to, "trans": trans,
    "permute": permute, "expand_dims": expand_dims, "exp": exp, "exp2": exp2, "log": log,
    "log2": log2, "sqrt": sqrt, "rsqrt": rsqrt, "abs": abs, "sin": sin, "cos": cos,
    "tanh": tanh, "erf": erf, "sigmoid": sigmoid, "floor": floor, "ceil": ceil,
    "split": split, "flip": flip, "ravel": ravel, "gather": gather, "histogram": histogram,
}

DTYPE_NAMES = tuple(d.name for d in ALL_DTYPES)
