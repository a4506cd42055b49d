"""CUDA backend: the CUDA C dialect of the C-like emitter, NVRTC/nvcc compilation and a CuPy
runtime.

Code generation and compilation to PTX/cubin need no GPU (NVRTC through `cupy.cuda.nvrtc`, or
nvcc when NVRTC is missing); only `build`/`launch` need one.  float16 memory is `__half`
(converted with `__half2float` / `__float2half_rn`); bfloat16 memory is raw `unsigned short`
bits handled by the shared bit-manipulation helpers, so no `cuda_bf16.h` is needed.
NVRTC does not search the CUDA include directory by itself: `cuda_include_dirs()` finds it
(the nvidia-cuda-nvrtc wheel's include folder when it holds `cuda_fp16.h`, else the CUDA
toolkit's) and passes it with `-I`.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from kdsl.ir import loop
from kdsl.runtime.stages import Lazy
from kdsl.target import Target

from .base import Backend, BoundArg, Timer
from .c_atomics import CUDA_ATOMICS
from .c_like import C_OPS, CDialect, CEmitter, emit, kernel_name, math_names

DEFAULT_ARCH = "sm_80"
# Static `__shared__` arrays of one block are limited to 48 KiB; beyond it a kernel uses
# dynamic shared memory, up to the device's opt-in limit (per-arch defaults without a device).
STATIC_SHARED_BYTES = 48 * 1024
OPTIN_SHARED_BYTES = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024,
                      90: 227 * 1024, 100: 227 * 1024, 120: 99 * 1024}
OPTIONS = ["-std=c++17"]
FAST_MATH = "--use_fast_math"

_TYPES = {
    "int1": "bool", "int8": "signed char", "int16": "short", "int32": "int",
    "int64": "long long", "uint8": "unsigned char", "uint16": "unsigned short",
    "uint32": "unsigned int", "uint64": "unsigned long long", "float32": "float",
    "float64": "double",
}
_WRAP = {"int8": "unsigned int", "int16": "unsigned int", "uint8": "unsigned int",
         "uint16": "unsigned int", "int32": "unsigned int", "int64": "unsigned long long"}


def cuda_dialect() -> CDialect:
    return CDialect(
        name="cuda", template="cuda.cu.j2", kernel_qual='extern "C" __global__',
        global_qual="", shared_qual="__shared__",
        barrier="__syncthreads();",
        special={"tid": "(int)threadIdx.x", "pid": "(int)blockIdx.{xyz}",
                 "nprog": "(int)gridDim.{xyz}"},
        types=_TYPES, mem_types={"int1": "unsigned char", "float16": "__half",
                                 "bfloat16": "unsigned short"},
        wrap_types=_WRAP, int_suffix={"int64": "LL", "uint64": "ULL", "uint32": "u"},
        # expf, tanhf, ... for float; the C names (double overloads) for float64
        math=math_names("f"),
        f16_load="__half2float(*{p})", f16_store="*{p} = __float2half_rn({v});",
        f16_round="__half2float(__float2half_rn({x}))",
        bitcast="kd_bitcast<{T}>({x})",
        atomics=CUDA_ATOMICS,
        fast_math_option=FAST_MATH, helper_qual="static __device__ __forceinline__",
        int_math={"clz32": "(({T})__clz((int)({x})))", "clz64": "(({T})__clzll((long long)({x})))",
                  "popc32": "(({T})__popc((unsigned int)({x})))",
                  "popc64": "(({T})__popcll((unsigned long long)({x})))"},
        extra={"as_float": "__uint_as_float", "as_uint": "__float_as_uint", "f16_helper": "",
               "options": " ".join(OPTIONS), "options_fast": " ".join(OPTIONS + [FAST_MATH])},
        intrinsics={**MMA_FUNCTIONS, **WARP_FUNCTIONS},
        # VecLoad/VecStore (kdsl/lowering/vector.py): float4, int4, ushort4 (16-bit floats
        # as bits), ... whose aligned loads are ld.global.v4 / ld.global.v2
        vector_types=CUDA_VECTOR_TYPES,
        vector_lane_in={"float16": "__half2float(__ushort_as_half({c}))",
                        "bfloat16": "kd_bf16_to_f32({c})", "int1": "({c} != 0)"},
        vector_lane_out={"float16": "__half_as_ushort(__float2half_rn({x}))",
                         "bfloat16": "kd_f32_to_bf16({x})"},
        # more than 48 KiB of __shared__ arrays: slices of one `extern __shared__` buffer
        dynamic_shared="kd_smem", static_shared_bytes=STATIC_SHARED_BYTES,
        shared_address="((unsigned)__cvta_generic_to_shared({p}))",
    )


CUDA_VECTOR_TYPES = {
    "float32": "float", "int32": "int", "uint32": "uint", "int16": "short", "uint16": "ushort",
    "float16": "ushort", "bfloat16": "ushort", "int8": "char", "uint8": "uchar", "int1": "uchar",
    "float64": "double", "int64": "longlong", "uint64": "ulonglong",
}


# Tensor-core intrinsics (kdsl/lowering/dot_mma.py) -> functions of cuda_mma.cu.j2.
MMA_FUNCTIONS = {
    "mma_m16n8k16_f32_f16": "kd_mma_m16n8k16_f16", "mma_m16n8k16_f32_bf16":
    "kd_mma_m16n8k16_bf16", "mma_m16n8k8_f32_tf32": "kd_mma_m16n8k8_tf32",
    "mma_m16n8k32_s32_s8": "kd_mma_m16n8k32_s8",
    # operands as packed 16-bit pairs from 16-bit shared copies (dot_mma.py, `PairBits`)
    "mma_m16n8k16_f32_f16_bits": "kd_mma_m16n8k16_f16_bits",
    "mma_m16n8k16_f32_bf16_bits": "kd_mma_m16n8k16_bf16_bits",
    # warp-collective loads of four 8x8 16-bit matrices from shared memory (dot_mma.py)
    "ldmatrix_x4": "kd_ldmatrix_x4", "ldmatrix_x4_trans": "kd_ldmatrix_x4_trans",
    # sparse (kdsl/lowering/dot_sparse.py)
    "mma_sp_m16n8k32_f32_f16": "kd_mma_sp_m16n8k32_f16",
    "mma_sp_m16n8k32_f32_bf16": "kd_mma_sp_m16n8k32_bf16",
}


# Warp shuffles (kdsl/lowering/reduce_warp.py) -> the overloads of cuda.cu.j2's warp_helpers.
WARP_FUNCTIONS = {"shfl_xor": "kd_shfl_xor"}


# ----------------------------------------------------------------------------- toolchain


@cache
def cuda_include_dirs() -> tuple[str, ...]:
    """Folders holding cuda_fp16.h: the NVRTC wheel's include folder, else the toolkit's."""
    candidates = []
    try:
        import nvidia

        for base in nvidia.__path__:
            candidates += sorted(Path(base).glob("*/include")) + sorted(
                Path(base).glob("cu*/include"))
    except Exception:
        pass
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        candidates.append(Path(home) / "include")
    candidates += [Path("/usr/local/cuda/include")]
    nvcc = shutil.which("nvcc") or "/usr/local/bin/nvcc"
    if os.path.exists(nvcc):
        candidates.append(Path(os.path.realpath(nvcc)).parent.parent / "include")
    return tuple(dict.fromkeys(str(c) for c in candidates if (c / "cuda_fp16.h").exists()))


def _nvcc() -> str | None:
    for path in (shutil.which("nvcc"), "/usr/local/bin/nvcc", "/usr/local/cuda/bin/nvcc"):
        if path and os.path.exists(path):
            return path
    return None


def _ptxas() -> str | None:
    found = shutil.which("ptxas")
    if found:
        return found
    nvcc = _nvcc()
    for cand in ([str(Path(os.path.realpath(nvcc)).parent / "ptxas")] if nvcc else []) + [
            "/usr/local/cuda/bin/ptxas"]:
        if os.path.exists(cand):
            return cand
    return None


def nvrtc_available() -> bool:
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
        return True
    except Exception:
        return False


def compiler_available() -> bool:
    """True when CUDA source can be compiled here (NVRTC or nvcc)."""
    return nvrtc_available() or _nvcc() is not None


def compile_options(arch: str, fast_math: bool = False) -> list[str]:
    return ([f"-arch={arch}"] + OPTIONS + [f"-I{d}" for d in cuda_include_dirs()]
            + ([FAST_MATH] if fast_math else []))


def _fast_math(source: str) -> bool:
    """Fast math is recorded in the source's header comment (so it is part of the cache key)."""
    header = source.split("\n", 3)[:3]
    return any(line.startswith("// build options:") and FAST_MATH in line for line in header)


