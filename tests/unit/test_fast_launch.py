"""The launch fast path (kdsl/runtime/fastpath.py) on the llvm backend: which launches it
repeats, that it specialises exactly as the full path does, and that everything else still
reaches the full binder and its errors."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import kdsl as kd
from kdsl.runtime.launches import record_launches

pytestmark = pytest.mark.skipif("llvm" not in kd.available_backends(),
                                reason="llvm backend unavailable")


def axpy(x_ptr, y_ptr, out_ptr, n, a, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(out_ptr + offs, a * kd.load(x_ptr + offs, mask=m) + kd.load(y_ptr + offs, mask=m),
             mask=m)


def arrays(n=64):
    x = np.arange(n, dtype=np.float32)
    return x, np.ones_like(x), np.zeros_like(x)


def test_repeats_hit_and_return_the_full_paths_kernel():
    k = kd.jit(axpy)
    x, y, o = arrays()
    first = k[(2,)](x, y, o, 64, 2.0, BLOCK=32)  # full path; records the entry
    assert len(k._fast) == 1 and k._fast_source.startswith("def axpy(")
    for a in (3.0, 4.0):
        assert k[(2,)](x, y, o, 64, a, BLOCK=32) is first
        np.testing.assert_array_equal(o, a * x + 1)
    assert k[(2,)] is k[(2,)]  # one launcher per grid
    # by keyword, with launch options, through run(): entries of their own, same kernel
    assert k[(2,)](x, y, o, n=64, a=5.0, BLOCK=32) is first
    assert k[(2,)](x, y, o, 64, 6.0, BLOCK=32, backend="llvm", num_warps=4) is first
    assert k.run(x, y, o, 64, 7.0, BLOCK=32, grid=(2,)) is first
    np.testing.assert_array_equal(o, 7.0 * x + 1)
    assert len(k.cache) == 1


def test_errors_are_the_full_binders():
    k = kd.jit(axpy)
    x, y, o = arrays()
    k[(2,)](x, y, o, 64, 2.0, BLOCK=32)
    k[(2,)](x, y, o, 64, 2.0, BLOCK=32)
    cases = [
        ((x, y, o, 64), {"BLOCK": 32}, "missing argument 'a'"),
        ((x, y, o, 64, 2.0), {}, "missing constexpr argument 'BLOCK'"),
        ((x, y, o, 64, 2.0, 32, 1), {}, "too many arguments"),
        ((x, y, o, 64, 2.0), {"BLOCK": 32, "blok": 1}, "unknown keyword argument 'blok'"),
        ((x, y, o, 64, 2.0), {"BLOCK": 32, "n": 64}, "'n' given both by position and by"),
        ((x, y, o, 64, "2"), {"BLOCK": 32}, "argument 'a'"),
        ((x, y, o, 64, 1e300), {"BLOCK": 32}, "overflows float32"),
        ((x, y, o, 64, 2.0), {"BLOCK": [32]}, "not hashable"),
    ]
    for args, kwargs, msg in cases:
        with pytest.raises((TypeError, ValueError), match=msg):
            k[(2,)](*args, **kwargs)
    with pytest.raises(ValueError, match="grid"):
        k[(0,)](x, y, o, 64, 2.0, BLOCK=32)
    with pytest.raises(TypeError, match="grid callable raised"):
        k[lambda meta: meta["nope"]](x, y, o, 64, 2.0, BLOCK=32)
    ro = o.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        k[(2,)](x, y, ro, 64, 2.0, BLOCK=32)


def test_grid_callable_sees_the_arguments_each_launch():
    k = kd.jit(axpy)
    seen = []

    def grid(meta):
        seen.append(meta)
        return (kd.cdiv(meta["n"], meta["BLOCK"]),)

    for n in (64, 64, 40, 64):
        x, y, o = arrays(n)
        k[grid](x, y, o, n, 2.0, BLOCK=16)
        np.testing.assert_array_equal(o, 2 * x + 1)
    assert [m["n"] for m in seen] == [64, 64, 40, 64] and seen[-1]["BLOCK"] == 16
    assert set(seen[-1]) == {"x_ptr", "y_ptr", "out_ptr", "n", "a", "BLOCK"}


def test_poisoned_and_checked_launches_are_never_repeated_blindly(monkeypatch):
    k = kd.jit(axpy)
    x, y, o = arrays()
    plain = k[(2,)](x, y, o, 64, 2.0, BLOCK=32)
    k[(2,)](x, y, o, 64, 2.0, BLOCK=32)
    checked = k[(2,)](x, y, o, 64, 2.0, BLOCK=32, check=True)
    assert checked is not plain and checked.checks is not None
    assert k[(2,)](x, y, o, 64, 2.0, BLOCK=32, check=True) is checked
    monkeypatch.setenv("KDSL_CHECK", "1")
    assert k[(2,)](x, y, o, 64, 2.0, BLOCK=32) is checked
    monkeypatch.delenv("KDSL_CHECK")
    assert k[(2,)](x, y, o, 64, 2.0, BLOCK=32) is plain
    assert all(entry[0].checks is None for entry in k._fast.values())
    fills = []
    from kdsl.runtime import checked as checked_mod

    real = checked_mod.poison
    monkeypatch.setattr(checked_mod, "poison", lambda *a: fills.append(1) or real(*a))
    for _ in range(3):
        k[(2,)](x, y, o, 64, 2.0, BLOCK=32, poison=True)
    monkeypatch.setenv("KDSL_POISON", "1")
    k[(2,)](x, y, o, 64, 2.0, BLOCK=32)
    assert len(fills) == 4  # every poisoned launch filled its outputs


def test_environment_backend_and_observers(monkeypatch):
    k = kd.jit(axpy)
    x, y, o = arrays()
    for _ in range(2):
        assert k[(2,)](x, y, o, 64, 2.0, BLOCK=32).backend == "llvm"
    monkeypatch.setenv("KDSL_BACKEND", "interp")
    assert k[(2,)](x, y, o, 64, 3.0, BLOCK=32).backend == "interp"
    np.testing.assert_array_equal(o, 3 * x + 1)
    monkeypatch.delenv("KDSL_BACKEND")
    with record_launches() as seen:
        k[(2,)](x, y, o, 64, 2.0, BLOCK=32)
    assert len(seen) == 1 and seen[0].jit is k


def test_defaults_and_keyword_only_parameters():
    @kd.jit
    def fill(out_ptr, n, value=1.5, *, scale=2.0, BLOCK: kd.constexpr = 16):
        offs = kd.arange(0, BLOCK)
        kd.store(out_ptr + offs, value * scale + offs * 0.0, mask=offs < n)

    o = np.zeros(16, np.float32)
    for _ in range(2):
        fill[(1,)](o, 16)
        np.testing.assert_array_equal(o, np.full(16, 3.0))
        fill[(1,)](o, 16, 0.5, scale=4.0)
        np.testing.assert_array_equal(o, np.full(16, 2.0))
    assert len(fill._fast) == 1 and len(fill.cache) == 1  # a keyword is no option
    with pytest.raises(TypeError, match="too many"):
        fill[(1,)](o, 16, 0.5, 4.0)


def test_cache_changes_forget_the_fast_entries():
    k = kd.jit(axpy)
    x, y, o = arrays()
    k[(2,)](x, y, o, 64, 2.0, BLOCK=32)
    assert k._fast
    key = next(iter(k.cache))
    del k.cache[key]
    assert not k._fast
    k[(2,)](x, y, o, 64, 2.0, BLOCK=32)
    assert k._fast
    k.cache.clear()
    assert not k._fast and not k.cache


def test_threads_launch_concurrently():
    k = kd.jit(axpy)
    errors = []

    def work(a):
        x, y, o = arrays()
        try:
            for _ in range(50):
                k[(2,)](x, y, o, 64, a, BLOCK=32)
                np.testing.assert_array_equal(o, a * x + 1)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(float(a),)) for a in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(k.cache) == 1


def test_cheap_grids_run_inline_after_a_measurement():
    from kdsl.backends import llvm_runtime

    k = kd.jit(axpy)
    G = llvm_runtime.INLINE_MAX_PROGRAMS  # the longest grid that may run inline
    n = G * 32
    x, y, o = arrays(n)
    if llvm_runtime.INLINE_GRID > G:
        pytest.skip("one worker: every grid runs inline")
    ck = k[(G,)](x, y, o, n, 2.0, BLOCK=32)
    runner = ck.handle.runner
    assert runner.per_program is not None  # measured on the pool
    for _ in range(3):  # (the first launch runs cold: page faults, caches)
        if runner.inline(G):
            break
        k[(G,)](x, y, o, n, 2.0, BLOCK=32)
    assert runner.inline(G)  # G programs of 32 elements: far under POOL_MIN_SECONDS
    k[(G,)](x, y, o, n, 3.0, BLOCK=32)
    np.testing.assert_array_equal(o, 3 * x + 1)
    runner.per_program = 1.0  # a costly kernel goes (back) to the pool, and is measured
    k[(G,)](x, y, o, n, 4.0, BLOCK=32)
    np.testing.assert_array_equal(o, 4 * x + 1)
    assert runner.per_program < 1.0


def test_pool_workers_stay_off_the_callers_cpu():
    """After a pooled launch the workers' affinity is the process's CPUs less the one the
    caller ran on (`llvm_runtime._steer`): woken onto the caller's CPU, a worker shared its
    core for milliseconds on a VM whose idle vCPUs look preempted."""
    import os

    from kdsl.backends import llvm_runtime as R

    allowed = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
    if R._CPU is None or not 2 <= len(allowed) <= R.STEER_MAX_CPUS or R.INLINE_GRID > 2:
        pytest.skip("needs Linux, 2 to STEER_MAX_CPUS CPUs and a pool")
    fn = lambda packed, lo, hi, g0, g1, g2: time.sleep(0.002)  # noqa: E731 - a slow grid
    for _ in range(3):  # the first launch starts the workers, the next ones steer them
        R.run_grid(fn, b"", (R.workers() * 4, 1, 1))
    cpu, count = R._POOL["steered"]
    tids = R._POOL["tids"]
    assert cpu in allowed and count == len(tids) >= 1
    for tid in tids:
        try:
            got = os.sched_getaffinity(tid)
        except OSError:  # an exited thread
            continue
        assert got == allowed - {cpu}
