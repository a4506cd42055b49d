"""The correctness steps of scripts/gpu_check.sh, run on a machine with an NVIDIA GPU.

    python scripts/gpu_check.py env|smoke|library|sanitize-case NAME [--out DIR] [--dry-run]

Each step prints its details and appends one short section to DIR/summary.md as soon as it
ends, so that a timeout keeps what already ran.  `--dry-run` runs the same code paths with every
device call skipped (the shell script's logic and this file are tested that way in CI, on a
machine with no GPU).  The performance step is benchmarks/gpu_bench.py.

Library checks: every kernel of `kdsl.kernels` at moderate shapes, in float16 and bfloat16, with
NumPy, CuPy and torch CUDA inputs, outputs poisoned with NaN before each launch
(`KDSL_POISON=1`), compared with a float64 reference (torch on upcast inputs where torch has the
operation, else `kdsl.kernels.reference`) by the relative error ||out - ref|| / ||ref||.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# bound of ||out - ref|| / ||ref|| for a 16-bit output computed with float32 accumulation
REL_LIMIT = {"float16": 5e-3, "bfloat16": 2e-2, "float32": 1e-4}


class Summary:
    """summary.md, appended to as each step finishes."""

    def __init__(self, out: Path):
        self.path = out / "summary.md"
        out.mkdir(parents=True, exist_ok=True)

    def section(self, title: str, lines: list[str]) -> None:
        with open(self.path, "a") as f:
            f.write(f"\n## {title}\n\n" + "\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------- arrays


def to_numpy(x: Any) -> np.ndarray:
    """float64 host copy of any array a check produces (NumPy, CuPy, torch, bfloat16 views)."""
    from kdsl.runtime.binding import DTypeView

    if isinstance(x, DTypeView):
        bits = to_numpy_raw(x.array).view(np.uint16)
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    raw = to_numpy_raw(x)
    if raw.dtype.name == "bfloat16":
        return raw.astype(np.float32).astype(np.float64)
    return raw.astype(np.float64)


def to_numpy_raw(x: Any) -> np.ndarray:
    mod = type(x).__module__ or ""
    if mod.startswith("cupy"):
        return x.get()
    if mod.startswith("torch"):
        import torch
        t = x.detach().cpu()
        if t.dtype == torch.bfloat16:
            bits = t.view(torch.int16).numpy().view(np.uint16)
            return (bits.astype(np.uint32) << 16).view(np.float32)
        return t.numpy()
    return np.asarray(x)


def rel_error(out: Any, ref: Any) -> float:
    o, r = to_numpy(out), to_numpy(ref)
    if o.shape != r.shape:
        return float("inf")
    if not np.isfinite(o).all():
        return float("nan")
    return float(np.linalg.norm(o - r) / max(np.linalg.norm(r), 1e-30))


def host_inputs(rng, shapes: dict[str, tuple], dtype: str) -> dict[str, np.ndarray]:
    """float32 host values (already rounded to `dtype`) for each named input."""
    from kdsl.kernels import reference

    out = {}
    for name, shape in shapes.items():
        x = rng.standard_normal(shape).astype(np.float32)
        out[name] = reference.to_float64(reference.cast(x, dtype)).astype(np.float32)
    return out


def as_kind(x: np.ndarray, kind: str, dtype: str) -> Any:
    """`x` (float32 values exactly representable in `dtype`) as a `kind` array of `dtype`."""
    from kdsl.kernels import reference
    from kdsl.runtime.binding import bfloat16_view

    if kind == "numpy":
        return reference.cast(x, dtype)
    if kind == "cupy":
        import cupy as cp
        if dtype == "bfloat16":
            bits = (x.view(np.uint32) >> 16).astype(np.uint16)
            return bfloat16_view(cp.asarray(bits))
        return cp.asarray(x.astype(dtype))
    if kind == "torch":
        import torch
        tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16,
               "float32": torch.float32}[dtype]
        return torch.from_numpy(x).to(device="cuda", dtype=tdt)
    raise ValueError(kind)


# ------------------------------------------------------------------------------- the cases


def library_cases() -> list[tuple[str, dict, Callable, Callable]]:
    """(name, input shapes, kdsl call, float64 reference call) of every library kernel."""
    import kdsl.kernels as K
    from kdsl.kernels import reference as R

    def attn_ref(q, k, v, causal):
        return R.attention(q, k, v, causal=causal)

    return [
        ("softmax", {"x": (256, 1000)}, lambda a: K.softmax(a["x"]),
         lambda a: R.softmax(a["x"])),
        ("layer_norm", {"x": (128, 768), "w": (768,), "b": (768,)},
         lambda a: K.layer_norm(a["x"], a["w"], a["b"]),
         lambda a: R.layer_norm(a["x"], a["w"], a["b"])),
        ("rms_norm", {"x": (128, 1000), "w": (1000,)}, lambda a: K.rms_norm(a["x"], a["w"]),
         lambda a: R.rms_norm(a["x"], a["w"])),
        ("matmul", {"a": (300, 256), "b": (256, 200)}, lambda a: K.matmul(a["a"], a["b"]),
         lambda a: R.matmul(a["a"], a["b"])),
        ("matmul_gelu", {"a": (128, 128), "b": (128, 96), "bias": (96,)},
         lambda a: K.matmul(a["a"], a["b"], a["bias"], "gelu"),
         lambda a: R.matmul(a["a"], a["b"], a["bias"], "gelu")),
        ("mlp", {"x": (64, 256), "g": (256, 512), "u": (256, 512), "d": (512, 256)},
         lambda a: K.mlp(a["x"], a["g"], a["u"], a["d"]),
         lambda a: R.mlp(a["x"], a["g"], a["u"], a["d"])),
        ("attention", {"q": (2, 4, 256, 64), "k": (2, 4, 256, 64), "v": (2, 4, 256, 64)},
         lambda a: K.attention(a["q"], a["k"], a["v"]),
         lambda a: attn_ref(a["q"], a["k"], a["v"], False)),
        ("attention_causal", {"q": (2, 4, 200, 64), "k": (2, 4, 200, 64),
                              "v": (2, 4, 200, 64)},
         lambda a: K.attention(a["q"], a["k"], a["v"], causal=True),
         lambda a: attn_ref(a["q"], a["k"], a["v"], True)),
    ]


# ----------------------------------------------------------------------------------- steps


def step_env(args, summary: Summary) -> int:
    import kdsl as kd

    lines = [f"- kdsl {kd.__version__}, Python {sys.version.split()[0]}, "
             f"NumPy {np.__version__}"]
    for mod in ("cupy", "torch", "triton"):
        try:
            m = __import__(mod)
            lines.append(f"- {mod} {m.__version__}")
        except Exception as e:
            lines.append(f"- {mod}: not importable ({type(e).__name__})")
    if not args.dry_run:
        from kdsl.backends.cuda import CUDABackend
        b = CUDABackend()
        lines.append(f"- available backends {kd.available_backends()}; arch {b.arch()}; "
                     f"caps {sorted(b.target(4).caps)}")
    print("\n".join(lines))
    summary.section("environment", lines)
    return 0


def step_smoke(args, summary: Summary) -> int:
    """Vector add, a kernel above 48 KiB of dynamic shared memory, a bf16 kernel."""
    import kdsl as kd

    @kd.jit
    def add(x, y, out, n, BLOCK: kd.constexpr):
        offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
        m = offs < n
        kd.store(out + offs, kd.load(x + offs, mask=m) + kd.load(y + offs, mask=m), mask=m)

    @kd.jit
    def big_sum(x, out, N: kd.constexpr):
        # a 16384-element float32 row reduced by one program: its staging exceeds 48 KiB
        v = kd.load(x + kd.program_id(0) * N + kd.arange(0, N))
        kd.store(out + kd.program_id(0), kd.sum(v * v, axis=0))

    @kd.jit
    def bf16_axpy(x, y, out, a, n, BLOCK: kd.constexpr):
        offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
        m = offs < n
        r = a * kd.load(x + offs, mask=m) + kd.load(y + offs, mask=m)
        kd.store(out + offs, r.to(kd.bfloat16), mask=m)

    rng = np.random.default_rng(0)
    results: list[str] = []
    failed = 0

    def case(name: str, fn: Callable[[], str]) -> None:
        nonlocal failed
        if args.dry_run:
            results.append(f"- {name}: skipped (dry run)")
            return
        t = time.perf_counter()
        try:
            detail = fn()
            results.append(f"- {name}: ok {detail} ({time.perf_counter() - t:.1f} s)")
        except Exception as e:
            failed += 1
            traceback.print_exc()
            results.append(f"- {name}: FAILED {type(e).__name__}: {str(e)[:200]}")

    def vector_add() -> str:
        import cupy as cp
        n = 1_000_003
        x = cp.asarray(rng.standard_normal(n, dtype=np.float32))
        y = cp.asarray(rng.standard_normal(n, dtype=np.float32))
        out = cp.full(n, cp.nan, cp.float32)
        add[(kd.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        err = float(cp.abs(out - (x + y)).max())
        assert err == 0.0, f"max error {err}"
        return "(CuPy arrays, exact)"

    def dynamic_smem() -> str:
        import cupy as cp
        N = 16384
        x = rng.standard_normal((8, N), dtype=np.float32)
        out = cp.full(8, cp.nan, cp.float32)
        ck = big_sum.compile(cp.asarray(x), out, N=N, backend="cuda", num_warps=8)
        big_sum[(8,)](cp.asarray(x), out, N=N, num_warps=8)
        ref = (x.astype(np.float64) ** 2).sum(1)
        err = rel_error(out, ref)
        assert err < 1e-5, f"relative error {err}"
        return f"(shared {ck.ir.get('resources', '?').strip()[:60]})"

    def bf16() -> str:
        import cupy as cp
        from kdsl.runtime.binding import bfloat16_view
        n = 5000
        xs = host_inputs(rng, {"x": (n,), "y": (n,)}, "bfloat16")
        bits = lambda v: cp.asarray((v.view(np.uint32) >> 16).astype(np.uint16))  # noqa: E731
        out = cp.full(n, 0x7FC0, cp.uint16)
        bf16_axpy[(kd.cdiv(n, 512),)](bfloat16_view(bits(xs["x"])),
                                      bfloat16_view(bits(xs["y"])),
                                      bfloat16_view(out), 1.5, n, BLOCK=512)
        ref = 1.5 * xs["x"].astype(np.float64) + xs["y"]
        err = rel_error(bfloat16_view(out), ref)
        assert err < 1e-2, f"relative error {err}"
        return f"(rel err {err:.1e})"

    case("vector add", vector_add)
    case("dynamic shared memory > 48 KiB", dynamic_smem)
    case("bfloat16 kernel", bf16)
    print("\n".join(results))
    summary.section("smoke", results)
    return 1 if failed else 0


def step_library(args, summary: Summary) -> int:
    os.environ["KDSL_POISON"] = "1"  # every output starts as NaN: unwritten elements fail
    rng = np.random.default_rng(1)
    kinds = ["numpy", "cupy", "torch"]
    lines, failed = [], 0
    rows = []
    for name, shapes, call, ref in library_cases():
        for dtype in ("float16", "bfloat16"):
            host = host_inputs(rng, shapes, dtype)
            expected = ref({k: v.astype(np.float64) for k, v in host.items()})
            cells = []
            for kind in kinds:
                if args.dry_run:
                    cells.append("dry")
                    continue
                try:
                    out = call({k: as_kind(v, kind, dtype) for k, v in host.items()})
                    err = rel_error(out, expected)
                    ok = err <= REL_LIMIT[dtype]
                    failed += not ok
                    cells.append(f"{err:.1e}" + ("" if ok else " FAIL"))
                except Exception as e:
                    failed += 1
                    traceback.print_exc()
                    cells.append(f"ERROR {type(e).__name__}")
            rows.append(f"| {name} | {dtype} | " + " | ".join(cells) + " |")
    lines = [f"relative error vs float64 (limit fp16 {REL_LIMIT['float16']:g}, bf16 "
             f"{REL_LIMIT['bfloat16']:g}); outputs poisoned with NaN", "",
             "| kernel | dtype | " + " | ".join(kinds) + " |",
             "|---|---|" + "---|" * len(kinds), *rows]
    print("\n".join(lines))
    summary.section("library kernels (fp16/bf16; NumPy, CuPy, torch CUDA inputs)", lines)
    return 1 if failed else 0


SANITIZE_CASES = {
    "softmax": lambda K, cp: K.softmax(cp.random.standard_normal((64, 1000), dtype=cp.float32)),
    "layer_norm": lambda K, cp: K.layer_norm(cp.random.standard_normal((32, 768),
                                                                       dtype=cp.float32),
                                             cp.ones(768, cp.float32), cp.zeros(768, cp.float32)),
    "matmul": lambda K, cp: K.matmul(cp.random.standard_normal((96, 128)).astype(cp.float16),
                                     cp.random.standard_normal((128, 80)).astype(cp.float16)),
    "attention": lambda K, cp: K.attention(
        *(cp.random.standard_normal((1, 2, 128, 64)).astype(cp.float16) for _ in range(3)),
        causal=True),
}


def step_sanitize_case(args, summary: Summary) -> int:
    """One small library call (run by the shell script under compute-sanitizer)."""
    if args.dry_run:
        print(f"sanitize case {args.case}: skipped (dry run)")
        return 0
    import cupy as cp

    import kdsl.kernels as K
    out = SANITIZE_CASES[args.case](K, cp)
    cp.cuda.Device().synchronize()
    print(f"sanitize case {args.case}: ran, output shape {getattr(out, 'shape', '?')}")
    return 0


STEPS = {"env": step_env, "smoke": step_smoke, "library": step_library,
         "sanitize-case": step_sanitize_case}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=sorted(STEPS))
    p.add_argument("case", nargs="?", choices=sorted(SANITIZE_CASES))
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/kdsl-gpu-out"))
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    if args.step == "sanitize-case" and args.case is None:
        p.error("sanitize-case needs a case name: " + ", ".join(SANITIZE_CASES))
    return STEPS[args.step](args, Summary(Path(args.out)))


if __name__ == "__main__":
    sys.exit(main())
