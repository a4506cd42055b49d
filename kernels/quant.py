"""Weight-only quantised matmul: `quant_matmul(x, w_q, scales, group_size, bits)`.

x [M, K] float32/float16/bfloat16; the weights W [K, N] are stored as integers q with one
float scale per group of `group_size` consecutive k (per column): W[k, n] = q[k, n] *
scales[k // group_size, n], scales [K // group_size, N] of any float dtype.

- bits=8: w_q int8 [K, N], q = w_q (two's complement, -128..127).
- bits=4: w_q uint8 [K // 2, N]; byte w_q[j, n] holds k = 2j in its low nibble (bits 0-3) and
  k = 2j + 1 in its high nibble (bits 4-7); each nibble u in 0..15 means q = u - 8 (offset
  binary, -8..7).

Dequantisation happens inside the kernel, per K tile: the integer tile is loaded, multiplied by
its group's scale in float32, rounded to x's dtype and fed to the dot with float32
accumulation.  For int4 with an even group size a tile of byte rows is loaded once and split
into its low- and high-nibble tiles (rows 2j and 2j + 1, one scale), dotted with x's even and
odd columns; with an odd group size each byte is loaded for both of its rows and the nibble
chosen by k's parity.  M = 1 on one-thread CPU targets runs `quant_matvec_kernel` (column
sums with fused multiply-adds, scaled once per group and column).
Tiling and program order as in `matmul.py`; the output has x's dtype.  `group_size` is a
compile-time constant (one compilation per group size): the scale row `k // group_size` is then
a multiply-shift that the CPU vectorises, where a runtime divisor was divided lane by lane
(3.3x slower at M = 1 on the llvm backend).  A problem of few rows (M = 1 when decoding) gets a
tile of its height (`configs.fit_rows`), not 16-64 padding rows.
"""

from __future__ import annotations

from typing import Any

import kdsl as kd

from . import configs
from ._index import wide_offsets, widen
from ._validate import FLOATS, as_arg, check_shape, empty, positive_int, resolve_backend, result
from .matmul import grouped_tile


