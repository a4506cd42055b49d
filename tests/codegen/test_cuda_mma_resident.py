"""Loop-carried tensor-core accumulators (`dot_mma.resident_accumulators`), with no GPU.

A `for` loop whose carried tile is only the accumulator of one mma dot keeps it in the mma
fragments for the whole loop: the exchange with the lowering's layout (through shared memory)
happens once before and once after the loop, not at every dot.  The kernels are lowered for the
CUDA target and run in the Loop IR simulator (intrinsics, barriers and the shared-memory race
detector included) against float64 references.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from kdsl.backends import cuda

import kdsl as kd
from kdsl.ir.loop import ArrayStore, Assign, Const, For, Index, Intrinsic, Stmt, Var
from kdsl.ir.loop_interp import run_kernel
from kdsl.testing import assert_close

RNG = np.random.default_rng(11)
needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")


@kd.jit
def k_loop(a_ptr, b_ptr, c_ptr, K, BM: kd.constexpr, BN: kd.constexpr, BK: kd.constexpr,
           INIT: kd.constexpr, SCALE: kd.constexpr):
    """c = (INIT ? c : 0) + a @ b over a runtime K (a multiple of BK or not: masked loads);
    SCALE multiplies the accumulator inside the loop, which makes it not resident."""
    rm = kd.arange(0, BM)
    rn = kd.arange(0, BN)
    rk = kd.arange(0, BK)
    c_ptrs = c_ptr + rm[:, None] * BN + rn[None, :]
    acc = kd.load(c_ptrs) if INIT else kd.zeros((BM, BN), kd.float32)
    for k0 in range(0, K, BK):
        a = kd.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :],
                    mask=(k0 + rk)[None, :] < K, other=0.0).to(kd.float16)
        b = kd.load(b_ptr + (k0 + rk)[:, None] * BN + rn[None, :],
                    mask=(k0 + rk)[:, None] < K, other=0.0).to(kd.float16)
        acc = kd.dot(a, b, acc)
        if SCALE:
            acc = acc * 0.5
    kd.store(c_ptrs, acc)


@kd.jit
def two_accumulators(a_ptr, b_ptr, c_ptr, d_ptr, K, BM: kd.constexpr, BN: kd.constexpr,
                     BK: kd.constexpr):
    """Two resident accumulators in one loop: c = a @ b, d = a @ (2 b)."""
    rm = kd.arange(0, BM)
    rn = kd.arange(0, BN)
    rk = kd.arange(0, BK)
    acc = kd.zeros((BM, BN), kd.float32)
    acc2 = kd.zeros((BM, BN), kd.float32)
    for k0 in range(0, K, BK):
        a = kd.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :]).to(kd.float16)
        b = kd.load(b_ptr + (k0 + rk)[:, None] * BN + rn[None, :])
        acc = kd.dot(a, b.to(kd.float16), acc)
        acc2 = kd.dot(a, (b * 2.0).to(kd.float16), acc2)
    kd.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)
    kd.store(d_ptr + rm[:, None] * BN + rn[None, :], acc2)


def _walk(stmts: list[Stmt], in_loop: bool = False):
    for s in stmts:
        yield s, in_loop
        # the K loop: the one loop with a runtime bound (element and mma loops are constant)
        inner = in_loop or (isinstance(s, For) and not isinstance(s.hi, Const))
        for f in ("body", "then", "orelse", "cond_body"):
            yield from _walk(getattr(s, f, []) or [], inner)


def _exchanges_in_loop(kernel) -> int:
    """Moves between the mma fragments (variables `d<i>_<j>_<x>`) and shared memory inside the
    kernel's K loop (shared arrays are reused, so they are told by what they exchange)."""
    def frag(x) -> bool:
        return isinstance(x, Var) and re.fullmatch(r"d\d+_\d+_\d+", x.name) is not None

    return sum(1 for s, inside in _walk(kernel.body)
               if inside and (isinstance(s, ArrayStore) and frag(s.value)
                              or isinstance(s, Assign) and frag(s.var)
                              and isinstance(s.value, Index)))


def _ref(a, b, c):
    h = np.float16
    return a.astype(h).astype(np.float64) @ b.astype(h).astype(np.float64) + c


