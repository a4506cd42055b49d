"""Library sparse matmuls: a block-sparse weight (10% of its 32x32 blocks present) and a 2:4
weight made by `sparsify_2_4`, each compared with the float64 product of the equivalent dense
matrix on every available backend.

    python examples/kernels_sparse.py
"""

import kdsl.kernels as K
import numpy as np
from kdsl.kernels import reference as R

import kdsl as kd

BLOCK = 32


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20, 256)).astype(np.float32)
    layout = rng.random((256 // BLOCK, 128 // BLOCK)) < 0.1
    layout[0, 0] = True
    blocks = rng.standard_normal((int(layout.sum()), BLOCK, BLOCK)).astype(np.float32)
    ref = R.block_sparse_matmul(x, blocks, layout, BLOCK, activation="relu")
    print(f"block-sparse: {int(layout.sum())} of {layout.size} blocks of {BLOCK}x{BLOCK}")
    for backend in kd.available_backends():
        y = K.block_sparse_matmul(x, blocks, layout, BLOCK, activation="relu", backend=backend)
        print(f"  {backend:7s} max abs error {np.abs(y - ref).max():.2e}")

    w = rng.standard_normal((256, 96)).astype(np.float32)
    values, meta = K.sparsify_2_4(w)
    dense = R.semi_structured_dense(values, meta)
    print(f"2:4: kept {np.count_nonzero(dense)} of {w.size} weights; meta[:4, 0] = "
          f"{meta[:4, 0].tolist()} (kept rows {[4 * (j // 2) + int(meta[j, 0]) for j in range(4)]}"
          f" of column 0)")
    ref = R.matmul(x, dense)
    for backend in kd.available_backends():
        y = K.semi_structured_matmul(x, values, meta, backend=backend)
        print(f"  {backend:7s} max abs error {np.abs(y - ref).max():.2e}")


if __name__ == "__main__":
    main()
