"""GPU performance of kdsl's CUDA backend next to its peers, in one process, on device arrays
only (no host copies inside a timing), CUDA-event medians of repeated runs.

    python benchmarks/gpu_bench.py [--json out.json] [--dry-run] [--quick]

Ceilings measured in the same run: a device-to-device copy (bytes read + written) and a bf16
`torch.matmul` at 8192^3.  Cases: matmul fp16/bf16 4096^3 (cuBLAS through CuPy and torch, and
the Triton persistent matmul), flash attention [4, 32, 2048, 128] causal and not (torch SDPA,
Triton fused attention), softmax / layer_norm / rms_norm (torch, Triton), and a decode step:
paged attention of one sequence and the int4 matmul of one token, each against itself with
its split (flash-decoding, split-K) turned off.  Every case runs in
its own try block: a failure is reported in its row and the run goes on.  The table comes last:
time, TFLOP/s or GB/s, the best peer and the ratio peer time / kdsl time (> 1: kdsl faster),
and kdsl's fraction of the measured ceiling.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


@dataclass
class Row:
    case: str
    unit: str                 # "TFLOP/s" or "GB/s"
    work: float               # FLOP or bytes of one call
    kdsl_ms: float | None = None
    peers: dict[str, float] = field(default_factory=dict)
    error: str = ""

    def rate(self, ms: float | None) -> float | None:
        if ms is None:
            return None
        return self.work / ms / 1e9 if self.unit == "TFLOP/s" else self.work / ms / 1e6


def cuda_ms(fn: Callable[[], Any], repeat: int = 20, warmup: int = 3) -> float:
    """Median of `repeat` CUDA-event timings of fn() after `warmup` calls."""
    import cupy as cp
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(repeat):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


def _try(row: Row, name: str, fn: Callable[[], float]) -> None:
    try:
        ms = fn()
    except Exception as e:  # a failed peer or kernel is a row entry, never the end of the run
        traceback.print_exc()
        row.error += f"{name}: {type(e).__name__}: {str(e)[:120]}; "
        return
    if name == "kdsl":
        row.kdsl_ms = ms
    else:
        row.peers[name] = ms


def rel_err(out: Any, ref: Any) -> float:
    import cupy as cp
    o, r = cp.asarray(out, dtype=cp.float64), cp.asarray(ref, dtype=cp.float64)
    return float(cp.linalg.norm(o - r) / cp.linalg.norm(r))


def bench(quick: bool) -> tuple[list[Row], dict[str, float]]:
    import cupy as cp
    import torch

    import kdsl.kernels as K
    from kdsl.runtime.binding import bfloat16_view

    try:
        import triton_peers as tp
    except Exception as e:  # no Triton: its columns stay empty
        print(f"Triton peers unavailable: {type(e).__name__}: {e}")
        tp = None
    dev = torch.device("cuda")
    rows: list[Row] = []
    ceil: dict[str, float] = {}

    def cupy_of(t: torch.Tensor) -> Any:
        if t.dtype == torch.bfloat16:
            return bfloat16_view(cp.from_dlpack(t.view(torch.int16)))
        return cp.from_dlpack(t)

    # ceilings
    n = (1 << 28) if not quick else (1 << 24)
    src = torch.empty(n, dtype=torch.float32, device=dev).normal_()
    dst = torch.empty_like(src)
    ms = cuda_ms(lambda: dst.copy_(src))
    ceil["copy GB/s"] = 8 * n / ms / 1e6
    s = 8192 if not quick else 2048
    a = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    b = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    ms = cuda_ms(lambda: a @ b, repeat=10)
    ceil["bf16 matmul TFLOP/s"] = 2 * s ** 3 / ms / 1e9

    # matmul
    s = 4096 if not quick else 1024
    for dt in (torch.float16, torch.bfloat16):
        name = str(dt).split(".")[-1]
        row = Row(f"matmul {name} {s}^3", "TFLOP/s", 2 * s ** 3)
        a = torch.randn(s, s, device=dev, dtype=dt)
        b = torch.randn(s, s, device=dev, dtype=dt)
        ref = (a.float() @ b.float())
        ca, cb = cupy_of(a), cupy_of(b)

        def kd_mm(ca=ca, cb=cb, ref=ref):
            out = K.matmul(ca, cb)
            return out
        out = None
        try:
            out = kd_mm()
            row.error += f"err {rel_err(_tensor_values(out), cp.from_dlpack(ref)):.1e}; "
        except Exception as e:
            traceback.print_exc()
            row.error += f"kdsl: {type(e).__name__}: {str(e)[:120]}; "
        if out is not None:
            _try(row, "kdsl", lambda: cuda_ms(kd_mm, repeat=10))
        _try(row, "torch (cuBLAS)", lambda a=a, b=b: cuda_ms(lambda: a @ b, repeat=10))
        if dt == torch.float16:
            _try(row, "cupy (cuBLAS)", lambda ca=ca, cb=cb: cuda_ms(lambda: ca @ cb, repeat=10))
        if tp is not None:
            _try(row, "triton", lambda a=a, b=b: cuda_ms(lambda: tp.matmul(a, b), repeat=10))
            _try(row, "kdsl (triton source)",
                 lambda a=a, b=b: cuda_ms(lambda: tp.matmul(a, b, "kdsl"), repeat=5))
        rows.append(row)

    # attention
    Z, H, N, D = (4, 32, 2048, 128) if not quick else (1, 4, 512, 64)
    q, k, v = (torch.randn(Z, H, N, D, device=dev, dtype=torch.float16) for _ in range(3))
    scale = D ** -0.5
    for causal in (False, True):
        flops = 4 * Z * H * N * N * D * (0.5 if causal else 1.0)
        row = Row(f"attention fp16 {Z}x{H}x{N}x{D}{' causal' if causal else ''}", "TFLOP/s",
                  flops)
        cq, ck, cv = cupy_of(q), cupy_of(k), cupy_of(v)
        _try(row, "kdsl", lambda causal=causal: cuda_ms(
            lambda: K.attention(cq, ck, cv, causal=causal, scale=scale), repeat=5))
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def sdpa(causal=causal):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=causal, scale=scale)
        _try(row, "torch SDPA flash", lambda: cuda_ms(sdpa, repeat=10))
        if tp is not None:
            _try(row, "triton", lambda causal=causal: cuda_ms(
                lambda: tp.attention(q, k, v, causal, scale), repeat=10))
        rows.append(row)

    # memory-bound kernels
    R, C = (8192, 4096) if not quick else (1024, 1024)
    for dt in (torch.float16, torch.float32):
        name = str(dt).split(".")[-1]
        x = torch.randn(R, C, device=dev, dtype=dt)
        w = torch.randn(C, device=dev, dtype=dt)
        bb = torch.randn(C, device=dev, dtype=dt)
        nbytes = 2 * x.numel() * x.element_size()
        cx, cw, cb = cupy_of(x), cupy_of(w), cupy_of(bb)
        row = Row(f"softmax {name} {R}x{C}", "GB/s", nbytes)
        _try(row, "kdsl", lambda: cuda_ms(lambda: K.softmax(cx)))
        _try(row, "torch", lambda x=x: cuda_ms(lambda: torch.softmax(x, -1)))
        if tp is not None:
            _try(row, "triton", lambda x=x: cuda_ms(lambda: tp.softmax(x)))
            _try(row, "kdsl (triton source)", lambda x=x: cuda_ms(lambda: tp.softmax(x, "kdsl")))
        rows.append(row)
        row = Row(f"layer_norm {name} {R}x{C}", "GB/s", nbytes)
        _try(row, "kdsl", lambda: cuda_ms(lambda: K.layer_norm(cx, cw, cb)))
        _try(row, "torch", lambda x=x, w=w, bb=bb: cuda_ms(
            lambda: torch.nn.functional.layer_norm(x, (C,), w, bb)))
        if tp is not None:
            _try(row, "triton", lambda x=x, w=w, bb=bb: cuda_ms(lambda: tp.layer_norm(x, w, bb)))
        rows.append(row)
        row = Row(f"rms_norm {name} {R}x{C}", "GB/s", nbytes)
        _try(row, "kdsl", lambda: cuda_ms(lambda: K.rms_norm(cx, cw)))
        if hasattr(torch.nn.functional, "rms_norm"):
            _try(row, "torch", lambda x=x, w=w: cuda_ms(
                lambda: torch.nn.functional.rms_norm(x, (C,), w, 1e-6)))
        rows.append(row)
    rows += _decode_rows(quick)
    return rows, ceil


def _unsplit(fn: Callable[[], Any]) -> Callable[[], Any]:
    """`fn` run with the GPU profiles' splits off (configs.QUANT_SPLIT_K, DECODE_SPLIT): the
    same kernels over whole sequences and whole K, the yardstick of the splits."""
    from kdsl.kernels import configs

    def run() -> Any:
        saved = configs.QUANT_SPLIT_K, configs.DECODE_SPLIT
        configs.QUANT_SPLIT_K = configs.DECODE_SPLIT = {"default": {}}
        try:
            return fn()
        finally:
            configs.QUANT_SPLIT_K, configs.DECODE_SPLIT = saved
    return run


def _split_row(row: Row, setup: Callable[[], Callable[[], Any]]) -> Row:
    """`row` timed for the call `setup()` makes, with its split and without (`_unsplit`), and
    the two results' difference; a failure is the row's error."""
    try:
        call = setup()
        ref = _unsplit(call)()
        row.error += f"split vs whole {rel_err(call(), ref):.1e}; "
        _try(row, "kdsl", lambda: cuda_ms(call))
        _try(row, "kdsl unsplit", lambda: cuda_ms(_unsplit(call)))
    except Exception as e:
        traceback.print_exc()
        row.error += f"setup: {type(e).__name__}: {str(e)[:120]}; "
    return row


def _decode_rows(quick: bool) -> list[Row]:
    """A decode step: paged attention for one sequence and the int4 weight-only matmul of one
    token (GB/s of the bytes each must read), with and without their splits."""
    import cupy as cp
    import kdsl.kernels as K

    rng = cp.random.default_rng(0)
    half = lambda *shape: rng.standard_normal(shape, dtype=cp.float32).astype(cp.float16)  # noqa: E731
    H, KVH, D, BS = 32, 8, 128, 16
    S = 4096 if not quick else 512
    nb = S // BS

    def decode() -> Callable[[], Any]:
        kc, vc, q = half(nb, BS, KVH, D), half(nb, BS, KVH, D), half(1, H, D)
        table = cp.arange(nb, dtype=cp.int32).reshape(1, nb)
        lens = cp.array([S], dtype=cp.int32)
        return lambda: K.decode_attention(q, kc, vc, table, lens)

    Kd = N = 4096 if not quick else 1024
    w = rng.integers(0, 256, (Kd // 2, N), dtype=cp.uint8)
    sc = (rng.random((Kd // 128, N), dtype=cp.float32) * 0.01).astype(cp.float16)

    def quant() -> Callable[[], Any]:
        x = half(1, Kd)
        return lambda: K.quant_matmul(x, w, sc, 128, 4)

    return [_split_row(Row(f"decode fp16 B1 H{H} KVH{KVH} S{S} D{D}", "GB/s",
                           2 * S * KVH * D * 2), decode),
            _split_row(Row(f"quant int4 M=1 K=N={Kd} fp16", "GB/s", w.nbytes + sc.nbytes),
                       quant)]


def _tensor_values(out: Any) -> Any:
    """A CuPy float array of a library result (a bfloat16 view is widened)."""
    import cupy as cp

    from kdsl.runtime.binding import DTypeView
    if isinstance(out, DTypeView):
        return (out.array.astype(cp.uint32) << 16).view(cp.float32)
    return out


def table(rows: list[Row], ceil: dict[str, float]) -> str:
    lines = ["| case | kdsl ms | kdsl rate | best peer | peer ms | peer/kdsl | % of ceiling |"
             " notes |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        best = min(r.peers.items(), key=lambda kv: kv[1]) if r.peers else (None, None)
        rate = r.rate(r.kdsl_ms)
        lim = ceil.get("bf16 matmul TFLOP/s" if r.unit == "TFLOP/s" else "copy GB/s")
        frac = f"{100 * rate / lim:.0f}%" if rate and lim else ""
        ratio = f"{best[1] / r.kdsl_ms:.2f}" if best[1] and r.kdsl_ms else ""
        fmt = lambda v: f"{v:.3f}" if v is not None else "-"  # noqa: E731
        lines.append(f"| {r.case} | {fmt(r.kdsl_ms)} | "
                     f"{f'{rate:.1f} {r.unit}' if rate else '-'} | {best[0] or '-'} | "
                     f"{fmt(best[1])} | {ratio} | {frac} | {r.error.strip()} |")
    lines.append("")
    lines.append("ceilings: " + ", ".join(f"{k} {v:.0f}" for k, v in ceil.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write every figure to this file")
    p.add_argument("--dry-run", action="store_true", help="no device: print the empty table")
    p.add_argument("--quick", action="store_true", help="small shapes (a smoke test)")
    args = p.parse_args(argv)
    if args.dry_run:
        rows, ceil = [Row("matmul float16 4096^3", "TFLOP/s", 2 * 4096 ** 3)], {}
    else:
        rows, ceil = bench(args.quick)
    print(table(rows, ceil), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"ceilings": ceil,
                                               "rows": [asdict(r) for r in rows]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
