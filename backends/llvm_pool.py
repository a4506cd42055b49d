"""A native worker pool for llvm-backend grids: threads that wait for, claim and run chunks of
a launch in machine code, with no Python queue, no GIL hand-over and no futex while they spin.

Handing a grid to the Python pool (`llvm_runtime.run_grid`'s ThreadPoolExecutor) costs a queue
put, a futex wake of a sleeping worker, the GIL twice per worker and a future's condition at
the end: on a 2-vCPU Emerald Rapids guest 0.15-0.3 ms per launch around an int4 matvec whose
two chunks take 0.45 ms.  Here a launch is one ctypes call (`kdsl_pool_run`, GIL released):

- The caller writes the job (grid function, argument block, program count, chunk count, grid)
  into a 256-byte control block, sets the claim word to (job number << 32) and publishes the
  job number; workers asleep on the futex word are woken (one `futex(FUTEX_WAKE)`, only if a
  worker sleeps).  It then claims chunks itself and, when none is left, spins until the
  `done` count reaches the chunk count.
- A worker spins on the job number for `SPIN_SECONDS` after its last chunk (`pause` between
  reads), then sleeps in `futex(FUTEX_WAIT)`.  Chunks are claimed by compare-and-swap on the
  claim word, whose high half is the job number: a worker still leaving the previous job
  cannot claim a chunk of the next one.  Job fields are read only after a successful claim;
  the caller returns only once every chunk is done, so they stay valid meanwhile.  Each chunk
  adds its CLOCK_MONOTONIC duration to a busy count: the grid's one-thread cost without the
  hand-over, which `GridRunner` uses to run cheap grids inline.
- Lost wake-ups: the caller stores the job number and the futex word (sequentially
  consistent) before reading the sleeper count; a worker adds itself to the count before
  re-reading the job number, and `FUTEX_WAIT` returns at once if the word already changed.

A native call cannot be interrupted, so `run_grid` uses this pool only for grids whose measured
cost is short (`NATIVE_MAX_SECONDS`), and only while no other thread launches through it (else
the Python pool).  Linux on x86-64, AArch64 and RISC-V (the futex system call number);
`KDSL_NATIVE_POOL=0` turns it off.  Workers are stopped at exit, before the compiled code is
freed; a forked child builds its own.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import platform
import sys
import threading
import time
from typing import Any

ENV = "KDSL_NATIVE_POOL"
#: how long an idle worker spins before sleeping: back-to-back launches (a library call's
#: kernels, a decode step's layers) find it awake
SPIN_SECONDS = 200e-6
#: grids measured to take longer than this run on the Python pool, which Ctrl-C can stop
#: between chunks
NATIVE_MAX_SECONDS = 0.05

_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98, "riscv64": 98}
# the spin-wait hint: an intrinsic call (inline assembly would need LLVM's asm parser)
_PAUSE = ("declare void @llvm.x86.sse2.pause()", "call void @llvm.x86.sse2.pause()")
_YIELD = ("declare void @llvm.aarch64.hint(i32)", "call void @llvm.aarch64.hint(i32 1)")
_RELAX = {"x86_64": _PAUSE, "amd64": _PAUSE, "aarch64": _YIELD, "arm64": _YIELD,
          "riscv64": ("", "")}
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129

# byte offsets in the control block; the words workers write sit on cache lines of their own
CLAIM, DONE, BUSY, SEQ, FUTEX, SLEEPERS, STOP = 0, 64, 96, 128, 136, 144, 152
FN, ARGS, TOTAL, CHUNKS, G0, G1, G2, SPIN = 192, 200, 208, 216, 224, 228, 232, 240
BLOCK_BYTES = 256


# the job's fields besides the chunk count: (name, offset, LLVM type, alignment)
_JOB = (("fn", FN, "ptr", 8), ("args", ARGS, "ptr", 8), ("total", TOTAL, "i64", 8),
        ("g0", G0, "i32", 4), ("g1", G1, "i32", 4), ("g2", G2, "i32", 4))


def _fields(op: str, fields: tuple[tuple[str, int, str, int], ...]) -> str:
    """IR that stores the values %name into (or loads them from) their control-block slots."""
    lines = []
    for name, off, ty, align in fields:
        lines.append(f"  %{name}p = getelementptr i8, ptr %p, i64 {off}")
        lines.append(f"  store {ty} %{name}, ptr %{name}p, align {align}" if op == "store"
                     else f"  %{name} = load {ty}, ptr %{name}p, align {align}")
    return "\n".join(lines)


def module_ir(arch: str) -> str:
    """The pool's LLVM module for `arch` (its futex number and spin-wait hint)."""
    decl, call = _RELAX[arch]
    futex = _SYS_FUTEX[arch]
    return f"""
declare i64 @syscall(i64, ...)
declare i32 @sched_yield()
declare i32 @clock_gettime(i32, ptr)
{decl}

; CLOCK_MONOTONIC in nanoseconds (a vDSO read)
define internal i64 @now() {{
entry:
  %ts = alloca [2 x i64], align 8
  %r = call i32 @clock_gettime(i32 1, ptr %ts)
  %sec = load i64, ptr %ts, align 8
  %nsp = getelementptr i64, ptr %ts, i64 1
  %ns = load i64, ptr %nsp, align 8
  %s = mul i64 %sec, 1000000000
  %t = add i64 %s, %ns
  ret i64 %t
}}

define internal void @relax() alwaysinline {{
  {call}
  ret void
}}

; claim and run chunks of job %seq until none is left; chunk c of n covers program ids
; [c*q + min(c, r), (c+1)*q + min(c+1, r)) with q = total / n, r = total % n
define internal void @work(ptr %p, i64 %seq) {{
entry:
  %claimp = getelementptr i8, ptr %p, i64 {CLAIM}
  %donep = getelementptr i8, ptr %p, i64 {DONE}
  %tag = shl i64 %seq, 32
  br label %loop
loop:
  %v = load atomic i64, ptr %claimp acquire, align 8
  %vt = and i64 %v, -4294967296
  %same = icmp eq i64 %vt, %tag
  br i1 %same, label %count, label %exit
count:
  %c = and i64 %v, 4294967295
  %nchp = getelementptr i8, ptr %p, i64 {CHUNKS}
  %nch0 = load atomic i64, ptr %nchp monotonic, align 8
  %more = icmp ult i64 %c, %nch0
  br i1 %more, label %try, label %exit
try:
  %v1 = add i64 %v, 1
  %r = cmpxchg ptr %claimp, i64 %v, i64 %v1 acq_rel acquire
  %won = extractvalue {{ i64, i1 }} %r, 1
  br i1 %won, label %run, label %loop
run:
{_fields("load", _JOB)}
  %nch = load i64, ptr %nchp, align 8
  %q = udiv i64 %total, %nch
  %rem = urem i64 %total, %nch
  %c1 = add i64 %c, 1
  %lt0 = icmp ult i64 %c, %rem
  %m0 = select i1 %lt0, i64 %c, i64 %rem
  %lt1 = icmp ult i64 %c1, %rem
  %m1 = select i1 %lt1, i64 %c1, i64 %rem
  %lo0 = mul i64 %c, %q
  %lo = add i64 %lo0, %m0
  %hi0 = mul i64 %c1, %q
  %hi = add i64 %hi0, %m1
  %t0 = call i64 @now()
  call void %fn(ptr %args, i64 %lo, i64 %hi, i32 %g0, i32 %g1, i32 %g2)
  %t1 = call i64 @now()
  %dt = sub i64 %t1, %t0
  %busyp = getelementptr i8, ptr %p, i64 {BUSY}
  atomicrmw add ptr %busyp, i64 %dt monotonic
  atomicrmw add ptr %donep, i64 1 release
  br label %loop
exit:
  ret void
}}

; a worker: run every job published after it started, spinning `spin` reads between jobs
; before sleeping on the futex word; returns once the stop word is set
define void @kdsl_pool_worker(ptr %p) {{
entry:
  %seqp = getelementptr i8, ptr %p, i64 {SEQ}
  %futp = getelementptr i8, ptr %p, i64 {FUTEX}
  %slp = getelementptr i8, ptr %p, i64 {SLEEPERS}
  %stopp = getelementptr i8, ptr %p, i64 {STOP}
  %spinp = getelementptr i8, ptr %p, i64 {SPIN}
  %spin = load i64, ptr %spinp, align 8
  br label %idle
idle:
  ; from job 0: a worker that starts late still sees every job published (jobs count from 1)
  %seen = phi i64 [ 0, %entry ], [ %job, %ran ]
  br label %spinning
spinning:
  %i = phi i64 [ 0, %idle ], [ %i1, %pause ]
  %s = load atomic i64, ptr %seqp acquire, align 8
  %new = icmp ne i64 %s, %seen
  br i1 %new, label %got, label %tick
tick:
  %i1 = add i64 %i, 1
  %longer = icmp ult i64 %i1, %spin
  br i1 %longer, label %pause, label %sleep
pause:
  call void @relax()
  br label %spinning
sleep:
  atomicrmw add ptr %slp, i64 1 seq_cst
  br label %recheck
recheck:
  %s2 = load atomic i64, ptr %seqp seq_cst, align 8
  %new2 = icmp ne i64 %s2, %seen
  br i1 %new2, label %woke, label %wait
wait:
  %w32 = trunc i64 %seen to i32
  %w = zext i32 %w32 to i64
  %ignored = call i64 (i64, ...) @syscall(i64 {futex}, ptr %futp, i64 {FUTEX_WAIT_PRIVATE},
                                          i64 %w, ptr null)
  br label %recheck
woke:
  atomicrmw sub ptr %slp, i64 1 seq_cst
  br label %got
got:
  %job = phi i64 [ %s, %spinning ], [ %s2, %woke ]
  %stop = load atomic i64, ptr %stopp acquire, align 8
  %stopping = icmp ne i64 %stop, 0
  br i1 %stopping, label %done, label %run
run:
  call void @work(ptr %p, i64 %job)
  br label %ran
ran:
  br label %idle
done:
  ret void
}}

; publish a job (every worker asleep woken), run chunks of it here too, return when all done
define void @kdsl_pool_run(ptr %p, ptr %fn, ptr %args, i64 %total, i64 %nch,
                           i32 %g0, i32 %g1, i32 %g2) {{
entry:
{_fields("store", _JOB)}
  %nchp = getelementptr i8, ptr %p, i64 {CHUNKS}
  store atomic i64 %nch, ptr %nchp monotonic, align 8
  %donep = getelementptr i8, ptr %p, i64 {DONE}
  store atomic i64 0, ptr %donep monotonic, align 8
  %busyp = getelementptr i8, ptr %p, i64 {BUSY}
  store atomic i64 0, ptr %busyp monotonic, align 8
  %seqp = getelementptr i8, ptr %p, i64 {SEQ}
  %s0 = load atomic i64, ptr %seqp monotonic, align 8
  %s = add i64 %s0, 1
  %tag = shl i64 %s, 32
  %claimp = getelementptr i8, ptr %p, i64 {CLAIM}
  store atomic i64 %tag, ptr %claimp release, align 8
  store atomic i64 %s, ptr %seqp seq_cst, align 8
  %futp = getelementptr i8, ptr %p, i64 {FUTEX}
  %s32 = trunc i64 %s to i32
  store atomic i32 %s32, ptr %futp seq_cst, align 4
  %slp = getelementptr i8, ptr %p, i64 {SLEEPERS}
  %asleep = load atomic i64, ptr %slp seq_cst, align 8
  %any = icmp ne i64 %asleep, 0
  br i1 %any, label %wake, label %mine
wake:
  %ignored = call i64 (i64, ...) @syscall(i64 {futex}, ptr %futp, i64 {FUTEX_WAKE_PRIVATE},
                                          i64 2147483647)
  br label %mine
mine:
  call void @work(ptr %p, i64 %s)
  br label %waiting
waiting:
  %i = phi i64 [ 0, %mine ], [ %i1, %give ], [ %i1, %relaxed ]
  %d = load atomic i64, ptr %donep acquire, align 8
  %all = icmp uge i64 %d, %nch
  br i1 %all, label %out, label %again
again:
  %i1 = add i64 %i, 1
  %low = and i64 %i1, 4095
  %yield = icmp eq i64 %low, 0
  br i1 %yield, label %give, label %relaxed
give:
  %y = call i32 @sched_yield()
  br label %waiting
relaxed:
  call void @relax()
  br label %waiting
out:
  ret void
}}

; `n` spin-wait hints: what `spin` is calibrated with
define void @kdsl_pool_relax(i64 %n) {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  call void @relax()
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, %n
  br i1 %more, label %loop, label %out
out:
  ret void
}}
"""


