"""Timing helpers shared by the benchmark scripts: medians of repeated runs, in one process,
and the header every table prints (CPU model, the vector features the llvm backend used, the
load average: the machines these run on are shared, so a figure is only read with its load)."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable

# Host CPU features that decide vector code (LLVM's names), shown in the header.
SIMD_FEATURES = ("sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                 "avx512bf16", "avx512fp16", "avx512vnni", "amx-tile", "amx-bf16", "amx-int8",
                 "neon", "sve", "sve2")


def median_ms(fn: Callable[[], object], repeat: int = 20, warmup: int = 3) -> float:
    """Median wall time of `fn()` in milliseconds after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def copy_gbs(repeat: int = 10, nbytes: int = 1 << 26, best: bool = False) -> float:
    """The measured copy bandwidth, GB/s (bytes read plus bytes written, one NumPy copy of
    `nbytes` timed `repeat` times: the median, or with `best` the fastest): the memory limit
    the tables compare bandwidth-bound rows with."""
    import numpy as np

    x = np.ones(nbytes // 4, np.float32)
    out = np.empty_like(x)
    if best:
        ms = min(round_times({"copy": lambda: np.copyto(out, x)}, repeat)["copy"])
    else:
        ms = median_ms(lambda: np.copyto(out, x), repeat)
    return 2 * x.nbytes / ms / 1e6


#: a process whose other threads use less CPU than this share of a probe interval is idle
IDLE_SHARE = 0.05
#: the probe interval and the longest wait of `settle`, seconds
SETTLE_PROBE, SETTLE_MAX = 0.01, 2.0


def settle(max_wait: float = SETTLE_MAX) -> float:
    """Wait until this process's other threads stop using CPU (at most `max_wait` seconds);
    returns the seconds waited.  A BLAS or OpenMP pool spins after each call: OpenBLAS's
    workers for 2**28 cycles by default (0.1 s at 2.7 GHz, longer than a fixed pause of 50 ms),
    GNU OpenMP's for a spin count.  A spinning worker shares its core with the next contender's
    threads (a kdsl 1024^3 matmul on two threads measured 21 ms right after a NumPy call,
    12 ms with OpenBLAS's spin cut to 2**4 cycles), so each timed call starts only once the
    process's CPU time stops growing while the calling thread sleeps."""
    t0 = time.perf_counter()
    while True:
        c0, w0 = time.process_time(), time.perf_counter()
        time.sleep(SETTLE_PROBE)
        busy = (time.process_time() - c0) / max(time.perf_counter() - w0, 1e-9)
        waited = time.perf_counter() - t0
        if busy < IDLE_SHARE or waited >= max_wait:
            return waited


def round_times(runs: dict[str, Callable[[], object]], rounds: int, pause: float = 0.0,
                rotate: bool = True) -> dict[str, list[float]]:
    """Milliseconds of each run per round, after one warm-up call of each (compiles, page
    faults, thread pools): every round runs each contender once, the order rotating by one per
    round (`rotate`), each call after `pause` seconds and then once no other thread of the
    process is still using CPU (`settle`: BLAS and OpenMP pools spin for a while after a call;
    waiting keeps that off the next timing)."""
    names = list(runs)
    for n in names:
        runs[n]()
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names) if rotate else 0
        for n in names[k:] + names[:k]:
            if pause:
                time.sleep(pause)
                settle()
            t0 = time.perf_counter()
            runs[n]()
            times[n].append((time.perf_counter() - t0) * 1e3)
    return times


def cpu_model() -> str:
    """The CPU's marketing name (/proc/cpuinfo on Linux) and LLVM's name for its core."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "cpu model", "hardware")):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        return f"{name} (LLVM: {llvm.get_host_cpu_name()})"
    except Exception:  # noqa: BLE001 - no llvmlite: the name alone
        return name


def simd_line() -> str:
    """The vector features of the host and the llvm backend's SIMD profile (its chosen width
    and register count, backends/llvm_host.py)."""
    try:
        import llvmlite.binding as llvm
        from kdsl.backends import llvm_host

        on = llvm_host.parse_features(llvm.get_host_cpu_features().flatten())
        feats = ",".join(f for f in SIMD_FEATURES if f in on) or "none of " + "/".join(
            SIMD_FEATURES[:3])
        return f"vector features {feats}; llvm backend profile {llvm_host.profile().key()}"
    except Exception as e:  # noqa: BLE001 - the header must never stop a benchmark
        return f"vector features unknown ({type(e).__name__})"


def load_line() -> str:
    """The 1/5/15-minute load average and the CPUs this process may use."""
    try:
        la = "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:
        la = "load average unavailable"
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count()
    return f"{la}; {cpus} CPUs usable"


def machine_header() -> str:
    """Three lines to print above a table: CPU model, vector features, load average."""
    return f"CPU: {cpu_model()}\n{simd_line()}\n{load_line()}"
