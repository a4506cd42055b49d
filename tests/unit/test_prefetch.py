"""Software prefetch of a loop's next tiles (kdsl/lowering/prefetch.py): which loads get
hints, what address they name, where they go, and that they change no result."""

from __future__ import annotations

import platform

import numpy as np
import pytest
from kdsl.backends.c_like import emit
from kdsl.backends.opencl import opencl_dialect

import kdsl as kd
from kdsl.frontend import build_function
from kdsl.ir import loop as L
from kdsl.ir.loop_verify import verify
from kdsl.ir.types import PointerType, float32, int32, int64, scalar
from kdsl.lowering import lower
from kdsl.lowering.prefetch import LINE
from kdsl.passes import run_tile_passes
from kdsl.target import Target
from kdsl.testing import assert_close


def _walk(stmts, depth=0):
    for s in stmts:
        yield s, depth
        for f in ("body", "then", "orelse"):
            yield from _walk(getattr(s, f, None) or [], depth + 1)


def _text(e) -> str:
    return L.format_expr(e)


@kd.jit
def mm_offsets(a_ptr, b_ptr, c_ptr, M, N, K, BM: kd.constexpr, BN: kd.constexpr,
               BK: kd.constexpr):
    rm = kd.program_id(0) * BM + kd.arange(0, BM)
    rn = kd.arange(0, BN)
    rk = kd.arange(0, BK)
    acc = kd.zeros((BM, BN), dtype=kd.float32)
    for k0 in range(0, K, BK):
        a = kd.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :], mask=rm[:, None] < M)
        b = kd.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
        acc = kd.dot(a, b, acc)
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=rm[:, None] < M)


@kd.jit
def mm_pointers(a_ptr, b_ptr, c_ptr, M, N, K, BM: kd.constexpr, BN: kd.constexpr,
                BK: kd.constexpr):
    # the Triton tutorial's carried pointer tiles (kdsl/passes/loop_pointers.py makes them
    # a carried scalar offset)
    rm = kd.program_id(0) * BM + kd.arange(0, BM)
    rn = kd.arange(0, BN)
    rk = kd.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * N + rn[None, :]
    acc = kd.zeros((BM, BN), dtype=kd.float32)
    for k0 in range(0, K, BK):
        acc = kd.dot(kd.load(a_ptrs), kd.load(b_ptrs), acc)
        a_ptrs += BK
        b_ptrs += BK * N
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@kd.jit
def same_tile(x_ptr, out_ptr, n, BLOCK: kd.constexpr):
    # every iteration loads the same tile: nothing to fetch ahead
    offs = kd.arange(0, BLOCK)
    acc = kd.zeros((BLOCK,), dtype=kd.float32)
    for _ in range(n):
        acc += kd.load(x_ptr + offs)
    kd.store(out_ptr + offs, acc)


@kd.jit
def guarded(x_ptr, out_ptr, n, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    acc = kd.zeros((BLOCK,), dtype=kd.float32)
    for i in range(n):
        if i % 2 == 0:  # a conditional load: left to the hardware
            acc += kd.load(x_ptr + i * BLOCK + offs)
    kd.store(out_ptr + offs, acc)


def _mm(kernel, M=64, N=64, K=256, BM=32, BN=64, BK=64):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = np.zeros((M, N), np.float32)
    ck = kernel[(kd.cdiv(M, BM),)](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, backend="llvm")
    return ck, a, b, c


def _prefetches(kernel):
    return [(s, d) for s, d in _walk(kernel.body) if isinstance(s, L.Prefetch)]


@pytest.mark.parametrize("kernel", [mm_offsets, mm_pointers], ids=["offsets", "pointers"])
def test_matmul_prefetches_next_tiles_during_the_dot(kernel):
    ck, a, b, c = _mm(kernel)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), dtype=np.float32, k=256)
    hints = _prefetches(ck.kernel)
    texts = [_text(s.ptr) for s, _ in hints]
    # one for a's tile; b, a load only the dot reads, is copied from memory into the
    # micro-kernel's panels by a loop that gets none (dot_cpu.py `_pack_from_memory`)
    assert len(hints) == 1 and "a_ptr" in texts[0], texts
    assert any(a.name.startswith("bpack") for a in ck.kernel.arrays)
    # the next iteration's addresses: the loop variable (or carried offset) advanced
    assert all("64:int32" in t for t in texts), texts
    # one hint per 64-byte line: the innermost hint loop steps by 16 float32
    loops = [s for s, _ in _walk(ck.kernel.body) if isinstance(s, L.For)
             and any(isinstance(x, L.Prefetch) for x in s.body)]
    assert loops and all(isinstance(lp.step, L.Const) and lp.step.value == LINE // 4
                         for lp in loops)
    # spread over the dot's row-block loop: the hints sit inside a loop that also holds FMAs
    host = [s for s, _ in _walk(ck.kernel.body) if isinstance(s, L.For) and any(
        isinstance(x, L.For) and any(isinstance(y, L.Prefetch) for y in x.body)
        for x, _ in _walk(s.body))]
    assert any("fma(" in "\n".join(L.format_stmts(h.body)) for h in host)


def test_hints_change_no_result_and_reach_the_assembly():
    ck, a, b, c = _mm(mm_offsets, M=96, N=64, K=320, BM=32, BN=64, BK=64)
    ref = np.zeros_like(c)
    mm_offsets[(3,)](a, b, ref, 96, 64, 320, BM=32, BN=64, BK=64, backend="interp")
    assert_close(c, ref.astype(np.float64), dtype=np.float32, k=320)
    if platform.machine() in ("x86_64", "AMD64"):
        assert "prefetcht1" in ck.ir["asm"]


