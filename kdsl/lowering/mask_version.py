"""Loop versioning on bounds masks (one thread per program): a loop nest whose masks are all
true runs a copy without them.

A tile op on a one-thread target is a loop nest over the tile's elements, and Triton-style
code masks nearly every access with a bound test (`cols < N`, `offs_k < K - k`).  Where the
tile lies inside the bounds, which is every row of a power-of-two width and every tile but the
last, the tests are all true, yet the vectorised nest still computes each lane's test and
makes every load and store a masked one; on a Zen 5 core that made a fused rms_norm row (4096
float32, one thread) 1.7x slower than the same kernel without masks.  This rewrite gives such
a nest a guard and a copy:

    if (max over the nest of i < min over the nest of N):  the nest, i < N replaced by true
    else:                                                   the nest as it was

* a comparison `a < b` (also `<=`, `>`, `>=`; integers) qualifies when each side, with the
  nest's single assignments substituted, is either invariant in the nest or nondecreasing in
  the nest's loop variables (sums, differences with an invariant, products and left shifts by
  non-negative constants, widening casts); its bounds over the nest are the side evaluated at
  the loops' last (maximum) or first (minimum) values.  The loops' bounds must be invariant in
  the nest and their steps positive constants.  (The guard reads each side in its own type:
  like the kernel's addressing, it assumes the index arithmetic does not wrap.)
* the guard is evaluated once before the nest; where it is false, the nest's inner nests are
  versioned in turn, with the outer loops' variables as their invariants: a row walked in
  tiles runs every tile but a partial last one unmasked.
* the unmasked copy's innermost loops that touch memory get the vector-loop hint
  (`VECTOR_HINT`, at least `lanes` iterations): LLVM vectorises them as loops instead of fully
  unrolling them and building gathers from the unrolled loads.
* a nest whose masked accesses do not all move by one element (or not at all) per iteration
  of their innermost loop, or form whole interleaved groups of 2 or 4 (`_dense`), is not
  versioned: unmasked strided accesses vectorise as gathers.
* only a nest with a masked memory access is versioned, and not one with a barrier or more
  than `MAX_STMTS` statements (the copy doubles the code LLVM compiles).  All the provable
  comparisons of the nest make one guard: one that fails on the nest's first or last element
  (a `cols - 1 >= 0` halo test) keeps the whole nest on its masked path.

Values are unchanged: a replaced comparison is one the guard proves true on every execution.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields, replace

from kdsl.ir.loop import (COMPARE, VECTOR_HINT, Assign, Barrier, Binary, Cast, Comment, Const, Expr,
                          For, If, Kernel, Load, Special, Stmt, Var, While, int1, loop_hint,
                          map_operands, walk)

from . import index as ix
from .prefetch import _assigned, _nodes, _subst, _unit_trips, _vars
from .prefetch import _stmt_exprs as _exprs

#: the largest nest (statements, nested ones included) given an unmasked copy
MAX_STMTS = 600
#: the comment opening the guarded branch (the dumps show which copy is which)
UNMASKED = "bounds tests proven true: unmasked copy"

_FLIP = {"gt": "lt", "ge": "le"}


def version_masks(kernel: Kernel, lanes: int = 4) -> Kernel:
    """`kernel` with its loop nests versioned on their bounds masks (module docstring);
    `lanes`: float32 lanes of the target's vectors (the shortest loop given a vector hint)."""
    return replace(kernel, body=_body(kernel.body, lanes))


def _body(stmts: list[Stmt], lanes: int) -> list[Stmt]:
    out: list[Stmt] = []
    for s in stmts:
        if isinstance(s, For):
            out.append(_version(s, lanes))
        elif isinstance(s, If):
            out.append(If(s.cond, _body(s.then, lanes), _body(s.orelse, lanes)))
        elif isinstance(s, While):
            out.append(While(s.cond_body, s.cond, _body(s.body, lanes)))
        else:
            out.append(s)
    return out


