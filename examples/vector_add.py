"""Vector addition: the CONTRACT.md example, run on every available backend and checked against NumPy.

    python examples/vector_add.py
"""

import numpy as np

import kdsl as kd


@kd.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: kd.constexpr):
    pid = kd.program_id(0)
    offs = pid * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=m) + kd.load(y_ptr + offs, mask=m), mask=m)


def main() -> None:
    x = np.random.rand(10_000).astype(np.float32)
    y = np.ones_like(x)
    for backend in kd.available_backends():
        out = np.empty_like(x)
        # the grid may be a tuple or a callable of the constexprs
        add[lambda meta: (kd.cdiv(x.size, meta["BLOCK"]),)](x, y, out, x.size, BLOCK=1024,
                                                            backend=backend)
        err = np.abs(out - (x.astype(np.float64) + y)).max()
        print(f"{backend:8s} max abs error {err:.3g}")


if __name__ == "__main__":
    main()
