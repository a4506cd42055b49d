"""The library on the CPU (llvm backend) against its best peers, interleaved in one process: the
table of the "CPU performance" targets.  Each row times kdsl and every peer once per round, in
a rotating order after a short pause, and prints medians, the spread (max / min of kdsl's
rounds: these hosts are shared) and peer time / kdsl time (>= the target is met).

    python benchmarks/cpu_peers.py [--only matmul,attention,mlp,softmax,norms,quant,bf16]
        [--rounds 9] [--sizes 1024,2048,4096]

Peers: NumPy (OpenBLAS) and torch CPU for matmul, torch SDPA for attention, torch for the
SwiGLU MLP, softmax and the norms (and Numba parallel fastmath where importable, as in
numba_peers.py, each allocating its output as the library does), the memory-bandwidth limit
for the int4 M=1 quant matmul (its weight bytes over the copy bandwidth measured in the same
run; timed with the caches swept before each call), and for int8 and int4 with 4 and 16 rows
(no target: 16 rows of float32 activations are bound by the FMAs); torch's bfloat16 ops for
the `bf16` rows (matmul, attention, mlp with bfloat16 inputs).  Outputs are checked against
the first peer before timing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import sys
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import kdsl.kernels as K
import numba_peers as NB
from common import copy_gbs, load_line, machine_header, round_times

#: target of the issue per row kind: peer time / kdsl time must reach it
TARGETS = {"matmul": 0.9, "attention": 0.8, "mlp": 0.8, "softmax": 1.0, "norms": 1.0}
RNG = np.random.default_rng(0)


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape, dtype=np.float32) * scale).astype(np.float32)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def row(name: str, kdsl: Callable[[], object], peers: dict[str, Callable[[], object]],
        target: float | None, rounds: int, check: Callable[[object, object], None],
        nbytes: int = 0) -> None:
    """One table row; `nbytes` (read once, written once) adds kdsl's share of the copy
    bandwidth measured in this run."""
    if peers:
        check(kdsl(), next(iter(peers.values()))())
    times = round_times({"kdsl": kdsl, **peers}, rounds, pause=0.05)
    med = {n: statistics.median(t) for n, t in times.items()}
    spread = max(times["kdsl"]) / min(times["kdsl"])
    best = min((m, n) for n, m in med.items() if n != "kdsl") if peers else None
    cells = "  ".join(f"{n} {m:8.2f}" for n, m in med.items() if n != "kdsl")
    line = f"{name:34s} kdsl {med['kdsl']:8.2f} ms (x{spread:.1f})  {cells}"
    if best is not None:
        ratio = best[0] / med["kdsl"]
        verdict = "" if target is None else f"  {'met' if ratio >= target else 'missed'} " \
                                            f"(>= {target})"
        line += f"  | {best[1]}/kdsl {ratio:.2f}{verdict}"
    if nbytes:
        limit = nbytes / (COPY["gbs"] * 1e9) * 1e3
        line += f"; {limit / med['kdsl']:.0%} of copy bandwidth ({COPY['gbs']:.1f} GB/s)"
    print(line, flush=True)


COPY = {"gbs": 0.0}  # measured once per run (main)


def _close(rtol: float = 2e-3, atol: float = 2e-3):
    def check(ours, peer) -> None:
        ours = np.asarray(ours)
        peer = peer.numpy() if hasattr(peer, "numpy") else np.asarray(peer)
        np.testing.assert_allclose(ours, peer, rtol=rtol, atol=atol)
    return check


def bench_matmul(o, torch) -> None:
    for n in o.sizes:
        a, b = _f32(n, n), _f32(n, n)
        peers = {"numpy": lambda a=a, b=b: a @ b}
        if torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            peers["torch"] = lambda ta=ta, tb=tb: ta @ tb
        row(f"matmul {n}^3 f32", lambda a=a, b=b: K.matmul(a, b, backend="llvm"), peers,
            TARGETS["matmul"], o.rounds, _close(1e-3, 1e-2))


def bench_attention(o, torch) -> None:
    if torch is None:
        print("attention: torch not installed, no SDPA peer")
        return
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for s, causal in ((1024, False), (1024, True), (4096, True)):
        q, k, v = (_f32(1, 8, s, 64) for _ in range(3))
        tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
        row(f"attention B1 H8 S{s} D64{' causal' if causal else ''}",
            lambda q=q, k=k, v=v, c=causal: K.attention(q, k, v, causal=c, backend="llvm"),
            {"sdpa": lambda tq=tq, tk=tk, tv=tv, c=causal: sdpa(tq, tk, tv, is_causal=c)},
            TARGETS["attention"], max(3, o.rounds // (4 if s > 1024 else 1)), _close())


def bench_mlp(o, torch) -> None:
    if torch is None:
        print("mlp: torch not installed")
        return
    x, wg, wu = _f32(512, 2048), _f32(2048, 5504, scale=1 / 45), _f32(2048, 5504, scale=1 / 45)
    wd = _f32(5504, 2048, scale=1 / 74)
    t = [torch.from_numpy(a) for a in (x, wg, wu, wd)]
    F = torch.nn.functional
    row("mlp (SwiGLU) 512x2048x5504", lambda: K.mlp(x, wg, wu, wd, backend="llvm"),
        {"torch": lambda: (F.silu(t[0] @ t[1]) * (t[0] @ t[2])) @ t[3]}, TARGETS["mlp"],
        max(3, o.rounds // 2), _close(1e-3, 1e-3))


def bench_bf16(o, torch) -> None:
    """bfloat16 inputs (the library takes torch tensors in place and returns bfloat16 ones)
    against torch's bfloat16 ops (oneDNN; AMX where the CPU has it, as kdsl's matrix-unit
    dots): no target of the issue, the ratio is reported."""
    if torch is None:
        print("bf16: torch not installed")
        return
    bf = torch.bfloat16

    def close(rtol: float, atol: float):
        inner = _close(rtol, atol)
        return lambda ours, peer: inner(ours.float().numpy(), peer.float().numpy())

    for n in o.sizes:
        ta, tb = (torch.from_numpy(_f32(n, n)).to(bf) for _ in range(2))
        row(f"matmul {n}^3 bf16", lambda ta=ta, tb=tb: K.matmul(ta, tb, backend="llvm"),
            {"torch": lambda ta=ta, tb=tb: ta @ tb}, None, o.rounds, close(2e-2, 2e-1))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for s, causal in ((1024, False), (4096, True)):
        q, k, v = (torch.from_numpy(_f32(1, 8, s, 64)).to(bf) for _ in range(3))
        row(f"attention B1 H8 S{s} D64{' causal' if causal else ''} bf16",
            lambda q=q, k=k, v=v, c=causal: K.attention(q, k, v, causal=c, backend="llvm"),
            {"sdpa": lambda q=q, k=k, v=v, c=causal: sdpa(q, k, v, is_causal=c)},
            None, max(3, o.rounds // (4 if s > 1024 else 1)), close(2e-2, 2e-2))
    t = [torch.from_numpy(a).to(bf) for a in (_f32(512, 2048), _f32(2048, 5504, scale=1 / 45),
                                             _f32(2048, 5504, scale=1 / 45),
                                             _f32(5504, 2048, scale=1 / 74))]
    F = torch.nn.functional
    row("mlp (SwiGLU) 512x2048x5504 bf16", lambda: K.mlp(t[0], t[1], t[2], t[3], backend="llvm"),
        {"torch": lambda: (F.silu(t[0] @ t[1]) * (t[0] @ t[2])) @ t[3]}, None,
        max(3, o.rounds // 2), close(3e-2, 3e-2))


def _fresh(fn: Callable[..., object], x: np.ndarray, *args: object) -> np.ndarray:
    """A Numba peer as a function returning a new array, like the library and torch (the
    first touch of a fresh 128 MiB output costs ~10 ms of page faults on these hosts)."""
    out = np.empty_like(x)
    fn(x, *args, out)
    return out


def bench_softmax(o, torch) -> None:
    for shape in ((4096, 4096), (32768, 1024)):
        x = _f32(*shape)
        peers = {}
        if torch is not None:
            tx = torch.from_numpy(x)
            peers["torch"] = lambda tx=tx: torch.softmax(tx, -1)
        if NB.available():
            peers["numba"] = lambda x=x: _fresh(NB.softmax, x)
        row(f"softmax {shape[0]}x{shape[1]}", lambda x=x: K.softmax(x, backend="llvm"), peers,
            TARGETS["softmax"], o.rounds, _close(1e-5, 1e-6), nbytes=2 * x.nbytes)
        # into a reused output, as the copy bandwidth itself is measured (Numba likewise)
        buf, nb_buf = np.empty_like(x), np.empty_like(x)
        reused = {"numba": lambda x=x, b=nb_buf: NB.softmax(x, b) or b} if NB.available() \
            else {}
        row("  same, out= a reused array",
            lambda x=x, b=buf: K.softmax(x, backend="llvm", out=b), reused, TARGETS["softmax"], o.rounds, _close(1e-5, 1e-6), nbytes=2 * x.nbytes)


def bench_norms(o, torch) -> None:
    x, w, b = _f32(8192, 4096), _f32(4096), _f32(4096)
    ln: dict[str, Callable[[], object]] = {}
    rms: dict[str, Callable[[], object]] = {}
    if torch is not None:
        tx, tw, tb = (torch.from_numpy(a) for a in (x, w, b))
        F = torch.nn.functional
        ln["torch"] = lambda: F.layer_norm(tx, (4096,), tw, tb, 1e-5)
        if hasattr(F, "rms_norm"):
            rms["torch"] = lambda: F.rms_norm(tx, (4096,), tw, 1e-6)
    if NB.available():
        ln["numba"] = lambda: _fresh(NB.layer_norm, x, w, b, np.float32(1e-5))
        rms["numba"] = lambda: _fresh(NB.rms_norm, x, w, np.float32(1e-6))
    row("layer_norm 8192x4096", lambda: K.layer_norm(x, w, b, backend="llvm"), ln,
        TARGETS["norms"], o.rounds, _close(1e-4, 1e-4), nbytes=2 * x.nbytes)
    buf, nb_buf = np.empty_like(x), np.empty_like(x)
    eps5, eps6 = np.float32(1e-5), np.float32(1e-6)
    nb = NB.available()
    row("  same, out= a reused array", lambda: K.layer_norm(x, w, b, backend="llvm", out=buf),
        {"numba": lambda: NB.layer_norm(x, w, b, eps5, nb_buf) or nb_buf} if nb else {},
        TARGETS["norms"], o.rounds, _close(1e-4, 1e-4), nbytes=2 * x.nbytes)
    row("rms_norm 8192x4096", lambda: K.rms_norm(x, w, backend="llvm"), rms,
        TARGETS["norms"], o.rounds, _close(1e-4, 1e-4), nbytes=2 * x.nbytes)
    row("  same, out= a reused array", lambda: K.rms_norm(x, w, backend="llvm", out=buf),
        {"numba": lambda: NB.rms_norm(x, w, eps6, nb_buf) or nb_buf} if nb else {},
        TARGETS["norms"], o.rounds, _close(1e-4, 1e-4), nbytes=2 * x.nbytes)


def _cold_ms(call: Callable[[], object], sweep: np.ndarray, rounds: int) -> float:
    """Median ms of `call` with the caches swept (a write of `sweep`, untimed) before each."""
    times = []
    for _ in range(rounds):
        sweep += 1
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def bench_quant(o, torch) -> None:
    """The weights read cold (a 64 MiB write, untimed, before each call: decoding streams a
    model larger than the cache) against the bandwidth limit, and warm (back-to-back calls,
    the 8.5 MB in the last-level cache) for reference.  (No pause between calls: with no peer
    there is no pool to let settle, and a 10-50 ms sleep made each call 3x slower here, the
    idle vCPUs waking slowly.)"""
    K_, N = 4096, 4096
    x = _f32(1, K_)
    wq = RNG.integers(0, 256, (K_ // 2, N), dtype=np.uint8)  # two int4 values per byte
    sc = (RNG.random((K_ // 128, N)) * 0.01).astype(np.float32)
    gbs = COPY["gbs"]
    limit_ms = (wq.nbytes + sc.nbytes) / (gbs * 1e9) * 1e3
    call = lambda: K.quant_matmul(x, wq, sc, 128, 4, backend="llvm")  # noqa: E731
    warm = statistics.median(round_times({"kdsl": call}, o.rounds)["kdsl"])
    sweep = np.ones(64 << 20, np.uint8)
    ms = _cold_ms(call, sweep, o.rounds)
    print(f"{'quant int4 M=1 K=N=4096':34s} kdsl {ms:8.2f} ms cold ({warm:.2f} warm)  "
          f"bandwidth limit {limit_ms:.3f} ms (copy {gbs:.1f} GB/s)  | {ms / limit_ms:.1f}x the "
          f"limit  {'met' if ms <= 2 * limit_ms else 'missed'} (<= 2x)", flush=True)
    # a few rows (a batch of decode steps; no target): the same cold weights, int8 and int4
    w8 = RNG.integers(-128, 128, (K_, N), dtype=np.int8)
    for bits, w in ((8, w8), (4, wq)):
        limit_ms = (w.nbytes + sc.nbytes) / (gbs * 1e9) * 1e3
        for M in (4, 16):
            xm = _f32(M, K_)
            call = lambda: K.quant_matmul(xm, w, sc, 128, bits, backend="llvm")  # noqa: E731
            call()
            ms = _cold_ms(call, sweep, o.rounds)
            print(f"{f'quant int{bits} M={M} K=N=4096':34s} kdsl {ms:8.2f} ms cold  "
                  f"bandwidth limit {limit_ms:.3f} ms  | {ms / limit_ms:.1f}x the limit  "
                  f"(no target)", flush=True)


BENCHES = {"matmul": bench_matmul, "attention": bench_attention, "mlp": bench_mlp,
           "softmax": bench_softmax, "norms": bench_norms, "quant": bench_quant,
           "bf16": bench_bf16}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(BENCHES))
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--sizes", default="1024,2048,4096")
    o = ap.parse_args()
    o.sizes = [int(s) for s in o.sizes.split(",")]
    torch = _torch()
    print(machine_header())
    COPY["gbs"] = copy_gbs(5, 1 << 28, best=True)
    print(f"torch {torch.__version__ if torch else 'not installed'} "
          f"({torch.get_num_threads() if torch else 0} threads); kdsl llvm backend, "
          f"KDSL_NUM_THREADS={os.environ.get('KDSL_NUM_THREADS', 'default')}")
    for name in o.only.split(","):
        BENCHES[name](o, torch)
    print(load_line() + " (at the end)")


if __name__ == "__main__":
    main()
