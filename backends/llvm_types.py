"""LLVM types of kdsl dtypes: the register type of a value and the memory type of an element
(shared by the emitter, `llvm.py`, and its atomics, `llvm_atomics.py`)."""

from __future__ import annotations

from llvmlite import ir

from kdsl.ir.types import DType, PointerType

from .llvm_math import F32, F64

I1, I8, I16, I32, I64 = (ir.IntType(w) for w in (1, 8, 16, 32, 64))
F16 = ir.HalfType()
PTR = ir.PointerType()

# Register type of each dtype (float16/bfloat16 values live in float32: see loop.py).
_REG = {"int1": I1, "int8": I8, "int16": I16, "int32": I32, "int64": I64, "uint8": I8,
        "uint16": I16, "uint32": I32, "uint64": I64, "float16": F32, "bfloat16": F32,
        "float32": F32, "float64": F64}
# Memory type of the elements a pointer points to (bool arrays are NumPy bytes).
_MEM = {**_REG, "int1": I8, "float16": F16, "bfloat16": I16}
# 8-bit floats: float32 values, byte codes in memory (kdsl/ir/loop.py)
_REG.update({n: F32 for n in ("float8e4nv", "float8e5", "float8e4b15", "float8e4b8",
                              "float8e5b16")})
_MEM.update({n: I8 for n in ("float8e4nv", "float8e5", "float8e4b15", "float8e4b8",
                             "float8e5b16")})


def reg_type(t: DType | PointerType) -> ir.Type:
    return PTR if isinstance(t, PointerType) else _REG[t.name]


def mem_type(t: DType) -> ir.Type:
    return _MEM[t.name]
