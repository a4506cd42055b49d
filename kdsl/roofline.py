"""The machine's roofline per backend: measured memory bandwidth and peak arithmetic rate.

Bandwidth: a STREAM-like copy kernel written in kdsl, and NumPy's copy when the backend runs on
the host CPU; the larger wins (it is the better witness of what the memory can do).  Peak: a kdsl
kernel of independent FMA chains, and NumPy's float32 matmul (BLAS) as a practical peak on the
host CPU; again the larger.  Results are cached per (backend, device) in
`$KDSL_CACHE_DIR/roofline.json`; `measure(backend, refresh=True)` measures again.

    r = roofline.measure("llvm");  r.bandwidth (GB/s), r.peak (GFLOP/s), r.attainable(ai)
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import kdsl as kd

#: backends whose programs run on the host CPU (NumPy's figures are a witness for them)
_HOST_BACKENDS = {"llvm", "interp"}
#: backends too slow to run the measuring kernels (the NumPy figures stand for them)
_NUMPY_ONLY = {"interp"}

COPY_N = 1 << 23  # 8 Mi float32: 32 MiB each way, past the caches of the machines we run on
FMA_ITERS = 256
FMA_N = 1 << 16


@kd.jit
def _noop(x_ptr, n):
    offs = kd.program_id(0) + kd.arange(0, 1)
    kd.store(x_ptr + offs, 0.0, mask=offs < n)


@kd.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(dst_ptr + offs, kd.load(src_ptr + offs, mask=m), mask=m)


@kd.jit
def _fma_chains(x_ptr, out_ptr, iters, BLOCK: kd.constexpr):
    # four independent chains per lane hide the FMA latency; every lane is independent too
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    a = kd.load(x_ptr + offs)
    b = a + 1.0
    c = a + 2.0
    d = a + 3.0
    for _ in range(iters):
        a = kd.fma(a, 0.999, 0.001)
        b = kd.fma(b, 0.999, 0.001)
        c = kd.fma(c, 0.999, 0.001)
        d = kd.fma(d, 0.999, 0.001)
    kd.store(out_ptr + offs, a + b + c + d)


def noop_kernel() -> Any:
    """An empty kernel (`_noop[(1,)](x, 0)` stores nothing): launch overhead."""
    return _noop


@dataclass
class Roofline:
    backend: str
    device: str
    bandwidth: float  # GB/s
    peak: float  # GFLOP/s
    sources: dict[str, float] = field(default_factory=dict)  # each measurement

    def attainable(self, intensity: float) -> float:
        """GFLOP/s attainable at `intensity` flop/byte."""
        return min(self.peak, self.bandwidth * intensity)


def _cache_file() -> Path:
    from kdsl.runtime.cache import cache_dir
    return cache_dir() / "roofline.json"


def _device_key(backend: str) -> str:
    import hashlib

    from kdsl.backends import get_backend
    h = get_backend(backend).hash()  # toolchain and device; long (CPU feature lists)
    return f"{backend}:{hashlib.sha256(h.encode()).hexdigest()[:16]}"


def _on_host(backend: str) -> bool:
    if backend in _HOST_BACKENDS:
        return True
    if backend == "opencl":
        try:
            from kdsl.backends import get_backend
            dev = get_backend("opencl").runtime().device
            return bool(dev.type & get_backend("opencl").runtime().cl.device_type.CPU)
        except Exception:
            return False
    return False


def _bench(fn: Any, backend: str | None, rep: float = 150) -> float:
    from .bench import do_bench
    return do_bench(fn, backend=backend, warmup=20, rep=rep, overhead=False).median


def _measure(backend: str) -> Roofline:
    src = {}
    if backend not in _NUMPY_ONLY:
        x = np.ones(COPY_N, np.float32)
        y = np.empty_like(x)
        args: tuple = (x, y)
        if backend == "opencl":  # device arrays: time the kernel, not the host copies
            import pyopencl.array as cla

            from kdsl.backends import get_backend
            q = get_backend("opencl").runtime().queue
            args = (cla.to_device(q, x), cla.empty(q, x.shape, np.float32))
        launch = _copy[(COPY_N // 1024,)]
        ms = _bench(lambda: launch(*args, COPY_N, BLOCK=1024, backend=backend), backend)
        src["kdsl copy GB/s"] = 2 * x.nbytes / ms / 1e6
        xs = np.random.rand(FMA_N).astype(np.float32)
        out = np.empty_like(xs)
        fargs: tuple = (xs, out)
        if backend == "opencl":
            import pyopencl.array as cla

            from kdsl.backends import get_backend
            q = get_backend("opencl").runtime().queue
            fargs = (cla.to_device(q, xs), cla.empty(q, xs.shape, np.float32))
        flaunch = _fma_chains[(FMA_N // 256,)]
        ms = _bench(lambda: flaunch(*fargs, FMA_ITERS, BLOCK=256, backend=backend), backend)
        src["kdsl fma GFLOP/s"] = 2 * 4 * FMA_ITERS * FMA_N / ms / 1e6
    if _on_host(backend):
        x = np.ones(COPY_N, np.float32)
        y = np.empty_like(x)
        ms = _bench(lambda: np.copyto(y, x), None)
        src["numpy copy GB/s"] = 2 * x.nbytes / ms / 1e6
        a = np.random.rand(512, 512).astype(np.float32)
        ms = _bench(lambda: a @ a, None)
        src["numpy matmul GFLOP/s"] = 2 * 512**3 / ms / 1e6
    bw = max([v for k, v in src.items() if k.endswith("GB/s")], default=float("nan"))
    peak = max([v for k, v in src.items() if k.endswith("GFLOP/s")], default=float("nan"))
    return Roofline(backend, _device_key(backend), bw, peak, src)


def measure(backend: str, refresh: bool = False) -> Roofline:
    """The roofline of `backend`'s device, from the cache unless `refresh`."""
    key = _device_key(backend)
    path = _cache_file()
    table: dict[str, Any] = {}
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = {}
    if not refresh and key in table:
        try:
            return Roofline(**table[key])
        except TypeError:  # an entry of an older layout: measure again
            pass
    r = _measure(backend)
    table[key] = asdict(r)
    try:  # atomic replace: concurrent processes never read half a file
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(table, f, indent=1)
        os.replace(tmp, path)
    except OSError:
        pass
    return r
