"""Sparse matrix products: block-sparse weights and 2:4 (semi-structured) weights.

`block_sparse_matmul(a, b_blocks, layout, block, bias=None, activation=None)`: `a` [M, K] times
a block-sparse `b` [K, N] given by a boolean `layout` [K // block, N // block] and its nonzero
`block x block` tiles `b_blocks` [nnz, block, block] in row-major order of `layout`.  The host
builds, once per layout (cached by its bytes and shape), a compressed-column index: for each
block column the nonzero block rows and their tiles' positions in `b_blocks` (int32 arrays).
A program computes a BLOCK_M x BLOCK_N tile of the output (BLOCK_N divides the block) and
walks only its block column's nonzero blocks, BLOCK_K rows of the block at a time, with
`kd.dot` into a float32 accumulator; empty block columns cost one index read.

`sparsify_2_4(w)` keeps the two largest-magnitude values of every 4 consecutive values along K
of `w` [K, N] (ties to the lower index; a NaN counts as the largest) and returns `(values
[K // 2, N], meta [K // 2, N] int8)`: `values[2g + i, n]` is the i-th kept value (in index
order) of group g of column n, `meta` its index 0-3 in the group.
`semi_structured_matmul(x, values, meta, bias=None, activation=None)` multiplies `x` [M, K] by
that matrix: `y[m, n] = sum_j values[j, n] * x[m, 4 * (j // 2) + meta[j, n]]`, doing half the
multiplies of the dense product.  x^T is a copy made by a kernel, in panels: the BLOCK_M
columns of x^T a tile reads lie contiguous, padded with zeros past M.  A program owns a
transposed BLOCK_N x BLOCK_M output tile.  On the CPU (a table row with BLOCK_K) it is
y^T = W^T x^T by `kd.sparse_dot` on BLOCK_K of K per step, whose CPU lowering is a
register-blocked gather micro-kernel (kdsl/lowering/sparse_dot_cpu.py).  Elsewhere (a row
with GROUPS) it is a portable gather-FMA loop: for each kept row j of its columns it reads the
row `4 * (j // 2) + meta[j, n]` of x^T (contiguous along M) and adds it scaled by
`values[j, n]`.  On CUDA,
float16 and bfloat16 take the sparse tensor cores instead: the transposed product y^T = W^T x^T
with `kd.sparse_dot` (W^T is 2:4-sparse along its rows, as mma.sp's sparse operand must be),
the instruction's metadata built in the kernel from `meta` (kdsl/lowering/dot_sparse.py).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import numpy as np

import kdsl as kd
from kdsl.backends import get_backend

from . import configs
from ._index import wide_offsets, widen
from ._validate import (
    FLOATS,
    Arg,
    as_arg,
    blas_layout,
    check_shape,
    empty,
    positive_int,
    resolve_backend,
    result,
    same_dtype,
    to_host,
)
from .matmul import apply_activation, check_activation, grouped_tile

# ------------------------------------------------------------------------------ block-sparse


@kd.jit
def block_sparse_kernel(a_ptr, b_ptr, col_ptr, row_idx, blk_idx, bias_ptr, c_ptr, M, N, lda,
                        BLOCK: kd.constexpr, BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr,
                        BLOCK_K: kd.constexpr, GROUP_M: kd.constexpr, HAS_BIAS: kd.constexpr,
                        ACT: kd.constexpr, A_T: kd.constexpr = False,
                        WIDE: kd.constexpr = False, ROW_PTRS: kd.constexpr = False):
    # a[m, k] at m * lda + k (or m + k * lda when A_T); the tiles of b are block x block
    # row-major, tile t at t * BLOCK * BLOCK (an int64 scalar base).  ROW_PTRS (the CPU):
    # tiles are read through one pointer per row plus the column index, unmasked (rows past M
    # read row M - 1; they are never stored), an address the CPU backend's vectoriser reads
    # as consecutive; a data-dependent offset inside the index would make every load a gather.
    pid_m, pid_n = grouped_tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    col = (pid_n * BLOCK_N) // BLOCK          # block column
    n_in = (pid_n * BLOCK_N) % BLOCK          # first column inside the block
    rm = widen(pid_m * BLOCK_M + kd.arange(0, BLOCK_M), WIDE)
    rn = widen(pid_n * BLOCK_N + kd.arange(0, BLOCK_N), WIDE)
    rk = kd.arange(0, BLOCK_K)
    rb = n_in + kd.arange(0, BLOCK_N)
    m_ok = rm[:, None] < M
    acc = kd.zeros((BLOCK_M, BLOCK_N), dtype=kd.float32)
    first = kd.load(col_ptr + col)
    last = kd.load(col_ptr + col + 1)
    if ROW_PTRS:
        a_rows = a_ptr + kd.minimum(rm, M - 1).to(kd.int64) * lda
        lb = kd.arange(0, BLOCK_N)
    for p in range(first, last):
        k_base = kd.load(row_idx + p) * BLOCK
        b_tile = b_ptr + kd.load(blk_idx + p).to(kd.int64) * (BLOCK * BLOCK)
        for kk in range(0, BLOCK, BLOCK_K):
            if ROW_PTRS and not A_T:
                a = kd.load((a_rows + (k_base + kk))[:, None] + rk[None, :])
                b = kd.load((b_tile + (kk + rk) * BLOCK + n_in)[:, None] + lb[None, :])
            else:
                ks = widen(k_base + kk + rk, WIDE)
                if A_T:
                    a_offs = rm[:, None] + ks[None, :] * lda
                else:
                    a_offs = rm[:, None] * lda + ks[None, :]
                a = kd.load(a_ptr + a_offs, mask=m_ok, other=0.0)
                b = kd.load(b_tile + (kk + rk)[:, None] * BLOCK + rb[None, :])
            acc = kd.dot(a, b, acc)
    if HAS_BIAS:
        acc += kd.load(bias_ptr + rn).to(kd.float32)[None, :]
    acc = apply_activation(acc, ACT)
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=m_ok)


# Compressed-column indexes by layout: (shape, packed bits) -> host arrays, most recent last.
_INDEX_CACHE: OrderedDict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = OrderedDict()
# Their device copies: (layout key, array kind, queue id) -> (queue, arrays).
_DEVICE_INDEX: OrderedDict[tuple, tuple[Any, tuple]] = OrderedDict()
INDEX_CACHE_SIZE = 64


def _remember(cache: OrderedDict, key: tuple, value: Any) -> Any:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > INDEX_CACHE_SIZE:
        cache.popitem(last=False)
    return value


def layout_index(layout: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(col_ptr [nbn + 1], row_idx [nnz], blk_idx [nnz]) int32 of a boolean block layout
    [nbk, nbn]: block column c's nonzero blocks are rows row_idx[col_ptr[c]:col_ptr[c + 1]]
    (ascending), their tiles b_blocks[blk_idx[...]] (row-major numbering of `layout`)."""
    return _cached_index(np.asarray(layout, bool))[1]


