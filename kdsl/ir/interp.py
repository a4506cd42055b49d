"""NumPy interpreter of the Tile IR: the executable definition of every op's meaning.

`run(fn, grid, args)` executes each program instance in turn, evaluating every op on whole tiles
with NumPy.  The rules written here are the ones every backend must reproduce (docs/ir.md):

- float16/bfloat16 values are held in float32 and rounded to their type (nearest, ties to even)
  after every op that produces them; loads widen, stores narrow.
- integers wrap; integer `floordiv`/`mod` follow C and define x // 0 == x % 0 == 0.
- a pointer value is a `Ptr(buffer index, int64 element offsets)`.

`evaluate(op, values)` evaluates one memory-free op on given values; the constant folder uses it,
so folding can never disagree with execution.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import OutOfBoundsError
from . import mathops, tile
from .types import DType, PointerType, bfloat16, compute_dtype, float16, float64

# ------------------------------------------------------------------------------ value model


@dataclass(frozen=True)
class Ptr:
    """A pointer tile: the index of the argument buffer and the element offsets (int64)."""

    buf: int
    off: np.ndarray


def _cnp(elem: DType) -> np.dtype:
    """NumPy dtype holding values of `elem` while computing (float32 for float16/bfloat16)."""
    return compute_dtype(elem).np


def round_f16(x: np.ndarray) -> np.ndarray:
    """Round to float16 (nearest even) and hold the result in float32."""
    return np.asarray(x).astype(np.float16).astype(np.float32)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 (or float64) values -> bfloat16 bit patterns (uint16), nearest even, NaN kept NaN."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        x = _f64_to_f32_odd(x)
    # np.ascontiguousarray turns a 0-d array into shape (1,): keep the caller's shape
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).reshape(x.shape)
    # Adding 0x7FFF plus the lowest kept bit rounds to nearest with ties to even; a carry into
    # the exponent correctly produces the next binade or infinity.
    rounded = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    quiet = (u >> np.uint32(16)) | np.uint32(0x40)  # keep sign and payload, force a quiet NaN
    return np.where(nan, quiet, rounded).astype(np.uint16)


def bf16_from_bits(b: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns -> float32 values (exact)."""
    return (np.asarray(b).astype(np.uint32) << np.uint32(16)).view(np.float32)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """Round to bfloat16 (nearest even) and hold the result in float32."""
    return bf16_from_bits(bf16_bits(x))


