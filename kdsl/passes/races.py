"""Checked mode's race detection between program instances: the Tile IR side.

A race is two program instances of one launch accessing an element of an argument, at least
one of them with a plain `store`, neither with an atomic: the programs of a launch are
unordered, so the value stored or read depends on their timing.  The checks pass
(`checks.py`) calls `RaceRecorder` at every checked `load`/`store` of an argument the kernel
stores to.  Each such argument `p` gets a hidden shadow array `kd_shadow_<p>` (int64, four words
per element of p's memory span, zeroed by nobody: the runtime fills it):

  [0, n)    the least  (program, site) word of the stores of the element   (INT64_MAX: none)
  [n, 2n)   the largest (program, site) word of the stores                  (-1: none)
  [2n, 3n)  the least  word of the loads                                    (INT64_MAX: none)
  [3n, 4n)  the largest word of the loads                                   (-1: none)

where word = linear program id << SITE_BITS | site (the checks pass's site table), written with
`atomic_min`/`atomic_max` by every lane of the access under its (checked) mask.  After the launch
`kdsl/runtime/races.py` reads the shadows: an element races when its stores come from two
programs (the least and largest store words name different programs), or when it is stored by
one program and loaded by another (a load word names another program than the stores).  The
least and largest words are real accesses, so the report names both programs and both sites.

Keeping the extremes rather than the last writer makes the verdict independent of the order
the programs ran in: a load that ran before another program's store of the element is seen as
surely as one that ran after (the interp backend runs programs in order, llvm runs chunks of
them on several threads, GPUs in any order).  A program's own accesses never race (it reads
what it wrote, or what was there before it wrote).

Atomics race with nothing and are not recorded: atomics on one element are ordered, and a plain
load of an element that other programs update atomically is not reported.  Accesses ordered by
a lock or by an atomic's result are not recorded either (`synchronised_accesses`), since
happens-before through atomics is not tracked: Triton's spin lock (`while atomic_cas(l, 0,
1) == 1: pass` ... `atomic_xchg(l, 0)`) protects the plain loads and stores between them.
"""

from __future__ import annotations

from typing import Any

from kdsl.ir import tile
from kdsl.ir.types import PointerType, TileType, int32, int64

SHADOW_PREFIX = "kd_shadow_"
#: bits of a shadow word that hold the site index; the program's linear id is above them
SITE_BITS = 20
#: the four shadow words of an element, in the order of their blocks in the shadow array
STORE_MIN, STORE_MAX, LOAD_MIN, LOAD_MAX = range(4)


# -------------------------------------------------------------- accesses ordered by atomics

def _atomic_dependent(fn: tile.Function) -> set[int]:
    """Ids of the values computed from the old value of an atomic (through any op, loop
    carry or branch result)."""
    out: set[int] = set()

    def visit(block: tile.Block) -> bool:
        changed = False
        for op in block.ops:
            for r in op.regions:
                changed |= visit(r)
            tainted = op.kind in tile.ATOMIC_OPS or any(o.id in out for o in op.operands)
            for r in op.regions:  # a region yielding a tainted value taints the results
                term = r.terminator
                tainted |= term is not None and any(o.id in out for o in term.operands)
            if tainted:
                for v in op.results:
                    if v.id not in out:
                        out.add(v.id)
                        changed = True
                if op.kind in ("for", "while"):  # and the carried values
                    for r in op.regions:
                        for a in r.args:
                            if a.id not in out:
                                out.add(a.id)
                                changed = True
        return changed

    while visit(fn.body):
        pass
    return out


def _same_pointer(a: tile.Value, b: tile.Value) -> bool:
    """Whether two values are the same pointer: one value, or the same pure op on the same
    operands (`lock = L + i` written twice)."""
    if a is b:
        return True
    oa, ob = a.owner, b.owner
    if not (isinstance(oa, tile.Op) and isinstance(ob, tile.Op)):
        return False  # block arguments: only the same one
    pure = not (oa.regions or oa.kind in tile.SIDE_EFFECTS or oa.kind == "load")
    return (pure and oa.kind == ob.kind and oa.attrs == ob.attrs
            and oa.results[0].type == ob.results[0].type
            and len(oa.operands) == len(ob.operands)
            and all(_same_pointer(x, y) for x, y in zip(oa.operands, ob.operands)))


