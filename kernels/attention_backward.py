"""Gradient of attention: `attention_backward(do, q, k, v, o, causal=False, scale=None)` ->
(dq, dk, dv), for `o = attention(q, k, v, causal, scale)` and the output gradient `do`.

The flash-attention backward: the seq_q x seq_k probability matrix is recomputed tile by tile,
never stored.  With P = softmax(S), S = q k^T * scale (masked as in the forward):

    dv = P^T do,   dP = do v^T,   dS = P * (dP - delta),   dq = dS k * scale,   dk = dS^T q * scale
    delta_i = sum_j P_ij dP_ij = sum_d o_id do_id

Three kernels:
1. `attention_lse_kernel`, one program per (BLOCK_M queries, batch * head): the row
   log-sum-exp of S (a forward pass without v: the forward keeps no statistics) and delta, both
   float32 [batch * heads, seq_q].
2. `attention_dkdv_kernel`, one program per (BLOCK_N keys, batch * kv_head): walks the query
   blocks of every query head sharing its kv head (grouped-query: the group's contributions are
   added in the program, no atomics), P = exp(S - lse), accumulates dk and dv in float32.
   Causal: the walk starts at the first query block that sees the program's first key.
3. `attention_dq_kernel`, one program per (BLOCK_M queries, batch * head): walks the keys its
   queries see and accumulates dq.
Probabilities and dS are rounded to the inputs' dtype before each dot (as the forward rounds
P), accumulation is float32; the gradients have the inputs' dtype.  Inputs are made contiguous.
"""

from __future__ import annotations

from typing import Any

import kdsl as kd

from . import configs
from ._validate import (
    FLOATS,
    as_arg,
    contiguous,
    empty,
    next_pow2,
    resolve_backend,
    result,
    zeros,
)
from .attention import _check_qkv, _scale


@kd.jit
def attention_lse_kernel(q_ptr, k_ptr, o_ptr, do_ptr, lse_ptr, delta_ptr, heads, kv_heads,
                         seq_q, seq_k, dim, scale, CAUSAL: kd.constexpr, BLOCK_M: kd.constexpr,
                         BLOCK_N: kd.constexpr, BLOCK_D: kd.constexpr):
    start_m = kd.program_id(0)
    bh = kd.program_id(1).to(kd.int64)  # bases may pass 2**31 (kernels/_index.py)
    batch = bh // heads
    kv_head = (bh % heads) // (heads // kv_heads)
    q_ptr += bh * seq_q * dim
    o_ptr += bh * seq_q * dim
    do_ptr += bh * seq_q * dim
    lse_ptr += bh * seq_q
    delta_ptr += bh * seq_q
    k_ptr += (batch * kv_heads + kv_head) * seq_k * dim
    offs_m = start_m * BLOCK_M + kd.arange(0, BLOCK_M)
    offs_d = kd.arange(0, BLOCK_D)
    d_mask = offs_d[None, :] < dim
    q_mask = (offs_m[:, None] < seq_q) & d_mask
    q_offs = offs_m[:, None] * dim + offs_d[None, :]
    q = kd.load(q_ptr + q_offs, mask=q_mask, other=0.0)
    m_i = kd.full((BLOCK_M,), -float("inf"), kd.float32)
    l_i = kd.zeros((BLOCK_M,), kd.float32)
    shift = seq_k - seq_q
    hi = seq_k
    if CAUSAL:
        hi = kd.minimum(seq_k, (start_m + 1) * BLOCK_M + shift)
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + kd.arange(0, BLOCK_N)
        k = kd.load(k_ptr + offs_n[:, None] * dim + offs_d[None, :],
                    mask=(offs_n[:, None] < seq_k) & d_mask, other=0.0)
        s = kd.dot(q, kd.trans(k)) * scale
        keep = offs_n[None, :] < seq_k
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None] + shift)
        s = kd.where(keep, s, -float("inf"))
        m_new = kd.maximum(m_i, kd.max(s, axis=1))
        l_i = l_i * kd.exp(m_i - m_new) + kd.sum(kd.exp(s - m_new[:, None]), axis=1)
        m_i = m_new
    o = kd.load(o_ptr + q_offs, mask=q_mask, other=0.0).to(kd.float32)
    do = kd.load(do_ptr + q_offs, mask=q_mask, other=0.0).to(kd.float32)
    rows = offs_m < seq_q
    kd.store(lse_ptr + offs_m, m_i + kd.log(l_i), mask=rows)
    kd.store(delta_ptr + offs_m, kd.sum(o * do, axis=1), mask=rows)


