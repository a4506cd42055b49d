"""Checked mode's race detection between program instances: the launch side.

The checks pass (kdsl/passes/races.py) gave the kernel one hidden int64 shadow array per
argument it stores to, after the error record.  `shadow_args` makes them (four words per
element of the argument's memory span, the least-word blocks at INT64_MAX and the largest-word
blocks at -1: "no access"); after the launch `find_race` reads them and returns the
`kd.RaceError` of the racing element at the lowest offset, if any.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from kdsl.backends.base import BoundArg
from kdsl.errors import RaceError
from kdsl.ir import types as T
from kdsl.passes.checks import Site
from kdsl.passes.races import LOAD_MAX, LOAD_MIN, SHADOW_PREFIX, SITE_BITS, STORE_MAX, STORE_MIN

_NONE = (np.iinfo(np.int64).max, -1, np.iinfo(np.int64).max, -1)  # per block: no access


class RaceAccess(NamedTuple):
    """One side of a race: `kind` ("store" or "load"), the program id and the kernel line."""

    kind: str
    program_id: tuple[int, int, int]
    file: str
    line: int
    source: str


def bounds(a: BoundArg) -> tuple[int, int]:
    """[lower, extent): the element offsets from an array argument's pointer its memory allows."""
    return -int(a.origin), int(a.numel) - int(a.origin)


def shadow_args(info: dict[str, Any], args: list[BoundArg]
                ) -> list[tuple[BoundArg, np.ndarray]]:
    """The hidden shadow arguments (in order) and their arrays, for the user's bound `args`."""

    out = []
    for i in info.get("shadows", ()):
        a = args[i]
        lower, extent = bounds(a)
        span = extent - lower
        shadow = np.empty((4, max(span, 1)), np.int64)  # a device buffer is never empty
        for block, value in enumerate(_NONE):
            shadow[block] = value
        flat = shadow.reshape(-1)
        out.append((BoundArg(SHADOW_PREFIX + a.name, "array", T.int64, flat, flat, flat.nbytes,
                             flat.size), shadow))
    return out


def _program(word: int, grid: tuple[int, int, int]) -> tuple[int, int, int]:
    lin = int(word) >> SITE_BITS
    return (lin % grid[0], lin // grid[0] % grid[1], lin // (grid[0] * grid[1]))


def _access(info: dict[str, Any], kind: str, word: int, grid: tuple[int, int, int]
            ) -> RaceAccess:
    site: Site = info["sites"][int(word) & ((1 << SITE_BITS) - 1)]
    return RaceAccess(kind, _program(word, grid), site.file, site.line, site.text)


def _races(shadow: np.ndarray, span: int) -> np.ndarray:
    """Element indices (into the span) that race, in increasing order."""
    sh = shadow[:, :span]
    wmin, wmax, rmin, rmax = sh[STORE_MIN], sh[STORE_MAX], sh[LOAD_MIN], sh[LOAD_MAX]
    stored = wmax >= 0
    writer = wmin >> SITE_BITS
    two_writers = stored & (writer != (wmax >> SITE_BITS))
    other_reader = stored & (rmax >= 0) & (((rmin >> SITE_BITS) != writer)
                                           | ((rmax >> SITE_BITS) != writer))
    return np.flatnonzero(two_writers | other_reader)


def find_race(info: dict[str, Any], shadows: list[tuple[BoundArg, np.ndarray]],
              args: list[BoundArg], grid: tuple[int, int, int]) -> RaceError | None:
    """The error describing the first race the shadows recorded (lowest offset of the first
    argument in parameter order), or None."""

    found = []
    for i, (_, shadow) in zip(info.get("shadows", ()), shadows):
        lower, extent = bounds(args[i])
        idx = _races(shadow, extent - lower)
        if idx.size:
            found.append((i, lower, shadow, idx))
    if not found:
        return None
    i, lower, shadow, idx = found[0]
    e = int(idx[0])
    wmin, wmax, rmin, rmax = (int(shadow[k, e]) for k in range(4))
    a = _access(info, "store", wmin, grid)
    if (wmin >> SITE_BITS) != (wmax >> SITE_BITS):
        b = _access(info, "store", wmax, grid)
    else:  # one program stores, another loads: the load of another program
        other = rmin if (rmin >> SITE_BITS) != (wmin >> SITE_BITS) else rmax
        b = _access(info, "load", other, grid)
    kernel, name, offset = info["kernel"], args[i].name, e + lower
    sides = "\n".join(f"  {x.kind} in program_id {x.program_id} at {x.file}:{x.line}"
                      + (f"\n      {x.source}" if x.source else "") for x in (a, b))
    what = "both store it" if b.kind == "store" else "one stores it while the other loads it"
    msg = (f"kernel {kernel!r}: data race on argument {name!r}, element offset {offset}: two "
           f"program instances access it without an atomic and {what}\n{sides}")
    more = [f"{idx.size} elements of {name!r} race in all; the lowest offset is shown"] \
        if idx.size > 1 else []
    if len(found) > 1:
        more.append("races on " + ", ".join(repr(args[j].name) for j, *_ in found[1:]) + " too")
    if more:
        msg += "\n(" + "; ".join(more) + ")"
    err = RaceError(msg)
    err.kernel, err.arg, err.offset, err.count = kernel, name, offset, int(idx.size)
    err.accesses = (a, b)
    err.program_ids = (a.program_id, b.program_id)
    err.lines = (a.line, b.line)
    err.file, err.line, err.source = a.file, a.line, a.source
    return err


__all__ = ["RaceAccess", "find_race", "shadow_args"]
