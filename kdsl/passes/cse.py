"""Common-subexpression elimination and dead-code elimination on the Tile IR.

CSE merges ops of equal kind, operands, attributes and result types.  It only touches ops with no
side effect, no memory access and no region: a `load` is never merged (a load after a store may
see a different value), nor are stores, atomics or control flow.  Scopes follow regions: an op
inside a loop body may reuse a value computed before the loop, never one from a sibling region.

DCE removes ops whose results are unused and that have no side effect (loads included), also
inside regions.  `for`/`if`/`while` are kept even when their results are unused, except in the
trivial case where every region holds nothing but its terminator (and, for `while`, never: an
empty loop may still not terminate).
"""

from __future__ import annotations

from typing import Any

from kdsl.ir import tile

from .manager import resolve, use_counts

#: Ops that must never be merged: memory access, side effects, control flow, terminators.
NOT_CSE = (frozenset({"load", "for", "while", "if"}) | tile.SIDE_EFFECTS | tile.DEBUG_OPS
           | tile.HINT_OPS | tile.TERMINATORS)
#: Ops that must never be removed even when unused.
KEEP = tile.SIDE_EFFECTS | tile.DEBUG_OPS | tile.HINT_OPS | tile.TERMINATORS


def _attr_key(v: Any) -> Any:
    # 0.0 == -0.0 and 1 == 1.0 == True in Python: key floats by their exact bits and type.
    if isinstance(v, float):
        return ("float", v.hex())
    if isinstance(v, tuple):
        return tuple(_attr_key(x) for x in v)
    return (type(v).__name__, v)


def op_key(op: tile.Op) -> tuple:
    """Structural identity of a pure op (operands by value id)."""
    return (
        op.kind,
        tuple(o.id for o in op.operands),
        tuple(sorted((k, _attr_key(v)) for k, v in op.attrs.items())),
        tuple(r.type for r in op.results),
    )


def cse(fn: tile.Function) -> tile.Function:
    """Merge identical pure ops, scoped through regions (in place); returns `fn`."""
    mapping: dict[int, tile.Value] = {}

    def visit(block: tile.Block, scope: dict[tuple, tile.Op]) -> None:
        scope = dict(scope)  # a region sees its parents' values; siblings never see each other
        kept: list[tile.Op] = []
        for op in block.ops:
            op.operands = [resolve(mapping, o) for o in op.operands]
            for region in op.regions:
                # a combine region (reduce, scan) is isolated (uses only its arguments): no
                # merging of its ops with values outside it
                visit(region, {} if op.kind in tile.ISOLATED_REGIONS else scope)
            if op.kind in NOT_CSE or op.regions or not op.results:
                kept.append(op)
                continue
            key = op_key(op)
            prev = scope.get(key)
            if prev is None:
                scope[key] = op
                kept.append(op)
                continue
            for old, new in zip(op.results, prev.results):
                mapping[old.id] = new
        block.ops = kept

    visit(fn.body, {})
    return fn


def _removable(op: tile.Op) -> bool:
    if op.kind in KEEP:
        return False
    if not op.regions or op.kind in tile.ISOLATED_REGIONS:  # a combine region is pure
        return True
    # Control flow: only when trivially empty (each region just its terminator).
    return op.kind != "while" and all(len(r.ops) <= 1 for r in op.regions)


def dce(fn: tile.Function) -> tile.Function:
    """Remove unused ops without side effects, innermost first (in place); returns `fn`."""
    uses = use_counts(fn)

    def drop(op: tile.Op) -> None:
        for inner in op.walk():
            for o in inner.operands:
                uses[o.id] -= 1

    def sweep(block: tile.Block) -> bool:
        changed = False
        kept: list[tile.Op] = []
        for op in reversed(block.ops):  # uses come after definitions: one pass frees chains
            for region in op.regions:
                changed |= sweep(region)
            if _removable(op) and all(uses.get(r.id, 0) == 0 for r in op.results):
                drop(op)
                changed = True
                continue
            kept.append(op)
        block.ops = kept[::-1]
        return changed

    while sweep(fn.body):
        pass
    return fn


__all__ = ["cse", "dce", "op_key"]