def _f64_to_f32_odd(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounding to odd, so that a second rounding to a narrower type (bf16)
    gives the correctly rounded result (no double-rounding error)."""
    f = x.astype(np.float32)
    inexact = f.astype(np.float64) != x
    inexact &= np.isfinite(x)
    toward_zero = np.where(np.abs(f.astype(np.float64)) > np.abs(x),
                           np.nextafter(f, np.float32(0)), f)
    bits = toward_zero.view(np.uint32) | np.uint32(1)
    return np.where(inexact, bits.view(np.float32), f)


def _round_to(x: Any, elem: DType) -> np.ndarray:
    """Coerce a computed value to the register form of `elem` (rounding 16-bit floats)."""
    x = np.asarray(x)
    if elem == float16:
        return round_f16(x)
    if elem == bfloat16:
        return round_bf16(x)
    want = _cnp(elem)
    return x if x.dtype == want else x.astype(want)


def to_storage(x: np.ndarray, elem: DType) -> np.ndarray:
    """Register values -> memory representation (bfloat16 as uint16 bits)."""
    if elem == bfloat16:
        return bf16_bits(x)
    return np.asarray(x).astype(elem.np)


def from_storage(x: np.ndarray, elem: DType) -> np.ndarray:
    """Memory representation -> register values (16-bit floats widen to float32)."""
    if elem == bfloat16:
        return bf16_from_bits(x)
    return np.asarray(x).astype(_cnp(elem))


def wrap_int(v: int, elem: DType) -> np.ndarray:
    """A Python integer wrapped into `elem` (two's complement), as a 0-d array."""
    if elem.is_bool:
        return np.asarray(v != 0)
    v = int(v) % (1 << elem.bits)
    if elem.is_signed and v >= 1 << (elem.bits - 1):
        v -= 1 << elem.bits
    return np.asarray(v, dtype=elem.np)


def scalar_value(a: Any, elem: DType) -> np.ndarray:
    """A Python number (or NumPy scalar) as the register value of a scalar of type `elem`."""
    if elem.is_float:
        return _cast(np.asarray(float(a), dtype=np.float64), float64, elem)
    return wrap_int(int(a), elem)


def _map(v: Any, f: Callable[[np.ndarray], np.ndarray]) -> Any:
    """Apply a shape function to a value, or to a pointer's offsets."""
    return Ptr(v.buf, f(v.off)) if isinstance(v, Ptr) else f(v)


# ------------------------------------------------------------------- integer and float math


def _int_divmod(a: np.ndarray, b: np.ndarray, t: DType) -> tuple[np.ndarray, np.ndarray]:
    """C division: quotient truncated toward zero, remainder with the dividend's sign.
    x / 0 gives 0 and 0; INT_MIN / -1 wraps to INT_MIN (remainder 0). No trap, ever."""
    a, b = np.asarray(a), np.asarray(b)
    zero = b == 0
    if t.is_signed:
        neg1 = b == -1
        safe = np.where(zero | neg1, 1, b).astype(a.dtype)
        q = np.floor_divide(a, safe)
        r = a - q * safe
        fix = (r != 0) & ((a < 0) != (safe < 0))  # floor is one below the truncated quotient
        q = np.where(fix, q + 1, q).astype(a.dtype)
        q = np.where(neg1, np.negative(a), q)  # wraps for INT_MIN
    else:
        safe = np.where(zero, 1, b).astype(a.dtype)
        q = np.floor_divide(a, safe)
    q = np.where(zero, 0, q).astype(a.dtype)
    r = np.where(zero, 0, a - q * b).astype(a.dtype)
    return q, r


def _floordiv(a, b, t: DType):
    return np.floor(np.true_divide(a, b)) if t.is_float else _int_divmod(a, b, t)[0]


def _mod(a, b, t: DType):
    return np.fmod(a, b) if t.is_float else _int_divmod(a, b, t)[1]


def _div(a, b, t: DType):
    # `div` is IEEE division on floats; on integers it is C division like `floordiv`.
    return np.true_divide(a, b) if t.is_float else _int_divmod(a, b, t)[0]


def _shift(left: bool) -> Callable:
    def f(a, b, t: DType):
        a = np.asarray(a)
        if a.dtype == np.bool_:
            return a  # width 1: every amount is 0 modulo the width
        # The amount is taken modulo the bit width, so that no shift is undefined behaviour
        # in C and every backend masks it the same way.
        n = (np.asarray(b).astype(np.int64) & (t.bits - 1)).astype(a.dtype)
        if left:  # shift the unsigned bit pattern so that overflowing bits simply vanish
            u = np.dtype(f"u{a.dtype.itemsize}")
            return np.left_shift(a.astype(u), n.astype(u)).astype(a.dtype)
        return np.right_shift(a, n)  # arithmetic for signed dtypes, logical for unsigned
    return f


def _pow(a, b, t: DType):
    if t.is_float:
        return np.power(a, b)
    # Integer power by squaring, wrapping; a negative exponent gives trunc(1 / a**-b).
    a, b = np.asarray(a), np.asarray(b)
    if t.is_bool:
        return a | (b == 0)
    result = np.ones(np.broadcast(a, b).shape, a.dtype)
    base = np.broadcast_to(a, result.shape).copy()
    e = np.broadcast_to(b, result.shape).astype(np.int64)
    neg = e < 0
    e = np.where(neg, 0, e)
    while np.any(e > 0):
        result = np.where(e & 1, result * base, result)
        base = base * base
        e = e >> 1
    if t.is_signed:
        inv = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0))
        result = np.where(neg, inv.astype(a.dtype), result)
    return result


