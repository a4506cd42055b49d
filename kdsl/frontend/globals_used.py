"""The module globals a kernel's compilation read, for the launch-time staleness check.

A kernel compiled once keeps the values of the globals it read (`N = 128` at module level,
`kd.constexpr` wrappers, dtypes): they are baked into its code. As Triton does, a launch
whose kernel read a global that has changed since raises an error naming it
(`kdsl/runtime/jit.py`), instead of running the stale kernel. The frontend records each global
of a simple value it resolves into the recorder of the compilation in progress."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from ..ir.types import DType

#: (name, id of the globals dict) -> (value, the globals dict)
Record = dict[tuple[str, int], tuple[Any, dict]]

_recorder: contextvars.ContextVar[Record | None] = contextvars.ContextVar("kdsl_globals",
                                                                          default=None)
_SIMPLE = (int, float, bool, str, bytes, type(None), complex, DType)


def is_simple(v: Any) -> bool:
    """Values whose change would change the compiled code and that can be compared cheaply."""
    if isinstance(v, _SIMPLE) or type(v).__name__ == "constexpr":
        return True
    return isinstance(v, tuple) and all(is_simple(x) for x in v)


def note(name: str, table: dict, value: Any) -> None:
    """Record that the compilation read global `name` of `table` (when it is simple)."""
    rec = _recorder.get()
    if rec is not None and is_simple(value):
        rec[(name, id(table))] = (value, table)


@contextlib.contextmanager
def recording() -> Iterator[Record]:
    rec: Record = {}
    token = _recorder.set(rec)
    try:
        yield rec
    finally:
        _recorder.reset(token)


_MISSING = object()


def changed(rec: Record) -> tuple[str, Any, Any] | None:
    """(name, old value, new value) of the first recorded global whose value changed."""
    for (name, _), (old, table) in rec.items():
        new = table.get(name, _MISSING)
        if new is not old and not _same(new, old):
            return name, old, new
    return None


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - an exotic __eq__: compare identity only
        return False
