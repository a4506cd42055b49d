"""Row normalisations: `layer_norm(x, weight, bias, eps)` and `rms_norm(x, weight, eps)`.

One program per row over the last dimension (leading dimensions are flattened, and read
through a row stride: a slice of rows or of a wider buffer is read in place).  A row that fits
`configs.FUSED_ROW_MAX` is one tile (`*_row_kernel`: no accumulator tiles, each statistic one
reduction of the loaded row); a longer one is walked in tiles of BLOCK, its statistics
accumulated per lane and reduced at the end.  On CPU profiles float32 rows from 1024 on are
walked too, in 256-wide steps (`configs.norm_block`: faster than the tile's stack copy).
Statistics are float32 whatever the input dtype: mean, then the centred variance (two
passes: no cancellation), then the output pass, stored in the input dtype.  weight and bias
may have any float dtype (often float32 with float16 activations); they are read as float32.
"""

from __future__ import annotations

import math
from typing import Any

import kdsl as kd

from . import configs
from ._validate import (
    FLOATS,
    as_arg,
    check_shape,
    finite_float,
    next_pow2,
    output,
    reshaped,
    resolve_backend,
    returned,
    row_layout,
)


@kd.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, x_row_stride, eps, BLOCK: kd.constexpr):
    row = kd.program_id(0).to(kd.int64)  # row * stride may pass 2**31 (kernels/_index.py)
    x_ptr += row * x_row_stride
    y_ptr += row * N
    acc = kd.zeros((BLOCK,), kd.float32)
    for off in range(0, N, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        acc += kd.load(x_ptr + cols, mask=cols < N, other=0.0).to(kd.float32)
    mean = kd.sum(acc, axis=0) / N
    acc2 = kd.zeros((BLOCK,), kd.float32)
    for off in range(0, N, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        x = kd.load(x_ptr + cols, mask=cols < N, other=0.0).to(kd.float32)
        d = kd.where(cols < N, x - mean, 0.0)
        acc2 += d * d
    rstd = 1.0 / kd.sqrt(kd.sum(acc2, axis=0) / N + eps)
    for off in range(0, N, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        mask = cols < N
        # the next row's input and output lines, fetched while this row computes (hints:
        # past the last row nothing is read, nothing faults); here rather than in the
        # variance pass: 8192 x 4096, out=, 12.5-12.9 against 13.2-13.7 ms (2026-12-03)
        kd.prefetch(x_ptr + x_row_stride + cols)
        kd.prefetch(y_ptr + N + cols)
        w = kd.load(w_ptr + cols, mask=mask, other=0.0).to(kd.float32)
        b = kd.load(b_ptr + cols, mask=mask, other=0.0).to(kd.float32)
        x = kd.load(x_ptr + cols, mask=mask, other=0.0).to(kd.float32)
        kd.store(y_ptr + cols, (x - mean) * rstd * w + b, mask=mask)


@kd.jit
def rms_norm_kernel(x_ptr, w_ptr, y_ptr, N, x_row_stride, eps, BLOCK: kd.constexpr):
    row = kd.program_id(0).to(kd.int64)  # row * stride may pass 2**31 (kernels/_index.py)
    x_ptr += row * x_row_stride
    y_ptr += row * N
    acc = kd.zeros((BLOCK,), kd.float32)
    for off in range(0, N, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        x = kd.load(x_ptr + cols, mask=cols < N, other=0.0).to(kd.float32)
        acc += x * x
    rstd = 1.0 / kd.sqrt(kd.sum(acc, axis=0) / N + eps)
    for off in range(0, N, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        mask = cols < N
        kd.prefetch(x_ptr + x_row_stride + cols)  # the next row, as in layer_norm_kernel
        kd.prefetch(y_ptr + N + cols)
        w = kd.load(w_ptr + cols, mask=mask, other=0.0).to(kd.float32)
        x = kd.load(x_ptr + cols, mask=mask, other=0.0).to(kd.float32)
        kd.store(y_ptr + cols, x * rstd * w, mask=mask)


@kd.jit
def layer_norm_row_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, x_row_stride, eps, BLOCK: kd.constexpr):
    row = kd.program_id(0).to(kd.int64)
    cols = kd.arange(0, BLOCK)
    mask = cols < N
    x = kd.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(kd.float32)
    mean = kd.sum(x, axis=0) / N
    d = kd.where(mask, x - mean, 0.0)
    rstd = 1.0 / kd.sqrt(kd.sum(d * d, axis=0) / N + eps)
    w = kd.load(w_ptr + cols, mask=mask, other=0.0).to(kd.float32)
    b = kd.load(b_ptr + cols, mask=mask, other=0.0).to(kd.float32)
    kd.store(y_ptr + row * N + cols, d * rstd * w + b, mask=mask)


@kd.jit
def rms_norm_row_kernel(x_ptr, w_ptr, y_ptr, N, x_row_stride, eps, BLOCK: kd.constexpr):
    row = kd.program_id(0).to(kd.int64)
    cols = kd.arange(0, BLOCK)
    mask = cols < N
    x = kd.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(kd.float32)
    rstd = 1.0 / kd.sqrt(kd.sum(x * x, axis=0) / N + eps)
    w = kd.load(w_ptr + cols, mask=mask, other=0.0).to(kd.float32)
    kd.store(y_ptr + row * N + cols, x * rstd * w, mask=mask)


def _block(n: int, backend: str) -> int:
    """The backward kernels' tile (kernels/norms_backward.py): the row up to FUSED_ROW_MAX."""
    return next_pow2(n) if n <= configs.FUSED_ROW_MAX else configs.row_loop_block(backend)


def _launch(row_kernel: Any, loop_kernel: Any, n: int, rows: int, be: str, dtype: str,
            *args: Any, **meta: Any) -> None:
    """The whole-row kernel when the row fits one tile (configs.norm_block), else the one
    walking it in tiles."""
    block, walk = configs.norm_block(be, n, dtype)
    kern = loop_kernel if walk else row_kernel
    kern[(rows,)](*args, BLOCK=block, backend=be, **configs.pick(configs.ROW, be, block), **meta)


def _rows(x_in: Any, weight: Any, *more: tuple[str, Any]):
    x = as_arg("x", x_in, FLOATS, strided=True)
    if x.ndim == 0:
        raise ValueError("x: expected at least a 1-D array, got a scalar")
    n = x.shape[-1]
    params = [as_arg("weight", weight, FLOATS, ndim=1)]
    params += [as_arg(name, v, FLOATS, ndim=1) for name, v in more]
    for p in params:
        check_shape(p, (n,), "the last dimension of x")
    rows = math.prod(x.shape[:-1])
    return x, params, n, rows


def layer_norm(x: Any, weight: Any, bias: Any, eps: float = 1e-5,
               backend: str | None = None, out: Any = None) -> Any:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dimension of `x` (written
    into `out` when given: x's shape and dtype, contiguous, not overlapping an input)."""
    x, (w, b), n, rows = _rows(x, weight, ("bias", bias))
    eps = finite_float("eps", eps)
    be = resolve_backend(backend, x, w, b)
    y = output(out, x, x.shape, x.dtype, (x, w, b))
    if n and rows:
        xin, stride = row_layout(x)
        _launch(layer_norm_row_kernel, layer_norm_kernel, n, rows, be, x.dtype, xin.kernel_arg,
                w.kernel_arg, b.kernel_arg, reshaped(y, (rows, n)).kernel_arg, n, stride, eps)
    return returned(y, out)


def rms_norm(x: Any, weight: Any, eps: float = 1e-6, backend: str | None = None,
             out: Any = None) -> Any:
    """x / sqrt(mean(x**2) + eps) * weight over the last dimension of `x` (into `out` when
    given, as layer_norm)."""
    x, (w,), n, rows = _rows(x, weight)
    eps = finite_float("eps", eps)
    be = resolve_backend(backend, x, w)
    y = output(out, x, x.shape, x.dtype, (x, w))
    if n and rows:
        xin, stride = row_layout(x)
        _launch(rms_norm_row_kernel, rms_norm_kernel, n, rows, be, x.dtype, xin.kernel_arg,
                w.kernel_arg, reshaped(y, (rows, n)).kernel_arg, n, stride, eps)
    return returned(y, out)
