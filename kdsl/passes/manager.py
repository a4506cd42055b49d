"""The pass manager and the small IR-editing helpers shared by the Tile IR passes.

`PassManager` runs named passes over a `tile.Function`, verifies the IR after each one and records
the printed IR of every stage (`stages`: name -> text), which `compile().ir` exposes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kdsl.ir import tile

#: A pass edits a function in place, or returns a new one.
Pass = Callable[[tile.Function], "tile.Function | None"]


class PassError(RuntimeError):
    """The IR is invalid after a pass: an internal compiler error, never a user error."""


class PassManager:
    """Runs `passes` (pairs of stage name and function) in order.

    The input is recorded as stage `prefix`, each pass's output as `f"{prefix}.{name}"`.  With
    `verify=True` the input and every output go through `tile.verify`.
    """

    def __init__(self, passes: list[tuple[str, Pass]], verify: bool = True, prefix: str = "tile"):
        self.passes = list(passes)
        self.verify = verify
        self.prefix = prefix
        self.stages: dict[str, str] = {}

    def _check(self, fn: tile.Function, stage: str) -> None:
        if not self.verify:
            return
        try:
            tile.verify(fn)
        except tile.VerifyError as e:
            what = "the input IR" if stage == self.prefix else f"pass '{stage}'"
            raise PassError(
                f"internal compiler error: invalid Tile IR after {what} in kernel "
                f"'{fn.name}': {e}\n{tile.print_function(fn)}"
            ) from e

    def run(self, fn: tile.Function) -> tile.Function:
        self._check(fn, self.prefix)
        self.stages[self.prefix] = tile.print_function(fn)
        for name, pass_fn in self.passes:
            stage = f"{self.prefix}.{name}"
            fn = pass_fn(fn) or fn
            self._check(fn, stage)
            self.stages[stage] = tile.print_function(fn)
        return fn


# ------------------------------------------------------------------------------- IR helpers


def replace_all_uses(fn: tile.Function, mapping: dict[int, tile.Value]) -> int:
    """Replace every operand whose value id is a key of `mapping` by the mapped value (followed
    transitively); returns how many operands changed."""
    changed = 0
    for op in fn.walk():
        for i, o in enumerate(op.operands):
            if o.id in mapping:
                op.operands[i] = resolve(mapping, o)
                changed += 1
    return changed


def resolve(mapping: dict[int, tile.Value], v: tile.Value) -> tile.Value:
    """Follow `mapping` from `v` to a value that is not replaced."""
    while v.id in mapping:
        v = mapping[v.id]
    return v


def use_counts(fn: tile.Function) -> dict[int, int]:
    """Number of uses of each value id (as an operand anywhere in `fn`)."""
    counts: dict[int, int] = {}
    for op in fn.walk():
        for o in op.operands:
            counts[o.id] = counts.get(o.id, 0) + 1
    return counts


class Builder:
    """Creates ops into a list (inserted by the caller before the op being rewritten)."""

    def __init__(self, loc: tile.Loc = tile.UNKNOWN_LOC):
        self.loc = loc
        self.ops: list[tile.Op] = []

    def create(
        self, kind: str, operands: list[tile.Value], type: Any, attrs: dict | None = None
    ) -> tile.Value:
        op = tile.Op(kind, operands, [type], attrs, None, self.loc)
        self.ops.append(op)
        return op.result
