"""Analyses of a Tile IR function that the tile lowering consults: aliases (ops that generate
nothing), canonical users, the operands read at arbitrary indices, and which parameters are
stored to."""

from __future__ import annotations

from kdsl.ir import tile

# Ops whose result is their operand, element for element in flat order: pure aliases.
ALIASES = frozenset({"reshape", "hint"})


def aliases(fn: tile.Function) -> dict[int, tile.Value]:
    """Result id -> the value it aliases, for `reshape`/`hint` (a reshape keeps the flat index,
    so it needs no code and no storage).  A tile reshaped to a scalar is not an alias."""
    alias: dict[int, tile.Value] = {}
    for op in fn.walk():
        if op.kind in ALIASES and op.results:
            src = op.operands[0]
            if src.type.is_scalar or not op.result.type.is_scalar:
                alias[op.result.id] = alias.get(src.id, src)
    return alias


def users(fn: tile.Function, alias: dict[int, tile.Value]) -> dict[int, list[tile.Op]]:
    """Canonical value id -> ops using it (alias ops are not users)."""
    users: dict[int, list[tile.Op]] = {}
    for op in fn.walk():
        if op.results and op.results[0].id in alias:
            continue
        for o in op.operands:
            users.setdefault(alias.get(o.id, o).id, []).append(op)
    return users


def stored_params(fn: tile.Function) -> set[int]:
    """Indices of runtime params stored to through a pointer derived from them (a fixpoint over
    pointer-carrying ops, loop carries and branch results)."""
    src: dict[int, frozenset[int]] = {}
    for i, p in enumerate(fn.runtime_params):
        src[p.value.id] = frozenset({i})

    def get(v: tile.Value) -> frozenset[int]:
        return src.get(v.id, frozenset())

    def join(v: tile.Value, s: frozenset[int]) -> bool:
        old = get(v)
        if s <= old:
            return False
        src[v.id] = old | s
        return True

    changed = True
    while changed:
        changed = False
        for op in fn.walk():
            k = op.kind
            if k in ("addptr", "splat", "broadcast", "reshape", "trans", "hint", "cast",
                     "bitcast") and op.results:
                changed |= join(op.results[0], get(op.operands[0]))
            elif k == "where":
                changed |= join(op.results[0], get(op.operands[1]) | get(op.operands[2]))
            elif k == "for":
                body = op.regions[0]
                ys = body.terminator.operands if body.terminator else []
                for i, r in enumerate(op.results):
                    s = get(op.operands[3 + i]) | (get(ys[i]) if i < len(ys) else frozenset())
                    changed |= join(r, s) | join(body.args[1 + i], s)
            elif k == "while":
                cond, body = op.regions
                ys = body.terminator.operands if body.terminator else []
                cs = cond.terminator.operands[1:] if cond.terminator else []
                for i, a in enumerate(cond.args):
                    s = get(op.operands[i]) | (get(ys[i]) if i < len(ys) else frozenset())
                    changed |= join(a, s)
                for i, r in enumerate(op.results):
                    s = get(cs[i]) if i < len(cs) else frozenset()
                    changed |= join(r, s) | (join(body.args[i], s) if i < len(body.args)
                                             else False)
            elif k == "if":
                for region in op.regions:
                    if region.terminator:
                        for r, y in zip(op.results, region.terminator.operands):
                            changed |= join(r, get(y))
    stored: set[int] = set()
    for op in fn.walk():
        if op.kind in tile.SIDE_EFFECTS:
            stored |= get(op.operands[0])
    return stored


def addressed_operands(op: tile.Op) -> list[tile.Value]:
    """Operands that an op reads at arbitrary flat indices (through `Lowerer.view`)."""
    if op.kind == "reduce":
        return op.operands[:1]
    if op.kind == "dot":
        return op.operands[:2]
    return []
