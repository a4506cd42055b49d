"""Analyses of a Tile IR function that the tile lowering consults: aliases (ops that generate
nothing), canonical users and the operands read at arbitrary indices.  Which parameters a
kernel stores to is `kdsl.passes.provenance.stored_params` (the runtime asks it too)."""

from __future__ import annotations

from collections.abc import Callable

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


def read_once(fn: tile.Function, users: dict[int, list[tile.Op]],
              reader: Callable[[tile.Op, tile.Value], bool]) -> set[int]:
    """Ids of the values computed only for ops that read each element once in a loop of
    their own (`reader(op, value)`): every user is such an op or yields only such values.
    The lowering rematerialises them in that loop whatever their size (computed once there
    either way) instead of storing them: the pointers of `kd.prefetch` hints, the operands a
    dot copies into its own panels (a matrix-unit dot's both, dot_tile.py; the CPU
    micro-kernel's b, dot_cpu.py)."""
    ops = list(fn.walk())
    only: set[int] = set()
    changed = True
    while changed:
        changed = False
        for op in ops:
            for r in op.results:
                if r.id in only or not users.get(r.id):
                    continue
                if all(reader(u, r) or (u.results and all(x.id in only for x in u.results))
                       for u in users[r.id]):
                    only.add(r.id)
                    changed = True
    return only


def raw_pointer_loc(fn: tile.Function) -> tile.Loc | None:
    """Where the kernel first makes a pointer from an integer (None if it never does): such
    a pointer holds an address of the device's memory space, not an argument buffer."""
    for op in fn.walk():
        if op.kind == "int_to_ptr":
            return op.loc
    return None


def addressed_operands(op: tile.Op) -> list[tile.Value]:
    """Operands that an op reads at arbitrary flat indices (through `Lowerer.view`)."""
    if op.kind in tile.ISOLATED_REGIONS:  # reduce, scan: every operand, along the axis
        return list(op.operands)
    if op.kind == "dot":
        return op.operands[:2]
    if op.kind == "sparse_dot":
        return op.operands[:3]
    if op.kind == "gather":
        return op.operands[:1]
    if op.kind == "histogram":
        return list(op.operands)
    if op.kind == "reshape" and op.results[0].type.is_scalar and op.operands[0].shape:
        return op.operands[:1]  # a one-element tile read as a scalar
    return []


def is_zero_const(v: tile.Value) -> bool:
    """Whether `v` is a `const` tile of zeros (a dot's accumulator when none is given: the
    dots then start their accumulators at zero instead of reading it)."""
    op = v.owner
    return isinstance(op, tile.Op) and op.kind == "const" and op.attrs.get("value") == 0
