import triton
import triton.language as tl


@triton.jit
def mxfp4_mxfp8_matmul(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr, M, N, K,
                       stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # C = (A * 2**sa) @ (B * 2**sb): A e2m1 packed two per byte along K, B e4m3 codes,
    # one e8m0 scale per 32 elements of K for each row of A and each column of B
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rka = tl.arange(0, BLOCK_K // 2)
    rkb = tl.arange(0, BLOCK_K)
    rks = tl.arange(0, BLOCK_K // 32)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(tl.cdiv(K, BLOCK_K)):
        ka = k * (BLOCK_K // 2) + rka
        kb = k * BLOCK_K + rkb
        ks = k * (BLOCK_K // 32) + rks
        a = tl.load(a_ptr + rm[:, None] * stride_am + ka[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (ka[None, :] < K // 2), other=0)
        b = tl.load(b_ptr + kb[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(kb[:, None] < K) & (rn[None, :] < N), other=0)
        sa = tl.load(a_scale_ptr + rm[:, None] * (K // 32) + ks[None, :],
                     mask=(rm[:, None] < M) & (ks[None, :] < K // 32), other=127)
        sb = tl.load(b_scale_ptr + rn[:, None] * (K // 32) + ks[None, :],
                     mask=(rn[:, None] < N) & (ks[None, :] < K // 32), other=127)
        acc = tl.dot_scaled(a, sa, "e2m1", b, sb, "e4m3", acc)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _leaky_or_clip(x, slope, limit):
    if x > limit:
        return limit, 2
    elif x < 0:
        return x * slope, 1
    return x, 0


@triton.jit
def piecewise_activation(x_ptr, y_ptr, region_ptr, n, slope, limit, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y, region = tl.map_elementwise(_leaky_or_clip, x, slope, limit)
    tl.store(y_ptr + offs, y, mask=mask)
    tl.store(region_ptr + offs, region, mask=mask)
