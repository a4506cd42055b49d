"""Kernels in the style of Triton's tutorials, run on every available backend and checked against
float64 NumPy references: vector add, fused softmax, grouped matmul, layer norm, and an
online-softmax attention forward."""

import numpy as np
import pytest

import kdsl as kd
from kdsl.testing import assert_close

RNG = np.random.default_rng(0)


# ------------------------------------------------------------------------------- vector add


@kd.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: kd.constexpr):
    pid = kd.program_id(0)
    offs = pid * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=m) + kd.load(y_ptr + offs, mask=m), mask=m)


def test_contract_example(backend):
    x = np.random.rand(10_000).astype(np.float32)
    y = np.ones_like(x)
    out = np.empty_like(x)
    add[(kd.cdiv(x.size, 1024),)](x, y, out, x.size, BLOCK=1024, backend=backend)
    assert_close(out, x.astype(np.float64) + 1)
    out2 = np.zeros_like(x)
    add[lambda meta: (kd.cdiv(x.size, meta["BLOCK"]),)](x, y, out2, x.size, BLOCK=256,
                                                        backend=backend)
    assert_close(out2, x.astype(np.float64) + 1)


@pytest.mark.parametrize("n", [1, 127, 1000, 4097])
def test_vector_add_ragged(backend, n):
    x = RNG.standard_normal(n).astype(np.float32)
    y = RNG.standard_normal(n).astype(np.float32)
    out = np.full(n + 8, -7.0, np.float32)  # elements past n must not be written
    add[(kd.cdiv(n, 128),)](x, y, out, n, BLOCK=128, backend=backend)
    assert_close(out[:n], x.astype(np.float64) + y)
    assert (out[n:] == -7.0).all()


# ----------------------------------------------------------------------------- fused softmax


@kd.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: kd.constexpr):
    row = kd.program_id(0)
    cols = kd.arange(0, BLOCK)
    mask = cols < n_cols
    x = kd.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
    z = x - kd.max(x, axis=0)
    num = kd.exp(z)
    den = kd.sum(num, axis=0)
    kd.store(out_ptr + row * out_stride + cols, num / den, mask=mask)


def softmax_ref(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("shape", [(4, 100), (7, 256), (3, 1000)])
def test_fused_softmax(backend, shape):
    x = RNG.standard_normal(shape).astype(np.float32) * 4
    out = np.empty_like(x)
    block = 1 << (shape[1] - 1).bit_length()
    softmax_kernel[(shape[0],)](out, x, x.shape[1], out.shape[1], shape[1], BLOCK=block,
                                backend=backend)
    assert_close(out, softmax_ref(x), k=shape[1])


# ---------------------------------------------------------------------------- grouped matmul


@kd.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr,
                  BLOCK_K: kd.constexpr, GROUP_M: kd.constexpr):
    pid = kd.program_id(0)
    num_pid_m = kd.cdiv(M, BLOCK_M)
    num_pid_n = kd.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = kd.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + kd.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + kd.arange(0, BLOCK_N)
    offs_k = kd.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = kd.zeros((BLOCK_M, BLOCK_N), dtype=kd.float32)
    for k in range(0, kd.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = kd.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = kd.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = kd.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    kd.store(c_ptrs, acc, mask=c_mask)


def run_matmul(a, b, backend, bm=32, bn=32, bk=16):
    M, K = a.shape
    _, N = b.shape
    c = np.empty((M, N), np.float32)
    grid = (kd.cdiv(M, bm) * kd.cdiv(N, bn),)
    matmul_kernel[grid](a, b, c, M, N, K, K, 1, N, 1, N, 1, BLOCK_M=bm, BLOCK_N=bn,
                        BLOCK_K=bk, GROUP_M=4, backend=backend)
    return c


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("mnk", [(64, 64, 64), (70, 45, 33)])
def test_grouped_matmul(backend, dtype, mnk):
    M, N, K = mnk
    a = RNG.standard_normal((M, K)).astype(dtype)
    b = RNG.standard_normal((K, N)).astype(dtype)
    c = run_matmul(a, b, backend)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), dtype=np.float32, k=K)


# -------------------------------------------------------------------------------- layer norm


