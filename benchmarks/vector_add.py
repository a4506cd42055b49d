"""Vector add on 16M float32 elements: kdsl's backends against `np.add(x, y, out=out)` and a
STREAM-like copy (`np.copyto`), medians in one process, reported as GB/s and ratios.

    python benchmarks/vector_add.py [--n 16777216] [--backends llvm,opencl]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import load_line, machine_header, median_ms  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from vector_add import add  # noqa: E402  (the kernel the example shows)

import kdsl as kd  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=1 << 24)
    ap.add_argument("--backends", default=",".join(b for b in kd.available_backends()
                                                   if b != "interp"))
    opts = ap.parse_args()
    n = opts.n
    x = np.random.rand(n).astype(np.float32)
    y = np.random.rand(n).astype(np.float32)
    out = np.empty_like(x)
    nbytes = 3 * 4 * n
    copy_ms = median_ms(lambda: np.copyto(out, x))
    numpy_ms = median_ms(lambda: np.add(x, y, out=out))
    print(machine_header())
    print(f"vector add, n={n} float32")
    print(f"  {'stream copy':14s} {copy_ms:8.3f} ms  {2 * 4 * n / copy_ms / 1e6:7.1f} GB/s")
    print(f"  {'numpy np.add':14s} {numpy_ms:8.3f} ms  {nbytes / numpy_ms / 1e6:7.1f} GB/s")
    for backend in opts.backends.split(","):
        block = 4096 if backend == "llvm" else 1024
        grid = (kd.cdiv(n, block),)
        run = lambda: add[grid](x, y, out, n, BLOCK=block, backend=backend)  # noqa: E731
        run()
        assert np.array_equal(out, x + y), backend
        ms = median_ms(run)
        print(f"  {'kdsl ' + backend:14s} {ms:8.3f} ms  {nbytes / ms / 1e6:7.1f} GB/s"
              f"  {numpy_ms / ms:5.2f}x numpy")
    print(load_line(), "(at the end)")


if __name__ == "__main__":
    main()
