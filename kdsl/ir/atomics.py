"""The meaning of every atomic operation, shared by the Tile IR interpreter (`interp.py`) and the
Loop IR simulator (`loop_interp.py`), so that both define the same values.

`rmw(op, elem, old, val)` is the value an `atomic_rmw {op}` writes, from the old value in memory
and the operand, both in register form (16-bit floats held in float32, as everywhere):

  add        old + val in the pointee type (wrapping integers; 16-bit floats computed in float32
             and rounded once, which is the correctly rounded 16-bit sum)
  max, min   integers: by the pointee's signedness.  float32/float64: Triton's sign trick on
             the bits: where val's sign bit is clear, the signed-integer max (min) of the bit
             patterns; where it is set, the unsigned-integer min (max).  That is the float max
             (min) for every non-NaN value and makes -0.0 < +0.0; a NaN operand with its sign
             bit clear wins a max (loses a min) and one with it set loses a max (wins a min).
  and or xor on the bits (integers only)
  xchg       val

`cas(elem, old, cmp, val)` is what an `atomic_cas` writes: `val` where the bit patterns of old and
cmp are equal (so -0.0 != +0.0 and a NaN matches the same NaN), else old.  Every op returns the old
value.  The ops on one address are applied one lane at a time: lanes of one tile in row-major order
(interpreter), threads and programs in some order (compiled backends).
"""

from __future__ import annotations

import numpy as np

from .float_bits import round_bf16
from .storage import from_storage, to_storage  # float16 as float16, bfloat16 as uint16 bits
from .types import DType, bfloat16, float16

# Pointee types each op accepts (Triton 3.6's rules, kdsl/language/semantic.py enforces them).
_INT = ("int32", "uint32", "int64", "uint64")
RMW_DTYPES: dict[str, tuple[str, ...]] = {
    "add": (*_INT, "float16", "bfloat16", "float32", "float64"),
    "max": (*_INT, "float32", "float64"),
    "min": (*_INT, "float32", "float64"),
    "and": _INT,
    "or": _INT,
    "xor": _INT,
    "xchg": (*_INT, "float32", "float64"),
}
CAS_DTYPES = ("int16", "uint16", "float16", "bfloat16", *_INT, "float32", "float64")


def bits(x: np.ndarray, elem: DType) -> np.ndarray:
    """Bit patterns (unsigned integers of elem's width) of register values of `elem`."""
    x = np.asarray(x)
    stored = np.ascontiguousarray(to_storage(x, elem)).reshape(x.shape)
    return stored.view(np.dtype(f"u{elem.itemsize}"))


def from_bits(b: np.ndarray, elem: DType) -> np.ndarray:
    """Register values of `elem` from bit patterns (the inverse of `bits`)."""
    b = np.ascontiguousarray(b, dtype=np.dtype(f"u{elem.itemsize}"))
    return from_storage(b.view(np.uint16 if elem == bfloat16 else elem.np), elem)


def _round(x: np.ndarray, elem: DType) -> np.ndarray:
    if elem == float16:
        return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)
    if elem == bfloat16:
        return round_bf16(x)
    return np.asarray(x).astype(elem.np)


def _float_minmax(op: str, elem: DType, old: np.ndarray, val: np.ndarray) -> np.ndarray:
    u = np.dtype(f"u{elem.itemsize}")
    s = np.dtype(f"i{elem.itemsize}")
    ou, vu = bits(old, elem), bits(val, elem)
    neg = (vu >> u.type(elem.bits - 1)) != 0
    big, small = (np.maximum, np.minimum) if op == "max" else (np.minimum, np.maximum)
    signed = big(ou.view(s), vu.view(s)).view(u)
    unsigned = small(ou, vu)
    return from_bits(np.where(neg, unsigned, signed), elem)


def rmw(op: str, elem: DType, old: np.ndarray, val: np.ndarray) -> np.ndarray:
    """The value `atomic_rmw {op}` writes over `old` with operand `val` (register forms)."""
    old, val = np.asarray(old), np.asarray(val)
    with np.errstate(all="ignore"):
        if op == "add":
            return _round(old + val, elem)
        if op == "xchg":
            return _round(val, elem)
        if op in ("and", "or", "xor"):
            f = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
            return f(old, val).astype(old.dtype)
        if op in ("max", "min"):
            if elem.is_float:
                return _float_minmax(op, elem, old, val)
            return (np.maximum if op == "max" else np.minimum)(old, val).astype(old.dtype)
    raise ValueError(f"unknown atomic op {op!r}")


def cas(elem: DType, old: np.ndarray, cmp: np.ndarray, val: np.ndarray) -> np.ndarray:
    """The value `atomic_cas` writes over `old` (register forms): `val` where the bits of old
    equal those of cmp, else old."""
    old = np.asarray(old)
    same = bits(old, elem) == bits(np.broadcast_to(cmp, old.shape), elem)
    return np.where(same, np.broadcast_to(val, old.shape), old).astype(old.dtype)


__all__ = ["CAS_DTYPES", "RMW_DTYPES", "bits", "cas", "from_bits", "rmw"]
