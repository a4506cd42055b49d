"""Importing kernels the tools are pointed at: a Python file as a module, and `FILE.py:KERNEL`
(the convention of `kdsl dump`, `kdsl compare` and `kdsl bench`)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any


def load_module(path: str | os.PathLike, name: str | None = None) -> Any:
    """Import a Python file as a module (its folder goes on sys.path for its own imports)."""
    file = Path(path)
    spec = importlib.util.spec_from_file_location(name or file.stem, file)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.parent.resolve()))
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def load_kernel(target: str, command: str = "kdsl dump") -> tuple[Any, Any, str]:
    """(module, kernel, kernel name) of `FILE.py:KERNEL`; SystemExit naming `command` when the
    file or the kernel is missing."""
    path, _, name = target.rpartition(":")
    if not path or not name:
        raise SystemExit(f"{command}: expected FILE.py:KERNEL")
    file = Path(path)
    if not file.is_file():
        raise SystemExit(f"{command}: no such file {path}")
    module = load_module(file)
    kernel = getattr(module, name, None)
    if kernel is None or not hasattr(kernel, "compile"):
        raise SystemExit(f"{command}: {path} has no @kd.jit kernel {name!r}")
    return module, kernel, name


__all__ = ["load_kernel", "load_module"]
