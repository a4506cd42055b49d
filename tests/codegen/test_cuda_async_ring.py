"""The multi-stage cp.async ring of a K loop (kdsl/lowering/async_ring.py), with no GPU.

The kernels are lowered for the CUDA target and run in the Loop IR simulator, whose race
detector counts a copy in flight as a write of every barrier interval until its wait: a ring
slot refilled while another thread still reads it fails these tests.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from kdsl.backends import cuda

import kdsl as kd
from kdsl.ir import loop as L
from kdsl.ir.loop_interp import SharedMemoryRace, run_kernel
from kdsl.ir.types import PointerType, float16, int32
from kdsl.lowering.async_ring import pipeline_copies
from kdsl.testing import assert_close

RNG = np.random.default_rng(5)
needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")


@kd.jit
def walk_k(a_ptr, b_ptr, c_ptr, K, stride_ak, BM: kd.constexpr, BN: kd.constexpr,
           BK: kd.constexpr):
    """Triton's tutorial form: pointer tiles advanced by the loop, only K masked."""
    rm = kd.arange(0, BM)
    rn = kd.arange(0, BN)
    rk = kd.arange(0, BK)
    a_tile = a_ptr + rm[:, None] * K + rk[None, :] * stride_ak
    b_tile = b_ptr + rk[:, None] * BN + rn[None, :]
    acc = kd.zeros((BM, BN), kd.float32)
    for kk in range(0, kd.cdiv(K, BK)):
        left = K - kk * BK
        a = kd.load(a_tile, mask=rk[None, :] < left, other=0.0)
        b = kd.load(b_tile, mask=rk[:, None] < left, other=0.0)
        acc = kd.dot(a, b, acc)
        a_tile += BK * stride_ak
        b_tile += BK * BN
    kd.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


@kd.jit
def pointer_read_after(a_ptr, b_ptr, c_ptr, d_ptr, K, BM: kd.constexpr, BN: kd.constexpr,
                       BK: kd.constexpr):
    """The advanced pointer tile is read after the loop: no ring may run it ahead."""
    rm = kd.arange(0, BM)
    rn = kd.arange(0, BN)
    rk = kd.arange(0, BK)
    a_tile = a_ptr + rm[:, None] * K + rk[None, :]
    b_tile = b_ptr + rk[:, None] * BN + rn[None, :]
    acc = kd.zeros((BM, BN), kd.float32)
    for kk in range(0, K // BK):
        acc = kd.dot(kd.load(a_tile), kd.load(b_tile), acc)
        a_tile += BK
        b_tile += BK * BN
    kd.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)
    kd.store(d_ptr + rm[:, None] * BK + rk[None, :], kd.load(a_tile - BK))


@kd.jit
def unmasked_k(a_ptr, b_ptr, c_ptr, K, BM: kd.constexpr, BN: kd.constexpr, BK: kd.constexpr):
    """Unmasked whole-step loads: every one becomes a copy, the element loop has no work."""
    rm = kd.arange(0, BM)
    rn = kd.arange(0, BN)
    rk = kd.arange(0, BK)
    acc = kd.zeros((BM, BN), kd.float32)
    for k0 in range(0, K, BK):
        a = kd.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        b = kd.load(b_ptr + (k0 + rk)[:, None] * BN + rn[None, :])
        acc = kd.dot(a, b, acc)
    kd.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def _walk(stmts):
    for s in stmts:
        yield s
        for f in ("body", "then", "orelse", "cond_body"):
            yield from _walk(getattr(s, f, None) or [])


def _operands(K, BM=32, BN=32):
    a = RNG.standard_normal((BM, K)).astype(np.float16)
    b = RNG.standard_normal((K, BN)).astype(np.float16)
    return a, b, np.zeros((BM, BN), np.float32)


