"""Fetching a loop's next tiles ahead on the CPU (kdsl/lowering/prefetch.py), side by side in
one process: each kernel compiled with `num_stages=1` (no prefetch: Triton's "no pipelining")
and with the default `num_stages=3` (prefetch hints for the next iteration's tiles), timed
interleaved with the NumPy/OpenBLAS and PyTorch peers (each round runs every contender once,
in a rotating order, after a short pause).  Figures are medians and, because two-thread runs
on a shared host swing, the spread (max / min) over the rounds; both kdsl builds must give the
same output bits.

    python benchmarks/cpu_prefetch.py [--only matmul,attention,mlp] [--rounds 11]
        [--sizes 1024,2048]

`mlp` times the library's SwiGLU MLP (default options) against torch alone.

`KDSL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/cpu_prefetch.py` gives the
one-core figures (both kdsl and the BLAS peer on one thread).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import load_line, machine_header, round_times
from run import attention_kernel, matmul_kernel

import kdsl as kd

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the torch columns read "-"
    torch = None

RNG = np.random.default_rng(0)
BUILDS = (("stages=1", 1), ("stages=3", 3))


def interleaved(runs: dict[str, Callable[[], Any]], rounds: int, pause: float
                ) -> dict[str, tuple[float, float, float]]:
    """(median ms, min ms, max / min) of each run over `rounds` rotating rounds."""
    return {n: (statistics.median(t), min(t), max(t) / min(t))
            for n, t in round_times(runs, rounds, pause).items()}


def case_matmul(n: int):
    a = RNG.standard_normal((n, n), dtype=np.float32)
    b = RNG.standard_normal((n, n), dtype=np.float32)
    out = {label: np.empty((n, n), np.float32) for label, _ in BUILDS}
    grid = (kd.cdiv(n, 128) * kd.cdiv(n, 128),)
    runs: dict[str, Callable[[], Any]] = {}
    for label, stages in BUILDS:
        runs[label] = (lambda c=out[label], s=stages: matmul_kernel[grid](
            a, b, c, n, n, n, BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_stages=s))
    cn = np.empty((n, n), np.float32)
    runs["numpy"] = lambda: np.matmul(a, b, out=cn)
    if torch is not None:
        ta, tb, tc = torch.from_numpy(a), torch.from_numpy(b), torch.empty((n, n))
        runs["torch"] = lambda: torch.matmul(ta, tb, out=tc)

    def check():
        np.testing.assert_array_equal(out["stages=1"], out["stages=3"])
        np.testing.assert_allclose(out["stages=3"], a @ b, rtol=1e-3, atol=1e-2 * np.sqrt(n))
    return f"matmul {n}^3", runs, check, 2 * n**3


def case_attention(_n: int):
    H, S, D = 8, 1024, 64
    q, k, v = (RNG.standard_normal((H, S, D), dtype=np.float32) for _ in range(3))
    scale = float(1 / np.sqrt(D))
    out = {label: np.empty_like(q) for label, _ in BUILDS}
    runs: dict[str, Callable[[], Any]] = {}
    for label, stages in BUILDS:
        runs[label] = (lambda o=out[label], s=stages: attention_kernel[(kd.cdiv(S, 64), H)](
            q, k, v, o, S, scale, D=D, BLOCK_M=64, BLOCK_N=64, num_stages=s))
    if torch is not None:
        tq, tk, tv = (torch.from_numpy(x)[None] for x in (q, k, v))
        runs["torch SDPA"] = lambda: F.scaled_dot_product_attention(tq, tk, tv)

    def check():
        np.testing.assert_array_equal(out["stages=1"], out["stages=3"])
        s = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 2, 1) * scale
        p = np.exp(s - s.max(-1, keepdims=True))
        ref = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
        np.testing.assert_allclose(out["stages=3"], ref, rtol=1e-3, atol=1e-3)
    return f"attention H{H} S{S} D{D}", runs, check, 4 * H * S * S * D


def case_mlp(_n: int):
    """The library's SwiGLU MLP at the size of the issue "CPU performance" (its configs, its
    default num_stages) against torch's three matmuls and SiLU: the peer of its target."""
    import kdsl.kernels as K

    M, D, H = 512, 2048, 5504
    x = RNG.standard_normal((M, D), dtype=np.float32)
    wg, wu = (RNG.standard_normal((D, H), dtype=np.float32) / 40 for _ in range(2))
    wd = RNG.standard_normal((H, D), dtype=np.float32) / 70
    got: dict[str, Any] = {}
    runs: dict[str, Callable[[], Any]] = {
        "kdsl": lambda: got.__setitem__("kdsl", K.mlp(x, wg, wu, wd))}
    if torch is not None:
        tx, tg, tu, td = (torch.from_numpy(a) for a in (x, wg, wu, wd))
        runs["torch"] = lambda: (F.silu(tx @ tg) * (tx @ tu)) @ td

    def check():
        xd = x.astype(np.float64)
        g = xd @ wg
        ref = (g / (1 + np.exp(-g)) * (xd @ wu)) @ wd
        np.testing.assert_allclose(got["kdsl"], ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())
    return f"mlp (SwiGLU) {M}x{D}x{H}", runs, check, 2 * M * D * H * 3


CASES = {"matmul": case_matmul, "attention": case_attention, "mlp": case_mlp}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="matmul,attention")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--sizes", default="1024,2048", help="matmul sizes")
    ap.add_argument("--pause", type=float, default=0.05)
    o = ap.parse_args()
    print(machine_header())
    print(f"threads: KDSL_NUM_THREADS={os.environ.get('KDSL_NUM_THREADS', '-')} "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '-')}")
    for name in o.only.split(","):
        sizes = [int(s) for s in o.sizes.split(",")] if name == "matmul" else [0]
        for n in sizes:
            title, runs, check, flops = CASES[name](n)
            res = interleaved(runs, o.rounds, o.pause)
            check()
            ours = ("stages", "kdsl")
            best_peer = min(v[0] for k, v in res.items() if not k.startswith(ours))
            print(f"\n{title} ({o.rounds} rounds)")
            for label, (ms, low, spread) in res.items():
                gf = f"{flops / ms / 1e6:7.1f} GFLOP/s" if flops else ""
                ratio = f"peer/this {best_peer / ms:4.2f}" if label.startswith(ours) else ""
                print(f"  {label:12s} {ms:9.2f} ms (min {low:8.2f})  spread {spread:4.2f}  {gf}  "
                      f"{ratio}")
    print("\n" + load_line() + " (at the end)")


if __name__ == "__main__":
    main()
