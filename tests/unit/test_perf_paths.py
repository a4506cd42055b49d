"""Structural tests of the CPU performance paths: nested one-thread element loops (no flat
index arithmetic for 2-D load groups), the loop-carried pointer strength reduction, and the
specialisation key (alignment / divisibility by 16, fast math)."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd
from kdsl.ir import loop as L
from kdsl.ir.loop_interp import run_kernel
from kdsl.ir.types import PointerType
from kdsl.testing import assert_close


@kd.jit
def ptr_matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
               BM: kd.constexpr, BN: kd.constexpr, BK: kd.constexpr):
    offs_m = kd.program_id(0) * BM + kd.arange(0, BM)
    offs_n = kd.program_id(1) * BN + kd.arange(0, BN)
    offs_k = kd.arange(0, BK)
    a_ptrs = a_ptr + (offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn)
    acc = kd.zeros((BM, BN), dtype=kd.float32)
    for k in range(kd.cdiv(K, BK)):
        a = kd.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
        b = kd.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        acc = kd.dot(a, b, acc)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk
    kd.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@kd.jit
def copy2d(x_ptr, y_ptr, N, BM: kd.constexpr, BN: kd.constexpr):
    rm = kd.arange(0, BM)
    rn = kd.arange(0, BN)
    offs = rm[:, None] * N + rn[None, :]
    kd.store(y_ptr + offs, kd.load(x_ptr + offs) * 2.0)


def _fold_halves(parts: np.ndarray) -> np.ndarray:
    """Per row, the partials folded as the CPU lowering does: partial j += partial j + w/2,
    then j + w/4, ... (float32, element-wise)."""
    parts = parts.copy()
    w = parts.shape[1]
    while w > 1:
        w //= 2
        parts[:, :w] = parts[:, :w] + parts[:, w:2 * w]
    return parts[:, 0]


def _masked_loop(ck) -> str:
    """The Loop IR text of a compiled kernel without its unmasked copies (mask versioning,
    kdsl/lowering/mask_version.py, which tests of its own cover): what the lowering wrote."""
    from kdsl.lowering.mask_version import masked_path
    return L.print_kernel(masked_path(ck.kernel))


def _walk(stmts):
    for s in stmts:
        yield s
        for f in ("body", "then", "orelse"):
            yield from _walk(getattr(s, f, None) or [])


def _exprs(node):
    if isinstance(node, L.Expr):
        yield node
    if isinstance(node, (L.Expr, L.Stmt)):
        for f in node.__dataclass_fields__:
            x = getattr(node, f)
            for y in (x if isinstance(x, list) else [x]):
                if isinstance(y, (L.Expr, L.Stmt)):
                    yield from _exprs(y)


def test_2d_group_runs_nested_loops_without_shifts():
    x = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    y = np.zeros_like(x)
    ck = copy2d[(1,)](x, y, 16, BM=8, BN=16, backend="llvm")
    assert_close(y, x.astype(np.float64) * 2)
    loops = [s for s in _walk(ck.kernel.body) if isinstance(s, L.For)]
    # one loop per dim, the last dim innermost
    assert [s.hi.value for s in loops] == [8, 16]
    ops = {e.op for s in ck.kernel.body for e in _exprs(s) if isinstance(e, L.Binary)}
    assert not ops & {"shr", "and", "div", "mod"}, ops


def test_pointer_tile_strength_reduced():
    M = N = K = 48
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = np.zeros((M, N), np.float32)
    ck = ptr_matmul[(3, 3)](a, b, c, M, N, K, K, 1, N, 1, BM=16, BN=16, BK=16,
                            backend="llvm")
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), dtype=np.float32, k=K)
    text = ck.ir["tile.loop_pointers"]
    assert "a_ptrs_off" in text and "b_ptrs_off" in text
    # no pointer array is carried (or stored) by the lowering
    assert not [a for a in ck.kernel.arrays if isinstance(a.dtype, PointerType)]


@pytest.mark.parametrize("backend", ["interp", "opencl"])
def test_pointer_strength_reduction_other_backends(backend):
    if backend not in kd.available_backends():
        pytest.skip(f"{backend} unavailable")
    M, N, K = 32, 32, 40  # K ragged: the masked last step
    rng = np.random.default_rng(1)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = np.zeros((M, N), np.float32)
    ptr_matmul[(2, 2)](a, b, c, M, N, K, K, 1, N, 1, BM=16, BN=16, BK=16, backend=backend)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), dtype=np.float32, k=K)


def test_specialisation_key_alignment_and_fast_math():
    base = np.zeros(40, np.float32)
    y = np.zeros(16, np.float32)
    ck1 = copy2d[(1,)](base[:16], y, 16, BM=1, BN=16, backend="llvm")
    ck2 = copy2d[(1,)](base[1:17], y, 16, BM=1, BN=16, backend="llvm")  # 4-byte offset
    assert ck1 is not ck2
    ck3 = copy2d[(1,)](base[:16], y, 16, BM=1, BN=16, backend="llvm", fast_math=True)
    assert ck3 is not ck1 and ck3.kernel.options.fast_math is True
    assert not ck1.kernel.options.fast_math
    # a cached hit returns the same specialisation
    assert copy2d[(1,)](base[:16], y, 16, BM=1, BN=16, backend="llvm") is ck1
    keys = list(copy2d.cache)
    assert any(k[1] == (True, True, True) for k in keys)
    assert any(k[1] == (False, True, True) for k in keys)


def test_multiple_of_16_reaches_the_tile_function():
    from kdsl.compile_options import CompileOptions
    from kdsl.ir import types as T
    from kdsl.runtime.compiler import build_tile
    ptr = T.TileType((), T.PointerType(T.float32))
    opts = CompileOptions(num_warps=1, multiple_of_16=("x_ptr", "N"), fast_math=True)
    fn, _ = build_tile(copy2d, {"x_ptr": ptr, "y_ptr": ptr, "N": T.TileType((), T.int32)},
                       {"BM": 1, "BN": 16}, options=opts)
    assert fn.options is opts
    # and the launcher computes them: a 16-byte aligned base, N % 16 == 0
    ck = copy2d[(1,)](np.zeros(16, np.float32), np.zeros(16, np.float32), 16, BM=1, BN=16,
                      backend="llvm", fast_math=True)
    assert set(ck.kernel.options.multiple_of_16) >= {"x_ptr", "N"} and ck.kernel.options.fast_math


@kd.jit
def scale_add(x_ptr, y_ptr, n, a, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(y_ptr + offs, kd.load(x_ptr + offs, mask=m) * a + n, mask=m)


def test_fast_launch_path_matches_full_binder():
    """The llvm launch fast path: hits reuse the compiled kernel; every change the full binder
    specialises on (dtype, alignment, int % 16, constexpr type) still gets its own kernel and
    unusual arguments fall back on the binder and its errors."""
    if "llvm" not in kd.available_backends():
        pytest.skip("llvm backend unavailable")
    buf = np.arange(80, dtype=np.float32)
    x, y = buf[:64], np.zeros(64, np.float32)
    ck1 = scale_add[(2,)](x, y, 64, 2.0, BLOCK=32, backend="llvm")
    ck2 = scale_add[(2,)](x, y, 64, 2.0, BLOCK=32)  # full binder, records the fast entry
    assert scale_add._fast and ck1 is ck2
    ck3 = scale_add[(2,)](x, y, 64, 3.0, BLOCK=32)  # fast hit
    assert ck3 is ck2
    assert_close(y, buf[:64].astype(np.float64) * 3 + 64)
    # a misaligned view, an n that is not a multiple of 16 and float64 data each specialise
    xs = buf[1:65]
    assert scale_add[(2,)](xs, y, 64, 1.0, BLOCK=32) is not ck2
    assert_close(y, buf[1:65].astype(np.float64) + 64)
    assert scale_add[(2,)](x, y, 63, 1.0, BLOCK=32) is not ck2
    assert_close(y[:63], buf[:63].astype(np.float64) + 63)
    x64, y64 = np.arange(64, dtype=np.float64), np.zeros(64)
    scale_add[(2,)](x64, y64, 64, 1.0, BLOCK=32)
    assert_close(y64, np.arange(64.0) + 64)
    # BLOCK=True and BLOCK=32.0 are other constexprs: never the int kernel
    assert scale_add[(64,)](x, y, 64, 1.0, BLOCK=1) is not ck2
    # misses that must raise as the full binder does
    ro = y.copy()
    ro.flags.writeable = False
    scale_add[(2,)](x, y, 64, 1.0, BLOCK=32)
    with pytest.raises(ValueError, match="read-only"):
        scale_add[(2,)](x, ro, 64, 1.0, BLOCK=32)
    # a strided view misses too; the full binder passes its first element (as Triton), and the
    # kernel's unit stride reads the memory of its span
    pairs = np.arange(128, dtype=np.float32).reshape(64, 2)
    scale_add[(2,)](pairs[:, 1], y, 64, 1.0, BLOCK=32)
    assert_close(y, np.arange(1, 65, dtype=np.float64) + 64)
    with pytest.raises(ValueError, match="float32"):
        scale_add[(2,)](x, y, 64, 1e300, BLOCK=32)
    with pytest.raises(ValueError, match="grid"):
        scale_add[(0,)](x, y, 64, 1.0, BLOCK=32)
    # clearing the memory cache also forgets the fast entries
    scale_add.cache.clear()
    ck4 = scale_add[(2,)](x, y, 64, 1.0, BLOCK=32)
    assert ck4 is not ck2 and len(scale_add.cache) == 1


@kd.jit
def rms_rows(x_ptr, y_ptr, N, eps, BLOCK: kd.constexpr):
    row = kd.program_id(0)
    cols = kd.arange(0, BLOCK)
    mask = cols < N
    x = kd.load(x_ptr + row * N + cols, mask=mask, other=0.0)
    rstd = 1 / kd.sqrt(kd.sum(x * x, axis=0) / N + eps)
    kd.store(y_ptr + row * N + cols, x * rstd, mask=mask)


def test_whole_row_sum_fused_into_its_element_loop():
    """A whole-tile float sum on the CPU is accumulated in the loop computing its input: the
    row of x * x gets no register array (nor x, which is loaded again after the sum: no store
    comes between), and the partial order (element r to partial r % 64) gives the same bits as
    the separate loop."""
    x = np.random.default_rng(3).standard_normal((3, 320)).astype(np.float32)
    y = np.empty_like(x)
    ck = rms_rows.compile(x, y, 320, 1e-6, BLOCK=512, backend="llvm")
    loop = _masked_loop(ck)
    assert loop.count("[512]") == 0, loop
    assert loop.count("load(") == 2, loop
    if "llvm" in kd.available_backends():
        rms_rows[(3,)](x, y, 320, 1e-6, BLOCK=512, backend="llvm")
        xd = x.astype(np.float64)
        assert_close(y, xd / np.sqrt((xd * xd).mean(axis=1, keepdims=True) + 1e-6))
        # bit-identical to 64 partials of x*x in float32, folded in the same tree of halves
        sq = x * x
        parts = np.zeros((3, 64), np.float32)
        for rb in range(0, 512, 64):
            parts += np.pad(sq, ((0, 0), (0, 192)))[:, rb:rb + 64]
        acc = _fold_halves(parts)
        rstd = np.float32(1) / np.sqrt(acc / np.float32(320) + np.float32(1e-6))
        assert np.array_equal(y, x * rstd[:, None])


@kd.jit
def clobber_then_read(x_ptr, y_ptr, BLOCK: kd.constexpr):
    cols = kd.arange(0, BLOCK)
    x = kd.load(x_ptr + cols)
    kd.store(x_ptr + cols, x * 0.0)  # overwrites the source: x must be the value loaded
    s = kd.sum(x, axis=0)
    kd.store(y_ptr + cols, x + s)


@kd.jit
def centre_rows(x_ptr, y_ptr, N, BLOCK: kd.constexpr):
    row = kd.program_id(0)
    cols = kd.arange(0, BLOCK)
    mask = cols < N
    x = kd.load(x_ptr + row * N + cols, mask=mask, other=0.0)
    d = kd.where(mask, x - kd.sum(x, axis=0) / N, 0.0)
    sd = kd.sqrt(kd.sum(d * d, axis=0) / N)
    kd.store(y_ptr + row * N + cols, d / sd, mask=mask)


def test_load_rematerialised_only_without_a_store_between():
    """With one thread, a loaded tile read by later groups is loaded again there (no register
    array), as is what is computed from it (d), when nothing is stored in between; a store
    between the load and a later reader keeps the loaded snapshot in an array."""
    x = np.random.default_rng(4).standard_normal((2, 200)).astype(np.float32)
    y = np.empty_like(x)
    loop = _masked_loop(centre_rows.compile(x, y, 200, BLOCK=256, backend="llvm"))
    assert "[256]" not in loop and loop.count("load(") == 3, loop
    v = np.random.default_rng(5).standard_normal(64).astype(np.float32)
    out = np.empty_like(v)
    loop = clobber_then_read.compile(v.copy(), out, BLOCK=64, backend="llvm").ir["loop"]
    assert loop.count("[64]") == 1, loop  # x kept: loaded once, before the store
    for be in [b for b in ("llvm", "interp") if b in kd.available_backends()]:
        centre_rows[(2,)](x, y, 200, BLOCK=256, backend=be)
        xd = x.astype(np.float64)
        d = xd - xd.mean(axis=1, keepdims=True)
        assert_close(y, d / np.sqrt((d * d).mean(axis=1, keepdims=True)))
        xv = v.copy()
        clobber_then_read[(1,)](xv, out, BLOCK=64, backend=be)
        assert_close(out, v.astype(np.float64) + v.astype(np.float64).sum())
        assert not xv.any()


@kd.jit
def tile_dot(a_ptr, b_ptr, c_ptr, M: kd.constexpr, N: kd.constexpr, K: kd.constexpr):
    rm = kd.arange(0, M)
    rn = kd.arange(0, N)
    rk = kd.arange(0, K)
    a = kd.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = kd.load(b_ptr + rk[:, None] * N + rn[None, :])
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], kd.dot(a, b))


@kd.jit
def tile_dot_nt(a_ptr, bt_ptr, e_ptr, c_ptr, M: kd.constexpr, N: kd.constexpr, K: kd.constexpr):
    rm = kd.arange(0, M)
    rn = kd.arange(0, N)
    rk = kd.arange(0, K)
    a = kd.load(a_ptr + rm[:, None] * K + rk[None, :])
    bt = kd.load(bt_ptr + rn[:, None] * K + rk[None, :])  # b stored as N x K
    bt = kd.dot(bt, kd.load(e_ptr + rk[:, None] * K + rk[None, :]))  # in registers
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], kd.dot(a, kd.trans(bt)))


def _dot_reads(ck):
    """(packed arrays by base name, arrays the FMAs read, arrays the broadcasts read)."""
    packs = {x.name.rstrip("0123456789_"): x for x in ck.kernel.arrays if "pack" in x.name}
    fmas = [e for s in ck.kernel.body for e in _exprs(s) if isinstance(e, L.Fma)]
    assert fmas
    fma_reads = {e.array.name for f in fmas for e in _exprs(f) if isinstance(e, L.Index)}
    bcast = {s.value.array.name for s in _walk(ck.kernel.body) if isinstance(s, L.Assign)
             and isinstance(s.value, L.Index) and any(s.var.name in str(f) for f in fmas)}
    return packs, fma_reads, bcast


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_cpu_dot_reads_contiguous_tiles_in_place(dtype):
    # row-major float32 tiles (16-bit ones are float32 in registers) need no second copy:
    # the broadcast reads a's array where it was loaded, the FMA reads b's panels, which b's
    # load fills straight from memory (only the dot reads b: dot_cpu.py `_pack_from_memory`)
    M, N, K = 16, 64, 24
    rng = np.random.default_rng(2)
    a = rng.standard_normal((M, K)).astype(dtype)
    b = rng.standard_normal((K, N)).astype(dtype)
    c = np.zeros((M, N), np.float32)
    ck = tile_dot[(1,)](a, b, c, M=M, N=N, K=K, backend="llvm")
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), dtype=np.float32, k=K)
    packs, fma_reads, bcast = _dot_reads(ck)
    assert set(packs) == {"bpack"}, [x.name for x in ck.kernel.arrays]
    assert len(fma_reads) == 2 and len(bcast) == 1 and not bcast & fma_reads - {"blk"}
    assert packs["bpack"].name in fma_reads
    # one tile array besides the panels, the register block and the result: a's
    tiles = [x.name for x in ck.kernel.arrays
             if not x.name.startswith(("bpack", "blk", "dot"))]
    assert len(tiles) == 1 and tiles[0] in bcast, [x.name for x in ck.kernel.arrays]


def test_cpu_dot_packs_a_transposed_b_into_micro_panels():
    # `dot(a, trans(bt))` of a computed bt: b's rows are bt's columns (stride K), so b is
    # copied into k-major NR-column panels once per dot; a is still read in place (a
    # transposed *load* is not a view: it is loaded transposed)
    M, N, K = 16, 64, 24
    rng = np.random.default_rng(3)
    a = rng.standard_normal((M, K), dtype=np.float32)
    bt = rng.standard_normal((N, K), dtype=np.float32)
    c = np.zeros((M, N), np.float32)
    eye = np.eye(K, dtype=np.float32)
    ck = tile_dot_nt[(1,)](a, bt, eye, c, M=M, N=N, K=K, backend="llvm")
    assert_close(c, a.astype(np.float64) @ bt.T.astype(np.float64), dtype=np.float32, k=K)
    packs = {x.name.rstrip("0123456789_"): x for x in ck.kernel.arrays if "pack" in x.name}
    assert set(packs) == {"bpack"}, [x.name for x in ck.kernel.arrays]
    assert packs["bpack"].size == K * N
    fmas = [e for s in _walk(ck.kernel.body) for e in _exprs(s) if isinstance(e, L.Fma)]
    assert any(e.array is packs["bpack"] for f in fmas for e in _exprs(f)
               if isinstance(e, L.Index))


@kd.jit
def few_rows_dequant_dot(a_ptr, q_ptr, s_ptr, c_ptr, M: kd.constexpr, N: kd.constexpr,
                         K: kd.constexpr, BK: kd.constexpr, GROUP: kd.constexpr,
                         PLAIN: kd.constexpr):
    # a weight-only quantised matmul's K loop (kernels/quant.py): b computed from an int8
    # load and a per-group scale row (PLAIN: b a float32 load, s_ptr unread)
    rm = kd.arange(0, M)
    rn = kd.arange(0, N)
    acc = kd.zeros((M, N), dtype=kd.float32)
    for k0 in range(0, K, BK):
        ks = k0 + kd.arange(0, BK)
        a = kd.load(a_ptr + rm[:, None] * K + ks[None, :])
        if PLAIN:
            b = kd.load(s_ptr + ks[:, None] * N + rn[None, :])
        else:
            q = kd.load(q_ptr + ks[:, None] * N + rn[None, :]).to(kd.float32)
            b = q * kd.load(s_ptr + (ks // GROUP)[:, None] * N + rn[None, :])
        acc = kd.dot(a, b, acc)
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def _few_rows(M, plain=False, N=64, K=64, BK=16, GROUP=32):
    rng = np.random.default_rng(M)
    a = rng.standard_normal((M, K)).astype(np.float32)
    q = rng.integers(-128, 128, (K, N)).astype(np.int8)
    s = (rng.random((K, N) if plain else (K // GROUP, N)) + 0.5).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    args = (a, q, s, c)
    meta = dict(M=M, N=N, K=K, BK=BK, GROUP=GROUP, PLAIN=plain)
    ck = few_rows_dequant_dot[(1,)](*args, **meta, backend="llvm")
    w = s.astype(np.float64) if plain else q * np.repeat(s, GROUP, axis=0).astype(np.float64)
    assert_close(c, a.astype(np.float64) @ w, dtype=np.float32, k=K)
    return ck, args, w


@pytest.mark.parametrize("M", [4, 16])
def test_cpu_dot_of_few_rows_evaluates_a_computed_b_where_it_reads_it(M):
    # M <= 2 x MR rows (a decode step): the dequantised b is computed in the FMA loop, NR
    # values per k (dot_cpu.py `_b_row`), with no tile of it and no panel copy; the row the
    # next K step reads is hinted, the group's scale row (through k // GROUP) is not
    ck, args, w = _few_rows(M)
    names = [x.name for x in ck.kernel.arrays]
    rows = [x for x in ck.kernel.arrays if x.name.startswith("brow")]
    assert len(rows) == 1 and not any("pack" in n for n in names), names
    assert all(x.size < 16 * 64 for x in ck.kernel.arrays if x not in rows
               and not x.name.startswith(("blk", "acc", "dot", "a"))), names
    fmas = [e for s in _walk(ck.kernel.body) for e in _exprs(s) if isinstance(e, L.Fma)]
    assert any(e.array is rows[0] for f in fmas for e in _exprs(f) if isinstance(e, L.Index))
    hinted = [str(s.ptr) for s in _walk(ck.kernel.body) if isinstance(s, L.Prefetch)]
    assert any("q_ptr" in h for h in hinted), hinted
    assert not any("s_ptr" in h for h in hinted), hinted
    # the Loop IR simulator agrees with the compiled kernel
    a, q, s, c = args
    sim = np.zeros_like(c)
    run_kernel(ck.kernel, (1,), [a, q, s, sim])
    np.testing.assert_array_equal(sim, c)


def test_cpu_dot_of_many_rows_keeps_the_computed_b_tile():
    # more than two blocks of rows: b is computed once into its tile, read in place
    ck, _, _ = _few_rows(64)
    assert not any(x.name.startswith("brow") for x in ck.kernel.arrays)


@pytest.mark.parametrize("M,direct", [(4, True), (16, False)])
def test_cpu_dot_reads_a_loaded_b_of_one_row_block_from_memory(M, direct):
    # a float32 load b: evaluated where the FMAs read it only with one block of rows (each
    # element read once); with more the panels are copied once and read from L1
    ck, _, _ = _few_rows(M, plain=True)
    names = [x.name for x in ck.kernel.arrays]
    assert any(n.startswith("brow") for n in names) == direct, names
    assert any(n.startswith("bpack") for n in names) != direct, names


@kd.jit
def column_stats(x_ptr, w_ptr, y_ptr, R, O: kd.constexpr, BR: kd.constexpr):
    rows = kd.arange(0, BR)
    cols = kd.arange(0, O)
    rmask = rows < R
    w = kd.load(w_ptr + rows, mask=rmask, other=0.0)
    x = kd.load(x_ptr + rows[:, None] * O + cols[None, :], mask=rmask[:, None], other=0.0)
    s = kd.sum(w[:, None] * x, axis=0)
    hi = kd.max(kd.where(rmask[:, None], x, -float("inf")), axis=0)
    lo = kd.min(kd.where(rmask[:, None], x, float("inf")), axis=0)
    kd.store(y_ptr + cols, s)
    kd.store(y_ptr + O + cols, hi)
    kd.store(y_ptr + 2 * O + cols, lo)


@kd.jit
def column_sum_of_stored(x_ptr, y_ptr, BR: kd.constexpr, O: kd.constexpr,
                         TRANS: kd.constexpr):
    # x is read by a loop before the sum, so it lives in an array when summed; with TRANS it
    # is [O, BR] in memory and its transpose's column sums are its rows' sums (contiguous),
    # read through the transpose
    r = kd.arange(0, BR)
    o = kd.arange(0, O)
    t = kd.zeros((O,), kd.float32)
    if TRANS:
        x = kd.load(x_ptr + o[:, None] * BR + r[None, :])
        for i in range(2):
            t += kd.max(x, axis=1)
        s = kd.sum(kd.trans(x), axis=0)
    else:
        x = kd.load(x_ptr + r[:, None] * O + o[None, :])
        for i in range(2):
            t += kd.max(x, axis=0)
        s = kd.sum(x, axis=0)
    kd.store(y_ptr + o, s + t)


def _serial_columns(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Column sums, maxima and minima combined row by row in float32 (the lowering's order)."""
    s = np.zeros(x.shape[1], np.float32)
    for r in range(x.shape[0]):
        s = s + w[r] * x[r]
    return np.concatenate([s, np.max(x, axis=0), np.min(x, axis=0)])


