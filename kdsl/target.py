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
                  "warp_shuffle", "vector_loads", "reduce_partials", "reduce_partials_minmax",
                  "cpu_microkernel", "bessel" (docs/ir.md "Targets").
    missing       capabilities the device is known to lack ("fp64" on an OpenCL device without
                  cl_khr_fp64): a kernel needing one is a CompilationError
                  (kdsl/lowering/caps.py).
    ops           the Loop IR unary and binary ops the backend emits: "tanh" for every type,
                  "tanh:float64" for one; None: all of them.  `legalize` decomposes the others
                  (kdsl/lowering/legalize.py) and the verifier checks that none is left.
    vector_bits   SIMD width one thread's code is tuned for (the llvm backend: its host profile,
                  backends/llvm_host.py); 0 = not chosen (width-agnostic defaults).
    vector_regs   vector registers of that SIMD unit (sizes the CPU dot's register blocks);
                  0 = unknown.

    The properties below name what the thread count means for the lowering; the lowering
    branches on them, never on `threads` itself (arithmetic with it aside).
    """

    backend: str
    threads: int = 1
    warp_size: int = 1
    shared_bytes: int = 1 << 30
    caps: frozenset[str] = field(default_factory=frozenset)
    missing: frozenset[str] = field(default_factory=frozenset)
    ops: frozenset[str] | None = None
    vector_bits: int = 0
    vector_regs: int = 0

    def has(self, cap: str) -> bool:
        return cap in self.caps

    @property
    def one_thread_per_program(self) -> bool:
        """A program instance is one thread (the CPU): it has no thread index, and a side
        effect that happens once per program needs no guard."""
        return self.threads == 1

    @property
    def registers_addressable(self) -> bool:
        """One thread holds every element of a tile, so a tile's register array can be read at
        any flat index: gathers, reductions and dots read it in place, with no copy to shared
        memory, and a load may be re-executed where it is read."""
        return self.threads == 1

    @property
    def needs_barriers(self) -> bool:
        """Several threads share a program instance: data one thread writes for another goes
        through shared memory between barriers."""
        return self.threads > 1

    @property
    def tile_loops(self) -> bool:
        """Tile dimensions become nested loops, the last innermost (one thread walks a whole
        tile, so that accesses along the last dim are contiguous for a vectoriser)."""
        return self.threads == 1

    def key(self) -> str:
        """Stable text of every field (sets sorted), for the disk cache key."""
        return (f"{self.backend}|threads={self.threads}|warp={self.warp_size}|"
                f"shared={self.shared_bytes}|caps={','.join(sorted(self.caps))}|"
                f"missing={','.join(sorted(self.missing))}|"
                f"ops={'all' if self.ops is None else ','.join(sorted(self.ops))}|"
                f"simd={self.vector_bits}x{self.vector_regs}")
