"""Ctrl-C during an llvm launch: the interrupt stops the launch between chunks of programs, and
no worker thread writes the arrays after the KeyboardInterrupt reaches the caller (who may free
them at once: a temporary output would otherwise be written after it was freed)."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

import kdsl as kd
from kdsl.backends import llvm_runtime


@kd.jit
def slow_fill(out_ptr, n_iter, BLOCK: kd.constexpr):
    pid = kd.program_id(0)
    offs = kd.arange(0, BLOCK)
    acc = kd.zeros([BLOCK], dtype=kd.float32) + pid
    for i in range(n_iter):
        acc = acc * 0.999999 + 1.0
    kd.store(out_ptr + pid * BLOCK + offs, acc)


def _program_seconds(n_iter: int) -> float:
    out = np.zeros(128, np.float32)
    slow_fill[(1,)](out, 10, BLOCK=128, backend="llvm")  # compile
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        slow_fill[(1,)](out, n_iter, BLOCK=128, backend="llvm")
        best = min(best, time.perf_counter() - t)
    return best


@pytest.mark.skipif(llvm_runtime.workers() < 2, reason="needs two CPU threads for the pool")
def test_sigint_stops_the_launch_and_no_write_follows():
    if "llvm" not in kd.available_backends():
        pytest.skip("llvm backend not available")
    n_iter = 2_000_000
    per_program = max(_program_seconds(n_iter), 1e-4)
    grid = max(64, int(1.5 / per_program))  # about 1.5 s of work in all
    out = np.full((grid, 128), -1.0, np.float32)
    # A runner started in the background by a shell without job control inherits SIGINT
    # ignored (and Python then keeps it ignored): give this test Python's own handler.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    try:
        timer.start()
        t = time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            slow_fill[(grid,)](out, n_iter, BLOCK=128, backend="llvm")
        took = time.perf_counter() - t
        timer.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    snapshot = out.copy()
    time.sleep(max(0.3, 10 * per_program))
    np.testing.assert_array_equal(out, snapshot)  # nothing written after the call left
    unwritten = (out[:, 0] == -1.0).sum()
    assert unwritten > 0, "the interrupt cancelled no chunk"
    assert took < 1.4, f"the launch ran {took:.2f} s after the interrupt"


def test_an_exception_leaves_only_after_every_worker_stopped():
    if llvm_runtime.workers() < 2:
        pytest.skip("needs two CPU threads for the pool")
    lock = threading.Lock()
    state = {"running": 0, "ran": 0}

    def fn(packed, start, end, g0, g1, g2):
        with lock:
            state["running"] += 1
        try:
            if start == 0:
                time.sleep(0.01)
                raise RuntimeError("boom")
            time.sleep(0.05)  # a worker still busy when the first chunk fails
        finally:
            with lock:
                state["running"] -= 1
                state["ran"] += 1

    with pytest.raises(RuntimeError, match="boom"):
        llvm_runtime.run_grid(fn, b"", (1000, 1, 1))
    assert state["running"] == 0
    assert state["ran"] >= 2


def test_only_short_grids_run_inline():
    """A grid runs inline (one native call, which Ctrl-C cannot stop) only when it is cheap by
    the kernel's measured cost and has at most `INLINE_MAX_PROGRAMS` programs: the cost was
    measured on earlier launches, whose arguments may have made the programs far cheaper."""
    runner = llvm_runtime.GridRunner(fn=None, launch=lambda block: None)
    runner.per_program = 1e-9  # measured as almost free
    assert runner.inline(llvm_runtime.INLINE_MAX_PROGRAMS)
    assert not runner.inline(llvm_runtime.INLINE_MAX_PROGRAMS + 1)
    runner.per_program = 1e-3
    assert not runner.inline(1)  # 1 ms is no longer cheap
