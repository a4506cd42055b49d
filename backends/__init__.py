"""Backends: one module per backend; the registry is in this file.

The registry maps a backend name to the module and class implementing it
(`backends/base.py: Backend`).  Modules are imported on first use, so `import kdsl` never
imports pyopencl or cupy, and a backend whose module is still missing only fails when asked
for.  Adding a backend is one module plus one line in `REGISTRY`; the tests, the tools and the
library pick it up from here (docs/adding_a_backend.md).  Outside this folder no code names a
backend: it asks the registry (`kdsl/runtime/registry.py`) and the backend's declared facts
(`backends/base.py`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Backend

#: name -> (module, class name).  Order matters: it is the order of `available_backends()`
#: and of automatic selection by array ownership (the interpreter comes last).
REGISTRY: dict[str, tuple[str, str]] = {
    "llvm": ("kdsl.backends.llvm", "LLVMBackend"),
    "opencl": ("kdsl.backends.opencl", "OpenCLBackend"),
    "cuda": ("kdsl.backends.cuda", "CUDABackend"),
    "interp": ("kdsl.backends.interp", "InterpBackend"),
}

#: Variants: a registered backend run another way, reachable by name (`backend="opencl_wg"`,
#: `kdsl.fuzz --backends llvm,opencl,opencl_wg`) but not listed among the backends, so that
#: `available_backends()`, `kdsl compare` and the tests' backend list keep one entry per
#: device API.  "opencl_wg": OpenCL with the GPU-style work-group lowering forced, which keeps
#: that lowering running on a CPU device (whose OpenCL programs are one work-item each).
VARIANTS: dict[str, tuple[str, str]] = {
    "opencl_wg": ("kdsl.backends.opencl", "WorkGroupOpenCLBackend"),
}

#: The backend of launches that neither `backend=`, the arrays nor `KDSL_BACKEND` decide.
DEFAULT = "llvm"
#: The reference backend: the NumPy interpreter of the Tile IR, whose results define every
#: op's meaning (`kd.testing.compare` without a float64 reference, the fuzzer, checked
#: localisation of wrong elements).
REFERENCE = "interp"

_instances: dict[str, Backend] = {}


def all_backend_names() -> list[str]:
    """Every registered backend name, in registry order (available or not)."""
    return list(REGISTRY)


def is_backend_name(name: str) -> bool:
    """Whether `name` is a registered backend or a variant (`VARIANTS`)."""
    return name in REGISTRY or name in VARIANTS


def register_backend(name: str, module: str, cls: str) -> None:
    """Add (or replace) a backend: `module` is imported and `cls()` instantiated on first use."""
    REGISTRY[name] = (module, cls)
    _instances.pop(name, None)


def unregister_backend(name: str) -> None:
    REGISTRY.pop(name, None)
    _instances.pop(name, None)


def get_backend(name: str) -> Backend:
    """The singleton instance of backend `name`.

    Raises ValueError (listing the known names) for an unknown name, and ImportError when the
    backend's module cannot be imported."""
    inst = _instances.get(name)
    if inst is not None:
        return inst
    try:
        module, cls = REGISTRY[name] if name in REGISTRY else VARIANTS[name]
    except (KeyError, TypeError):
        known = ", ".join(repr(n) for n in REGISTRY)
        variants = ", ".join(repr(n) for n in VARIANTS)
        raise ValueError(f"unknown backend {name!r}; known backends: {known} (variants: "
                         f"{variants})") from None
    inst = getattr(importlib.import_module(module), cls)()
    _instances[name] = inst
    return inst


def loaded_backends() -> list[Backend]:
    """Backends already instantiated (used for cheap ownership checks of device arrays)."""
    return list(_instances.values())
