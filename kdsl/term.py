"""Terminal manners: progress on a terminal, plain lines in a log, colour only where wanted.

- `Progress` draws a one-line bar (redrawn with `\\r`) only when its stream is a terminal;
  otherwise (a file, a pipe, CI logs) it writes one plain line per finished step, so a log
  holds readable lines instead of thousands of carriage-return frames.
- Colour (`paint`) is used only on a terminal, never when `NO_COLOR` is set to a non-empty
  value (https://no-color.org) or `TERM=dumb`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_STYLES = {"green": "32", "red": "31", "yellow": "33", "bold": "1", "dim": "2"}


def is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def color_enabled(stream: Any) -> bool:
    """Whether to colour text written to `stream`."""
    if os.environ.get("NO_COLOR", ""):
        return False
    if os.environ.get("TERM", "") == "dumb":
        return False
    return is_tty(stream)


def paint(text: str, style: str, stream: Any = None) -> str:
    """`text` in `style` ("green", "red", "yellow", "bold", "dim") when `stream` (default
    stdout) takes colour, else unchanged."""
    if not color_enabled(sys.stdout if stream is None else stream):
        return text
    return f"\033[{_STYLES[style]}m{text}\033[0m"


class Progress:
    """Progress of `total` steps on stderr: `with Progress(n, "tuning") as p: ... p.step(text)`.

    On a terminal: one bar redrawn in place.  Elsewhere: `label: i/n text` per finished step."""

    def __init__(self, total: int, label: str, stream: Any = None, width: int = 24):
        self.total = max(1, total)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.done = 0
        self.tty = is_tty(self.stream)

    def __enter__(self) -> Progress:  # noqa: PYI034  (typing.Self needs Python 3.11)
        if self.tty:
            self._draw("")
        return self

    def step(self, text: str = "") -> None:
        self.done += 1
        if self.tty:
            self._draw(text)
        else:
            self.stream.write(f"{self.label}: {self.done}/{self.total} {text}".rstrip() + "\n")
            self.stream.flush()

    def _draw(self, text: str) -> None:
        fill = int(self.width * self.done / self.total)
        bar = paint("#" * fill, "green", self.stream) + "." * (self.width - fill)
        self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total} {text[:40]:<40}")
        self.stream.flush()

    def __exit__(self, *exc: object) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


__all__ = ["Progress", "color_enabled", "is_tty", "paint"]
