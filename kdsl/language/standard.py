"""Library builtins built from other builtins: `sort`, `topk`, `bitonic_merge` (a bitonic
network, the same one as Triton's, so ties such as -0.0 and 0.0 land where Triton puts them)
and `swizzle2d`.

The network works on the last dim of x viewed as [R, L] (R = the other dims).  A
compare-and-swap at distance 2**j pairs column c with column c ^ 2**j (a `gather` along the
last dim): the lower element of a pair keeps the smaller value unless its block sorts
descending.  The distances and stages are runtime loops over one compare-and-swap, so the code
stays small for any size (an unrolled network of 55 steps for 1024 elements takes GPU and
OpenCL compilers tens of seconds, one pair of barriers per step); the comparisons are the same
as Triton's unrolled network, so the results are too.
"""

from __future__ import annotations

from typing import Any

from . import core as kd
from . import semantic
from .core import TILE_METHODS, builtin
from .library import kd_function


def _log2(n: int, what: str) -> int:
    if n < 1 or n & (n - 1):
        raise semantic.error(f"{what} must be a power of two, got {n}")
    return n.bit_length() - 1


def _order(descending: Any, what: str) -> bool:
    if semantic.is_value(descending):
        raise semantic.error(f"{what}: descending must be a compile-time bool, got "
                             f"{semantic.describe(descending)}")
    return bool(descending)


def _sort_dims(x: Any, dim: Any, what: str) -> int:
    """log2 of the sorted (last) dim of x, after checking x and dim."""
    if not semantic.is_value(x) or not x.shape:
        raise semantic.error(f"{what} needs a tile, got {semantic.describe(x)}")
    if x.type.is_ptr:
        raise semantic.error(f"{what} is not defined on pointers")
    rank = x.type.rank
    if dim is not None:
        d = semantic._constexpr_int(dim, f"{what} dim")
        if d % rank != rank - 1 or not -rank <= d < rank:
            raise semantic.error(f"{what} works along the last dim only (dim={rank - 1} or "
                                 f"-1), got dim={d} for shape {list(x.shape)}")
    return _log2(x.shape[-1], f"{what}: the size of the last dim")


@kd_function
def _columns(rows, cols):
    """int32 [rows, cols]: each element's column."""
    return kd.arange(0, cols)[None, :] + kd.zeros((rows, cols), kd.int32)


@kd_function
def _merge(h, stage, down_bits):
    """Bitonic merge of the blocks of 2**stage elements along the last dim of h [R, L]: a
    compare-and-swap at each distance 2**j, j = stage-1 .. 0 (a runtime loop). A block sorts
    descending where bit `stage` of `down_bits` (per element) is set."""
    col = _columns(h.shape[0], h.shape[1])
    down = (down_bits >> stage) & 1
    for i in range(stage):
        j = stage - 1 - i
        partner = kd.gather(h, col ^ (1 << j), 1)
        upper = (col >> j) & 1  # the element is the upper one of its pair
        h = kd.where((h > partner) != (down ^ upper), partner, h)
    return h


@kd_function
def _bitonic_topk(x, log_n, log_k, descending):
    """The first 2**log_k elements of each row of x, sorted (all of them when log_k == log_n):
    sort blocks of 2**log_k alternately up and down, then repeatedly keep the greater (smaller)
    of each two neighbouring blocks, which is a bitonic sequence, and merge it.  Bit
    log2(L) of col + descending * L is the final order; bit s < log2(L) alternates the blocks of
    stage s."""
    n = 1 << log_n
    k = 1 << log_k
    rows = x.numel // n
    h = kd.reshape(x, (rows, n))
    down_bits = _columns(rows, n) + descending * n
    for s in range(1, log_k + 1):
        h = _merge(h, s, down_bits)
    for _ in kd.static_range(log_k, log_n):
        pairs = kd.reshape(h, (rows, h.shape[1] // (2 * k), 2, k))
        if descending:
            h = kd.max(pairs, 2)
        else:
            h = kd.min(pairs, 2)
        cols = h.shape[1] * k
        h = _merge(kd.reshape(h, (rows, cols)), log_k, _columns(rows, cols) + descending * cols)
    return kd.reshape(h, x.shape[:-1] + (k,))


@builtin
def sort(x, dim=None, descending=0, _builder=None):
    """x sorted along its last dim (a power of two), ascending or descending."""
    log_n = _sort_dims(x, dim, "sort")
    return _bitonic_topk(x, log_n, log_n, _order(descending, "sort"), _builder=_builder)


@builtin
def topk(x, k, dim=None, _builder=None):
    """The k largest elements along the last dim, in descending order (k and the dim size are
    powers of two, k <= the dim size)."""
    log_n = _sort_dims(x, dim, "topk")
    k = semantic._constexpr_int(k, "topk k")
    log_k = _log2(k, "topk k")
    if log_k > log_n:
        raise semantic.error(f"topk: k = {k} exceeds the last dim ({x.shape[-1]})")
    return _bitonic_topk(x, log_n, log_k, True, _builder=_builder)


@builtin
def bitonic_merge(x, dim=None, descending=0, _builder=None):
    """Merge of a bitonic sequence along the last dim (a power of two) into sorted order: the
    last stage of the bitonic sort (on other inputs, what that network computes)."""
    log_n = _sort_dims(x, dim, "bitonic_merge")
    descending = _order(descending, "bitonic_merge")
    rows = x.type.numel >> log_n
    h = kd.reshape(x, (rows, 1 << log_n), _builder=_builder)
    down = _columns(rows, 1 << log_n, _builder=_builder)
    if descending:
        down = semantic.binary(_builder, "add", down, 1 << log_n)
    return kd.reshape(_merge(h, log_n, down, _builder=_builder), x.shape, _builder=_builder)


@kd_function
def swizzle2d(i, j, size_i, size_j, size_g):
    """Row-major indices (i, j) of a size_i x size_j grid renumbered column-major within each
    group of size_g rows (the last group may have fewer rows): program ids grouped so that
    neighbouring programs share rows and columns of a matmul."""
    per_group = size_g * size_j  # elements in a full group of rows
    flat = i * size_j + j
    first_row = (flat // per_group) * size_g
    rows = min(size_i - first_row, size_g)
    within = flat % per_group
    return first_row + within % rows, within // rows


# `x.sort()`, as in Triton (the method table lives in core.py, which cannot import this module).
TILE_METHODS["sort"] = sort
