"""The CPU targets table: kdsl's llvm backend (and OpenCL/PoCL for softmax) against NumPy,
OpenBLAS and a STREAM-like copy, medians of repeated runs side by side in one process.

    python benchmarks/run.py [--only softmax,matmul,...] [--repeat 10] [--library]

Each row prints the kdsl time, the peer's time and the ratio against the target of the issue
"CPU performance".  Kernels are Triton-tutorial style (the patterns of
tests/backend/test_tutorials.py); `--library` uses `kdsl.kernels` instead where it has the op.
The memory-bandwidth limit of a row is its bytes moved (read once, written once) over the
measured copy bandwidth.  Norms and softmax also compare to the Numba peers of numba_peers.py
(parallel, fastmath) when Numba is installed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import numba_peers as NB
from common import copy_gbs, load_line, machine_header, median_ms

# The kernels the examples show are the ones measured (the matmul recomputes its offsets from
# k each step: a loop-carried pointer tile would also work, strength-reduced by the tile passes).
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from matmul import matmul_kernel  # noqa: E402
from softmax import softmax_kernel  # noqa: E402
from vector_add import add as add_kernel  # noqa: E402

import kdsl as kd

# ----------------------------------------------------------------------------------- kernels


@kd.jit
def layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, N, eps, BLOCK: kd.constexpr):
    row = kd.program_id(0)
    x_ptr += row * N
    y_ptr += row * N
    cols = kd.arange(0, BLOCK)
    mask = cols < N
    x = kd.load(x_ptr + cols, mask=mask, other=0.0)
    mean = kd.sum(x, axis=0) / N
    d = kd.where(mask, x - mean, 0.0)
    rstd = 1 / kd.sqrt(kd.sum(d * d, axis=0) / N + eps)
    w = kd.load(w_ptr + cols, mask=mask)
    b = kd.load(b_ptr + cols, mask=mask)
    kd.store(y_ptr + cols, d * rstd * w + b, mask=mask)


@kd.jit
def rms_norm_kernel(x_ptr, y_ptr, w_ptr, N, eps, BLOCK: kd.constexpr):
    row = kd.program_id(0)
    cols = kd.arange(0, BLOCK)
    mask = cols < N
    x = kd.load(x_ptr + row * N + cols, mask=mask, other=0.0)
    rstd = 1 / kd.sqrt(kd.sum(x * x, axis=0) / N + eps)
    w = kd.load(w_ptr + cols, mask=mask)
    kd.store(y_ptr + row * N + cols, x * rstd * w, mask=mask)


@kd.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq, scale, D: kd.constexpr,
                     BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr):
    start_m = kd.program_id(0)
    head = kd.program_id(1)
    base = head * seq * D
    offs_m = start_m * BLOCK_M + kd.arange(0, BLOCK_M)
    offs_d = kd.arange(0, D)
    q = kd.load(q_ptr + base + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < seq,
                other=0.0)
    m_i = kd.full((BLOCK_M,), -float("inf"), kd.float32)
    l_i = kd.zeros((BLOCK_M,), kd.float32)
    acc = kd.zeros((BLOCK_M, D), kd.float32)
    for start_n in range(0, seq, BLOCK_N):
        offs_n = start_n + kd.arange(0, BLOCK_N)
        kmask = offs_n[:, None] < seq
        k = kd.load(k_ptr + base + offs_n[:, None] * D + offs_d[None, :], mask=kmask, other=0.0)
        v = kd.load(v_ptr + base + offs_n[:, None] * D + offs_d[None, :], mask=kmask, other=0.0)
        s = kd.dot(q, kd.trans(k)) * scale
        s = kd.where(offs_n[None, :] < seq, s, -float("inf"))
        m_new = kd.maximum(m_i, kd.max(s, axis=1))
        p = kd.exp(s - m_new[:, None])
        alpha = kd.exp(m_i - m_new)
        l_i = l_i * alpha + kd.sum(p, axis=1)
        acc = acc * alpha[:, None] + kd.dot(p, v)
        m_i = m_new
    out = acc / l_i[:, None]
    kd.store(o_ptr + base + offs_m[:, None] * D + offs_d[None, :], out, mask=offs_m[:, None] < seq)


# ------------------------------------------------------------------------------------- peers


def np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    e /= e.sum(axis=1, keepdims=True)
    return e


def np_layer_norm(x, w, b, eps=1e-5):
    mean = x.mean(axis=1, keepdims=True)
    d = x - mean
    return d / np.sqrt((d * d).mean(axis=1, keepdims=True) + eps) * w + b


def np_rms_norm(x, w, eps=1e-6):
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * w


def np_attention(q, k, v, scale):
    s = np.matmul(q, k.transpose(0, 2, 1)) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.matmul(p, v)


# -------------------------------------------------------------------------------------- rows

RNG = np.random.default_rng(0)
ROWS: list[tuple[str, str, str, str]] = []  # name, kdsl, peer, verdict


def row(name: str, ours: str, peer: str, verdict: str) -> None:
    ROWS.append((name, ours, peer, verdict))
    print(f"{name:34s} {ours:28s} {peer:34s} {verdict}", flush=True)


def ok(cond: bool) -> str:
    return "met" if cond else "MISSED"


def bench_vector_add(o, bw):
    n = 1 << 24
    x, y = RNG.random(n, dtype=np.float32), RNG.random(n, dtype=np.float32)
    out = np.empty_like(x)
    block = 1 << 16
    run = lambda: add_kernel[(kd.cdiv(n, block),)](x, y, out, n, BLOCK=block)
    run()
    assert np.array_equal(out, x + y)
    ms = median_ms(run, o.repeat)
    gbs = 12 * n / ms / 1e6
    row("vector add 16M", f"{ms:7.2f} ms {gbs:5.1f} GB/s", f"copy {bw:5.1f} GB/s",
        f"{gbs / bw:4.0%} of copy ({ok(gbs >= 0.9 * bw)} >= 90%)")


def _softmax_call(x, out, library):
    if library:
        return lambda: kd.kernels.softmax(x)
    block = 1 << (x.shape[1] - 1).bit_length()
    return lambda: softmax_kernel[(x.shape[0],)](out, x, x.shape[1], BLOCK=block)


def bench_softmax(o, bw):
    for shape in ((4096, 4096), (32768, 1024)):
        x = RNG.standard_normal(shape, dtype=np.float32)
        out = np.empty_like(x)
        run = _softmax_call(x, out, o.library)
        res = run()
        got = res if isinstance(res, np.ndarray) else out
        np.testing.assert_allclose(got, np_softmax(x.astype(np.float64)), rtol=1e-4, atol=1e-6)
        ms = median_ms(run, o.repeat)
        np_ms = median_ms(lambda: np_softmax(x), max(3, o.repeat // 2))
        limit = 2 * x.nbytes / bw / 1e6
        nb = _numba_ms(lambda: NB.softmax(x, np.empty_like(x)), o)
        row(f"softmax {shape[0]}x{shape[1]}", f"{ms:7.2f} ms ({limit:.1f} ms limit)",
            f"numpy {np_ms:7.2f} ms, {nb}", f"{np_ms / ms:5.1f}x numpy ({ok(np_ms / ms >= 8)} >= 8x), "
            f"{ms / limit:3.1f}x limit ({ok(ms <= 2 * limit)} <= 2x)")


def _numba_ms(run, o) -> str:
    """'numba X ms' for the Numba peer (parallel, fastmath), or 'no numba'."""
    if not NB.available():
        return "no numba"
    return f"numba {median_ms(run, max(3, o.repeat // 2)):7.2f} ms"


def _vs_numba(run, ms, o) -> str:
    """' , Nx numba (met/MISSED >= 1.2x)' against the Numba peer, when installed."""
    if not NB.available():
        return ""
    nb = median_ms(run, max(3, o.repeat // 2))
    return f", {nb / ms:4.2f}x numba ({ok(nb / ms >= 1.2)} >= 1.2x)"


def bench_norms(o, bw):
    shape = (8192, 4096)
    x = RNG.standard_normal(shape, dtype=np.float32)
    w = RNG.standard_normal(shape[1], dtype=np.float32)
    b = RNG.standard_normal(shape[1], dtype=np.float32)
    y = np.empty_like(x)
    N = shape[1]
    limit = 2 * x.nbytes / bw / 1e6
    if o.library:
        ln = lambda: kd.kernels.layer_norm(x, w, b, 1e-5)
        rn = lambda: kd.kernels.rms_norm(x, w, 1e-6)
    else:
        ln = lambda: layer_norm_kernel[(shape[0],)](x, y, w, b, N, 1e-5, BLOCK=N)
        rn = lambda: rms_norm_kernel[(shape[0],)](x, y, w, N, 1e-6, BLOCK=N)
    xd = x.astype(np.float64)
    out = np.empty_like(x)
    numba = {"layer_norm": lambda: NB.layer_norm(x, w, b, np.float32(1e-5), out),
             "rms_norm": lambda: NB.rms_norm(x, w, np.float32(1e-6), out)}
    for name, run, peer, ref in (
            ("layer_norm", ln, lambda: np_layer_norm(x, w, b), np_layer_norm(xd, w, b)),
            ("rms_norm", rn, lambda: np_rms_norm(x, w), np_rms_norm(xd, w))):
        res = run()
        np.testing.assert_allclose(res if isinstance(res, np.ndarray) else y, ref, rtol=1e-3, atol=1e-4)
        ms = median_ms(run, o.repeat)
        np_ms = median_ms(peer, max(3, o.repeat // 2))
        row(f"{name} {shape[0]}x{shape[1]}", f"{ms:7.2f} ms ({limit:.1f} ms limit)",
            f"numpy {np_ms:7.2f} ms",
            f"{np_ms / ms:5.1f}x numpy, {ms / limit:3.1f}x limit"
            f"{_vs_numba(numba[name], ms, o)}")


def bench_matmul(o, bw):
    for n in (1024, 2048):
        a = RNG.standard_normal((n, n), dtype=np.float32)
        b = RNG.standard_normal((n, n), dtype=np.float32)
        c = np.empty((n, n), np.float32)
        if o.library:
            run = lambda: kd.kernels.matmul(a, b)
        else:
            bm, bn, bk = o.mm_blocks
            grid = (kd.cdiv(n, bm) * kd.cdiv(n, bn),)
            run = lambda: matmul_kernel[grid](a, b, c, n, n, n, BLOCK_M=bm,
                                              BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8)
        res = run()
        got = res if isinstance(res, np.ndarray) else c
        ref = a @ b
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-2 * np.sqrt(n))
        rep = max(3, o.repeat // 3)
        ms = median_ms(run, rep, warmup=1)
        np_ms = median_ms(lambda: np.matmul(a, b, out=c), rep, warmup=1)
        gf, np_gf = 2 * n**3 / ms / 1e6, 2 * n**3 / np_ms / 1e6
        row(f"matmul {n}^3", f"{ms:7.2f} ms {gf:6.1f} GFLOP/s",
            f"numpy {np_ms:7.2f} ms {np_gf:6.1f} GFLOP/s",
            f"{gf / np_gf:4.2f}x numpy ({ok(gf >= 0.8 * np_gf)} >= 0.8x)")


def bench_attention(o, bw):
    H, S, D = 8, 1024, 64
    q, k, v = (RNG.standard_normal((H, S, D), dtype=np.float32) for _ in range(3))
    out = np.empty_like(q)
    scale = float(1 / np.sqrt(D))
    if o.library and hasattr(kd.kernels, "attention"):
        run = lambda: kd.kernels.attention(q[None], k[None], v[None])
    else:
        bm, bn = o.attn_blocks
        run = lambda: attention_kernel[(kd.cdiv(S, bm), H)](
            q, k, v, out, S, scale, D=D, BLOCK_M=bm, BLOCK_N=bn)
    res = run()
    got = (res.reshape(out.shape) if isinstance(res, np.ndarray) else out)
    np.testing.assert_allclose(got, np_attention(q.astype(np.float64), k, v, scale),
                               rtol=1e-3, atol=1e-4)
    ms = median_ms(run, o.repeat)
    np_ms = median_ms(lambda: np_attention(q, k, v, scale), max(3, o.repeat // 2))
    row(f"attention B1 H{H} S{S} D{D}", f"{ms:7.2f} ms", f"numpy {np_ms:7.2f} ms",
        f"{np_ms / ms:5.1f}x numpy ({ok(np_ms / ms >= 3)} >= 3x)")


def bench_launch(o, bw):
    x = np.ones(16, np.float32)
    out = np.empty_like(x)
    add_kernel[(1,)](x, x, out, 16, BLOCK=16)
    n = 20000
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            add_kernel[(1,)](x, x, out, 16, BLOCK=16)
        best.append((time.perf_counter() - t0) / n * 1e6)
    us = sorted(best)[len(best) // 2]
    row("launch, cached, grid (1,)", f"{us:7.2f} us", "", f"{ok(us <= 10)} <= 10 us")


_COLD = r"""
import time, numpy as np
t0 = time.perf_counter()
import kdsl as kd
t1 = time.perf_counter()
@kd.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, BLOCK: kd.constexpr):
    row = kd.program_id(0)
    cols = kd.arange(0, BLOCK)
    mask = cols < n_cols
    x = kd.load(in_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    num = kd.exp(x - kd.max(x, axis=0))
    kd.store(out_ptr + row * n_cols + cols, num / kd.sum(num, axis=0), mask=mask)
x = np.ones((4, 1024), np.float32); out = np.empty_like(x)
t2 = time.perf_counter()
softmax_kernel[(4,)](out, x, 1024, BLOCK=1024)
t3 = time.perf_counter()
softmax_kernel[(4,)](out, x, 1024, BLOCK=1024)
t4 = time.perf_counter()
print((t1 - t0) * 1e3, (t3 - t2 - (t4 - t3)) * 1e3)
"""


def bench_compile(o, bw):
    import tempfile

    # Two variants: as the process environment has it (here PYTHONDONTWRITEBYTECODE=1, so
    # every kdsl module is byte-compiled again in each process), and as an installed package
    # runs (bytecode cached: written once to a private prefix by a warm-up run, never into the
    # checkout).  The kernel disk cache is off in both.
    base = dict(os.environ, KDSL_CACHE="0")
    pyc = {k: v for k, v in base.items() if k != "PYTHONDONTWRITEBYTECODE"}
    pyc["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="kdsl-pyc-")
    with tempfile.NamedTemporaryFile("w", suffix=".py") as f:  # the frontend reads the source
        f.write(_COLD)
        f.flush()
        for label, env, warm in (("as run here", base, 0), ("bytecode cached", pyc, 1)):
            times = []
            for i in range(3 + warm):
                res = subprocess.run([sys.executable, f.name], env=env, capture_output=True,
                                     text=True, check=True)
                if i >= warm:
                    times.append([float(v) for v in res.stdout.split()])
            imp, ms = sorted(times, key=lambda t: t[1])[1]
            row(f"first compile of softmax ({label})", f"{ms:7.1f} ms",
                f"(import kdsl {imp:.0f} ms)", f"{ok(ms <= 300)} <= 300 ms")


def bench_opencl(o, bw):
    if "opencl" not in kd.available_backends():
        row("softmax on OpenCL", "unavailable", "", "")
        return
    from opencl_peer import softmax_peer_ms

    shape = (4096, 4096)
    x = RNG.standard_normal(shape, dtype=np.float32)
    # like for like: kdsl's IEEE default against the precise peers, kdsl's fast-math opt-in
    # against the fast-math peers
    for variant, fast in (("precise", False), ("fast", True)):
        ours, peers = softmax_peer_ms(x, o.repeat, softmax_kernel, fast_math=fast)
        name, ms = min(((ms, n) for n, ms in peers.items() if n.endswith(variant)))[::-1]
        row(f"softmax 4096^2 OpenCL vs {variant}", f"{ours:7.2f} ms", f"{name} {ms:7.2f} ms",
            f"{ours / ms:4.2f}x peer ({ok(ours <= 1.5 * ms)} <= 1.5x)")


BENCHES = {"add": bench_vector_add, "softmax": bench_softmax, "norms": bench_norms,
           "matmul": bench_matmul, "attention": bench_attention, "launch": bench_launch,
           "compile": bench_compile, "opencl": bench_opencl}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(BENCHES))
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--library", action="store_true", help="use kdsl.kernels where possible")
    ap.add_argument("--mm-blocks", default="128,128,128")  # configs.MATMUL llvm, 1024^2 up
    ap.add_argument("--attn-blocks", default="64,64")
    o = ap.parse_args()
    o.mm_blocks = tuple(int(v) for v in o.mm_blocks.split(","))
    # The kernel disk cache is keyed by kdsl's version, not by the lowering's source: a
    # benchmark of a changed lowering must compile afresh, not load an older build.
    os.environ.setdefault("KDSL_CACHE", "0")
    o.attn_blocks = tuple(int(v) for v in o.attn_blocks.split(","))
    if o.library:
        import kdsl.kernels  # noqa: F401
    print(machine_header())
    bw = copy_gbs(o.repeat)
    print(f"copy bandwidth {bw:.1f} GB/s, {os.cpu_count()} CPUs, OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE')}, OPENBLAS_L2_SIZE="
          f"{os.environ.get('OPENBLAS_L2_SIZE')}")
    for name in o.only.split(","):
        BENCHES[name](o, bw)
    print(load_line(), "(at the end)")


if __name__ == "__main__":
    main()
