"""Launching LLVM-backend kernels: argument packing and the parallel grid.

The generated `<name>_grid(ptr args, i64 start, i64 end, i32 g0, i32 g1, i32 g2)` reads
parameter i from bytes [8i, 8i+8) of `args` (a pointer or a scalar in the low bytes).  The
block is packed with one precompiled `struct.Struct` per kernel: a few hundred nanoseconds plus
one data-pointer lookup per array.  Each call gets its own immutable `bytes` block, so
concurrent launches of one kernel from several Python threads are safe.

A grid too small for the pool runs through `<name>_launch(block)` instead: the same slots
after a 16-byte header holding the grid (`ArgPacker.block`), one ctypes argument instead of six
(a ctypes call costs about 0.2 us plus 0.15 us per argument converted).

The linear program-id range is cut into one chunk per worker of a persistent thread pool (as
many workers as the process may use CPUs, or `KDSL_NUM_THREADS`); the calling thread runs the
first chunk itself.  ctypes releases the GIL during the native call,
so the chunks run in parallel.  Small grids run inline on the calling thread, and so do the
grids of a kernel whose measured cost says the whole grid takes less than `POOL_MIN_SECONDS`
(`GridRunner`): handing chunks to the pool costs tens of microseconds (a queue, a wake-up per
worker, the GIL passed round), more than a small kernel's whole grid.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kdsl.ir import loop as L
from kdsl.ir.types import PointerType

from . import llvm_pool
from .base import BoundArg

# void <name>_grid(const char *args, int64 start, int64 end, int32 g0, int32 g1, int32 g2)
GRID_FN = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64,
                           ctypes.c_int32, ctypes.c_int32, ctypes.c_int32)

# void <name>_launch(const char *block): header {int32 g0, g1, g2; padding} + args
LAUNCH_FN = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_HEADER = "iii4x"

# struct code of each scalar type, padded to an 8-byte slot (float16/bfloat16 travel as float32)
_SLOT = {"int1": "?7x", "int8": "b7x", "int16": "h6x", "int32": "i4x", "int64": "q",
         "uint8": "B7x", "uint16": "H6x", "uint32": "I4x", "uint64": "Q", "float16": "f4x",
         "bfloat16": "f4x", "float32": "f4x", "float64": "d"}


def _address(array: Any) -> int:
    """Data pointer of a NumPy array (from_buffer is the fast path; it needs a writable,
    non-empty buffer)."""
    try:
        return ctypes.addressof(_CHAR.from_buffer(array))
    except (TypeError, ValueError, BufferError):
        return array.__array_interface__["data"][0]


_CHAR = ctypes.c_char


class ArgPacker:
    """Packs `BoundArg`s in `kernel.params` order into the 8-byte slots the grid function reads."""

    def __init__(self, kernel: L.Kernel):
        codes = []
        self.is_ptr = []
        for p in kernel.params:
            ptr = isinstance(p.dtype, PointerType)
            self.is_ptr.append(ptr)
            codes.append("Q" if ptr else _SLOT[p.dtype.name])
        self.struct = struct.Struct("=" + "".join(codes))
        #: the launch block: header (g0, g1, g2) then the slots
        self.block = struct.Struct("=" + _HEADER + "".join(codes))
        self.names = [p.name for p in kernel.params]

    def pack(self, args: list[BoundArg]) -> bytes:
        return self._pack(self.struct, (), args)

    def pack_block(self, args: list[BoundArg], grid: tuple[int, int, int]) -> bytes:
        """The block of `<name>_launch`: all of `grid` in one call."""
        return self._pack(self.block, tuple(grid), args)

    def _pack(self, st: struct.Struct, head: tuple, args: list[BoundArg]) -> bytes:
        if len(args) != len(self.is_ptr):
            raise TypeError(f"expected {len(self.is_ptr)} arguments, got {len(args)}")
        try:
            return st.pack(*head, *[(a.address or _address(a.host)) if p else a.value
                                    for p, a in zip(self.is_ptr, args)])
        except (TypeError, AttributeError):
            for p, a in zip(self.is_ptr, args):
                if p and a.host is None:
                    raise TypeError(f"argument {a.name!r}: the llvm backend needs a host "
                                    "array") from None
            raise


_POOL_LOCK = threading.Lock()
_POOL: dict[str, Any] = {}


def _count_workers() -> int:
    """Threads of the pool: `KDSL_NUM_THREADS` when set, else the CPUs this process may run on
    (its affinity mask: `taskset -c 0` or a container's cpuset gives fewer than the machine
    has), else `os.cpu_count()`."""
    env = os.environ.get("KDSL_NUM_THREADS", "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n >= 1:
            return n
        import warnings

        warnings.warn(f"KDSL_NUM_THREADS={env!r} is not a positive integer; using the CPUs "
                      f"available to the process", stacklevel=2)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


_WORKERS = _count_workers()  # once per process: reading /sys is far too slow per launch
#: grids of fewer program ids than this run inline on the calling thread (`run_grid`): one
#: program, which no thread can share.  Two or more go through `GridRunner`'s measured cost:
#: a grid of a few costly programs (a matvec cut into 2048-column strips, 0.9 ms each) ran
#: single-threaded when every grid under 2 x workers stayed inline.
INLINE_GRID = 2 if _WORKERS > 1 else 1 << 62
#: a grid whose measured cost (`GridRunner`) is below this many seconds runs inline
POOL_MIN_SECONDS = 50e-6
#: ... if it has at most this many programs: the cost is measured per program on earlier
#: launches, and arguments may make a program far slower (a loop bound); an inline grid is
#: one native call that Ctrl-C cannot stop, so a mis-measured one must stay short
INLINE_MAX_PROGRAMS = 16


def workers() -> int:
    """Threads a launch is spread over (`_count_workers`)."""
    return _WORKERS


def _pool() -> ThreadPoolExecutor:
    """The process's worker pool (recreated after a fork, whose child has no threads)."""
    with _POOL_LOCK:
        if _POOL.get("pid") != os.getpid():
            _POOL["tids"] = []  # native thread ids of the workers (`_register_worker`)
            _POOL["steered"] = (-1, 0)  # (caller's CPU, workers) of the last `_steer`
            _POOL["pool"] = ThreadPoolExecutor(max_workers=workers(),
                                               thread_name_prefix="kdsl-llvm",
                                               initializer=_register_worker)
            _POOL["pid"] = os.getpid()
        return _POOL["pool"]


