"""The machine's roofline per backend: measured memory bandwidth and peak arithmetic rate.

Bandwidth: a STREAM-like copy kernel written in kdsl, and NumPy's copy when the backend runs on
the host CPU; the larger wins (it is the better witness of what the memory can do).  Peak: a kdsl
kernel of independent FMA chains, and NumPy's float32 matmul (BLAS) as a practical peak on the
host CPU; again the larger.  Results are cached per (backend, device) in
`$KDSL_CACHE_DIR/roofline.json`; `measure(backend, refresh=True)` measures again.

    r = roofline.measure(backend);  r.bandwidth (GB/s), r.peak (GFLOP/s), r.attainable(ai)
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kdsl.backends import get_backend

from .bench import do_bench
from .probe_kernels import copy as copy_kernel
from .probe_kernels import fma_chains

COPY_N = 1 << 23  # 8 Mi float32: 32 MiB each way, past the caches of the machines we run on
FMA_ITERS = 256
FMA_N = 1 << 16


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

    h = get_backend(backend).hash()  # toolchain and device; long (CPU feature lists)
    return f"{backend}:{hashlib.sha256(h.encode()).hexdigest()[:16]}"


def _on_host(backend: str) -> bool:
    """Whether `backend`'s kernels run on the host CPU (NumPy's figures are then a witness)."""
    try:
        return get_backend(backend).device_kind() == "cpu"
    except Exception:
        return False


def _device_arrays(backend: str, *host: np.ndarray) -> tuple:
    """The arrays a measuring kernel is given: device arrays for a device backend (time the
    kernel, not the host copies), else the host arrays themselves."""
    be = get_backend(backend)
    if be.memory != "device":
        return host
    return tuple(be.to_device(h) for h in host)


def _bench(fn: Any, backend: str | None, rep: float = 150) -> float:
    return do_bench(fn, backend=backend, warmup=20, rep=rep, overhead=False).median


def _measure(backend: str) -> Roofline:
    src = {}
    # a tile-level backend (the interpreter) is too slow to run the measuring kernels: the
    # NumPy figures stand for it
    if get_backend(backend).level != "tile":
        x = np.ones(COPY_N, np.float32)
        args = _device_arrays(backend, x, np.empty_like(x))
        launch = copy_kernel[(COPY_N // 1024,)]
        ms = _bench(lambda: launch(*args, COPY_N, BLOCK=1024, backend=backend), backend)
        src["kdsl copy GB/s"] = 2 * x.nbytes / ms / 1e6
        xs = np.random.rand(FMA_N).astype(np.float32)
        fargs = _device_arrays(backend, xs, np.empty_like(xs))
        flaunch = fma_chains[(FMA_N // 256,)]
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
