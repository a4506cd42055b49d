"""Library matmul with a fused bias + gelu epilogue, and the SwiGLU mlp, on every available
backend against the float64 references.

    python examples/kernels_matmul.py
"""

import kdsl.kernels as K
import numpy as np
from kdsl.kernels import reference as R

import kdsl as kd


def main() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((200, 300)).astype(np.float16)
    b = rng.standard_normal((300, 150)).astype(np.float16)
    bias = rng.standard_normal(150).astype(np.float32)
    x = rng.standard_normal((24, 256)).astype(np.float32)
    wg, wu = (rng.standard_normal((256, 512)).astype(np.float32) / 16 for _ in range(2))
    wd = rng.standard_normal((512, 256)).astype(np.float32) / 22
    for backend in kd.available_backends():
        c = K.matmul(a, b, bias, activation="gelu", backend=backend)
        y = K.mlp(x, wg, wu, wd, backend=backend)
        print(f"{backend:7s} matmul fp16 +bias+gelu: {c.dtype}, max abs error "
              f"{np.abs(c - R.matmul(a, b, bias, 'gelu')).max():.2e};  mlp fp32: max abs "
              f"error {np.abs(y - R.mlp(x, wg, wu, wd)).max():.2e}")


if __name__ == "__main__":
    main()
