"""The kernel language: builtins (`kd.load`, `kd.dot`, ...), dtypes, `constexpr` and
`static_range`. Semantics live in `semantic.py`; docs/language.md describes every name."""

from __future__ import annotations

from . import extra, math
from .core import (
    abs,
    arange,
    argmax,
    argmin,
    atomic_add,
    bfloat16,
    broadcast,
    broadcast_to,
    cast,
    cdiv,
    ceil,
    clamp,
    constexpr,
    cos,
    dot,
    erf,
    exp,
    exp2,
    expand_dims,
    float16,
    float32,
    float64,
    floor,
    fma,
    full,
    int1,
    int8,
    int16,
    int32,
    int64,
    load,
    log,
    log2,
    max,
    max_contiguous,
    maximum,
    min,
    minimum,
    multiple_of,
    num_programs,
    permute,
    pointer_type,
    program_id,
    reduce,
    reshape,
    rsqrt,
    sigmoid,
    sin,
    sqrt,
    static_assert,
    static_range,
    store,
    sum,
    tanh,
    trans,
    uint8,
    uint16,
    uint32,
    uint64,
    view,
    where,
    zeros,
    zeros_like,
)
from .math import div_rn, fdiv, sqrt_rn, umulhi

__all__ = [  # noqa: RUF022  (grouped as in docs/language.md)
    # indexing
    "program_id", "num_programs", "arange", "cdiv",
    # creation
    "zeros", "zeros_like", "full",
    # memory
    "load", "store", "atomic_add",
    # math
    "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "sin", "cos", "tanh", "erf",
    "sigmoid", "floor", "ceil", "maximum", "minimum", "clamp", "where", "fma",
    "umulhi", "sqrt_rn", "div_rn", "fdiv", "math", "extra",
    # reductions
    "sum", "max", "min", "argmax", "argmin", "reduce",
    # matrix
    "dot", "trans", "permute",
    # hints
    "multiple_of", "max_contiguous",
    # shape
    "expand_dims", "reshape", "view", "broadcast_to", "broadcast",
    # types
    "float16", "bfloat16", "float32", "float64", "int1", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "pointer_type", "cast", "constexpr",
    # compile time
    "static_range", "static_assert",
]