def synchronised_accesses(fn: tile.Function) -> set[int]:
    """`id` of the plain loads and stores that an atomic orders with other programs' accesses,
    statically, in program order:

    - after a `while` whose condition depends on an atomic in its condition region (a spin
      lock, or a wait for a flag) until an atomic with release semantics (`release`,
      `acq_rel`: Triton's default) on the same pointer as that atomic (the unlock), or the end
      of the kernel when none follows;
    - inside an `if` whose condition depends on an atomic's old value (a try-lock, the last
      program to arrive at a counter).
    """
    dep = _atomic_dependent(fn)
    held: list[tile.Value] = []
    out: set[int] = set()

    def visit(block: tile.Block, guarded: bool) -> None:
        for op in block.ops:
            if op.kind in ("load", "store") and (held or guarded):
                out.add(id(op))
            elif op.kind in tile.ATOMIC_OPS and op.attrs.get("sem") in ("release", "acq_rel"):
                held[:] = [p for p in held if not _same_pointer(p, op.operands[0])]
            if op.kind == "if":
                inner = guarded or op.operands[0].id in dep
                for r in op.regions:
                    visit(r, inner)
                continue
            for r in op.regions:
                visit(r, guarded)
            if op.kind == "while":
                cond = op.regions[0]
                term = cond.terminator
                if term is not None and term.operands and term.operands[0].id in dep:
                    held.extend(a.operands[0] for a in cond.ops if a.kind in tile.ATOMIC_OPS)

    visit(fn.body, False)
    return out


# ------------------------------------------------------------------------------ recording

class RaceRecorder:
    """Adds the shadow parameters and the recording ops for the checks pass.

    `shadowed`: runtime param index -> shadow parameter value, for every pointer parameter that
    an unsynchronised plain store writes (an argument nothing stores to cannot race)."""

    def __init__(self, fn: tile.Function, roots: dict[int, frozenset[int]],
                 params: list[tile.Param], add: Any):
        self.synced = synchronised_accesses(fn)
        stored: set[int] = set()
        for op in fn.walk():
            if op.kind == "store" and id(op) not in self.synced:
                ptr = op.operands[0]
                stored |= {i for i in roots.get(ptr.id, ()) if params[i].value.elem == ptr.elem}
        self.shadowed: dict[int, tile.Value] = {
            i: add(SHADOW_PREFIX + params[i].name, TileType((), PointerType(int64)))
            for i in sorted(stored)}

    def wants(self, op: tile.Op) -> bool:
        return op.kind in ("load", "store") and id(op) not in self.synced and bool(self.shadowed)

    def record(self, b: Any, op: tile.Op, lanes: list[tuple[int, tile.Value, tile.Value]],
               mask: tile.Value | None, lower: dict[int, tile.Value],
               extent: dict[int, tile.Value], site: int) -> None:
        """Record access `op` (site `site`) in the shadows of its candidate arrays: `lanes` are
        (param index, element offset from it, in-bounds lanes) per candidate; `mask` the
        access's own mask before the bounds checks."""
        if site >= 1 << SITE_BITS:
            return  # more sites than a shadow word holds: not recorded
        first = STORE_MIN if op.kind == "store" else LOAD_MIN
        word = None
        for i, off, inside in lanes:
            shadow = self.shadowed.get(i)
            if shadow is None:
                continue
            shape = off.shape
            if word is None:
                word = b.splat(self._word(b, site), shape)
            m = inside if mask is None else b.binary("and", mask, inside)
            span = b.binary("sub", extent[i], lower[i])
            idx = b.binary("sub", off, b.splat(lower[i], shape))
            for k, kind in ((first, "min"), (first + 1, "max")):
                at = idx if k == 0 else b.binary(
                    "add", idx, b.splat(b.binary("mul", b.const(k, (), int64), span), shape))
                ptr = b.op("addptr", [b.splat(shadow, shape), at],
                           TileType(shape, shadow.elem))
                b.op("atomic_rmw", [ptr, word, m], TileType(shape, int64), op=kind,
                     sem="relaxed", scope="gpu")

    @staticmethod
    def _word(b: Any, site: int) -> tile.Value:
        """linear program id << SITE_BITS | site, the linear id axis 0 fastest."""
        def axis(kind: str, a: int) -> tile.Value:
            v = b.op(kind, [], TileType((), int32), axis=a)
            return b.op("cast", [v], TileType((), int64))

        lin = axis("program_id", 2)
        for a in (1, 0):
            lin = b.binary("add", b.binary("mul", lin, axis("num_programs", a)),
                           axis("program_id", a))
        shifted = b.binary("shl", lin, b.const(SITE_BITS, (), int64))
        return b.binary("or", shifted, b.const(site, (), int64))


__all__ = ["LOAD_MAX", "LOAD_MIN", "SHADOW_PREFIX", "SITE_BITS", "STORE_MAX", "STORE_MIN",
           "RaceRecorder", "synchronised_accesses"]