def _ref(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("stages", [2, 3, 4])
# whole steps, a ragged last step, fewer steps than the ring has slots, one step
@pytest.mark.parametrize("K", [160, 80, 64, 32])
def test_ring_simulated(stages, K):
    BM, BN, BK = 32, 32, 32  # 8 halves per thread of 4 warps: 16-byte copies
    a, b, c = _operands(K)
    ck = walk_k.compile(a, b, c, K, 1, BM=BM, BN=BN, BK=BK, backend="cuda", num_warps=4,
                        num_stages=stages)
    body = list(_walk(ck.kernel.body))
    waits = {s.pending for s in body if isinstance(s, L.AsyncWait)}
    assert waits == {stages - 2, 0}, waits
    assert sum(isinstance(s, L.AsyncCommit) for s in body) == stages  # prologue + loop
    rings = [x for x in ck.kernel.arrays if x.space == "shared" and x.dtype == float16]
    assert rings and all(x.size % stages == 0 for x in rings)
    loop = next(s for s in body if isinstance(s, L.For) and not isinstance(s.hi, L.Const))
    assert sum(isinstance(s, L.Barrier) for s in loop.body) == 1  # one barrier per step
    run_kernel(ck.kernel, (1,), [a, b, c, K, 1])
    assert_close(c, _ref(a, b), dtype=np.float32, k=K)


def test_one_stage_keeps_the_synchronous_copies():
    a, b, c = _operands(64)
    ck = walk_k.compile(a, b, c, 64, 1, BM=32, BN=32, BK=32, backend="cuda", num_warps=4,
                        num_stages=1)
    body = list(_walk(ck.kernel.body))
    assert any(isinstance(s, L.AsyncCopy) for s in body)
    assert not any(isinstance(s, L.AsyncCommit) for s in body)
    run_kernel(ck.kernel, (1,), [a, b, c, 64, 1])
    assert_close(c, _ref(a, b), dtype=np.float32, k=64)


@pytest.mark.parametrize("stages", [1, 3])
def test_unmasked_copies_are_issued(stages):
    """A copy group whose loads all became copies is still emitted (it once was dropped, and
    the dot read shared memory nobody wrote)."""
    a, b, c = _operands(96)
    ck = unmasked_k.compile(a, b, c, 96, BM=32, BN=32, BK=32, backend="cuda", num_warps=4,
                            num_stages=stages)
    assert sum(isinstance(s, L.AsyncCopy) for s in _walk(ck.kernel.body)) >= 2
    run_kernel(ck.kernel, (1,), [a, b, c, 96])
    assert_close(c, _ref(a, b), dtype=np.float32, k=96)


def test_kd_range_num_stages_chooses_the_ring():
    @kd.jit
    def ranged(a_ptr, b_ptr, c_ptr, K, BM: kd.constexpr, BN: kd.constexpr,
               BK: kd.constexpr):
        rm = kd.arange(0, BM)
        rn = kd.arange(0, BN)
        rk = kd.arange(0, BK)
        acc = kd.zeros((BM, BN), kd.float32)
        for k0 in kd.range(0, K, BK, num_stages=2):
            a = kd.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
            b = kd.load(b_ptr + (k0 + rk)[:, None] * BN + rn[None, :])
            acc = kd.dot(a, b, acc)
        kd.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)

    a, b, c = _operands(64)
    ck = ranged.compile(a, b, c, 64, BM=32, BN=32, BK=32, backend="cuda", num_warps=4,
                        num_stages=4)
    waits = {s.pending for s in _walk(ck.kernel.body) if isinstance(s, L.AsyncWait)}
    assert waits == {0}  # two stages: the top of the loop waits for all but nothing pending
    assert sum(isinstance(s, L.AsyncCommit) for s in _walk(ck.kernel.body)) == 2
    run_kernel(ck.kernel, (1,), [a, b, c, 64])
    assert_close(c, _ref(a, b), dtype=np.float32, k=64)


def test_pointer_read_after_the_loop_keeps_the_loop():
    K, BM, BN, BK = 96, 32, 32, 32
    a, b, c = _operands(K)
    d = np.zeros((BM, BK), np.float16)
    ck = pointer_read_after.compile(a, b, c, d, K, BM=BM, BN=BN, BK=BK, backend="cuda",
                                    num_warps=4, num_stages=3)
    assert not any(isinstance(s, L.AsyncCommit) for s in _walk(ck.kernel.body))
    run_kernel(ck.kernel, (1,), [a, b, c, d, K])
    assert_close(c, _ref(a, b), dtype=np.float32, k=K)
    np.testing.assert_array_equal(d, a[:, K - BK:])


