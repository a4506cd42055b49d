"""`CompileOptions`: everything besides the kernel's source and argument types that changes the
code a compile produces, in one frozen record (docs/architecture.md "Compile options").

The launcher (kdsl/runtime/jit.py) builds one per specialisation from the launch keywords;
the compile pipeline hands it on unchanged: `tile.Function.options` (tile passes, the
interpreter), `loop.Kernel.options` (backends).  Together with the `Target` it is part of the
disk cache key (`key()`), so two compiles that differ in any field never share an entry.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class CompileOptions:
    """The options of one compile.

    num_warps       warps per program on OpenCL/CUDA (the lowering's `Target.threads` is
                    num_warps * 32 there); the CPU ignores it.
    num_stages      software-pipelining depth (Triton's `num_stages`); on CPU targets 2 or
                    more fetches a loop's next tiles ahead (kdsl/lowering/prefetch.py), 0 and
                    1 do not; the GPU lowerings do not use it yet.
    check           checked mode: bounds and hint checks on every access (kdsl/passes/checks.py).
    debug           device assertions (`kd.device_assert`, `assert`) compiled in; off, they are
                    deleted.
    fast_math       the backends may reassociate and contract float math (LLVM `fast` flags,
                    OpenCL `-cl-fast-relaxed-math` and native_*, CUDA `--use_fast_math`).
    multiple_of_16  runtime parameters whose value (a pointer's address in bytes, or an int) is a
                    multiple of 16 at this launch, as Triton specialises; the vector analysis
                    uses it (kdsl/lowering/vector.py).
    equal_to_1      runtime integer parameters equal to 1 at this launch (Triton's `== 1`
                    specialisation): the frontend compiles each as an int32 constant 1 and
                    drops it from the runtime signature (kdsl/frontend/__init__.py), so that
                    `offs * stride` is `offs` and its loads are contiguous.
    maxnreg         registers per thread (CUDA `__maxnreg__`), or None.
    """

    num_warps: int = 4
    num_stages: int = 3
    check: bool = False
    debug: bool = False
    fast_math: bool = False
    multiple_of_16: tuple[str, ...] = ()
    equal_to_1: tuple[str, ...] = ()
    maxnreg: int | None = None

    def key(self) -> str:
        """Stable text of every field, for the disk cache key."""
        return "|".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))


__all__ = ["CompileOptions"]
