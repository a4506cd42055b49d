"""The kernel library against NumPy on moderate sizes: medians in one process, one row per
kernel, kdsl time / NumPy time as a ratio (< 1: kdsl is faster).  NumPy's versions are the
float32 formulas a user would write (matmul through BLAS); Numba is timed too when importable.

    python benchmarks/kernels.py [--backends llvm,opencl] [--repeat 10]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import kdsl.kernels as K
import numba_peers as NB
from common import load_line, machine_header, median_ms

import kdsl as kd


def _np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _np_layer_norm(x, w, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(x.var(-1, keepdims=True) + eps) * w + b


def _np_rms_norm(x, w, eps=1e-6):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _np_silu(x):
    return x / (1 + np.exp(-x))


def _np_attention(q, k, v, causal):
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1], dtype=np.float32)
    if causal:
        n = q.shape[2]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    return _np_softmax(s) @ v


def _np_decode(q, kc, vc, table, lens):
    B, H, D = q.shape
    out = np.empty_like(q)
    for b in range(B):
        n = int(lens[b])
        blocks = table[b, :-(-n // kc.shape[1])]
        keys = kc[blocks].reshape(-1, kc.shape[2], D)[:n].transpose(1, 0, 2)
        vals = vc[blocks].reshape(-1, kc.shape[2], D)[:n].transpose(1, 0, 2)
        g = H // kc.shape[2]
        s = np.einsum("hd,hnd->hn", q[b], np.repeat(keys, g, 0)) / np.sqrt(D)
        out[b] = np.einsum("hn,hnd->hd", _np_softmax(s), np.repeat(vals, g, 0))
    return out


def _np_quant(x, w, s, gs):
    return x @ (w.astype(np.float32) * np.repeat(s, gs, axis=0))


def cases(rng):
    """({name: numba call}, [(name, kdsl call(backend), numpy call)])."""
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    x, w, b = f(1024, 4096), f(4096), f(4096)
    xl = f(32, 32768)
    a, bm = f(512, 512), f(512, 512)
    xm, wg, wu, wd = f(128, 512), f(512, 1024) / 20, f(512, 1024) / 20, f(1024, 512) / 30
    q, k, v = f(1, 8, 512, 64), f(1, 8, 512, 64), f(1, 8, 512, 64)
    dq, kc, vc = f(16, 32, 128), f(512, 16, 8, 128), f(512, 16, 8, 128)
    table = rng.permutation(512).astype(np.int32).reshape(16, 32)
    lens = np.full(16, 500, np.int32)
    xq, wq, sq = f(16, 4096), rng.integers(-128, 128, (4096, 4096)).astype(np.int8), \
        (rng.random((32, 4096)) * 0.01).astype(np.float32)
    out, outl = np.empty_like(x), np.empty_like(xl)
    numba = {  # Numba peers (parallel, fastmath) where the kernel is a per-row loop
        "softmax 1024x4096": lambda: NB.softmax(x, out),
        "softmax online 32x32768": lambda: NB.softmax(xl, outl),
        "layer_norm 1024x4096": lambda: NB.layer_norm(x, w, b, np.float32(1e-5), out),
        "rms_norm 1024x4096": lambda: NB.rms_norm(x, w, np.float32(1e-6), out),
    } if NB.available() else {}
    return numba, [
        ("softmax 1024x4096", lambda be: K.softmax(x, backend=be), lambda: _np_softmax(x)),
        ("softmax online 32x32768", lambda be: K.softmax(xl, backend=be), lambda: _np_softmax(xl)),
        ("layer_norm 1024x4096", lambda be: K.layer_norm(x, w, b, backend=be),
         lambda: _np_layer_norm(x, w, b)),
        ("rms_norm 1024x4096", lambda be: K.rms_norm(x, w, backend=be),
         lambda: _np_rms_norm(x, w)),
        ("matmul 512^3 +relu", lambda be: K.matmul(a, bm, activation="relu", backend=be),
         lambda: np.maximum(a @ bm, 0)),
        ("mlp 128x512x1024", lambda be: K.mlp(xm, wg, wu, wd, backend=be),
         lambda: (_np_silu(xm @ wg) * (xm @ wu)) @ wd),
        ("attention 8x512x64", lambda be: K.attention(q, k, v, backend=be),
         lambda: _np_attention(q, k, v, False)),
        ("attention causal", lambda be: K.attention(q, k, v, causal=True, backend=be),
         lambda: _np_attention(q, k, v, True)),
        ("decode 16x32h x500 tok", lambda be: K.decode_attention(dq, kc, vc, table, lens,
                                                                 backend=be),
         lambda: _np_decode(dq, kc, vc, table, lens)),
        ("quant int8 16x4096x4096", lambda be: K.quant_matmul(xq, wq, sq, 128, 8, backend=be),
         lambda: _np_quant(xq, wq, sq, 128)),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backends", default="llvm,opencl")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    args = ap.parse_args()
    backends = [b for b in args.backends.split(",") if b in kd.available_backends()]
    rng = np.random.default_rng(0)
    numba, rows = cases(rng)
    print(machine_header())
    if not NB.available():
        print("numba is not installed: no Numba column (pip install numba)")
    head = (f"{'kernel':28s} {'numpy ms':>9s} {'numba ms':>9s}"
            + "".join(f" {b + ' ms':>10s} {'ratio':>6s}" for b in backends))
    print(head + "   (ratio = kdsl / NumPy time)")
    print("-" * len(head))
    for name, run, ref in rows:
        if args.only and args.only not in name:
            continue
        t_np = median_ms(ref, repeat=args.repeat, warmup=1)
        t_nb = (f"{median_ms(numba[name], repeat=args.repeat, warmup=2):9.2f}" if name in numba
                else f"{'-':>9s}")
        row = f"{name:28s} {t_np:9.2f} {t_nb}"
        for be in backends:
            t = median_ms(lambda run=run, be=be: run(be), repeat=args.repeat, warmup=2)
            row += f" {t:10.2f} {t / t_np:6.2f}"
        print(row, flush=True)
    print(load_line(), "(at the end)")


if __name__ == "__main__":
    main()
