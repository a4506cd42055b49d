"""`Stages`: the ordered record of compile stages (`CompiledKernel.ir`), with lazy entries.

Some stages are expensive and only read by people (the host assembly costs a second code
generation): a backend may store a `Lazy` value, computed on first access and then kept. Lazy
values are plain picklable objects, so a disk-cache entry can carry them unevaluated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


class Lazy:
    """A stage text computed by `fn(*args)` on first access (`fn` must be a module-level
    function so that the entry pickles)."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Callable[..., str], *args: Any):
        self.fn = fn
        self.args = args

    def __call__(self) -> str:
        return self.fn(*self.args)

    def __repr__(self) -> str:
        return f"<lazy {getattr(self.fn, '__name__', 'stage')}>"


class Stages(dict):
    """Ordered dict stage name -> text; `Lazy` values are evaluated when read."""

    def __getitem__(self, key: str) -> str:
        value = super().__getitem__(key)
        if isinstance(value, Lazy):
            value = value()
            super().__setitem__(key, value)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def values(self) -> Iterator[str]:  # type: ignore[override]
        return (self[k] for k in self)

    def items(self) -> Iterator[tuple[str, str]]:  # type: ignore[override]
        return ((k, self[k]) for k in self)

    def __reduce__(self):
        return (Stages, (dict(super().items()),))
