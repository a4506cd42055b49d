"""Timing kernels: `kd.testing.do_bench` and the host launch overhead.

    t = kd.testing.do_bench(lambda: kernel[grid](x, y, out, n, BLOCK=1024), backend="opencl")
    t.median, t.min, t.max          # milliseconds per call
    t.clock                          # "opencl events", "cuda events" or "cpu clock"
    t.launch_overhead                # host cost of one launch of an empty kernel (ms)

As Triton's `do_bench`, `warmup` and `rep` are time budgets in milliseconds: the call is timed
once, then run for about `warmup` ms and measured for about `rep` ms (at least `min_rep` calls).
Device time comes from the backend's own clock where it has one: OpenCL profiling events
(markers enqueued around each call on a profiling queue swapped in for the duration) and CUDA
events; the CPU backends are timed with `time.perf_counter`.  With a device clock, the wall time
is measured too: `host_ms` is the median wall time, so `host_ms - median` is what the host spends
per call (copies of NumPy arguments included; pass device arrays to time the kernel alone).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Timings:
    """Milliseconds per call."""

    median: float
    min: float
    max: float
    mean: float
    n: int
    clock: str  # what measured them
    host_ms: float  # median wall-clock time per call, host work included
    launch_overhead: float | None = None  # ms, empty-kernel launch on this backend

    def __float__(self) -> float:
        return self.median

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# ------------------------------------------------------------------------------ clocks

class _CPUClock:
    name = "cpu clock"

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        yield

    def time(self, fn: Callable[[], Any]) -> tuple[float, float]:
        t0 = time.perf_counter()
        fn()
        dt = (time.perf_counter() - t0) * 1e3
        return dt, dt


class _OpenCLClock:
    """Markers on a profiling-enabled queue bracket each call (in-order queue: everything the
    call enqueued runs between them)."""

    name = "opencl events"

    def __init__(self) -> None:
        from kdsl.backends import get_backend
        self.rt = get_backend("opencl").runtime()
        cl = self.rt.cl
        self.queue = cl.CommandQueue(
            self.rt.ctx, self.rt.device,
            properties=cl.command_queue_properties.PROFILING_ENABLE)

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        old = self.rt.queue
        self.rt.queue = self.queue
        try:
            yield
        finally:
            self.rt.queue = old

    def time(self, fn: Callable[[], Any]) -> tuple[float, float]:
        cl = self.rt.cl
        t0 = time.perf_counter()
        e0 = cl.enqueue_marker(self.queue)
        fn()
        e1 = cl.enqueue_marker(self.queue)
        e1.wait()
        wall = (time.perf_counter() - t0) * 1e3
        return (e1.profile.end - e0.profile.start) * 1e-6, wall


class _CUDAClock:
    name = "cuda events"

    def __init__(self) -> None:
        import cupy
        self.cupy = cupy

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        yield

    def time(self, fn: Callable[[], Any]) -> tuple[float, float]:
        cp = self.cupy
        start, end = cp.cuda.Event(), cp.cuda.Event()
        t0 = time.perf_counter()
        start.record()
        fn()
        end.record()
        end.synchronize()
        wall = (time.perf_counter() - t0) * 1e3
        return cp.cuda.get_elapsed_time(start, end), wall


#: backend -> its device clock; the others use the CPU clock
CLOCKS: dict[str, Callable[[], Any]] = {"opencl": _OpenCLClock, "cuda": _CUDAClock}


def clock_for(backend: str | None) -> Any:
    make = CLOCKS.get(backend or "")
    if make is not None:
        try:
            return make()
        except Exception:  # no device clock here: fall back on the host's
            pass
    return _CPUClock()


# ------------------------------------------------------------------------------ do_bench

def do_bench(fn: Callable[[], Any], backend: str | None = None, warmup: float = 25,
             rep: float = 100, min_rep: int = 5, max_rep: int = 10_000,
             overhead: bool = True) -> Timings:
    """Time `fn()` (no arguments; it launches on `backend`).  `warmup`/`rep` in ms."""
    clock = clock_for(backend)
    with clock.session():
        first, _ = clock.time(fn)  # compiles, warms caches
        est, _ = clock.time(fn)
        est = max(est, 1e-4)
        for _ in range(min(max_rep, int(warmup / est))):
            clock.time(fn)
        n = max(min_rep, min(max_rep, int(rep / est)))
        dev, wall = [], []
        for _ in range(n):
            d, w = clock.time(fn)
            dev.append(d)
            wall.append(w)
    lo = launch_overhead(backend) if overhead and backend else None
    return Timings(statistics.median(dev), min(dev), max(dev), statistics.fmean(dev), n,
                   clock.name, statistics.median(wall), lo)


_OVERHEAD: dict[str, float] = {}


def launch_overhead(backend: str) -> float | None:
    """Median host time (ms) of launching an empty kernel on `backend` (cached per process)."""
    if backend in _OVERHEAD:
        return _OVERHEAD[backend]
    from .roofline import noop_kernel
    try:
        x = np.zeros(1, np.float32)
        launch = noop_kernel()[(1,)]
        launch(x, 0, backend=backend)
        ts = []
        for _ in range(50):
            t0 = time.perf_counter()
            launch(x, 0, backend=backend)
            ts.append((time.perf_counter() - t0) * 1e3)
    except Exception:
        return None
    _OVERHEAD[backend] = statistics.median(ts)
    return _OVERHEAD[backend]


# ------------------------------------------------------------------------------ progress

class Progress:
    """A one-line progress bar on stderr: `with Progress(n, "tuning") as p: ... p.step(text)`."""

    def __init__(self, total: int, label: str, stream: Any = None, width: int = 24):
        import sys
        self.total = max(1, total)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.done = 0

    def __enter__(self) -> Progress:
        self._draw("")
        return self

    def step(self, text: str = "") -> None:
        self.done += 1
        self._draw(text)

    def _draw(self, text: str) -> None:
        fill = int(self.width * self.done / self.total)
        bar = "#" * fill + "." * (self.width - fill)
        self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total} {text[:40]:<40}")
        self.stream.flush()

    def __exit__(self, *exc: Any) -> None:
        self.stream.write("\n")
        self.stream.flush()
