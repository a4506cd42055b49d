"""OpenCL and the process: a child forked after OpenCL started gets a clear error instead of a
hang; arrays the kernel writes are not handed to the device in place (unless
KDSL_OPENCL_ZERO_COPY=1), so a device that ignores a mask cannot write into the Python heap;
Python's fault handler survives the first OpenCL build."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kdsl as kd

pytestmark = pytest.mark.skipif("opencl" not in kd.available_backends(),
                                reason="no OpenCL device")


def _run(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `code` as a script file (kernels need their source on disk)."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(textwrap.dedent(code))
    try:
        return subprocess.run([sys.executable, f.name], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, **(env or {})}, check=False)
    finally:
        os.unlink(f.name)


def test_forked_child_gets_an_error_not_a_hang():
    r = _run("""
        import multiprocessing as mp, numpy as np, kdsl as kd

        @kd.jit
        def add1(x, n, BLOCK: kd.constexpr):
            o = kd.arange(0, BLOCK)
            kd.store(x + o, kd.load(x + o, mask=o < n) + 1, mask=o < n)

        def child(q):
            try:
                add1[(1,)](np.zeros(8, np.float32), 8, BLOCK=8, backend="opencl")
                q.put("ran")
            except RuntimeError as e:
                q.put(str(e))

        if __name__ == "__main__":
            print(kd.available_backends())  # the parent touches OpenCL
            ctx = mp.get_context("fork")
            q = ctx.Queue()
            p = ctx.Process(target=child, args=(q,))
            p.start()
            p.join(60)
            print("ALIVE" if p.is_alive() else "DONE", q.get(timeout=5) if not p.is_alive() else "")
            if p.is_alive():
                p.kill()
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "DONE" in r.stdout and "spawn" in r.stdout, r.stdout


@kd.jit
def _own_address(out_ptr, x_ptr):
    kd.store(out_ptr, x_ptr.to(kd.int64))
    kd.store(out_ptr + 1, out_ptr.to(kd.int64))


def test_written_arrays_are_copied_unless_asked():
    r = _run("""
        import numpy as np, kdsl as kd
        from tests.backend.test_opencl_process import _own_address
        out = np.zeros(2, np.int64)
        x = np.zeros(4, np.float32)
        _own_address[(1,)](out, x, backend="opencl")
        print(int(out[0]) == x.ctypes.data, int(out[1]) == out.ctypes.data)
    """, env={"PYTHONPATH": os.getcwd()})
    assert r.returncode == 0, r.stderr[-2000:]
    # the read-only input is used in place, the written output through a copy
    assert r.stdout.split() == ["True", "False"], r.stdout
    r = _run("""
        import numpy as np, kdsl as kd
        from tests.backend.test_opencl_process import _own_address
        out = np.zeros(2, np.int64)
        x = np.zeros(4, np.float32)
        _own_address[(1,)](out, x, backend="opencl")
        print(int(out[1]) == out.ctypes.data)
    """, env={"PYTHONPATH": os.getcwd(), "KDSL_OPENCL_ZERO_COPY": "1"})
    assert r.stdout.split() == ["True"], r.stdout + r.stderr[-2000:]


def test_written_results_still_come_back():
    @kd.jit
    def scale(x_ptr, y_ptr, n, BLOCK: kd.constexpr):
        o = kd.arange(0, BLOCK)
        kd.store(y_ptr + o, kd.load(x_ptr + o, mask=o < n) * 3, mask=o < n)

    x = np.arange(10, dtype=np.float32)
    y = np.full(12, -1.0, np.float32)
    scale[(1,)](x, y, 10, BLOCK=16, backend="opencl")
    np.testing.assert_array_equal(y[:10], x * 3)
    assert (y[10:] == -1).all()


def test_fault_handler_survives_the_first_build(tmp_path):
    r = _run("""
        import faulthandler, ctypes, numpy as np, kdsl as kd
        faulthandler.enable()

        @kd.jit
        def one(x):
            kd.store(x, 1.0)

        one[(1,)](np.zeros(1, np.float32), backend="opencl")
        assert faulthandler.is_enabled()
        ctypes.string_at(0)  # a crash after the build must still print the Python traceback
    """, env={"POCL_CACHE_DIR": str(tmp_path), "KDSL_CACHE": "0"})
    assert r.returncode != 0
    assert "Fatal Python error" in r.stderr and "string_at" in r.stderr, r.stderr[-2000:]


def test_first_build_with_a_stderr_that_has_no_file_descriptor(tmp_path):
    """A notebook's or pytest's sys.stderr has no fileno(): re-installing the fault handler
    after the first build must not fail the build (it raised io.UnsupportedOperation)."""
    r = _run("""
        import faulthandler, io, sys, numpy as np, kdsl as kd
        faulthandler.enable()
        sys.stderr = io.StringIO()

        @kd.jit
        def one(x):
            kd.store(x, 1.0)

        x = np.zeros(1, np.float32)
        one[(1,)](x, backend="opencl")
        assert x[0] == 1.0 and faulthandler.is_enabled()
        print("ok")
    """, env={"POCL_CACHE_DIR": str(tmp_path), "KDSL_CACHE": "0"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


def test_pocl_workers_are_pinned_only_where_it_is_safe(monkeypatch):
    """`pin_pocl_workers` sets POCL_AFFINITY=1 when the process may use exactly CPUs
    0..n-1 (2 <= n <= 16) and the user set neither POCL variable."""
    from kdsl.backends import opencl

    monkeypatch.delenv("POCL_AFFINITY", raising=False)
    monkeypatch.delenv("POCL_MAX_PTHREAD_COUNT", raising=False)
    for cpus, allowed, want in ((2, {0, 1}, True), (16, set(range(16)), True),
                                (4, {1, 2, 3}, False), (1, {0}, False),
                                (64, set(range(64)), False)):
        monkeypatch.setattr(os, "cpu_count", lambda c=cpus: c)
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, a=allowed: a)
        assert opencl.pin_pocl_workers() is want, (cpus, allowed)
        assert (os.environ.pop("POCL_AFFINITY", None) == "1") is want
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    for user in ("POCL_AFFINITY", "POCL_MAX_PTHREAD_COUNT"):
        monkeypatch.setenv(user, "0")
        assert not opencl.pin_pocl_workers() and os.environ[user] == "0"
        monkeypatch.delenv(user)


def test_pocl_worker_threads_end_up_on_one_cpu_each():
    """In a process whose environment names no POCL_ variable, starting the opencl backend
    pins PoCL's worker threads, one CPU each (where `pin_pocl_workers` applies)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POCL_")}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import os, kdsl as kd
        before = set(os.listdir("/proc/self/task"))
        kd.available_backends()
        new = set(os.listdir("/proc/self/task")) - before
        cpus = []
        for tid in sorted(new):
            with open(f"/proc/self/task/{tid}/status") as f:
                cpus += [ln.split()[1] for ln in f if ln.startswith("Cpus_allowed_list")]
        print(os.environ.get("POCL_AFFINITY"), " ".join(cpus))
    """)], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert r.returncode == 0, r.stderr
    flag, *cpus = r.stdout.split()
    n = os.cpu_count() or 0
    if not (2 <= n <= 16 and os.sched_getaffinity(0) == set(range(n))):
        assert flag == "None"
        return
    assert flag == "1"
    pinned = sorted({int(c) for c in cpus if c.isdigit()})  # PoCL's workers: one CPU each
    assert len(pinned) >= 2 and pinned == list(range(len(pinned))), cpus
