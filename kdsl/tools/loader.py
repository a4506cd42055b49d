"""Importing kernels the tools are pointed at: a Python file as a module, and `FILE.py:KERNEL`
(the convention of `kdsl dump`, `kdsl compare` and `kdsl bench`)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any


def _package_name(file: Path) -> tuple[Path, str] | None:
    """(folder above the package, dotted module name) of a file inside a package (folders
    with `__init__.py`), so that its relative imports work; None for a standalone file."""
    parts = [file.stem]
    folder = file.parent.resolve()
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return (folder, ".".join(parts)) if len(parts) > 1 else None


def load_module(path: str | os.PathLike, name: str | None = None) -> Any:
    """Import a Python file as a module (its folder goes on sys.path for its own imports); a
    file inside a package is imported as that package's module."""
    file = Path(path)
    pkg = None if name else _package_name(file)
    if pkg is not None:
        root, dotted = pkg
        sys.path.insert(0, str(root))
        return importlib.import_module(dotted)
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
    try:
        module = load_module(file)
    except Exception as e:  # noqa: BLE001 - the user's file failed to import: one line
        raise SystemExit(f"{command}: importing {path} failed: {type(e).__name__}: {e}"
                         ) from None
    kernel = getattr(module, name, None)
    if kernel is None or not hasattr(kernel, "compile"):
        raise SystemExit(f"{command}: {path} has no @kd.jit kernel {name!r}")
    return module, kernel, name


__all__ = ["load_kernel", "load_module"]
