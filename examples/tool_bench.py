"""`kdsl bench` on a kernel of your own: a vector add swept over sizes.

    kdsl bench examples/tool_bench.py:add --sizes 4096,65536,1048576 --plot add.png
    python examples/tool_bench.py            # the same through kd.testing.do_bench
"""

import numpy as np

import kdsl as kd


@kd.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: kd.constexpr):
    pid = kd.program_id(0)
    offs = pid * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=m) + kd.load(y_ptr + offs, mask=m), mask=m)


def add_example_args(n=1 << 20):
    x = np.random.rand(n).astype(np.float32)
    return (x, np.ones_like(x), np.empty_like(x), n), {"BLOCK": 1024}, (kd.cdiv(n, 1024),)


def add_cost(x, y, out, n):
    """(flops, bytes): one add per element; two loads and a store."""
    return float(n), 3.0 * x.nbytes


if __name__ == "__main__":
    args, kwargs, grid = add_example_args()
    for backend in kd.available_backends():
        if backend == "interp":
            continue
        t = kd.testing.do_bench(lambda: add[grid](*args, backend=backend, **kwargs),
                                backend=backend)
        gbs = add_cost(*args)[1] / t.median / 1e6
        print(f"{backend:<7} {t.median:.3f} ms (min {t.min:.3f}, max {t.max:.3f}, {t.clock}), "
              f"{gbs:.1f} GB/s, launch overhead {t.launch_overhead:.4f} ms")
