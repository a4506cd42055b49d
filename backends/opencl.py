"""OpenCL backend: the OpenCL C dialect of the C-like emitter, and a PyOpenCL runtime.

pyopencl is imported inside methods, so `import kdsl` and code generation work without it.
Device choice: `KDSL_OPENCL_DEVICE` (a substring of the device name, or "platform:device"
indices), else the first GPU, else the first CPU.

How a program instance runs is chosen from the device type (`LOWERINGS`, overridden by
`KDSL_OPENCL_LOWERING`), through the Target, never by a second pipeline:
- GPU devices ("work-group"): a program is one work-group of `num_warps * 32` work-items (`tid` =
  local id), tiles spread over them, exchanges through local memory between barriers.
  `warp_size` is 32 (the lowering never relies on lock-step execution: it puts a barrier
  around every exchange).
- CPU devices ("one-thread"): a program is one work-item of a work-group of one, lowered as the
  llvm backend lowers it (tile loops walked by one thread, partial sums, the register-blocked
  dot micro-kernel; the loops the lowering meant as SIMD loops become OpenCL vector types,
  backends/c_simd.py).  A CPU driver runs work-groups on its cores; PoCL serialises the
  work-items of a group between barriers, so the work-group lowering costs 3-30x there
  (benchmarks/RESULTS.md, "OpenCL on a CPU device").

Half precision: without `cl_khr_fp16` (PoCL's CPU device) the `half` type exists only behind
pointers, so float16 memory is read with `vload_half` and written with `vstore_half_rte`, and
rounding goes through a private ushort; with the extension `convert_half_rte` is used.

Pointers made from integers (`int_to_ptr`) hold addresses of the device's memory space.  A CPU
device (PoCL's) runs kernels in the host process and is given NumPy arrays in place
(USE_HOST_PTR), so host addresses (`array.ctypes.data`) and the addresses a kernel takes of its
arguments (`ptr.to(kd.int64)`) are the same and valid there; memory reached only through such
an address is the caller's to keep alive.  On any other device the kernel is refused with a
CompilationError rather than let it dereference host addresses.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from kdsl.errors import CompilationError
from kdsl.ir import loop
from kdsl.target import Target

from .base import Backend, BoundArg, Timer
from .c_atomics import OPENCL_ATOMICS
from .c_like import C_OPS, CDialect, emit, kernel_name, math_names
from .llvm_math import EXP_P, LN2_HI, LN2_LO, LOG2E
from .opencl_loops import pocl_safe

OPTIONS = ["-cl-fp32-correctly-rounded-divide-sqrt"]
FAST_MATH = "-cl-fast-relaxed-math"
DEFAULT_SHARED = 48 * 1024

_TYPES = {
    "int1": "bool", "int8": "char", "int16": "short", "int32": "int", "int64": "long",
    "uint8": "uchar", "uint16": "ushort", "uint32": "uint", "uint64": "ulong",
    "float32": "float", "float64": "double",
}
_WRAP = {"int8": "uint", "int16": "uint", "uint8": "uint", "uint16": "uint", "int32": "uint",
         "int64": "ulong"}

_F16_ROUND = """\
/* round to the nearest float16 (ties to even) through a private ushort: without cl_khr_fp16
   `half` exists only behind pointers */
static inline float kd_round_f16(float x) {
    ushort h;
    vstore_half_rte(x, 0, (half*)&h);
    return vload_half(0, (const half*)&h);
}"""


def _one_thread_math() -> Callable[[str, str], str]:
    plain = math_names()
    return lambda op, tname: "kd_exp_float32" if (op, tname) == ("exp", "float32") \
        else plain(op, tname)


def _exp_helper() -> str:
    """`kd_exp_float32`: the llvm backend's float32 exp (backends/llvm_math.py: Cephes range
    reduction and polynomial, two exact-range scalings, NaN kept) in OpenCL C, branch-free so
    that the CPU driver vectorises loops of it.  PoCL's own `exp` (SLEEF) made the softmax and
    the attention 1.45-1.57x llvm's time on an AVX-512 host.  floor(t) is computed as a
    truncation and a one-step correction (t lies in [-149.5, 129] after the clamp, so the int
    is exact): PoCL's `floor` takes 14 vector instructions, guarding a range that cannot
    occur here."""
    poly = f"{EXP_P[0]!r}f"
    for c in EXP_P[1:]:
        poly = f"fma({poly}, r, {c!r}f)"
    return f"""/* float32 exp as the llvm backend computes it (backends/llvm_math.py) */
