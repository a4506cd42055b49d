"""Which program wrote each element: the worst elements of a failed comparison name the program
that stored them, or whose masked-off store lanes addressed them.  The kernel is re-run on the
reference backend's interpreter with an observer of every store and atomic
(`kdsl.backends.interp.run_observing_stores`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kdsl.backends import REFERENCE
from kdsl.backends.interp import run_observing_stores
from kdsl.runtime.launches import record_launches

from .arrays import copy_array, outputs_of
from .report import CompareReport, Result


def grid_tuple(kernel: Any, grid: Any, args: Sequence, kwargs: dict) -> tuple[int, ...]:
    """The launch grid of `kernel[grid](*args, **kwargs)` as a tuple of ints."""
    if callable(grid):
        sig = kernel.signature
        values = sig.bind(tuple(args), {k: v for k, v in kwargs.items() if k in sig.index})
        grid = grid(dict(zip(sig.names, values)))
    if isinstance(grid, int):
        grid = (grid,)
    return tuple(int(g) for g in grid)


def program_map(kernel: Any, grid: Any, args: Sequence, kwargs: dict,
                num_warps: int | None = None) -> dict[str, tuple[np.ndarray, np.ndarray, tuple]]:
    """Which program wrote each element of each array the kernel stores to: parameter name ->
    (writer, masked, grid) where `writer[i]` is the linear id of the last program that stored
    element i (-1: none) and `masked[i]` the last program whose store addressed i with a false
    mask.  Runs the kernel once on the interpreter, on copies of `args`."""
    from kdsl.passes.provenance import stored_params

    grid3 = (grid_tuple(kernel, grid, args, kwargs) + (1, 1, 1))[:3]
    args = tuple(copy_array(a) for a in args)
    fn = kernel.compile(*args, backend=REFERENCE, num_warps=num_warps, **kwargs).kernel
    sig = kernel.signature
    values = sig.bind(args, {k: v for k, v in kwargs.items() if k in sig.index})
    # a runtime argument given None (or a constexpr) is a compile-time constant, no parameter
    runtime = [getattr(v, "array", v) for v, c in zip(values, sig.is_constexpr)  # view: bits
               if not c and v is not None and type(v).__name__ != "constexpr"]
    params = fn.runtime_params
    stored = sorted(stored_params(fn))
    sizes = {i: np.asarray(runtime[i]).size for i in stored}
    writer = {i: np.full(sizes[i], -1, np.int64) for i in stored}
    masked = {i: np.full(sizes[i], -1, np.int64) for i in stored}

    def observe(pid: tuple, buf: int, off: np.ndarray, mask: np.ndarray | None) -> None:
        if buf not in writer:
            return
        lin = pid[0] + grid3[0] * (pid[1] + grid3[1] * pid[2])
        n = sizes[buf]
        if mask is not None:
            off_m = off[~mask]
            masked[buf][off_m[(off_m >= 0) & (off_m < n)]] = lin
            off = off[mask]
        writer[buf][off[(off >= 0) & (off < n)]] = lin

    run_observing_stores(fn, grid3, runtime, observe)
    return {params[i].name: (writer[i], masked[i], grid3) for i in stored}


def pid_tuple(lin: int, grid3: tuple) -> tuple[int, ...]:
    """The program id (as many axes as the grid has) of linear program `lin`."""
    x = lin % grid3[0]
    y = (lin // grid3[0]) % grid3[1]
    z = lin // (grid3[0] * grid3[1])
    dims = 3 if grid3[2] > 1 else 2 if grid3[1] > 1 else 1
    return (x, y, z)[:dims]


def locate(result: Result, pmap: tuple[np.ndarray, np.ndarray, tuple], shape: tuple) -> None:
    """Name the program of each of `result`'s worst elements."""
    writer, masked, grid3 = pmap
    for w in result.worst:
        flat = int(np.ravel_multi_index(w.index, shape)) if shape else 0
        if flat < writer.shape[0] and writer[flat] >= 0:
            w.program, w.how = pid_tuple(int(writer[flat]), grid3), "wrote it"
        elif flat < masked.shape[0] and masked[flat] >= 0:
            w.program, w.how = pid_tuple(int(masked[flat]), grid3), "masked it off"
        else:
            w.how = "no program addressed it"


def localise(report: CompareReport, fn: Any, jit: bool, args: tuple, kwargs: dict,
             grid: Any, num_warps: int | None) -> None:
    """Name the programs behind the worst elements (best effort: never fails the report)."""
    try:
        if jit:
            pmaps = program_map(fn, grid, args, kwargs, num_warps)
            shapes = {n: getattr(v, "array", v).shape for n, v in zip(
                fn.signature.names, fn.signature.bind(args, dict(kwargs)))
                if hasattr(getattr(v, "array", v), "shape")}  # a DTypeView's: its bits'
        else:  # a library kernel: the one launch whose stored array is the returned output
            cargs = tuple(copy_array(a) for a in args)
            with record_launches() as launches:
                out = fn(*cargs, backend=REFERENCE, **kwargs)
            outs = outputs_of(out, [r.output for r in report.results][:1])
            pmaps, shapes = {}, {}
            for oname, arr in outs.items():
                arr = getattr(arr, "array", arr)  # a DTypeView's bits
                for ln in launches:
                    names = ln.jit.signature.names
                    vals = ln.jit.signature.bind(ln.args, ln.kwargs)
                    for n, v in zip(names, vals):
                        v = getattr(v, "array", v)
                        if isinstance(v, np.ndarray) and isinstance(arr, np.ndarray) \
                                and np.shares_memory(v, arr):
                            pm = program_map(ln.jit, ln.grid, ln.args, ln.kwargs, ln.num_warps)
                            if n in pm:
                                pmaps[oname], shapes[oname] = pm[n], arr.shape
        for r in report.failures():
            if r.output in pmaps and r.worst:
                locate(r, pmaps[r.output], shapes.get(r.output, ()))
    except Exception:  # localisation is a diagnostic; the comparison stands without it
        pass


__all__ = ["grid_tuple", "localise", "locate", "pid_tuple", "program_map"]
