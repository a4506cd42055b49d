"""Source of a Python function: its parsed AST and the mapping from AST positions to `Loc`s in
the original file (absolute line, column, that line's text)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass

from ..errors import CompilationError
from ..ir.tile import Loc


@dataclass(frozen=True)
class Source:
    """A function's `ast.FunctionDef` with what it takes to locate its nodes in the file."""

    fn_def: ast.FunctionDef
    file: str
    first_line: int  # file line of the source's first line (a decorator, or `def`)
    indent: int  # columns removed by dedent
    lines: tuple[str, ...]

    def loc(self, node: ast.AST) -> Loc:
        rel = getattr(node, "lineno", 1)
        text = self.lines[rel - 1] if 0 < rel <= len(self.lines) else ""
        col = getattr(node, "col_offset", 0) + self.indent
        return Loc(self.file, self.first_line + rel - 1, col, text.rstrip("\n"))


def get_source(pyfn) -> Source:
    """Parse `pyfn`'s source (cached per code object)."""
    return _parse_fn(pyfn.__code__, pyfn)


# code object -> Source: a redefined function has a new code object, hence a fresh parse.
_cache: dict = {}


def _parse_fn(code, pyfn) -> Source:
    hit = _cache.get(code)
    if hit is not None:
        return hit
    name = getattr(pyfn, "__name__", "<kernel>")
    try:
        lines, first = inspect.getsourcelines(pyfn)
    except (OSError, TypeError) as e:
        raise CompilationError(f"cannot read the source of {name}: {e}", kernel=name) from None
    indent = min((len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()), default=0)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    fn_def = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if fn_def is None:
        raise CompilationError(f"{name} is not defined by a `def` statement", kernel=name)
    src = Source(fn_def, code.co_filename, first or 1, indent, tuple(lines))
    _cache[code] = src
    return src
