"""Strength reduction of loop-carried pointer tiles (a Tile IR pass).

The Triton-tutorial pattern

    a_ptrs = a_ptr + (offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak)
    for k in range(...):
        a = load(a_ptrs, ...)
        a_ptrs += BLOCK_K * stride_ak

carries a whole tile of pointers through the loop: the lowering keeps it in an array (one
pointer per element, read and rewritten every iteration) and its loads cannot be told
contiguous.  When the carried pointer tile

  * starts as a *cheap* value: built only from scalars, `iota`, `const`, `splat`,
    broadcasts and integer/pointer arithmetic (a small expression tree, which the lowering
    recomputes at any element instead of storing), and
  * is updated only by `p = addptr(p, splat(s))` (or a constant tile) with `s` uniform, the
    result feeding nothing but the yield,

this pass carries the scalar offset `off` instead (init 0, update `off + s`) and rebuilds the
pointers as `addptr(init, splat(off))` where they are read, inside the loop and after it.  The
sum of the steps is formed in the step's integer type (as the kernel's own index arithmetic
is); the pointer itself is still `init` advanced by that offset.  Valid on every backend: the
result is ordinary Tile IR.
"""

from __future__ import annotations

from kdsl.ir import tile
from kdsl.ir.types import TileType

from .manager import replace_all_uses, use_counts

# Ops a cheap initial pointer tile may be built from (pure, no memory).
CHEAP = frozenset({"splat", "iota", "const", "broadcast", "reshape", "add", "sub", "mul",
                   "shl", "addptr", "cast", "hint"})
CHEAP_LIMIT = 12  # largest expression tree (in ops) accepted as cheap


def _owner_op(v: tile.Value) -> tile.Op | None:
    return v.owner if isinstance(v.owner, tile.Op) else None


def _size(v: tile.Value, limit: int) -> int | None:
    """Ops in the expression tree of a cheap value (None if not cheap or over `limit`)."""
    if v.type.is_scalar:
        return 0
    op = _owner_op(v)
    if op is None or op.kind not in CHEAP:
        return None
    total = 1
    for o in op.operands:
        part = _size(o, limit - total)
        if part is None:
            return None
        total += part
        if total > limit:
            return None
    return total


def _uniform_step(upd: tile.Value, arg: tile.Value, uses: dict[int, int],
                  before: list[tile.Op]) -> tile.Value | None:
    """The scalar step `s` of `upd = addptr(arg, splat(s))` (a constant tile gives a new
    scalar const, appended to `before`), or None."""
    op = _owner_op(upd)
    if op is None or op.kind != "addptr" or op.operands[0] is not arg or uses.get(upd.id) != 1:
        return None
    x = op.operands[1]
    src = _owner_op(x)
    if src is None:
        return None
    if src.kind == "splat":
        return src.operands[0]
    if src.kind == "const" and not isinstance(src.attrs.get("value"), (tuple, list)):
        c = tile.Op("const", [], [TileType((), x.elem)], {"value": src.attrs["value"]},
                    loc=src.loc)
        before.append(c)
        return c.result
    return None


def _rewrite(parent: tile.Block, at: int, loop: tile.Op, j: int, step: tile.Value,
             pre: list[tile.Op]) -> tuple[int, dict[int, tile.Value]]:
    """Replace carried pointer tile j of `loop` (op `at` of `parent`) by a scalar offset.
    Returns how many ops were inserted before the loop in `parent`, and the replacements of
    the old block argument and loop result."""
    body = loop.regions[0]
    init = loop.operands[3 + j]
    arg, res = body.args[1 + j], loop.results[j]
    term = body.terminator
    int_t = TileType((), step.elem)
    tile_int = TileType(init.shape, step.elem)
    loc = loop.loc
    zero = tile.Op("const", [], [int_t], {"value": 0}, loc=loc)
    # Drop the carried pointer tile, carry the offset instead (last).
    del loop.operands[3 + j]
    del body.args[1 + j]
    del loop.results[j]
    upd = term.operands.pop(j)
    loop.operands.append(zero.result)
    off = tile.Value(int_t, (arg.name or "p") + "_off", body)
    body.args.append(off)
    off_out = tile.Value(int_t, (res.name or "p") + "_off", loop)
    loop.results.append(off_out)
    nxt = tile.Op("add", [off, step], [int_t], loc=loc)
    body.ops.insert(len(body.ops) - 1, nxt)
    term.operands.append(nxt.result)
    # Rebuild the pointers where they are read: at the top of the body and after the loop.
    sp = tile.Op("splat", [off], [tile_int], loc=loc)
    ptr = tile.Op("addptr", [init, sp.result], [arg.type], loc=loc)
    ptr.results[0].name = arg.name
    body.ops[0:0] = [sp, ptr]
    sp_out = tile.Op("splat", [off_out], [tile_int], loc=loc)
    ptr_out = tile.Op("addptr", [init, sp_out.result], [res.type], loc=loc)
    ptr_out.results[0].name = res.name
    parent.ops[at + 1:at + 1] = [sp_out, ptr_out]
    parent.ops[at:at] = pre + [zero]
    del upd  # the old update (`addptr(arg, step)`) is dead now: DCE removes it
    return len(pre) + 1, {arg.id: ptr.result, res.id: ptr_out.result}


def strength_reduce_pointers(fn: tile.Function) -> tile.Function:
    """Carry scalar offsets instead of pointer tiles where valid (in place); returns `fn`."""
    uses = use_counts(fn)
    mapping: dict[int, tile.Value] = {}

    def visit(block: tile.Block) -> None:
        i = 0
        while i < len(block.ops):
            op = block.ops[i]
            for r in op.regions:
                visit(r)
            if op.kind == "for":
                i += _loop(block, i, op)
            i += 1

    def _loop(block: tile.Block, i: int, op: tile.Op) -> int:
        inserted = 0
        body = op.regions[0]
        j = 0
        while j < len(op.results):
            arg, init = body.args[1 + j], op.operands[3 + j]
            upd = body.terminator.operands[j]
            pre: list[tile.Op] = []
            step = None
            if arg.type.is_ptr and not arg.type.is_scalar \
                    and _size(init, CHEAP_LIMIT) is not None:
                step = _uniform_step(upd, arg, uses, pre)
            if step is None:
                j += 1
                continue
            n, m = _rewrite(block, i + inserted, op, j, step, pre)
            inserted += n
            mapping.update(m)
        return inserted

    visit(fn.body)
    if mapping:
        replace_all_uses(fn, mapping)
    return fn


__all__ = ["CHEAP", "strength_reduce_pointers"]