def _logical(f_bool: Callable, f_int: Callable) -> Callable:
    return lambda a, b, t: f_bool(a, b) if t.is_bool else f_int(a, b)


_BINARY: dict[str, Callable] = {
    "add": lambda a, b, t: np.logical_xor(a, b) if t.is_bool else np.add(a, b),
    "sub": lambda a, b, t: np.logical_xor(a, b) if t.is_bool else np.subtract(a, b),
    "mul": lambda a, b, t: np.logical_and(a, b) if t.is_bool else np.multiply(a, b),
    "div": _div,
    "floordiv": _floordiv,
    "mod": _mod,
    "pow": _pow,
    "and": _logical(np.logical_and, np.bitwise_and),
    "or": _logical(np.logical_or, np.bitwise_or),
    "xor": _logical(np.logical_xor, np.bitwise_xor),
    "shl": _shift(True),
    "shr": _shift(False),
    "maximum": lambda a, b, t: np.maximum(a, b),  # NaN-propagating
    "minimum": lambda a, b, t: np.minimum(a, b),
    # atan2 hypot copysign nextafter remainder ldexp jn yn (kdsl/ir/mathops.py)
    **{k: mathops.ignore_type(f) for k, f in mathops.BINARY.items()},
}

_COMPARE: dict[str, Callable] = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less,
    "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
}

_erf64 = np.vectorize(math.erf, otypes=[np.float64])


def _one(x: np.ndarray) -> Any:
    return np.asarray(1, dtype=np.asarray(x).dtype)


_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "neg": lambda x: x if np.asarray(x).dtype == np.bool_ else np.negative(x),
    "not": np.invert,  # logical on int1, bitwise on integers
    "exp": np.exp,
    "exp2": np.exp2,
    "log": np.log,
    "log2": np.log2,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: _one(x) / np.sqrt(x),
    "abs": lambda x: x if np.asarray(x).dtype == np.bool_ else np.abs(x),
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    # erf is evaluated in float64 and rounded once to the value's type.
    "erf": lambda x: _erf64(np.asarray(x, dtype=np.float64)).astype(np.asarray(x).dtype),
    "sigmoid": lambda x: _one(x) / (_one(x) + np.exp(np.negative(x))),
    "floor": np.floor,
    "ceil": np.ceil,
    **mathops.UNARY,  # trunc rint round tan ... clz popc (kdsl/ir/mathops.py)
}


