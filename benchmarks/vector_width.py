"""The llvm backend's SIMD profile (backends/llvm_host.py) before and after, side by side in one
process: each kernel compiled twice, once as kdsl compiled it before the profile existed
(`KDSL_LLVM_VECTOR_WIDTH=llvm`: LLVM's own vector width, width-agnostic micro-kernel blocks)
and once with the host's profile (the default), then timed interleaved with NumPy and PyTorch
peers: every round runs each contender once, in a rotating order, after a short pause (BLAS
and OpenMP pools spin for a while after a call; the pause keeps that off the next timing).
Figures are medians over the rounds; both kdsl builds must give the same output bits.

    python benchmarks/vector_width.py [--only matmul,softmax,rms_norm,attention,quant]
        [--rounds 15] [--dtype float32,float16]

The Triton-tutorial kernels of benchmarks/run.py / examples/ are the ones measured; `quant` is
the library's int4 weight-only matmul against its kernel and table row of before (a copy here).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import load_line, machine_header, round_times
from kdsl.backends import llvm_host
from kdsl.kernels.matmul import grouped_tile
from run import attention_kernel, matmul_kernel, rms_norm_kernel, softmax_kernel

import kdsl as kd

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the torch columns read "-"
    torch = None

RNG = np.random.default_rng(0)


@contextmanager
def vector_width(value: str):
    old = os.environ.get(llvm_host.ENV)
    os.environ[llvm_host.ENV] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(llvm_host.ENV, None)
        else:
            os.environ[llvm_host.ENV] = old


def builds(kernel: Any, launch: Callable[[Any, str], Any]) -> dict[str, Callable[[], Any]]:
    """{"before": ..., "after": ...}: `launch(k, label)` on two fresh copies of `kernel`, the
    first compiled (on its first launch, here) under KDSL_LLVM_VECTOR_WIDTH=llvm."""
    out = {}
    for label, env in (("before", "llvm"), ("after", "auto")):
        k = kd.jit(kernel.fn)
        with vector_width(env):
            launch(k, label)
        out[label] = (lambda k=k, label=label: launch(k, label))
    return out


def interleaved(runs: dict[str, Callable[[], Any]], rounds: int, pause: float
                ) -> dict[str, float]:
    """Median ms of each run over `rounds` rotating rounds (common.round_times)."""
    return {n: statistics.median(t) for n, t in round_times(runs, rounds, pause).items()}


def _t(x: np.ndarray):
    return torch.from_numpy(x) if torch is not None else None


def case_matmul(n: int, dtype: str):
    a = RNG.standard_normal((n, n)).astype(dtype)
    b = RNG.standard_normal((n, n)).astype(dtype)
    c = {k: np.empty((n, n), dtype) for k in ("before", "after")}
    grid = (kd.cdiv(n, 128) * kd.cdiv(n, 128),)

    runs = builds(matmul_kernel, lambda k, lab: k[grid](
        a, b, c[lab], n, n, n, BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8))
    cn = np.empty((n, n), dtype)
    if dtype == "float32":
        runs["numpy"] = lambda: np.matmul(a, b, out=cn)
    if torch is not None:
        ta, tb, tc = _t(a), _t(b), torch.empty((n, n), dtype=getattr(torch, dtype))
        runs["torch"] = lambda: torch.matmul(ta, tb, out=tc)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    tol = 1e-3 if dtype == "float32" else 2e-2

    def check():
        np.testing.assert_array_equal(c["before"], c["after"])
        np.testing.assert_allclose(c["after"].astype(np.float64), ref, rtol=tol,
                                   atol=tol * np.sqrt(n) * 4)
    return f"matmul {n}^3 {dtype}", runs, check, 2 * n**3


def case_softmax(dtype: str):
    shape = (4096, 4096)
    x = RNG.standard_normal(shape).astype(dtype)
    out = {k: np.empty(shape, dtype) for k in ("before", "after")}

    runs = builds(softmax_kernel, lambda k, lab: k[(shape[0],)](out[lab], x, shape[1],
                                                                BLOCK=shape[1]))
    if dtype == "float32":
        def np_softmax():
            e = np.exp(x - x.max(1, keepdims=True))
            return e / e.sum(1, keepdims=True)
        runs["numpy"] = np_softmax
    if torch is not None:
        tx = _t(x)
        runs["torch"] = lambda: torch.softmax(tx, dim=1)

    def check():
        np.testing.assert_array_equal(out["before"], out["after"])
        xd = x.astype(np.float64)
        e = np.exp(xd - xd.max(1, keepdims=True))
        np.testing.assert_allclose(out["after"].astype(np.float64), e / e.sum(1, keepdims=True),
                                   rtol=1e-3 if dtype == "float32" else 1e-2, atol=1e-5)
    return f"softmax 4096x4096 {dtype}", runs, check, None


def case_rms_norm(dtype: str):
    shape = (8192, 4096)
    N = shape[1]
    x = RNG.standard_normal(shape).astype(dtype)
    w = RNG.standard_normal(N).astype(dtype)
    out = {k: np.empty(shape, dtype) for k in ("before", "after")}

    runs = builds(rms_norm_kernel, lambda k, lab: k[(shape[0],)](x, out[lab], w, N, 1e-6,
                                                                 BLOCK=N))
    if dtype == "float32":
        runs["numpy"] = lambda: x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-6) * w
    if torch is not None:
        tx, tw = _t(x), _t(w)
        runs["torch"] = lambda: F.rms_norm(tx, (N,), tw, 1e-6)

    def check():
        np.testing.assert_array_equal(out["before"], out["after"])
        xd = x.astype(np.float64)
        ref = xd / np.sqrt((xd * xd).mean(1, keepdims=True) + 1e-6) * w
        np.testing.assert_allclose(out["after"].astype(np.float64), ref,
                                   rtol=1e-3 if dtype == "float32" else 1e-2, atol=1e-3)
    return f"rms_norm 8192x4096 {dtype}", runs, check, None


def case_attention(dtype: str):
    H, S, D = 8, 1024, 64
    q, k, v = (RNG.standard_normal((H, S, D)).astype(dtype) for _ in range(3))
    scale = float(1 / np.sqrt(D))
    out = {key: np.empty_like(q) for key in ("before", "after")}

    runs = builds(attention_kernel, lambda kern, lab: kern[(kd.cdiv(S, 64), H)](
        q, k, v, out[lab], S, scale, D=D, BLOCK_M=64, BLOCK_N=64))
    if torch is not None:
        tq, tk, tv = _t(q)[None], _t(k)[None], _t(v)[None]
        runs["torch"] = lambda: F.scaled_dot_product_attention(tq, tk, tv)

    def check():
        np.testing.assert_array_equal(out["before"], out["after"])
        qd = q.astype(np.float64)
        s = qd @ k.astype(np.float64).transpose(0, 2, 1) * scale
        p = np.exp(s - s.max(-1, keepdims=True))
        ref = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
        np.testing.assert_allclose(out["after"].astype(np.float64), ref,
                                   rtol=1e-3 if dtype == "float32" else 1e-2, atol=1e-3)
    return f"attention H{H} S{S} D{D} {dtype}", runs, check, 4 * H * S * S * D


@kd.jit
def quant_kernel_before(x_ptr, w_ptr, s_ptr, c_ptr, M, N, K, group_size, BITS: kd.constexpr,
                        BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr, BLOCK_K: kd.constexpr,
                        GROUP_M: kd.constexpr):
    """kdsl.kernels.quant's kernel as it was before 2026-12-01: `group_size` a runtime value
    (the scale row `k // group_size` divided lane by lane on the CPU); int4 only here."""
    pid_m, pid_n = grouped_tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + kd.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + kd.arange(0, BLOCK_N)
    rk = kd.arange(0, BLOCK_K)
    acc = kd.zeros((BLOCK_M, BLOCK_N), dtype=kd.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + rk
        x = kd.load(x_ptr + rm[:, None] * K + ks[None, :],
                    mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        w_mask = (ks[:, None] < K) & (rn[None, :] < N)
        byte = kd.load(w_ptr + (ks // 2)[:, None] * N + rn[None, :], mask=w_mask, other=0)
        q = ((byte.to(kd.int32) >> ((ks % 2) * 4)[:, None]) & 15) - 8
        scale = kd.load(s_ptr + (ks // group_size)[:, None] * N + rn[None, :], mask=w_mask,
                        other=0.0).to(kd.float32)
        w = (q.to(kd.float32) * scale).to(x.dtype)
        acc = kd.dot(x, w, acc)
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def case_quant(M: int, dtype: str):
    """int4 weight-only matmul, K = N = 4096, groups of 128: the kernel and table row of before
    (32 x 64 x 32, runtime group size, compiled under KDSL_LLVM_VECTOR_WIDTH=llvm) against the
    library now; the peers multiply by the weights dequantised ahead of time (float32)."""
    from kdsl.kernels import quant_matmul

    K = N = 4096
    gs = 128
    x = RNG.standard_normal((M, K)).astype(dtype)
    wq = RNG.integers(0, 256, (K // 2, N)).astype(np.uint8)
    s = (RNG.random((K // gs, N)) * 0.01).astype(np.float32)
    out = {"before": np.empty((M, N), dtype)}
    grid = (kd.cdiv(M, 32) * kd.cdiv(N, 64),)
    k_before = kd.jit(quant_kernel_before.fn)
    run_before = lambda: k_before[grid](x, wq, s, out["before"], M, N, K, gs, BITS=4,
                                        BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, GROUP_M=8)
    with vector_width("llvm"):
        run_before()

    def run_after():
        out["after"] = quant_matmul(x, wq, s, gs, 4, backend="llvm")
    runs = {"before": run_before, "after": run_after}
    w = np.empty((K, N), np.float32)
    w[0::2], w[1::2] = (wq & 15).astype(np.float32) - 8, (wq >> 4).astype(np.float32) - 8
    w *= np.repeat(s, gs, axis=0)
    wd = w.astype(dtype)
    if dtype == "float32":
        runs["numpy"] = lambda: x @ wd
    if torch is not None:
        tx, tw = _t(x), _t(wd)
        runs["torch"] = lambda: tx @ tw

    def check():
        np.testing.assert_array_equal(out["before"], out["after"])
        ref = x.astype(np.float64) @ w.astype(np.float64)
        np.testing.assert_allclose(out["after"].astype(np.float64), ref, rtol=1e-3,
                                   atol=1e-3 * np.abs(ref).max())
    return f"quant int4 {M}x4096x4096 {dtype}", runs, check, 2 * M * K * N


CASES = {
    "matmul": lambda dt: [case_matmul(1024, dt), case_matmul(2048, dt)],
    "softmax": lambda dt: [case_softmax(dt)],
    "rms_norm": lambda dt: [case_rms_norm(dt)],
    "attention": lambda dt: [case_attention(dt)],
    "quant": lambda dt: [case_quant(1, dt), case_quant(16, dt)],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(CASES))  # quant: the library kernel, below
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--pause", type=float, default=0.05, help="seconds before each timed call")
    o = ap.parse_args()
    os.environ.setdefault("KDSL_CACHE", "0")  # compile afresh: the lowering is what is measured
    print(machine_header())
    peer = f"{torch.__version__} ({torch.get_num_threads()} threads)" if torch else "absent"
    print(f"before: {llvm_host.override(llvm_host.profile(), 'llvm').key()}  after: "
          f"{llvm_host.profile().key()}; {o.rounds} interleaved rounds, medians; torch {peer}")
    head = (f"{'case':30s} {'before ms':>10s} {'after ms':>10s} {'speedup':>8s} {'numpy ms':>9s}"
            f" {'torch ms':>9s} {'torch/after':>11s}  GFLOP/s after")
    print(head)
    print("-" * len(head))
    for dt in o.dtype.split(","):
        for name in o.only.split(","):
            for label, runs, check, flops in CASES[name](dt):
                med = interleaved(runs, o.rounds, o.pause)
                check()
                def fmt(k, med=med):
                    return f"{med[k]:9.2f}" if k in med else f"{'-':>9s}"
                ratio = f"{med['torch'] / med['after']:11.2f}" if "torch" in med else " " * 11
                gf = f"  {flops / med['after'] / 1e6:7.1f}" if flops else ""
                print(f"{label:30s} {med['before']:10.2f} {med['after']:10.2f} "
                      f"{med['before'] / med['after']:7.2f}x {fmt('numpy')} {fmt('torch')} "
                      f"{ratio}{gf}", flush=True)
    print(load_line(), "(at the end)")


if __name__ == "__main__":
    main()
