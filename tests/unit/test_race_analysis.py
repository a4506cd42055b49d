"""Which plain accesses checked mode's race detection takes as ordered by atomics
(kdsl/passes/races.py `synchronised_accesses`), decided from the kernel's text."""

from __future__ import annotations

import kdsl as kd
from kdsl.frontend import build_function
from kdsl.ir.types import PointerType, TileType, float32, int32
from kdsl.passes.races import synchronised_accesses

F = TileType((), PointerType(float32))
I = TileType((), PointerType(int32))


def _lines(fn, **types) -> tuple[set[int], set[int]]:
    """(lines of the synchronised accesses, lines of the others), relative to the def."""
    f = build_function(fn, types, {})
    first = fn.__code__.co_firstlineno
    synced = synchronised_accesses(f)
    ops = [op for op in f.walk() if op.kind in ("load", "store")]
    return ({op.loc.line - first for op in ops if id(op) in synced},
            {op.loc.line - first for op in ops if id(op) not in synced})


def spin_lock(x_ptr, lock_ptr):
    kd.store(x_ptr, 1.0)
    while kd.atomic_cas(lock_ptr + 1, 0, 1) == 1:
        pass
    kd.store(x_ptr + 1, kd.load(x_ptr + 1) + 1.0)
    kd.atomic_xchg(lock_ptr + 2, 0)  # another lock: still held
    kd.store(x_ptr + 2, 2.0)
    kd.atomic_xchg(lock_ptr + 1, 0)  # the same pointer, written again: released
    kd.store(x_ptr + 3, 3.0)


def test_spin_lock_until_the_release_of_the_same_pointer():
    synced, others = _lines(spin_lock, x_ptr=F, lock_ptr=I)
    assert synced == {4, 6} and others == {1, 8}


def relaxed_unlock(x_ptr, lock_ptr):
    while kd.atomic_xchg(lock_ptr, 1) == 1:
        pass
    kd.atomic_xchg(lock_ptr, 0, sem="relaxed")  # releases nothing
    kd.store(x_ptr, 1.0)


def test_only_a_releasing_atomic_unlocks():
    synced, others = _lines(relaxed_unlock, x_ptr=F, lock_ptr=I)
    assert synced == {4} and not others


def counters(x_ptr, count_ptr, n):
    kd.store(x_ptr + kd.program_id(0), 1.0)
    if kd.atomic_add(count_ptr, 1) == n - 1:
        kd.store(x_ptr + n, kd.load(x_ptr))
    if n > 2:  # a condition on no atomic
        kd.store(x_ptr + n + 1, 1.0)
    while n > 100:  # nor here
        n = n - 1
    kd.store(x_ptr + n + 2, 1.0)


def test_branch_on_an_atomics_result():
    synced, others = _lines(counters, x_ptr=F, count_ptr=I, n=TileType((), int32))
    assert synced == {3} and others == {1, 5, 8}
