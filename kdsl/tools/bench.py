"""Timing kernels: `kd.testing.do_bench` and the host launch overhead.

    t = kd.testing.do_bench(lambda: kernel[grid](x, y, out, n, BLOCK=1024), backend="opencl")
    t.median, t.min, t.max          # milliseconds per call
    t.clock                          # "opencl events", "cuda events" or "cpu clock"
    t.launch_overhead                # host cost of one launch of an empty kernel (ms)

As Triton's `do_bench`, `warmup` and `rep` are time budgets in milliseconds: the call is timed
once, then run for about `warmup` ms and measured for about `rep` ms (at least `min_rep` calls).
Device time comes from the backend's own clock (`Backend.timer()`, backends/base.py): OpenCL's
profiling events (markers enqueued around each call on a profiling queue swapped in for the
duration), CUDA's events; the CPU backends keep the host's `time.perf_counter`.  With a device
clock, the wall time is measured too: `host_ms` is the median wall time, so `host_ms - median`
is what the host spends per call (copies of NumPy arguments included; pass device arrays to
time the kernel alone).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kdsl.backends.base import Timer


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
    p20: float = 0.0  # 20th and 80th percentiles (Triton's autotuner quantiles)
    p80: float = 0.0

    def __float__(self) -> float:
        return self.median

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# ------------------------------------------------------------------------------ clocks

def clock_for(backend: str | None) -> Timer:
    """The backend's own clock (`Backend.timer()`), else the host's."""
    if backend:
        try:
            from kdsl.backends import get_backend

            return get_backend(backend).timer()
        except Exception:  # no device clock here: fall back on the host's
            pass
    return Timer()


# ------------------------------------------------------------------------------ do_bench

def do_bench(fn: Callable[[], Any], backend: str | None = None, warmup: float = 25,
             rep: float = 100, min_rep: int = 5, max_rep: int = 10_000,
             overhead: bool = True) -> Timings:
    """Time `fn()` (no arguments; it launches on `backend`).  `warmup`/`rep` in ms."""
    clock = clock_for(backend)
    with clock.session():
        clock.time(fn)  # compiles, warms caches
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
    p20, p80 = (float(q) for q in np.quantile(dev, [0.2, 0.8]))
    return Timings(statistics.median(dev), min(dev), max(dev), statistics.fmean(dev), n,
                   clock.name, statistics.median(wall), lo, p20, p80)


_OVERHEAD: dict[str, float] = {}


def launch_overhead(backend: str) -> float | None:
    """Median host time (ms) of launching an empty kernel on `backend` (cached per process)."""
    if backend in _OVERHEAD:
        return _OVERHEAD[backend]
    from .probe_kernels import noop_kernel
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


__all__ = ["Timings", "clock_for", "do_bench", "launch_overhead"]
