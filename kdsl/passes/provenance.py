"""Pointer provenance over the Tile IR: which runtime parameters a pointer value may derive
from.  Used by the lowering (which parameters a kernel stores to, so device backends copy back
only those) and by checked mode (which array's extent bounds each access)."""

from __future__ import annotations

from kdsl.ir import tile


def pointer_roots(fn: tile.Function) -> dict[int, frozenset[int]]:
    """Value id -> indices of the runtime parameters a pointer value may derive from (a
    fixpoint over pointer-carrying ops, loop carries and branch results)."""
    src: dict[int, frozenset[int]] = {}
    for i, p in enumerate(fn.runtime_params):
        if p.type.is_ptr:
            src[p.value.id] = frozenset({i})

    def get(v: tile.Value) -> frozenset[int]:
        return src.get(v.id, frozenset())

    def join(v: tile.Value, s: frozenset[int]) -> bool:
        old = get(v)
        if s <= old:
            return False
        src[v.id] = old | s
        return True

    def carry(results, args, inits, yields) -> bool:
        changed = False
        for i, r in enumerate(results):
            s = (get(inits[i]) if i < len(inits) else frozenset()) | (
                get(yields[i]) if i < len(yields) else frozenset())
            changed |= join(r, s)
            if i < len(args):
                changed |= join(args[i], s)
        return changed

    changed = True
    while changed:
        changed = False
        for op in fn.walk():
            k = op.kind
            if k in ("addptr", "splat", "broadcast", "reshape", "trans", "slice", "gather",
                     "hint", "cast", "bitcast") and op.results:
                changed |= join(op.results[0], get(op.operands[0]))
            elif k == "where":
                changed |= join(op.results[0], get(op.operands[1]) | get(op.operands[2]))
            elif k == "for":
                body = op.regions[0]
                ys = body.terminator.operands if body.terminator else []
                changed |= carry(op.results, body.args[1:], op.operands[3:], ys)
            elif k == "while":
                cond, body = op.regions
                ys = body.terminator.operands if body.terminator else []
                cs = cond.terminator.operands[1:] if cond.terminator else []
                changed |= carry(cond.args, cond.args, op.operands, ys)
                changed |= carry(op.results, body.args, cs, [])
            elif k == "if":
                for region in op.regions:
                    if region.terminator:
                        for r, y in zip(op.results, region.terminator.operands):
                            changed |= join(r, get(y))
    return src


def stored_params(fn: tile.Function) -> set[int]:
    """Indices of runtime params stored to through a pointer derived from them.  A store
    through a pointer made from an integer may write any array whose address the kernel took
    (`ptr_to_int`): those count as stored too."""
    roots = pointer_roots(fn)
    stored: set[int] = set()
    escaped: set[int] = set()
    raw_store = False
    for op in fn.walk():
        if op.kind in tile.SIDE_EFFECTS:
            r = roots.get(op.operands[0].id, frozenset())
            stored |= r
            raw_store |= not r
        elif op.kind == "ptr_to_int":
            escaped |= roots.get(op.operands[0].id, frozenset())
    return stored | escaped if raw_store else stored
