"""The llvm backend's native worker pool (backends/llvm_pool.py): every program id of a grid
runs exactly once, launch after launch and from several Python threads at once; long grids
stay on the Python pool (Ctrl-C); the pool is off with KDSL_NATIVE_POOL=0, rebuilt in a forked
child and stopped cleanly at exit."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from kdsl.backends import llvm_pool
from kdsl.backends import llvm_runtime as R

import kdsl as kd

pytestmark = [
    pytest.mark.skipif("llvm" not in kd.available_backends(), reason="llvm backend unavailable"),
    pytest.mark.skipif(not llvm_pool.enabled() or R.workers() < 2,
                       reason="native pool off here (KDSL_NATIVE_POOL=0, one CPU, or not "
                              "Linux on x86-64/AArch64/RISC-V)"),
]


@kd.jit
def count_programs(hits_ptr, out_ptr, BLOCK: kd.constexpr):
    pid = kd.program_id(0)
    kd.atomic_add(hits_ptr + pid, 1)
    offs = pid * BLOCK + kd.arange(0, BLOCK)
    kd.store(out_ptr + offs, offs.to(kd.float32) * 2.0)


def _jobs() -> int:
    p = llvm_pool._STATE.get("pool")
    return 0 if p is None else ctypes.c_int64.from_address(p.address + llvm_pool.SEQ).value


def _launch(n: int, block: int = 64) -> tuple[np.ndarray, np.ndarray]:
    hits = np.zeros(n, np.int32)
    out = np.zeros(n * block, np.float32)
    count_programs[(n,)](hits, out, BLOCK=block, backend="llvm")
    return hits, out


def test_every_program_runs_once_on_the_native_pool():
    _launch(37)  # the first launch measures the kernel (Python pool)
    before = _jobs()
    for n in (2, 3, 37, 1000, 4099):
        for _ in range(20):
            hits, out = _launch(n)
            assert (hits == 1).all(), f"grid {n}: programs run {set(hits.tolist())} times"
            np.testing.assert_array_equal(out, np.arange(out.size, dtype=np.float32) * 2)
    # grids of 2 and 3 cheap programs run inline (GridRunner); the three others are pooled
    assert _jobs() - before >= 60, "the launches did not go through the native pool"
    pool = llvm_pool._STATE["pool"]
    assert len(pool.tids) == R.workers() - 1


def test_launches_from_several_threads_at_once():
    _launch(64)
    errors: list[str] = []

    def work(t: int) -> None:
        for i in range(40):
            n = 50 + 7 * t + i
            hits, out = _launch(n)
            if not (hits == 1).all() or out[-1] != (out.size - 1) * 2:
                errors.append(f"thread {t} launch {i}: grid {n} ran wrong")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def test_long_grids_stay_on_the_python_pool(monkeypatch):
    _launch(64)
    monkeypatch.setattr(llvm_pool, "NATIVE_MAX_SECONDS", 0.0)  # every grid counts as long
    before = _jobs()
    hits, _ = _launch(64)
    assert (hits == 1).all() and _jobs() == before


def _script(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})},
                          check=False, cwd=os.path.dirname(__file__))


_CHILD = """
    import numpy as np, kdsl as kd
    from kdsl.backends import llvm_pool
    from test_native_pool import _launch
    for _ in range(5):
        hits, _ = _launch(100)
        assert (hits == 1).all()
    print("pool", llvm_pool._STATE.get("pool") is not None)
"""


def test_off_with_the_environment_variable():
    r = _script(_CHILD, {llvm_pool.ENV: "0"})
    assert r.returncode == 0, r.stderr
    assert "pool False" in r.stdout


def test_a_process_exits_cleanly_with_workers_running():
    r = _script(_CHILD)
    assert r.returncode == 0, r.stderr
    assert "pool True" in r.stdout


def test_a_forked_child_builds_its_own_pool():
    r = _script(_CHILD + """
    import multiprocessing as mp
    def child(q):
        hits, _ = _launch(100)
        hits, _ = _launch(100)
        q.put(bool((hits == 1).all()) and llvm_pool._STATE["pool"] is not None)
    if __name__ == "__main__":
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start()
        p.join(60)
        print("child", q.get(timeout=5))
    """)
    assert r.returncode == 0, r.stderr
    assert "child True" in r.stdout