def test_no_hints_for_loads_that_do_not_advance_or_are_conditional():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    ck = same_tile[(1,)](x, out, 5, BLOCK=64, backend="llvm")
    np.testing.assert_array_equal(out, 5 * x)
    assert not _prefetches(ck.kernel)
    xs = np.ones(64 * 6, np.float32)
    ck = guarded[(1,)](xs, out, 6, BLOCK=64, backend="llvm")
    np.testing.assert_array_equal(out, np.full(64, 3, np.float32))
    assert not _prefetches(ck.kernel)


def _lowered(caps: frozenset[str]):
    p = scalar(PointerType(float32))
    i = scalar(int32)
    fn, _ = run_tile_passes(build_function(
        mm_offsets.fn, {"a_ptr": p, "b_ptr": p, "c_ptr": p, "M": i, "N": i, "K": i},
        {"BM": 32, "BN": 64, "BK": 64}))
    return lower(fn, Target("llvm", threads=1, caps=caps, vector_bits=512, vector_regs=32))


def test_only_targets_with_the_capability_get_hints():
    base = frozenset({"fp64", "reduce_partials", "cpu_microkernel"})
    assert _prefetches(_lowered(base | {"prefetch"}))
    assert not _prefetches(_lowered(base))


def test_prefetch_statement_prints_verifies_and_simulates():
    # a hint may name any address: far out of bounds is no error anywhere
    p = L.Var("p", PointerType(float32))
    s = L.Prefetch(L.PtrAdd(p, L.Const(1 << 40, int64)))
    assert "prefetch(" in "\n".join(L.format_stmts([s]))
    k = _lowered(frozenset({"fp64", "reduce_partials", "cpu_microkernel", "prefetch"}))
    verify(k, None)  # raises on a malformed statement
    src = emit(k, opencl_dialect(simd_lanes=16))
    assert "prefetch(" in src and src.count("prefetch(") == 1  # a's tile (b: its panels)


def test_num_stages_one_turns_the_hints_off():
    # Triton's num_stages <= 1: no pipelining, so no fetching ahead either
    rng = np.random.default_rng(4)
    a = rng.standard_normal((64, 256), dtype=np.float32)
    b = rng.standard_normal((256, 64), dtype=np.float32)
    c1, c3 = np.zeros((64, 64), np.float32), np.zeros((64, 64), np.float32)
    one = mm_offsets[(2,)](a, b, c1, 64, 64, 256, BM=32, BN=64, BK=64, backend="llvm",
                           num_stages=1)
    three = mm_offsets[(2,)](a, b, c3, 64, 64, 256, BM=32, BN=64, BK=64, backend="llvm",
                             num_stages=3)
    assert not _prefetches(one.kernel) and _prefetches(three.kernel)
    np.testing.assert_array_equal(c1, c3)


@kd.jit
def paged(x_ptr, table_ptr, out_ptr, n, BLOCK: kd.constexpr):
    # the next block's address needs the table's next entry, which may lie past the table:
    # a hint must not read memory, so this loop gets none
    offs = kd.arange(0, BLOCK)
    acc = kd.zeros((BLOCK,), dtype=kd.float32)
    for i in range(n):
        blk = kd.load(table_ptr + i)
        acc += kd.load(x_ptr + blk * BLOCK + offs)
    kd.store(out_ptr + offs, acc)


def test_no_hint_whose_address_reads_memory():
    x = np.arange(64 * 4, dtype=np.float32)
    table = np.array([3, 1], np.int32)  # the last iteration's "next entry" is past the end
    out = np.zeros(64, np.float32)
    ck = paged[(1,)](x, table, out, 2, BLOCK=64, backend="llvm")
    np.testing.assert_array_equal(out, x[192:] + x[64:128])
    assert not _prefetches(ck.kernel)


def test_example_runs(capsys):
    """examples/cpu_prefetch.py: no hints at num_stages=1, one at 3 (a's tile: b is copied
    from memory into the dot's panels, dot_cpu.py), equal results."""
    import runpy
    from pathlib import Path

    path = Path(__file__).parents[2] / "examples" / "cpu_prefetch.py"
    runpy.run_path(str(path), run_name="__main__")
    out = capsys.readouterr().out
    assert "num_stages=1: 0 prefetch hints" in out and "num_stages=3: 1 prefetch hints" in out
    assert "results equal: True" in out


@kd.jit
def mm_range(a_ptr, b_ptr, c_ptr, M, N, K, BM: kd.constexpr, BN: kd.constexpr,
             BK: kd.constexpr, STAGES: kd.constexpr):
    rm = kd.program_id(0) * BM + kd.arange(0, BM)
    rn = kd.arange(0, BN)
    rk = kd.arange(0, BK)
    acc = kd.zeros((BM, BN), dtype=kd.float32)
    for k0 in kd.range(0, K, BK, num_stages=STAGES):
        a = kd.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        b = kd.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
        acc = kd.dot(a, b, acc)
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def test_kd_range_num_stages_sets_it_per_loop():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((32, 128), dtype=np.float32)
    b = rng.standard_normal((128, 64), dtype=np.float32)
    c = np.zeros((32, 64), np.float32)
    for stages, want in ((1, False), (2, True)):
        ck = mm_range[(1,)](a, b, c, 32, 64, 128, BM=32, BN=64, BK=64, STAGES=stages,
                            backend="llvm")
        assert bool(_prefetches(ck.kernel)) is want, stages
        assert_close(c, a.astype(np.float64) @ b.astype(np.float64), dtype=np.float32, k=128)
