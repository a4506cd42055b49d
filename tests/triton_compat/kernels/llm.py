import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def rms_norm_fwd(Y, Y_row_stride, X, X_row_stride, W, RSTD, n_cols, eps, offset,
                 BLOCK_SIZE: tl.constexpr):
    # as in production kernel libraries: fp32 statistics, casts back to the input type
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    X_row = tl.load(X + row * X_row_stride + cols, mask=mask, other=0)
    X_dtype = X_row.dtype
    W_row = tl.load(W + cols, mask=mask, other=0)
    X_row = X_row.to(tl.float32)
    mean_square = tl.sum(X_row * X_row, axis=0) / n_cols
    rstd = libdevice.rsqrt(mean_square + eps)
    tl.store(RSTD + row, rstd)
    X_row = X_row * rstd
    X_row = X_row.to(X_dtype)
    Y_row = X_row * (offset + W_row)
    tl.store(Y + row * Y_row_stride + cols, Y_row, mask=mask)


@triton.jit
def silu(x):
    return x * tl.sigmoid(x)


@triton.jit
def swiglu_fwd(a_ptr, b_ptr, c_ptr, stride, n_cols: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    program_id = tl.program_id(0).to(tl.int64)
    a_ptr += program_id * stride
    b_ptr += program_id * stride
    c_ptr += program_id * stride
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    a_row = tl.load(a_ptr + col_offsets, mask=mask, other=0).to(tl.float32)
    b_row = tl.load(b_ptr + col_offsets, mask=mask, other=0)
    c_row = silu(a_row).cast(b_row.dtype) * b_row
    tl.store(c_ptr + col_offsets, c_row, mask=mask)


@triton.jit
def geglu_fwd(a, b, c, stride, n_cols: tl.constexpr, BLOCK_SIZE: tl.constexpr,
              APPROXIMATE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < n_cols
    x = tl.load(a + row * stride + offs, mask=mask, other=0).to(tl.float32)
    g = tl.load(b + row * stride + offs, mask=mask, other=0)
    if APPROXIMATE:
        sqrt_2_over_pi = 0.7978845608028654
        inner = sqrt_2_over_pi * (x + 0.044715 * x * x * x)
        gelu = 0.5 * x * (1 + libdevice.tanh(inner))
    else:
        gelu = 0.5 * x * (1 + libdevice.erf(x * 0.7071067811865476))
    tl.store(c + row * stride + offs, gelu.to(g.dtype) * g, mask=mask)


@triton.jit
def rope_fwd(q_ptr, q_row_stride, cos_ptr, cos_row_stride, sin_ptr, sin_row_stride, seq_len,
             n_qh: tl.constexpr, hd: tl.constexpr, pad_n_qh: tl.constexpr,
             pad_hd: tl.constexpr):
    # rotate-half RoPE over all heads of one token at once
    pid = tl.program_id(0)
    q_ptr = q_ptr + pid * q_row_stride
    cos_row_idx = pid % seq_len
    cos_ptr = cos_ptr + cos_row_idx * cos_row_stride
    sin_ptr = sin_ptr + cos_row_idx * sin_row_stride
    cos_offsets = tl.arange(0, pad_hd // 2)
    cos_mask = cos_offsets < hd // 2
    cos_row = tl.load(cos_ptr + cos_offsets, mask=cos_mask, other=0)
    sin_row = tl.load(sin_ptr + cos_offsets, mask=cos_mask, other=0)
    first_half = tl.arange(0, pad_n_qh)[:, None] * hd + tl.arange(0, pad_hd // 2)[None, :]
    first_mask = (tl.arange(0, pad_n_qh)[:, None] < n_qh) & (tl.arange(0, pad_hd // 2)[None, :] < hd // 2)
    q1 = tl.load(q_ptr + first_half, mask=first_mask, other=0).to(sin_row.dtype)
    second_half = first_half + (hd // 2)
    q2 = tl.load(q_ptr + second_half, mask=first_mask, other=0).to(sin_row.dtype)
    new_q1 = q1 * cos_row - q2 * sin_row
    tl.store(q_ptr + first_half, new_q1, mask=first_mask)
    new_q2 = q2 * cos_row + q1 * sin_row
    tl.store(q_ptr + second_half, new_q2, mask=first_mask)


@triton.jit
def cross_entropy_fwd_bwd(X_ptr, X_stride, Y_ptr, loss_ptr, n_cols, ignore_index,
                          BLOCK_SIZE: tl.constexpr):
    # online logsumexp over the vocabulary, then the gradient written over the logits
    program_id = tl.program_id(0).to(tl.int64)
    Y_ptr += program_id
    y = tl.load(Y_ptr)
    X_ptr += program_id * X_stride
    if y == ignore_index:
        for i in range(0, n_cols, BLOCK_SIZE):
            X_offsets = i + tl.arange(0, BLOCK_SIZE)
            tl.store(X_ptr + X_offsets, 0.0, mask=X_offsets < n_cols)
        return
    loss_ptr += program_id
    m = float("-inf")
    d = 0.0
    ori_X_y = tl.load(X_ptr + y).cast(tl.float32)
    for i in range(0, n_cols, BLOCK_SIZE):
        X_offsets = i + tl.arange(0, BLOCK_SIZE)
        X_block = tl.load(X_ptr + X_offsets, mask=X_offsets < n_cols,
                          other=float("-inf")).cast(tl.float32)
        block_max = tl.max(X_block)
        m_new = tl.maximum(m, block_max)
        d = d * tl.exp(m - m_new) + tl.sum(tl.exp(X_block - m_new))
        m = m_new
    lse = m + tl.log(d)
    for i in range(0, n_cols, BLOCK_SIZE):
        X_offsets = i + tl.arange(0, BLOCK_SIZE)
        X_block = tl.load(X_ptr + X_offsets, mask=X_offsets < n_cols,
                          other=float("-inf")).cast(tl.float32)
        X_block = tl.exp(X_block - m) / d
        X_block = tl.where(X_offsets == y, X_block - 1.0, X_block)
        tl.store(X_ptr + X_offsets, X_block, mask=X_offsets < n_cols)
    loss = lse - ori_X_y
    tl.store(loss_ptr, loss)
