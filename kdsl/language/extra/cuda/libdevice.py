"""`tl.extra.cuda.libdevice` under its Triton path: the same functions as
`kdsl.language.extra.libdevice` (they run on every backend, not only CUDA)."""

from __future__ import annotations

from ..libdevice import *  # noqa: F403  (the same functions)
from ..libdevice import SUPPORTED, UNSUPPORTED, __all__  # noqa: F401
