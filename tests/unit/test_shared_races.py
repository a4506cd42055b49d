"""The Loop IR simulator's shared-memory race detector: an access of a shared array element
that conflicts with another thread's access in the same barrier interval is an error, whatever
order the simulator happens to run the threads in; so a lowering that drops a barrier fails."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd
from kdsl.frontend import build_function
from kdsl.ir import loop as L
from kdsl.ir.loop_interp import SharedMemoryRace, run_kernel
from kdsl.ir.types import PointerType, TileType, float32, int32
from kdsl.passes import run_tile_passes
from kdsl.lowering import lower
from kdsl.target import Target

I = lambda v: L.Const(v, int32)
T = 4


def _neighbours(barrier: bool, shift: int) -> L.Kernel:
    """Thread t writes sh[t], then reads sh[(t + shift) % T] into out[t]."""
    sh = L.Array("sh", int32, T, "shared")
    out = L.KParam("out", PointerType(int32))
    tid = L.Special("tid")
    other = L.Binary("mod", L.Binary("add", tid, I(shift)), I(T))
    body = [L.ArrayStore(sh, tid, L.Binary("add", tid, I(1)))]
    body += [L.Barrier()] if barrier else []
    body += [L.Store(L.PtrAdd(L.Var("out", out.dtype), tid), L.Index(sh, other))]
    return L.Kernel("k", [out], body, [], [sh], T)


def test_barrier_separated_exchange_is_no_race():
    out = np.zeros(T, np.int32)
    run_kernel(_neighbours(True, 1), (1,), [out])
    np.testing.assert_array_equal(out, [2, 3, 4, 1])


@pytest.mark.parametrize("shift", [1, T - 1], ids=["reads a higher thread", "reads a lower one"])
def test_missing_barrier_is_a_race_whatever_the_thread_order(shift):
    # the simulator runs thread 0 first: with shift 1 it reads sh[1] before thread 1 writes it
    # (a stale value no lock-step run would notice), with shift T-1 after thread 3 wrote sh[3]
    with pytest.raises(SharedMemoryRace, match=r"race on sh\[\d\] before the first barrier: "
                                               r"thread \d (reads|writes) it and thread \d"):
        run_kernel(_neighbours(False, shift), (1,), [np.zeros(T, np.int32)])


def test_same_element_written_by_two_threads():
    sh = L.Array("sh", int32, 1, "shared")
    body = [L.ArrayStore(sh, I(0), L.Special("tid"))]
    with pytest.raises(SharedMemoryRace, match=r"sh\[0\].*thread 1 writes it and thread 0 "
                                               r"writes it"):
        run_kernel(L.Kernel("k", [], body, [], [sh], 2), (1,), [])
    run_kernel(L.Kernel("k", [], body, [], [sh], 2), (1,), [], races=False)  # can be off


def test_own_elements_and_reads_only_do_not_race():
    sh = L.Array("sh", int32, T, "shared")
    out = L.KParam("out", PointerType(int32))
    tid = L.Special("tid")
    body = [L.ArrayStore(sh, tid, tid), L.ArrayStore(sh, tid, L.Binary("add", L.Index(sh, tid),
                                                                        I(1))),
            L.Barrier(),  # then every thread reads every element: readers never conflict
            L.Store(L.PtrAdd(L.Var("out", out.dtype), tid),
                    L.Binary("add", L.Index(sh, I(0)), L.Index(sh, I(T - 1))))]
    out = np.zeros(T, np.int32)
    run_kernel(L.Kernel("k", [L.KParam("out", PointerType(int32))], body, [], [sh], T), (1,),
               [out])
    np.testing.assert_array_equal(out, [1 + T] * T)


# --------------------------------------------------------- a barrier dropped from a lowering

def _reductions(x_ptr, o_ptr):
    r = kd.arange(0, 4)[:, None]
    c = kd.arange(0, 16)[None, :]
    x = kd.load(x_ptr + r * 16 + c)
    kd.store(o_ptr + kd.arange(0, 4), kd.sum(x, axis=1))
    kd.store(o_ptr + 4 + kd.arange(0, 16), kd.max(x, axis=0))


def _barriers(stmts: list) -> list[tuple[list, int]]:
    """(statement list, index) of every Barrier, in program order."""
    found = []
    for i, s in enumerate(stmts):
        if isinstance(s, L.Barrier):
            found.append((stmts, i))
        for name in ("body", "then", "orelse", "cond_body"):
            sub = getattr(s, name, None)
            if isinstance(sub, list):
                found += _barriers(sub)
    return found


def _lowered(threads: int) -> L.Kernel:
    ptr = TileType((), PointerType(float32))
    fn, _ = run_tile_passes(build_function(_reductions, {"x_ptr": ptr, "o_ptr": ptr}, {}))
    return lower(fn, Target("test", threads=threads))


def test_dropped_barrier_in_a_lowered_reduction_is_caught():
    x = np.arange(64, dtype=np.float32)[::-1].copy()
    out = np.zeros(20, np.float32)
    kernel = _lowered(8)
    run_kernel(kernel, (1,), [x, out])  # as lowered: no race, and right
    np.testing.assert_array_equal(out[:4], x.reshape(4, 16).sum(1))
    np.testing.assert_array_equal(out[4:], x.reshape(4, 16).max(0))
    count = len(_barriers(kernel.body))
    caught = []
    for j in range(count):
        kernel = _lowered(8)
        stmts, i = _barriers(kernel.body)[j]
        del stmts[i]
        try:
            run_kernel(kernel, (1,), [x, np.zeros(20, np.float32)])
        except SharedMemoryRace as e:
            caught.append(str(e))
    # the barrier after the staging of x and the one after the partial sums are both needed
    assert len(caught) >= 2, caught
    assert any("x_sh" in m for m in caught) and any("part" in m for m in caught), caught
