"""Element types, pointer types and tile types shared by every IR level.

A value in the Tile IR has a `TileType(shape, elem)`: `shape == ()` is a scalar, otherwise a tile of
static shape.  `elem` is a `DType` (numbers and the boolean `int1`) or a `PointerType` to a `DType`.
The Loop IR uses the same `DType`/`PointerType` objects for its scalar variables.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np


@dataclass(frozen=True)
class DType:
    """A number type. `kind` is 'f' (float), 'i' (signed int), 'u' (unsigned int) or 'b' (int1)."""

    name: str
    kind: str
    bits: int

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        """Signed or unsigned integer (not bool)."""
        return self.kind in ("i", "u")

    @property
    def is_signed(self) -> bool:
        return self.kind == "i"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def is_fp8(self) -> bool:
        """One of the 8-bit float formats (kdsl/ir/fp8.py)."""
        return self.kind == "f" and self.bits == 8

    @property
    def itemsize(self) -> int:
        """Bytes in memory (int1 is stored as one byte)."""
        return max(1, self.bits // 8)

    @property
    def np(self) -> np.dtype:
        """NumPy dtype used to store this type in memory (bfloat16 is stored as uint16 bits)."""
        return np.dtype(_NP_STORAGE[self.name])

    def __repr__(self) -> str:  # used by the IR printers
        return self.name

    __str__ = __repr__

    def __call__(self, *a, **k):  # pragma: no cover - guards misuse in kernels
        raise TypeError(f"{self.name} is a dtype, not a function")


int1 = DType("int1", "b", 1)
int8 = DType("int8", "i", 8)
int16 = DType("int16", "i", 16)
int32 = DType("int32", "i", 32)
int64 = DType("int64", "i", 64)
uint8 = DType("uint8", "u", 8)
uint16 = DType("uint16", "u", 16)
uint32 = DType("uint32", "u", 32)
uint64 = DType("uint64", "u", 64)
float16 = DType("float16", "f", 16)
bfloat16 = DType("bfloat16", "f", 16)
float32 = DType("float32", "f", 32)
float64 = DType("float64", "f", 64)
# 8-bit floats (Triton's names; formats in kdsl/ir/fp8.py): stored as one byte, held in float32.
float8e4nv = DType("float8e4nv", "f", 8)    # e4m3 "fn" (OCP): no inf, NaN S.1111.111, max 448
float8e5 = DType("float8e5", "f", 8)        # e5m2 (IEEE-like): inf and NaN, max 57344
float8e4b15 = DType("float8e4b15", "f", 8)  # e4m3 bias 15: every code finite, max 1.875
float8e4b8 = DType("float8e4b8", "f", 8)    # e4m3 "fnuz" bias 8: NaN = 0x80, no -0, max 240
float8e5b16 = DType("float8e5b16", "f", 8)  # e5m2 "fnuz" bias 16: NaN = 0x80, no -0, max 57344
FP8_DTYPES: tuple[DType, ...] = (float8e4nv, float8e5, float8e4b15, float8e4b8, float8e5b16)

ALL_DTYPES: tuple[DType, ...] = (
    int1, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
    float16, bfloat16, float32, float64, *FP8_DTYPES,
)
BY_NAME: dict[str, DType] = {d.name: d for d in ALL_DTYPES}
BY_NAME["bool"] = int1

_NP_STORAGE = {
    "int1": "bool", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "float16": "float16", "bfloat16": "uint16", "float32": "float32", "float64": "float64",
    **{d.name: "uint8" for d in FP8_DTYPES},  # the byte code (kdsl/ir/fp8.py)
}

# NumPy dtype -> kdsl dtype for array arguments. A bfloat16 array is passed from NumPy as
# `ml_dtypes.bfloat16` when that package is present, else explicitly (see runtime binding).
_FROM_NP = {np.dtype(v): BY_NAME[k] for k, v in _NP_STORAGE.items()
            if k != "bfloat16" and not BY_NAME[k].is_fp8}
# ml_dtypes' 8-bit float dtypes (by name: no import needed) -> kdsl's; float8e4b15 has none.
_FP8_FROM_NP = {"float8_e4m3fn": float8e4nv, "float8_e5m2": float8e5,
                "float8_e4m3fnuz": float8e4b8, "float8_e5m2fnuz": float8e5b16}


def from_numpy(dt: np.dtype) -> DType:
    """kdsl dtype of a NumPy dtype; raises TypeError for unsupported ones."""
    dt = np.dtype(dt)
    if dt.name == "bfloat16":  # ml_dtypes.bfloat16
        return bfloat16
    if dt.name in _FP8_FROM_NP and dt.itemsize == 1:
        return _FP8_FROM_NP[dt.name]
    try:
        return _FROM_NP[dt]
    except KeyError:
        raise TypeError(f"unsupported array dtype {dt}") from None


@dataclass(frozen=True)
class PointerType:
    """Pointer to global memory holding elements of `pointee`."""

    pointee: DType

    @property
    def element_ty(self) -> DType:
        """Triton's name of the pointee type."""
        return self.pointee

    def __repr__(self) -> str:
        return f"ptr<{self.pointee}>"

    __str__ = __repr__


ElemType = DType | PointerType


@dataclass(frozen=True)
class TileType:
    """Type of a Tile IR value: a static `shape` (empty for a scalar) of `elem`."""

    shape: tuple[int, ...]
    elem: ElemType

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_ptr(self) -> bool:
        return isinstance(self.elem, PointerType)

    def with_shape(self, shape: tuple[int, ...]) -> TileType:
        return TileType(tuple(shape), self.elem)

    def with_elem(self, elem: ElemType) -> TileType:
        return TileType(self.shape, elem)

    def __repr__(self) -> str:
        if not self.shape:
            return str(self.elem)
        return f"tile<{'x'.join(map(str, self.shape))}x{self.elem}>"

    __str__ = __repr__


def scalar(elem: ElemType) -> TileType:
    return TileType((), elem)


def compute_dtype(d: DType) -> DType:
    """Register type used to hold values of `d`: float16/bfloat16 (and the 8-bit floats) are
    held in float32 and rounded after every operation that produces them (correctly rounded,
    since float32 has more than 2*11+2 significand bits), so that every backend gives the same
    bits with or without native half arithmetic."""
    return float32 if d in (float16, bfloat16) or d.is_fp8 else d
