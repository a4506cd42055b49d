"""NumPy interpreter of the Tile IR: the executable definition of every op's meaning.

`run(fn, grid, args)` executes each program instance in turn, evaluating every op on whole tiles
with NumPy.  The rules written here are the ones every backend must reproduce (docs/ir.md):

- float16/bfloat16 values are held in float32 and rounded to their type (nearest, ties to even)
  after every op that produces them; loads widen, stores narrow.
- 8-bit floats are held in float32 too; their conversions are those of `fp8.py`.
- integers wrap; integer `floordiv`/`mod` follow C and define x // 0 == x % 0 == 0.
- a pointer value is a `Ptr(buffer index, int64 byte offsets)`; a pointer made from an integer
  (`int_to_ptr`) has the buffer index `RAW` and holds process addresses (`rawmem.py`).

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
from . import atomics, fp8, mathops, rawmem, tile
from .float_bits import bf16_bits, bf16_from_bits, f64_to_f32_odd, round_bf16, round_f16
from .storage import compute_np, from_storage, to_storage
from .types import DType, PointerType, bfloat16, float16, float64

# ------------------------------------------------------------------------------ value model


RAW = -1  # `Ptr.buf` of a pointer made from an integer: its offsets are process addresses


@dataclass(frozen=True)
class Ptr:
    """A pointer tile: the index of the argument buffer and the byte offsets (int64) from its
    start (bytes, so that a pointer bitcast to another pointee keeps its meaning); with
    `buf == RAW`, absolute addresses."""

    buf: int
    off: np.ndarray


# The 16-bit rounding rules and the storage conversions live in float_bits.py and storage.py
# (shared with the atomics and the 8-bit float conversions); their names stay importable here.
_cnp = compute_np
_f64_to_f32_odd = f64_to_f32_odd


def _round_to(x: Any, elem: DType) -> np.ndarray:
    """Coerce a computed value to the register form of `elem` (rounding 16-bit floats)."""
    x = np.asarray(x)
    if elem == float16:
        return round_f16(x)
    if elem == bfloat16:
        return round_bf16(x)
    if elem.is_fp8:
        return fp8.register_value(x, elem)
    want = _cnp(elem)
    return x if x.dtype == want else x.astype(want)


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
    if elem.is_fp8:  # a value of the type (a folded constant): the register rule
        return fp8.register_value(np.asarray(float(a), dtype=np.float64), elem)
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
    if a.dtype == np.bool_:  # width 1: x // 1 == x, x % 1 == 0, and x / 0 gives 0, 0
        return a & b, np.zeros_like(a)
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
        if dst.is_fp8:  # the conversion rule (fp8.py); from float64 through round-to-odd
            return fp8.convert_value(x if src.is_float else x.astype(np.float64), dst)
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
    # (np.ascontiguousarray turns a 0-d array into shape (1,): keep the caller's shape)
    bits = np.ascontiguousarray(to_storage(x, src)).reshape(np.shape(x))
    return from_storage(bits.view(dst.np), dst)


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
        if t.elem.is_fp8:  # the constant is a value of the type (the register rule)
            v = fp8.register_value(v.astype(np.float64), t.elem)
        elif t.elem.is_float:
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


def _h_slice(op, ins, m):
    shape = op.result.type.shape
    idx = np.ix_(*(s + t * np.arange(n) for s, t, n in
                   zip(op.attrs["start"], op.attrs["step"], shape)))
    return [_map(ins[0], lambda a: np.asarray(a)[idx])]


def clamp_index(index: np.ndarray, n: int) -> np.ndarray:
    """Indices clamped to [0, n) as int64 (each compared in its own type, as the lowering
    does: a uint64 above 2**63 is large, not negative)."""
    index = np.asarray(index)
    if index.dtype == np.uint64:
        return np.minimum(index, np.uint64(n - 1)).astype(np.int64)
    return np.clip(index.astype(np.int64), 0, n - 1)


def _h_gather(op, ins, m):
    ax = op.attrs["axis"]
    index = clamp_index(ins[1], op.operands[0].type.shape[ax])
    return [_map(ins[0], lambda a: np.take_along_axis(np.asarray(a), index, axis=ax))]


def _h_histogram(op, ins, m):
    n = op.attrs["num_bins"]
    x = np.asarray(ins[0])
    keep = (x >= 0) & (x < n) if x.dtype.kind == "i" else x < n
    if len(ins) > 1:
        keep &= np.asarray(ins[1], dtype=bool)
    return [np.bincount(x[keep].astype(np.int64), minlength=n).astype(np.int32)]


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
            cs = np.asarray(c)
            if cs.size and (cs.all() or not cs.any()):  # one array for every element
                return [a if cs.all() else b]
            raise NotImplementedError(f"where at {op.loc} selects, element by element, between "
                                      "pointers into different arrays (the interp backend "
                                      "cannot represent that pointer tile)")
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
        return [ins[0]]  # a pointer bitcast: the same bytes, read as another pointee
    return [_bitcast(ins[0], src, dst)]


def _h_int_to_ptr(op, ins, m):
    # An address of process memory (uint64 addresses above 2^63 wrap, as in C).
    return [Ptr(RAW, np.asarray(ins[0]).astype(np.int64))]


def _h_ptr_to_int(op, ins, m):
    p = ins[0]
    addr = p.off if p.buf == RAW else m.base_address(p.buf) + p.off
    return [np.asarray(addr, dtype=np.int64).astype(_cnp(_elem(op.result)))]


def _pointee_size(v: tile.Value) -> int:
    return v.type.elem.pointee.itemsize


def _h_addptr(op, ins, m):
    p, off = ins
    step = np.asarray(off).astype(np.int64) * _pointee_size(op.operands[0])
    return [Ptr(p.buf, p.off + step)]


def _h_ptr_offset(op, ins, m):
    # Both pointers index one argument buffer (checked mode derives `base` from the parameter
    # `ptr` came from), so the element offset is the difference of the offsets.
    p, base = ins
    if p.buf != base.buf:  # another array (checked mode tries each one a pointer may be in)
        return [np.full(np.shape(p.off), _FAR, dtype=np.int64)]
    return [np.asarray((p.off - base.off) // _pointee_size(op.operands[0]), dtype=np.int64)]


_FAR = np.iinfo(np.int64).max // 2  # an element offset outside every array


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
    if kind == "custom":
        # A left fold along the axis (one fixed order of the unspecified ones), vectorised
        # over the other dims by evaluating the combine region on arrays; n operands fold
        # together, the region taking (acc_1..acc_n, x_1..x_n).
        xs = [np.moveaxis(np.asarray(v), ax, 0) for v in ins]
        acc = [v[0] for v in xs]
        for i in range(1, xs[0].shape[0]):
            acc = _run_region(op.regions[0], acc + [v[i] for v in xs])
        return acc
    elem = _elem(op.result)
    if kind == "sum":
        # Accumulate in the result's register type (float32 for 16-bit floats, rounded once).
        return [np.sum(x, axis=ax, dtype=_cnp(elem))]
    if kind in ("max", "min"):
        return [(np.max if kind == "max" else np.min)(x, axis=ax)]  # NaN-propagating
    # argmax/argmin: first index of the extreme; NumPy counts NaN as the extreme (first wins).
    f = np.argmax if kind == "argmax" else np.argmin
    return [f(x, axis=ax).astype(np.int32)]


# Built-in scan kinds -> the binary op that combines (one rounding per step, as that op).
_SCAN_STEP = {"sum": "add", "prod": "mul"}


def _h_scan(op, ins, m):
    """Inclusive scan: a sequential left fold along the axis that keeps every step, from the
    end when `reverse` (y[i] = combine(y[i+1], x[i])); vectorised over the other dims."""
    ax, kind = op.attrs["axis"], op.attrs["op"]
    xs = [np.moveaxis(np.asarray(v), ax, 0) for v in ins]
    if op.attrs["reverse"]:
        xs = [v[::-1] for v in xs]
    if kind == "custom":
        def step(acc, x):
            return _run_region(op.regions[0], acc + x)
    else:
        binop = tile.Op(_SCAN_STEP[kind], op.operands * 2, [op.results[0].type])

        def step(acc, x):
            return _finish(binop, _h_binary(binop, [acc[0], x[0]], None))
    acc = [v[0] for v in xs]
    outs = [[a] for a in acc]
    for i in range(1, xs[0].shape[0]):
        acc = step(acc, [v[i] for v in xs])
        for o, a in zip(outs, acc):
            o.append(a)
    res = [np.stack(o) for o in outs]
    if op.attrs["reverse"]:
        res = [r[::-1] for r in res]
    return [np.ascontiguousarray(np.moveaxis(r, 0, ax)) for r in res]


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


def _h_sparse_dot(op, ins, m):
    # only the kept values meet b: rows 4 * (j // 2) + (meta & 3) of b for value j
    a, e, b, acc = (np.asarray(v) for v in ins)
    rows = 4 * (np.arange(a.shape[1]) // 2) + (e.astype(np.int64) & 3)        # [M, K/2]
    terms = a.astype(np.float64)[:, :, None] * b.astype(np.float64)[rows]     # [M, K/2, N]
    return [terms.sum(axis=1).astype(np.float32) + acc]


def _h_program_id(op, ins, m):
    return [np.asarray(m.pid[op.attrs["axis"]], dtype=np.int32)]


def _h_num_programs(op, ins, m):
    return [np.asarray(m.grid[op.attrs["axis"]], dtype=np.int32)]


def _h_load(op, ins, m):
    return [m.load(op, ins)]


def _h_store(op, ins, m):
    m.store(op, ins)
    return []


def _h_atomic(op, ins, m):
    return [m.atomic(op, ins)]


def _h_barrier(op, ins, m):
    return []  # the interpreter runs each program as one thread


def _h_print(op, ins, m):
    from .debug_print import print_op_lines
    for line in print_op_lines(op, ins, m.pid):
        print(line)
    return []


def _h_assert(op, ins, m):
    # Normally rewritten into the error record by the checks pass (kdsl/passes/checks.py);
    # a Tile IR function run as it is raises here.
    ok = np.asarray(ins[0], dtype=bool)
    if not ok.all():
        from ..errors import DeviceAssertionError
        first = tuple(int(i) for i in np.argwhere(~ok)[0]) if ok.shape else ()
        text = f"\n    {op.loc.text.strip()}" if op.loc.text else ""
        raise DeviceAssertionError(f"device assertion failed at {op.loc}{text}\n"
                                   f"{op.attrs.get('msg', '')}, in program_id {m.pid}"
                                   + (f", element {first}" if first else ""))
    return []


def _h_breakpoint(op, ins, m):
    from .debug_print import stop_at_breakpoint
    stop_at_breakpoint(op, ins, m.pid, m.fn.runtime_params, m.buffers)
    return []


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
    "slice": _h_slice, "gather": _h_gather, "histogram": _h_histogram,
    "where": _h_where, "cast": _h_cast, "bitcast": _h_bitcast, "addptr": _h_addptr,
    "ptr_offset": _h_ptr_offset, "int_to_ptr": _h_int_to_ptr, "ptr_to_int": _h_ptr_to_int,
    "reduce": _h_reduce, "scan": _h_scan, "dot": _h_dot,
    "sparse_dot": _h_sparse_dot, "program_id": _h_program_id,
    "num_programs": _h_num_programs, "load": _h_load, "store": _h_store,
    "atomic_rmw": _h_atomic, "atomic_cas": _h_atomic, "for": _h_for, "while": _h_while,
    "if": _h_if, "barrier": _h_barrier, "print": _h_print, "assert": _h_assert,
    "breakpoint": _h_breakpoint, "prefetch": lambda op, ins, m: [],  # a hint: nothing runs
}

# Ops `evaluate` accepts: no memory, no regions, no program state.
PURE_KINDS = frozenset(_HANDLERS) - {
    "load", "store", "atomic_rmw", "atomic_cas", "for", "while", "if", "program_id",
    "num_programs", "ptr_to_int", *tile.DEBUG_OPS, *tile.HINT_OPS
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
        #: per buffer, the element its pointer parameter points at (`run`'s origins)
        self.origins = [0] * len(buffers)
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
    # A buffer is read through a view of its bytes as the pointee's storage dtype (the same
    # array when the pointee is the parameter's own type); a RAW pointer through `rawmem`.

    def base_address(self, buf: int) -> int:
        return int(self.buffers[buf].__array_interface__["data"][0])

    def _view(self, buf: int, dt: np.dtype) -> np.ndarray:
        arr = self.buffers[buf]
        if arr.dtype == dt:
            return arr
        raw = arr.view(np.uint8)
        return raw[: raw.size - raw.size % dt.itemsize].view(dt)

    def _where(self, op: tile.Op, ptr: Ptr, mask: Any) -> tuple[np.ndarray, np.ndarray | None]:
        """Element indices (addresses for a RAW pointer) touched by `op` (those under a true
        mask) after a bounds check."""
        off = np.asarray(ptr.off)
        sel = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), off.shape)
        byte = off if sel is None else off[sel]
        if ptr.buf == RAW:
            return byte, sel
        size = ptr_elem(op.operands[0]).np.itemsize
        n = self._view(ptr.buf, ptr_elem(op.operands[0]).np).shape[0]
        idx = byte // size
        outside = (idx < 0) | (idx >= n)
        misaligned = byte % size != 0
        if outside.any() or misaligned.any():
            name = self.fn.runtime_params[ptr.buf].name
            o = self.origins[ptr.buf]  # offsets are reported from the argument's pointer
            if outside.any():
                what = (f"element offset {int(idx[outside].flat[0]) - o} of '{name}' outside "
                        f"[{-o}, {n - o})")
            else:
                what = (f"byte offset {int(byte[misaligned].flat[0])} of '{name}' is not a "
                        f"multiple of the element size {size}")
            text = f": {op.loc.text.strip()}" if op.loc.text else ""
            # Always checked here; a checked launch reports it as the public OutOfBoundsError.
            exc = OutOfBoundsError if self.fn.options.check else IndexError
            raise exc(f"{op.kind} out of bounds at {op.loc}{text}: {what}")
        return idx, sel

    def _get(self, op: tile.Op, ptr: Ptr, idx: np.ndarray) -> np.ndarray:
        dt = ptr_elem(op.operands[0]).np
        if ptr.buf == RAW:
            return rawmem.read(idx, dt, f"{op.kind} at {op.loc}")
        return self._view(ptr.buf, dt)[idx]

    def _put(self, op: tile.Op, ptr: Ptr, idx: np.ndarray, bits: np.ndarray) -> None:
        dt = ptr_elem(op.operands[0]).np
        if ptr.buf == RAW:
            rawmem.write(idx, bits, dt, f"{op.kind} at {op.loc}")
        else:
            self._view(ptr.buf, dt)[idx] = bits

    def load(self, op: tile.Op, ins: list) -> np.ndarray:
        ptr = ins[0]
        mask = ins[1] if len(ins) > 1 else None
        elem = ptr_elem(op.operands[0])
        idx, sel = self._where(op, ptr, mask)
        vals = from_storage(self._get(op, ptr, idx), elem)
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
        self._put(op, ptr, idx.ravel(), to_storage(val, elem).ravel())

    def atomic(self, op: tile.Op, ins: list) -> np.ndarray:
        """`atomic_rmw` / `atomic_cas`: element-wise read-modify-write in row-major lane order
        (kdsl/ir/atomics.py defines the values); each lane gets the value its own operation saw,
        so duplicate addresses in one tile accumulate."""
        cas = op.kind == "atomic_cas"
        nvals = 2 if cas else 1
        ptr, vals = ins[0], ins[1:1 + nvals]
        mask = ins[1 + nvals] if len(ins) > 1 + nvals else None
        elem = ptr_elem(op.operands[0])
        idx, sel = self._where(op, ptr, mask)
        shape = np.shape(ptr.off)
        vals = [np.broadcast_to(np.asarray(v), shape) for v in vals]
        vals = [(v if sel is None else v[sel]).ravel() for v in vals]
        idx = idx.ravel()

        def new(cur: np.ndarray, i: slice) -> np.ndarray:
            if cas:
                return atomics.cas(elem, cur, vals[0][i], vals[1][i])
            return atomics.rmw(op.attrs["op"], elem, cur, vals[0][i])

        old = np.empty(idx.shape, dtype=_cnp(elem))
        if np.unique(idx).size == idx.size:  # no duplicates: one vectorised step
            old[:] = from_storage(self._get(op, ptr, idx), elem)
            self._put(op, ptr, idx, to_storage(new(old, slice(None)), elem))
        else:
            for i in range(idx.size):
                cur = from_storage(self._get(op, ptr, idx[i: i + 1]), elem)
                old[i] = cur[0]
                self._put(op, ptr, idx[i: i + 1], to_storage(new(cur, slice(i, i + 1)), elem))
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
    elif arr.dtype.name.startswith("float8") and arr.dtype.itemsize == 1:
        arr = arr.view(np.uint8)  # ml_dtypes' 8-bit floats: the codes
    if not arr.flags.c_contiguous:
        raise ValueError("interp needs C-contiguous arrays (stores must land in place)")
    return arr.reshape(-1)  # a view: stores land in the caller's array




def run(fn: tile.Function, grid: tuple[int, ...], args: list,
        origins: list[int] | None = None) -> None:
    """Run every program instance of `fn` over `grid` (axis 0 fastest) on `args`, given in the
    order of `fn.runtime_params`: 1-D C-contiguous NumPy arrays (modified in place; bfloat16 as
    uint16 bits, 8-bit floats as uint8 codes) for pointers, Python numbers for scalars.
    `origins[i]` is the element of array `i` a pointer parameter points at (default 0; a
    strided view's first element lies inside the flat span of its memory,
    kdsl/runtime/views.py)."""
    params = fn.runtime_params
    if len(args) != len(params):
        raise TypeError(f"{fn.name} takes {len(params)} runtime arguments, got {len(args)}")
    grid3 = tuple(int(g) for g in (tuple(grid) + (1, 1, 1))[:3])
    buffers: list = []
    values: list = []
    for i, (p, a) in enumerate(zip(params, args)):
        if p.type.is_ptr:
            buffers.append(_buffer(a))
            # pointer offsets count bytes: the origin element times the element size
            first = (origins[i] if origins else 0) * p.type.elem.pointee.np.itemsize
            values.append(Ptr(i, np.asarray(first, dtype=np.int64)))
        else:
            buffers.append(None)
            values.append(scalar_value(a, p.type.elem))
    m = _Machine(fn, grid3, buffers)
    if origins:
        m.origins = list(origins)
    with np.errstate(all="ignore"):
        for z in range(grid3[2]):
            for y in range(grid3[1]):
                for x in range(grid3[0]):
                    m.pid = (x, y, z)
                    m.env = {}
                    m.run_block(fn.body, values)


__all__ = [
    "PURE_KINDS",
    "RAW",
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
