"""`kd.reduce` with a user combine function: row products and a max-by-magnitude, checked against
NumPy on every available backend.

    python examples/custom_reduce.py
"""

import numpy as np

import kdsl as kd


@kd.jit
def mul(a, b):
    return a * b


@kd.jit
def max_abs(a, b):
    return kd.maximum(kd.abs(a), kd.abs(b))


@kd.jit
def row_stats(x_ptr, prod_ptr, amax_ptr, n_cols, BLOCK: kd.constexpr):
    row = kd.program_id(0)
    cols = kd.arange(0, BLOCK)
    mask = cols < n_cols
    # masked lanes hold each combine's identity: 1 for the product, 0 for max-abs
    x1 = kd.load(x_ptr + row * n_cols + cols, mask=mask, other=1.0)
    x0 = kd.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    kd.store(prod_ptr + row, kd.reduce(x1, 0, mul))
    kd.store(amax_ptr + row, kd.reduce(x0, 0, max_abs))


def main() -> None:
    x = np.random.default_rng(0).uniform(0.5, 1.5, (8, 50)).astype(np.float32)
    x[3, 7] = -4.0
    for backend in kd.available_backends():
        prod, amax = np.empty(8, np.float32), np.empty(8, np.float32)
        row_stats[(8,)](x, prod, amax, 50, BLOCK=64, backend=backend)
        rel = np.abs(prod / np.prod(x.astype(np.float64), axis=1) - 1).max()
        print(f"{backend:8s} product rel. error {rel:.2g}, "
              f"max-abs exact: {np.array_equal(amax, np.abs(x).max(axis=1))}")


if __name__ == "__main__":
    main()
