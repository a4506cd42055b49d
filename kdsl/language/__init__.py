"""The kernel language: builtins (`kd.load`, `kd.dot`, ...), dtypes, `constexpr` and
`static_range`. Semantics live in `semantic.py`; docs/language.md describes every name."""

from __future__ import annotations

from .block_ptr import tensor_descriptor
from .core import (
    abs,
    advance,
    arange,
    argmax,
    argmin,
    associative_scan,
    assume,
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
    cumprod,
    cumsum,
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
    inline_asm_elementwise,
    int1,
    int8,
    int16,
    int32,
    int64,
    load,
    load_tensor_descriptor,
    log,
    log2,
    make_block_ptr,
    make_tensor_descriptor,
    max,
    max_constancy,
    max_contiguous,
    maximum,
    min,
    minimum,
    multiple_of,
    num_programs,
    permute,
    pointer_type,
    program_id,
    range,
    reduce,
    reduce_or,
    reshape,
    rsqrt,
    sigmoid,
    sin,
    softmax,
    sqrt,
    static_assert,
    static_range,
    store,
    store_tensor_descriptor,
    sum,
    tanh,
    trans,
    uint8,
    uint16,
    uint32,
    uint64,
    view,
    where,
    xor_sum,
    zeros,
    zeros_like,
)
from .type_objects import (
    block_type,
    const,
    constexpr_type,
    dtype,
    tensor,
    tuple,
    tuple_type,
    void,
)

__all__ = [  # noqa: RUF022  (grouped as in docs/language.md)
    # indexing
    "program_id", "num_programs", "arange", "cdiv",
    # creation
    "zeros", "zeros_like", "full",
    # memory
    "load", "store", "atomic_add", "make_block_ptr", "advance", "make_tensor_descriptor",
    "load_tensor_descriptor", "store_tensor_descriptor", "tensor_descriptor",
    # math
    "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "sin", "cos", "tanh", "erf",
    "sigmoid", "floor", "ceil", "maximum", "minimum", "clamp", "where", "fma",
    # reductions
    "sum", "max", "min", "argmax", "argmin", "reduce", "xor_sum", "reduce_or", "softmax",
    # scans
    "cumsum", "cumprod", "associative_scan",
    # matrix
    "dot", "trans", "permute",
    # hints
    "multiple_of", "max_contiguous", "max_constancy", "assume",
    # shape
    "expand_dims", "reshape", "view", "broadcast_to", "broadcast",
    # types
    "float16", "bfloat16", "float32", "float64", "int1", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "pointer_type", "cast", "constexpr",
    "tensor", "dtype", "block_type", "void", "tuple", "tuple_type", "constexpr_type", "const",
    # compile time
    "static_range", "static_assert", "range",
    # not supported (a CompilationError naming the line)
    "inline_asm_elementwise",
]
