"""Attention forward: `attention(q, k, v, causal, scale)` (flash attention) and
`decode_attention(q, k_cache, v_cache, block_table, seq_lens, scale)` (paged KV cache).

attention: q [batch, heads, seq_q, dim], k and v [batch, kv_heads, seq_k, dim] with
heads % kv_heads == 0 (grouped-query: query head h reads kv head h // (heads // kv_heads)).
One program per (BLOCK_M queries, batch * head).  It walks the keys in BLOCK_N tiles keeping
a running row maximum m, a running sum l and an unnormalised float32 output tile rescaled by
exp(m_old - m_new) (online softmax): the seq_q x seq_k score matrix never exists.  Causal
masking is aligned to the end, as in inference with a prefix already cached: query i sees keys
j <= i + (seq_k - seq_q); causal needs seq_q <= seq_k so that every query sees a key.  The key
loop stops at the last key the block's last query sees, so fully masked key tiles are never
loaded.  dim need not be a power of two (the tile is padded and masked).  q, k and v are read
through their batch, head and sequence strides (the head dim adjacent): `x.transpose(1, 2)` of a
[batch, seq, heads, dim] tensor is read in place; the output is contiguous.

decode_attention: one query token per sequence, q [batch, heads, dim]; caches
[num_blocks, block_size, kv_heads, dim] (vLLM layout); block_table [batch, max_blocks] int32
maps a sequence's logical block i to a cache block; seq_lens [batch] int32.  One program per
(sequence, head) loops over the sequence's blocks through the table, one cache block (a tile
of block_size tokens) per step, with the same online softmax.  On CPU profiles, where a query
head group (heads // kv_heads) is at least `configs.DECODE_GROUP_MIN`, one program per
(sequence, kv head) serves the whole group instead (`paged_decode_grouped_kernel`): each cache
block is read once per group, and the scores and output are dots.  Where the (sequence, head)
programs are fewer than the device runs at once (`configs.decode_splits`: the GPU profiles; a
batch of 1 x 32 heads leaves most of 132 SMs idle) each sequence's blocks are walked in runs
by a third grid axis and `decode_combine_kernel` rescales the runs' rows to their common
maximum (flash-decoding).  A sequence of length 0 gives a zero output.  NumPy tables are checked before the launch (a ValueError names the entry); device
tables (CuPy, OpenCL, torch CUDA) are not copied to the host for that, so a decode step does not
synchronise: the kernel clamps a length to [0, max_blocks * block_size] and reads nothing
through a block id outside the cache (those tokens are masked off).

Offsets: the batch/head/sequence bases are int64; the tile offsets of `attention` become int64
when an operand spans 2**31 elements or more (kernels/_index.py).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import kdsl as kd

from . import configs
from ._index import wide_offsets, widen
from ._validate import (
    FLOATS,
    as_arg,
    empty,
    next_pow2,
    resolve_backend,
    result,
    same_dtype,
    unit_inner,
)


@kd.jit
def flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, heads, kv_heads, seq_q, seq_k, dim,
                           scale, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs,
                           CAUSAL: kd.constexpr, BLOCK_M: kd.constexpr,
                           BLOCK_N: kd.constexpr, BLOCK_D: kd.constexpr,
                           WIDE: kd.constexpr = False):
    # s{q,k,v}{b,h,s}: element strides of batch, head and sequence (the head dim is unit);
    # bases in int64, tile offsets in int64 only when WIDE (kernels/_index.py)
    start_m = kd.program_id(0)
    bh = kd.program_id(1).to(kd.int64)
    batch = bh // heads
    head = bh % heads
    kv_head = head // (heads // kv_heads)
    q_ptr += batch * sqb + head * sqh
    o_ptr += bh * seq_q * dim
    k_ptr += batch * skb + kv_head * skh
    v_ptr += batch * svb + kv_head * svh
    offs_m = widen(start_m * BLOCK_M + kd.arange(0, BLOCK_M), WIDE)
    offs_d = kd.arange(0, BLOCK_D)
    d_mask = offs_d[None, :] < dim
    q_mask = (offs_m[:, None] < seq_q) & d_mask
    q = kd.load(q_ptr + offs_m[:, None] * sqs + offs_d[None, :], mask=q_mask, other=0.0)
    m_i = kd.full((BLOCK_M,), -float("inf"), kd.float32)
    l_i = kd.zeros((BLOCK_M,), kd.float32)
    acc = kd.zeros((BLOCK_M, BLOCK_D), kd.float32)
    shift = seq_k - seq_q  # causal: query i sees keys j <= i + shift
    hi = seq_k
    if CAUSAL:
        hi = kd.minimum(seq_k, (start_m + 1) * BLOCK_M + shift)
    for start_n in range(0, hi, BLOCK_N):
        offs_n = widen(start_n + kd.arange(0, BLOCK_N), WIDE)
        kv_mask = (offs_n[:, None] < seq_k) & d_mask
        k = kd.load(k_ptr + offs_n[:, None] * sks + offs_d[None, :], mask=kv_mask, other=0.0)
        v = kd.load(v_ptr + offs_n[:, None] * svs + offs_d[None, :], mask=kv_mask, other=0.0)
        s = kd.dot(q, kd.trans(k)) * scale
        keep = offs_n[None, :] < seq_k
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None] + shift)
        s = kd.where(keep, s, -float("inf"))
        m_new = kd.maximum(m_i, kd.max(s, axis=1))
        p = kd.exp(s - m_new[:, None])
        alpha = kd.exp(m_i - m_new)
        l_i = l_i * alpha + kd.sum(p, axis=1)
        # the rescaled tile is the dot's accumulator: p @ v adds onto it in place
        acc = kd.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    kd.store(o_ptr + offs_m[:, None] * dim + offs_d[None, :], acc / l_i[:, None], mask=q_mask)


@kd.jit
def paged_block(k_ptr, v_ptr, table_ptr, seq, blk, seq_len, max_blocks, num_blocks,
                BLOCK_SIZE, row_stride, kv_head, dim, offs_t, offs_d):
    """Logical block `blk` of sequence `seq` through the block table: (token mask, k, v) as
    float32 [tokens, dim] tiles of kv head `kv_head`, masked past the length, the head dim and
    for a block id outside the cache."""
    phys = kd.load(table_ptr + seq * max_blocks + blk)
    tok = blk * BLOCK_SIZE + offs_t
    t_mask = (offs_t < BLOCK_SIZE) & (tok < seq_len) & (phys >= 0) & (phys < num_blocks)
    # the block's first element as an int64 scalar; offsets inside a block stay int32
    base = phys.to(kd.int64) * BLOCK_SIZE * row_stride + kv_head * dim
    offs = offs_t[:, None] * row_stride + offs_d[None, :]
    mask = t_mask[:, None] & (offs_d < dim)[None, :]
    k = kd.load(k_ptr + base + offs, mask=mask, other=0.0).to(kd.float32)
    v = kd.load(v_ptr + base + offs, mask=mask, other=0.0).to(kd.float32)
    return t_mask, k, v


@kd.jit
def paged_decode_kernel(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, o_ptr, ml_ptr, heads,
                        kv_heads, dim, max_blocks, num_blocks, scale, BLOCK_SIZE,
                        BLOCK_T: kd.constexpr, BLOCK_D: kd.constexpr, SPLIT: kd.constexpr = 1):
    # With SPLIT > 1 (flash-decoding) program (seq, head, r) walks the r-th of SPLIT runs of
    # the sequence's blocks and stores its unnormalised float32 output row at o_ptr and its
    # running max and sum at ml_ptr (unread otherwise), row (seq * heads + head) * SPLIT + r,
    # for `decode_combine_kernel`.
    seq = kd.program_id(0).to(kd.int64)  # bases may pass 2**31 (kernels/_index.py)
    head = kd.program_id(1)
    kv_head = head // (heads // kv_heads)
    offs_d = kd.arange(0, BLOCK_D)
    offs_t = kd.arange(0, BLOCK_T)
    d_mask = offs_d < dim
    q = kd.load(q_ptr + (seq * heads + head) * dim + offs_d, mask=d_mask, other=0.0)
    q = q.to(kd.float32) * scale
    # Device tables are not copied to the host for checks: a length is clamped to the table's
    # capacity and a block id outside the cache reads nothing (its tokens are masked off).
    seq_len = kd.minimum(kd.maximum(kd.load(lens_ptr + seq), 0), max_blocks * BLOCK_SIZE)
    m_i = -float("inf")
    l_i = 0.0
    acc = kd.zeros((BLOCK_D,), kd.float32)
    row_stride = kv_heads * dim  # elements between consecutive tokens of a cache block
    blk_lo = 0
    blk_hi = kd.cdiv(seq_len, BLOCK_SIZE)
    if SPLIT > 1:
        run = kd.cdiv(blk_hi, SPLIT)
        blk_lo = kd.program_id(2) * run
        blk_hi = kd.minimum(blk_hi, blk_lo + run)
    for blk in range(blk_lo, blk_hi):
        t_mask, k, v = paged_block(k_ptr, v_ptr, table_ptr, seq, blk, seq_len, max_blocks,
                                   num_blocks, BLOCK_SIZE, row_stride, kv_head, dim, offs_t,
                                   offs_d)
        s = kd.where(t_mask, kd.sum(k * q[None, :], axis=1), -float("inf"))
        m_new = kd.maximum(m_i, kd.max(s, axis=0))
        p = kd.exp(s - m_new)
        alpha = kd.exp(m_i - m_new)
        l_i = l_i * alpha + kd.sum(p, axis=0)
        acc = acc * alpha + kd.sum(p[:, None] * v, axis=0)
        m_i = m_new
    if SPLIT > 1:
        part = (seq * heads + head) * SPLIT + kd.program_id(2)
        kd.store(o_ptr + part * dim + offs_d, acc, mask=d_mask)
        kd.store(ml_ptr + part * 2, m_i)
        kd.store(ml_ptr + part * 2 + 1, l_i)
    else:
        out = kd.where(l_i > 0.0, acc / kd.maximum(l_i, 1e-30), 0.0)
        kd.store(o_ptr + (seq * heads + head) * dim + offs_d, out, mask=d_mask)


@kd.jit
def decode_combine_kernel(part_ptr, ml_ptr, o_ptr, dim, SPLIT: kd.constexpr,
                          BLOCK_S: kd.constexpr, BLOCK_D: kd.constexpr):
    """Output row `program_id(0)` (sequence * heads + head) of a split decode: the runs'
    unnormalised rows rescaled to their common maximum and divided by the common sum; a run
    that saw no token (max -inf, sum 0) weighs nothing, and a sequence of length 0 gives 0."""
    row = kd.program_id(0).to(kd.int64)
    offs_s = kd.arange(0, BLOCK_S)
    offs_d = kd.arange(0, BLOCK_D)
    s_mask = offs_s < SPLIT
    d_mask = offs_d < dim
    m = kd.load(ml_ptr + (row * SPLIT + offs_s) * 2, mask=s_mask, other=-float("inf"))
    l = kd.load(ml_ptr + (row * SPLIT + offs_s) * 2 + 1, mask=s_mask, other=0.0)
    parts = kd.load(part_ptr + (row * SPLIT + offs_s)[:, None] * dim + offs_d[None, :],
                    mask=s_mask[:, None] & d_mask[None, :], other=0.0)
    m_all = kd.max(m, axis=0)
    w = kd.where(l > 0.0, kd.exp(m - m_all), 0.0)
    l_all = kd.sum(w * l, axis=0)
    acc = kd.sum(w[:, None] * parts, axis=0)
    out = kd.where(l_all > 0.0, acc / kd.maximum(l_all, 1e-30), 0.0)
    kd.store(o_ptr + row * dim + offs_d, out, mask=d_mask)


@kd.jit
def paged_decode_grouped_kernel(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, o_ptr, heads, dim,
                                max_blocks, num_blocks, scale, BLOCK_SIZE, GROUP,
                                BLOCK_G: kd.constexpr, BLOCK_T: kd.constexpr,
                                BLOCK_D: kd.constexpr):
    # One program per (sequence, kv head) for all GROUP query heads reading that kv head
    # (grouped-query attention): each cache block is read once for the group, not once per
    # query head, and the scores and the output update are dots of the [GROUP, dim] query
    # tile with the block's keys and values.
    seq = kd.program_id(0).to(kd.int64)  # bases may pass 2**31 (kernels/_index.py)
    kv_head = kd.program_id(1)
    kv_heads = heads // GROUP
    offs_g = kd.arange(0, BLOCK_G)
    offs_d = kd.arange(0, BLOCK_D)
    offs_t = kd.arange(0, BLOCK_T)
    d_mask = offs_d < dim
    rows = (seq * heads + kv_head * GROUP + offs_g)[:, None] * dim + offs_d[None, :]
    q_mask = (offs_g < GROUP)[:, None] & d_mask[None, :]
    q = kd.load(q_ptr + rows, mask=q_mask, other=0.0).to(kd.float32) * scale
    seq_len = kd.minimum(kd.maximum(kd.load(lens_ptr + seq), 0), max_blocks * BLOCK_SIZE)
    m_i = kd.full((BLOCK_G,), -float("inf"), kd.float32)
    l_i = kd.zeros((BLOCK_G,), kd.float32)
    acc = kd.zeros((BLOCK_G, BLOCK_D), kd.float32)
    row_stride = kv_heads * dim
    for blk in range(kd.cdiv(seq_len, BLOCK_SIZE)):
        t_mask, k, v = paged_block(k_ptr, v_ptr, table_ptr, seq, blk, seq_len, max_blocks,
                                   num_blocks, BLOCK_SIZE, row_stride, kv_head, dim, offs_t,
                                   offs_d)
        s = kd.where(t_mask[None, :], kd.dot(q, kd.trans(k)), -float("inf"))
        m_new = kd.maximum(m_i, kd.max(s, axis=1))
        p = kd.exp(s - m_new[:, None])
        alpha = kd.exp(m_i - m_new)
        l_i = l_i * alpha + kd.sum(p, axis=1)
        acc = kd.dot(p, v, acc * alpha[:, None])
        m_i = m_new
    out = kd.where(l_i[:, None] > 0.0, acc / kd.maximum(l_i, 1e-30)[:, None], 0.0)
    kd.store(o_ptr + rows, out, mask=q_mask)


def _scale(scale: Any, dim: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(dim) if dim else 1.0
    try:
        s = float(scale)
    except (TypeError, ValueError):
        raise TypeError(f"scale: expected a float or None, got {type(scale).__name__}") from None
    if not math.isfinite(s):
        raise ValueError(f"scale: expected a finite float, got {s}")
    return s


def _gqa(heads: int, kv_heads: int, what: str) -> None:
    if kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"{what}: {kv_heads} kv heads do not divide {heads} query heads "
                         f"(grouped-query attention needs heads % kv_heads == 0)")


def attention(q: Any, k: Any, v: Any, causal: bool = False, scale: float | None = None,
              backend: str | None = None) -> Any:
    """softmax(q k^T * scale [+ causal mask]) v on [batch, heads, seq, dim] arrays."""
    q_, k_, v_ = _check_qkv(q, k, v, causal)
    B, H, Sq, D = q_.shape
    KVH, Sk = k_.shape[1], k_.shape[2]
    s = _scale(scale, D)
    be = resolve_backend(backend, q_, k_, v_)
    out = empty(q_, q_.shape, q_.dtype)
    if B * H * Sq * D == 0:
        return result(out)
    if Sk == 0:
        raise ValueError("k: seq_k is 0: softmax over no keys is undefined")
    meta = configs.pick(configs.ATTENTION, be, Sq)
    grid = (kd.cdiv(Sq, meta["BLOCK_M"]), B * H)
    (q_, sq), (k_, sk), (v_, sv) = unit_inner(q_), unit_inner(k_), unit_inner(v_)
    flash_attention_kernel[grid](q_.kernel_arg, k_.kernel_arg, v_.kernel_arg, out.kernel_arg,
                                 H, KVH, Sq, Sk, D, s, *sq[:3], *sk[:3], *sv[:3],
                                 CAUSAL=bool(causal), BLOCK_D=max(16, next_pow2(D)),
                                 WIDE=wide_offsets(q_, k_, v_, out), backend=be, **meta)
    return result(out)


def _check_qkv(q: Any, k: Any, v: Any, causal: bool) -> tuple[Any, Any, Any]:
    """The checked `Arg`s of attention's q, k, v (shapes, dtypes, grouped heads, causal)."""
    q_ = as_arg("q", q, FLOATS, ndim=4, strided=True)
    k_ = as_arg("k", k, FLOATS, ndim=4, strided=True)
    v_ = as_arg("v", v, FLOATS, ndim=4, strided=True)
    same_dtype(q_, k_, v_)
    B, H, Sq, D = q_.shape
    if k_.shape[0] != B or k_.shape[3] != D:
        raise ValueError(f"k: expected shape ({B}, kv_heads, seq_k, {D}) to match q "
                         f"{q_.shape}, got {k_.shape}")
    if v_.shape != k_.shape:
        raise ValueError(f"v: expected k's shape {k_.shape}, got {v_.shape}")
    KVH, Sk = k_.shape[1], k_.shape[2]
    _gqa(H, KVH, "k")
    if causal and Sq > Sk:
        raise ValueError(f"causal: seq_q {Sq} > seq_k {Sk} leaves the first queries with no "
                         f"visible key (causal masking is aligned to the end)")
    return q_, k_, v_