static inline float kd_exp_float32(float x) {{
    float xc = fmin(fmax(x, -104.0f), 89.0f);
    float t = fma(xc, {LOG2E!r}f, 0.5f);
    int k = (int)t;
    k -= t < (float)k;
    float n = (float)k;
    float r = fma(n, {-LN2_HI!r}f, xc);
    r = fma(n, {-LN2_LO!r}f, r);
    float y = fma({poly}, r * r, r) + 1.0f;
    int k1 = k >> 1;
    y = y * as_float((k1 + 127) << 23) * as_float((k - k1 + 127) << 23);
    return isnan(x) ? x : y;
}}"""


def opencl_dialect(native_fp16: bool = False, options: list[str] | None = None,
                   simd_lanes: int = 0) -> CDialect:
    """The OpenCL C dialect; `native_fp16` when the device has `cl_khr_fp16`; `simd_lanes`:
    the float vector width one-thread kernels' SIMD loops are printed with (c_simd.py)."""
    opts = " ".join(options if options is not None else OPTIONS)
    f16 = ({"f16_load": "(float)(*{p})", "f16_store": "*{p} = convert_half_rte({v});",
            "f16_round": "(float)convert_half_rte({x})", "helper": ""} if native_fp16 else
           {"f16_load": "vload_half(0, {p})", "f16_store": "vstore_half_rte({v}, 0, {p});",
            "f16_round": "kd_round_f16({x})", "helper": _F16_ROUND})
    return CDialect(
        name="opencl", template="opencl.cl.j2", kernel_qual="__kernel", global_qual="__global ",
        shared_qual="__local",
        barrier="barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);",
        special={"tid": "(int)get_local_id(0)", "pid": "(int)get_group_id({axis})",
                 "nprog": "(int)get_num_groups({axis})"},
        types=_TYPES, mem_types={"int1": "uchar", "float16": "half", "bfloat16": "ushort"},
        wrap_types=_WRAP, int_suffix={"int64": "L", "uint64": "UL", "uint32": "u"},
        # OpenCL's math built-ins are overloaded for float and double; never native_* (their
        # accuracy is implementation-defined) unless fast math is asked for at build time.
        # One-thread (CPU device) kernels compute float32 exp with kd_exp_float32.
        math=_one_thread_math() if simd_lanes else math_names(),
        f16_load=f16["f16_load"], f16_store=f16["f16_store"], f16_round=f16["f16_round"],
        bitcast="as_{T}({x})",
        atomics=OPENCL_ATOMICS, printf_int64="l",
        fast_math_option=FAST_MATH, helper_qual="static inline", simd_lanes=simd_lanes,
        prefetch="__builtin_prefetch({p}, 0, 2);",
        simd_shuffle="shuffle2({a}, {b}, (uint{n})({mask}))",
        int_math={"clz32": "clz({x})", "clz64": "clz({x})", "popc32": "popcount({x})",
                  "popc64": "popcount({x})"},
        math_fast={op: f"native_{op}" for op in ("exp", "exp2", "log", "log2", "sqrt",
                                                  "rsqrt", "sin", "cos")},
        extra={"as_float": "as_float", "as_uint": "as_uint", "native_fp16": native_fp16,
               "f16_helper": f16["helper"], "options": opts, "join_barrier": True,
               "exp_helper": _exp_helper(),
               "options_fast": FAST_MATH},
    )


#: Added for one-thread kernels: their element loops carry `vectorize_width` pragmas
#: (c_simd.py), and where the compiler cannot vectorise one (a gather, a call) clang warns
#: "loop not vectorized", which PyOpenCL turns into a CompilerWarning on every build of a
#: kernel that did nothing wrong.  Generated code has no warning a user could act on.
QUIET = "-w"