@kd.jit
def int4_row_pairs(w_ptr, s_ptr, js, rn, N, K, group_size: kd.constexpr):
    """Byte rows `js` of the int4 weights at columns `rn`, read once: (low nibbles, high
    nibbles, scales) as float32 tiles, the nibbles as q = u - 8 for rows k = 2j and 2j + 1,
    which share one scale (an even group size)."""
    ke = 2 * js
    mask = (ke[:, None] < K) & (rn[None, :] < N)
    byte = kd.load(w_ptr + js[:, None] * N + rn[None, :], mask=mask, other=0).to(kd.int32)
    scale = kd.load(s_ptr + (ke // group_size)[:, None] * N + rn[None, :], mask=mask,
                    other=0.0).to(kd.float32)
    return ((byte & 15) - 8).to(kd.float32), ((byte >> 4) - 8).to(kd.float32), scale


@kd.jit
def quant_matmul_kernel(x_ptr, w_ptr, s_ptr, c_ptr, M, N, K, group_size: kd.constexpr,
                        BITS: kd.constexpr,
                        BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr, BLOCK_K: kd.constexpr,
                        GROUP_M: kd.constexpr, WIDE: kd.constexpr = False,
                        SPLIT_K: kd.constexpr = 1):
    # tile offsets in int64 only when WIDE (kernels/_index.py).  With SPLIT_K > 1 program
    # (i, s) sums the s-th of SPLIT_K runs of K (whole BLOCK_K steps) and stores its float32
    # partial at c_ptr + s * M * N, which `sum_splits_kernel` adds up in split order.
    pid_m, pid_n = grouped_tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = widen(pid_m * BLOCK_M + kd.arange(0, BLOCK_M), WIDE)
    rn = widen(pid_n * BLOCK_N + kd.arange(0, BLOCK_N), WIDE)
    rk = widen(kd.arange(0, BLOCK_K), WIDE)
    acc = kd.zeros((BLOCK_M, BLOCK_N), dtype=kd.float32)
    k_lo = 0
    k_hi = K
    if SPLIT_K > 1:
        run = kd.cdiv(kd.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K
        k_lo = kd.program_id(1) * run
        k_hi = kd.minimum(K, k_lo + run)
    if BITS == 4 and group_size % 2 == 0:
        # Each byte row j holds k = 2j and 2j + 1, which share a group's scale (even group
        # size): the tile of bytes is read and scaled once and split into its two nibble
        # tiles, each the operand of a dot with x's even or odd columns.
        rj = widen(kd.arange(0, BLOCK_K // 2), WIDE)
        for k0 in range(k_lo, k_hi, BLOCK_K):
            js = k0 // 2 + rj
            ke = 2 * js
            x_mask = (rm[:, None] < M) & (ke[None, :] < K)
            x_even = kd.load(x_ptr + rm[:, None] * K + ke[None, :], mask=x_mask, other=0.0)
            x_odd = kd.load(x_ptr + rm[:, None] * K + (ke + 1)[None, :], mask=x_mask, other=0.0)
            lo, hi, scale = int4_row_pairs(w_ptr, s_ptr, js, rn, N, K, group_size)
            w_even = (lo * scale).to(x_even.dtype)
            w_odd = (hi * scale).to(x_even.dtype)
            acc = kd.dot(x_even, w_even, acc)
            acc = kd.dot(x_odd, w_odd, acc)
    else:
        for k0 in range(k_lo, k_hi, BLOCK_K):
            ks = k0 + rk
            x = kd.load(x_ptr + rm[:, None] * K + ks[None, :],
                        mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
            w_mask = (ks[:, None] < K) & (rn[None, :] < N)
            if BITS == 8:
                q = kd.load(w_ptr + ks[:, None] * N + rn[None, :], mask=w_mask,
                            other=0).to(kd.int32)
            else:
                byte = kd.load(w_ptr + (ks // 2)[:, None] * N + rn[None, :], mask=w_mask,
                               other=0)
                q = ((byte.to(kd.int32) >> ((ks % 2) * 4)[:, None]) & 15) - 8
            scale = kd.load(s_ptr + (ks // group_size)[:, None] * N + rn[None, :],
                            mask=w_mask, other=0.0).to(kd.float32)
            w = (q.to(kd.float32) * scale).to(x.dtype)
            acc = kd.dot(x, w, acc)
    c_at = c_ptr + rm[:, None] * N + rn[None, :]
    if SPLIT_K > 1:
        c_at += widen(kd.program_id(1), WIDE) * M * N
    kd.store(c_at, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@kd.jit
def sum_splits_kernel(part_ptr, c_ptr, size, SPLIT_K: kd.constexpr, BLOCK: kd.constexpr,
                      WIDE: kd.constexpr = False):
    """c[e] = sum over s of part[s * size + e], in s order, rounded once to c's dtype."""
    offs = widen(kd.program_id(0) * BLOCK + kd.arange(0, BLOCK), WIDE)
    mask = offs < size
    total = kd.zeros((BLOCK,), dtype=kd.float32)
    for s in kd.static_range(SPLIT_K):
        total += kd.load(part_ptr + widen(size, WIDE) * s + offs, mask=mask, other=0.0)
    kd.store(c_ptr + offs, total, mask=mask)


@kd.jit
def quant_rows_kernel(x_ptr, w_ptr, s_ptr, c_ptr, M, N, K, group_size: kd.constexpr,
                      BITS: kd.constexpr, BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr,
                      BLOCK_K: kd.constexpr, WIDE: kd.constexpr = False):
    # A few rows of x (a batch of decode steps) on one-thread CPU targets: per scale group the
    # dot sums x times the integer weights as float32 (exact integers: int8 q, or int4's
    # unsigned nibbles u), and the group's sum is scaled once per column, as the matvec does:
    # (sum x q) * s, (sum x u - 8 sum x) * s.  The CPU dot evaluates the converted weights in
    # its FMA loop (kdsl/lowering/dot_cpu.py `row_shape`): per weight a widening and a convert
    # (int4: and an and or a shift), no scale load and multiply, no offset.  group_size is a
    # multiple of BLOCK_K (quant_matmul checks), so no k is masked.
    n_m = kd.cdiv(M, BLOCK_M)
    pid = kd.program_id(0)
    pid_m = pid % n_m
    pid_n = pid // n_m
    rm = widen(pid_m * BLOCK_M + kd.arange(0, BLOCK_M), WIDE)
    rn = widen(pid_n * BLOCK_N + kd.arange(0, BLOCK_N), WIDE)
    m_mask = rm < M
    n_mask = rn < N
    acc = kd.zeros((BLOCK_M, BLOCK_N), dtype=kd.float32)
    for g in range(0, K, group_size):
        part = kd.zeros((BLOCK_M, BLOCK_N), dtype=kd.float32)
        if BITS == 4:
            # byte row j holds k = 2j (low nibble) and 2j + 1 (high), dotted with x's even
            # and odd columns; the offset of 8 comes off once per group through sum x
            rj = widen(kd.arange(0, BLOCK_K // 2), WIDE)
            sx = kd.zeros((BLOCK_M,), dtype=kd.float32)
            for k0 in range(g, g + group_size, BLOCK_K):
                js = k0 // 2 + rj
                x_at = x_ptr + rm[:, None] * K + (2 * js)[None, :]
                x_even = kd.load(x_at, mask=m_mask[:, None], other=0.0).to(kd.float32)
                x_odd = kd.load(x_at + 1, mask=m_mask[:, None], other=0.0).to(kd.float32)
                byte = kd.load(w_ptr + js[:, None] * N + rn[None, :], mask=n_mask[None, :],
                               other=0).to(kd.int32)
                part = kd.dot(x_even, (byte & 15).to(kd.float32), part)
                part = kd.dot(x_odd, (byte >> 4).to(kd.float32), part)
                sx += kd.sum(x_even + x_odd, axis=1)
            part -= 8.0 * sx[:, None]
        else:
            rk = widen(kd.arange(0, BLOCK_K), WIDE)
            for k0 in range(g, g + group_size, BLOCK_K):
                ks = k0 + rk
                x = kd.load(x_ptr + rm[:, None] * K + ks[None, :], mask=m_mask[:, None],
                            other=0.0).to(kd.float32)
                q = kd.load(w_ptr + ks[:, None] * N + rn[None, :], mask=n_mask[None, :],
                            other=0).to(kd.float32)
                part = kd.dot(x, q, part)
        scale = kd.load(s_ptr + widen(g // group_size, WIDE) * N + rn, mask=n_mask, other=0.0)
        acc += part * scale.to(kd.float32)[None, :]
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=m_mask[:, None] & n_mask[None, :])


@kd.jit
def quant_matvec_kernel(x_ptr, w_ptr, s_ptr, c_ptr, N, K, group_size: kd.constexpr,
                        BITS: kd.constexpr, BLOCK_N: kd.constexpr, WIDE: kd.constexpr = False):
    # One row of x (M = 1, decoding): each weight is used once, so instead of a dot over a
    # dequantised tile every column accumulates x_k q_k over the rows of a scale group with
    # fused multiply-adds, in k order, and is scaled once per group.  int4 sums the unsigned
    # nibbles u and takes the offset off as one scalar per group: (sum x u - 8 sum x) * s
    # (zero-extend, and, shift, two converts, two FMAs per byte: a third fewer vector
    # operations than a tile's products summed over its rows).  Row offsets are int64.
    rn = widen(kd.program_id(0) * BLOCK_N + kd.arange(0, BLOCK_N), WIDE)
    n_mask = rn < N
    acc = kd.zeros((BLOCK_N,), dtype=kd.float32)
    for g in range(0, K, group_size):
        part = kd.zeros((BLOCK_N,), dtype=kd.float32)
        if BITS == 4:
            sx = 0.0
            for k0 in range(g, g + group_size, 2):
                xe = kd.load(x_ptr + k0).to(kd.float32)
                xo = kd.load(x_ptr + k0 + 1).to(kd.float32)
                row = w_ptr + (k0 // 2).to(kd.int64) * N
                byte = kd.load(row + rn, mask=n_mask, other=0).to(kd.int32)
                part = kd.fma((byte & 15).to(kd.float32), xe, part)
                part = kd.fma((byte >> 4).to(kd.float32), xo, part)
                sx += xe + xo
            part -= 8.0 * sx
        else:
            for k in range(g, g + group_size):
                xk = kd.load(x_ptr + k).to(kd.float32)
                q = kd.load(w_ptr + k.to(kd.int64) * N + rn, mask=n_mask, other=0)
                part = kd.fma(q.to(kd.float32), xk, part)
        scale = kd.load(s_ptr + (g // group_size).to(kd.int64) * N + rn, mask=n_mask,
                        other=0.0).to(kd.float32)
        acc += part * scale
    kd.store(c_ptr + rn, acc, mask=n_mask)


_W_DTYPE = {8: "int8", 4: "uint8"}


def quant_matmul(x: Any, w_q: Any, scales: Any, group_size: int, bits: int,
                 backend: str | None = None) -> Any:
    """x @ dequantize(w_q, scales): int8 or packed int4 weights with per-group scales."""
    if bits not in _W_DTYPE:
        raise ValueError(f"bits: expected 4 or 8, got {bits!r}")
    group_size = positive_int("group_size", group_size)
    x_ = as_arg("x", x, FLOATS, ndim=2)
    w = as_arg("w_q", w_q, (_W_DTYPE[bits],), ndim=2)
    s = as_arg("scales", scales, FLOATS, ndim=2)
    M, K = x_.shape
    rows = w.shape[0] * (2 if bits == 4 else 1)
    if rows != K:
        what = "K // 2 rows (two int4 values per byte)" if bits == 4 else "K rows"
        raise ValueError(f"w_q: expected {what} for x's K = {K}, got shape {w.shape}")
    N = w.shape[1]
    if K % group_size:
        raise ValueError(f"group_size: {group_size} does not divide K = {K}")
    check_shape(s, (K // group_size, N), "K // group_size, N")
    be = resolve_backend(backend, x_, w, s)
    out = empty(x_, (M, N), x_.dtype)
    matvec = configs.matvec_meta(be, N) if M == 1 else None
    rows = configs.quant_rows_meta(be, M, N, group_size) if M > 1 else None
    wide = {"WIDE": True} if wide_offsets(x_, w, s, out) else {}
    if matvec and (bits == 8 or group_size % 2 == 0) and N:
        quant_matvec_kernel[(kd.cdiv(N, matvec["BLOCK_N"]),)](
            x_.kernel_arg, w.data, s.kernel_arg, out.kernel_arg, N, K, group_size=group_size,
            BITS=bits, backend=be, **wide, **matvec)
    elif rows and N:
        grid = (kd.cdiv(M, rows["BLOCK_M"]) * kd.cdiv(N, rows["BLOCK_N"]),)
        quant_rows_kernel[grid](x_.kernel_arg, w.data, s.kernel_arg, out.kernel_arg, M, N, K,
                                group_size=group_size, BITS=bits, backend=be, **wide, **rows)
    elif M and N:
        meta = configs.quant_meta(be, M, N, x_.dtype)
        tiles = kd.cdiv(M, meta["BLOCK_M"]) * kd.cdiv(N, meta["BLOCK_N"])
        split = configs.quant_split_k(be, tiles, K, meta["BLOCK_K"])
        if split > 1:
            # a few rows on a wide device: more programs than tiles, each a run of K
            part = empty(x_, (split, M, N), "float32")
            wide = {"WIDE": True} if wide_offsets(x_, w, s, part) else {}
            quant_matmul_kernel[(tiles, split)](
                x_.kernel_arg, w.data, s.kernel_arg, part.kernel_arg, M, N, K,
                group_size=group_size, BITS=bits, SPLIT_K=split, backend=be, **wide, **meta)
            sum_splits_kernel[(kd.cdiv(M * N, SUM_BLOCK),)](
                part.kernel_arg, out.kernel_arg, M * N, SPLIT_K=split, BLOCK=SUM_BLOCK,
                backend=be, **wide)
        else:
            quant_matmul_kernel[(tiles,)](x_.kernel_arg, w.data, s.kernel_arg, out.kernel_arg,
                                          M, N, K, group_size=group_size, BITS=bits, backend=be,
                                          **wide, **meta)
    return result(out)


#: elements of the output each program of `sum_splits_kernel` adds up
SUM_BLOCK = 1024
