"""Rounding of float32/float64 values to the 16-bit formats, and round-to-odd: the one definition
the interpreter, the atomics, the 8-bit float conversions and the printer share (NumPy only, no
other kdsl module, so that each of them can import it)."""

from __future__ import annotations

import numpy as np


def round_f16(x: np.ndarray) -> np.ndarray:
    """Round to float16 (nearest even) and hold the result in float32."""
    return np.asarray(x).astype(np.float16).astype(np.float32)


def f64_to_f32_odd(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounding to odd, so that a second rounding to a narrower type (bf16)
    gives the correctly rounded result (no double-rounding error)."""
    with np.errstate(over="ignore"):
        f = x.astype(np.float32)
    inexact = f.astype(np.float64) != x
    inexact &= np.isfinite(x)
    toward_zero = np.where(np.abs(f.astype(np.float64)) > np.abs(x),
                           np.nextafter(f, np.float32(0)), f)
    bits = toward_zero.view(np.uint32) | np.uint32(1)
    return np.where(inexact, bits.view(np.float32), f)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 (or float64) values -> bfloat16 bit patterns (uint16), nearest even, NaN kept NaN."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        x = f64_to_f32_odd(x)
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


__all__ = ["bf16_bits", "bf16_from_bits", "f64_to_f32_odd", "round_bf16", "round_f16"]
