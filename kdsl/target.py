"""`Target`: what the shared lowering needs to know about a backend and a launch configuration."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Target:
    """Description of where a program instance runs.

    threads       threads per program instance (1 on the CPU; num_warps * warp_size on GPUs and
                  OpenCL devices); tile elements are spread over them.
    warp_size     threads that run in lock-step (1 on the CPU).
    shared_bytes  local/shared memory available to one program instance.
    caps          capabilities a pass may use, e.g. "fp64", "native_fp16", "tensor_cores",
                  "warp_shuffle", "vector_loads".
    missing       capabilities the device is known to lack ("fp64" on an OpenCL device without
                  cl_khr_fp64): a kernel needing one is a CompilationError
                  (kdsl/passes/lower_caps.py).
    vector_bits   SIMD width one thread's code is tuned for (the llvm backend: its host profile,
                  backends/llvm_host.py); 0 = not chosen (width-agnostic defaults).
    vector_regs   vector registers of that SIMD unit (sizes the CPU dot's register blocks);
                  0 = unknown.
    """

    backend: str
    threads: int = 1
    warp_size: int = 1
    shared_bytes: int = 1 << 30
    caps: frozenset[str] = field(default_factory=frozenset)
    missing: frozenset[str] = field(default_factory=frozenset)
    vector_bits: int = 0
    vector_regs: int = 0

    def has(self, cap: str) -> bool:
        return cap in self.caps
