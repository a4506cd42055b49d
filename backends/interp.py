"""The `interp` backend: runs the optimised Tile IR with the NumPy interpreter (`kdsl.ir.interp`).

It is the reference every compiled backend is checked against and a debugging aid: no lowering,
no device, NumPy arrays are used in place (nothing is copied back).
"""

from __future__ import annotations

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

    def is_available(self) -> bool:
        return True

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