def build_options(kernel: loop.Kernel) -> list[str]:
    """IEEE by default (correctly rounded division and sqrt); fast math replaces that."""
    opts = [FAST_MATH] if kernel.options.fast_math else list(OPTIONS)
    return opts + [QUIET] if kernel.threads == 1 else opts


#: Set in a child process forked after this process created its OpenCL runtime: OpenCL
#: state does not survive fork() (PoCL's worker threads are gone and the child's first launch
#: would wait for them forever), so the child refuses OpenCL with a clear error instead.
_FORKED_AFTER_INIT = False
_FORK_HOOK = []
FORK_MESSAGE = ("OpenCL was initialised in the parent process before fork(); an OpenCL device "
                "cannot be used in a forked child (it would hang). Use multiprocessing's "
                "'spawn' or 'forkserver' start method (multiprocessing.get_context('spawn')), "
                "or touch OpenCL only in the children")


def _mark_forked() -> None:
    global _FORKED_AFTER_INIT
    _FORKED_AFTER_INIT = True


def zero_copy_everything() -> bool:
    """KDSL_OPENCL_ZERO_COPY=1: hand every host array to a CPU device in place, written ones
    included (faster; safe only on a device that honours masks, docs/backends.md)."""
    return os.environ.get("KDSL_OPENCL_ZERO_COPY", "").strip() not in ("", "0")


class _Runtime:
    """The process's OpenCL device, context and queue (created on first use)."""

    def __init__(self) -> None:
        import pyopencl as cl

        if not _FORK_HOOK and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_mark_forked)
            _FORK_HOOK.append(True)
        self.cl = cl
        self.built = False  # (the first build re-enables faulthandler, see `build`)
        pin_pocl_workers()  # before the first platform query starts PoCL's threads
        self.device = _choose_device(cl)
        self.ctx = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.ctx, self.device)
        # A CPU device shares host memory: NumPy arrays are used in place (USE_HOST_PTR)
        # instead of being copied into fresh buffers and back.
        self.zero_copy = bool(self.device.type & cl.device_type.CPU)
        self._pool: Any = None

    def pool(self) -> Any:
        """The memory pool of the arrays the backend allocates (`OpenCLBackend.empty`)."""
        if self._pool is None:
            import pyopencl.tools as clt

            self._pool = clt.MemoryPool(clt.ImmediateAllocator(self.queue))
        return self._pool


#: the machines `pin_pocl_workers` pins on: as many CPUs as llvm_runtime's steering handles
POCL_PIN_CPUS = range(2, 17)


def pin_pocl_workers() -> bool:
    """Ask PoCL's pthread driver to pin its worker thread i to CPU i (`POCL_AFFINITY=1`, read
    when the driver starts its threads) unless the user set `POCL_AFFINITY` or
    `POCL_MAX_PTHREAD_COUNT`; only where this process may run on exactly CPUs 0..n-1 (PoCL
    pins by index and aborts on a CPU outside the process's set) with 2 <= n <= 16.  Returns
    whether it set the variable.

    Unpinned, the scheduler sometimes puts both of PoCL's workers on one vCPU of a virtual
    machine (a halted vCPU looks busy to it, as backends/llvm_runtime.py `_steer` notes for
    kdsl's own pool): the same OpenCL mlp ran 1.65-1.78x llvm's time in most processes and
    1.06x in others; pinned, 1.01-1.11x in every run (Emerald Rapids, 2 vCPUs)."""
    if "POCL_AFFINITY" in os.environ or "POCL_MAX_PTHREAD_COUNT" in os.environ:
        return False
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):  # not Linux
        return False
    n = os.cpu_count() or 0
    if n not in POCL_PIN_CPUS or allowed != set(range(n)):
        return False
    os.environ["POCL_AFFINITY"] = "1"
    return True


