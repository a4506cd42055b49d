"""Fast reads of the `KDSL_*` environment variables on the launch path.

`os.environ.get` encodes the key and decodes the value on every call (about a microsecond);
the launch path reads `KDSL_CHECK` and `KDSL_BACKEND` on every launch, at use time (tests and
users change them while a process runs).  CPython keeps the encoded mapping in
`os.environ._data`, updated by every `os.environ` write: read it directly when it is there.
"""

from __future__ import annotations

import os

_DATA = getattr(os.environ, "_data", None)
_ENCODE = getattr(os.environ, "encodekey", None)
_KEYS: dict[str, object] = {}


def getenv(name: str) -> str | None:
    """`os.environ.get(name)`, faster."""
    if _DATA is None or _ENCODE is None:  # pragma: no cover - other Python implementations
        return os.environ.get(name)
    key = _KEYS.get(name)
    if key is None:
        key = _KEYS[name] = _ENCODE(name)
    raw = _DATA.get(key)
    if raw is None:
        return None
    return raw.decode(errors="surrogateescape") if isinstance(raw, bytes) else raw


_LAUNCH_KEYS: tuple = ()


def launch_flags() -> tuple[str | None, str | None, str | None]:
    """(KDSL_BACKEND, KDSL_CHECK, KDSL_POISON) in one call: the launch path reads all three."""
    global _LAUNCH_KEYS
    if _DATA is None or _ENCODE is None:  # pragma: no cover - other Python implementations
        g = os.environ.get
        return g("KDSL_BACKEND"), g("KDSL_CHECK"), g("KDSL_POISON")
    if not _LAUNCH_KEYS:
        _LAUNCH_KEYS = tuple(_ENCODE(k) for k in ("KDSL_BACKEND", "KDSL_CHECK", "KDSL_POISON"))
    get = _DATA.get
    out = []
    for key in _LAUNCH_KEYS:
        raw = get(key)
        out.append(raw.decode(errors="surrogateescape") if isinstance(raw, bytes) else raw)
    return out[0], out[1], out[2]