class CUDACompileError(RuntimeError):
    """NVRTC or nvcc rejected the source; the message carries the compiler log."""


def _nvrtc(source: str, arch: str, want: str, extra: list[str] = ()) -> tuple[bytes, str]:
    """Compile with NVRTC; returns (PTX or cubin bytes, log)."""
    from cupy.cuda import nvrtc

    prog = nvrtc.createProgram(source, "kernel.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, compile_options(arch, _fast_math(source)) + list(extra))
        except nvrtc.NVRTCError as exc:
            log = nvrtc.getProgramLog(prog)
            raise CUDACompileError(f"NVRTC failed for {arch}: {exc}\n{log}\n--- source ---\n"
                                   + _numbered(source)) from None
        log = nvrtc.getProgramLog(prog)
        if want == "ptx":
            return bytes(nvrtc.getPTX(prog)), log
        return complete_elf(bytes(nvrtc.getCUBIN(prog))), log
    finally:
        nvrtc.destroyProgram(prog)


def elf_extent(data: bytes) -> int:
    """Bytes an ELF64 image spans by its own headers: the header tables and every section
    that has file contents (0 when `data` is not ELF64)."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2:
        return 0
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    end = max(64, phoff + phentsize * phnum, shoff + shentsize * shnum)
    for i in range(shnum):
        at = shoff + i * shentsize
        if at + 64 > len(data):
            break
        kind, = struct.unpack_from("<I", data, at + 4)
        offset, size = struct.unpack_from("<QQ", data, at + 0x18)
        if kind != 8:  # SHT_NOBITS occupies no file space
            end = max(end, offset + size)
    return end


def complete_elf(data: bytes) -> bytes:
    """`data` padded with zeros to its ELF extent.  CuPy's `nvrtc.getCUBIN` returns the cubin
    one byte short (it drops the last byte, a zero, as if it ended a C string): the driver
    happens to load it from memory, where the bytes object's terminator stands in, but the
    file it makes (the disk cache, `cuobjdump`, `nvdisasm`) is an invalid ELF."""
    missing = elf_extent(data) - len(data)
    return data + b"\0" * missing if 0 < missing <= 64 else data


def _nvcc_compile(source: str, arch: str, want: str) -> bytes:
    nvcc = _nvcc()
    if nvcc is None:
        raise CUDACompileError("neither NVRTC nor nvcc is available")
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "kernel.cu", Path(tmp) / f"kernel.{want}"
        src.write_text(source)
        opts = [o for o in compile_options(arch, _fast_math(source)) if not o.startswith("-arch")]
        cmd = [nvcc, f"-{want}", f"-arch={arch}", *opts, str(src), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode:
            raise CUDACompileError(f"nvcc failed for {arch}:\n{proc.stderr}\n--- source ---\n"
                                   + _numbered(source))
        return out.read_bytes()


def _numbered(source: str) -> str:
    return "\n".join(f"{i:4d} {line}" for i, line in enumerate(source.splitlines(), 1))


def compile_ptx(source: str, arch: str = DEFAULT_ARCH) -> str:
    """PTX text of CUDA `source` for `arch` (e.g. "sm_80")."""
    data = _nvrtc(source, arch, "ptx")[0] if nvrtc_available() else _nvcc_compile(
        source, arch, "ptx")
    return data.rstrip(b"\0").decode()


def compile_cubin(source: str, arch: str = DEFAULT_ARCH) -> bytes:
    """cubin (ELF) of CUDA `source` for `arch`."""
    return _nvrtc(source, arch, "cubin")[0] if nvrtc_available() else _nvcc_compile(
        source, arch, "cubin")


_USAGE = {
    "registers": r"Used (\d+) registers",
    "stack_bytes": r"(\d+) bytes stack frame",
    "spill_stores": r"(\d+) bytes spill stores",
    "spill_loads": r"(\d+) bytes spill loads",
    "shared_bytes": r"(\d+) bytes smem",
    "constant_bytes": r"(\d+) bytes cmem\[0\]",
}


def _parse_usage(log: str) -> dict[str, int]:
    """Numbers of the first entry function in `ptxas -v` output (absent ones are 0)."""
    return {key: int(m.group(1)) if (m := re.search(pat, log)) else 0
            for key, pat in _USAGE.items()}


def resource_usage(code: str | bytes, arch: str = DEFAULT_ARCH) -> dict[str, int]:
    """Registers, spills (bytes), stack, shared and constant memory of the kernel in `code`:
    CUDA source or PTX text (assembled with `ptxas -v`), or a cubin (read with cuobjdump).
    Falls back to NVRTC's `-Xptxas -v` log when ptxas is missing."""
    if isinstance(code, bytes):
        return _cubin_usage(code)
    ptxas = _ptxas()
    if ".entry" not in code and ptxas is None:
        log = _nvrtc(code, arch, "cubin", ["-Xptxas=-v"])[1]
        return _parse_usage(log)
    ptx = code if ".entry" in code else compile_ptx(code, arch)
    if ptxas is None:
        raise CUDACompileError("ptxas not found: cannot report resource usage of PTX")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.ptx"
        path.write_text(ptx)
        cmd = [ptxas, f"-arch={arch}", "-v", str(path), "-o", str(Path(tmp) / "kernel.cubin")]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise CUDACompileError(f"ptxas failed:\n{proc.stderr}")
    return _parse_usage(proc.stdout + proc.stderr)


def _cubin_usage(cubin: bytes) -> dict[str, int]:
    tool = shutil.which("cuobjdump") or (
        str(Path(os.path.realpath(_nvcc())).parent / "cuobjdump") if _nvcc() else None)
    if not tool or not os.path.exists(tool):
        raise CUDACompileError("cuobjdump not found: pass the source or PTX instead of a cubin")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([tool, "--dump-resource-usage", str(path)], capture_output=True,
                              text=True, check=False)
    out = proc.stdout
    return {"registers": int(m.group(1)) if (m := re.search(r"REG:(\d+)", out)) else 0,
            "stack_bytes": int(m.group(1)) if (m := re.search(r"STACK:(\d+)", out)) else 0,
            "shared_bytes": int(m.group(1)) if (m := re.search(r"SHARED:(\d+)", out)) else 0,
            "spill_stores": 0, "spill_loads": 0,
            "constant_bytes": int(m.group(1)) if (m := re.search(r"CONSTANT\[0\]:(\d+)", out))
            else 0}


# ----------------------------------------------------------------------------- backend


def _sm(arch: str) -> int:
    """80 for "sm_80" (0 when unreadable)."""
    m = re.fullmatch(r"sm_(\d+)[a-z]?", arch)
    return int(m.group(1)) if m else 0


def shared_limit(arch: str) -> int:
    """Shared memory one block may use on `arch` without a device: the opt-in limit of the
    architecture (the largest table entry not above it), else the static 48 KiB."""
    sm = _sm(arch)
    known = [v for k, v in sorted(OPTIN_SHARED_BYTES.items()) if k <= sm and k // 10 == sm // 10]
    return known[-1] if known else STATIC_SHARED_BYTES


def device_shared_limit() -> int | None:
    """The current device's opt-in shared memory per block (None without a device)."""
    try:
        from cupy.cuda import runtime

        attr = runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin
        return int(runtime.deviceGetAttribute(attr, runtime.getDevice()))
    except Exception:
        return None


def dynamic_shared_bytes(kernel: loop.Kernel) -> int:
    """Bytes of dynamic shared memory `kernel` needs at launch (0 when its arrays are static)."""
    return CEmitter(kernel, cuda_dialect()).dynamic_shared_bytes()



class _Loaded:
    """A loaded module (kept alive with its function) and the cubin it came from."""

    def __init__(self, module: Any, function: Any, cubin: bytes, shared_mem: int = 0) -> None:
        self.module, self.function, self.cubin = module, function, cubin
        self.shared_mem = shared_mem  # dynamic shared bytes passed at every launch


def resource_report(source: str, arch: str) -> str:
    """The `resources` stage: registers, spills and shared memory per thread/block for `arch`."""
    usage = resource_usage(source, arch)
    return f"{arch}: " + ", ".join(f"{k}={v}" for k, v in usage.items())


#: the largest grid CUDA launches: 2**31 - 1 programs along axis 0, 65535 along axes 1 and 2
GRID_LIMITS = ((1 << 31) - 1, 65535, 65535)


def check_grid(grid: tuple[int, int, int]) -> None:
    """A clear error for a grid CUDA cannot launch (before any device call)."""
    for axis, (g, limit) in enumerate(zip(grid, GRID_LIMITS)):
        if g > limit:
            raise ValueError(f"grid[{axis}] = {g} exceeds CUDA's limit of {limit} programs on "
                             f"axis {axis}; put the large dimension on axis 0 (up to "
                             f"{GRID_LIMITS[0]}) or loop inside the kernel")


class CUDABackend(Backend):
    name = "cuda"
    memory = "device"
    asynchronous = True  # launches queue on the current stream; copies back synchronise
    source_suffix = "cu"
    short_name = "cu"
    extra = "cuda"
    packages = ("cupy",)
    array_name = "CuPy"
    dlpack_devices = (2, 13)  # kDLCUDA, kDLCUDAManaged
    caps = frozenset({"fp64", "native_fp16", "warp_shuffle", "tensor_cores", "vector_loads",
                      "bessel", "shared_16bit", "ldmatrix", "cp_async"})
    ops = C_OPS

    def device_kind(self) -> str:
        return "gpu"

    def is_available(self) -> bool:
        try:
            import cupy

            return cupy.cuda.runtime.getDeviceCount() > 0
        except Exception:
            return False

    def unavailable_reason(self) -> str:
        return "no CUDA GPU found, or CuPy is not installed (pip install 'kdsl[cuda]')"

    def target(self, num_warps: int) -> Target:
        caps = self.caps
        if _sm(self.arch()) < 80:  # mma.sync m16n8k16 (f16, bf16), m16n8k8 tf32, cp.async
            caps = caps - {"tensor_cores", "cp_async"}
        shared = (device_shared_limit() if self.is_available() else None) or shared_limit(
            self.arch())
        return Target("cuda", threads=num_warps * 32, warp_size=32, shared_bytes=shared,
                      caps=caps, ops=self.ops)

    def arch(self) -> str:
        """`sm_XY` of the current device, else DEFAULT_ARCH."""
        try:
            import cupy

            return f"sm_{cupy.cuda.Device().compute_capability}"
        except Exception:
            return DEFAULT_ARCH

    def hash(self) -> str:
        try:
            from cupy.cuda import nvrtc

            version = "nvrtc{}.{}".format(*nvrtc.getVersion())
        except Exception:
            version = "nvcc"
        return f"cuda:{version}:{self.arch() if self.is_available() else 'nodevice'}"

    def codegen(self, kernel: loop.Kernel) -> str:
        return emit(kernel, cuda_dialect())

    def add_stages(self, kernel: loop.Kernel, stages: dict[str, str]) -> None:
        # Both need a compile (NVRTC or nvcc, no GPU): done when read, so `compile()` stays fast.
        if compiler_available():
            source, arch = self.codegen(kernel), self.arch()
            stages["ptx"] = Lazy(compile_ptx, source, arch)
            stages["resources"] = Lazy(resource_report, source, arch)

    def build(self, kernel: loop.Kernel, source: str) -> Any:
        return self._load(kernel, compile_cubin(source, self.arch()))

    def _load(self, kernel: loop.Kernel, cubin: bytes) -> Any:
        import cupy

        module = cupy.cuda.function.Module()
        module.load(cubin)
        function = module.get_function(kernel_name(kernel.name))
        shared = dynamic_shared_bytes(kernel)
        if shared > STATIC_SHARED_BYTES:  # opt in to more than 48 KiB (per function)
            from cupy.cuda import driver

            driver.funcSetAttribute(function.ptr,
                                    driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    shared)
        return _Loaded(module, function, cubin, shared)

    def serialize(self, handle: Any) -> bytes | None:
        return handle.cubin

    def deserialize(self, kernel: loop.Kernel, data: bytes) -> Any:
        return self._load(kernel, data)

    # -- device half: memory, launch, clock, arrays (kdsl/runtime/device.py copies)

    def check_launch(self, kernel: loop.Kernel, grid: tuple[int, int, int]) -> None:
        check_grid(grid)

    def allocate(self, nbytes: int) -> Any:
        import cupy

        return cupy.empty(max(nbytes, 1), dtype=np.uint8)

    def copy_in(self, buf: Any, offset: int, host: np.ndarray) -> None:
        buf[offset:offset + host.size].set(host)

    def copy_out(self, host: np.ndarray, buf: Any, offset: int) -> None:
        host[...] = buf[offset:offset + host.size].get()

    def span_offset(self, arg: BoundArg) -> int:
        # A strided view's span is placed at the host address's offset modulo 256 (device
        # allocations are 256-aligned), so the first element has the alignment the kernel was
        # specialised on (its host address % 16).
        if arg.view is None:
            return 0
        return (arg.address - arg.origin * arg.host.itemsize) % 256

    def pointer(self, buf: Any, offset: int, nbytes: int) -> Any:
        return buf[offset:]

    def enqueue(self, handle: Any, kernel: loop.Kernel, grid: tuple[int, int, int],
                values: list[Any]) -> None:
        import cupy

        handle.function(grid, (kernel.threads, 1, 1), tuple(values),
                        shared_mem=handle.shared_mem, stream=cupy.cuda.get_current_stream())

    def synchronize(self) -> None:
        import cupy

        cupy.cuda.get_current_stream().synchronize()

    def timer(self) -> Timer:
        return CUDATimer()

    def devices(self) -> list[str]:
        import cupy

        rt = cupy.cuda.runtime
        return [rt.getDeviceProperties(i)["name"].decode() for i in range(rt.getDeviceCount())]

    def owns(self, array: Any) -> bool:
        try:
            import cupy
        except Exception:
            return False
        return isinstance(array, cupy.ndarray)

    def to_device(self, host: np.ndarray, like: Any = None) -> Any:
        import cupy

        return cupy.asarray(host)

    def empty(self, shape: tuple[int, ...], dtype: Any, like: Any = None) -> Any:
        import cupy

        return cupy.empty(shape, dtype)

    def zeros(self, shape: tuple[int, ...], dtype: Any, like: Any = None) -> Any:
        import cupy

        return cupy.zeros(shape, dtype)

    def to_host(self, array: Any) -> np.ndarray:
        return array.get()

    def ascontiguous(self, array: Any) -> Any:
        import cupy

        return cupy.ascontiguousarray(array)

    def from_dlpack(self, obj: Any) -> Any:
        try:
            import cupy
        except Exception as e:
            raise ImportError(f"a CUDA array needs CuPy (pip install 'kdsl[cuda]'): {e}") from e
        return cupy.from_dlpack(obj)


class CUDATimer(Timer):
    """CUDA events recorded on the current stream around each call."""

    name = "cuda events"

    def __init__(self) -> None:
        import cupy

        self.cupy = cupy

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
