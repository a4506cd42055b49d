"""Repro bundles: on a mismatch, `kd.testing.compare` writes inputs.npz, meta.json, a copy of
the kernel's source file, every IR stage and the generated source (named with the backend's
`source_suffix`), and repro.sh / repro.py, whose run reproduces the comparison on the failing
backend (`kdsl/tools/repro.py`; exit 1 while it still fails)."""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from kdsl.backends import get_backend
from kdsl.runtime.launches import Launch

from .arrays import host_array
from .program_map import grid_tuple
from .report import CompareReport


def safe_name(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)


def write_bundle(report: CompareReport, fn: Any, jit: bool, args: tuple, kwargs: dict,
                 grid: Any, backend: str, expected: dict[str, np.ndarray],
                 launches: list[Launch], num_warps: int | None,
                 bundle_dir: str | os.PathLike | None, repro_command: str | None) -> Path:
    """Write the repro bundle of a failed comparison on `backend`; returns its folder."""
    root = Path(bundle_dir or os.environ.get("KDSL_REPRO_DIR") or "kdsl-repro")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = root / f"{safe_name(report.name)}-{backend}-{stamp}"
    n = 1
    while out.exists():
        n += 1
        out = root / f"{safe_name(report.name)}-{backend}-{stamp}-{n}"
    (out / "ir").mkdir(parents=True)

    views = {str(i): a.dtype.name for i, a in enumerate(args) if hasattr(a, "array")}
    arrays = {f"arg{i}": host_array(a) for i, a in enumerate(args)}
    arrays.update({f"expected_{k}": v for k, v in expected.items()})
    np.savez(out / "inputs.npz", **arrays)

    src_file = inspect.getsourcefile(getattr(fn, "fn", fn))
    if src_file and Path(src_file).is_file():
        shutil.copy(src_file, out / "kernel_source.py")

    # every IR stage and the generated source of each kernel the failing run launched
    kernels = [(fn, args, kwargs)] if jit else [(ln.jit, ln.args, ln.kwargs) for ln in launches]
    seen = set()
    for j, (kern, kargs, kkw) in enumerate(kernels):
        try:
            ck = kern.compile(*kargs, backend=backend, num_warps=num_warps, **kkw)
        except Exception as e:
            (out / "ir" / f"{j}_compile_error.txt").write_text(f"{type(e).__name__}: {e}\n")
            continue
        if id(ck) in seen:
            continue
        seen.add(id(ck))
        prefix = f"{j}_{safe_name(kern.__name__)}" if len(kernels) > 1 else safe_name(kern.__name__)
        for s, (stage, text) in enumerate(ck.ir.items()):
            (out / "ir" / f"{prefix}.{s:02d}.{safe_name(stage)}.txt").write_text(text)
        ext = get_backend(backend).source_suffix
        (out / f"{prefix}.{ext}").write_text(ck.source)

    meta = {
        "kind": "jit" if jit else "library",
        "name": report.name,
        "module_file": str(Path(src_file).resolve()) if src_file else None,
        "backend": backend,
        "kwargs": {k: meta_value(v) for k, v in kwargs.items()},
        "grid": list(grid_tuple(fn, grid, args, kwargs)) if jit else None,
        "n_args": len(args),
        "outputs": list(expected),
        "reduction_size": report.reduction_size,
        "acc_dtype": report.acc_dtype,
        "k_out": report.k_out,
        "views": views,
        "num_warps": num_warps,
        "command": repro_command,
        "report": report.to_dict(),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    (out / "repro.py").write_text(
        '"""Reproduces a failed kdsl comparison: exit 1 while the backend still disagrees."""\n'
        "import sys\nfrom pathlib import Path\n\nfrom kdsl.tools.repro import run_bundle\n\n"
        "sys.exit(run_bundle(Path(__file__).resolve().parent))\n")
    lines = ["#!/bin/sh", "# Reproduces the mismatch; exits 1 while it persists.",
             'cd "$(dirname "$0")" || exit 2']
    if repro_command:
        lines.append(f"# the original command: {repro_command}")
    lines.append(f'exec "{sys.executable}" repro.py "$@"')
    (out / "repro.sh").write_text("\n".join(lines) + "\n")
    (out / "repro.sh").chmod(0o755)
    (out / "report.txt").write_text(report.table() + "\n")
    return out


def meta_value(v: Any) -> Any:
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if hasattr(v, "kind") and hasattr(v, "bits"):
        return {"dtype": v.name}
    return {"repr": repr(v)}


def meta_decode(v: Any) -> Any:
    if isinstance(v, dict) and "dtype" in v:
        from kdsl.ir import types as T
        return T.BY_NAME[v["dtype"]]
    if isinstance(v, dict):
        raise ValueError(f"cannot rebuild keyword argument {v['repr']}")
    return v


__all__ = ["meta_decode", "meta_value", "safe_name", "write_bundle"]
