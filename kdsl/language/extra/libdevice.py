"""libdevice's functions (Triton's `tl.extra.libdevice`), usable inside `@kd.jit` kernels on
every backend: `from kdsl.language.extra import libdevice`, then `libdevice.rsqrt(x)`.

Each name takes libdevice's arguments (`arg0`, `arg1`, ...) and dispatches on their dtypes
(float32 / float64, integer functions on ints); the table, the dispatch rules and the list of
unsupported names are in `kdsl/language/libdevice_table.py`, the semantics in docs/language.md
("Math and libdevice")."""

from __future__ import annotations

from ..libdevice_table import UNSUPPORTED, functions

_FUNCTIONS = functions()
globals().update(_FUNCTIONS)

__all__ = sorted(_FUNCTIONS)  # noqa: PLE0605  (every libdevice name)
SUPPORTED = frozenset(__all__) - frozenset(UNSUPPORTED)
