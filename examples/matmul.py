"""Tiled matrix multiplication with grouped program ordering (better L2 reuse) and a K loop
carrying the accumulator tile; compared with NumPy on every available backend.

    python examples/matmul.py
"""

import numpy as np

import kdsl as kd


@kd.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr,
                  BLOCK_K: kd.constexpr, GROUP_M: kd.constexpr):
    pid = kd.program_id(0)
    num_pid_m = kd.cdiv(M, BLOCK_M)
    num_pid_n = kd.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    size_m = kd.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rm = pid_m * BLOCK_M + kd.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + kd.arange(0, BLOCK_N)
    rk = kd.arange(0, BLOCK_K)
    acc = kd.zeros((BLOCK_M, BLOCK_N), dtype=kd.float32)
    for k0 in range(0, K, BLOCK_K):
        a = kd.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = kd.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :],
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = kd.dot(a, b, acc)
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a: np.ndarray, b: np.ndarray, backend: str) -> np.ndarray:
    (M, K), (_, N) = a.shape, b.shape
    c = np.empty((M, N), np.float32)
    grid = lambda meta: (kd.cdiv(M, meta["BLOCK_M"]) * kd.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    matmul_kernel[grid](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, GROUP_M=8,
                        backend=backend)
    return c


def main() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 200)).astype(np.float16)
    b = rng.standard_normal((200, 170)).astype(np.float16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    for backend in kd.available_backends():
        err = np.abs(matmul(a, b, backend) - ref).max()
        print(f"{backend:8s} fp16 inputs, fp32 accumulation: max abs error {err:.3g}")


if __name__ == "__main__":
    main()
