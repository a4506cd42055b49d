"""The kernel language: builtins (`kd.load`, `kd.dot`, ...), dtypes, `constexpr` and
`static_range`. Semantics live in `semantic.py`; docs/language.md describes every name."""

from __future__ import annotations

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
    cat,
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
    flip,
    float16,
    float32,
    float64,
    floor,
    fma,
    full,
    gather,
    histogram,
    int1,
    int8,
    int16,
    int32,
    int64,
    interleave,
    join,
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
    ravel,
    reduce,
    reshape,
    rsqrt,
    sigmoid,
    sin,
    split,
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
from .random import (
    pair_uniform_to_normal,
    philox,
    philox_impl,
    rand,
    rand4x,
    randint,
    randint4x,
    randn,
    randn4x,
    uint_to_uniform_float,
)
from .standard import bitonic_merge, sort, swizzle2d, topk

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
    # reductions
    "sum", "max", "min", "argmax", "argmin", "reduce",
    # matrix
    "dot", "trans", "permute",
    # hints
    "multiple_of", "max_contiguous",
    # shape
    "expand_dims", "reshape", "view", "broadcast_to", "broadcast",
    "split", "join", "interleave", "cat", "flip", "ravel", "gather", "histogram",
    # sorting and indices (kd-language library functions)
    "sort", "topk", "bitonic_merge", "swizzle2d",
    # random numbers
    "philox", "philox_impl", "randint", "randint4x", "rand", "rand4x", "randn", "randn4x",
    "uint_to_uniform_float", "pair_uniform_to_normal",
    # types
    "float16", "bfloat16", "float32", "float64", "int1", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "pointer_type", "cast", "constexpr",
    # compile time
    "static_range", "static_assert",
]
