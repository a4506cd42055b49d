"""Atomics and the debugging ops through the shared lowering, run by the Loop IR simulator for
1, 4 and 8 threads per program against NumPy and the Tile IR interpreter; the values of
kdsl/ir/atomics.py; the tile passes' treatment of assertions."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kdsl as kd
from kdsl.compile_options import CompileOptions
from kdsl.frontend import build_function
from kdsl.ir import atomics, interp, loop
from kdsl.ir.loop_interp import run_kernel
from kdsl.ir.types import PointerType, TileType, bfloat16, float16, float32, float64, int32, scalar
from kdsl.passes import run_tile_passes
from kdsl.lowering import lower
from kdsl.target import Target

THREADS = (1, 4, 8)


def P(dt) -> TileType:
    return scalar(PointerType(dt))


def tile_fn(pyfn, debug: bool = False, **types):
    arg_types = {k: v for k, v in types.items() if isinstance(v, TileType)}
    consts = {k: v for k, v in types.items() if not isinstance(v, TileType)}
    fn = build_function(pyfn, arg_types, consts)
    if debug:
        fn.options = CompileOptions(debug=True)
    return run_tile_passes(fn)[0]


# ----------------------------------------------------------------------- the atomic values

def test_float_max_min_sign_trick():
    """Triton's bit trick is the float max/min on non-NaN values, with -0.0 < +0.0."""
    x = np.array([-np.inf, -3.5, -1e-30, -0.0, 0.0, 1e-30, 2.0, np.inf], np.float32)
    a, b = np.meshgrid(x, x)
    for dt in (float32, float64):
        av, bv = a.astype(dt.np), b.astype(dt.np)
        mx, mn = atomics.rmw("max", dt, av, bv), atomics.rmw("min", dt, av, bv)
        # the rank of each value in x (which is sorted, -0.0 before +0.0)
        ra = np.vectorize(lambda v: 3 if v == 0 and np.signbit(v) else 4 if v == 0
                          else int(np.searchsorted(x, v)))
        want_max = np.where(ra(av) >= ra(bv), av, bv)
        want_min = np.where(ra(av) <= ra(bv), av, bv)
        assert (mx.view(np.uint8) == want_max.view(np.uint8)).all()
        assert (mn.view(np.uint8) == want_min.view(np.uint8)).all()
    # a NaN with its sign bit clear wins a max; the old value is kept against a min
    nan = np.float32(np.nan)
    assert np.isnan(atomics.rmw("max", float32, np.float32(1.0), nan))
    assert atomics.rmw("min", float32, np.float32(1.0), nan) == 1.0


def test_rounding_and_bitwise_compare():
    assert atomics.rmw("add", float16, np.float32(2048.0), np.float32(1.0)) == 2048.0  # RNE
    assert atomics.rmw("add", bfloat16, np.float32(256.0), np.float32(1.5)) == 258.0
    # compare-and-swap compares bits: -0.0 is not +0.0, a NaN matches the same NaN
    assert atomics.cas(float32, np.float32(-0.0), np.float32(0.0), np.float32(5.0)) == -0.0
    assert atomics.cas(float32, np.float32(np.nan), np.float32(np.nan), np.float32(5.0)) == 5.0
    assert atomics.rmw("max", kd.uint32, np.uint32(5), np.uint32(2**31)) == 2**31


# ------------------------------------------------------------------------ through lowering

def histo(h_ptr, x_ptr, old_ptr, lock_ptr, BLOCK: kd.constexpr):
    pid = kd.program_id(0)
    offs = pid * BLOCK + kd.arange(0, BLOCK)
    x = kd.load(x_ptr + offs)
    b = x % 3
    old = kd.atomic_max(h_ptr + b, x, mask=offs < 20, sem="relaxed")
    kd.store(old_ptr + offs, old + kd.atomic_xor(h_ptr + 3 + b, x))
    t = kd.atomic_add(lock_ptr, 1)
    seen = kd.atomic_cas(lock_ptr + 1, t, t + 1)
    kd.store(old_ptr + 64 + pid, seen)
    kd.atomic_xchg(h_ptr + 6 + pid, t)


def test_atomics_lowered_for_every_thread_count():
    fn = tile_fn(histo, h_ptr=P(int32), x_ptr=P(int32), old_ptr=P(int32), lock_ptr=P(int32),
                 BLOCK=12)
    x = np.random.default_rng(1).integers(0, 1000, 24).astype(np.int32)
    outs = []
    for t in (0, *THREADS):  # 0: the Tile IR interpreter
        h, old, lock = np.zeros(8, np.int32), np.zeros(66, np.int32), np.zeros(2, np.int32)
        if t:
            run_kernel(lower(fn, Target("t", threads=t)), (2,), [h, x, old, lock])
        else:
            interp.run(fn, (2,), [h, x, old, lock])
        outs.append((h.copy(), lock.copy(), old.copy()))
        bins = x % 3
        want_max = [x[:20][bins[:20] == k].max() for k in range(3)]
        want_xor = [np.bitwise_xor.reduce(x[bins == k]) for k in range(3)]
        assert h[:6].tolist() == want_max + want_xor
        assert lock.tolist() == [2, 2] and sorted(h[6:]) == [0, 1]
        assert old[64:].tolist() == h[6:].tolist()  # each program's CAS saw its own ticket
    # one thread applies a tile's lanes in the interpreter's (row-major) order: the same old
    # values; several threads apply them in another order
    assert (outs[1][2] == outs[0][2]).all()
    for h, lock, old in outs[1:]:
        assert (h == outs[0][0]).all()