@kd.jit
def layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, stride, N, eps, BLOCK: kd.constexpr):
    row = kd.program_id(0)
    x_ptr += row * stride
    y_ptr += row * stride
    acc = kd.zeros((BLOCK,), dtype=kd.float32)
    for off in range(0, N, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        acc += kd.load(x_ptr + cols, mask=cols < N, other=0.0).to(kd.float32)
    mean = kd.sum(acc, axis=0) / N
    acc2 = kd.zeros((BLOCK,), dtype=kd.float32)
    for off in range(0, N, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        x = kd.load(x_ptr + cols, mask=cols < N, other=0.0).to(kd.float32)
        d = kd.where(cols < N, x - mean, 0.0)
        acc2 += d * d
    rstd = 1 / kd.sqrt(kd.sum(acc2, axis=0) / N + eps)
    for off in range(0, N, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        mask = cols < N
        w = kd.load(w_ptr + cols, mask=mask)
        b = kd.load(b_ptr + cols, mask=mask)
        x = kd.load(x_ptr + cols, mask=mask, other=0.0).to(kd.float32)
        kd.store(y_ptr + cols, (x - mean) * rstd * w + b, mask=mask)


@pytest.mark.parametrize("shape", [(5, 300), (3, 64)])
def test_layer_norm(backend, shape):
    x = RNG.standard_normal(shape).astype(np.float32) + 3
    w = RNG.standard_normal(shape[1]).astype(np.float32)
    b = RNG.standard_normal(shape[1]).astype(np.float32)
    y = np.empty_like(x)
    layer_norm_kernel[(shape[0],)](x, y, w, b, shape[1], shape[1], 1e-5, BLOCK=128,
                                   backend=backend)
    xd = x.astype(np.float64)
    ref = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + 1e-5) * w + b
    assert_close(y, ref, k=shape[1])


# ------------------------------------------------------------ online-softmax attention forward


@kd.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq, scale, D: kd.constexpr,
                     BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr):
    start_m = kd.program_id(0)
    head = kd.program_id(1)
    base = head * seq * D
    offs_m = start_m * BLOCK_M + kd.arange(0, BLOCK_M)
    offs_d = kd.arange(0, D)
    q = kd.load(q_ptr + base + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < seq,
                other=0.0)
    m_i = kd.full((BLOCK_M,), -float("inf"), kd.float32)
    l_i = kd.zeros((BLOCK_M,), kd.float32)
    acc = kd.zeros((BLOCK_M, D), kd.float32)
    for start_n in range(0, seq, BLOCK_N):
        offs_n = start_n + kd.arange(0, BLOCK_N)
        kmask = offs_n[:, None] < seq
        k = kd.load(k_ptr + base + offs_n[:, None] * D + offs_d[None, :], mask=kmask, other=0.0)
        v = kd.load(v_ptr + base + offs_n[:, None] * D + offs_d[None, :], mask=kmask, other=0.0)
        s = kd.dot(q, kd.trans(k)) * scale
        s = kd.where(offs_n[None, :] < seq, s, -float("inf"))
        m_new = kd.maximum(m_i, kd.max(s, axis=1))
        p = kd.exp(s - m_new[:, None])
        alpha = kd.exp(m_i - m_new)
        l_i = l_i * alpha + kd.sum(p, axis=1)
        acc = acc * alpha[:, None] + kd.dot(p, v)
        m_i = m_new
    out = acc / l_i[:, None]
    kd.store(o_ptr + base + offs_m[:, None] * D + offs_d[None, :], out, mask=offs_m[:, None] < seq)


def test_attention_forward(backend):
    H, S, D = 2, 50, 16
    q, k, v = (RNG.standard_normal((H, S, D)).astype(np.float32) for _ in range(3))
    o = np.empty_like(q)
    scale = float(1.0 / np.sqrt(D))
    attention_kernel[(kd.cdiv(S, 16), H)](q, k, v, o, S, scale, D=D, BLOCK_M=16, BLOCK_N=16,
                                          backend=backend)
    s = np.einsum("hmd,hnd->hmn", q.astype(np.float64), k.astype(np.float64)) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("hmn,hnd->hmd", p / p.sum(-1, keepdims=True), v.astype(np.float64))
    assert_close(o, ref, k=S)