@kd.jit
def attention_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
                          heads, kv_heads, seq_q, seq_k, dim, scale, CAUSAL: kd.constexpr,
                          BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr,
                          BLOCK_D: kd.constexpr):
    start_n = kd.program_id(0) * BLOCK_N
    bkv = kd.program_id(1).to(kd.int64)  # bases may pass 2**31 (kernels/_index.py)
    batch = bkv // kv_heads
    kv_head = bkv % kv_heads
    group = heads // kv_heads
    kv_base = bkv * seq_k * dim
    k_ptr += kv_base
    v_ptr += kv_base
    dk_ptr += kv_base
    dv_ptr += kv_base
    offs_n = start_n + kd.arange(0, BLOCK_N)
    offs_d = kd.arange(0, BLOCK_D)
    d_mask = offs_d[None, :] < dim
    kv_mask = (offs_n[:, None] < seq_k) & d_mask
    kv_offs = offs_n[:, None] * dim + offs_d[None, :]
    k = kd.load(k_ptr + kv_offs, mask=kv_mask, other=0.0)
    v = kd.load(v_ptr + kv_offs, mask=kv_mask, other=0.0)
    dk = kd.zeros((BLOCK_N, BLOCK_D), kd.float32)
    dv = kd.zeros((BLOCK_N, BLOCK_D), kd.float32)
    shift = seq_k - seq_q
    lo = 0
    if CAUSAL:  # query i sees key j when j <= i + shift: the first query seeing start_n
        lo = (kd.maximum(start_n - shift, 0) // BLOCK_M) * BLOCK_M
    for hh in range(group):
        bh = batch * heads + kv_head * group + hh
        q_h = q_ptr + bh * seq_q * dim
        do_h = do_ptr + bh * seq_q * dim
        lse_h = lse_ptr + bh * seq_q
        delta_h = delta_ptr + bh * seq_q
        for start_m in range(lo, seq_q, BLOCK_M):
            offs_m = start_m + kd.arange(0, BLOCK_M)
            rows = offs_m < seq_q
            q_offs = offs_m[:, None] * dim + offs_d[None, :]
            q_mask = rows[:, None] & d_mask
            q = kd.load(q_h + q_offs, mask=q_mask, other=0.0)
            do = kd.load(do_h + q_offs, mask=q_mask, other=0.0)
            lse = kd.load(lse_h + offs_m, mask=rows, other=0.0)
            delta = kd.load(delta_h + offs_m, mask=rows, other=0.0)
            s = kd.dot(q, kd.trans(k)) * scale
            keep = rows[:, None] & (offs_n[None, :] < seq_k)
            if CAUSAL:
                keep = keep & (offs_n[None, :] <= offs_m[:, None] + shift)
            p = kd.where(keep, kd.exp(s - lse[:, None]), 0.0)
            dv = kd.dot(kd.trans(p.to(do.dtype)), do, dv)
            dp = kd.dot(do, kd.trans(v))
            ds = p * (dp - delta[:, None])
            dk = kd.dot(kd.trans(ds.to(q.dtype)), q, dk)
    kd.store(dk_ptr + kv_offs, dk * scale, mask=kv_mask)
    kd.store(dv_ptr + kv_offs, dv, mask=kv_mask)


@kd.jit
def attention_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, heads,
                        kv_heads, seq_q, seq_k, dim, scale, CAUSAL: kd.constexpr,
                        BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr, BLOCK_D: kd.constexpr):
    start_m = kd.program_id(0)
    bh = kd.program_id(1).to(kd.int64)  # bases may pass 2**31 (kernels/_index.py)
    batch = bh // heads
    kv_head = (bh % heads) // (heads // kv_heads)
    k_ptr += (batch * kv_heads + kv_head) * seq_k * dim
    v_ptr += (batch * kv_heads + kv_head) * seq_k * dim
    q_ptr += bh * seq_q * dim
    do_ptr += bh * seq_q * dim
    dq_ptr += bh * seq_q * dim
    lse_ptr += bh * seq_q
    delta_ptr += bh * seq_q
    offs_m = start_m * BLOCK_M + kd.arange(0, BLOCK_M)
    offs_d = kd.arange(0, BLOCK_D)
    rows = offs_m < seq_q
    d_mask = offs_d[None, :] < dim
    q_mask = rows[:, None] & d_mask
    q_offs = offs_m[:, None] * dim + offs_d[None, :]
    q = kd.load(q_ptr + q_offs, mask=q_mask, other=0.0)
    do = kd.load(do_ptr + q_offs, mask=q_mask, other=0.0)
    lse = kd.load(lse_ptr + offs_m, mask=rows, other=0.0)
    delta = kd.load(delta_ptr + offs_m, mask=rows, other=0.0)
    dq = kd.zeros((BLOCK_M, BLOCK_D), kd.float32)
    shift = seq_k - seq_q
    hi = seq_k
    if CAUSAL:
        hi = kd.minimum(seq_k, (start_m + 1) * BLOCK_M + shift)
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + kd.arange(0, BLOCK_N)
        kv_mask = (offs_n[:, None] < seq_k) & d_mask
        k = kd.load(k_ptr + offs_n[:, None] * dim + offs_d[None, :], mask=kv_mask, other=0.0)
        v = kd.load(v_ptr + offs_n[:, None] * dim + offs_d[None, :], mask=kv_mask, other=0.0)
        s = kd.dot(q, kd.trans(k)) * scale
        keep = rows[:, None] & (offs_n[None, :] < seq_k)
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None] + shift)
        p = kd.where(keep, kd.exp(s - lse[:, None]), 0.0)
        dp = kd.dot(do, kd.trans(v))
        ds = p * (dp - delta[:, None])
        dq = kd.dot(ds.to(k.dtype), k, dq)
    kd.store(dq_ptr + q_offs, dq * scale, mask=q_mask)


