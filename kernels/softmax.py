"""Row softmax: `softmax(x, axis=-1)`, and its gradient `softmax_backward(dy, y, axis=-1)`.

One program per row.  A row of up to `configs.FUSED_ROW_MAX` elements is held in one tile and
read once (fused: max, exp, sum, times the reciprocal of the sum).  Longer rows use the online
form: a first pass keeps a running maximum and a running sum rescaled whenever the maximum
grows, a second pass writes exp(x - max) * (1 / sum).  On CPU backends a float32 row of 64
elements or more takes three passes instead (`softmax_scratch_kernel`): the maximum, then
exp(x - max) written into the output row as scratch while it is summed, then the row scaled
in place; one
exp per element and no row-sized tile (the fused kernel copies the row into a stack tile and
the exps into a second one, 48 KiB of a 4096-wide row's working set against the 32 KiB of x
and y: 1.2-1.6x faster measured on Emerald Rapids, more on short rows).  Statistics are
float32 for every input dtype; the output has the input's (or goes into the caller's `out=`).
Leading dimensions are flattened into rows, read through a row stride (a slice of rows or
of a wider buffer is read in place); any other axis is moved last by a copy (and the result
moved back), which costs one extra read and write of the array.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import kdsl as kd

from . import configs
from ._validate import (
    FLOATS,
    Arg,
    as_arg,
    empty,
    moved_axis,
    next_pow2,
    output,
    reshaped,
    resolve_backend,
    result,
    returned,
    row_layout,
    same_dtype,
)


@kd.jit
def softmax_fused_kernel(x_ptr, y_ptr, n_cols, x_row_stride, BLOCK: kd.constexpr):
    row = kd.program_id(0).to(kd.int64)  # row * stride may pass 2**31 (kernels/_index.py)
    cols = kd.arange(0, BLOCK)
    mask = cols < n_cols
    x = kd.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(kd.float32)
    num = kd.exp(x - kd.max(x, axis=0))
    # one division per row, then a product per element (a vector division per element was a
    # fifth of the row's time on a Zen 5 core): within an ulp of num / sum
    inv = 1.0 / kd.sum(num, axis=0)
    kd.store(y_ptr + row * n_cols + cols, num * inv, mask=mask)


@kd.jit
def softmax_online_kernel(x_ptr, y_ptr, n_cols, x_row_stride, BLOCK: kd.constexpr):
    row = kd.program_id(0).to(kd.int64)  # row * stride may pass 2**31 (kernels/_index.py)
    x_ptr += row * x_row_stride
    base = row * n_cols
    # Running row maximum `m` and sum `s` of exp(x - m), rescaled whenever the maximum grows:
    # one exp per element per pass, and the per-tile max/sum reductions vectorise.
    m = -float("inf")
    s = 0.0
    for off in range(0, n_cols, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        x = kd.load(x_ptr + cols, mask=cols < n_cols, other=-float("inf")).to(kd.float32)
        m_new = kd.maximum(m, kd.max(x, axis=0))
        # while every element so far is -inf, exp(-inf - -inf) would be nan: shift by 0 instead
        safe = kd.where(m_new == -float("inf"), 0.0, m_new)
        s = s * kd.exp(m - safe) + kd.sum(kd.exp(x - safe), axis=0)
        m = m_new
    inv = 1.0 / s
    for off in range(0, n_cols, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        mask = cols < n_cols
        x = kd.load(x_ptr + cols, mask=mask, other=-float("inf")).to(kd.float32)
        kd.store(y_ptr + base + cols, kd.exp(x - m) * inv, mask=mask)


@kd.jit
def softmax_scratch_kernel(x_ptr, y_ptr, n_cols, x_row_stride, BLOCK: kd.constexpr):
    # float32 only: the exps are stored in y's dtype and read back, which a 16-bit output
    # would round twice
    row = kd.program_id(0).to(kd.int64)  # row * stride may pass 2**31 (kernels/_index.py)
    x_ptr += row * x_row_stride
    y_ptr += row * n_cols
    top = kd.full((BLOCK,), -float("inf"), kd.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        top = kd.maximum(top, kd.load(x_ptr + cols, mask=cols < n_cols, other=-float("inf")))
    m = kd.max(top, axis=0)
    acc = kd.zeros((BLOCK,), kd.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        # the next row (the next program on this thread) is fetched while this one computes:
        # its input for the max pass, its output lines for the stores (a hint: the last row's
        # lines past the end are never read, nothing faults)
        kd.prefetch(x_ptr + x_row_stride + cols)
        kd.prefetch(y_ptr + n_cols + cols)
        num = kd.exp(kd.load(x_ptr + cols, mask=cols < n_cols, other=-float("inf")) - m)
        acc += num
        kd.store(y_ptr + cols, num, mask=cols < n_cols)
    inv = 1.0 / kd.sum(acc, axis=0)
    for off in range(0, n_cols, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        kd.store(y_ptr + cols, kd.load(y_ptr + cols, mask=cols < n_cols) * inv,
                 mask=cols < n_cols)


def _move_last(x: Arg, axis: int) -> Arg:
    """A contiguous copy of `x` with `axis` moved last."""
    return moved_axis(x, axis, -1)


def softmax(x: Any, axis: int = -1, backend: str | None = None, out: Any = None) -> Any:
    """Softmax of `x` along `axis` (float32/float16/bfloat16; output in x's dtype and kind,
    written into `out` when given: x's shape and dtype, contiguous, not overlapping x; with
    the last axis only)."""
    a = as_arg("x", x, FLOATS, strided=True)
    if a.ndim == 0:
        raise ValueError("x: expected at least a 1-D array, got a scalar")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) \
            or not -a.ndim <= axis < a.ndim:
        raise ValueError(f"axis: {axis!r} is out of range for a {a.ndim}-D array")
    axis = int(axis) % a.ndim
    be = resolve_backend(backend, a)
    if axis != a.ndim - 1:
        if out is not None:
            raise ValueError(f"out: only supported along the last axis (axis={a.ndim - 1} or "
                             f"-1), got axis={axis}")
        moved = _move_last(a, axis)
        out = softmax(result(moved), -1, be)
        back = as_arg("out", out, FLOATS)
        return result(_move_back(back, axis))
    n = a.shape[-1]
    rows = math.prod(a.shape[:-1])
    y = output(out, a, a.shape, a.dtype, (a,))
    if n == 0 or rows == 0:
        return returned(y, out)
    (xin, stride), yout = row_layout(a), reshaped(y, (rows, n))
    scratch = configs.scratch_row_block(be, n) if a.dtype == "float32" else None
    if scratch is not None:
        meta = configs.pick(configs.ROW, be, scratch)
        softmax_scratch_kernel[(rows,)](xin.kernel_arg, yout.kernel_arg, n, stride,
                                        BLOCK=scratch, backend=be, **meta)
    elif n <= configs.FUSED_ROW_MAX:
        block = next_pow2(n)
        meta = configs.pick(configs.ROW, be, block)
        softmax_fused_kernel[(rows,)](xin.kernel_arg, yout.kernel_arg, n, stride, BLOCK=block,
                                      backend=be, **meta)
    else:
        block = configs.row_loop_block(be)
        meta = configs.pick(configs.ROW, be, block)
        softmax_online_kernel[(rows,)](xin.kernel_arg, yout.kernel_arg, n, stride, BLOCK=block,
                                       backend=be, **meta)
    return returned(y, out)


def _move_back(y: Arg, axis: int) -> Arg:
    """Inverse of `_move_last`: the last axis back to `axis`, contiguous."""
    return moved_axis(y, -1, axis)


# ------------------------------------------------------------------------------ backward

@kd.jit
def softmax_backward_kernel(y_ptr, dy_ptr, dx_ptr, n_cols, y_row_stride, dy_row_stride,
                            BLOCK: kd.constexpr):
    # dx = y * (dy - sum(dy * y)): one pass for the row's dot product, one for dx (a row that
    # fits one tile is read from the cache the second time)
    row = kd.program_id(0).to(kd.int64)  # row * stride may pass 2**31 (kernels/_index.py)
    y_ptr += row * y_row_stride
    dy_ptr += row * dy_row_stride
    dx_ptr += row * n_cols
    acc = kd.zeros((BLOCK,), kd.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        mask = cols < n_cols
        y = kd.load(y_ptr + cols, mask=mask, other=0.0).to(kd.float32)
        acc += y * kd.load(dy_ptr + cols, mask=mask, other=0.0).to(kd.float32)
    dot = kd.sum(acc, axis=0)
    for off in range(0, n_cols, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        mask = cols < n_cols
        y = kd.load(y_ptr + cols, mask=mask, other=0.0).to(kd.float32)
        dy = kd.load(dy_ptr + cols, mask=mask, other=0.0).to(kd.float32)
        kd.store(dx_ptr + cols, y * (dy - dot), mask=mask)


def softmax_backward(dy: Any, y: Any, axis: int = -1, backend: str | None = None) -> Any:
    """Gradient of `softmax` with respect to its input, from the output gradient `dy` and the
    forward output `y`: y * (dy - sum(dy * y, axis)), in y's dtype and kind."""
    g = as_arg("dy", dy, FLOATS, strided=True)
    a = as_arg("y", y, FLOATS, strided=True)
    same_dtype(a, g)
    if g.shape != a.shape:
        raise ValueError(f"dy: expected y's shape {a.shape}, got {g.shape}")
    if a.ndim == 0:
        raise ValueError("y: expected at least a 1-D array, got a scalar")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) \
            or not -a.ndim <= axis < a.ndim:
        raise ValueError(f"axis: {axis!r} is out of range for a {a.ndim}-D array")
    axis = int(axis) % a.ndim
    be = resolve_backend(backend, a, g)
    if axis != a.ndim - 1:
        out = softmax_backward(result(_move_last(g, axis)), result(_move_last(a, axis)), -1, be)
        return result(_move_back(as_arg("out", out, FLOATS), axis))
    n = a.shape[-1]
    rows = math.prod(a.shape[:-1])
    out = empty(a, a.shape, a.dtype, "dx")
    if n and rows:
        (yin, ys), (gin, gs) = row_layout(a), row_layout(g)
        block = next_pow2(n) if n <= configs.FUSED_ROW_MAX else configs.row_loop_block(be)
        softmax_backward_kernel[(rows,)](yin.kernel_arg, gin.kernel_arg,
                                         reshaped(out, (rows, n)).kernel_arg, n, ys, gs,
                                         BLOCK=block, backend=be,
                                         **configs.pick(configs.ROW, be, block))
    return result(out)
