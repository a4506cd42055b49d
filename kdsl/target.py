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
                  (kdsl/lowering/caps.py).
    """

    backend: str
    threads: int = 1
    warp_size: int = 1
    shared_bytes: int = 1 << 30
    caps: frozenset[str] = field(default_factory=frozenset)
    missing: frozenset[str] = field(default_factory=frozenset)

    def has(self, cap: str) -> bool:
        return cap in self.caps
