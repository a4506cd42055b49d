"""`kd.extra.cuda`: Triton's `tl.extra.cuda`; its `libdevice` is `kd.extra.libdevice`."""

from __future__ import annotations

from . import libdevice

__all__ = ["libdevice"]