WORKER_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
RUN_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p,
                          ctypes.c_int64, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32,
                          ctypes.c_int32)
RELAX_FN = ctypes.CFUNCTYPE(None, ctypes.c_int64)


def enabled() -> bool:
    """Whether launches may use the native pool here (`KDSL_NATIVE_POOL`, the platform)."""
    if os.environ.get(ENV, "").strip() == "0":
        return False
    return sys.platform.startswith("linux") and platform.machine().lower() in _SYS_FUTEX


class NativePool:
    """The control block, the compiled functions and `nthreads - 1` worker threads (the
    launching thread is the last one)."""

    def __init__(self, nthreads: int, compile_ir: Any):
        arch = platform.machine().lower()
        self.engine, addr = compile_ir(module_ir(arch), ("kdsl_pool_worker", "kdsl_pool_run",
                                                         "kdsl_pool_relax"))
        self._worker = WORKER_FN(addr["kdsl_pool_worker"])
        self.run_fn = RUN_FN(addr["kdsl_pool_run"])
        relax = RELAX_FN(addr["kdsl_pool_relax"])
        self.block = ctypes.create_string_buffer(BLOCK_BYTES + 64)
        base = ctypes.addressof(self.block)
        self.address = base + (-base % 64)
        ctypes.c_int64.from_address(self.address + SPIN).value = _calibrate(relax)
        self.lock = threading.Lock()  # one launch at a time
        self.tids: list[int] = []
        self.steering: dict[str, Any] = {}  # llvm_runtime._steer's memory of the last steer
        self.threads = [threading.Thread(target=self._serve, name=f"kdsl-native-{i}",
                                         daemon=True) for i in range(nthreads - 1)]
        for t in self.threads:
            t.start()
        deadline = time.monotonic() + 5
        while len(self.tids) < len(self.threads) and time.monotonic() < deadline:
            time.sleep(1e-4)

    def _serve(self) -> None:
        self.tids.append(threading.get_native_id())  # (list.append is atomic)
        self._worker(self.address)  # returns at `stop`

    def run(self, fn_address: int, packed: bytes, total: int, chunks: int,
            g0: int, g1: int, g2: int) -> float:
        """Run program ids [0, total) of the grid function at `fn_address` in `chunks` chunks
        (the caller holds `lock`); returns the seconds spent inside the grid function summed
        over the chunks (what the grid costs on one thread, without the hand-over)."""
        self.run_fn(self.address, fn_address, packed, total, chunks, g0, g1, g2)
        return ctypes.c_int64.from_address(self.address + BUSY).value * 1e-9

    def stop(self) -> None:
        """Stop and join the workers (at exit: before the JIT's code is freed)."""
        word = ctypes.c_int64.from_address
        word(self.address + STOP).value = 1
        with self.lock:  # no launch is running: publish an empty job to wake everyone
            self.run_fn(self.address, None, b"", 0, 0, 1, 1, 1)
        for t in self.threads:
            t.join(timeout=1.0)


