"""Exceptions raised to users."""

from __future__ import annotations

from .ir.tile import Loc


class CompilationError(Exception):
    """A kernel the compiler rejects. The message names the kernel's file, line and source line,
    with a caret under the offending column."""

    def __init__(self, msg: str, loc: Loc | None = None, kernel: str | None = None):
        self.msg = msg
        self.loc = loc
        self.kernel = kernel
        super().__init__(self._format())

    def _format(self) -> str:
        if self.loc is None or not self.loc.line:
            return self.msg
        where = f'File "{self.loc.file}", line {self.loc.line}'
        if self.kernel:
            where += f", in {self.kernel}"
        lines = [where]
        if self.loc.text:
            text = self.loc.text.rstrip()
            stripped = text.lstrip()
            lines.append("    " + stripped)
            col = max(0, self.loc.col - (len(text) - len(stripped)))
            lines.append("    " + " " * col + "^")
        lines.append(self.msg)
        return "\n".join(lines)


class OutOfBoundsError(Exception):
    """A checked launch found a load or store outside the array its pointer came from."""


class RaceError(Exception):
    """A checked launch found two program instances accessing one element of an argument
    without an atomic, at least one of them storing it: `accesses` holds both (kind, program
    id, file, line, source); `arg`, `offset` name the element, `count` the racing elements."""

    kernel: str | None = None
    arg: str | None = None
    offset: int | None = None
    count: int = 0
    accesses: tuple = ()
    program_ids: tuple = ()
    lines: tuple = ()
    file: str | None = None
    line: int | None = None
    source: str | None = None


class DeviceAssertionError(AssertionError):
    """A `kd.device_assert` (or `assert` on a runtime value) failed in a kernel launched with
    debug on; the message names the kernel's file, line and the assertion's message."""

    kernel: str | None = None
    file: str | None = None
    line: int | None = None
    source: str | None = None
    msg: str = ""
    program_id: tuple[int, ...] | None = None


class DebugWarning(UserWarning):
    """A debugging construct that has no effect where the kernel is compiled (`breakpoint()`
    outside the interp backend)."""
