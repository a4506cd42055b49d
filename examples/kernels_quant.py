"""Library quant_matmul: float activations times int8 or packed int4 weights with one scale per
group of 64 rows, dequantised inside the kernel; quantises a float weight matrix, then compares
with the float64 product of the dequantised weights and with the original weights.

    python examples/kernels_quant.py
"""

import kdsl.kernels as K
import numpy as np
from kdsl.kernels import reference as R

import kdsl as kd

GROUP = 64


def quantize(w: np.ndarray, bits: int):
    """Symmetric per-group quantisation; int4 packs rows 2j (low nibble) and 2j+1 (high)."""
    K_, N = w.shape
    qmax = 127 if bits == 8 else 7
    groups = w.reshape(K_ // GROUP, GROUP, N)
    scales = (np.abs(groups).max(axis=1) / qmax).astype(np.float32)
    q = np.clip(np.rint(groups / scales[:, None, :]), -qmax - 1, qmax).reshape(K_, N)
    if bits == 8:
        return q.astype(np.int8), scales
    u = (q + 8).astype(np.uint8)  # offset binary: nibble = q + 8
    return (u[0::2] | (u[1::2] << 4)).astype(np.uint8), scales


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 512)).astype(np.float32)
    w = rng.standard_normal((512, 256)).astype(np.float32) / 20
    for bits in (8, 4):
        w_q, scales = quantize(w, bits)
        ref = R.quant_matmul(x, w_q, scales, GROUP, bits)
        print(f"int{bits}: {w_q.nbytes} weight bytes (float32: {w.nbytes}); quantisation error "
              f"vs float weights {np.abs(ref - x.astype(np.float64) @ w).max():.2e}")
        for backend in kd.available_backends():
            y = K.quant_matmul(x, w_q, scales, GROUP, bits, backend=backend)
            print(f"  {backend:7s} max abs error vs dequantised reference "
                  f"{np.abs(y - ref).max():.2e}")


if __name__ == "__main__":
    main()
