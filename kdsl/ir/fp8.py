"""The 8-bit float formats and their reference conversions (NumPy bit manipulation).

A value of an 8-bit float type is stored as one byte (its *code*) and held in float32 in
registers, like float16/bfloat16 (`types.compute_dtype`).  This module is the definition of the
conversions that the interpreter runs and that the lowering (`kdsl/lowering/fp8.py`)
reproduces bit for bit as Loop IR integer arithmetic:

  decode   code -> float32, exact (loads).
  convert  float32 -> code by the *conversion rule* (`x.to(fp8)`, `kd.cast`).
  encode   float32 -> code by the *register rule* (stores, bitcasts, and every op whose result
           has an 8-bit float type: a value computed in float32 is `decode(encode(x))`).

Both rules round to nearest, ties to even, and saturate a finite value beyond the largest
finite magnitude to that magnitude with its sign (Triton: NVIDIA's `cvt.rn.satfinite` for
float8e4nv/float8e5, the clamp of float8e4b15, the saturating conversions of the AMD fnuz
formats).  They differ only on the values a conversion has no choice for:

- infinity: the conversion rule gives +-max (as `cvt.rn.satfinite`), except in the fnuz formats
  where it gives their NaN; the register rule keeps float8e5's infinities (a loaded infinity is
  stored back unchanged, `inf + 1` is `inf`);
- NaN: the conversion rule gives the format's NaN code (0x7f; 0x80 in the fnuz formats;
  float8e4b15 has no NaN and gives 0xff = -1.875, what Triton's clamp of a NaN yields); the
  register rule keeps the sign and, in float8e5, the payload, since `decode` writes a NaN
  code's sign and low 7 bits into the float32 NaN it returns (0x7fc00000 | sign | code & 0x7f).
  So a load followed by a store copies every one of the 256 codes unchanged.

The fnuz formats have no -0: a result that rounds to zero is +0.

| format | exp/man bits | bias | max finite | NaN code | inf |
| --- | --- | --- | --- | --- | --- |
| float8e4nv | 4/3 | 7 | 448 | 0x7f, 0xff | none |
| float8e5 | 5/2 | 15 | 57344 | exponent all ones, mantissa != 0 (0x7f given) | 0x7c, 0xfc |
| float8e4b15 | 4/3 | 15 | 1.875 | none | none |
| float8e4b8 | 4/3 | 8 | 240 | 0x80 | none |
| float8e5b16 | 5/2 | 16 | 57344 | 0x80 | none |
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .float_bits import f64_to_f32_odd  # one definition of round-to-odd
from .types import DType, float8e4b8, float8e4b15, float8e4nv, float8e5, float8e5b16

QUIET_NAN_BITS = 0x7FC00000  # float32 register value of every decoded NaN
F32_INF_BITS = 0x7F800000


@dataclass(frozen=True)
class Fp8Format:
    """An 8-bit float format: `special` says which codes are not finite numbers:
    "fn" (S.1111.111 is NaN), "ieee" (exponent all ones: infinity or NaN), "fnuz" (0x80 is the
    only NaN, no -0) or "none" (every code is a number)."""

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    special: str

    @property
    def max_code(self) -> int:
        """Code of the largest finite magnitude."""
        return {"fn": 0x7E, "ieee": 0x7B}.get(self.special, 0x7F)

    @property
    def nan_code(self) -> int:
        """Code a NaN converts to."""
        return {"fnuz": 0x80, "none": 0xFF}.get(self.special, 0x7F)

    @property
    def min_normal_bits(self) -> int:
        """float32 bits of the smallest normal magnitude, 2^(1 - bias)."""
        return (128 - self.bias) << 23

    @property
    def subnormal_scale(self) -> float:
        """The quantum of the subnormals, 2^(1 - bias - man_bits)."""
        return 2.0 ** (1 - self.bias - self.man_bits)

    @property
    def rebias(self) -> int:
        """Difference of the float32 and fp8 exponent biases, 127 - bias."""
        return 127 - self.bias

    @property
    def max_value(self) -> float:
        e = (self.max_code >> self.man_bits) - self.bias
        m = self.max_code & ((1 << self.man_bits) - 1)
        return 2.0 ** e * (1 + m / (1 << self.man_bits))

    @property
    def max_bits(self) -> int:
        """float32 bits of the largest finite magnitude."""
        return int(np.float32(self.max_value).view(np.uint32))


FORMATS: dict[str, Fp8Format] = {
    "float8e4nv": Fp8Format("float8e4nv", 4, 3, 7, "fn"),
    "float8e5": Fp8Format("float8e5", 5, 2, 15, "ieee"),
    "float8e4b15": Fp8Format("float8e4b15", 4, 3, 15, "none"),
    "float8e4b8": Fp8Format("float8e4b8", 4, 3, 8, "fnuz"),
    "float8e5b16": Fp8Format("float8e5b16", 5, 2, 16, "fnuz"),
}
DTYPES: tuple[DType, ...] = (float8e4nv, float8e5, float8e4b15, float8e4b8, float8e5b16)


def fmt(dtype: DType | str) -> Fp8Format:
    """The format of an 8-bit float dtype (or its name)."""
    return FORMATS[dtype if isinstance(dtype, str) else dtype.name]


# --------------------------------------------------------------------------- reference (NumPy)


def _f32(x: np.ndarray) -> np.ndarray:
    """float32 input of the conversions: float64 is first rounded to odd (so that the second
    rounding, to 8 bits, is correct), integers convert exactly enough (beyond 2^24 every format
    saturates anyway)."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        return f64_to_f32_odd(x)
    return x.astype(np.float32)


