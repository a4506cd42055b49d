"""OpenCL on a CPU device (PoCL): the backend picks the one-thread lowering from the device type,
prints the dot micro-kernel with OpenCL vector types, and computes what the llvm backend
computes, bit for bit.  `KDSL_OPENCL_LOWERING=work-group` runs the GPU-style lowering instead.

    python examples/opencl_cpu.py
"""

import time

import numpy as np

import kdsl as kd
from kdsl.backends import get_backend


@kd.jit
def matmul_tile(a_ptr, b_ptr, c_ptr, K, BM: kd.constexpr, BN: kd.constexpr, BK: kd.constexpr):
    pm, pn = kd.program_id(0), kd.program_id(1)
    rm = pm * BM + kd.arange(0, BM)
    rn = pn * BN + kd.arange(0, BN)
    rk = kd.arange(0, BK)
    n = kd.num_programs(1) * BN
    acc = kd.zeros((BM, BN), kd.float32)
    for k in range(0, K, BK):
        a = kd.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = kd.load(b_ptr + (k + rk)[:, None] * n + rn[None, :])
        acc = kd.dot(a, b, acc)
    kd.store(c_ptr + rm[:, None] * n + rn[None, :], acc)


def main() -> None:
    if "opencl" not in kd.available_backends():
        print("no OpenCL device (pip install pyopencl; apt-get install pocl-opencl-icd)")
        return
    be = get_backend("opencl")
    print(f"OpenCL device: {be.devices()[0]}")
    t = be.target(4)
    print(f"lowering: {be.lowering()} (threads per program {t.threads}, "
          f"vector width {t.vector_bits} bits)")
    M = N = K = 256
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    grid = (M // 64, N // 64)
    out, ms = {}, {}
    for name in ("llvm", "opencl"):
        c = np.zeros((M, N), np.float32)
        run = lambda c=c, name=name: matmul_tile[grid](a, b, c, K, BM=64, BN=64, BK=32,
                                                       backend=name)
        run()
        t0 = time.perf_counter()
        for _ in range(10):
            run()
        ms[name] = (time.perf_counter() - t0) * 100
        out[name] = c
    src = matmul_tile.compile(a, b, out["opencl"], K, BM=64, BN=64, BK=32,
                              backend="opencl").source
    fma = [ln.strip() for ln in src.splitlines() if "fma(((float" in ln]
    print("the micro-kernel's FMA line:", fma[0][:110] + " ..." if fma else "(no vector loop)")
    print(f"llvm {ms['llvm']:.2f} ms, opencl {ms['opencl']:.2f} ms per call (incl. copies)")
    print("bit-identical to llvm:", bool(np.array_equal(out["llvm"], out["opencl"])))
    err = np.abs(out["opencl"] - a.astype(np.float64) @ b).max()
    print(f"max error against float64: {err:.2e}")


if __name__ == "__main__":
    main()
