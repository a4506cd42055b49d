"""Optional dependencies (the package's extras) and the message when one is missing.

`require(module, what)` imports an optional module or raises `MissingExtra` (an ImportError)
saying which extra installs it: `kdsl bench --plot needs matplotlib: pip install
'kdsl[plot]'`.  `check` asks the same without importing, so that a command can refuse before
its long work starts rather than after.  A backend's optional modules are its own declaration
(`Backend.packages`, installed by `Backend.extra`), asked of the registry.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

#: importable module -> the extra of pyproject.toml that installs it (the backends' modules:
#: `extra_of`)
EXTRAS: dict[str, str] = {
    "matplotlib": "plot",
    "numba": "bench",
    "torch": "torch",
    "hypothesis": "test",
    "pytest": "test",
}


class MissingExtra(ImportError):
    """An optional dependency is not installed."""


def extra_of(module: str) -> str | None:
    """The extra installing `module`: the table's, else that of the backend declaring it."""
    extra = EXTRAS.get(module)
    if extra is not None:
        return extra
    from kdsl.backends import all_backend_names, get_backend

    for name in all_backend_names():
        try:
            be = get_backend(name)
        except Exception:  # a backend that cannot load declares nothing
            continue
        if module in be.packages and be.extra:
            return be.extra
    return None


def message(module: str, what: str) -> str:
    extra = extra_of(module)
    how = f"pip install 'kdsl[{extra}]'" if extra else f"pip install {module}"
    return f"{what} needs {module}, which is not installed: {how}"


def check(module: str, what: str) -> None:
    """Raise `MissingExtra` when `module` cannot be found (it is not imported)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MissingExtra(message(module, what), name=module)


def require(module: str, what: str) -> ModuleType:
    """Import `module`, or raise `MissingExtra` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtra(message(module, what), name=module) from e


__all__ = ["EXTRAS", "MissingExtra", "check", "extra_of", "message", "require"]