def _calibrate(relax: Any) -> int:
    """Spin-wait hints in `SPIN_SECONDS` (a `pause` takes ~10 to ~140 cycles by core)."""
    n = 1 << 14
    t = time.perf_counter()
    relax(n)
    per = max((time.perf_counter() - t) / n, 1e-10)
    return max(16, int(SPIN_SECONDS / per))


_STATE: dict[str, Any] = {}
_LOCK = threading.Lock()
#: (LLVM IR text, function names) -> (engine, {name: address}): set by backends/llvm.py, which
#: owns the JIT and its lock (this module cannot import it: llvm.py imports the runtime)
COMPILE: list[Any] = []


def pool(nthreads: int) -> NativePool | None:
    """The process's native pool (built on first use, again after a fork; `KDSL_NATIVE_POOL`
    is read then), or None where it is off or could not be built."""
    st = _STATE
    if st.get("pid") == os.getpid():
        return st["pool"]
    with _LOCK:
        if st.get("pid") != os.getpid():
            built = None
            if enabled() and nthreads > 1 and COMPILE:
                try:
                    built = NativePool(nthreads, COMPILE[0])
                except Exception:  # noqa: BLE001 - no pool: the Python one serves
                    built = None
            if built is not None and not st.get("atexit"):
                atexit.register(_stop)
                st["atexit"] = True
            st["pool"], st["pid"] = built, os.getpid()
    return st["pool"]


def _stop() -> None:
    p = _STATE.get("pool")
    if p is not None and _STATE.get("pid") == os.getpid():
        p.stop()