def _restore_faulthandler(rt: _Runtime) -> None:
    """Re-install Python's fault handler after the first OpenCL build: a driver may install its
    own signal handlers while it compiles (seen with PoCL), and a later crash would then print no
    Python traceback."""
    if rt.built:
        return
    rt.built = True
    import faulthandler
    import sys

    if not faulthandler.is_enabled():
        return
    # the process's real stderr: sys.stderr may be a stream without a file descriptor by now
    # (pytest's capture, a notebook), which faulthandler.enable() refuses
    target = sys.__stderr__
    try:
        target.fileno()
    except (AttributeError, OSError, ValueError):  # no stderr to write a traceback to
        return
    faulthandler.disable()
    faulthandler.enable(file=target)


def _choose_device(cl: Any) -> Any:
    platforms = cl.get_platforms()
    devices = [(pi, di, d) for pi, p in enumerate(platforms) for di, d in
               enumerate(p.get_devices())]
    if not devices:
        raise RuntimeError("no OpenCL device found")
    want = os.environ.get("KDSL_OPENCL_DEVICE", "").strip()
    if want:
        if ":" in want and all(part.strip().isdigit() for part in want.split(":", 1)):
            pi, di = (int(part) for part in want.split(":", 1))
            for p, i, d in devices:
                if (p, i) == (pi, di):
                    return d
        for _, _, d in devices:
            if want.lower() in d.name.lower():
                return d
        raise RuntimeError(f"KDSL_OPENCL_DEVICE={want!r} matches no OpenCL device; found "
                           + ", ".join(f"{p}:{i} {d.name}" for p, i, d in devices))
    for kind in (cl.device_type.GPU, cl.device_type.CPU):
        for _, _, d in devices:
            if d.type & kind:
                return d
    return devices[0][2]


_RUNTIME: list[_Runtime] = []


def _shared_runtime() -> _Runtime:
    """The process's one runtime: every backend instance (a variant with another lowering
    included) uses the same context, so arrays made by one launch on the other."""
    if not _RUNTIME:
        _RUNTIME.append(_Runtime())
    return _RUNTIME[0]


LOWERING_ENV = "KDSL_OPENCL_LOWERING"
#: KDSL_OPENCL_LOWERING value -> lowering (None: from the device type, the module docstring)
LOWERINGS: dict[str, str | None] = {"auto": None, "one-thread": "one-thread",
                                    "work-group": "work-group"}
#: What a one-thread program may use that the work-group lowering does not (kdsl/target.py):
#: the CPU strategies of the shared lowering, as on the llvm backend, and `kd.prefetch` hints
#: (clang's `__builtin_prefetch`: OpenCL's `prefetch()` is a no-op on PoCL).  The next-row
#: hints of the library's row kernels, data evicted between calls, 1024 x 4096 on PoCL:
#: softmax 2.8-3.3 -> 2.2-2.8 ms, rms_norm 2.4-2.7 -> 1.8-2.3, layer_norm 2.5-2.9 -> 2.1-2.7
#: (2026-12-03).  The loop rewrite's hints ("prefetch") are not enabled here.
ONE_THREAD_CAPS = frozenset({"reduce_partials", "cpu_microkernel", "reduce_partials_minmax",
                             "transpose_block", "prefetch_hints"})


def _cpu_simd(dev: Any) -> tuple[int, int]:
    """(vector_bits, vector_regs) of a CPU device: its native float vector width (16 lanes on
    an AVX-512 host under PoCL), and the registers such a unit has on x86 (32 with AVX-512,
    16 with AVX2; fewer assumed than there are only costs blocking, never a spill)."""
    lanes = int(getattr(dev, "native_vector_width_float", 0) or 0) if dev is not None else 0
    bits = max(lanes, 4) * 32
    return bits, 32 if bits >= 512 else 16


class _Program:
    """A built program and its kernel object."""

    def __init__(self, program: Any, name: str) -> None:
        self.program = program
        self.kernel = getattr(program, name)


