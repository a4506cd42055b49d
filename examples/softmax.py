"""Fused row softmax: one program per row, the row held in one tile; prints the error of every
available backend against a float64 NumPy reference.

    python examples/softmax.py
"""

import numpy as np

import kdsl as kd


@kd.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, BLOCK: kd.constexpr):
    row = kd.program_id(0)
    cols = kd.arange(0, BLOCK)
    mask = cols < n_cols
    x = kd.load(in_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    num = kd.exp(x - kd.max(x, axis=0))
    kd.store(out_ptr + row * n_cols + cols, num / kd.sum(num, axis=0), mask=mask)


def softmax(x: np.ndarray, backend: str) -> np.ndarray:
    out = np.empty_like(x)
    block = 1 << (x.shape[1] - 1).bit_length()
    softmax_kernel[(x.shape[0],)](out, x, x.shape[1], BLOCK=block, backend=backend)
    return out


def main() -> None:
    x = np.random.default_rng(0).standard_normal((64, 781)).astype(np.float32)
    ref = np.exp(x - x.max(1, keepdims=True).astype(np.float64))
    ref /= ref.sum(1, keepdims=True)
    for backend in kd.available_backends():
        print(f"{backend:8s} max abs error {np.abs(softmax(x, backend) - ref).max():.3g}")
    print(softmax_kernel.compile(np.empty_like(x), x, 781, BLOCK=1024, backend="opencl").source
          if "opencl" in kd.available_backends() else "")


if __name__ == "__main__":
    main()