def _register_worker() -> None:
    _POOL["tids"].append(threading.get_native_id())  # (list.append is atomic)


def _current_cpu() -> Any:
    """`sched_getcpu` of the C library (a vDSO read), or None where there is none."""
    try:
        fn = ctypes.CDLL(None).sched_getcpu
    except (AttributeError, OSError, TypeError):  # (no such symbol; no C library by name)
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = []
    return fn


_CPU = _current_cpu()
try:
    _ALLOWED = frozenset(os.sched_getaffinity(0))
except (AttributeError, OSError):  # not Linux: no steering
    _ALLOWED = frozenset()


#: the most CPUs `_steer` manages: each change of the caller's CPU costs one
#: `sched_setaffinity` per worker (~2 us), and on a large machine the scheduler finds an idle
#: CPU by itself more often than it pays there
STEER_MAX_CPUS = 16


def _steer(tids: list[int], state: dict[str, Any]) -> None:
    """Keep the workers off the calling thread's CPU (Linux; only when that CPU changed or a
    worker was added since the last launch: one `sched_getcpu` per launch otherwise).

    A worker woken by the caller is placed by the scheduler, and on a virtual machine an idle
    vCPU that has been halted for a while looks preempted, so the scheduler puts the worker on
    the caller's own CPU instead: the two share one core for milliseconds until the balancer
    moves one of them (a 1024^3 matmul on two vCPUs took 15.6 ms after a 0.3 s pause, 8.6 ms
    back to back).  A worker whose affinity excludes the caller's CPU runs on another one.
    `tids`: the workers' native thread ids; `state` remembers the last steering."""
    if _CPU is None or not 2 <= len(_ALLOWED) <= STEER_MAX_CPUS:
        return
    cpu = _CPU()
    if (cpu, len(tids)) == state.get("steered") or cpu not in _ALLOWED:
        return
    state["steered"] = (cpu, len(tids))
    others = _ALLOWED - {cpu}
    for tid in list(tids):
        try:
            os.sched_setaffinity(tid, others)
        except OSError:  # the thread has exited, or the process's CPUs changed
            pass


_LIMIT = 1 << 31
# Chunks per worker: a launch is cut finer than one chunk per worker so that an interrupt
# (Ctrl-C) stops it between chunks instead of after the whole grid.
_CHUNKS_PER_WORKER = 4


def _native(address: int, alone: float | None) -> llvm_pool.NativePool | None:
    """The native pool, locked for this launch, when it may run it: the grid function's
    address is known and its last measured one-thread time `alone` says the launch is short
    (llvm_pool.NATIVE_MAX_SECONDS of wall time); None otherwise (the Python pool runs it)."""
    if not address or alone is None or alone / _WORKERS > llvm_pool.NATIVE_MAX_SECONDS:
        return None
    pool = llvm_pool.pool(_WORKERS)
    if pool is None or not pool.lock.acquire(blocking=False):
        return None
    _steer(pool.tids, pool.steering)
    return pool