def _count(stmts, kind) -> int:
    n = 0
    for s in stmts:
        n += isinstance(s, kind)
        for f in ("then", "orelse", "body", "cond_body"):
            n += _count(getattr(s, f, None) or [], kind)
    return n


def _atomic_kernel(sem: str, used: bool):
    def k(p_ptr, o_ptr, SEM: kd.constexpr, USED: kd.constexpr):
        old = kd.atomic_add(p_ptr, 1, sem=SEM)
        if USED:
            kd.store(o_ptr, old)
    return tile_fn(k, p_ptr=P(int32), o_ptr=P(int32), SEM=sem, USED=used)


@pytest.mark.parametrize("sem, used, barriers", [
    ("relaxed", False, 0), ("release", False, 1), ("acquire", False, 1), ("acq_rel", False, 2),
    ("relaxed", True, 2), ("acq_rel", True, 2),
])
def test_scalar_atomic_barriers(sem, used, barriers):
    """With several threads, thread 0's atomic waits for the others' earlier accesses when it
    releases, and theirs wait for it when it acquires or its value is shared."""
    fn = _atomic_kernel(sem, used)
    k4 = lower(fn, Target("t", threads=4))
    assert _count(k4.body, loop.Barrier) == barriers
    (atom,) = [s for s in k4.body if isinstance(s, loop.If)
               and isinstance(s.then[0], loop.AtomicRMW)]
    assert atom.then[0].sem == sem
    assert _count(lower(fn, Target("t", threads=1)).body, loop.Barrier) == 0


def printer(x_ptr, BLOCK: kd.constexpr):
    x = kd.load(x_ptr + kd.program_id(0) * BLOCK + kd.arange(0, BLOCK))
    kd.device_print("x", x, kd.reshape(x, (2, BLOCK // 2)) * 2)
    kd.device_print("s", kd.sum(x), hex=True)
    kd.debug_barrier()


def test_print_lowered_prints_the_interpreters_lines(capsys):
    fn = tile_fn(printer, x_ptr=P(float32), BLOCK=6)
    x = np.arange(12, dtype=np.float32) - 3
    interp.run(fn, (2,), [x])
    want = capsys.readouterr().out.splitlines()
    assert len(want) == 2 * (6 + 6 + 1) and want[-1] == "pid (1, 0, 0) idx () s: 0x42040000"  # 33.0
    for t in THREADS:
        k = lower(fn, Target("t", threads=t))
        assert isinstance(k.body[-1], loop.Barrier) == (t > 1)  # the debug barrier
        run_kernel(k, (2,), [x])
        got = capsys.readouterr().out.splitlines()
        assert got == want if t == 1 else sorted(got) == sorted(want)


def test_assertions_only_with_debug():
    def k(x_ptr, n):
        x = kd.load(x_ptr + kd.arange(0, 8))
        kd.device_assert(x > 0, "positive", mask=kd.arange(0, 8) < n)

    off = tile_fn(k, x_ptr=P(float32), n=scalar(int32))
    assert not any(op.kind in ("assert", "load") for op in off.walk())
    assert "checks" not in off.attrs and len(off.params) == 2
    on = tile_fn(k, debug=True, x_ptr=P(float32), n=scalar(int32))
    assert not any(op.kind == "assert" for op in on.walk())  # now an error record
    (site,) = on.attrs["checks"]["sites"]
    assert (site.kind, site.msg, site.shape) == ("assert", "positive", (8,))
    assert [p.name for p in on.params] == ["x_ptr", "n", "kd_errors"]  # no extents


def test_breakpoint_is_dropped_with_a_warning_when_compiled():
    def k(x_ptr):
        x = kd.load(x_ptr + kd.arange(0, 8))
        breakpoint()  # noqa: T100 - the feature under test
        kd.store(x_ptr + kd.arange(0, 8), x)

    fn = tile_fn(k, x_ptr=P(float32))
    assert [op.kind for op in fn.walk()].count("breakpoint") == 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kern = lower(fn, Target("cpu", threads=1))
    assert [w.category for w in caught] == [kd.DebugWarning]
    assert "breakpoint" not in loop.print_kernel(kern)


@pytest.mark.parametrize("sem, groups", [("relaxed", 1), ("release", 2), ("acquire", 2),
                                         ("acq_rel", 3)])
def test_tile_atomics_keep_memory_order(sem, groups):
    """A group runs element after element, so an atomic that releases (acquires) must not
    share it with the accesses before (after) it."""
    def k(p_ptr, q_ptr, SEM: kd.constexpr):
        offs = kd.arange(0, 16)
        kd.store(q_ptr + offs, offs)
        kd.atomic_add(p_ptr + offs, offs, sem=SEM)
        kd.store(q_ptr + 16 + offs, offs)

    fn = tile_fn(k, p_ptr=P(int32), q_ptr=P(int32), SEM=sem)
    for t in (1, 4):
        body = lower(fn, Target("t", threads=t)).body
        assert sum(isinstance(s, loop.For) for s in body) == groups
