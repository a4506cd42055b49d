"""`kd.testing.compare`: a kernel with an off-by-one mask, caught on every backend and traced to
the program that masked the element off; a repro bundle is written under ./kdsl-repro.

    python examples/tool_compare.py
    kdsl compare examples/tool_compare.py:scale       # the same from the command line (exit 1)
    kdsl dump examples/tool_compare.py:scale --backend cuda --stage cuda
"""

import numpy as np

import kdsl as kd


@kd.jit
def scale(x_ptr, out_ptr, n, BLOCK: kd.constexpr):
    pid = kd.program_id(0)
    offs = pid * BLOCK + kd.arange(0, BLOCK)
    m = offs < n - 1  # the bug: should be offs < n
    kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=m) * 2.0, mask=m)


def scale_example_args():
    x = np.arange(1000, dtype=np.float32)
    return (x, np.zeros_like(x), x.size), {"BLOCK": 128}, (kd.cdiv(x.size, 128),)


def scale_reference(x, out, n):
    return x.astype(np.float64) * 2


if __name__ == "__main__":
    args, kwargs, grid = scale_example_args()
    report = kd.testing.compare(scale, args, reference=scale_reference, grid=grid, **kwargs)
    print(report)
