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

from .term import Progress  # also imported from here by autotune.py and capabilities.py


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


# ------------------------------------------------------------------------------ kdsl bench

# `kdsl bench NAME` without --sizes sweeps these values of each library case's size parameter
# (its `sweep(n)`: row length, matrix size, sequence length, ...), small to large.
DEFAULT_SWEEPS: dict[str, list[int]] = {
    "softmax": [256, 1024, 4096, 16384], "layer_norm": [256, 1024, 4096, 16384],
    "rms_norm": [256, 1024, 4096, 16384], "matmul": [128, 256, 512, 1024],
    "mlp": [64, 128, 256, 512], "attention": [128, 256, 512, 1024],
    "decode_attention": [64, 256, 1024], "quant_matmul": [256, 512, 1024, 2048],
    "block_sparse_matmul": [512, 1024, 2048], "sparsify_2_4": [1024, 4096],
    "semi_structured_matmul": [256, 512, 1024],
}


def _workloads(target: str, sizes: list[str] | None, dtype: str
               ) -> list[tuple[str, Callable[[str], Any], float, float]]:
    """(size label, launch(backend), flops, bytes) per point of the sweep."""
    from .compare import CASES, library_function
    points = []
    if ".py:" in target:
        from .cli import _load_kernel
        module, kernel, name = _load_kernel(target)
        example = getattr(module, f"{name}_example_args")
        cost = getattr(module, f"{name}_cost", None)
        for size in sizes or [None]:
            pos, kw, grid = example(int(size)) if size is not None else example()
            pos, kw = tuple(pos), dict(kw)
            flops, nbytes = cost(*pos) if cost else (
                0.0, float(sum(a.nbytes for a in pos if isinstance(a, np.ndarray))))

            def launch(b, k=kernel, g=grid, a=pos, w=kw):
                return k[g](*a, backend=b, **w)
            points.append((str(size or "default"), launch, float(flops), float(nbytes)))
        return points
    if target not in CASES:
        raise SystemExit(f"kdsl bench: {target!r} is not a library kernel ({', '.join(CASES)})"
                         " or FILE.py:KERNEL")
    from .compare import itemsize, library_dtype
    fn, _ = library_function(target)
    case = CASES[target]
    dtype = library_dtype(dtype)
    item = itemsize(dtype)
    for size in sizes or DEFAULT_SWEEPS.get(target, [None]):
        shape = case.sweep(int(size)) if size is not None else case.shape
        pos, kw = case.make(shape, dtype, np.random.default_rng(0))

        def launch(b, a=pos, w=kw):
            return fn(*a, backend=b, **w)
        points.append(("x".join(map(str, shape)), launch, case.flops(shape),
                       case.bytes(shape, item)))
    return points


def bench_cli(target: str, sizes: list[str] | None, backends: list[str] | None,
              dtype: str = "float32", rep: float = 100) -> tuple[list[dict], dict[str, dict]]:
    """Rows of `kdsl bench` (one per size and backend) and the roofline of each backend."""
    from dataclasses import asdict

    from . import roofline
    from .runtime.registry import available_backends
    backends = backends or [b for b in available_backends() if b != "interp"] or ["interp"]
    points = _workloads(target, sizes, dtype)
    roofs = {}
    for b in backends:
        roofs[b] = asdict(roofline.measure(b))
    rows = []
    with Progress(len(points) * len(backends), f"bench {target}") as bar:
        for label, launch, flops, nbytes in points:
            for b in backends:
                t = do_bench(lambda f=launch, be=b: f(be), backend=b, warmup=rep / 4, rep=rep)
                s = t.median * 1e-3
                gflops, gbs = flops / s / 1e9, nbytes / s / 1e9
                roof = roofs[b]
                if flops:
                    attain = min(roof["peak"], roof["bandwidth"] * flops / max(nbytes, 1.0))
                    frac = gflops / attain
                else:
                    frac = gbs / roof["bandwidth"]
                rows.append({"kernel": target, "size": label, "backend": b, "ms": t.median,
                             "ms_min": t.min, "ms_max": t.max, "clock": t.clock,
                             "launch_overhead_ms": t.launch_overhead, "gflops": gflops,
                             "gbs": gbs, "roofline_fraction": frac, "flops": flops,
                             "bytes": nbytes})
                bar.step(f"{label} {b}")
    return rows, roofs


def format_rows(rows: list[dict], roofs: dict[str, dict]) -> str:
    head = (f"{'size':<14} {'backend':<8} {'ms':>9} {'GB/s':>8} {'GFLOP/s':>9} {'roofline':>9}"
            f"  {'launch ms':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lo = r["launch_overhead_ms"]
        lines.append(f"{r['size']:<14} {r['backend']:<8} {r['ms']:9.4f} {r['gbs']:8.2f} "
                     f"{r['gflops']:9.2f} {100 * r['roofline_fraction']:8.1f}%  "
                     f"{'' if lo is None else f'{lo:9.4f}'}")
    lines.append("roofline: " + "; ".join(
        f"{b}: {v['bandwidth']:.1f} GB/s, {v['peak']:.1f} GFLOP/s" for b, v in roofs.items()))
    return "\n".join(lines)


def plot(rows: list[dict], roofs: dict[str, dict], path: str) -> None:
    """Throughput per backend over the sweep, with each backend's roof as a dashed line."""
    from .extras import require

    matplotlib = require("matplotlib", "kdsl bench --plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # GFLOP/s where some point is compute-bound on its backend's roofline, else GB/s
    compute = any(r["flops"] and r["flops"] / max(r["bytes"], 1.0)
                  >= roofs[r["backend"]]["peak"] / roofs[r["backend"]]["bandwidth"]
                  for r in rows)
    metric, unit = ("gflops", "GFLOP/s") if compute else ("gbs", "GB/s")
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    sizes = list(dict.fromkeys(r["size"] for r in rows))
    for i, b in enumerate(roofs):
        pts = [r for r in rows if r["backend"] == b]
        c = colors[i % len(colors)]
        ax.plot([sizes.index(r["size"]) for r in pts], [r[metric] for r in pts], "o-",
                color=c, label=b)
        roof = roofs[b]
        if compute:
            ys = [min(roof["peak"], roof["bandwidth"] * r["flops"] / max(r["bytes"], 1))
                  for r in pts]
        else:
            ys = [roof["bandwidth"]] * len(pts)
        ax.plot([sizes.index(r["size"]) for r in pts], ys, "--", color=c, alpha=0.7,
                label=f"{b} roofline")
    ax.set_xticks(range(len(sizes)))
    ax.set_xticklabels(sizes, rotation=30 if max(map(len, sizes)) > 6 else 0)
    ax.set_xlabel("size")
    ax.set_ylabel(unit)
    ax.set_yscale("log")
    ax.set_title(f"{rows[0]['kernel'] if rows else ''}: throughput per backend")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