class OpenCLBackend(Backend):
    name = "opencl"
    ops = C_OPS
    memory = "device"
    source_suffix = "cl"
    short_name = "ocl"
    extra = "opencl"
    packages = ("pyopencl",)
    array_name = "PyOpenCL"

    #: "one-thread" or "work-group" whatever the device and KDSL_OPENCL_LOWERING say (a
    #: subclass that tests the work-group lowering on a CPU device sets it); None: `lowering()`
    forced_lowering: str | None = None

    def __init__(self) -> None:
        self._rt: _Runtime | None = None
        self._rt_error: Exception | None = None

    # -- device

    def runtime(self) -> _Runtime:
        if _FORKED_AFTER_INIT:
            raise RuntimeError(f"OpenCL unavailable: {FORK_MESSAGE}")
        if self._rt is None:
            if self._rt_error is not None:
                raise RuntimeError(f"OpenCL unavailable: {self._rt_error}")
            try:
                self._rt = _shared_runtime()
            except Exception as exc:  # no pyopencl, no platform, no device
                self._rt_error = exc
                raise RuntimeError(f"OpenCL unavailable: {exc}") from exc
        return self._rt

    def _device(self) -> Any | None:
        try:
            return self.runtime().device
        except RuntimeError:
            return None

    def is_available(self) -> bool:
        return self._device() is not None

    def unavailable_reason(self) -> str:
        if _FORKED_AFTER_INIT:
            return FORK_MESSAGE
        if self._rt_error is not None:
            return str(self._rt_error)
        return ("no OpenCL device (pyopencl: pip install 'kdsl[opencl]'; and a driver, e.g. "
                "PoCL: apt-get install pocl-opencl-icd)")

    def device_kind(self) -> str:
        import pyopencl as cl
        dev = self._device()
        return "cpu" if dev is None or dev.type & cl.device_type.CPU else "gpu"

    def parallelism(self) -> int:
        """A one-thread (CPU device) lowering runs one program per compute unit at once."""
        dev = self._device()
        return int(dev.max_compute_units) if dev is not None and self.lowering() == "one-thread" \
            else 0

    @property
    def caps(self) -> frozenset[str]:  # type: ignore[override]
        dev = self._device()
        if dev is None:
            return frozenset()
        ext = dev.extensions.split()
        return frozenset({"fp64"} if "cl_khr_fp64" in ext or dev.double_fp_config else set()) \
            | frozenset({"native_fp16"} if "cl_khr_fp16" in ext else set())

    @property
    def is_cpu(self) -> bool:  # type: ignore[override]
        """A one-thread program runs as one CPU thread (the library's "cpu" tuning rows)."""
        return self._device() is not None and self.lowering() == "one-thread"

    def lowering(self) -> str:
        """"one-thread" or "work-group": how a program instance runs here (module docstring)."""
        choice = self.forced_lowering or os.environ.get(LOWERING_ENV, "").strip() or "auto"
        if choice not in LOWERINGS:
            raise ValueError(f"{LOWERING_ENV}={choice!r}: expected one of "
                             + ", ".join(repr(k) for k in LOWERINGS))
        return LOWERINGS[choice] or ("one-thread" if self.device_kind() == "cpu"
                                     else "work-group")

    def target(self, num_warps: int) -> Target:
        dev = self._device()
        shared = int(dev.local_mem_size) if dev is not None else DEFAULT_SHARED
        # code for no device assumes double precision; a device without it rejects float64
        missing = frozenset({"fp64"}) if dev is not None and "fp64" not in self.caps \
            else frozenset()
        if self.lowering() == "one-thread":
            bits, regs = _cpu_simd(dev)
            return Target("opencl", threads=1, warp_size=1, shared_bytes=shared,
                          caps=self.caps | ONE_THREAD_CAPS, missing=missing, ops=self.ops,
                          vector_bits=bits, vector_regs=regs)
        return Target("opencl", threads=num_warps * 32, warp_size=32, shared_bytes=shared,
                      caps=self.caps, missing=missing, ops=self.ops)

    def hash(self) -> str:
        dev = self._device()
        if dev is None:
            return "opencl:none"
        return f"opencl:{dev.platform.name}:{dev.name}:{dev.driver_version}"

    # -- compile

    def dialect(self, kernel: loop.Kernel | None = None) -> CDialect:
        """The dialect for `kernel`: a one-thread kernel's SIMD loops get vector types of the
        device's native width (the width its Target was lowered for)."""
        lanes = _cpu_simd(self._device())[0] // 32 if kernel is not None and \
            kernel.threads == 1 else 0
        return opencl_dialect(native_fp16="native_fp16" in self.caps, simd_lanes=lanes)

    def codegen(self, kernel: loop.Kernel) -> str:
        return emit(pocl_safe(kernel), self.dialect(kernel))

    def _check_addresses(self, kernel: loop.Kernel, rt: _Runtime) -> None:
        loc = kernel.raw_pointers
        if loc is not None and not rt.zero_copy:
            raise CompilationError(
                f"a pointer made from an integer needs a device that shares the host's address "
                f"space; OpenCL device {rt.device.name!r} does not (backends that can: interp, "
                f"llvm, cuda with device addresses, opencl on a CPU device)", loc, kernel.name)

    def build(self, kernel: loop.Kernel, source: str) -> _Program:
        rt = self.runtime()
        self._check_addresses(kernel, rt)
        program = rt.cl.Program(rt.ctx, source)
        try:
            program.build(options=build_options(kernel))
        except rt.cl.RuntimeError as exc:
            raise RuntimeError(f"OpenCL build of {kernel.name} failed:\n{exc}") from exc
        _restore_faulthandler(rt)
        return _Program(program, kernel_name(kernel.name))

    def serialize(self, handle: _Program) -> bytes | None:
        return bytes(handle.program.binaries[0])

    def deserialize(self, kernel: loop.Kernel, data: bytes) -> _Program:
        rt = self.runtime()
        self._check_addresses(kernel, rt)
        program = rt.cl.Program(rt.ctx, [rt.device], [data])
        program.build(options=build_options(kernel))
        return _Program(program, kernel_name(kernel.name))

    # -- device half: memory, launch, clock, arrays (kdsl/runtime/device.py copies)

    def check_launch(self, kernel: loop.Kernel, grid: tuple[int, int, int]) -> None:
        limit = self.runtime().device.max_work_group_size
        if kernel.threads > limit:
            raise ValueError(f"{kernel.threads} work-items per program exceed the device's "
                             f"limit of {limit}: use fewer warps")

    def allocate(self, nbytes: int) -> Any:
        rt = self.runtime()
        return rt.cl.Buffer(rt.ctx, rt.cl.mem_flags.READ_WRITE, max(nbytes, 1))

    def copy_in(self, buf: Any, offset: int, host: np.ndarray) -> None:
        rt = self.runtime()
        rt.cl.enqueue_copy(rt.queue, buf, host, dst_offset=offset, is_blocking=True)

    def copy_out(self, host: np.ndarray, buf: Any, offset: int) -> None:
        rt = self.runtime()
        rt.cl.enqueue_copy(rt.queue, host, buf, src_offset=offset, is_blocking=True)

    def span_offset(self, arg: BoundArg) -> int:
        """A view with negative strides is passed as a sub-buffer starting at its first
        element; sub-buffer origins must be aligned to the device's base address alignment,
        so the span is copied in at the padding that puts the first element there.  The
        kernel's negative offsets reach the span before it, inside the parent buffer (which
        OpenCL CPU and GPU drivers lay out contiguously)."""
        if not arg.origin:
            return 0
        align = max(16, self.runtime().device.mem_base_addr_align // 8)  # powers of two
        first = arg.origin * arg.host.itemsize
        return -(-first // align) * align - first

    def pointer(self, buf: Any, offset: int, nbytes: int) -> Any:
        return buf.get_sub_region(offset, nbytes - offset)

    def host_buffer(self, host: np.ndarray, written: bool, kernel: loop.Kernel) -> Any | None:
        """A CPU device shares host memory: NumPy arrays are used in place (USE_HOST_PTR),
        but only those the kernel does not write (unless KDSL_OPENCL_ZERO_COPY=1, or the
        kernel takes host addresses): a device that ignores a mask then cannot write past a
        written array into the Python heap (PoCL did, docs/backends.md)."""
        rt = self.runtime()
        if not rt.zero_copy or not host.flags.writeable:
            return None
        if written and not (zero_copy_everything()
                            or kernel.raw_pointers is not None):
            return None
        mf = rt.cl.mem_flags
        return rt.cl.Buffer(rt.ctx, mf.READ_WRITE | mf.USE_HOST_PTR, hostbuf=host)

    def release_host_buffer(self, buf: Any, host: np.ndarray) -> None:
        # mapping a USE_HOST_PTR buffer makes the host array current (no copy when the device
        # wrote it in place); unmapping releases the mapping
        rt = self.runtime()
        mapped, _ = rt.cl.enqueue_map_buffer(rt.queue, buf, rt.cl.map_flags.READ, 0,
                                             (host.nbytes,), np.uint8)
        mapped.base.release(rt.queue)

    def device_arg(self, arg: BoundArg) -> Any:
        if arg.value.offset:
            raise ValueError(f"argument {arg.name!r}: PyOpenCL arrays with an offset are "
                             "not supported; pass a copy")
        return arg.value.base_data

    def enqueue(self, handle: _Program, kernel: loop.Kernel, grid: tuple[int, int, int],
                values: list[Any]) -> None:
        rt = self.runtime()
        handle.kernel.set_args(*values)
        t = kernel.threads
        rt.cl.enqueue_nd_range_kernel(rt.queue, handle.kernel, (grid[0] * t, grid[1], grid[2]),
                                      (t, 1, 1))

    def synchronize(self) -> None:
        self.runtime().queue.finish()

    def timer(self) -> Timer:
        return OpenCLTimer(self.runtime())

    def devices(self) -> list[str]:
        import pyopencl as cl

        used = self._device()
        return [f"{p.name}: {d.name}" + (f" (used: {self.lowering()} lowering)"
                                          if used is not None and d == used else "")
                for p in cl.get_platforms() for d in p.get_devices()]

    def owns(self, array: Any) -> bool:
        try:
            import pyopencl.array as cla
        except Exception:
            return False
        return isinstance(array, cla.Array)

    def _queue(self, like: Any) -> Any:
        return like.queue if like is not None else self.runtime().queue

    def _allocator(self, like: Any) -> Any:
        """`like`'s allocator where it has one (the caller's memory pool), else the runtime's
        pool: a fresh buffer per library output costs its page faults on every call (a 16 MiB
        output on PoCL: 8-12 ms of a 15 ms rms_norm), a pooled one is reused as CuPy's are."""
        own = getattr(like, "allocator", None)
        return own if own is not None else self.runtime().pool()

    def to_device(self, host: np.ndarray, like: Any = None) -> Any:
        import pyopencl.array as cla

        return cla.to_device(self._queue(like), np.ascontiguousarray(host),
                             allocator=self._allocator(like))

    def empty(self, shape: tuple[int, ...], dtype: Any, like: Any = None) -> Any:
        import pyopencl.array as cla

        return cla.empty(self._queue(like), shape, dtype, allocator=self._allocator(like))

    def zeros(self, shape: tuple[int, ...], dtype: Any, like: Any = None) -> Any:
        import pyopencl.array as cla

        return cla.zeros(self._queue(like), shape, dtype, allocator=self._allocator(like))

    def to_host(self, array: Any) -> np.ndarray:
        return array.get()

    def ascontiguous(self, array: Any) -> Any:
        if array.flags.c_contiguous:
            return array
        return self.to_device(array.get(), like=array)  # through the host: no device kernel


class OpenCLTimer(Timer):
    """Markers on a profiling-enabled queue bracket each call (in-order queue: everything the
    call enqueued runs between them); the queue replaces the runtime's during a session."""

    name = "opencl events"

    def __init__(self, rt: _Runtime) -> None:
        self.rt = rt
        cl = rt.cl
        self.queue = cl.CommandQueue(rt.ctx, rt.device,
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


class WorkGroupOpenCLBackend(OpenCLBackend):
    """OpenCL with the work-group lowering on any device (the variant "opencl_wg",
    backends/__init__.py `VARIANTS`): the GPU code path, run on a CPU device."""

    name = "opencl_wg"
    forced_lowering = "work-group"
