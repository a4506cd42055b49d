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