def _version(nest: For, lanes: int = 4) -> Stmt:
    inner = For(nest.var, nest.lo, nest.hi, nest.step, _body(nest.body, lanes))
    stmts = list(walk([nest]))
    if (len(stmts) > MAX_STMTS or any(isinstance(s, Barrier) for s in stmts)
            or not any(_masked_access(s) for s in stmts)):
        return inner
    counts: dict[str, int] = {}
    _assigned([nest], counts)
    loops = _loops(nest, counts)
    if loops is None:
        return inner
    proofs: dict[int, Expr] = {}  # id(comparison) -> the guard term that proves it
    env: dict[str, Expr] = {}
    steps: dict[int, list[int | None]] = {}  # id(loop) -> its masked accesses' steps

    def visit(stmts: list[Stmt], loop: For) -> None:
        for s in stmts:
            for e in _exprs(s):
                for x in _nodes(e):
                    if (isinstance(x, Binary) and x.op in COMPARE and id(x) not in proofs
                            and x.a.dtype.is_int):
                        term = _proof(x, env, counts, loops)
                        if term is not None:
                            proofs[id(x)] = term
            steps.setdefault(id(loop), []).extend(_step(p, loop, env) for p in _masked_ptrs(s))
            if isinstance(s, Assign) and counts.get(s.var.name) == 1:
                env[s.var.name] = _subst(s.value, env)
            for _, v in _lists(s):
                visit(v, s if isinstance(s, For) else loop)

    visit([nest], nest)
    if not proofs or not all(map(_dense, steps.values())):
        return inner
    guard = None
    for term in dict.fromkeys(proofs.values()):  # (one term per distinct comparison object)
        guard = term if guard is None else Binary("land", guard, term)
    fast = _hint(_rewrite([nest], proofs)[0], lanes)
    return If(_fold(guard), [Comment(UNMASKED), fast], [inner])


def _hint(s: Stmt, lanes: int) -> Stmt:
    """`s` with each innermost loop of at least `lanes` constant iterations that touches
    memory under a mask (now always true) marked as a vector loop (`VECTOR_HINT`).  Unmasked, a
    short constant loop of loads into a register array is fully unrolled by LLVM before its
    loop vectoriser runs, and the SLP vectoriser then builds gathers out of the unrolled loads
    (their int32 indices may wrap, so they are not provably consecutive): matmul 64 x 128 x 32
    tiles ran 1.4x slower than the masked scalar loads (1024^3, one Zen 5 core)."""
    if not isinstance(s, (For, If, While)):
        return s
    if isinstance(s, For) and not any(isinstance(x, (For, While)) for x in walk(s.body)):
        if (_unit_trips(s) >= lanes and loop_hint(s) is None
                and any(_masked_access(x) for x in walk(s.body))):
            return For(s.var, s.lo, s.hi, s.step, [Comment(VECTOR_HINT)] + s.body)
        return s
    return replace(s, **{name: [_hint(x, lanes) for x in v] for name, v in _lists(s)})


def masked_path(kernel: Kernel) -> Kernel:
    """`kernel` with every versioned nest replaced by its masked copy: the lowering as it is
    without this pass (for reading and for tests of the other passes)."""
    def strip(stmts: list[Stmt]) -> list[Stmt]:
        out: list[Stmt] = []
        for s in stmts:
            if isinstance(s, If) and s.then and isinstance(s.then[0], Comment) \
                    and s.then[0].text == UNMASKED:
                out.extend(strip(s.orelse))
                continue
            changes = {name: strip(v) for name, v in _lists(s)}
            out.append(replace(s, **changes) if changes else s)
        return out

    return replace(kernel, body=strip(kernel.body))