def decode_attention(q: Any, k_cache: Any, v_cache: Any, block_table: Any, seq_lens: Any,
                     scale: float | None = None, backend: str | None = None) -> Any:
    """One decode step of attention over a paged KV cache (see the module docstring)."""
    q_ = as_arg("q", q, FLOATS, ndim=3)
    kc = as_arg("k_cache", k_cache, FLOATS, ndim=4)
    vc = as_arg("v_cache", v_cache, FLOATS, ndim=4)
    same_dtype(q_, kc, vc)
    table = as_arg("block_table", block_table, ("int32",), ndim=2)
    lens = as_arg("seq_lens", seq_lens, ("int32",), ndim=1)
    B, H, D = q_.shape
    NB, BS, KVH, Dk = kc.shape
    if Dk != D:
        raise ValueError(f"k_cache: head dim {Dk} differs from q's {D}")
    if vc.shape != kc.shape:
        raise ValueError(f"v_cache: expected k_cache's shape {kc.shape}, got {vc.shape}")
    _gqa(H, KVH, "k_cache")
    if table.shape[0] != B:
        raise ValueError(f"block_table: expected {B} rows (q's batch), got shape {table.shape}")
    if lens.shape != (B,):
        raise ValueError(f"seq_lens: expected shape ({B},), got {lens.shape}")
    max_blocks = table.shape[1]
    if table.device is None and lens.device is None:
        # host tables are checked before the launch; device tables are not copied back for
        # it (a synchronising copy per decode step): the kernel clamps what is out of range
        _check_pages(table.data, lens.data, NB, BS, max_blocks)
    s = _scale(scale, D)
    be = resolve_backend(backend, q_, kc, vc, table, lens)
    out = empty(q_, q_.shape, q_.dtype)
    if B * H * D == 0:
        return result(out)
    meta = configs.pick(configs.DECODE, be, D)
    group = H // KVH
    if configs.decode_grouped(be, group):
        paged_decode_grouped_kernel[(B, KVH)](
            q_.kernel_arg, kc.kernel_arg, vc.kernel_arg, table.data, lens.data,
            out.kernel_arg, H, D, max(1, max_blocks), NB, s, BS, group,
            BLOCK_G=next_pow2(group), BLOCK_T=next_pow2(BS), BLOCK_D=max(16, next_pow2(D)),
            backend=be, **meta)
        return result(out)
    args = (q_.kernel_arg, kc.kernel_arg, vc.kernel_arg, table.data, lens.data)
    blocks = dict(BLOCK_T=next_pow2(BS), BLOCK_D=max(16, next_pow2(D)))
    split = configs.decode_splits(be, B * H, max_blocks)
    if split > 1:
        # few (sequence, head) programs for the device: the blocks of each sequence are
        # walked in `split` runs, combined by a second kernel (flash-decoding)
        part, ml = empty(q_, (B * H * split, D), "float32"), empty(q_, (B * H * split, 2),
                                                                  "float32")
        paged_decode_kernel[(B, H, split)](*args, part.kernel_arg, ml.kernel_arg, H, KVH, D,
                                           max(1, max_blocks), NB, s, BS, SPLIT=split,
                                           backend=be, **blocks, **meta)
        decode_combine_kernel[(B * H,)](part.kernel_arg, ml.kernel_arg, out.kernel_arg, D,
                                        SPLIT=split, BLOCK_S=next_pow2(split),
                                        BLOCK_D=blocks["BLOCK_D"], backend=be, **meta)
        return result(out)
    paged_decode_kernel[(B, H)](*args, out.kernel_arg, out.kernel_arg, H, KVH, D,
                                max(1, max_blocks), NB, s, BS, backend=be, **blocks, **meta)
    return result(out)


def _check_pages(table: np.ndarray, lens: np.ndarray, num_blocks: int, block_size: int,
                 max_blocks: int) -> None:
    """Every block a sequence uses is in the cache; every length fits its table row."""
    if (lens < 0).any():
        b = int(np.argmax(lens < 0))
        raise ValueError(f"seq_lens: sequence {b} has negative length {int(lens[b])}")
    cap = max_blocks * block_size
    if (lens > cap).any():
        b = int(np.argmax(lens > cap))
        raise ValueError(f"seq_lens: sequence {b} has length {int(lens[b])} > max_blocks * "
                         f"block_size = {max_blocks} * {block_size}")
    used = np.arange(max_blocks)[None, :] < -(-lens.astype(np.int64)[:, None] // block_size)
    bad = used & ((table < 0) | (table >= num_blocks))
    if bad.any():
        b, i = (int(x) for x in np.argwhere(bad)[0])
        raise ValueError(f"block_table: entry [{b}, {i}] = {int(table[b, i])} is outside the "
                         f"cache's {num_blocks} blocks (sequence {b} uses "
                         f"{-(-int(lens[b]) // block_size)} blocks)")
