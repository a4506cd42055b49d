"""The `interp` backend: runs the optimised Tile IR with the NumPy interpreter (`kdsl.ir.interp`).

It is the reference every compiled backend is checked against (`kdsl.backends.REFERENCE`) and a
debugging aid: no lowering, no device, NumPy arrays are used in place (nothing is copied back).
`run_observing_stores` is the interpreter with an observer of every store and atomic, for the
tools that say which program wrote an element (`kdsl/tools/program_map.py`).
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from typing import Any

import numpy as np

from kdsl.ir import interp, tile
from kdsl.target import Target

from .base import Backend, BoundArg


class InterpBackend(Backend):
    """Backend at the Tile IR level: `codegen` prints the IR, `launch` interprets it."""

    name = "interp"
    level = "tile"
    caps = frozenset({"fp64"})
    is_cpu = True
    source_suffix = "tile"
    short_name = "int"

    def is_available(self) -> bool:
        return True

    def unavailable_reason(self) -> str:
        return "the NumPy interpreter could not be loaded"

    def devices(self) -> list[str]:
        return [f"{platform.machine()} host CPU (NumPy {np.__version__}, one thread)"]

    def target(self, num_warps: int = 4) -> Target:
        return Target("interp", caps=self.caps)

    def hash(self) -> str:
        return f"interp-1-numpy-{np.__version__}"

    def codegen(self, fn: tile.Function) -> str:
        return tile.print_function(fn)

    def build(self, fn: tile.Function, source: str) -> Any:
        return fn

    def launch(
        self, handle: Any, fn: tile.Function, grid: tuple[int, int, int], args: list[BoundArg]
    ) -> None:
        values: list[Any] = []
        origins: list[int] = []
        for a in args:
            if a.kind == "array":
                if a.host is None:
                    raise TypeError(
                        f"argument '{a.name}': the interp backend needs host (NumPy) arrays, "
                        f"got a device array {type(a.value).__name__}"
                    )
                values.append(np.asarray(a.host).reshape(-1))  # a view: stores land in place
            else:
                values.append(a.value)
            # a strided view's pointer is `origin` elements into its flat memory span
            origins.append(a.origin)
        fn = handle if isinstance(handle, tile.Function) else fn
        if any(origins):
            interp.run(fn, grid, values, origins)
        else:
            interp.run(fn, grid, values)


#: observe(program id (x, y, z), argument index, element offsets, mask or None)
StoreObserver = Callable[[tuple[int, int, int], int, np.ndarray, "np.ndarray | None"], None]


def run_observing_stores(fn: tile.Function, grid: tuple[int, int, int], args: list[Any],
                         observe: StoreObserver) -> None:
    """Interpret `fn` on `grid` (3 ints) with `args` in `fn.runtime_params` order (C-contiguous
    NumPy arrays, modified in place, and numbers), calling `observe` for every store and
    atomic with the element offsets it addresses into its argument's array and its mask
    (None when unmasked; the offsets of masked-off lanes are included)."""
    buffers, values = [], []
    for i, (p, a) in enumerate(zip(fn.runtime_params, args)):
        if p.type.is_ptr:
            buffers.append(interp._buffer(np.ascontiguousarray(a)))
            values.append(interp.Ptr(i, np.asarray(0, dtype=np.int64)))
        else:
            buffers.append(None)
            values.append(interp.scalar_value(a, p.type.elem))

    class Observed(interp._Machine):
        def _seen(self, op: tile.Op, ins: list, mask_at: int) -> None:
            ptr = ins[0]
            # a pointer's offsets count bytes
            off = np.asarray(ptr.off).ravel() // op.operands[0].type.elem.pointee.np.itemsize
            mask = None
            if len(ins) > mask_at:
                mask = np.broadcast_to(np.asarray(ins[mask_at], bool), np.shape(ptr.off)).ravel()
            observe(self.pid, ptr.buf, off, mask)

        def store(self, op, ins):
            super().store(op, ins)
            self._seen(op, ins, 2)

        def atomic(self, op, ins):
            out = super().atomic(op, ins)
            self._seen(op, ins, 3 if op.kind == "atomic_cas" else 2)
            return out

    m = Observed(fn, grid, buffers)
    with np.errstate(all="ignore"):
        for z in range(grid[2]):
            for y in range(grid[1]):
                for x in range(grid[0]):
                    m.pid = (x, y, z)
                    m.env = {}
                    m.run_block(fn.body, values)
