"""Sparse library kernels against dense products on the CPU: block-sparse matmul at several
densities and the 2:4 matmul, each against the library's dense `matmul` of the same shape
and against dense peers (NumPy through OpenBLAS, torch CPU when importable).

The candidates of a shape run interleaved, one call of each per round, and the median of the
rounds is reported (the machine may be shared: interleaving spreads its noise evenly).  The
CPU model and the load average are printed before and after.

    python benchmarks/sparse.py [--size 2048] [--block 64] [--densities 5,10,25,50]
                                [--dtype float32] [--backend llvm] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from collections.abc import Callable

import kdsl.kernels as K
import numpy as np
from kdsl.kernels import reference as R

sys.path.insert(0, os.path.dirname(__file__))
from common import round_times


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def interleaved(cands: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median milliseconds of each candidate, one call of each per round in a fixed order
    (after one warm-up call of each, which also compiles and autotunes)."""
    times = round_times(cands, rounds, rotate=False)
    return {k: statistics.median(v) for k, v in times.items()}


def peers(a64: np.ndarray, b64: np.ndarray) -> dict[str, Callable[[], object]]:
    """Dense float32 peers of a @ b."""
    a, b = a64.astype(np.float32), b64.astype(np.float32)
    out: dict[str, Callable[[], object]] = {"numpy (OpenBLAS) dense": lambda: a @ b}
    try:
        import torch
    except ImportError:
        return out
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    out[f"torch {torch.__version__} CPU dense"] = lambda: ta @ tb
    return out


def table(title: str, res: dict[str, float], base: str, flops: dict[str, float]) -> None:
    print(f"\n{title}")
    print("| candidate | ms | speed-up vs library dense | GFLOP/s (work done) |")
    print("| --- | ---: | ---: | ---: |")
    for name, ms in res.items():
        gf = flops.get(name, flops["dense"]) / ms / 1e6
        print(f"| {name} | {ms:.1f} | {res[base] / ms:.2f}x | {gf:.1f} |")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=2048)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--densities", default="5,10,25,50")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--backend", default="llvm")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--only", choices=("block", "24"), default=None)
    args = p.parse_args(argv)
    n, blk, dt, be = args.size, args.block, args.dtype, args.backend
    print(f"CPU: {cpu_model()} ({os.cpu_count()} logical CPUs), Python {platform.python_version()}"
          f", NumPy {np.__version__}")
    print(f"load average before: {load()}")
    rng = np.random.default_rng(0)
    a64 = rng.standard_normal((n, n))
    a = R.cast(a64, dt)
    dense_flops = 2.0 * n ** 3
    if args.only in (None, "block"):
        nb = n // blk
        for pct in (int(d) for d in args.densities.split(",")):
            layout = rng.random((nb, nb)) < pct / 100
            nnz = int(layout.sum())
            blocks64 = rng.standard_normal((nnz, blk, blk))
            b64 = R.block_sparse_dense(blocks64, layout, blk)
            b, blocks = R.cast(b64, dt), R.cast(blocks64, dt)
            cands = {"dense": lambda b=b: K.matmul(a, b, backend=be),
                     "block-sparse": lambda bl=blocks, lay=layout: K.block_sparse_matmul(
                         a, bl, lay, blk, backend=be)}
            cands.update(peers(a64, b64))
            res = interleaved(cands, args.rounds)
            table(f"block-sparse {n}^3, block {blk}, {100 * nnz / layout.size:.1f}% dense "
                  f"({nnz} of {layout.size} blocks), {dt}, {be}", res, "dense",
                  {"dense": dense_flops, "block-sparse": 2.0 * n * nnz * blk * blk})
            sys.stdout.flush()
    if args.only in (None, "24"):
        w = R.cast(rng.standard_normal((n, n)), dt)
        values, meta = K.sparsify_2_4(w, backend=be)
        w24 = R.semi_structured_dense(values, meta)
        b = R.cast(w24, dt)
        cands = {"dense": lambda: K.matmul(a, b, backend=be),
                 "2:4": lambda: K.semi_structured_matmul(a, values, meta, backend=be)}
        cands.update(peers(a64, w24))
        res = interleaved(cands, args.rounds)
        table(f"2:4 {n}^3, {dt}, {be}", res, "dense", {"dense": dense_flops,
                                                       "2:4": dense_flops / 2})
    print(f"\nload average after: {load()}")


if __name__ == "__main__":
    main()
