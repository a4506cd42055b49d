"""Loading the Triton-form kernels of `kernels/` as kdsl modules: each file is ported by the
mechanical rename of port.py, written to a temporary folder (kdsl reads kernel source from
files) and imported once per session."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from .port import port

KERNELS = Path(__file__).with_name("kernels")


@pytest.fixture(scope="session")
def ported(tmp_path_factory):
    """`ported("softmax")` -> the kdsl module ported from kernels/softmax.py."""
    folder = tmp_path_factory.mktemp("ported")
    modules: dict[str, object] = {}

    def load(name: str):
        if name not in modules:
            path = folder / f"kdsl_ported_{name}.py"
            path.write_text(port((KERNELS / f"{name}.py").read_text()))
            spec = importlib.util.spec_from_file_location(f"kdsl_ported_{name}", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            modules[name] = module
        return modules[name]

    return load


def stride(a, dim: int) -> int:
    """Element stride of NumPy array `a` along `dim` (torch's `a.stride(dim)`)."""
    return a.strides[dim] // a.itemsize