def _cached_index(layout: np.ndarray) -> tuple[tuple, tuple[np.ndarray, ...]]:
    """(cache key, `layout_index` arrays) of a boolean layout."""
    key = (layout.shape, np.packbits(layout).tobytes())
    hit = _INDEX_CACHE.get(key)
    if hit is not None:
        _INDEX_CACHE.move_to_end(key)
        return key, hit
    number = np.cumsum(layout.ravel()).reshape(layout.shape) - 1  # row-major tile numbers
    rows, cols = np.nonzero(layout.T)          # column by column, rows ascending
    counts = np.bincount(rows, minlength=layout.shape[1]) if layout.size else np.zeros(
        layout.shape[1], np.int64)
    col_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    row_idx = cols.astype(np.int32)
    blk_idx = number[cols, rows].astype(np.int32)
    return key, _remember(_INDEX_CACHE, key, (col_ptr, row_idx, blk_idx))


def _device_index(key: tuple, index: tuple, like: Arg) -> tuple:
    """`index` as arrays on `like`'s device (cached per layout and device queue)."""
    if like.device is None:
        return index
    queue = getattr(like.data, "queue", None)
    dkey = (key, like.device, id(queue))
    hit = _DEVICE_INDEX.get(dkey)
    if hit is not None and hit[0] is queue:
        _DEVICE_INDEX.move_to_end(dkey)
        return hit[1]
    be = get_backend(like.device)
    arrays = tuple(be.to_device(x, like=like.data) for x in index)
    return _remember(_DEVICE_INDEX, dkey, (queue, arrays))[1]