def test_stages_shrink_to_the_shared_memory_left():
    a, b, c = _operands(64)
    ck = walk_k.compile(a, b, c, 64, 1, BM=32, BN=32, BK=32, backend="cuda", num_warps=4,
                        num_stages=1)
    k = ck.kernel
    copies = sum(x.size * 2 for x in k.arrays if x.space == "shared" and x.dtype == float16)
    # the hint the lowering writes for num_stages=4, on the one-stage lowering's K loop
    loop = next(s for s in k.body if isinstance(s, L.For) and not isinstance(s.hi, L.Const))
    loop.body.insert(0, L.Comment(f"{L.PIPELINE_HINT} 4"))
    room = k.shared_bytes + copies  # one more copy of the operands: two stages fit, not four
    ringed = pipeline_copies(k, room)
    waits = {s.pending for s in _walk(ringed.body) if isinstance(s, L.AsyncWait)}
    assert waits == {0}
    assert ringed.shared_bytes == k.shared_bytes + copies <= room
    run_kernel(ringed, (1,), [a, b, c, 64, 1])
    assert_close(c, _ref(a, b), dtype=np.float32, k=64)
    assert pipeline_copies(k, k.shared_bytes + copies - 1).shared_bytes == k.shared_bytes


def _copy_kernel(body, n=16):
    src, out = L.KParam("src", PointerType(float16)), L.KParam("out", PointerType(float16))
    sh = L.Array("sh", float16, n, "shared")
    return L.Kernel("copy", [src, out], body, threads=2, arrays=[sh]), sh, \
        L.Var("src", src.dtype), L.Var("out", out.dtype)


def _c(v):
    return L.Const(v, int32)


def test_wait_pending_keeps_the_newest_groups_in_flight():
    """AsyncWait(1) lands every committed group but the newest one."""
    k, sh, p, o = _copy_kernel([])
    tid = L.Special("tid")
    at = L.Binary("mul", tid, _c(8))
    first = L.AsyncCopy(sh, at, L.PtrAdd(p, at), 8)
    later = L.AsyncCopy(sh, at, L.PtrAdd(p, _c(0)), 8, L.Const(False, kd.int1))
    k.body = [first, L.AsyncCommit(), later, L.AsyncCommit(), L.AsyncWait(1), L.Barrier(),
              L.Store(L.PtrAdd(o, tid), L.Index(sh, L.Binary("mul", tid, _c(8)))),
              L.AsyncWait(0), L.Barrier(),
              L.Store(L.PtrAdd(o, L.Binary("add", tid, _c(2))),
                      L.Index(sh, L.Binary("mul", tid, _c(8))))]
    x = (np.arange(16) + 1).astype(np.float16)
    y = np.full(4, -1, np.float16)
    run_kernel(k, (1,), [x, y])
    # after wait(1) each thread sees its first copy; after wait(0) the zeros of the second
    np.testing.assert_array_equal(y, np.array([1, 9, 0, 0], np.float16))


def test_refilling_a_slot_another_thread_reads_is_a_race():
    """Thread 1 reads element 0 in the interval after thread 0 issued a copy into it, whose
    wait comes an interval later still: a race (the copy may land at any moment of it)."""
    k, sh, p, o = _copy_kernel([])
    tid = L.Special("tid")
    k.body = [L.If(L.Binary("eq", tid, _c(0)), [L.AsyncCopy(sh, _c(0), p, 8), L.AsyncCommit()]),
              L.Barrier(),
              L.If(L.Binary("eq", tid, _c(1)), [L.Store(L.PtrAdd(o, _c(0)), L.Index(sh, _c(0)))]),
              L.Barrier(), L.AsyncWait(0), L.Barrier()]
    x = np.ones(16, np.float16)
    with pytest.raises(SharedMemoryRace):
        run_kernel(k, (1,), [x, np.zeros(1, np.float16)])


@needs_compiler
def test_ring_source_compiles():
    a, b, c = _operands(64)
    ck = walk_k.compile(a, b, c, 64, 1, BM=32, BN=32, BK=32, backend="cuda", num_warps=4,
                        num_stages=3)
    assert "kd_cp_async_wait_pending<1>();" in ck.source
    assert "kd_cp_async_commit();" in ck.source
    cuda.compile_cubin(ck.source, "sm_80")


def test_example_runs(capsys):
    """examples/cuda_pipeline.py: both stage counts simulated exactly, the ring's waits."""
    import runpy
    from pathlib import Path

    path = Path(__file__).parents[2] / "examples" / "cuda_pipeline.py"
    runpy.run_path(str(path), run_name="__main__")
    out = capsys.readouterr().out
    assert "num_stages=3: 6 copy statements, 3 commits, waits for [0, 1]" in out
    errors = [float(x) for x in re.findall(r"max error ([0-9.e+-]+)", out)]
    assert len(errors) == 2 and max(errors) < 1e-3
