"""Hand-written OpenCL softmax peers for the kdsl-generated softmax on the same OpenCL device.

Two hand-written kernels (the best one is the peer), built with `-cl-fast-relaxed-math` as a
hand-tuner would: `row_per_item` (one work-item per row, three passes over the row, which
PoCL's CPU device vectorises across work-items) and `row_per_group` (one work-group of LOCAL
work-items per row, reductions in `__local` memory).  All arrays are device buffers
(`pyopencl.array`), so only the kernels are timed, ours included.

    python benchmarks/opencl_peer.py [--rows 4096 --cols 4096]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import load_line, machine_header, median_ms

LOCAL = 128

SOURCE = r"""
__kernel void row_per_item(__global const float *x, __global float *y, int rows, int n) {
    int r = get_global_id(0);
    if (r >= rows) return;
    __global const float *p = x + (long)r * n;
    __global float *q = y + (long)r * n;
    float m = -INFINITY;
    for (int i = 0; i < n; ++i) m = fmax(m, p[i]);
    float s = 0.0f;
    for (int i = 0; i < n; ++i) { float e = exp(p[i] - m); q[i] = e; s += e; }
    float inv = 1.0f / s;
    for (int i = 0; i < n; ++i) q[i] *= inv;
}

__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void row_per_group(__global const float *x, __global float *y, int n) {
    __local float red[LOCAL];
    int r = get_group_id(0), t = get_local_id(0);
    __global const float *p = x + (long)r * n;
    __global float *q = y + (long)r * n;
    float m = -INFINITY;
    for (int i = t; i < n; i += LOCAL) m = fmax(m, p[i]);
    red[t] = m;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = LOCAL / 2; h > 0; h >>= 1) {
        if (t < h) red[t] = fmax(red[t], red[t + h]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    m = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    float s = 0.0f;
    for (int i = t; i < n; i += LOCAL) s += exp(p[i] - m);
    red[t] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = LOCAL / 2; h > 0; h >>= 1) {
        if (t < h) red[t] += red[t + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float inv = 1.0f / red[0];
    for (int i = t; i < n; i += LOCAL) q[i] = exp(p[i] - m) * inv;
}
"""


# Build options of each peer variant: fast math (what a hand-tuner would pick) and kdsl's own
# default options (precise exp, correctly rounded division), for a like-for-like comparison.
VARIANTS = {"fast": "-cl-fast-relaxed-math", "precise": "-cl-fp32-correctly-rounded-divide-sqrt"}


def _peers(queue, x_dev, y_dev, rows: int, n: int) -> dict[str, Callable[[], Any]]:
    import pyopencl as cl

    def run(k, gsize, lsize):
        def go():
            cl.enqueue_nd_range_kernel(queue, k, gsize, lsize)
            queue.finish()
        return go

    peers = {}
    per_item = -(-rows // 64) * 64
    for variant, options in VARIANTS.items():
        prg = cl.Program(queue.context, SOURCE).build(options=f"{options} -DLOCAL={LOCAL}")
        item, group = prg.row_per_item, prg.row_per_group
        item.set_args(x_dev.data, y_dev.data, np.int32(rows), np.int32(n))
        group.set_args(x_dev.data, y_dev.data, np.int32(n))
        peers[f"row_per_item/{variant}"] = run(item, (per_item,), (64,))
        peers[f"row_per_group/{variant}"] = run(group, (rows * LOCAL,), (LOCAL,))
    return peers


def softmax_peer_ms(x: np.ndarray, repeat: int, kdsl_kernel, num_warps: int = 1,
                    fast_math: bool = False) -> tuple[float, dict[str, float]]:
    """(kdsl ms, {peer name: ms}) on the kdsl OpenCL backend's device and queue; `fast_math`
    launches kdsl's kernel with the fast-math opt-in (the peers' "fast" variant's options)."""
    import pyopencl.array as cla
    from kdsl.backends import get_backend

    rt = get_backend("opencl").runtime()
    rows, n = x.shape
    ref = np.exp(x - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    x_dev = cla.to_device(rt.queue, x)
    y_dev = cla.empty_like(x_dev)
    block = 1 << (n - 1).bit_length()

    def ours():
        kdsl_kernel[(rows,)](y_dev, x_dev, n, BLOCK=block, backend="opencl",
                             num_warps=num_warps, fast_math=fast_math)
        rt.queue.finish()

    ours()
    np.testing.assert_allclose(y_dev.get(), ref, rtol=1e-4, atol=1e-6)
    ours_ms = median_ms(ours, repeat)
    times = {}
    for name, run in _peers(rt.queue, x_dev, y_dev, rows, n).items():
        run()
        np.testing.assert_allclose(y_dev.get(), ref, rtol=1e-3, atol=1e-6)
        times[name] = median_ms(run, repeat)
    return ours_ms, times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=10)
    o = ap.parse_args()
    from run import softmax_kernel

    x = np.random.default_rng(0).standard_normal((o.rows, o.cols), dtype=np.float32)
    print(machine_header())
    for fast in (False, True):
        ours, peers = softmax_peer_ms(x, o.repeat, softmax_kernel, fast_math=fast)
        mode = "fast_math=True" if fast else "IEEE"
        print(f"softmax {o.rows}x{o.cols} on OpenCL: kdsl ({mode}, num_warps=1) {ours:.2f} ms")
        for name, ms in peers.items():
            print(f"  hand-written {name:22s} {ms:8.2f} ms  kdsl/peer {ours / ms:5.2f}")
    print(load_line(), "(at the end)")


if __name__ == "__main__":
    main()
