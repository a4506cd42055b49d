"""`kd.extra`: Triton's `tl.extra` namespace. `kd.extra.libdevice` (also
`kd.extra.cuda.libdevice`) holds libdevice's math functions for every backend."""

from __future__ import annotations

from . import cuda, libdevice

__all__ = ["cuda", "libdevice"]