def _loops(nest: For, counts: dict[str, int]) -> dict[str, tuple[Expr, Expr]] | None:
    """Loop variable name -> (first, last) value for every loop of the nest; None when a loop's
    bounds change inside the nest or its step is not a positive constant.  A name several
    loops of the nest share (the lowering reuses its element-loop variables: a 64-wide partial
    loop, then the 1-wide last step of their fold) gets the smallest first and the largest
    last of them, or None where those are not constants to compare."""
    out: dict[str, tuple[Expr, Expr]] = {}
    for s in walk([nest]):
        if not isinstance(s, For):
            continue
        if not (isinstance(s.step, Const) and int(s.step.value) > 0):
            return None
        if any(counts.get(v.name, 0) or v.name in out
               for e in (s.lo, s.hi) for v in _vars(e)):
            return None
        if not all(_pure(e) for e in (s.lo, s.hi)):
            return None
        step = int(s.step.value)
        one = Const(1, s.var.dtype)
        last = Binary("sub", s.hi, one)
        if step != 1:  # lo + (hi - 1 - lo) / step * step
            st = Const(step, s.var.dtype)
            last = Binary("add", s.lo, Binary("mul", Binary(
                "div", Binary("sub", last, s.lo), st), st))
        ends = (s.lo, _fold(last))
        seen = out.get(s.var.name)
        if seen is not None and seen != ends:
            if not all(isinstance(e, Const) for e in seen + ends):
                return None
            t = s.var.dtype
            ends = (Const(min(int(seen[0].value), int(ends[0].value)), t),
                    Const(max(int(seen[1].value), int(ends[1].value)), t))
        out[s.var.name] = ends
    return out


def _proof(cmp: Binary, env: dict[str, Expr], counts: dict[str, int],
           loops: dict[str, tuple[Expr, Expr]]) -> Expr | None:
    """The guard term under which comparison `cmp` is true everywhere in the nest, or None."""
    op, a, b = cmp.op, cmp.a, cmp.b
    if op in _FLIP:
        op, a, b = _FLIP[op], b, a
    if op not in ("lt", "le"):
        return None
    a, b = _subst(a, env), _subst(b, env)
    hi = _bound(a, counts, loops, 1)
    lo = _bound(b, counts, loops, 0)
    if hi is None or lo is None or (hi is a and lo is b):
        return None  # (a test invariant in the nest: LLVM unswitches it itself)
    return Binary(op, hi, lo)


def _bound(e: Expr, counts: dict[str, int], loops: dict[str, tuple[Expr, Expr]],
           which: int) -> Expr | None:
    """`e` at the nest's first (which=0) or last (1) loop values: its minimum or maximum over
    the nest when `e` is nondecreasing in the loop variables; None when that is not shown."""
    if not _pure(e):
        return None
    for v in _vars(e):
        if v.name not in loops and counts.get(v.name, 0):
            return None  # written in the nest and not a known single assignment
    if not _monotone(e, loops):
        return None
    return _subst(e, {name: ends[which] for name, ends in loops.items()})


def _monotone(e: Expr, loops: dict[str, tuple[Expr, Expr]]) -> bool:
    """Whether `e` is nondecreasing in every loop variable of `loops`."""
    if not _mentions(e, loops):
        return True
    if isinstance(e, Var):
        return True
    if isinstance(e, Cast):
        src, dst = e.x.dtype, e.dtype
        return (src.is_int and dst.is_int and dst.bits >= src.bits
                and (src.is_signed or not dst.is_signed or dst.bits > src.bits)
                and _monotone(e.x, loops))
    if isinstance(e, Binary):
        if e.op == "add":
            return _monotone(e.a, loops) and _monotone(e.b, loops)
        if e.op == "sub":
            return _monotone(e.a, loops) and not _mentions(e.b, loops)
        if e.op in ("mul", "shl"):
            if _nonneg_const(e.b):
                return _monotone(e.a, loops)
            return e.op == "mul" and _nonneg_const(e.a) and _monotone(e.b, loops)
    return False


_ARITH = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "shl": lambda a, b: a << b}


def _fold(e: Expr) -> Expr:
    """`e` with its integer arithmetic on constants computed (where the result fits the type):
    the guards read as the bounds they test."""
    if not isinstance(e, Binary):
        return e
    a, b = _fold(e.a), _fold(e.b)
    t = e.dtype
    if (e.op in _ARITH and isinstance(a, Const) and isinstance(b, Const) and t.is_int
            and not isinstance(a.value, bool) and not isinstance(b.value, bool)):
        v = _ARITH[e.op](int(a.value), int(b.value))
        lo = -(1 << (t.bits - 1)) if t.is_signed else 0
        if lo <= v < lo + (1 << t.bits):
            return Const(v, t)
    return e if a is e.a and b is e.b else Binary(e.op, a, b)