def test_column_reduction_interchanged_and_fused():
    """A reduction along a tile's outer axis on one thread runs for r: for o: over an array
    of the O accumulators (the inner loop walks x's contiguous elements), accumulated in the
    loop that computes x (the product w * x gets no R x O array); every column combines its
    rows in order, so the bits equal a row-by-row float32 sum.  A NaN propagates through
    max and min as before."""
    rng = np.random.default_rng(6)
    R, O, BR = 37, 64, 64
    x = rng.standard_normal((R, O)).astype(np.float32)
    x[5, 3] = np.nan
    w = rng.standard_normal(R).astype(np.float32)
    y = np.empty(3 * O, np.float32)
    loop = column_stats.compile(x, w, y, R, O=O, BR=BR, backend="llvm").ir["loop"]
    assert f"[{BR * O}]" not in loop, loop  # neither x nor w * x is stored
    assert loop.count("reg float32 col") == 3, loop
    want = _serial_columns(x, w)
    for be in [b for b in ("llvm", "opencl", "interp") if b in kd.available_backends()]:
        y[:] = 0
        column_stats[(1,)](x, w, y, R, O=O, BR=BR, backend=be)
        np.testing.assert_array_equal(y, want, err_msg=be)


def test_column_reduction_of_a_contiguous_view_or_stored_tile():
    """`sum(trans(x), axis=0)` reads x's rows, which are contiguous: the generic row loop is
    kept.  A tile that lives in an array (read again later) is summed by the interchanged
    loops over that array, with the same bits."""
    rng = np.random.default_rng(7)
    xt = rng.standard_normal((16, 32)).astype(np.float32)
    y = np.empty(16, np.float32)
    loop = column_sum_of_stored.compile(xt, y, BR=32, O=16, TRANS=True, backend="llvm").ir["loop"]
    assert "reg float32 col" not in loop, loop
    x = rng.standard_normal((32, 16)).astype(np.float32)
    loop = column_sum_of_stored.compile(x, y, BR=32, O=16, TRANS=False, backend="llvm").ir["loop"]
    assert loop.count("reg float32 col") == 2, loop
    s = np.zeros(16, np.float32)
    for r in range(32):
        s = s + x[r]
    want = s + (np.max(x, axis=0) + np.max(x, axis=0))
    for be in [b for b in ("llvm", "opencl", "interp") if b in kd.available_backends()]:
        column_sum_of_stored[(1,)](x, y, BR=32, O=16, TRANS=False, backend=be)
        np.testing.assert_array_equal(y, want, err_msg=be)
        column_sum_of_stored[(1,)](xt, y, BR=32, O=16, TRANS=True, backend=be)
        assert_close(y, xt.astype(np.float64).sum(axis=1) + 2 * xt.max(axis=1))


@kd.jit
def row_sums_64(x_ptr, y_ptr, R: kd.constexpr, C: kd.constexpr):
    r = kd.arange(0, R)
    c = kd.arange(0, C)
    x = kd.load(x_ptr + r[:, None] * C + c[None, :])
    kd.store(y_ptr + r, kd.sum(x, axis=1))


def test_short_rows_sum_through_16_partials():
    """A float row sum of 32-127 elements on the CPU adds element c to partial c % 16, then
    folds the 16 partials as a tree of halves (a fixed order: the bits below are computed that
    way)."""
    x = np.random.default_rng(8).standard_normal((8, 64)).astype(np.float32)
    y = np.empty(8, np.float32)
    loop = row_sums_64.compile(x, y, R=8, C=64, backend="llvm").ir["loop"]
    assert "reg float32 part0[16]" in loop, loop
    parts = np.zeros((8, 16), np.float32)
    for rb in range(0, 64, 16):
        parts = parts + x[:, rb:rb + 16]
    want = _fold_halves(parts)
    for be in [b for b in ("llvm", "opencl") if b in kd.available_backends()]:
        row_sums_64[(1,)](x, y, R=8, C=64, backend=be)
        np.testing.assert_array_equal(y, want, err_msg=be)
