"""Kernels in the style of Triton's tutorials using the frontend's newer surface, run on every
available backend against float64 NumPy references: a matmul with block pointers and
boundary_check on ragged shapes, a flash-attention-like loop advancing K/V block pointers,
tensor descriptors, early returns inside loops, tuple-carrying loops, `and`/`or` masks, and
float narrowing rounded toward zero."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd
from kdsl.testing import assert_close

RNG = np.random.default_rng(11)

# ------------------------------------------------------------------ matmul, block pointers


@kd.jit
def bp_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                     stride_cm, stride_cn, BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr,
                     BLOCK_K: kd.constexpr):
    pid_m = kd.program_id(0)
    pid_n = kd.program_id(1)
    a_block = kd.make_block_ptr(base=a_ptr, shape=(M, K), strides=(stride_am, stride_ak),
                                offsets=(pid_m * BLOCK_M, 0), block_shape=(BLOCK_M, BLOCK_K),
                                order=(1, 0))
    b_block = kd.make_block_ptr(base=b_ptr, shape=(K, N), strides=(stride_bk, stride_bn),
                                offsets=(0, pid_n * BLOCK_N), block_shape=(BLOCK_K, BLOCK_N),
                                order=(1, 0))
    acc = kd.zeros((BLOCK_M, BLOCK_N), dtype=kd.float32)
    for _ in kd.range(0, kd.cdiv(K, BLOCK_K), num_stages=3):
        a = kd.load(a_block, boundary_check=(0, 1), padding_option="zero")
        b = kd.load(b_block, boundary_check=(0, 1))
        acc += kd.dot(a, b)
        a_block = kd.advance(a_block, (0, BLOCK_K))
        b_block = b_block.advance((BLOCK_K, 0))
    c_block = kd.make_block_ptr(base=c_ptr, shape=(M, N), strides=(stride_cm, stride_cn),
                                offsets=(pid_m * BLOCK_M, pid_n * BLOCK_N),
                                block_shape=(BLOCK_M, BLOCK_N), order=(1, 0))
    kd.store(c_block, acc.to(c_ptr.dtype.element_ty), boundary_check=(0, 1))


@pytest.mark.parametrize("M, N, K, dtype", [(37, 29, 45, np.float32), (16, 16, 16, np.float32),
                                            (33, 18, 40, np.float16)])
def test_block_pointer_matmul_ragged(backend, M, N, K, dtype):
    a = RNG.standard_normal((M, K)).astype(dtype)
    b = RNG.standard_normal((K, N)).astype(dtype)
    c = np.full((M, N), 7.0, np.float32)
    grid = (kd.cdiv(M, 16), kd.cdiv(N, 16))
    bp_matmul_kernel[grid](a, b, c, M, N, K, K, 1, N, 1, N, 1, BLOCK_M=16, BLOCK_N=16,
                           BLOCK_K=16, backend=backend)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), k=K)


def test_block_pointer_matmul_transposed_operand(backend):
    """B given as the transpose of a row-major array: strides (1, K), order (0, 1)."""
    M, N, K = 20, 24, 19
    a = RNG.standard_normal((M, K)).astype(np.float32)
    bt = RNG.standard_normal((N, K)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    bp_matmul_kernel[(2, 2)](a, bt, c, M, N, K, K, 1, 1, K, N, 1, BLOCK_M=16, BLOCK_N=16,
                             BLOCK_K=8, backend=backend)
    assert_close(c, a.astype(np.float64) @ bt.T.astype(np.float64), k=K)


# ------------------------------------------------------- attention, advancing K/V pointers


@kd.jit
def bp_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq, sm_scale, D: kd.constexpr,
                        BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr):
    start_m = kd.program_id(0)
    Q_block_ptr = kd.make_block_ptr(q_ptr, (seq, D), (D, 1), (start_m * BLOCK_M, 0),
                                    (BLOCK_M, D), (1, 0))
    K_block_ptr = kd.make_block_ptr(k_ptr, (D, seq), (1, D), (0, 0), (D, BLOCK_N), (0, 1))
    V_block_ptr = kd.make_block_ptr(v_ptr, (seq, D), (D, 1), (0, 0), (BLOCK_N, D), (1, 0))
    q = kd.load(Q_block_ptr, boundary_check=(0,))
    m_i = kd.full((BLOCK_M,), -float("inf"), kd.float32)
    l_i = kd.zeros((BLOCK_M,), kd.float32)
    acc = kd.zeros((BLOCK_M, D), kd.float32)
    for start_n in range(0, seq, BLOCK_N):
        k = kd.load(K_block_ptr, boundary_check=(1,))
        qk = kd.dot(q, k) * sm_scale
        cols = start_n + kd.arange(0, BLOCK_N)
        qk = kd.where(cols[None, :] < seq, qk, -float("inf"))
        m_ij = kd.maximum(m_i, kd.max(qk, 1))
        p = kd.exp(qk - m_ij[:, None])
        alpha = kd.exp(m_i - m_ij)
        l_i = l_i * alpha + kd.sum(p, 1)
        v = kd.load(V_block_ptr, boundary_check=(0,))
        acc = acc * alpha[:, None] + kd.dot(p, v)
        m_i = m_ij
        V_block_ptr = kd.advance(V_block_ptr, (BLOCK_N, 0))
        K_block_ptr = kd.advance(K_block_ptr, (0, BLOCK_N))
    O_block_ptr = kd.make_block_ptr(o_ptr, (seq, D), (D, 1), (start_m * BLOCK_M, 0),
                                    (BLOCK_M, D), (1, 0))
    kd.store(O_block_ptr, acc / l_i[:, None], boundary_check=(0,))


@pytest.mark.parametrize("seq", [45, 32])
def test_flash_attention_block_pointers(backend, seq):
    D = 16
    q, k, v = (RNG.standard_normal((seq, D)).astype(np.float32) for _ in range(3))
    o = np.full((seq, D), np.nan, np.float32)
    bp_attention_kernel[(kd.cdiv(seq, 16),)](q, k, v, o, seq, 0.25, D=D, BLOCK_M=16,
                                            BLOCK_N=16, backend=backend)
    s = (q.astype(np.float64) @ k.T.astype(np.float64)) * 0.25
    p = np.exp(s - s.max(1, keepdims=True))
    assert_close(o, (p / p.sum(1, keepdims=True)) @ v, k=seq + D)


def test_loop_carries_only_the_advanced_offset():
    ir = bp_attention_kernel.compile(np.zeros(4, np.float32), np.zeros(4, np.float32),
                                     np.zeros(4, np.float32), np.zeros(4, np.float32), 4, 0.5,
                                     D=16, BLOCK_M=16, BLOCK_N=16, backend="interp").ir["tile"]
    header = next(ln for ln in ir.splitlines() if "= for(" in ln)
    # acc, m_i, l_i and one offset of each of K and V: base, shape, strides are not carried
    assert header.split(":")[1].count("int32") == 2, header


# --------------------------------------------------------------------- tensor descriptors


@kd.jit
def descriptor_kernel(x_ptr, y_ptr, M, N, shift, BM: kd.constexpr, BN: kd.constexpr):
    x_desc = kd.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1],
                                       block_shape=[BM, BN])
    y_desc = kd.make_tensor_descriptor(y_ptr, [M, N], [N, 1], [BM, BN])
    om = kd.program_id(0) * BM - shift  # windows reach past both edges
    on = kd.program_id(1) * BN
    v = x_desc.load([om, on])
    y_desc.store([om, on], v * 2.0 + 1.0)


@kd.jit
def descriptor_sum_kernel(x_ptr, out_ptr, M, N, BM: kd.constexpr, BN: kd.constexpr):
    desc = kd.make_tensor_descriptor(x_ptr, [M, N], [N, 1], [BM, BN])
    acc = kd.zeros((BM, BN), kd.float32)
    for j in range(-1, kd.cdiv(N, BN) + 1):  # blocks entirely out of bounds read zeros
        acc += kd.load_tensor_descriptor(desc, [kd.program_id(0) * BM, j * BN])
    kd.store(out_ptr + kd.program_id(0) * BM + kd.arange(0, BM), kd.sum(acc, 1),
             mask=kd.program_id(0) * BM + kd.arange(0, BM) < M)


def test_tensor_descriptor_out_of_bounds_reads_zero_and_is_not_written(backend):
    M, N = 13, 11
    x = RNG.standard_normal((M, N)).astype(np.float32)
    y = np.full((M, N), -5.0, np.float32)
    descriptor_kernel[(kd.cdiv(M + 3, 8), kd.cdiv(N, 8))](x, y, M, N, 3, BM=8, BN=8,
                                                          backend=backend)
    assert_close(y, x.astype(np.float64) * 2 + 1)
    s = np.zeros(M, np.float32)
    descriptor_sum_kernel[(kd.cdiv(M, 8),)](x, s, M, N, BM=8, BN=4, backend=backend)
    assert_close(s, x.astype(np.float64).sum(1), k=N)


# -------------------------------------------------------------- early returns inside loops


@kd.jit
def find_first_kernel(x_ptr, out_ptr, n, threshold, BLOCK: kd.constexpr):
    """Per row: the index of the first block holding a value above threshold (-1: none),
    stored from inside the loop, which then stops."""
    row = kd.program_id(0)
    for start in range(0, n, BLOCK):
        offs = start + kd.arange(0, BLOCK)
        x = kd.load(x_ptr + row * n + offs, mask=offs < n, other=-float("inf"))
        if kd.max(x, 0) > threshold:
            kd.store(out_ptr + row, start // BLOCK)
            return
    kd.store(out_ptr + row, -1)


@kd.jit
def _first_negative(x_ptr, n):
    i = 0
    while i < n:
        v = kd.load(x_ptr + i)
        if v < 0:
            return i, v
        i += 1
    return -1, 0.0


@kd.jit
def _clamped_count(x_ptr, n, limit):
    count = 0
    for i in range(n):
        if count >= limit:
            return count
        count += (kd.load(x_ptr + i) > 0).to(kd.int32)
    return count


@kd.jit
def early_return_kernel(x_ptr, out_ptr, n, limit):
    pid = kd.program_id(0)
    if pid >= 2:
        return
    i, v = _first_negative(x_ptr + pid * n, n)
    kd.store(out_ptr + pid * 4, i.to(kd.float32))
    kd.store(out_ptr + pid * 4 + 1, v)
    kd.store(out_ptr + pid * 4 + 2, _clamped_count(x_ptr + pid * n, n, limit).to(kd.float32))
    total = 0.0
    for j in range(n):
        for t in kd.static_range(2):
            x = kd.load(x_ptr + pid * n + j)
            if x < -100.0:
                return  # never taken: nothing below is skipped
        total += kd.load(x_ptr + pid * n + j)
    if total < 0:
        kd.store(out_ptr + pid * 4 + 3, -1.0)
        return
    kd.store(out_ptr + pid * 4 + 3, total)


def test_early_return_in_loops(backend):
    n, B = 37, 8
    x = RNG.standard_normal((5, n)).astype(np.float32)
    x[1, :20] = -1.0
    x[1, 25] = 3.0
    x[3] = -2.0
    out = np.full(5, -7, np.int32)
    find_first_kernel[(5,)](x, out, n, 2.0, BLOCK=B, backend=backend)
    want = []
    for r in x:
        blocks = [k for k in range(0, n, B) if r[k:k + B].max() > 2.0]
        want.append(blocks[0] // B if blocks else -1)
    np.testing.assert_array_equal(out, want)


def test_helpers_with_early_returns(backend):
    n = 9
    x = np.array([[1, 2, -3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 4, 5, 6, 7, 8, 9],
                  [-1] * 9], np.float32)
    out = np.full(12, 99.0, np.float32)
    early_return_kernel[(3,)](x, out, n, 5, backend=backend)
    row0 = [2, -3, 5, float(x[0].sum())]
    row1 = [-1, 0, 5, float(x[1].sum())]
    assert_close(out[:8], np.array(row0 + row1, np.float64))
    assert (out[8:] == 99.0).all()  # program 2 returned at once


# ---------------------------------------------------------------------- tuples, and/or


@kd.jit
def _stats_step(state, x):
    lo, hi, total = state
    return kd.minimum(lo, x), kd.maximum(hi, x), total + x


@kd.jit
def tuple_loop_kernel(x_ptr, out_ptr, n, rows, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    state = (kd.full((BLOCK,), float("inf"), kd.float32),
             kd.full((BLOCK,), -float("inf"), kd.float32), kd.zeros((BLOCK,), kd.float32))
    r = 0
    while r < rows:
        x = kd.load(x_ptr + r * n + offs, mask=offs < n, other=0.0)
        state = _stats_step(state, x)
        if r == 0:
            state = (state[0], state[1], state[2] * 1.0)
        r += 1
    pair = (state, r)
    for k in range(3):
        (lo, hi, tot), cnt = pair
        pair = ((lo, hi, tot + 0.0), cnt)
    (lo, hi, tot), cnt = pair
    m = offs < n
    kd.store(out_ptr + offs, lo, mask=m)
    kd.store(out_ptr + n + offs, hi, mask=m)
    kd.store(out_ptr + 2 * n + offs, tot / cnt, mask=m)


def test_tuples_carried_through_loops_and_helpers(backend):
    rows, n = 6, 13
    x = RNG.standard_normal((rows, n)).astype(np.float32)
    out = np.zeros(3 * n, np.float32)
    tuple_loop_kernel[(1,)](x, out, n, rows, BLOCK=16, backend=backend)
    assert_close(out[:n], x.min(0).astype(np.float64))
    assert_close(out[n:2 * n], x.max(0).astype(np.float64))
    assert_close(out[2 * n:], x.astype(np.float64).mean(0), k=rows)


@kd.jit
def logical_mask_kernel(x_ptr, out_ptr, n, lo, hi, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    inb = offs < n
    x = kd.load(x_ptr + offs, mask=inb, other=0.0)
    band = lo < x < hi  # chained comparison, element-wise
    keep = (band and inb) or (x > 2 * hi and inb)
    drop = not keep
    kd.store(out_ptr + offs, kd.where(drop, 0.0, x), mask=inb)


def test_and_or_not_masks(backend):
    n = 300
    x = RNG.uniform(-4, 4, n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    logical_mask_kernel[(kd.cdiv(n, 128),)](x, out, n, -1.0, 1.5, BLOCK=128, backend=backend)
    keep = ((-1.0 < x) & (x < 1.5)) | (x > 3.0)
    np.testing.assert_array_equal(out, np.where(keep, x, 0.0).astype(np.float32))


# ------------------------------------------------------------------ rounding toward zero


@kd.jit
def rtz_kernel(x_ptr, h_ptr, b_ptr, n_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    x = kd.load(x_ptr + offs)
    kd.store(h_ptr + offs, kd.cast(x, kd.float16, fp_downcast_rounding="rtz"))
    kd.store(b_ptr + offs, x.to(kd.bfloat16, fp_downcast_rounding="rtz").to(kd.uint16,
                                                                         bitcast=True))
    kd.store(n_ptr + offs, x.cast(kd.float16, fp_downcast_rounding="rtne"))


def _f16_toward_zero(x: np.ndarray) -> np.ndarray:
    """Independent reference: the float16 of largest magnitude not above |x|, by search over
    every finite float16."""
    finite = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    out = []
    for v in x.astype(np.float64):
        if np.isnan(v) or np.isinf(v):
            out.append(np.float16(v))
            continue
        k = np.searchsorted(finite, abs(v), side="right") - 1
        out.append(np.float16(np.copysign(finite[k], v)))  # exact: finite[k] is a float16
    return np.array(out, np.float16)


def test_fp_downcast_rounding_toward_zero(backend):
    special = [1 + 2**-11 + 2**-13, -(1 + 2**-11 + 2**-13), 65519.0, 65520.0, 7e4, -1e30,
               np.inf, -np.inf, 1e-8, -3e-6, 0.0, -0.0, 65504.0, 6.1e-5, 2**-24 * 1.5, 1.9999]
    x = np.concatenate([np.array(special, np.float32),
                        RNG.standard_normal(240).astype(np.float32) * 100]).astype(np.float32)
    h = np.zeros(256, np.float16)
    bf = np.zeros(256, np.uint16)
    ne = np.zeros(256, np.float16)
    rtz_kernel[(1,)](x, h, bf, ne, BLOCK=256, backend=backend)
    np.testing.assert_array_equal(h.view(np.uint16), _f16_toward_zero(x).view(np.uint16))
    np.testing.assert_array_equal(bf, (x.view(np.uint32) >> 16).astype(np.uint16))
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    np.testing.assert_array_equal(ne.view(np.uint16), want.view(np.uint16))
