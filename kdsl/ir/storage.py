"""How values of each dtype sit in registers and in memory (the interpreter's value model,
shared with the atomics): registers hold 16-bit and 8-bit floats in float32, memory holds
float16 as float16, bfloat16 as its uint16 bits and 8-bit floats as their codes."""

from __future__ import annotations

import numpy as np

from . import fp8
from .float_bits import bf16_bits, bf16_from_bits
from .types import DType, bfloat16, compute_dtype


def compute_np(elem: DType) -> np.dtype:
    """NumPy dtype holding values of `elem` while computing (float32 for float16/bfloat16)."""
    return compute_dtype(elem).np


def to_storage(x: np.ndarray, elem: DType) -> np.ndarray:
    """Register values -> memory representation (bfloat16 as uint16 bits)."""
    if elem == bfloat16:
        return bf16_bits(x)
    if elem.is_fp8:
        return fp8.encode(x, elem)
    return np.asarray(x).astype(elem.np)


def from_storage(x: np.ndarray, elem: DType) -> np.ndarray:
    """Memory representation -> register values (16-bit floats widen to float32)."""
    if elem == bfloat16:
        return bf16_from_bits(x)
    if elem.is_fp8:
        return fp8.decode(x, elem)
    return np.asarray(x).astype(compute_np(elem))


__all__ = ["compute_np", "from_storage", "to_storage"]
