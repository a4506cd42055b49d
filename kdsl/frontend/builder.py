"""IR builder: creates Tile IR ops at a current insertion block, stamped with a current location.

The AST visitor moves the insertion point (entering loop and branch regions) and the location
(each statement and expression); the semantic rules only call `op`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..ir.tile import UNKNOWN_LOC, Block, Loc, Op, Value
from ..ir.types import TileType


class Builder:
    """Appends ops to `block`, each with location `loc`."""

    def __init__(self, block: Block, loc: Loc = UNKNOWN_LOC):
        self.block = block
        self.loc = loc

    def create(self, kind: str, operands: list[Value], result_types: list[TileType] = (),
               attrs: dict[str, Any] | None = None, regions: list[Block] | None = None) -> Op:
        op = Op(kind, operands, list(result_types), attrs, regions, self.loc)
        self.block.append(op)
        return op

    def op(self, kind: str, operands: list[Value], type: TileType | None,
           **attrs: Any) -> Value | None:
        """One op with a single result of `type` (or none when `type` is None)."""
        op = self.create(kind, operands, [type] if type is not None else [], attrs)
        return op.results[0] if type is not None else None

    @contextmanager
    def at_block(self, block: Block) -> Iterator[Block]:
        """Insert into `block` for the duration of the `with`."""
        saved, self.block = self.block, block
        try:
            yield block
        finally:
            self.block = saved

    @contextmanager
    def at_loc(self, loc: Loc) -> Iterator[None]:
        saved, self.loc = self.loc, loc
        try:
            yield
        finally:
            self.loc = saved
