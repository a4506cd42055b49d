import triton
import triton.language as tl


@triton.jit
def row_cumsum(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr, REVERSE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0)
    tl.store(out_ptr + row * stride + cols, tl.cumsum(x, axis=0, reverse=REVERSE),
             mask=cols < n_cols)


@triton.jit
def row_cumprod_2d(x_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.cumprod(x, axis=1))


@triton.jit
def _linear_recurrence(a1, b1, a2, b2):
    # (a, b) pairs composing h -> a * h + b
    return a1 * a2, b1 * a2 + b2


@triton.jit
def linear_scan(a_ptr, b_ptr, h_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(a_ptr + offs, mask=m, other=1.0)
    b = tl.load(b_ptr + offs, mask=m, other=0.0)
    _, h = tl.associative_scan((a, b), axis=0, combine_fn=_linear_recurrence)
    tl.store(h_ptr + offs, h, mask=m)


@triton.jit
def row_argmax(x_ptr, val_ptr, idx_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf"))
    v, i = tl.max(x, axis=0, return_indices=True)
    tl.store(val_ptr + row, v)
    tl.store(idx_ptr + row, i)
    j = tl.argmin(tl.where(cols < n_cols, x, float("inf")), axis=0)
    tl.store(idx_ptr + tl.num_programs(0) + row, j)


@triton.jit
def _welford_combine(mean_1, m2_1, weight_1, mean_2, m2_2, weight_2):
    delta = mean_2 - mean_1
    new_weight = weight_1 + weight_2
    w2_over_w = tl.where(new_weight == 0.0, 0.0, weight_2 / new_weight)
    return (mean_1 + delta * w2_over_w,
            m2_1 + m2_2 + delta * delta * weight_1 * w2_over_w,
            new_weight)


@triton.jit
def welford_var_mean(x_ptr, mean_ptr, var_ptr, n_rows, n_cols, BLOCK_R: tl.constexpr,
                     BLOCK_C: tl.constexpr):
    # per-row mean and variance with a tuple reduction, loop over column blocks
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < n_rows
    mean = tl.zeros([BLOCK_R, BLOCK_C], tl.float32)
    m2 = tl.zeros([BLOCK_R, BLOCK_C], tl.float32)
    weight = tl.zeros([BLOCK_R, BLOCK_C], tl.float32)
    for c0 in range(0, n_cols, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mask = rmask[:, None] & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :], mask=mask, other=0.0)
        x = x.to(tl.float32)
        new_weight = tl.where(mask, weight + 1, weight)
        delta = x - mean
        mean = tl.where(mask, mean + delta / tl.where(new_weight == 0, 1.0, new_weight), mean)
        m2 = tl.where(mask, m2 + delta * (x - mean), m2)
        weight = new_weight
    mean_r, m2_r, w_r = tl.reduce((mean, m2, weight), 1, _welford_combine)
    tl.store(mean_ptr + rows, mean_r, mask=rmask)
    tl.store(var_ptr + rows, m2_r / w_r, mask=rmask)
