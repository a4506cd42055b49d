"""Triton-form kernels for the static GPU comparison (benchmarks/gpu_static.py): the same text
is compiled by Triton and, after the mechanical rename (`kdsl port`), by kdsl.

They follow the structure of Triton's tutorials (written here, not copied): a matmul that walks
K with pointer increments and masks only the K edge, and a fused row softmax.
"""

import triton
import triton.language as tl


@triton.jit
def tutorial_matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                    stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_n
    group_first = (pid // per_group) * GROUP_M
    rows_in_group = min(num_m - group_first, GROUP_M)
    pid_m = group_first + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group
    # rows and columns wrap around (modulo) instead of being masked: only K has an edge
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    # the wrapped indices are still runs of BLOCK contiguous values: say so, for vector loads
    rm = tl.max_contiguous(tl.multiple_of(rm, BLOCK_M), BLOCK_M)
    rn = tl.max_contiguous(tl.multiple_of(rn, BLOCK_N), BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_tile = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, BLOCK_K)):
        left = K - kk * BLOCK_K
        a = tl.load(a_tile, mask=rk[None, :] < left, other=0.0)
        b = tl.load(b_tile, mask=rk[:, None] < left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk
    out = acc.to(tl.float16)
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :] * stride_cn, out,
             mask=(cm[:, None] < M) & (cn[None, :] < N))


@triton.jit
def fused_softmax(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols,
                  BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    valid = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=valid, other=-float("inf"))
    x = x.to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(tl.float16), mask=valid)
