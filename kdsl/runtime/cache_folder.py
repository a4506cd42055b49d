"""Where the disk cache lives (read at each use, so a test or a user can move it at run time)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """`KDSL_CACHE_DIR`, else `$XDG_CACHE_HOME/kdsl` (an absolute XDG_CACHE_HOME only, as the
    XDG spec says), else `~/.cache/kdsl`."""
    explicit = os.environ.get("KDSL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "kdsl"
    return Path.home() / ".cache" / "kdsl"