def _compile(kern, *arrays, num_warps=2, **kw):
    return kern.compile(*arrays, backend="cuda", num_warps=num_warps, **kw)


@pytest.mark.parametrize("init", [False, True])
@pytest.mark.parametrize("K", [48, 40])  # 3 whole steps of 16; a ragged last step
def test_resident_accumulator_simulated(init, K):
    BM, BN, BK = 32, 16, 16
    a = RNG.standard_normal((BM, K)).astype(np.float32)
    b = RNG.standard_normal((K, BN)).astype(np.float32)
    c = RNG.standard_normal((BM, BN)).astype(np.float32)
    want = _ref(a, b, c if init else 0)
    ck = _compile(k_loop, a, b, c, K, BM=BM, BN=BN, BK=BK, INIT=init, SCALE=False)
    assert _exchanges_in_loop(ck.kernel) == 0
    assert any(isinstance(s, Intrinsic) and inside for s, inside in _walk(ck.kernel.body))
    run_kernel(ck.kernel, (1,), [a, b, c, K])
    assert_close(c, want, dtype=np.float32, k=K)


def test_not_resident_when_the_loop_reads_the_accumulator():
    BM, BN, BK, K = 16, 16, 16, 32
    a = RNG.standard_normal((BM, K)).astype(np.float32)
    b = RNG.standard_normal((K, BN)).astype(np.float32)
    c = np.zeros((BM, BN), np.float32)
    ck = _compile(k_loop, a, b, c, K, BM=BM, BN=BN, BK=BK, INIT=False, SCALE=True)
    assert _exchanges_in_loop(ck.kernel) > 0  # the dot's result goes to the layout each step
    h = np.float16
    want = np.zeros((BM, BN))
    for k0 in range(0, K, BK):
        want = (want + a[:, k0:k0 + BK].astype(h).astype(np.float64)
                @ b[k0:k0 + BK].astype(h).astype(np.float64)) * 0.5
    run_kernel(ck.kernel, (1,), [a, b, c, K])
    assert_close(c, want, dtype=np.float32, k=K)


def test_chunked_exchange_and_idle_warps(monkeypatch):
    """A 16-row exchange buffer (2 chunks for 32 rows) and 4 warps for 2x2 tiles of 16x8
    (warps beyond the grid idle in the mma part but take part in the exchange)."""
    from kdsl.lowering import dot_mma

    monkeypatch.setattr(dot_mma, "EXCHANGE_BYTES", 16 * 16 * 4)
    monkeypatch.setenv("KDSL_CACHE", "0")
    BM, BN, BK, K = 32, 16, 16, 32
    a = RNG.standard_normal((BM, K)).astype(np.float32)
    b = RNG.standard_normal((K, BN)).astype(np.float32)
    c = RNG.standard_normal((BM, BN)).astype(np.float32)
    want = _ref(a, b, c)
    ck = _compile(k_loop, a, b, c, K, BM=BM, BN=BN, BK=BK, INIT=True, SCALE=False,
                  num_warps=8)
    assert {s.size for s in ck.kernel.arrays if s.name.startswith("acc_sh")} == {16 * BN}
    assert _exchanges_in_loop(ck.kernel) == 0
    run_kernel(ck.kernel, (1,), [a, b, c, K])
    assert_close(c, want, dtype=np.float32, k=K)


def test_two_resident_accumulators():
    BM, BN, BK, K = 16, 16, 16, 32
    a = RNG.standard_normal((BM, K)).astype(np.float32)
    b = RNG.standard_normal((K, BN)).astype(np.float32)
    c = np.zeros((BM, BN), np.float32)
    d = np.zeros((BM, BN), np.float32)
    ck = _compile(two_accumulators, a, b, c, d, K, BM=BM, BN=BN, BK=BK)
    assert _exchanges_in_loop(ck.kernel) == 0
    run_kernel(ck.kernel, (1,), [a, b, c, d, K])
    assert_close(c, _ref(a, b, 0), dtype=np.float32, k=K)
    assert_close(d, _ref(a, 2 * b, 0), dtype=np.float32, k=K)


