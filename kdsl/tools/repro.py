"""Re-running a repro bundle (`kdsl compare BUNDLE`, the bundle's own repro.py): the recorded
inputs, kernel and backend, compared again with the recorded expected outputs."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kdsl.ir import types as T
from kdsl.kernels.cases import library_function
from kdsl.runtime.dtype_views import DTypeView

from .bundle import meta_decode, safe_name
from .compare import compare
from .loader import load_module


def run_bundle(folder: str | os.PathLike, backends: Sequence[str] | None = None) -> int:
    """Re-run the comparison a bundle recorded; prints the report, returns its exit status
    (1 on a mismatch, 2 when nothing could be compared)."""
    folder = Path(folder)
    meta = json.loads((folder / "meta.json").read_text())
    data = np.load(folder / "inputs.npz")
    views = meta.get("views", {})
    args = tuple(DTypeView(data[f"arg{i}"], T.BY_NAME[views[str(i)]]) if str(i) in views
                 else data[f"arg{i}"][()] if data[f"arg{i}"].ndim == 0 else data[f"arg{i}"]
                 for i in range(meta["n_args"]))
    tol = {"acc_dtype": meta.get("acc_dtype"), "k_out": meta.get("k_out", 1)}
    expected = {k: data[f"expected_{k}"] for k in meta["outputs"]}
    kwargs = {k: meta_decode(v) for k, v in meta["kwargs"].items()}
    backends = list(backends or [meta["backend"]])

    def reference(*_a, **_k):
        return dict(expected)

    reference.__module__, reference.__name__ = "bundle", "inputs.npz"

    if meta["kind"] == "jit":
        file = meta["module_file"]
        if not file or not Path(file).is_file():
            file = folder / "kernel_source.py"
        kernel = getattr(load_module(file, f"kdsl_repro_{safe_name(meta['name'])}"), meta["name"])
        report = compare(kernel, args, backends, reference, grid=tuple(meta["grid"]),
                         reduction_size=meta["reduction_size"], num_warps=meta["num_warps"],
                         bundle=False, **tol, **kwargs)
    else:
        fn, _ = library_function(meta["name"])
        report = compare(fn, args, backends, reference, reduction_size=meta["reduction_size"],
                         bundle=False, **tol, **kwargs)
    print(report.table())
    return report.exit_status


__all__ = ["run_bundle"]
