"""Gradients of the row normalisations: `layer_norm_backward(dy, x, weight, bias, eps)` ->
(dx, dweight, dbias) and `rms_norm_backward(dy, x, weight, eps)` -> (dx, dweight).

With xhat = (x - mean) * rstd (layer_norm) or x * rstd (rms_norm) and g = weight * dy:

    dx = rstd * (g - xhat * mean(g * xhat) [- mean(g)])      per row
    dweight = sum over rows of dy * xhat,  dbias = sum over rows of dy

The statistics are recomputed from x (the forward stores none).  dx needs one program per
row; the parameter gradients are column sums over every row.  They are made in two
deterministic steps instead of with atomics: a fixed number G of programs each take every
G-th row and accumulate their rows' dy * xhat (and dy) into their own float32 row of a
[G, N] buffer, then `column_sum_kernel` adds the G rows per column.  G does not depend on the
machine, so every backend adds in the same order.  Everything is accumulated in float32
whatever the input dtypes; dx has x's dtype, dweight weight's and dbias bias's.
"""

from __future__ import annotations

from typing import Any

import kdsl as kd

from . import configs
from ._validate import (
    FLOATS,
    as_arg,
    check_shape,
    empty,
    finite_float,
    next_pow2,
    reshaped,
    resolve_backend,
    result,
    row_layout,
    same_dtype,
    zeros,
)
from .norms import _block, _rows

# Programs sharing the rows of a parameter-gradient reduction (rows of the partial buffer).
GROUPS = 64


@kd.jit
def layer_norm_backward_kernel(x_ptr, w_ptr, dy_ptr, dx_ptr, dw_ptr, db_ptr, rows, N,
                               x_row_stride, dy_row_stride, eps, BLOCK: kd.constexpr):
    g = kd.program_id(0)
    groups = kd.num_programs(0)
    dw_ptr += g * N
    db_ptr += g * N
    for r in range(g, rows, groups):
        row = r.to(kd.int64)  # row * stride may pass 2**31 (kernels/_index.py)
        xr = x_ptr + row * x_row_stride
        dyr = dy_ptr + row * dy_row_stride
        acc = kd.zeros((BLOCK,), kd.float32)
        for off in range(0, N, BLOCK):
            cols = off + kd.arange(0, BLOCK)
            acc += kd.load(xr + cols, mask=cols < N, other=0.0).to(kd.float32)
        mean = kd.sum(acc, axis=0) / N
        acc = kd.zeros((BLOCK,), kd.float32)
        for off in range(0, N, BLOCK):
            cols = off + kd.arange(0, BLOCK)
            x = kd.load(xr + cols, mask=cols < N, other=0.0).to(kd.float32)
            d = kd.where(cols < N, x - mean, 0.0)
            acc += d * d
        rstd = 1.0 / kd.sqrt(kd.sum(acc, axis=0) / N + eps)
        c_gx = kd.zeros((BLOCK,), kd.float32)
        c_g = kd.zeros((BLOCK,), kd.float32)
        for off in range(0, N, BLOCK):
            cols = off + kd.arange(0, BLOCK)
            mask = cols < N
            x = kd.load(xr + cols, mask=mask, other=0.0).to(kd.float32)
            w = kd.load(w_ptr + cols, mask=mask, other=0.0).to(kd.float32)
            gr = w * kd.load(dyr + cols, mask=mask, other=0.0).to(kd.float32)
            c_gx += gr * kd.where(mask, (x - mean) * rstd, 0.0)
            c_g += gr
        m_gx = kd.sum(c_gx, axis=0) / N
        m_g = kd.sum(c_g, axis=0) / N
        for off in range(0, N, BLOCK):
            cols = off + kd.arange(0, BLOCK)
            mask = cols < N
            x = kd.load(xr + cols, mask=mask, other=0.0).to(kd.float32)
            w = kd.load(w_ptr + cols, mask=mask, other=0.0).to(kd.float32)
            dy = kd.load(dyr + cols, mask=mask, other=0.0).to(kd.float32)
            xhat = (x - mean) * rstd
            kd.store(dx_ptr + row * N + cols, rstd * (w * dy - xhat * m_gx - m_g), mask=mask)
            kd.store(dw_ptr + cols, kd.load(dw_ptr + cols, mask=mask) + dy * xhat, mask=mask)
            kd.store(db_ptr + cols, kd.load(db_ptr + cols, mask=mask) + dy, mask=mask)