def _round_code(x: np.ndarray, f: Fp8Format, register: bool) -> np.ndarray:
    """Codes (uint8) of float32 values by the conversion rule, or the register rule when
    `register` (see the module docstring)."""
    shape = np.shape(x)
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    u = x.view(np.uint32).astype(np.int64)
    a = u & 0x7FFFFFFF
    sign = (u >> 31) & 1
    shift = 23 - f.man_bits
    # normal results: round the float32 significand to man_bits (a carry moves to the next
    # binade by itself), then rebias the exponent
    normal = ((a + (1 << (shift - 1)) - 1 + ((a >> shift) & 1)) >> shift) - (
        f.rebias << f.man_bits)
    # subnormal results: count quanta, rounding half to even (np.rint)
    mag = np.where(a < f.min_normal_bits, np.abs(x), 0).astype(np.float64)
    sub = np.rint(mag / f.subnormal_scale).astype(np.int64)
    code = np.where(a < f.min_normal_bits, sub, normal)
    code = np.minimum(code, f.max_code)  # saturation (infinities included)
    inf = a == F32_INF_BITS
    if f.special == "ieee" and register:
        code = np.where(inf, 0x7C, code)
    signed = code | (sign << 7)
    if f.special == "fnuz":  # no -0; an infinity has no code but NaN
        signed = np.where(inf, 0x80, np.where(code == 0, 0, signed))
    nan = a > F32_INF_BITS
    return np.where(nan, _nan_code(f, sign, u) if register else f.nan_code,
                    signed).astype(np.uint8).reshape(shape)


def _nan_code(f: Fp8Format, sign: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Code of a NaN register value (sign and float8e5 payload kept, see `decode`)."""
    if f.special == "fn":
        return (sign << 7) | 0x7F
    if f.special == "ieee":
        payload = u & 3
        return (sign << 7) | np.where(payload != 0, 0x7C | payload, 0x7F)
    return np.full(np.shape(u), f.nan_code)


def convert(x: np.ndarray, dtype: DType | str) -> np.ndarray:
    """`x` converted to codes by the conversion rule (the bits of `x.to(fp8)`)."""
    return _round_code(_f32(x), fmt(dtype), register=False)


def encode(x: np.ndarray, dtype: DType | str) -> np.ndarray:
    """Register values -> codes by the register rule (stores, bitcasts)."""
    return _round_code(_f32(x), fmt(dtype), register=True)


def decode(codes: np.ndarray, dtype: DType | str) -> np.ndarray:
    """Codes -> float32 values (exact); a NaN code gives 0x7fc00000 | its sign | code & 0x7f."""
    f = fmt(dtype)
    c = np.asarray(codes).astype(np.int64).reshape(-1)
    mag = c & 0x7F
    sign = (c >> 7) & 1
    mbits = f.man_bits
    normal = (mag << (23 - mbits)) + (f.rebias << 23)
    sub = (mag.astype(np.float64) * f.subnormal_scale).astype(np.float32).view(np.uint32)
    bits = np.where(mag < (1 << mbits), sub.astype(np.int64), normal)
    nan = {"fn": mag == 0x7F, "ieee": mag > 0x7C, "fnuz": c == 0x80}.get(
        f.special, np.zeros(c.shape, bool))
    bits = np.where(nan, QUIET_NAN_BITS | mag, bits)
    if f.special == "ieee":
        bits = np.where(mag == 0x7C, F32_INF_BITS, bits)
    bits = bits | (sign << 31)
    return bits.astype(np.uint32).view(np.float32).reshape(np.shape(codes))


def convert_value(x: np.ndarray, dtype: DType | str) -> np.ndarray:
    """`x.to(fp8)` held in float32: `decode(convert(x))`."""
    return decode(convert(x, dtype), dtype)


def register_value(x: np.ndarray, dtype: DType | str) -> np.ndarray:
    """A float32 result of an op of fp8 type in its register form: `decode(encode(x))`."""
    return decode(encode(x, dtype), dtype)


def code_of(value: float, dtype: DType | str) -> int:
    """The code of one Python number (register rule; constants of the lowering)."""
    return int(encode(np.asarray(float(value), dtype=np.float64), dtype))


def value_of(value: float, dtype: DType | str) -> float:
    """One Python number in the register form of the format (constants of the lowering)."""
    return float(register_value(np.asarray(float(value), dtype=np.float64), dtype))


__all__ = ["DTYPES", "FORMATS", "Fp8Format", "code_of", "convert", "convert_value", "decode",
           "encode", "fmt", "register_value", "value_of"]