def _nonneg_const(e: Expr) -> bool:
    return isinstance(e, Const) and isinstance(e.value, int) and e.value >= 0


def _mentions(e: Expr, names: dict[str, object]) -> bool:
    return any(v.name in names for v in _vars(e))


def _pure(e: Expr) -> bool:
    """Integer arithmetic on variables and constants only (no memory read, no trap)."""
    return all(isinstance(x, (Var, Const, Special, Cast)) or
               isinstance(x, Binary) and x.op in ("add", "sub", "mul", "shl")
               or isinstance(x, Binary) and x.op == "div" and _nonneg_const(x.b) and x.b.value
               for x in _nodes(e))


def _lists(s: Stmt) -> Iterator[tuple[str, list[Stmt]]]:
    """(field name, statements) of each non-empty statement list of `s` (a loop's body, an
    if's branches, ...)."""
    for f in fields(s):
        v = getattr(s, f.name)
        if isinstance(v, list) and v and isinstance(v[0], Stmt):
            yield f.name, v


def _masked_access(s: Stmt) -> bool:
    """Whether statement `s` reads or writes memory under a mask."""
    return any(True for _ in _masked_ptrs(s))


def _masked_ptrs(s: Stmt) -> Iterator[Expr]:
    """The addresses statement `s` reads or writes under a mask."""
    if getattr(s, "mask", None) is not None and hasattr(s, "ptr"):
        yield s.ptr
    for e in _exprs(s):
        for x in _nodes(e):
            if isinstance(x, Load) and x.mask is not None:
                yield x.ptr


def _step(ptr: Expr, loop: For, env: dict[str, Expr]) -> int | None:
    """Elements address `ptr` moves per iteration of `loop` (its innermost loop); None when it
    does not move by whole elements at a constant rate."""
    c = ix.coefficient(_subst(ptr, env), loop.var)
    size = ptr.dtype.pointee.itemsize
    return None if c is None or c % size else c // size


def _dense(steps: list[int | None]) -> bool:
    """Whether the masked accesses of one innermost loop, moving `steps` elements per
    iteration, read or write contiguous runs: each stays put or moves by one element, or all
    that move step by g (2 or 4) and there are at least g of them (the g consecutive values
    of k a matrix-unit dot packs into a word, kdsl/lowering/dot_tile.py: an interleaved group
    LLVM loads as whole vectors and shuffles).  Only such nests are versioned: unmasked, a
    strided copy (the packing of a dot operand across its rows) became `vgatherdps` loops that
    ran 1.4x slower than the masked scalar ones (matmul 64 x 128 x 32 tiles, 1024^3, one Zen 5
    core)."""
    moving = [c for c in steps if c != 0]
    if None in moving:
        return False
    if all(c == 1 for c in moving):
        return True
    g = moving[0]
    return g in (2, 4) and all(c == g for c in moving) and len(moving) >= g


_TRUE = Const(True, int1)


def _rewrite(stmts: list[Stmt], proofs: dict[int, Expr]) -> list[Stmt]:
    """A copy of `stmts` with the proven comparisons replaced by `true`."""
    memo: dict[int, Expr] = {}

    def expr(e: Expr) -> Expr:
        if isinstance(e, (Var, Const, Special)):
            return e
        if id(e) in proofs:
            return _TRUE
        got = memo.get(id(e))
        if got is None:
            got = memo[id(e)] = map_operands(e, expr)
        return got

    def stmt(s: Stmt) -> Stmt:
        changes = {name: [stmt(x) for x in v] for name, v in _lists(s)}
        for f in fields(s):
            v = getattr(s, f.name)
            if isinstance(v, Expr):
                changes[f.name] = expr(v)
            elif isinstance(v, list) and v and isinstance(v[0], Expr):
                changes[f.name] = [expr(x) for x in v]
        return replace(s, **changes)

    return [stmt(s) for s in stmts]
