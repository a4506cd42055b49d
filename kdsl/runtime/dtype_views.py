"""Arrays whose elements are read as another dtype of the same size: `kd.bfloat16_view` (uint16
bits holding bfloat16 values) and `kd.float8_view` (uint8 codes of an 8-bit float).  Public
(`kdsl.bfloat16_view`, `kdsl.float8_view`); the binder (`binding.py`), the library and the tools
read them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kdsl.ir import types as T


class DTypeView:
    """An array whose elements are to be read as `dtype` (same item size), e.g. uint16 bits
    holding bfloat16 values.  Build with `bfloat16_view`."""

    __slots__ = ("array", "dtype")

    def __init__(self, array: Any, dtype: T.DType):
        self.array = array
        self.dtype = dtype


def bfloat16_view(array: Any) -> DTypeView:
    """Mark a uint16 (or int16) array as holding bfloat16 bits."""
    if np.dtype(array.dtype).itemsize != 2:
        raise TypeError(f"bfloat16_view needs a 16-bit array, got dtype {array.dtype}")
    return DTypeView(array, T.bfloat16)


def float8_view(array: Any, dtype: T.DType) -> DTypeView:
    """Mark a uint8 (or int8) array as holding the codes of the 8-bit float `dtype`
    (`kd.float8e4nv`, `kd.float8e5`, `kd.float8e4b15`, `kd.float8e4b8`, `kd.float8e5b16`)."""
    if not (isinstance(dtype, T.DType) and dtype.is_fp8):
        raise TypeError(f"float8_view needs an 8-bit float dtype (kd.float8e4nv, ...), got "
                        f"{dtype!r}")
    if np.dtype(array.dtype).itemsize != 1:
        raise TypeError(f"float8_view needs an array of bytes (uint8), got dtype {array.dtype}")
    return DTypeView(array, dtype)


__all__ = ["DTypeView", "bfloat16_view", "float8_view"]
