"""Observing launches: `record_launches()` records every `kernel[grid](...)` made inside it
(a library function's kernels, for the tools), and with `dry=True` compiles them instead of
running them (code generation for a backend with no device: `kdsl dump NAME`).

`JITFunction._run` calls `observe` first when an observer is installed (one truth test of a
module-level list otherwise: the launch hot path pays nothing more)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

#: the installed observers, innermost last: observer(launch) -> a compiled kernel to return
#: instead of running, or None to run
OBSERVERS: list[Callable[[Launch], Any]] = []


@dataclass
class Launch:
    """One `kernel[grid](...)` call seen by `record_launches`."""

    jit: Any
    grid: Any
    args: tuple
    kwargs: dict
    backend: str | None
    num_warps: int | None
    check: bool | None = None


def observe(jit: Any, grid: Any, args: tuple, kwargs: dict, backend: str | None,
            num_warps: int | None, check: bool | None) -> Any:
    """Tell every observer about a launch; the first compiled kernel one returns replaces the
    launch (None: run it)."""
    launch = Launch(jit, grid, tuple(args), dict(kwargs), backend, num_warps, check)
    done = None
    for obs in tuple(OBSERVERS):  # (an observer may leave meanwhile)
        out = obs(launch)
        if done is None:
            done = out
    return done


@contextlib.contextmanager
def record_launches(dry: bool = False) -> Iterator[list[Launch]]:
    """Record every @kd.jit launch made inside the block.  With `dry`, launches are compiled,
    never run."""
    launches: list[Launch] = []

    def record(ln: Launch) -> Any:
        launches.append(ln)
        if dry:
            return ln.jit.compile(*ln.args, backend=ln.backend, num_warps=ln.num_warps,
                                  check=ln.check, **ln.kwargs)
        return None

    OBSERVERS.append(record)
    try:
        yield launches
    finally:
        OBSERVERS.remove(record)


__all__ = ["OBSERVERS", "Launch", "observe", "record_launches"]