BLOCK_MIN, BLOCK_MAX = 16, 128


def _row_pointers(be: str) -> bool:
    """Whether the block-sparse kernel reads tiles through row pointers (see the kernel): on
    the one-thread CPU lowering, whose vectoriser sees the rows as contiguous."""
    return configs.profiles(be)[0] == "cpu"


def _check_block(block: Any) -> int:
    block = positive_int("block", block)
    if not BLOCK_MIN <= block <= BLOCK_MAX or block % 16:
        raise ValueError(f"block: expected a multiple of 16 from {BLOCK_MIN} to {BLOCK_MAX}, "
                         f"got {block}")
    return block


def _pow2_divisor(n: int, cap: int) -> int:
    """The largest power of two dividing `n`, at most `cap`."""
    return min(n & -n, cap)


def _bias(bias: Any, n: int, what: str) -> Arg | None:
    if bias is None:
        return None
    b = as_arg("bias", bias, FLOATS, ndim=1)
    check_shape(b, (n,), what)
    return b


def block_sparse_matmul(a: Any, b_blocks: Any, layout: Any, block: int, bias: Any = None,
                        activation: str | None = None, backend: str | None = None) -> Any:
    """act(a @ B + bias) for the block-sparse B [K, N] given by `layout` and `b_blocks`."""
    block = _check_block(block)
    a_ = as_arg("a", a, FLOATS, ndim=2, strided=True)
    bb = as_arg("b_blocks", b_blocks, FLOATS, ndim=3)
    same_dtype(a_, bb)
    lay = as_arg("layout", layout, ("bool", "int8", "uint8", "int32", "int64"), ndim=2)
    act = check_activation(activation)
    M, K = a_.shape
    if K % block:
        raise ValueError(f"a: K = {K} is not a multiple of block = {block}")
    if lay.shape[0] != K // block:
        raise ValueError(f"layout: expected K // block = {K // block} rows for a's K = {K}, "
                         f"got shape {lay.shape}")
    host_layout = np.asarray(to_host(lay)) != 0
    nnz = int(host_layout.sum())
    check_shape(bb, (nnz, block, block), f"{nnz} nonzero blocks of the layout, block x block")
    N = lay.shape[1] * block
    bias_ = _bias(bias, N, "layout's columns * block")
    be = resolve_backend(backend, *(x for x in (a_, bb, lay, bias_) if x is not None))
    out = empty(a_, (M, N), a_.dtype)
    if M == 0 or N == 0:
        return result(out)
    index = _device_index(*_cached_index(host_layout), out)
    a_, a_t, lda, _ = blas_layout(a_)
    meta = configs.pick(configs.BLOCK_SPARSE, be, M)
    bn = _pow2_divisor(block, meta.pop("BLOCK_N"))
    bk = _pow2_divisor(block, meta.pop("BLOCK_K"))
    flags = {"HAS_BIAS": bias_ is not None, "ACT": act}
    if a_t:
        flags["A_T"] = True
    if _row_pointers(be):
        flags["ROW_PTRS"] = True
    if wide_offsets(a_, bb, out):
        flags["WIDE"] = True
    grid = (kd.cdiv(M, meta["BLOCK_M"]) * (N // bn),)
    block_sparse_kernel[grid](a_.kernel_arg, bb.kernel_arg, *index,
                              (bias_ if bias_ is not None else a_).kernel_arg, out.kernel_arg,
                              M, N, lda, BLOCK=block, BLOCK_N=bn, BLOCK_K=bk, backend=be,
                              **flags, **meta)
    return result(out)


# ------------------------------------------------------------------------------ 2:4


@kd.jit
def _abs_key(x):
    """|x| with NaN as +inf: the magnitude order of sparsify_2_4 (a NaN is kept)."""
    ax = kd.abs(x)
    return kd.where(x != x, float("inf"), ax)  # noqa: PLR0124 (x != x: NaN)


@kd.jit
def sparsify_kernel(w_ptr, v_ptr, m_ptr, G, N, BLOCK_G: kd.constexpr, BLOCK_N: kd.constexpr):
    # one program: BLOCK_G groups of 4 rows x BLOCK_N columns
    rg = kd.program_id(0) * BLOCK_G + kd.arange(0, BLOCK_G)
    rn = kd.program_id(1) * BLOCK_N + kd.arange(0, BLOCK_N)
    ok = (rg[:, None] < G) & (rn[None, :] < N)
    base = w_ptr + (rg[:, None] * 4).to(kd.int64) * N + rn[None, :]
    w0 = kd.load(base, mask=ok, other=0.0)
    w1 = kd.load(base + N, mask=ok, other=0.0)
    w2 = kd.load(base + 2 * N, mask=ok, other=0.0)
    w3 = kd.load(base + 3 * N, mask=ok, other=0.0)
    a0, a1, a2, a3 = _abs_key(w0), _abs_key(w1), _abs_key(w2), _abs_key(w3)
    # rank of each value: how many others come first (larger, or equal at a lower index)
    r0 = (a1 > a0).to(kd.int32) + (a2 > a0).to(kd.int32) + (a3 > a0).to(kd.int32)
    r1 = (a0 >= a1).to(kd.int32) + (a2 > a1).to(kd.int32) + (a3 > a1).to(kd.int32)
    r2 = (a0 >= a2).to(kd.int32) + (a1 >= a2).to(kd.int32) + (a3 > a2).to(kd.int32)
    r3 = (a0 >= a3).to(kd.int32) + (a1 >= a3).to(kd.int32) + (a2 >= a3).to(kd.int32)
    k0, k1, k2, k3 = r0 < 2, r1 < 2, r2 < 2, r3 < 2
    # two are kept: the first is at 0, 1 or 2, the second at 1, 2 or 3
    i0 = kd.where(k0, 0, kd.where(k1, 1, 2))
    i1 = kd.where(k3, 3, kd.where(k2, 2, 1))
    v0 = kd.where(k0, w0, kd.where(k1, w1, w2))
    v1 = kd.where(k3, w3, kd.where(k2, w2, w1))
    out = (rg[:, None] * 2).to(kd.int64) * N + rn[None, :]
    kd.store(v_ptr + out, v0, mask=ok)
    kd.store(v_ptr + out + N, v1, mask=ok)
    kd.store(m_ptr + out, i0.to(kd.int8), mask=ok)
    kd.store(m_ptr + out + N, i1.to(kd.int8), mask=ok)


def sparsify_2_4(w: Any, backend: str | None = None) -> tuple[Any, Any]:
    """(values [K // 2, N], meta [K // 2, N] int8): the 2:4 compression of `w` [K, N]."""
    w_ = as_arg("w", w, FLOATS, ndim=2)
    K, N = w_.shape
    if K % 4:
        raise ValueError(f"w: K = {K} (rows) is not a multiple of 4")
    be = resolve_backend(backend, w_)
    values = empty(w_, (K // 2, N), w_.dtype, "values")
    meta = empty(w_, (K // 2, N), "int8", "meta")
    if K and N:
        cfg = configs.pick(configs.SPARSIFY, be, K * N)
        grid = (kd.cdiv(K // 4, cfg["BLOCK_G"]), kd.cdiv(N, cfg["BLOCK_N"]))
        sparsify_kernel[grid](w_.kernel_arg, values.kernel_arg, meta.data, K // 4, N,
                              backend=be, **cfg)
    return result(values), result(meta)


@kd.jit
def _kept(xt_ptr, v_ptr, m_ptr, j, rn, n_ok, N, ldx, WIDE: kd.constexpr):
    """(pointer to the row of x^T, float32 value) of kept row j of the output columns rn."""
    off = j * N + rn
    v = kd.load(v_ptr + off, mask=n_ok, other=0.0).to(kd.float32)
    k = (j // 2) * 4 + (kd.load(m_ptr + off, mask=n_ok, other=0).to(kd.int32) & 3)
    return xt_ptr + widen(k, WIDE) * ldx, v


@kd.jit
def _term(row, v, lm, acc):
    """acc[n, m] + v[n] * row[n][m].  Every op is at the accumulator's shape, so that the
    terms of a step fuse into one loop, and the address is a row pointer plus the loop's own
    index (`lm` = arange, no mask: x^T's rows are padded to whole tiles), which the CPU
    backend's vectoriser reads as consecutive."""
    x = kd.load(row[:, None] + lm[None, :])
    return kd.fma(v[:, None], x.to(kd.float32), acc)


@kd.jit
def semi_structured_kernel(xt_ptr, v_ptr, m_ptr, bias_ptr, c_ptr, M, N, K2, ldx, ldp,
                           BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr, GROUP_M: kd.constexpr,
                           GROUPS: kd.constexpr, HAS_BIAS: kd.constexpr, ACT: kd.constexpr,
                           WIDE: kd.constexpr = False):
    # x^T in panels (`_panels`): x^T[k, m] of this tile at pid_m * ldp + k * ldx + m % BLOCK_M,
    # rows padded with zeros to BLOCK_M.  The output tile is held transposed, acc[n, m], so
    # that each kept row j adds a
    # contiguous row of x^T times one scalar per column n.  GROUPS groups of 4 (2 * GROUPS
    # kept rows) per step: their rows and values are read first, then one fused loop adds all
    # their terms (the accumulator is read and written once per step).
    pid_m, pid_n = grouped_tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = widen(pid_m * BLOCK_M + kd.arange(0, BLOCK_M), WIDE)
    rn = widen(pid_n * BLOCK_N + kd.arange(0, BLOCK_N), WIDE)
    lm = kd.arange(0, BLOCK_M)
    xt_ptr += pid_m.to(kd.int64) * ldp  # this tile's panel of x^T: lm from here
    n_ok = rn < N
    acc = kd.zeros((BLOCK_N, BLOCK_M), dtype=kd.float32)
    step = 2 * GROUPS
    main = K2 - K2 % step
    for j in range(0, main, step):
        r0, v0 = _kept(xt_ptr, v_ptr, m_ptr, j, rn, n_ok, N, ldx, WIDE)
        r1, v1 = _kept(xt_ptr, v_ptr, m_ptr, j + 1, rn, n_ok, N, ldx, WIDE)
        if GROUPS >= 2:
            r2, v2 = _kept(xt_ptr, v_ptr, m_ptr, j + 2, rn, n_ok, N, ldx, WIDE)
            r3, v3 = _kept(xt_ptr, v_ptr, m_ptr, j + 3, rn, n_ok, N, ldx, WIDE)
        if GROUPS >= 4:
            r4, v4 = _kept(xt_ptr, v_ptr, m_ptr, j + 4, rn, n_ok, N, ldx, WIDE)
            r5, v5 = _kept(xt_ptr, v_ptr, m_ptr, j + 5, rn, n_ok, N, ldx, WIDE)
            r6, v6 = _kept(xt_ptr, v_ptr, m_ptr, j + 6, rn, n_ok, N, ldx, WIDE)
            r7, v7 = _kept(xt_ptr, v_ptr, m_ptr, j + 7, rn, n_ok, N, ldx, WIDE)
        acc = _term(r0, v0, lm, acc)
        acc = _term(r1, v1, lm, acc)
        if GROUPS >= 2:
            acc = _term(r2, v2, lm, acc)
            acc = _term(r3, v3, lm, acc)
        if GROUPS >= 4:
            acc = _term(r4, v4, lm, acc)
            acc = _term(r5, v5, lm, acc)
            acc = _term(r6, v6, lm, acc)
            acc = _term(r7, v7, lm, acc)
    for j in range(main, K2, 2):  # the groups left over, one at a time
        r0, v0 = _kept(xt_ptr, v_ptr, m_ptr, j, rn, n_ok, N, ldx, WIDE)
        r1, v1 = _kept(xt_ptr, v_ptr, m_ptr, j + 1, rn, n_ok, N, ldx, WIDE)
        acc = _term(r0, v0, lm, acc)
        acc = _term(r1, v1, lm, acc)
    if HAS_BIAS:
        acc += kd.load(bias_ptr + rn, mask=n_ok, other=0.0).to(kd.float32)[:, None]
    acc = apply_activation(acc, ACT)
    kd.store(c_ptr + rm[None, :] * N + rn[:, None], acc,
             mask=(rm[None, :] < M) & n_ok[:, None])


@kd.jit
def semi_structured_panel_kernel(xt_ptr, v_ptr, m_ptr, bias_ptr, c_ptr, M, N, K2, ldp,
                                 BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr,
                                 BLOCK_K: kd.constexpr, GROUP_M: kd.constexpr,
                                 HAS_BIAS: kd.constexpr, ACT: kd.constexpr,
                                 WIDE: kd.constexpr = False):
    # The CPU's kernel: y^T = W^T x^T by `kd.sparse_dot` on BLOCK_N x BLOCK_M output tiles,
    # BLOCK_K of K (BLOCK_K // 2 kept rows) per step, whose CPU lowering is a register-blocked
    # micro-kernel (kdsl/lowering/sparse_dot_cpu.py): the step's x^T rows (a BLOCK_K x BLOCK_M
    # block of this tile's panel, `_panels`: contiguous, padded with zeros past M, so read
    # unmasked) stay in L1 for all BLOCK_N columns.  values and meta are read as they are
    # stored (rows of K, contiguous along N) and transposed as views; columns past N are
    # masked (a kept value 0 at index 0 adds nothing).  A last step past K2 masks its rows.
    pid_m, pid_n = grouped_tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = widen(pid_m * BLOCK_M + kd.arange(0, BLOCK_M), WIDE)
    rn = widen(pid_n * BLOCK_N + kd.arange(0, BLOCK_N), WIDE)
    rj = kd.arange(0, BLOCK_K // 2)
    rk = kd.arange(0, BLOCK_K)
    lm = kd.arange(0, BLOCK_M)
    n_ok = rn < N
    panel = xt_ptr + pid_m.to(kd.int64) * ldp
    acc = kd.zeros((BLOCK_N, BLOCK_M), dtype=kd.float32)
    main = K2 - K2 % (BLOCK_K // 2)
    for j0 in range(0, main, BLOCK_K // 2):
        w = widen(j0 + rj, WIDE)[:, None] * N + rn[None, :]
        vt = kd.load(v_ptr + w, mask=n_ok[None, :], other=0.0).to(kd.float32)
        mt = kd.load(m_ptr + w, mask=n_ok[None, :], other=0)
        ks = widen(2 * j0 + rk, WIDE)
        xt = kd.load(panel + ks[:, None] * BLOCK_M + lm[None, :]).to(kd.float32)
        acc = kd.sparse_dot(kd.trans(vt), kd.trans(mt), xt, acc)
    if main < K2:
        js = widen(main + rj, WIDE)
        ok = (js[:, None] < K2) & n_ok[None, :]
        w = js[:, None] * N + rn[None, :]
        vt = kd.load(v_ptr + w, mask=ok, other=0.0).to(kd.float32)
        mt = kd.load(m_ptr + w, mask=ok, other=0)
        ks = widen(2 * main + rk, WIDE)
        xt = kd.load(panel + ks[:, None] * BLOCK_M + lm[None, :], mask=ks[:, None] < 2 * K2,
                     other=0.0).to(kd.float32)
        acc = kd.sparse_dot(kd.trans(vt), kd.trans(mt), xt, acc)
    if HAS_BIAS:
        acc += kd.load(bias_ptr + rn, mask=n_ok, other=0.0).to(kd.float32)[:, None]
    acc = apply_activation(acc, ACT)
    # stored as y's rows (n innermost): contiguous stores, the transpose read from the tile
    # (in acc's own [n, m] order each element stores to another cache line of y: a quarter
    # of the kernel's time at 1024^3)
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], kd.trans(acc),
             mask=(rm[:, None] < M) & n_ok[None, :])


@kd.jit
def semi_structured_mma_kernel(x_ptr, v_ptr, m_ptr, bias_ptr, c_ptr, M, N, K, ldx,
                               BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr,
                               BLOCK_K: kd.constexpr, GROUP_M: kd.constexpr,
                               HAS_BIAS: kd.constexpr, ACT: kd.constexpr,
                               X_T: kd.constexpr = False, WIDE: kd.constexpr = False):
    # The transposed product y^T = W^T x^T with kd.sparse_dot: W^T [N, K] is 2:4-sparse along
    # its rows, as the sparse operand of mma.sp must be (CUDA, float16/bfloat16).  A program
    # computes acc[n, m] for BLOCK_N columns and BLOCK_M rows, BLOCK_K of K per step; x[m, k]
    # at m * ldx + k (or m + k * ldx when X_T).  Padding (past K or N) gets values 0 at
    # indices 0 and 1: valid metadata that adds nothing.
    pid_m, pid_n = grouped_tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = widen(pid_m * BLOCK_M + kd.arange(0, BLOCK_M), WIDE)
    rn = widen(pid_n * BLOCK_N + kd.arange(0, BLOCK_N), WIDE)
    rj = kd.arange(0, BLOCK_K // 2)
    rk = kd.arange(0, BLOCK_K)
    m_ok = rm[None, :] < M
    n_ok = rn[:, None] < N
    acc = kd.zeros((BLOCK_N, BLOCK_M), dtype=kd.float32)
    for k0 in range(0, K, BLOCK_K):
        js = widen(k0 // 2 + rj, WIDE)
        ks = widen(k0 + rk, WIDE)
        w_ok = n_ok & (js[None, :] < K // 2)
        w_offs = js[None, :] * N + rn[:, None]
        vt = kd.load(v_ptr + w_offs, mask=w_ok, other=0.0)
        mt = kd.where(w_ok, kd.load(m_ptr + w_offs, mask=w_ok, other=0).to(kd.int32),
                      (rj % 2)[None, :])
        if X_T:
            x_offs = ks[:, None] * ldx + rm[None, :]
        else:
            x_offs = ks[:, None] + rm[None, :] * ldx
        xt = kd.load(x_ptr + x_offs, mask=(ks[:, None] < K) & m_ok, other=0.0)
        acc = kd.sparse_dot(vt, mt, xt, acc)
    if HAS_BIAS:
        acc += kd.load(bias_ptr + rn, mask=rn < N, other=0.0).to(kd.float32)[:, None]
    acc = apply_activation(acc, ACT)
    kd.store(c_ptr + rm[None, :] * N + rn[:, None], acc, mask=m_ok & n_ok)


@kd.jit
def pack_panels_kernel(x_ptr, y_ptr, R, C, ldx, ldy, ldp, P: kd.constexpr,
                       BLOCK: kd.constexpr, X_T: kd.constexpr = False):
    # x [R, C]^T in panels of P columns: x[r, c] goes to y[(r // P) * ldp + c * ldy + r % P],
    # zeros for r from R up to the grid's last whole block (a block never straddles two
    # panels: BLOCK divides P); x[r, c] at r * ldx + c, or at r + c * ldx when X_T
    # (column-major).  The tile is written as y's rows (r innermost, contiguous stores); a
    # row-major x is read along c and transposed in registers.
    r0 = (kd.program_id(0) * BLOCK).to(kd.int64)
    lr = kd.arange(0, BLOCK)
    rr = r0 + lr
    rc = (kd.program_id(1) * BLOCK + kd.arange(0, BLOCK)).to(kd.int64)
    if X_T:
        x = kd.load(x_ptr + rr[None, :] + rc[:, None] * ldx,
                    mask=(rr[None, :] < R) & (rc[:, None] < C), other=0.0)
    else:
        x = kd.trans(kd.load(x_ptr + rr[:, None] * ldx + rc[None, :],
                             mask=(rr[:, None] < R) & (rc[None, :] < C), other=0.0))
    base = y_ptr + (r0 // P) * ldp + r0 % P
    kd.store(base + rc[:, None] * ldy + lr[None, :], x, mask=rc[:, None] < C)


PACK_BLOCK = 64  # 64 x 64 blocks: 1.3-1.9x faster than 32 x 32 at 2048^2 (llvm)


def _panels(x: Arg, tile_m: int, backend: str) -> tuple[Arg, int, int]:
    """(x^T in panels, ldx, ldp): a copy of x [M, K] made by a kernel, for the gather-FMA
    kernel: panel p holds x^T's columns p * tile_m ... p * tile_m + tile_m - 1, row k of it
    (tile_m values, zeros past M) at p * ldp + k * ldx with ldx = tile_m and ldp = K * tile_m.
    A program walks one panel front to back: a contiguous stream (x^T rows a whole padded M
    apart put each step's rows in other pages and, a power of two apart, in the same cache
    sets: 3-4x slower on llvm for tiles of a few columns)."""
    M, K = x.shape
    xb, x_t, ld, _ = blas_layout(x)
    panels = -(-M // tile_m)
    ldp = K * tile_m
    xt = empty(x, (panels * ldp,), x.dtype, "x")
    if K:
        block = math.gcd(tile_m, PACK_BLOCK)  # blocks never straddle two panels
        grid = (panels * (tile_m // block), kd.cdiv(K, block))
        flags = {"X_T": True} if x_t else {}
        pack_panels_kernel[grid](xb.kernel_arg, xt.kernel_arg, M, K, ld, tile_m, ldp,
                                 P=tile_m, BLOCK=block, backend=backend, **flags)
    return xt, tile_m, ldp


META_DTYPES = ("int8", "uint8")
# The sparse tensor-core kernel (kd.sparse_dot -> mma.sp): backends with tensor cores, and
# these input dtypes.
MMA_SP_DTYPES = ("float16", "bfloat16")


def _check_meta(meta: Arg) -> None:
    """Host `meta` holds indices 0-3, increasing within each kept pair (device arrays are not
    copied back for this: the kernels read an index as `meta & 3`)."""
    if meta.device is not None or 0 in meta.shape:
        return
    m = np.asarray(meta.data).astype(np.int16)
    bad = (m < 0) | (m > 3)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"meta: value {int(m[at])} at {at} is outside 0-3")
    pairs = m.reshape(m.shape[0] // 2, 2, m.shape[1])
    order = pairs[:, 0] >= pairs[:, 1]
    if order.any():
        g, n = (int(i) for i in np.argwhere(order)[0])
        raise ValueError(f"meta: the kept indices {int(pairs[g, 0, n])}, {int(pairs[g, 1, n])} "
                         f"of group {g} in column {n} are not increasing")


def semi_structured_matmul(x: Any, values: Any, meta: Any, bias: Any = None,
                           activation: str | None = None, backend: str | None = None) -> Any:
    """act(x @ W + bias) for the 2:4 matrix W [K, N] given by `values` and `meta`."""
    x_ = as_arg("x", x, FLOATS, ndim=2, strided=True)
    v = as_arg("values", values, FLOATS, ndim=2)
    same_dtype(x_, v)
    mt = as_arg("meta", meta, META_DTYPES, ndim=2)
    act = check_activation(activation)
    M, K = x_.shape
    if K % 4:
        raise ValueError(f"x: K = {K} is not a multiple of 4")
    N = v.shape[1]
    check_shape(v, (K // 2, N), "K // 2, N for x's K")
    check_shape(mt, (K // 2, N), "values' shape")
    _check_meta(mt)
    bias_ = _bias(bias, N, "values' columns")
    be = resolve_backend(backend, *(a for a in (x_, v, mt, bias_) if a is not None))
    out = empty(x_, (M, N), x_.dtype)
    if M == 0 or N == 0:
        return result(out)
    bias_arg = (bias_ if bias_ is not None else v).kernel_arg  # unread when no bias
    flags = {"HAS_BIAS": bias_ is not None, "ACT": act}
    if "tensor_cores" in get_backend(be).caps and x_.dtype in MMA_SP_DTYPES:
        cfg = configs.pick(configs.SEMI_STRUCTURED_MMA, be, M * N)
        xb, x_t, ldx, _ = blas_layout(x_)
        if x_t:
            flags["X_T"] = True
        if wide_offsets(xb, v, out):
            flags["WIDE"] = True
        grid = (kd.cdiv(M, cfg["BLOCK_M"]) * kd.cdiv(N, cfg["BLOCK_N"]),)
        semi_structured_mma_kernel[grid](xb.kernel_arg, v.kernel_arg, mt.data, bias_arg,
                                         out.kernel_arg, M, N, K, ldx, backend=be, **flags,
                                         **cfg)
        return result(out)
    cfg = configs.pick(configs.SEMI_STRUCTURED, be, M * N)
    xt, ldx, ldp = _panels(x_, cfg["BLOCK_M"], be)
    if wide_offsets(xt, v, out):
        flags["WIDE"] = True
    grid = (kd.cdiv(M, cfg["BLOCK_M"]) * kd.cdiv(N, cfg["BLOCK_N"]),)
    args = (xt.kernel_arg, v.kernel_arg, mt.data, bias_arg, out.kernel_arg, M, N, K // 2)
    if "BLOCK_K" in cfg:  # a row of the panel kernel (kd.sparse_dot), else the gather-FMA one
        semi_structured_panel_kernel[grid](*args, ldp, backend=be, **flags, **cfg)
    else:
        semi_structured_kernel[grid](*args, ldx, ldp, backend=be, **flags, **cfg)
    return result(out)
