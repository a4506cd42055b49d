"""OpenCL on a CPU device against the llvm backend: every library kernel, medians of rounds
interleaved in one process.

    python benchmarks/opencl_cpu.py [--rounds 7] [--only softmax]
    KDSL_OPENCL_LOWERING=work-group python benchmarks/opencl_cpu.py   # the GPU-style lowering

Columns: llvm (NumPy arrays) and OpenCL with the lowering its device gets (on a CPU device the
one-thread lowering, backends/opencl.py; the header names it) on PyOpenCL arrays, so that no
host copy is timed; the ratio is OpenCL time / llvm time (the target of the issue "CPU
performance": <= 1.5).  (The two lowerings run in separate processes: a device array belongs
to one backend.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import kdsl.kernels as K
from common import load_line, machine_header
from kdsl.backends import get_backend

import kdsl as kd


def rows(rng):
    """[(name, library function, positional args, keyword args)] at the shapes of
    benchmarks/kernels.py."""
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    x, w, b = f(1024, 4096), f(4096), f(4096)
    q, k, v = f(1, 8, 512, 64), f(1, 8, 512, 64), f(1, 8, 512, 64)
    kc, vc = f(512, 16, 8, 128), f(512, 16, 8, 128)
    table = rng.permutation(512).astype(np.int32).reshape(16, 32)
    wq = rng.integers(-128, 128, (4096, 4096)).astype(np.int8)
    sq = (rng.random((32, 4096)) * 0.01).astype(np.float32)
    return [
        ("softmax 1024x4096", K.softmax, (x,), {}),
        ("softmax online 32x32768", K.softmax, (f(32, 32768),), {}),
        ("layer_norm 1024x4096", K.layer_norm, (x, w, b), {}),
        ("rms_norm 1024x4096", K.rms_norm, (x, w), {}),
        ("matmul 512^3 +relu", K.matmul, (f(512, 512), f(512, 512)), {"activation": "relu"}),
        ("mlp 128x512x1024", K.mlp, (f(128, 512), f(512, 1024) / 20, f(512, 1024) / 20,
                                     f(1024, 512) / 30), {}),
        ("attention 8x512x64", K.attention, (q, k, v), {}),
        ("attention causal", K.attention, (q, k, v), {"causal": True}),
        ("decode 16x32h x500 tok", K.decode_attention,
         (f(16, 32, 128), kc, vc, table, np.full(16, 500, np.int32)), {}),
        ("quant int8 16x4096x4096", K.quant_matmul, (f(16, 4096), wq, sq, 128, 8), {}),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    if "opencl" not in kd.available_backends():
        print("no OpenCL device: nothing to compare")
        return
    import pyopencl.array as cla

    rt = get_backend("opencl").runtime()
    print(machine_header())
    print(f"OpenCL device: {rt.device.name} ({rt.device.platform.version}); lowering "
          f"{get_backend('opencl').lowering()}")
    variants = ["llvm", "opencl"]
    head = f"{'kernel':26s} {'llvm ms':>9s} {'opencl ms':>10s} {'ratio':>6s}"
    print(head)
    print("-" * len(head))
    for name, fn, pos, kw in rows(np.random.default_rng(0)):
        if args.only and args.only not in name:
            continue
        dev = tuple(cla.to_device(rt.queue, a) if isinstance(a, np.ndarray) else a for a in pos)

        def call(be, fn=fn, pos=pos, dev=dev, kw=kw):
            fn(*(pos if be == "llvm" else dev), backend=be, **kw)
            if be != "llvm":
                rt.queue.finish()
        times: dict[str, list[float]] = {be: [] for be in variants}
        for be in variants:  # compile and warm up
            call(be)
            call(be)
        for _ in range(args.rounds):
            for be in variants:
                t0 = time.perf_counter()
                call(be)
                times[be].append((time.perf_counter() - t0) * 1e3)
        med = {be: statistics.median(ts) for be, ts in times.items()}
        row = f"{name:26s} {med['llvm']:9.2f} {med['opencl']:10.2f} " \
              f"{med['opencl'] / med['llvm']:6.2f}"
        print(row, flush=True)
    print(load_line(), "(at the end)")


if __name__ == "__main__":
    main()
