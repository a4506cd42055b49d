"""The launch side of the debugging modes: checked launches and NaN poison.

Checked mode (`check=True`, `KDSL_CHECK=1`) and debug mode's device assertions
(`debug=True`, `KDSL_DEBUG=1`, raising `kd.DeviceAssertionError`): the compiler
(`kdsl/passes/checks.py`) appended hidden parameters to the kernel and recorded
`attrs["checks"]`.  `run_checked` appends their values (the bounds of the element offsets each
array argument allows: [0, size) for an array, the view's memory span for a strided view
(kdsl/runtime/views.py), then a zeroed int64 error record), launches, reads the record back
and raises `kd.OutOfBoundsError` naming the kernel, the source file, line
and text, the argument, the program id and the offending offset (or the broken hint).  The
shadow arrays of race detection follow the record; a race found in them raises
`kd.RaceError` (kdsl/runtime/races.py) when no bounds check failed.

NaN poison (`poison=True`, `KDSL_POISON=1`): before the launch, every array the kernel stores
to is filled with NaN (float types) or the byte 0x7f repeated (integers, 0x7f7f7f7f for int32),
so elements the kernel never writes stand out.  It overwrites the outputs' previous contents:
a debugging option, never for kernels that read-modify-write their outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kdsl.backends.base import BoundArg
from kdsl.errors import DeviceAssertionError, OutOfBoundsError
from kdsl.ir import types as T
from kdsl.passes.checks import ERROR_PARAM, ERROR_WORDS, EXTENT_PREFIX, LOWER_PREFIX, Site
from kdsl.runtime.races import bounds

Launch = Callable[[tuple[int, int, int], list[BoundArg]], None]


def hidden_args(info: dict[str, Any], args: list[BoundArg]) -> tuple[list[BoundArg], np.ndarray]:
    """The hidden arguments of a checked kernel for the user's bound `args`, and the error
    record they include."""
    if len(args) != info["nparams"]:
        raise TypeError(f"kernel {info['kernel']!r} takes {info['nparams']} runtime arguments, "
                        f"got {len(args)}")
    extra = []
    for i in info["extents"]:
        a = args[i]
        if a.kind != "array":
            raise TypeError(f"argument {a.name!r}: the kernel was compiled for an array here, "
                            f"got a scalar")
        lower, extent = bounds(a)
        extra.append(BoundArg(EXTENT_PREFIX + a.name, "scalar", T.int64, extent))
        extra.append(BoundArg(LOWER_PREFIX + a.name, "scalar", T.int64, lower))
    record = np.zeros(ERROR_WORDS, dtype=np.int64)
    extra.append(BoundArg(ERROR_PARAM, "array", T.int64, record, record, record.nbytes,
                          record.size))
    return extra, record


def _assertion(info: dict[str, Any], site: Site, count: int, pid: tuple[int, int, int],
               value: int) -> DeviceAssertionError:
    """The error of a failed device assertion (debug mode): the first failing lane."""
    kernel = info["kernel"]
    text = f"\n    {site.text}" if site.text else ""
    shape = site.shape or ()
    element = f", element {tuple(int(i) for i in np.unravel_index(value, shape))}" if shape \
        else ""
    msg = (f"kernel {kernel!r}: device assertion failed at {site.file}:{site.line}{text}\n"
           f"{site.msg or '(no message)'} (in program_id {pid}{element})")
    if count > 1:
        msg += f" ({count} assertions failed in all; the first recorded is shown)"
    err = DeviceAssertionError(msg)
    err.kernel, err.file, err.line, err.source = kernel, site.file, site.line, site.text
    err.msg, err.program_id = site.msg or "", pid
    return err


def violation(info: dict[str, Any], record: np.ndarray, args: list[BoundArg]
              ) -> OutOfBoundsError | DeviceAssertionError:
    """The exception describing the violation in a non-zero error `record`."""
    count, site_id, p0, p1, p2, value = (int(x) for x in record[:6])
    site: Site = info["sites"][site_id]
    kernel = info["kernel"]
    where = f"{site.file}:{site.line}"
    text = f"\n    {site.text}" if site.text else ""
    pid = (p0, p1, p2)
    if site.kind == "assert":
        return _assertion(info, site, count, pid, value)
    if site.kind in ("load", "store") or site.kind.startswith("atomic_"):
        names = site.arg.split(" or ")
        if len(names) > 1:  # a pointer chosen at run time among several arrays
            # (an offset from one of them would say nothing: the lane's array is unknown)
            msg = (f"kernel {kernel!r}: {site.kind} out of bounds at {where}{text}\n"
                   f"the pointer may come from {', '.join(map(repr, names))} and lies inside "
                   f"none of them, in program_id {pid}")
        else:
            span = next((bounds(a) for a in args if a.name == site.arg), None)
            where_ok = f" outside [{span[0]}, {span[1]})" if span is not None else ""
            msg = (f"kernel {kernel!r}: {site.kind} out of bounds at {where}{text}\n"
                   f"argument {site.arg!r}: element offset {value}{where_ok}, in program_id "
                   f"{pid}")
    elif site.kind == "null":
        msg = (f"kernel {kernel!r}: access through a null pointer at {where}{text}\n"
               f"address {value:#x}: a pointer made from an integer is not bounded by checked "
               f"mode (only null addresses, below 64 KiB, are caught), in program_id {pid}")
    elif site.kind == "multiple_of":
        msg = (f"kernel {kernel!r}: broken hint at {where}{text}\n"
               f"multiple_of({site.amount}): value {value} is not a multiple of {site.amount}, "
               f"in program_id {pid}")
    else:
        msg = (f"kernel {kernel!r}: broken hint at {where}{text}\n"
               f"max_contiguous({site.amount}): the run starting at element {value} is not "
               f"contiguous, in program_id {pid}")
    if count > 1:
        msg += f" ({count} checks failed in all; the first recorded is shown)"
    err = OutOfBoundsError(msg)
    err.kernel, err.file, err.line, err.source = kernel, site.file, site.line, site.text
    err.kind, err.arg, err.program_id, err.offset = site.kind, site.arg, pid, value
    return err


def run_checked(info: dict[str, Any], launch: Launch, grid: tuple[int, int, int],
                args: list[BoundArg]) -> None:
    """Launch a checked kernel with its hidden arguments; raise on a recorded violation."""
    from .races import find_race, shadow_args

    extra, record = hidden_args(info, args)
    shadows = shadow_args(info, args)
    launch(grid, list(args) + extra + [arg for arg, _ in shadows])
    if record[0]:
        raise violation(info, record, args)
    race = find_race(info, shadows, args, grid) if shadows else None
    if race is not None:
        raise race


# ------------------------------------------------------------------------------ NaN poison

def poison_value(dtype: T.DType) -> tuple[np.dtype, Any]:
    """(storage dtype, fill value) that marks an element as never written."""
    if dtype.name == "bfloat16":
        return np.dtype(np.uint16), 0x7FC0  # a quiet NaN's bits
    if dtype.is_fp8:  # the format's NaN code (float8e4b15 has none: 0x7f, its largest value)
        from kdsl.ir.fp8 import fmt
        return np.dtype(np.uint8), 0x7F if fmt(dtype).special == "none" else fmt(dtype).nan_code
    if dtype.is_float:
        return dtype.np, np.nan
    if dtype.is_bool:
        return np.dtype(np.uint8), 0x7F
    bits = dtype.bits
    return dtype.np, int.from_bytes(b"\x7f" * (bits // 8), "little")


def poison(args: list[BoundArg], stored: tuple[int, ...] | set[int]) -> None:
    """Fill the arrays at indices `stored` of `args` with the poison of their type."""
    for i in sorted(stored):
        if i >= len(args) or args[i].kind != "array":
            continue
        a = args[i]
        dt, fill = poison_value(a.dtype)
        if a.view is not None:  # a strided view: only its elements, not the whole span
            a.view.view(dt)[...] = fill
            continue
        if a.host is not None:
            a.host.reshape(-1).view(dt)[...] = fill
            continue
        target = a.value
        if dt != getattr(target, "dtype", dt):
            target = target.view(dt)
        target.fill(dt.type(fill))


def stored_indices(ck: Any) -> tuple[int, ...]:
    """User-argument indices the compiled kernel `ck` stores to (what the compiled kernel
    found: `loop.Kernel.stored_indices`, or the analysis of a tile-level kernel)."""
    return ck._stored


__all__ = ["bounds", "hidden_args", "poison", "poison_value", "run_checked", "stored_indices",
           "violation"]