@needs_compiler
def test_tutorial_matmul_128x128x64_8_warps_compiles():
    """The tutorial tile with resident fragments compiles for sm_80 and sm_90; NVRTC's
    resource usage is printed (the static SASS comparison is benchmarks/gpu_static.py)."""
    a = np.zeros((128, 64), np.float16)
    b = np.zeros((64, 128), np.float16)
    c = np.zeros((128, 128), np.float32)
    ck = _compile(k_loop, a, b, c, 64, BM=128, BN=128, BK=64, INIT=False, SCALE=False,
                  num_warps=8)
    assert _exchanges_in_loop(ck.kernel) == 0
    for arch in ("sm_80", "sm_90"):
        assert "mma.sync.aligned.m16n8k16" in cuda.compile_ptx(ck.source, arch)
        print(f"resident 128x128x64 8 warps {arch}: {cuda.resource_usage(ck.source, arch)}")


@kd.jit
def f16_k_loop(a_ptr, b_ptr, c_ptr, K, BM: kd.constexpr, BN: kd.constexpr, BK: kd.constexpr):
    """float16 operands loaded as they are (contiguous k for a, contiguous n for b, zero
    where K ends): the loads can be copied straight to shared memory."""
    rm = kd.arange(0, BM)
    rn = kd.arange(0, BN)
    rk = kd.arange(0, BK)
    acc = kd.zeros((BM, BN), kd.float32)
    for k0 in range(0, K, BK):
        a = kd.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :],
                    mask=(k0 + rk)[None, :] < K, other=0.0)
        b = kd.load(b_ptr + (k0 + rk)[:, None] * BN + rn[None, :],
                    mask=(k0 + rk)[:, None] < K, other=0.0)
        acc = kd.dot(a, b, acc)
    kd.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def _stmts(stmts, kind):
    return [s for s, _ in _walk(stmts) if isinstance(s, kind)]


@pytest.mark.parametrize("K", [64, 48])  # whole steps; a last step half masked (zero fill)
def test_operands_copied_to_shared_by_cp_async(K):
    from kdsl.ir.loop import AsyncCopy, AsyncWait

    BM, BN, BK = 32, 32, 32
    a = RNG.standard_normal((BM, K)).astype(np.float16)
    b = RNG.standard_normal((K, BN)).astype(np.float16)
    c = np.zeros((BM, BN), np.float32)
    ck = _compile(f16_k_loop, a, b, c, K, BM=BM, BN=BN, BK=BK, num_warps=4)
    copies = _stmts(ck.kernel.body, AsyncCopy)
    assert copies and all(x.n == 8 for x in copies)
    assert _stmts(ck.kernel.body, AsyncWait)
    assert "cp.async.cg.shared.global" in ck.source
    run_kernel(ck.kernel, (1,), [a, b, c, K])
    assert_close(c, _ref(a, b, 0), dtype=np.float32, k=K)


def test_async_copies_land_at_the_wait():
    """The simulator holds an AsyncCopy back until the thread's AsyncWait: a read before it
    sees the old contents (so a lowering that forgets the wait fails its tests), after it the
    copied bits, and zeros where the mask is false."""
    from kdsl.ir.loop import (Array, AsyncCopy, AsyncWait, Barrier, Kernel, KParam, PtrAdd,
                              Store)
    from kdsl.ir.types import PointerType, float16, int32

    src, out = KParam("src", PointerType(float16)), KParam("out", PointerType(float16))
    sh = Array("sh", float16, 16, "shared")
    p = Var("src", src.dtype)
    o = Var("out", out.dtype)
    body = [AsyncCopy(sh, Const(0, int32), p, 8),
            AsyncCopy(sh, Const(8, int32), PtrAdd(p, Const(8, int32)), 8, Const(False, kd.int1)),
            Store(PtrAdd(o, Const(0, int32)), Index(sh, Const(3, int32))),  # before the wait
            AsyncWait(), Barrier(),
            Store(PtrAdd(o, Const(1, int32)), Index(sh, Const(3, int32))),
            Store(PtrAdd(o, Const(2, int32)), Index(sh, Const(9, int32)))]
    k = Kernel("copy", [src, out], body, threads=1, arrays=[sh])
    x = (np.arange(16) + 1).astype(np.float16)
    y = np.full(3, -1, np.float16)
    run_kernel(k, (1,), [x, y])
    np.testing.assert_array_equal(y, np.array([0, 4, 0], np.float16))