def attention_backward(do: Any, q: Any, k: Any, v: Any, o: Any, causal: bool = False,
                       scale: float | None = None, backend: str | None = None
                       ) -> tuple[Any, Any, Any]:
    """(dq, dk, dv) of `o = attention(q, k, v, causal, scale)` for output gradient `do`."""
    q_, k_, v_ = _check_qkv(q, k, v, causal)
    o_ = as_arg("o", o, FLOATS, ndim=4)
    g_ = as_arg("do", do, FLOATS, ndim=4)
    for a in (o_, g_):
        if a.shape != q_.shape or a.dtype != q_.dtype:
            raise ValueError(f"{a.name}: expected q's shape {q_.shape} and dtype {q_.dtype}, "
                             f"got {a.shape} {a.dtype}")
    B, H, Sq, D = q_.shape
    KVH, Sk = k_.shape[1], k_.shape[2]
    s = _scale(scale, D)
    be = resolve_backend(backend, q_, k_, v_, o_, g_)
    q_, k_, v_ = contiguous(q_), contiguous(k_), contiguous(v_)
    if B * H * Sq * D == 0 or Sk == 0:  # nothing flows: zero gradients
        return tuple(result(zeros(a, a.shape, a.dtype, "d" + a.name)) for a in (q_, k_, v_))
    dq = empty(q_, q_.shape, q_.dtype, "dq")
    dk, dv = empty(k_, k_.shape, k_.dtype, "dk"), empty(v_, v_.shape, v_.dtype, "dv")
    lse = empty(q_, (B * H, Sq), "float32", "lse")
    delta = empty(q_, (B * H, Sq), "float32", "delta")
    meta = configs.pick(configs.ATTENTION, be, Sq)
    flags = {"CAUSAL": bool(causal), "BLOCK_D": max(16, next_pow2(D)), "backend": be, **meta}
    qa, ka, va, oa, ga = (a.kernel_arg for a in (q_, k_, v_, o_, g_))
    sizes = (H, KVH, Sq, Sk, D, s)
    rows_grid = (kd.cdiv(Sq, meta["BLOCK_M"]), B * H)
    attention_lse_kernel[rows_grid](qa, ka, oa, ga, lse.kernel_arg, delta.kernel_arg, *sizes,
                                    **flags)
    attention_dkdv_kernel[(kd.cdiv(Sk, meta["BLOCK_N"]), B * KVH)](
        qa, ka, va, ga, lse.kernel_arg, delta.kernel_arg, dk.kernel_arg, dv.kernel_arg, *sizes,
        **flags)
    attention_dq_kernel[rows_grid](qa, ka, va, ga, lse.kernel_arg, delta.kernel_arg,
                                   dq.kernel_arg, *sizes, **flags)
    return result(dq), result(dk), result(dv)
