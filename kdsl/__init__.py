"""kdsl: a tile-level kernel DSL for Python with LLVM (CPU), OpenCL and CUDA backends.

Public names only; see CONTRACT.md / docs/language.md.
"""

from __future__ import annotations

__version__ = "0.1.0"

from . import testing
from .autotune import Config, autotune
from .errors import (
    CompilationError,
    DebugWarning,
    DeviceAssertionError,
    OutOfBoundsError,
    RaceError,
)
from .heuristics import heuristics
from .language import *  # noqa: F401,F403  (kd.program_id, kd.load, kd.float16, kd.constexpr, ...)
from .language import __all__ as _language_all
from .runtime.dtype_views import bfloat16_view, float8_view
from .runtime.jit import JITFunction, jit
from .runtime.registry import available_backends

__all__ = [  # noqa: PLE0604  (the language names are listed by kdsl.language)
    "__version__", "testing", "autotune", "Config", "CompilationError", "OutOfBoundsError",
    "RaceError", "DeviceAssertionError", "DebugWarning",
    "JITFunction", "jit", "heuristics", "available_backends", "bfloat16_view", "float8_view",
    *_language_all,
]
