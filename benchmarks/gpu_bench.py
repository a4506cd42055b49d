"""GPU timings of kdsl's CUDA backend against CuPy (cuBLAS for matmul) and torch, from CUDA
events, medians of repeated runs in one process; prints times, GB/s or TFLOP/s and ratios.

    python benchmarks/gpu_bench.py
"""

from __future__ import annotations

import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import kdsl as kd  # noqa: E402


def cuda_ms(fn, repeat: int = 30, warmup: int = 5) -> float:
    import cupy as cp
    for _ in range(warmup):
        fn()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(repeat):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


def main() -> None:
    import cupy as cp
    try:
        import torch
    except ImportError:
        torch = None
    from matmul import matmul_kernel
    from softmax import softmax_kernel
    from vector_add import add

    n = 1 << 26
    x = cp.random.rand(n, dtype=cp.float32)
    y = cp.random.rand(n, dtype=cp.float32)
    out = cp.empty_like(x)
    t_kd = cuda_ms(lambda: add[(kd.cdiv(n, 4096),)](x, y, out, n, BLOCK=4096))
    assert cp.allclose(out, x + y)
    t_cp = cuda_ms(lambda: cp.add(x, y, out=out))
    gb = 12 * n / 1e9
    print(f"vector add n={n}: kdsl {t_kd:.3f} ms ({gb / t_kd * 1e3:.0f} GB/s), "
          f"cupy {t_cp:.3f} ms ({gb / t_cp * 1e3:.0f} GB/s), ratio {t_cp / t_kd:.2f}")

    rows, cols = 4096, 4096
    a = cp.random.standard_normal((rows, cols), dtype=cp.float32)
    o = cp.empty_like(a)
    t_kd = cuda_ms(lambda: softmax_kernel[(rows,)](o, a, cols, BLOCK=cols, num_warps=8))
    ref = cp.exp(a - a.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    assert cp.allclose(o, ref, atol=1e-6)
    line = f"softmax {rows}x{cols}: kdsl {t_kd:.3f} ms ({8 * rows * cols / t_kd / 1e6:.0f} GB/s)"
    if torch is not None:
        ta = torch.as_tensor(a, device="cuda")
        t_t = cuda_ms(lambda: torch.softmax(ta, dim=1))
        line += f", torch {t_t:.3f} ms, ratio {t_t / t_kd:.2f}"
    print(line)

    # (dtype, BLOCK_M = BLOCK_N, num_warps): 128x128 float32 tiles take the generic dot; a
    # 64x64x32 float16 tile fits the tensor-core path's shared memory (lower_dot_mma.py).
    for dt, block, warps in ((cp.float32, 128, 8), (cp.float16, 128, 8), (cp.float16, 64, 4)):
        M = N = K = 4096
        A = cp.random.standard_normal((M, K), dtype=cp.float32).astype(dt)
        B = cp.random.standard_normal((K, N), dtype=cp.float32).astype(dt)
        C = cp.empty((M, N), cp.float32)
        grid = (kd.cdiv(M, block) * kd.cdiv(N, block),)
        consts = {"BLOCK_M": block, "BLOCK_N": block, "BLOCK_K": 32, "GROUP_M": 8,
                  "num_warps": warps}

        def run(grid=grid, A=A, B=B, C=C, consts=consts, M=M, N=N, K=K):
            matmul_kernel[grid](A, B, C, M, N, K, **consts)
        try:
            src = matmul_kernel.compile(A, B, C, M, N, K, backend="cuda", **consts).source
            path = "mma" if "kd_mma" in src else "generic"
        except Exception as exc:  # the timing below still says whether it runs
            path = f"? ({type(exc).__name__})"
        t_kd = cuda_ms(run, repeat=10)
        err = float(cp.abs(C - A.astype(cp.float32) @ B.astype(cp.float32)).max())
        t_cb = cuda_ms(lambda A=A, B=B: A @ B, repeat=10)
        tf = 2 * M * N * K / 1e12
        print(f"matmul {M}^3 {np.dtype(dt).name} {block}x{block}x32 w{warps} [{path}]: "
              f"kdsl {t_kd:.2f} ms ({tf / t_kd * 1e3:.1f} TFLOP/s, max err {err:.2g}), "
              f"cuBLAS {t_cb:.2f} ms ({tf / t_cb * 1e3:.1f} TFLOP/s), ratio {t_cb / t_kd:.2f}",
              flush=True)


if __name__ == "__main__":
    main()
