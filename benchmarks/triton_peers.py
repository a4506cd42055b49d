"""Triton peers of the GPU benchmark: the Triton-form kernels of tests/triton_compat/kernels
(matmul, fused softmax, layer norm, fused attention, written in the idioms of Triton's
tutorials), launched by Triton on torch CUDA tensors, and the same source ported to kdsl by the
mechanical rename (tests/triton_compat/port.py) for an identical-source comparison.

Triton is a benchmark dependency only; this module is imported by benchmarks/gpu_bench.py on a
machine with a GPU, torch and Triton.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "tests" / "triton_compat" / "kernels"
_modules: dict[tuple[str, str], ModuleType] = {}


def _load(name: str, flavour: str) -> ModuleType:
    """kernels/<name>.py as Triton ("triton") or as its kdsl port ("kdsl")."""
    key = (name, flavour)
    if key in _modules:
        return _modules[key]
    path = KERNELS / f"{name}.py"
    if flavour == "kdsl":
        sys.path.insert(0, str(ROOT / "tests" / "triton_compat"))
        from port import port  # noqa: PLC0415
        folder = Path(tempfile.mkdtemp(prefix="kdsl-ported-"))
        path_out = folder / f"kdsl_ported_{name}.py"
        path_out.write_text(port(path.read_text()))
        path = path_out
    spec = importlib.util.spec_from_file_location(f"peer_{flavour}_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    _modules[key] = mod
    return mod


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def num_sms() -> int:
    import torch
    return torch.cuda.get_device_properties(0).multi_processor_count


def matmul(a: Any, b: Any, flavour: str = "triton") -> Any:
    """c = a @ b (torch CUDA tensors of one 16-bit dtype) by the persistent matmul."""
    import torch
    k = _load("matmul", flavour)
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    sms = num_sms()
    grid = (min(sms, -(-M // 128) * -(-N // 128)),)
    args = (a, b, c, None, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
            c.stride(0), c.stride(1))
    meta = dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64, GROUP_SIZE_M=8,
                NUM_SMS=grid[0], ACTIVATION="none", num_warps=8, num_stages=3)
    if flavour == "kdsl":
        args = _as_cupy(args)
    k.persistent_matmul[grid](*args, **meta)
    return c


def softmax(x: Any, flavour: str = "triton") -> Any:
    import torch
    k = _load("softmax", flavour)
    rows, cols = x.shape
    y = torch.empty_like(x)
    grid = (min(rows, num_sms() * 4),)
    args = (y, x, x.stride(0), y.stride(0), rows, cols)
    if flavour == "kdsl":
        args = _as_cupy(args)
    k.softmax_rows[grid](*args, BLOCK_SIZE=_next_pow2(cols), num_stages=2, num_warps=8)
    return y


def layer_norm(x: Any, w: Any, b: Any, eps: float = 1e-5) -> Any:
    import torch
    k = _load("layernorm", "triton")
    M, N = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(M, device=x.device, dtype=torch.float32)
    rstd = torch.empty(M, device=x.device, dtype=torch.float32)
    block = min(65536 // x.element_size(), _next_pow2(N))
    k.ln_forward[(M,)](x, y, w, b, mean, rstd, x.stride(0), N, eps, BLOCK_SIZE=block,
                       num_warps=8)
    return y


def attention(q: Any, k: Any, v: Any, causal: bool, scale: float) -> Any:
    import torch
    mod = _load("attention", "triton")
    Z, H, N, D = q.shape
    o = torch.empty_like(q)
    m = torch.empty((Z * H, N), device=q.device, dtype=torch.float32)
    BLOCK_M, BLOCK_N = 128, 64
    grid = (-(-N // BLOCK_M), Z * H, 1)
    mod.attn_fwd[grid](q, k, v, scale, m, o, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
                       Z, H, N_CTX=N, HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                       STAGE=3 if causal else 1, num_warps=8, num_stages=3)
    return o


def _as_cupy(args: tuple) -> tuple:
    """torch CUDA tensors as CuPy arrays over the same memory (kdsl's cuda backend takes both;
    CuPy is the direct path)."""
    import cupy as cp
    import torch
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            if a.dtype == torch.bfloat16:
                from kdsl.runtime.binding import bfloat16_view
                a = bfloat16_view(cp.from_dlpack(a.view(torch.int16)))
            else:
                a = cp.from_dlpack(a)
        out.append(a)
    return tuple(out)
