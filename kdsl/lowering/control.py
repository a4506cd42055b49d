"""Lowering of structured control flow (`for`, `while`, `if`) to Loop IR.

Carried tiles live in register arrays and carried scalars in variables, declared before the
loop; block arguments are bound to them, yields are copied back at the end of the body (all read
before any is written, so swaps work; see `Lowerer.yield_to` for the in-place case), and the
op's results are those arrays.  The Loop IR `For` compares with `<` for a positive step and `>`
for a negative one at run time, so a runtime step of either sign is correct.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kdsl.ir import tile
from kdsl.ir.loop import PIPELINE_HINT, Assign, Cast, Comment, Expr, For, If, While

from .dot_mma import enter_resident, leave_resident, resident_accumulators
from .elementwise import register_type
from .prefetch import prefetch_next

if TYPE_CHECKING:
    from .context import LoweringContext


def lower_for(L: LoweringContext, op: tile.Op) -> None:
    L.close()
    lo, hi, step, *inits = op.operands
    body = op.regions[0]
    iv_t = register_type(body.args[0].type)
    # Accumulators of tensor-core dots stay in their fragments across the loop (dot_mma.py);
    # every other carried value gets storage of the lowering's layout.
    resident = resident_accumulators(L, op)
    kept = [j for j in range(len(op.results)) if j not in resident]
    carried = [L.storage(op.results[j], (body.args[1 + j].name or "c")) for j in kept]
    L.copy(carried, [inits[j] for j in kept])
    for j, d in resident.items():
        enter_resident(L, d, inits[j])
    iv = L.var(body.args[0].name or "i", iv_t)

    def bound(v: tile.Value) -> Expr:
        x = L.scalar(v)
        return x if x.dtype == iv_t else Cast(x, iv_t)

    def finish(term: tile.Op | None) -> None:
        L.yield_to(carried, [term.operands[j] for j in kept] if term else [])

    L.scalars[body.args[0].id] = iv
    args = [body.args[1 + j] for j in kept]
    stmts, _ = L.lower_region(body, [iv] + carried, finish, loop=True,
                              block_args=[body.args[0]] + args)
    # the next iteration's tiles fetched during this one: a pipeline of two stages, so Triton's
    # `num_stages` <= 1 (no pipelining), of the launch or of this loop's `kd.range`, turns it off
    stages = op.attrs.get("num_stages")
    stages = L.fn.options.num_stages if stages is None else stages
    if "prefetch" in L.target.caps and stages >= 2:
        stmts = prefetch_next(stmts, iv, bound(step), carried, L.var)
    if "cp_async" in L.target.caps and stages >= 2:
        # its copies to shared memory in a ring of `stages` slots (async_ring.py, after the
        # whole kernel is lowered: the rings must fit beside every other shared array)
        stmts = [Comment(f"{PIPELINE_HINT} {stages}")] + stmts
    L.emit(For(iv, bound(lo), bound(hi), bound(step), stmts))
    for j, st in zip(kept, carried):
        L.bind_storage(op.results[j], st)
    for j, d in resident.items():
        leave_resident(L, d, op.results[j])


def lower_while(L: LoweringContext, op: tile.Op) -> None:
    L.close()
    cond_block, body = op.regions
    before = [L.storage(a, a.name or "w") for a in cond_block.args]
    L.copy(before, op.operands)
    term = cond_block.terminator
    c, *passed = term.operands
    if [v.id for v in passed] == [a.id for a in cond_block.args]:
        after = before  # the usual case: the condition passes its arguments through
    else:
        after = [L.storage(r, r.name or "wr") for r in op.results]
    cvar = L.var("cond", register_type(c.type))

    def finish_cond(term: tile.Op) -> None:
        L.emit(Assign(cvar, L.scalar(c)))
        if after is not before:
            L.yield_to(after, passed)

    cond_stmts, _ = L.lower_region(cond_block, before, finish_cond, loop=True)
    body_stmts, _ = L.lower_region(
        body, after, lambda term: L.yield_to(before, term.operands if term else []), loop=True)
    L.emit(While(cond_stmts, cvar, body_stmts))
    for r, st in zip(op.results, after):
        L.bind_storage(r, st)


def lower_if(L: LoweringContext, op: tile.Op) -> None:
    L.close()
    results = [L.storage(r, r.name or "ifr") for r in op.results]
    branches = []
    for region in op.regions:
        stmts, _ = L.lower_region(
            region, [], lambda term: L.yield_to(results, term.operands if term else []))
        branches.append(stmts)
    L.emit(If(L.scalar(op.operands[0]), branches[0], branches[1] if len(branches) > 1 else []))
    for r, st in zip(op.results, results):
        L.bind_storage(r, st)
