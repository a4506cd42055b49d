"""The names a kernel calls (`kd.load`, `kd.sum`, ...): their Python signatures, and nothing else.

Each builtin is a plain function whose last keyword argument `_builder` is supplied by the frontend
when it compiles a call; the function forwards to the rule of the same name in `semantic.py`.
Called on the host (no builder), a builtin raises a clear error, except `cdiv` on Python ints,
the dtypes, `constexpr` and `static_range`, which are meaningful outside a kernel too.
"""

from __future__ import annotations

import builtins as _py
import enum
import functools
from collections.abc import Callable
from typing import Any

from ..ir.types import (  # noqa: F401  (re-exported dtypes)
    ALL_DTYPES,
    DType,
    PointerType,
    bfloat16,
    float8e4b8,
    float8e4b15,
    float8e4nv,
    float8e5,
    float8e5b16,
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
from . import block_ptr, scan_reduce, semantic, semantic_shape, type_objects

pointer_type = type_objects.pointer_type
pi32_t = PointerType(int32)  # Triton's `tl.pi32_t`
#: the most elements a tile may have (Triton's name; kdsl's limit)
TRITON_MAX_TENSOR_NUMEL = semantic.MAX_TILE_NUMEL
slice = _py.slice  # Triton's `tl.slice` of subscripts: Python's slice inside kernels


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

    @property
    def type(self) -> type_objects.constexpr_type:
        return type_objects.constexpr_type(self.value)


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


class range:
    """`for i in kd.range(lo, hi, step, num_stages=..., ...)`: a runtime loop like `range`,
    whose options are recorded as attributes of the Tile IR `for` op (those left at their
    default are not). `num_stages` is the software-pipelining depth a GPU backend may use;
    the others are hints (Triton's meanings) that no backend needs for correctness."""

    OPTIONS = ("num_stages", "loop_unroll_factor", "disallow_acc_multi_buffer", "flatten",
               "warp_specialize", "disable_licm")

    def __init__(self, arg1, arg2=None, step=None, num_stages=None, loop_unroll_factor=None,
                 disallow_acc_multi_buffer=False, flatten=False, warp_specialize=False,
                 disable_licm=False):
        self.start, self.end = (0, arg1) if arg2 is None else (arg1, arg2)
        self.step = 1 if step is None else step
        opts = {"num_stages": num_stages, "loop_unroll_factor": loop_unroll_factor,
                "disallow_acc_multi_buffer": disallow_acc_multi_buffer, "flatten": flatten,
                "warp_specialize": warp_specialize, "disable_licm": disable_licm}
        self.attrs = {}
        for k, v in opts.items():
            v = v.value if isinstance(v, constexpr) else v
            if k in ("num_stages", "loop_unroll_factor"):
                if v is not None:
                    if isinstance(v, bool) or not isinstance(v, int):
                        raise semantic.error(f"kd.range {k} must be a compile-time int, got "
                                             f"{semantic.describe(v)}")
                    self.attrs[k] = v
            elif v:
                if semantic.is_value(v):
                    raise semantic.error(f"kd.range {k} must be a compile-time bool")
                self.attrs[k] = True

    def __iter__(self):
        raise RuntimeError("kd.range can only be iterated inside a @kd.jit kernel")

    def __repr__(self) -> str:
        return f"range({self.start}, {self.end}, {self.step}, {self.attrs})"


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


@type_objects.compile_time
def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (Triton's `triton.next_power_of_2`): on the host, and in
    kernels on compile-time ints."""
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


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


_LOAD_CACHE = ("", ".ca", ".cg", ".cv")
_STORE_CACHE = ("", ".wb", ".cg", ".cs", ".wt")
_EVICTION = ("", "evict_first", "evict_last", "evict_normal")


def _memory_options(what: str, cache: Any, caches: tuple, eviction: Any) -> None:
    """Cache and eviction options are validated as in Triton and otherwise ignored: they
    change no result, and no kdsl backend has a use for them."""
    if cache not in caches:
        raise semantic.error(f"{what}: cache_modifier must be one of {caches}, got {cache!r}")
    if eviction not in _EVICTION:
        raise semantic.error(f"{what}: eviction_policy must be one of {_EVICTION}, got "
                             f"{eviction!r}")


@builtin
def load(pointer, mask=None, other=None, boundary_check=(), padding_option="",
         cache_modifier="", eviction_policy="", volatile=False, _builder=None):
    """Elements at `pointer`; where `mask` is false, `other` (default 0). On a block pointer
    (kd.make_block_ptr) `boundary_check` lists the dims to mask and `padding_option` ("",
    "zero", "nan") what masked elements read."""
    _memory_options("load", cache_modifier, _LOAD_CACHE, eviction_policy)
    if block_ptr.is_block_ptr(pointer):
        if mask is not None or other is not None:
            raise semantic.error("load: `mask` and `other` cannot be given with a block "
                                 "pointer (use boundary_check)")
        return block_ptr.load(_builder, pointer, boundary_check, padding_option, volatile)
    if boundary_check or padding_option:
        raise semantic.error("load: `boundary_check` and `padding_option` need a block pointer "
                             "(kd.make_block_ptr); a tile of pointers uses `mask` and `other`")
    return semantic.load(_builder, pointer, mask, other, volatile)


@builtin
def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy="",
          _builder=None):
    """Write `value` (broadcast and cast to the pointee type) at `pointer` where `mask`; on a
    block pointer, where the dims in `boundary_check` are in bounds."""
    _memory_options("store", cache_modifier, _STORE_CACHE, eviction_policy)
    if block_ptr.is_block_ptr(pointer):
        if mask is not None:
            raise semantic.error("store: `mask` cannot be given with a block pointer (use "
                                 "boundary_check)")
        return block_ptr.store(_builder, pointer, value, boundary_check)
    if boundary_check:
        raise semantic.error("store: `boundary_check` needs a block pointer "
                             "(kd.make_block_ptr); a tile of pointers uses `mask`")
    return semantic.store(_builder, pointer, value, mask)


@builtin
def prefetch(pointer, mask=None, _builder=None):
    """A hint that the elements at `pointer` will be read soon: on CPU targets each cache line
    they lie on is fetched into the cache ahead (`prefetcht1` on x86), so that a kernel can
    ask for the data of its next step (another program's row) while it computes this one.
    No semantics: nothing is read, no address can fault (masked-off and out-of-bounds lanes
    included; `mask` is accepted for symmetry with `load` and only narrows the hint), and
    targets without prefetch drop it.  Not in Triton: a kernel that calls it runs
    unchanged on every kdsl backend."""
    return semantic.prefetch(_builder, pointer, mask)


def _atomic(op: str, doc: str) -> Callable:
    def fn(pointer, val, mask=None, sem=None, scope=None, _builder=None):
        return semantic.atomic_rmw(_builder, op, pointer, val, mask, sem, scope)

    fn.__name__ = fn.__qualname__ = f"atomic_{op}"
    fn.__doc__ = (f"Atomically {doc} at `pointer` where `mask`; returns the old values. `sem`: "
                  "'acq_rel' (default), 'acquire', 'release', 'relaxed'; `scope`: 'gpu' "
                  "(default), 'cta', 'sys'.")
    return builtin(fn)


atomic_add = _atomic("add", "add `val`")
atomic_max = _atomic("max", "store the maximum of `val` and the old value")
atomic_min = _atomic("min", "store the minimum of `val` and the old value")
atomic_and = _atomic("and", "and `val` into the old bits")
atomic_or = _atomic("or", "or `val` into the old bits")
atomic_xor = _atomic("xor", "xor `val` into the old bits")
atomic_xchg = _atomic("xchg", "store `val`")


@builtin
def atomic_cas(pointer, cmp, val, sem=None, scope=None, _builder=None):
    """Atomically store `val` at `pointer` where the old value equals `cmp` (bit for bit);
    returns the old values."""
    return semantic.atomic_cas(_builder, pointer, cmp, val, sem, scope)


@builtin
def make_block_ptr(base, shape, strides, offsets, block_shape, order, _builder=None):
    """A `block_shape` window at `offsets` into the tensor of `shape` and `strides` at `base`
    (all in elements; `order` is accepted as a layout hint)."""
    return block_ptr.make_block_ptr(_builder, base, shape, strides, offsets, block_shape, order)


@builtin
def advance(base, offsets, _builder=None):
    """The block pointer `base` moved by `offsets` (one per dim); `base` is unchanged."""
    return block_ptr.advance(_builder, base, offsets)


@builtin
def make_tensor_descriptor(base, shape, strides, block_shape, padding_option="zero",
                           _builder=None):
    """A descriptor of the tensor of `shape` and `strides` at `base`, for loading and storing
    `block_shape` tiles (out-of-bounds elements read as 0, or NaN, and are not written)."""
    return block_ptr.make_tensor_descriptor(_builder, base, shape, strides, block_shape,
                                            padding_option)


@builtin
def load_tensor_descriptor(desc, offsets, _builder=None):
    """`desc.load(offsets)`: the block at `offsets`."""
    return block_ptr.descriptor_load(_builder, desc, offsets)


@builtin
def store_tensor_descriptor(desc, offsets, value, _builder=None):
    """`desc.store(offsets, value)`: write the in-bounds part of the block at `offsets`."""
    return block_ptr.descriptor_store(_builder, desc, offsets, value)


def _descriptor_atomic(op: str) -> Callable:
    def fn(desc, offsets, value, _builder=None):
        atomic = globals().get(f"atomic_{op}")
        if atomic is None:
            raise semantic.error(f"tensor descriptor atomic_{op} is not available")
        p, v, m = block_ptr.descriptor_window(_builder, desc, offsets, value,
                                              f"tensor descriptor atomic_{op}")
        atomic(p, v, mask=m, _builder=_builder)

    fn.__name__ = fn.__qualname__ = f"descriptor_atomic_{op}"
    return builtin(fn)


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


class PropagateNan(enum.Enum):
    """Triton's `tl.PropagateNan`: what `maximum`/`minimum`/`clamp` give for a NaN operand.
    `ALL`: NaN (kdsl's default, as NumPy and Triton's interpreter); `NONE`: the other operand
    (IEEE maxNum, Triton's default on GPUs). Only an explicit `NONE` selects it in kdsl."""

    NONE = 0x0000
    ALL = 0xFFFF


def _extreme(b, op: str, x, y, propagate_nan):
    if propagate_nan is None or propagate_nan == PropagateNan.ALL:
        return semantic.binary(b, op, x, y)
    if propagate_nan != PropagateNan.NONE:
        raise semantic.error(f"propagate_nan must be kd.PropagateNan.NONE or ALL, got "
                             f"{propagate_nan!r}")
    return semantic.extreme_ignoring_nan(b, op, x, y)


@builtin
def maximum(x, y, propagate_nan=None, _builder=None):
    """Elementwise maximum, after promotion and broadcasting (NaN propagates unless
    `propagate_nan=kd.PropagateNan.NONE`)."""
    return _extreme(_builder, "maximum", x, y, propagate_nan)


@builtin
def minimum(x, y, propagate_nan=None, _builder=None):
    """Elementwise minimum, after promotion and broadcasting (see `maximum` for NaN)."""
    return _extreme(_builder, "minimum", x, y, propagate_nan)


@builtin
def clamp(x, min, max, propagate_nan=None, _builder=None):
    """minimum(maximum(x, min), max)."""
    return _extreme(_builder, "minimum", _extreme(_builder, "maximum", x, min, propagate_nan),
                    max, propagate_nan)


def _arith(name: str, op: str) -> Callable:
    def fn(x, y, sanitize_overflow=True, _builder=None):
        return semantic.binary(_builder, op, x, y)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"`x {'+-*'['add sub mul'.split().index(name)]} y` (Triton's functional "
                  "form; `sanitize_overflow` is accepted: integers wrap)")
    return builtin(fn)


add = _arith("add", "add")
sub = _arith("sub", "sub")
mul = _arith("mul", "mul")


@builtin
def logical_and(x, y, _builder=None):
    """Element-wise `and` of the truth values of x and y (int1)."""
    return semantic.logical(_builder, "and", x, y)


@builtin
def logical_or(x, y, _builder=None):
    """Element-wise `or` of the truth values of x and y (int1)."""
    return semantic.logical(_builder, "or", x, y)


@builtin
def item(x, _builder=None):
    """The one element of a one-element tile, as a scalar (`x.item()`)."""
    return semantic.item(_builder, x)


@builtin
def condition(arg1, disable_licm=False, _builder=None):
    """`while kd.condition(c, disable_licm=...)`: the loop condition `c` (the compiler hint is
    accepted; kdsl does not hoist code out of loops)."""
    return arg1


@builtin
def where(condition, x, y, _builder=None):
    """x where condition else y (all three broadcast; x and y promoted)."""
    return semantic.where(_builder, condition, x, y)


@builtin
def fma(x, y, z, _builder=None):
    """x * y + z with a single rounding (float)."""
    return semantic.fma(_builder, x, y, z)


# ---------------------------------------------------------------------------- reductions


@builtin
def sum(input, axis=None, keep_dims=False, dtype=None, _builder=None):
    """Sum along `axis` (None: all). Without `dtype`, small ints accumulate in int32 and
    float16/bfloat16 give float32; with it, the input is cast to `dtype` and summed in it."""
    return scan_reduce.sum(_builder, input, axis, keep_dims, dtype)


@builtin
def max(input, axis=None, return_indices=False, return_indices_tie_break_left=True,
        keep_dims=False, _builder=None):
    """Maximum along `axis` (None: all); types narrower than 32 bits widen (as Triton). With
    `return_indices`, (values, int32 index of the first maximum)."""
    return scan_reduce.max_min(_builder, "max", input, axis, return_indices,
                               return_indices_tie_break_left, keep_dims)


@builtin
def min(input, axis=None, return_indices=False, return_indices_tie_break_left=True,
        keep_dims=False, _builder=None):
    """Minimum along `axis` (None: all); see `max`."""
    return scan_reduce.max_min(_builder, "min", input, axis, return_indices,
                               return_indices_tie_break_left, keep_dims)


@builtin
def argmax(input, axis=None, tie_break_left=True, keep_dims=False, _builder=None):
    """int32 index of the first maximum along `axis` (None: of the flattened tile)."""
    return scan_reduce.arg_max_min(_builder, "max", input, axis, tie_break_left, keep_dims)


@builtin
def argmin(input, axis=None, tie_break_left=True, keep_dims=False, _builder=None):
    """int32 index of the first minimum along `axis` (None: of the flattened tile)."""
    return scan_reduce.arg_max_min(_builder, "min", input, axis, tie_break_left, keep_dims)


@builtin
def xor_sum(input, axis=None, keep_dims=False, _builder=None):
    """Bitwise xor of the (integer) elements along `axis` (None: all)."""
    return scan_reduce.xor_sum(_builder, input, axis, keep_dims)


@builtin
def reduce_or(input, axis, keep_dims=False, _builder=None):
    """Bitwise or of the (integer) elements along `axis` (None: all)."""
    return scan_reduce.reduce_or(_builder, input, axis, keep_dims)


@builtin
def softmax(x, dim=None, keep_dims=False, ieee_rounding=False, _builder=None):
    """exp(x - max(x, dim)) / sum(..., dim), `dim` None meaning 0 (Triton's definition)."""
    return scan_reduce.softmax(_builder, x, dim, keep_dims, ieee_rounding)


@builtin
def reduce(input, axis, combine_fn, keep_dims=False, _builder=None):
    """Combine the elements along `axis` (None: all) with `combine_fn`, a @kd.jit function of
    two scalars returning one scalar of the same type; `input` may be a tuple of n tiles of one
    shape, combined by a function of 2n scalars returning n (the result is then a tuple). It
    must be associative and commutative: the order and association of the combinations are
    unspecified. The frontend passes `combine_fn` as a Python callable that inlines the
    function (see `__kdsl_fn_params__`)."""
    return semantic.reduce_custom(_builder, input, axis, combine_fn, keep_dims)


# Parameters of a builtin that take a kdsl function: the frontend replaces the function by a
# callable that inlines it at the builder's insertion point.
reduce.__kdsl_fn_params__ = ("combine_fn",)


# ---------------------------------------------------------------------------------- scans


@builtin
def associative_scan(input, axis, combine_fn, reverse=False, _builder=None):
    """Inclusive scan along `axis` with `combine_fn` (a @kd.jit function as for `reduce`, which
    must be associative; its arguments are (earlier, later)); `input` a tile or a tuple of
    tiles. `reverse` scans from the end."""
    return scan_reduce.associative_scan(_builder, input, axis, combine_fn, reverse)


associative_scan.__kdsl_fn_params__ = ("combine_fn",)


@builtin
def cumsum(input, axis=0, reverse=False, dtype=None, _builder=None):
    """Inclusive cumulative sum along `axis`; narrow ints widen to 32 bits (unsigned and int1 to
    uint32), bfloat16 to float32; `dtype` casts the input first."""
    return scan_reduce.cumsum(_builder, input, axis, reverse, dtype)


@builtin
def cumprod(input, axis=0, reverse=False, _builder=None):
    """Inclusive cumulative product along `axis` (bfloat16 computes in float32)."""
    return scan_reduce.cumprod(_builder, input, axis, reverse)


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
def cast(input, dtype, fp_downcast_rounding=None, bitcast=False, _builder=None):
    """`input` converted to `dtype` (bitcast=True: same bits, equal width). A float to a
    narrower float rounds to nearest even, or toward zero with fp_downcast_rounding="rtz"."""
    return semantic.cast(_builder, input, dtype, bitcast, fp_downcast_rounding)


@builtin
def max_constancy(input, values, _builder=None):
    """Promise that runs of `values` consecutive elements of `input` are equal."""
    return semantic.hint(_builder, input, "max_constancy", values)


@builtin
def assume(cond, _builder=None):
    """A promise that `cond` holds, which the compiler may use; it generates no code."""
    if not (semantic.is_value(cond) or semantic.is_scalar_const(cond)) or semantic.is_ptr(cond):
        raise semantic.error(f"assume needs a condition, got {semantic.describe(cond)}")


@builtin
def inline_asm_elementwise(asm, constraints, args, dtype, is_pure, pack, _builder=None):
    """Not supported: kernels compile for CPUs and GPUs alike, and inline PTX has no meaning
    on the CPU, OpenCL or the interpreter."""
    raise semantic.error("kd.inline_asm_elementwise is not supported: inline assembly has no "
                         "meaning on the kdsl backends (interp, llvm, opencl, cuda); write the "
                         "operation with kd builtins")


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


# ------------------------------------------------------------------------------ debugging


@builtin
def debug_barrier(_builder=None):
    """Wait until every thread of the program reaches this point (no-op with one thread)."""
    return semantic.debug_barrier(_builder)


@builtin
def static_print(*values, sep=" ", end="\n", file=None, flush=False, _builder=None):
    """Print at compile time, like Python's print (a runtime value prints as its type)."""
    return semantic.static_print(values, sep, end, file, flush)


@builtin
def device_print(prefix, *args, hex=False, _builder=None):
    """Print `prefix` and each element of each value at run time, one line per element:
    `pid (x, y, z) idx (i, j) prefix: value` (Python's `print` in a kernel is the same)."""
    return semantic.device_print(_builder, prefix, args, hex)


@builtin
def device_assert(cond, msg="", mask=None, _builder=None):
    """With debug on (`debug=True`, KDSL_DEBUG=1), raise kd.DeviceAssertionError at launch
    where `cond` is false (and `mask` true); with debug off it generates nothing."""
    return semantic.device_assert(_builder, cond, msg, mask)


# Tile methods: `x.to(...)`, `x.sum(axis)`, ... call the builtin with `x` first.
TILE_METHODS: dict[str, Callable] = {
    "to": cast, "sum": sum, "reduce": reduce, "max": max, "min": min, "argmax": argmax, "argmin": argmin,
    "xor_sum": xor_sum, "reduce_or": reduce_or, "softmax": softmax, "cumsum": cumsum,
    "cumprod": cumprod, "associative_scan": associative_scan,
    "reshape": reshape, "view": view, "broadcast_to": broadcast_to, "trans": trans,
    "permute": permute, "expand_dims": expand_dims, "exp": exp, "exp2": exp2, "log": log,
    "log2": log2, "sqrt": sqrt, "rsqrt": rsqrt, "abs": abs, "sin": sin, "cos": cos,
    "tanh": tanh, "erf": erf, "sigmoid": sigmoid, "floor": floor, "ceil": ceil,
    # on pointers, as in Triton: `ptr.atomic_add(val)`
    "atomic_add": atomic_add, "atomic_max": atomic_max, "atomic_min": atomic_min,
    "atomic_and": atomic_and, "atomic_or": atomic_or, "atomic_xor": atomic_xor,
    "atomic_xchg": atomic_xchg, "atomic_cas": atomic_cas,
    "split": split, "flip": flip, "ravel": ravel, "gather": gather, "histogram": histogram,
}

DTYPE_NAMES = _py.tuple(d.name for d in ALL_DTYPES)

# Triton's other tensor methods that are kd builtins (`x.cast(...)`, `x.store(...)`, ...).
TILE_METHODS.update({"cast": cast, "store": store, "advance": advance, "atomic_add": atomic_add,
                     "cdiv": cdiv, "max_constancy": max_constancy, "item": item,
                     "logical_and": logical_and, "logical_or": logical_or})
# Triton's tensor methods resolved by name when kdsl has the builtin (`x.cumsum()`, ...).
TRITON_TENSOR_METHODS = frozenset((
    "broadcast_to", "trans", "permute", "split", "view", "item", "reshape", "expand_dims",
    "cast", "store", "advance", "atomic_cas", "atomic_xchg", "atomic_add", "atomic_max",
    "atomic_min", "atomic_and", "atomic_or", "atomic_xor", "exp", "exp2", "log", "log2", "cos",
    "sin", "sqrt", "sqrt_rn", "rsqrt", "abs", "erf", "floor", "ceil", "reduce",
    "associative_scan", "histogram", "gather", "cdiv", "sigmoid", "softmax", "ravel", "max",
    "argmax", "min", "argmin", "sum", "xor_sum", "reduce_or", "cumsum", "cumprod", "sort",
    "flip"))

block_ptr.BlockPointer.kd_methods = {"advance": advance, "store": store}
block_ptr.tensor_descriptor.kd_methods = {
    "load": load_tensor_descriptor, "store": store_tensor_descriptor,
    **{f"atomic_{op}": _descriptor_atomic(op) for op in ("add", "min", "max", "and", "or",
                                                          "xor")}}