@kd.jit
def rms_norm_backward_kernel(x_ptr, w_ptr, dy_ptr, dx_ptr, dw_ptr, rows, N, x_row_stride,
                             dy_row_stride, eps, BLOCK: kd.constexpr):
    g = kd.program_id(0)
    groups = kd.num_programs(0)
    dw_ptr += g * N
    for r in range(g, rows, groups):
        row = r.to(kd.int64)  # row * stride may pass 2**31 (kernels/_index.py)
        xr = x_ptr + row * x_row_stride
        dyr = dy_ptr + row * dy_row_stride
        acc = kd.zeros((BLOCK,), kd.float32)
        for off in range(0, N, BLOCK):
            cols = off + kd.arange(0, BLOCK)
            x = kd.load(xr + cols, mask=cols < N, other=0.0).to(kd.float32)
            acc += x * x
        rstd = 1.0 / kd.sqrt(kd.sum(acc, axis=0) / N + eps)
        c_gx = kd.zeros((BLOCK,), kd.float32)
        for off in range(0, N, BLOCK):
            cols = off + kd.arange(0, BLOCK)
            mask = cols < N
            x = kd.load(xr + cols, mask=mask, other=0.0).to(kd.float32)
            w = kd.load(w_ptr + cols, mask=mask, other=0.0).to(kd.float32)
            dy = kd.load(dyr + cols, mask=mask, other=0.0).to(kd.float32)
            c_gx += w * dy * x * rstd
        m_gx = kd.sum(c_gx, axis=0) / N
        for off in range(0, N, BLOCK):
            cols = off + kd.arange(0, BLOCK)
            mask = cols < N
            x = kd.load(xr + cols, mask=mask, other=0.0).to(kd.float32)
            w = kd.load(w_ptr + cols, mask=mask, other=0.0).to(kd.float32)
            dy = kd.load(dyr + cols, mask=mask, other=0.0).to(kd.float32)
            xhat = x * rstd
            kd.store(dx_ptr + row * N + cols, rstd * (w * dy - xhat * m_gx), mask=mask)
            kd.store(dw_ptr + cols, kd.load(dw_ptr + cols, mask=mask) + dy * xhat, mask=mask)


@kd.jit
def column_sum_kernel(p_ptr, out_ptr, R, N, BLOCK: kd.constexpr):
    """out[n] = sum over r of p[r, n] (float32, in row order), one program per BLOCK columns."""
    cols = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    mask = cols < N
    acc = kd.zeros((BLOCK,), kd.float32)
    for r in range(R):
        acc += kd.load(p_ptr + r * N + cols, mask=mask, other=0.0)
    kd.store(out_ptr + cols, acc, mask=mask)


def _grad_rows(dy: Any, x: Any, weight: Any, *more: tuple[str, Any]):
    x_, params, n, rows = _rows(x, weight, *more)
    g = as_arg("dy", dy, FLOATS, strided=True)
    check_shape(g, x_.shape, "x's shape")
    same_dtype(x_, g)
    return g, x_, params, n, rows


def _column_sums(partial: Any, like: Any, dtype: str, name: str, groups: int, n: int,
                 backend: str) -> Any:
    out = empty(like, (n,), dtype, name)
    block = min(1024, next_pow2(n))
    column_sum_kernel[(kd.cdiv(n, block),)](partial.kernel_arg, out.kernel_arg, groups, n,
                                            BLOCK=block, backend=backend,
                                            **configs.pick(configs.ROW, backend, block))
    return out


def layer_norm_backward(dy: Any, x: Any, weight: Any, bias: Any, eps: float = 1e-5,
                        backend: str | None = None) -> tuple[Any, Any, Any]:
    """(dx, dweight, dbias) of `layer_norm(x, weight, bias, eps)` for output gradient dy."""
    g, x_, (w, b), n, rows = _grad_rows(dy, x, weight, ("bias", bias))
    eps = finite_float("eps", eps)
    be = resolve_backend(backend, g, x_, w, b)
    dx = empty(x_, x_.shape, x_.dtype, "dx")
    groups = max(1, min(GROUPS, rows))
    dwp = zeros(x_, (groups, n), "float32", "dweight")
    dbp = zeros(x_, (groups, n), "float32", "dbias")
    if n and rows:
        block = _block(n, be)
        (xin, xs), (gin, gs) = row_layout(x_), row_layout(g)
        layer_norm_backward_kernel[(groups,)](
            xin.kernel_arg, w.kernel_arg, gin.kernel_arg, reshaped(dx, (rows, n)).kernel_arg,
            dwp.kernel_arg, dbp.kernel_arg, rows, n, xs, gs, eps, BLOCK=block, backend=be,
            **configs.pick(configs.ROW, be, block))
    if not n:
        return result(dx), result(empty(w, (0,), w.dtype)), result(empty(b, (0,), b.dtype))
    dw = _column_sums(dwp, w, w.dtype, "dweight", groups, n, be)
    db = _column_sums(dbp, b, b.dtype, "dbias", groups, n, be)
    return result(dx), result(dw), result(db)


def rms_norm_backward(dy: Any, x: Any, weight: Any, eps: float = 1e-6,
                      backend: str | None = None) -> tuple[Any, Any]:
    """(dx, dweight) of `rms_norm(x, weight, eps)` for output gradient dy."""
    g, x_, (w,), n, rows = _grad_rows(dy, x, weight)
    eps = finite_float("eps", eps)
    be = resolve_backend(backend, g, x_, w)
    dx = empty(x_, x_.shape, x_.dtype, "dx")
    groups = max(1, min(GROUPS, rows))
    dwp = zeros(x_, (groups, n), "float32", "dweight")
    if n and rows:
        block = _block(n, be)
        (xin, xs), (gin, gs) = row_layout(x_), row_layout(g)
        rms_norm_backward_kernel[(groups,)](
            xin.kernel_arg, w.kernel_arg, gin.kernel_arg, reshaped(dx, (rows, n)).kernel_arg,
            dwp.kernel_arg, rows, n, xs, gs, eps, BLOCK=block, backend=be,
            **configs.pick(configs.ROW, be, block))
    if not n:
        return result(dx), result(empty(w, (0,), w.dtype))
    return result(dx), result(_column_sums(dwp, w, w.dtype, "dweight", groups, n, be))
