"""Tile IR passes: canonicalisation, CSE and DCE, driven by a verifying `PassManager`.

`run_tile_passes(fn)` is the optimisation pipeline applied to every kernel before lowering (or
before interpretation by the `interp` backend); the lowering to the Loop IR is the package
`kdsl.lowering`.
"""

from __future__ import annotations

from kdsl.ir import tile

from .canonicalize import canonicalize
from .checks import has_asserts, insert_checks
from .cse import cse, dce
from .loop_pointers import strength_reduce_pointers
from .manager import PassError, PassManager, replace_all_uses

#: The Tile IR pipeline, in order: stage "tile.<name>" records the IR after each.
TILE_PASSES = [("canonicalize", canonicalize), ("loop_pointers", strength_reduce_pointers),
               ("cse", cse), ("dce", dce)]


def run_tile_passes(fn: tile.Function) -> tuple[tile.Function, dict[str, str]]:
    """Optimise `fn` (in place) and return it with the printed IR of every stage:
    "tile", "tile.canonicalize", "tile.loop_pointers", "tile.cse", "tile.dce"."""
    # Checked mode (`fn.options.check`) first adds its bounds and hint checks, which the
    # optimisation passes then simplify; an unchecked kernel's pipeline is unchanged.
    # Debug mode's device assertions use the same record; without debug the same pass deletes
    # them (kdsl/passes/checks.py).
    checks = [("check", insert_checks)] if fn.options.check or has_asserts(fn) else []
    pm = PassManager(checks + TILE_PASSES)
    fn = pm.run(fn)
    return fn, pm.stages


__all__ = [
    "TILE_PASSES",
    "PassError",
    "PassManager",
    "canonicalize",
    "insert_checks",
    "cse",
    "dce",
    "replace_all_uses",
    "run_tile_passes",
    "strength_reduce_pointers",
]
