"""Fetching a loop's next tiles ahead on the CPU: the matmul's K loop with and without the
prefetch hints the llvm backend adds (`num_stages=3`, the default, against `num_stages=1`,
Triton's "no pipelining"), the hints as they appear in the Loop IR, equal results, and the
time of each on this machine.

    python examples/cpu_prefetch.py
"""

import time

import numpy as np

import kdsl as kd
from kdsl.ir import loop


@kd.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr,
                  BLOCK_K: kd.constexpr):
    rm = kd.program_id(0) * BLOCK_M + kd.arange(0, BLOCK_M)
    rn = kd.program_id(1) * BLOCK_N + kd.arange(0, BLOCK_N)
    rk = kd.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * N + rn[None, :]
    acc = kd.zeros((BLOCK_M, BLOCK_N), dtype=kd.float32)
    for _ in range(0, K, BLOCK_K):
        acc = kd.dot(kd.load(a_ptrs), kd.load(b_ptrs), acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def hints(kernel: loop.Kernel) -> list[str]:
    """The Loop IR lines of the kernel's prefetch hints."""
    return [line.strip() for line in loop.format_stmts(kernel.body) if "prefetch(" in line]


def main() -> None:
    n, tile = 1024, 128
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    grid = (n // tile, n // tile)
    out = {}
    for stages in (1, 3):
        c = np.empty((n, n), np.float32)
        run = lambda c=c, s=stages: matmul_kernel[grid](  # noqa: E731
            a, b, c, n, n, n, BLOCK_M=tile, BLOCK_N=tile, BLOCK_K=tile, backend="llvm",
            num_stages=s)
        ck = run()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        out[stages] = c
        shown = hints(ck.kernel)
        print(f"num_stages={stages}: {len(shown)} prefetch hints, median "
              f"{np.median(times) * 1e3:.1f} ms")
        for line in shown:
            print("    " + line)
    print("results equal:", bool(np.array_equal(out[1], out[3])))
    print("max abs error vs float64:",
          float(np.abs(out[3] - a.astype(np.float64) @ b.astype(np.float64)).max()))


if __name__ == "__main__":
    main()