def _cast(x: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    """Value conversion. float->int truncates toward zero (NaN -> 0, out of range saturates);
    int->float and float->narrower float round to nearest even; anything -> int1 is `!= 0`."""
    x = np.asarray(x)
    if dst.is_bool:
        return x != 0
    if dst.is_float:
        if dst == bfloat16:
            return bf16_from_bits(bf16_bits(x.astype(np.float64) if not src.is_float else x))
        if dst == float16:
            return round_f16(x if src.is_float else x.astype(np.float64))
        return x.astype(dst.np)
    if src.is_float:
        info = np.iinfo(dst.np)
        t = np.trunc(x.astype(np.float64))
        t = np.where(np.isnan(t), 0.0, t)
        low = t < float(info.min)
        high = t >= 2.0 ** (dst.bits - dst.is_signed)  # exact power of two: no float rounding
        safe = np.where(low | high, 0.0, t).astype(dst.np)
        return np.where(low, info.min, np.where(high, info.max, safe)).astype(dst.np)
    return x.astype(dst.np)  # int -> int wraps; int1 -> 0/1


def _bitcast(x: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    # np.ascontiguousarray makes a 0-d array 1-d: keep the scalar's shape
    bits = np.ascontiguousarray(to_storage(x, src)).reshape(np.shape(x))
    return from_storage(bits.view(dst.np if dst != bfloat16 else np.uint16), dst)


def _tf32(x: np.ndarray) -> np.ndarray:
    """Round float32 to TF32 (10 explicit mantissa bits), nearest even."""
    x = np.asarray(x)
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).reshape(x.shape)
    r = (u + np.uint32(0xFFF) + ((u >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000)
    finite = (u & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    return np.where(finite, r, u).view(np.float32)


# ------------------------------------------------------------------------------ op handlers
# Each handler takes (op, operand values, machine) and returns the list of result values.
# Pure handlers ignore the machine, which may then be None (see `evaluate`).


def _elem(v: tile.Value) -> Any:
    return v.type.elem


def _h_binary(op, ins, m):
    return [_BINARY[op.kind](ins[0], ins[1], _elem(op.operands[0]))]


def _h_compare(op, ins, m):
    return [_COMPARE[op.kind](ins[0], ins[1])]


def _h_unary(op, ins, m):
    return [_UNARY[op.kind](ins[0])]


def _h_const(op, ins, m):
    t = op.result.type
    if isinstance(t.elem, DType):
        v = np.asarray(op.attrs["value"])
        if t.elem.is_float:
            v = v.astype(np.float64)  # round once, from the exact value, to the target type
            v = _cast(v, float64, t.elem)
        elif t.elem.is_bool:
            v = v != 0
        else:
            v = wrap_int(op.attrs["value"], t.elem)
        return [np.full(t.shape, v, dtype=v.dtype) if t.shape else v]
    raise TypeError("pointer constants are not supported")


def _h_iota(op, ins, m):
    t = op.result.type
    ax = op.attrs.get("axis", 0)
    n = t.shape[ax]
    shape = [1] * t.rank
    shape[ax] = n
    line = (np.arange(n, dtype=np.int64) + op.attrs.get("start", 0)).astype(_cnp(t.elem))
    return [np.broadcast_to(line.reshape(shape), t.shape)]


def _h_splat(op, ins, m):
    shape = op.result.type.shape
    return [_map(ins[0], lambda a: np.broadcast_to(np.asarray(a), shape))]


def _h_broadcast(op, ins, m):
    shape = op.result.type.shape
    return [_map(ins[0], lambda a: np.broadcast_to(a, shape))]


def _h_reshape(op, ins, m):
    shape = op.result.type.shape
    return [_map(ins[0], lambda a: np.reshape(a, shape))]


def _h_trans(op, ins, m):
    perm = op.attrs["perm"]
    return [_map(ins[0], lambda a: np.transpose(a, perm))]


def _h_identity(op, ins, m):
    return [ins[0]]


def _h_fma(op, ins, m):
    a, b, c = (np.asarray(v) for v in ins)
    if a.dtype.kind == "f":
        return [mathops.fma(a, b, c)]  # one rounding, exactly (kdsl/ir/mathops.py)
    return [a * b + c]


def _h_where(op, ins, m):
    c, a, b = ins
    if isinstance(a, Ptr):
        if a.buf != b.buf:
            raise NotImplementedError("where between pointers into different buffers")
        return [Ptr(a.buf, np.where(c, a.off, b.off))]
    return [np.where(c, a, b)]


def _h_cast(op, ins, m):
    src, dst = _elem(op.operands[0]), _elem(op.result)
    if isinstance(src, PointerType) or isinstance(dst, PointerType):
        return [ins[0]]
    return [_cast(ins[0], src, dst)]


def _h_bitcast(op, ins, m):
    src, dst = _elem(op.operands[0]), _elem(op.result)
    if isinstance(src, PointerType) or isinstance(dst, PointerType):
        return [ins[0]]
    return [_bitcast(ins[0], src, dst)]


def _h_addptr(op, ins, m):
    p, off = ins
    return [Ptr(p.buf, p.off + np.asarray(off).astype(np.int64))]


def _h_ptr_offset(op, ins, m):
    # Both pointers index one argument buffer (checked mode derives `base` from the parameter
    # `ptr` came from), so the element offset is the difference of the offsets.
    p, base = ins
    return [np.asarray(p.off - base.off, dtype=np.int64)]


def _run_region(block: tile.Block, args: list) -> list:
    """Values yielded by a pure region (a custom reduce's combine) evaluated on `args`, which
    may be arrays: the region's scalar ops then run element-wise over them."""
    env = {a.id: v for a, v in zip(block.args, args)}
    for op in block.ops:
        ins = [env[o.id] for o in op.operands]
        if op.kind in tile.TERMINATORS:
            return ins
        for r, v in zip(op.results, _finish(op, _HANDLERS[op.kind](op, ins, None))):
            env[r.id] = v
    return []


def _h_reduce(op, ins, m):
    x, kind, ax = np.asarray(ins[0]), op.attrs["op"], op.attrs["axis"]
    elem = _elem(op.result)
    if kind == "custom":
        # A left fold along the axis (one fixed order of the unspecified ones), vectorised
        # over the other dims by evaluating the combine region on arrays.
        xs = np.moveaxis(x, ax, 0)
        acc = xs[0]
        for i in range(1, xs.shape[0]):
            (acc,) = _run_region(op.regions[0], [acc, xs[i]])
        return [acc]
    if kind == "sum":
        # Accumulate in the result's register type (float32 for 16-bit floats, rounded once).
        return [np.sum(x, axis=ax, dtype=_cnp(elem))]
    if kind in ("max", "min"):
        return [(np.max if kind == "max" else np.min)(x, axis=ax)]  # NaN-propagating
    # argmax/argmin: first index of the extreme; NumPy counts NaN as the extreme (first wins).
    f = np.argmax if kind == "argmax" else np.argmin
    return [f(x, axis=ax).astype(np.int32)]


def _h_dot(op, ins, m):
    a, b, acc = (np.asarray(v) for v in ins)
    ea = _elem(op.operands[0])
    out = _elem(op.result)
    if ea.is_float:
        wide = np.float64 if np.float64 in (a.dtype, b.dtype) else np.float32
        a, b = a.astype(wide), b.astype(wide)
        if op.attrs.get("precision") == "tf32" and wide == np.float32:
            a, b = _tf32(a), _tf32(b)
        return [(a @ b).astype(_cnp(out)) + acc]
    # Integer dot: exact products, accumulation wrapping in the accumulator's type.
    a, b = a.astype(np.int64), b.astype(np.int64)
    return [((a @ b) + acc.astype(np.int64)).astype(_cnp(out))]


def _h_program_id(op, ins, m):
    return [np.asarray(m.pid[op.attrs["axis"]], dtype=np.int32)]


def _h_num_programs(op, ins, m):
    return [np.asarray(m.grid[op.attrs["axis"]], dtype=np.int32)]


def _h_load(op, ins, m):
    return [m.load(op, ins)]


def _h_store(op, ins, m):
    m.store(op, ins)
    return []


def _h_atomic_add(op, ins, m):
    return [m.atomic_add(op, ins)]


def _h_for(op, ins, m):
    lo, hi, step, *carried = ins
    body = op.regions[0]
    iv_dtype = _cnp(body.args[0].type.elem)
    lo, hi, step = int(lo), int(hi), int(step)
    if step == 0:
        raise ValueError(f"for loop with step 0 at {op.loc}")
    iv = lo
    while (iv < hi) if step > 0 else (iv > hi):
        carried = m.run_block(body, [np.asarray(iv, dtype=iv_dtype), *carried])
        iv += step
    return carried


def _h_while(op, ins, m):
    cond, body = op.regions
    carried = list(ins)
    while True:
        c, *vals = m.run_block(cond, carried)
        if not bool(c):
            return vals
        carried = m.run_block(body, vals)


def _h_if(op, ins, m):
    return m.run_block(op.regions[0] if bool(ins[0]) else op.regions[1], [])


_HANDLERS: dict[str, Callable] = {
    **{k: _h_binary for k in tile.BINARY_OPS},
    **{k: _h_compare for k in tile.COMPARE_OPS},
    **{k: _h_unary for k in tile.UNARY_OPS},
    "const": _h_const, "iota": _h_iota, "splat": _h_splat, "broadcast": _h_broadcast,
    "reshape": _h_reshape, "trans": _h_trans, "hint": _h_identity, "fma": _h_fma,
    "where": _h_where, "cast": _h_cast, "bitcast": _h_bitcast, "addptr": _h_addptr,
    "ptr_offset": _h_ptr_offset,
    "reduce": _h_reduce, "dot": _h_dot, "program_id": _h_program_id,
    "num_programs": _h_num_programs, "load": _h_load, "store": _h_store,
    "atomic_add": _h_atomic_add, "for": _h_for, "while": _h_while, "if": _h_if,
}

# Ops `evaluate` accepts: no memory, no regions, no program state.
PURE_KINDS = frozenset(_HANDLERS) - {
    "load", "store", "atomic_add", "for", "while", "if", "program_id", "num_programs"
}


def _finish(op: tile.Op, values: list) -> list:
    """Bring results to their register form (dtype, 16-bit float rounding)."""
    out = []
    for r, v in zip(op.results, values):
        elem = r.type.elem
        out.append(v if isinstance(elem, PointerType) else _round_to(v, elem))
    return out


def evaluate(op: tile.Op, values: list) -> list:
    """Evaluate a pure op (see `PURE_KINDS`) on register values; returns its results."""
    if op.kind not in PURE_KINDS:
        raise ValueError(f"cannot evaluate {op.kind} outside a program")
    with np.errstate(all="ignore"):
        return _finish(op, _HANDLERS[op.kind](op, values, None))


# ---------------------------------------------------------------------------------- machine


class _Machine:
    """State of one launch: argument buffers, grid, current program id, value environment."""

    def __init__(self, fn: tile.Function, grid: tuple[int, int, int], buffers: list):
        self.fn = fn
        self.grid = grid
        self.buffers = buffers
        self.pid = (0, 0, 0)
        self.env: dict[int, Any] = {}

    def run_block(self, block: tile.Block, args: list) -> list:
        env = self.env
        for a, v in zip(block.args, args):
            env[a.id] = v
        for op in block.ops:
            ins = [env[o.id] for o in op.operands]
            if op.kind in tile.TERMINATORS:
                return ins
            try:
                handler = _HANDLERS[op.kind]
            except KeyError:
                raise NotImplementedError(f"interp: no rule for op {op.kind!r} at {op.loc}")
            outs = _finish(op, handler(op, ins, self))
            for r, v in zip(op.results, outs):
                env[r.id] = v
        return []

    # ---- memory

    def _where(self, op: tile.Op, ptr: Ptr, mask: Any) -> tuple[np.ndarray, np.ndarray | None]:
        """Offsets touched by `op` (those under a true mask) after a bounds check."""
        off = np.asarray(ptr.off)
        sel = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), off.shape)
        idx = off if sel is None else off[sel]
        buf = self.buffers[ptr.buf]
        if idx.size and (idx.min() < 0 or idx.max() >= buf.shape[0]):
            bad = int(idx[(idx < 0) | (idx >= buf.shape[0])].flat[0])
            name = self.fn.runtime_params[ptr.buf].name
            text = f": {op.loc.text.strip()}" if op.loc.text else ""
            # Always checked here; a checked launch reports it as the public OutOfBoundsError.
            exc = OutOfBoundsError if self.fn.attrs.get("check") else IndexError
            raise exc(
                f"{op.kind} out of bounds at {op.loc}{text}: element offset {bad} of "
                f"'{name}' outside [0, {buf.shape[0]})"
            )
        return idx, sel

    def load(self, op: tile.Op, ins: list) -> np.ndarray:
        ptr = ins[0]
        mask = ins[1] if len(ins) > 1 else None
        elem = ptr_elem(op.operands[0])
        idx, sel = self._where(op, ptr, mask)
        vals = from_storage(self.buffers[ptr.buf][idx], elem)
        if sel is None:
            return vals.reshape(np.shape(ptr.off))
        out = np.array(np.broadcast_to(np.asarray(ins[2]), sel.shape), dtype=_cnp(elem))
        out[sel] = vals
        return out

    def store(self, op: tile.Op, ins: list) -> None:
        ptr, val = ins[0], ins[1]
        mask = ins[2] if len(ins) > 2 else None
        elem = ptr_elem(op.operands[0])
        idx, sel = self._where(op, ptr, mask)
        val = np.broadcast_to(np.asarray(val), np.shape(ptr.off))
        val = val if sel is None else val[sel]
        self.buffers[ptr.buf][idx.ravel()] = to_storage(val, elem).ravel()

    def atomic_add(self, op: tile.Op, ins: list) -> np.ndarray:
        """Element-wise read-modify-write in row-major order: each lane gets the value its own
        add saw, so duplicate addresses in one tile accumulate."""
        ptr, val = ins[0], ins[1]
        mask = ins[2] if len(ins) > 2 else None
        elem = ptr_elem(op.operands[0])
        idx, sel = self._where(op, ptr, mask)
        buf = self.buffers[ptr.buf]
        shape = np.shape(ptr.off)
        val = np.broadcast_to(np.asarray(val), shape)
        val = (val if sel is None else val[sel]).ravel()
        idx = idx.ravel()
        old = np.empty(idx.shape, dtype=_cnp(elem))
        add = _BINARY["add"]
        if np.unique(idx).size == idx.size:  # no duplicates: one vectorised step
            old[:] = from_storage(buf[idx], elem)
            buf[idx] = to_storage(_round_to(add(old, val, elem), elem), elem)
        else:
            for i, j in enumerate(idx):
                cur = from_storage(buf[j: j + 1], elem)
                old[i] = cur[0]
                buf[j: j + 1] = to_storage(_round_to(add(cur, val[i: i + 1], elem), elem), elem)
        if sel is None:
            return old.reshape(shape)
        out = np.zeros(shape, dtype=_cnp(elem))
        out[sel] = old
        return out


def ptr_elem(v: tile.Value) -> DType:
    return v.type.elem.pointee


def _buffer(a: Any) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype.name == "bfloat16":  # ml_dtypes arrays hold the same bits
        arr = arr.view(np.uint16)
    if not arr.flags.c_contiguous:
        raise ValueError("interp needs C-contiguous arrays (stores must land in place)")
    return arr.reshape(-1)  # a view: stores land in the caller's array


def run(fn: tile.Function, grid: tuple[int, ...], args: list) -> None:
    """Run every program instance of `fn` over `grid` (axis 0 fastest) on `args`, given in the
    order of `fn.runtime_params`: 1-D C-contiguous NumPy arrays (modified in place; bfloat16 as
    uint16 bits) for pointers, Python numbers for scalars."""
    params = fn.runtime_params
    if len(args) != len(params):
        raise TypeError(f"{fn.name} takes {len(params)} runtime arguments, got {len(args)}")
    grid3 = tuple(int(g) for g in (tuple(grid) + (1, 1, 1))[:3])
    buffers: list = []
    values: list = []
    for i, (p, a) in enumerate(zip(params, args)):
        if p.type.is_ptr:
            buffers.append(_buffer(a))
            values.append(Ptr(i, np.asarray(0, dtype=np.int64)))
        else:
            buffers.append(None)
            values.append(scalar_value(a, p.type.elem))
    m = _Machine(fn, grid3, buffers)
    with np.errstate(all="ignore"):
        for z in range(grid3[2]):
            for y in range(grid3[1]):
                for x in range(grid3[0]):
                    m.pid = (x, y, z)
                    m.env = {}
                    m.run_block(fn.body, values)


__all__ = [
    "PURE_KINDS",
    "Ptr",
    "bf16_bits",
    "bf16_from_bits",
    "evaluate",
    "from_storage",
    "round_bf16",
    "round_f16",
    "run",
    "scalar_value",
    "to_storage",
    "wrap_int",
]
