"""The CUDA target run by the Loop IR simulator: a test backend (registered by the tests that
use it) whose kernels are lowered exactly as for CUDA (32-thread warps, tensor cores, 16-bit
shared arrays, sm_80 shared memory) and executed by `kdsl.ir.loop_interp` with its shared-memory
race detector on, so the library's GPU code paths are checked without a GPU."""

from __future__ import annotations

from fake_device import FakeDeviceBackend
from kdsl.backends.cuda import CUDABackend

from kdsl.target import Target

NAME = "cudasim"


class CudaSimBackend(FakeDeviceBackend):
    name = NAME
    short_name = "csim"
    array_name = "CudaSim"
    caps = CUDABackend.caps

    def target(self, num_warps: int) -> Target:
        return CUDABackend().target(num_warps)

    def hash(self) -> str:
        return "cudasim-1"

    def devices(self) -> list[str]:
        return ["the Loop IR simulator (the CUDA target: 32-thread warps, tensor cores)"]

    def device_kind(self) -> str:
        return "gpu"
