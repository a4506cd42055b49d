"""The size of the on-disk cache: what it holds, a cap, and clearing it (`kdsl cache`).

The cache folder (`cache.cache_dir()`) holds compiled kernels (`<k[:2]>/<k>.kc`, with their
`.lock` files and temporary files), autotuning results (`autotune/`), the capability matrix
(`caps/`) and the measured roofline (`roofline.json`).  Only kdsl's own files are counted and
removed, by these names: a `KDSL_CACHE_DIR` pointing at a shared folder loses nothing else.

Cap: `KDSL_CACHE_MAX_SIZE` (bytes, or with a K/M/G suffix: `500M`, `2G`; `0` = no cap;
default 1G) bounds the compiled kernels.  After a store pushes them over the cap, the least
recently used entries (by modification time: a cache hit touches its entry) are removed
until they fill at most 80% of it.  A process scans the folder once, then adds what it
stores, so the check costs nothing per compile until the cap is near.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_SIZE = 1 << 30
_LOW_WATER = 0.8  # eviction stops at this fraction of the cap
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_ENTRY_DIR = re.compile(r"^[0-9a-f]{2}$")


def max_size() -> int:
    """The cap in bytes from `KDSL_CACHE_MAX_SIZE` (0: none).  A malformed value raises
    ValueError naming the variable."""
    text = os.environ.get("KDSL_CACHE_MAX_SIZE", "").strip()
    if not text:
        return DEFAULT_MAX_SIZE
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?", text, re.IGNORECASE)
    if m is None:
        raise ValueError(f"KDSL_CACHE_MAX_SIZE={text!r}: expected bytes or a size such as "
                         f"500M or 2G (0 for no cap)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def format_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


@dataclass
class Usage:
    """Files and bytes per part of the cache."""

    folder: Path
    parts: dict[str, tuple[int, int]]  # part name -> (files (kernels: entries), bytes)

    @property
    def total(self) -> int:
        return sum(b for _, b in self.parts.values())


def _entry_files(folder: Path):
    """(path, stat) of every compiled-kernel file (entries, locks, temporaries)."""
    with contextlib.suppress(OSError):
        for sub in os.scandir(folder):
            if not (sub.is_dir(follow_symlinks=False) and _ENTRY_DIR.match(sub.name)):
                continue
            with contextlib.suppress(OSError):
                for f in os.scandir(sub.path):
                    if f.is_file(follow_symlinks=False) and \
                            (f.name.endswith((".kc", ".lock")) or f.name.endswith(".tmp")):
                        with contextlib.suppress(OSError):
                            yield Path(f.path), f.stat(follow_symlinks=False)


def _other_files(folder: Path) -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {"autotune": [], "capabilities": [], "roofline": []}
    for part, sub, pattern in (("autotune", "autotune", "*.json"), ("capabilities", "caps", "*")):
        with contextlib.suppress(OSError):
            out[part] = [p for p in (folder / sub).glob(pattern) if p.is_file()]
    if (folder / "roofline.json").is_file():
        out["roofline"] = [folder / "roofline.json"]
    return out


def usage(folder: Path | None = None) -> Usage:
    from .cache_folder import cache_dir

    folder = Path(folder) if folder is not None else cache_dir()
    files = list(_entry_files(folder))  # entries with their locks and temporaries
    parts = {"kernels": (sum(p.suffix == ".kc" for p, _ in files),
                         sum(st.st_size for _, st in files))}
    for part, files in _other_files(folder).items():
        sizes = []
        for p in files:
            with contextlib.suppress(OSError):
                sizes.append(p.stat().st_size)
        parts[part] = (len(sizes), sum(sizes))
    return Usage(folder, parts)


def clear(folder: Path | None = None) -> int:
    """Delete kdsl's files from the cache folder (and the folders they leave empty); returns
    how many files went."""
    from .cache_folder import cache_dir

    folder = Path(folder) if folder is not None else cache_dir()
    removed = 0
    files = [p for p, _ in _entry_files(folder)]
    files += [p for group in _other_files(folder).values() for p in group]
    for p in files:
        with contextlib.suppress(OSError):
            p.unlink()
            removed += 1
    for sub in [*(folder.glob("??")), folder / "autotune", folder / "caps"]:
        with contextlib.suppress(OSError):
            sub.rmdir()  # only when empty
    _STATE.pop(str(folder), None)
    return removed


# folder -> estimated bytes of compiled kernels (scanned once per process, then added to)
_STATE: dict[str, int] = {}
_LOCK = threading.Lock()


def evict(folder: Path, cap: int) -> int:
    """Remove least recently used kernel entries until they fill <= 80% of `cap`; returns
    the bytes they then hold."""
    files = sorted(_entry_files(folder), key=lambda f: f[1].st_mtime)
    total = sum(st.st_size for _, st in files)
    for path, st in files:
        if total <= cap * _LOW_WATER:
            break
        if path.suffix != ".kc":
            continue  # locks may be held and temporaries written: only entries are evicted
        with contextlib.suppress(OSError):
            path.unlink()
            total -= st.st_size
    return total


def note_stored(folder: Path, nbytes: int) -> None:
    """Account for an entry of `nbytes` just stored in `folder`; evict past the cap."""
    try:
        cap = max_size()
    except ValueError:
        cap = DEFAULT_MAX_SIZE  # reported by `kdsl cache info`; a compile must not fail on it
    if cap <= 0:
        return
    key = str(folder)
    with _LOCK:
        if key not in _STATE:
            _STATE[key] = sum(st.st_size for _, st in _entry_files(folder))
        else:
            _STATE[key] += nbytes
        if _STATE[key] > cap:
            _STATE[key] = evict(folder, cap)


__all__ = ["DEFAULT_MAX_SIZE", "Usage", "clear", "evict", "format_size", "max_size",
           "note_stored", "usage"]