def run_grid(fn: Any, packed: bytes, grid: tuple[int, int, int], address: int = 0,
             alone: float | None = None) -> float | None:
    """Run program ids [0, g0*g1*g2) of `fn` on the pool (inline for small grids); returns,
    for a pooled launch, the CPU seconds the whole grid would take on one thread at the rate
    of its cheapest chunk (None inline).  A grid whose function `address` is given and whose
    last one-thread time `alone` was short runs on the native pool (backends/llvm_pool.py),
    which returns the time its chunks spent in `fn`, summed.

    No exception leaves before every worker has stopped: the caller may free the arrays as
    soon as this returns or raises, so a worker still running would write freed memory.  A
    KeyboardInterrupt (Ctrl-C) cancels the chunks not yet started, waits for the running ones
    and is then re-raised; a worker's exception is re-raised likewise, after the others."""
    g0, g1, g2 = grid if len(grid) == 3 else (tuple(grid) + (1, 1))[:3]
    if not (0 <= g0 < _LIMIT and 0 <= g1 < _LIMIT and 0 <= g2 < _LIMIT):
        raise ValueError(f"grid {tuple(grid)}: each dimension must be in [0, 2**31)")
    total = g0 * g1 * g2
    if total == 0:
        return None
    n = _WORKERS
    if total < INLINE_GRID:  # small grids: inline, no pool round trip
        fn(packed, 0, total, g0, g1, g2)
        return None
    chunks = min(total, n * _CHUNKS_PER_WORKER)
    native = _native(address, alone)
    if native is not None:
        try:
            return native.run(address, packed, total, chunks, g0, g1, g2)
        finally:
            native.lock.release()
    launch = _Launch(fn, packed, [total * i // chunks for i in range(chunks + 1)], (g0, g1, g2))
    pool = _pool()
    _steer(_POOL["tids"], _POOL)
    futures = [pool.submit(launch.work) for _ in range(n - 1)]
    error: BaseException | None = None
    try:
        launch.work()
    except BaseException as e:  # noqa: BLE001 - a KeyboardInterrupt between two chunks
        launch.cancelled = True
        error = e
    while futures:  # wait for every worker, whatever arrives in the meantime
        try:
            futures[0].result()
            futures.pop(0)
        except KeyboardInterrupt as e:
            launch.cancelled = True
            error = error or e
        except BaseException as e:  # noqa: BLE001 - a worker's own exception
            futures.pop(0)
            error = error or e
    if error is not None:
        raise error
    # the cheapest chunk's rate, over the whole grid: what the grid would cost inline (each
    # chunk also pays a call and a GIL hand-over, which inline pays once)
    return min(launch.busy) * total if launch.busy else None


class GridRunner:
    """Runs the grids of one compiled kernel that are too big to run inline unseen: inline
    through the one-argument launch function (`launch`, or None) when the kernel's measured
    cost per program times the grid is under `POOL_MIN_SECONDS`, else on the pool.  The cost
    is the CPU time of the threads running the kernel (`time.thread_time`: waits for the GIL
    or for a core on a busy machine do not count), measured on every pooled launch and on
    every 16th inline one, so a kernel whose arguments make it slower goes back to the
    pool."""

    __slots__ = ("fn", "launch", "per_program", "runs", "address")

    def __init__(self, fn: Any, launch: Any, address: int = 0):
        self.fn, self.launch, self.address = fn, launch, address
        self.per_program: float | None = None  # seconds, once measured
        self.runs = 0

    def inline(self, total: int) -> bool:
        """Whether a grid of `total` programs should run inline."""
        per = self.per_program
        return (self.launch is not None and per is not None and total <= INLINE_MAX_PROGRAMS
                and per * total < POOL_MIN_SECONDS)

    def run_inline(self, block: bytes, total: int) -> None:
        self.runs += 1
        if self.runs & 15:
            self.launch(block)
            return
        t = time.thread_time()
        self.launch(block)
        self.per_program = (time.thread_time() - t) / total

    def run_pooled(self, packed: bytes, grid: tuple[int, int, int], total: int) -> None:
        per = self.per_program
        alone = run_grid(self.fn, packed, grid, self.address,
                         None if per is None else per * total)
        if alone is not None:
            self.per_program = alone / total


class _Launch:
    """The chunks of one launch, handed out one at a time to whichever thread is free
    (`next` on an itertools counter is atomic under the GIL)."""

    def __init__(self, fn: Any, packed: bytes, bounds: list[int], grid: tuple[int, int, int]):
        import itertools

        self.fn, self.packed, self.bounds, self.grid = fn, packed, bounds, grid
        self.next = itertools.count()
        self.cancelled = False
        self.busy: list[float] = []  # CPU seconds in `fn` per program, per chunk (append
        # is atomic)

    def work(self) -> None:
        fn, packed, bounds, (g0, g1, g2) = self.fn, self.packed, self.bounds, self.grid
        last = len(bounds) - 1
        clock, busy = time.thread_time, self.busy.append  # (this thread's CPU time)
        while not self.cancelled:
            i = next(self.next)
            if i >= last:
                return
            t = clock()
            fn(packed, bounds[i], bounds[i + 1], g0, g1, g2)
            busy((clock() - t) / (bounds[i + 1] - bounds[i]))
