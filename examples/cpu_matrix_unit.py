"""bfloat16 matmul on the CPU's matrix unit (Intel AMX): the same `@kd.jit` kernel compiled
with the unit (where the llvm backend finds one) and without it (`KDSL_LLVM_MATRIX=none`, the
float32 FMA micro-kernel), the tile instructions in its machine code, both results against a
float64 reference, and the time of each on this machine.

    python examples/cpu_matrix_unit.py
"""

import os
import platform
import time

import numpy as np
from kdsl.backends import llvm_host

import kdsl as kd
from kdsl.ir.float_bits import bf16_bits, bf16_from_bits


@kd.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr,
                  BLOCK_K: kd.constexpr):
    rm = kd.program_id(0) * BLOCK_M + kd.arange(0, BLOCK_M)
    rn = kd.program_id(1) * BLOCK_N + kd.arange(0, BLOCK_N)
    rk = kd.arange(0, BLOCK_K)
    acc = kd.zeros((BLOCK_M, BLOCK_N), dtype=kd.float32)
    for k0 in range(0, K, BLOCK_K):
        a = kd.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])   # bfloat16 tiles
        b = kd.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
        acc = kd.dot(a, b, acc)                                      # float32 accumulator
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        return platform.machine()


def main() -> None:
    n, bm, bn, bk = 1024, 256, 256, 256
    rng = np.random.default_rng(0)
    a_bits = bf16_bits(rng.standard_normal((n, n)).astype(np.float32))
    b_bits = bf16_bits(rng.standard_normal((n, n)).astype(np.float32))
    ref = bf16_from_bits(a_bits).astype(np.float64) @ bf16_from_bits(b_bits).astype(np.float64)
    a, b = kd.bfloat16_view(a_bits), kd.bfloat16_view(b_bits)
    grid = (n // bm, n // bn)
    print(f"CPU: {cpu_name()}; matrix unit: "
          f"{', '.join(sorted(llvm_host.matrix_caps())) or 'none'}")
    for setting in ("auto", "none"):
        # read when a kernel compiles (and part of the disk cache's key): a fresh jit object
        # compiles anew, where `matmul_kernel` would reuse its in-memory compile
        os.environ[llvm_host.MATRIX_ENV] = setting
        kernel = kd.jit(matmul_kernel.fn)
        c = np.empty((n, n), np.float32)
        args = (a, b, c, n, n, n)
        meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, backend="llvm")
        asm = kernel.compile(*args, **meta).ir["asm"]
        unit = {i: asm.count(i) for i in ("tdpbf16ps", "tileloadd", "vfmadd231ps")}
        kernel[grid](*args, **meta)
        times = []
        for _ in range(5):
            t = time.perf_counter()
            kernel[grid](*args, **meta)
            times.append(time.perf_counter() - t)
        t = sorted(times)[2]
        err = float(np.abs(c - ref).max() / np.abs(ref).max())
        print(f"KDSL_LLVM_MATRIX={setting:4s} {unit}  {t * 1e3:7.2f} ms  "
              f"{2 * n**3 / t / 1e9:6.0f} GFLOP/s  max error / max |ref| {err:.1e}")
    os.environ.pop(llvm_host.MATRIX_ENV)


if __name__ == "__main__":
    main()
