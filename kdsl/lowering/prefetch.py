"""Software prefetch of a loop's next tiles (capability "prefetch": one thread per program).

On a CPU a program's tile load is a loop nest of vector loads, and a `for` loop that loads a
tile per iteration (the K loop of a matmul, the key/value loop of attention) stalls on each
of them: the rows of a tile lie a matrix row apart, so the hardware's stream prefetchers see
one short stream per row and the nest runs at the memory's latency, not its bandwidth (a
128 x 128 float32 tile pair: about a fifth of a 128^3 dot's time on one core, half of it on
two).  This rewrite of a lowered loop body issues `Prefetch` hints for the *next* iteration's
addresses while the current one computes:

* a load qualifies when it sits in a loop nest inside the body and its address, with the
  body's single assignments substituted, is integer arithmetic that cannot fault or trap
  (no memory read: a paged block table's next entry may lie past the table) on loop
  invariants, the nest's own loop variables and the loop's *advancing* variables: the
  induction variable (next value `i + step`) and carried scalars updated once as `x = x + c`
  (the pointer offsets of
  kdsl/passes/loop_pointers.py);
* the hints for the next iteration are that address with each advancing variable replaced by
  its next value, one per 64-byte line: the innermost loop is stepped by a line where the
  address moves by less than a line per iteration (or dropped where it does not move);
* the hint nests are spread over the iterations of the body's costliest loop (the dot's
  row-block loop) instead of being issued in one burst: a burst waits on the same line-fill
  buffers the loads do, spread hints overlap with the arithmetic.  Without such a loop they
  follow the loads.

A prefetch has no semantics (it may name any address, it never faults, it changes no value),
so every placement is correct and the rewrite only moves time; backends without the
capability never see the statement.

`kd.prefetch(ptrs, mask)` asks for hints where no loop rewrite can see the need: the next
*program's* data (a row kernel's next row, fetched while this row computes).  `lower_prefetch`
gives it an element loop of its own that visits one element per cache line along the tile's
last axis (the addresses of a row of a tile are adjacent in every kernel that prefetches; where
they are not, fewer lines are hinted, which is still correct).  The mask is not needed: a hint
never faults.  Targets without the capability (`HINT_CAPS`), or with several threads per
program, drop it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import fields
from math import prod
from typing import Any

from kdsl.ir.loop import (Assign, Binary, Cast, Const, Expr, For, If, Load, Prefetch, PtrAdd,
                          Special, Stmt, TileDot, Type, Var, While, map_operands, walk)

from . import index as ix

#: bytes one prefetch brings (a cache line on every CPU the llvm backend meets)
LINE = 64
#: capabilities under which `kd.prefetch` is emitted: "prefetch" (also the loop rewrite's
#: hints, the llvm backend) or "prefetch_hints" (kd.prefetch only: the OpenCL one-thread
#: lowering, whose loop hints measured no gain but whose next-row hints do)
HINT_CAPS = frozenset({"prefetch", "prefetch_hints"})
#: the fewest iterations of a loop the hints are spread over
MIN_SPREAD_TRIPS = 2
#: the largest address expression (as a tree: how the emitters print it) a hint recomputes;
#: a tile load's address is a dozen nodes, a bigger one is left to the hardware
MAX_HINT_NODES = 64


def _subst(e: Expr, m: dict[str, Expr], memo: dict[int, Expr] | None = None) -> Expr:
    """`e` with every Var named in `m` replaced (a shared subexpression is rewritten once:
    inlined temporaries make expression DAGs, which a tree walk would visit exponentially)."""
    if isinstance(e, Var):
        return m.get(e.name, e)
    if isinstance(e, (Const, Special)):
        return e
    memo = {} if memo is None else memo
    got = memo.get(id(e))
    if got is not None:
        return got
    out = map_operands(e, lambda x: _subst(x, m, memo))
    memo[id(e)] = out
    return out


def _nodes(e: Expr) -> Iterator[Expr]:
    """Every distinct node of expression `e` (each shared subexpression once)."""
    seen: set[int] = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        if not isinstance(x, (Var, Const, Special)):
            stack.extend(v for v in (getattr(x, f.name) for f in fields(x)) if isinstance(v, Expr))


def _tree_size(e: Expr, memo: dict[int, int] | None = None) -> int:
    """Nodes of `e` counted as a tree (a shared subexpression once per use)."""
    if isinstance(e, (Var, Const, Special)):
        return 1
    memo = {} if memo is None else memo
    if id(e) not in memo:
        memo[id(e)] = 1 + sum(_tree_size(v, memo) for v in (getattr(e, f.name) for f in fields(e))
                              if isinstance(v, Expr))
    return memo[id(e)]


#: integer ops a hint's address may use: it is evaluated one iteration early, so it must not
#: read memory (a `Load` or `Index` of the next iteration may be out of bounds) or trap (an
#: integer division by a variable)
SAFE_BINARY = frozenset("add sub mul shl shr and or xor maximum minimum".split())


def safe_address(e: Expr) -> bool:
    """Whether evaluating address `e` early can neither fault nor trap."""
    for x in _nodes(e):
        if isinstance(x, (Var, Const, Special, PtrAdd, Cast)):
            continue
        if isinstance(x, Binary) and (x.op in SAFE_BINARY or x.op in ("div", "mod") and
                                      isinstance(x.b, Const) and x.b.value != 0):
            continue
        return False
    return True


def _vars(e: Expr) -> Iterator[Var]:
    return (x for x in _nodes(e) if isinstance(x, Var))


def _loads(e: Expr) -> Iterator[Load]:
    return (x for x in _nodes(e) if isinstance(x, Load))


def _stmt_exprs(s: Stmt) -> Iterator[Expr]:
    for f in fields(s):
        v = getattr(s, f.name)
        if isinstance(v, Expr):
            yield v
        elif isinstance(v, list):
            yield from (x for x in v if isinstance(x, Expr))


def _assigned(body: list[Stmt], counts: dict[str, int]) -> None:
    """Count, per variable name, the statements of `body` (nested ones included) that write
    it."""
    for s in body:
        targets = [s.var] if isinstance(s, (Assign, For)) else list(getattr(s, "results", []))
        for v in targets:
            counts[v.name] = counts.get(v.name, 0) + 1
        for f in fields(s):
            v = getattr(s, f.name)
            if isinstance(v, list) and v and isinstance(v[0], Stmt):
                _assigned(v, counts)


def _const(e: Expr) -> int | None:
    return int(e.value) if isinstance(e, Const) else None


def _cost(s: Stmt) -> int:
    """Statements executed by `s` (a loop of unknown bounds counted as one iteration)."""
    if isinstance(s, For):
        return max(1, _unit_trips(s)) * sum(_cost(x) for x in s.body)
    if isinstance(s, If):
        return 1 + max(sum(map(_cost, s.then)), sum(map(_cost, s.orelse)))
    if isinstance(s, While):
        return sum(map(_cost, s.body))
    return 1


class _Nest:
    """The hints of the loads under one chain of loops of the body, on loop variables of
    their own (the hints move into another loop of the body, whose variables they must not
    touch)."""

    def __init__(self, loops: tuple[For, ...], fresh: Callable[[str, Type], Var]):
        self.loops = loops
        self.vars = [fresh("pf", lp.var.dtype) for lp in loops]
        self.rename: dict[str, Expr] = {lp.var.name: v for lp, v in zip(loops, self.vars)}
        # next-iteration addresses, on self.vars, by the innermost loop's step multiplier
        # (0: no innermost loop, the address does not move with it)
        self.hints: dict[int, list[Expr]] = {}

    def add(self, ptr: Expr) -> bool:
        inner = self.loops[-1]
        c = ix.coefficient(ptr, inner.var)
        if c is None:
            return False
        # the innermost loop steps by a line where the address moves by less than one per
        # iteration (per hint: an int8 tile's row takes a quarter of a float32 one's hints),
        # and is dropped where the address does not move with it
        f = 0 if c == 0 else max(1, LINE // abs(c))
        self.hints.setdefault(f, []).append(_subst(ptr, self.rename))
        return True

    def build(self) -> list[Stmt]:
        loops = list(zip(self.loops, self.vars))
        inner, v = loops.pop()
        body: list[Stmt] = []
        for f, ptrs in sorted(self.hints.items()):
            hints: list[Stmt] = [Prefetch(p) for p in ptrs]
            body += [For(v, inner.lo, inner.hi, Const(f, inner.step.dtype), hints)] if f else hints
        for lp, v in reversed(loops):
            body = [For(v, lp.lo, lp.hi, lp.step, body)]
        return body


def _advancing(body: list[Stmt], iv: Var, step: Expr, carried: list[Var],
               counts: dict[str, int], env: dict[str, Expr]) -> dict[str, Expr]:
    """Variable name -> its value in the next iteration, for the induction variable and the
    carried scalars the body updates once, at its top level, by a loop-invariant amount."""
    adv: dict[str, Expr] = {iv.name: Binary("add", iv, step)}
    names = {c.name for c in carried}
    for s in body:
        if isinstance(s, Assign) and s.var.name in names and counts.get(s.var.name) == 1:
            nxt = _subst(s.value, env)
            if all(x.name == s.var.name or counts.get(x.name, 0) == 0 for x in _vars(nxt)):
                adv[s.var.name] = nxt
    return adv


def slow_address(e: Expr, steps: dict[str, int | None]) -> bool:
    """Whether address `e` reads the loop's advancing variables (`steps`: name -> constant
    step, None if unknown) only through divisions by more than they move per iteration: a group's
    scale row `(k0 + kk) // 128` with k0 stepping by 64.  The next iteration then reads the
    lines this one does (every other one here, and they are in L1), so a hint is a wasted
    load slot: a 64 x 128 tile of int8 weights with per-group float32 scales issued 512 such
    hints per step for 128 useful ones."""
    if isinstance(e, Var):
        return e.name not in steps
    if isinstance(e, (Const, Special)):
        return True
    if isinstance(e, Binary) and e.op in ("div", "shr") and isinstance(e.b, Const):
        d = int(e.b.value) if e.op == "div" else 1 << int(e.b.value)
        moved = [(ix.coefficient(e.a, v), steps[v.name]) for v in _vars(e.a) if v.name in steps]
        if moved and all(c is not None and s and d > abs(c * s) for c, s in moved):
            return True
    return all(slow_address(x, steps) for x in (getattr(e, f.name) for f in fields(e))
               if isinstance(x, Expr))


def _unit_loops(loops: tuple[For, ...]) -> bool:
    """Loops with constant bounds and a unit step (the element loops of a tile group)."""
    return all(_const(lp.lo) is not None and _const(lp.hi) is not None and _const(lp.step) == 1
               for lp in loops)


def prefetch_next(body: list[Stmt], iv: Var, step: Expr, carried: list,
                  fresh: Callable[[str, Type], Var]) -> list[Stmt]:
    """`body` of a `for` loop over `iv` (see the module docstring) with prefetch hints for
    the next iteration's tile loads; `carried`: the loop's carried storage (Vars and arrays);
    `fresh(name, dtype)`: a new variable of the kernel."""
    if any(isinstance(s, TileDot) for s in walk(body)):
        # A loop feeding a CPU's matrix unit gets no hints: its tile loads (a 64-byte line
        # per row of a tile, every 16 cycles) need the same L1 miss buffers, and the unit
        # outruns the hints' traffic.  bfloat16 matmul on AMX, Emerald Rapids: 2048^3 on two
        # threads 17.6 -> 14.8 ms without them, 4096^3 138 -> 113 ms, one thread 35 -> 30 ms.
        return body
    counts: dict[str, int] = {}
    _assigned(body, counts)
    scalars = [c for c in carried if isinstance(c, Var)]
    carried_names = {c.name for c in scalars}
    env: dict[str, Expr] = {}  # single assignments, as expressions of what the body reads

    def define(s: Stmt) -> None:
        if (isinstance(s, Assign) and counts.get(s.var.name) == 1
                and s.var.name not in carried_names):
            env[s.var.name] = _subst(s.value, env)

    for s in body:  # the carried updates may read the body's top-level temporaries
        define(s)
    adv = _advancing(body, iv, step, scalars, counts, env)
    steps: dict[str, int | None] = {**dict.fromkeys(adv), iv.name: _const(step)}
    env.clear()
    nests: dict[tuple[int, ...], _Nest] = {}
    last_load = -1

    def visit(stmts: list[Stmt], loops: tuple[For, ...], top: int) -> None:
        nonlocal last_load
        for s in stmts:
            if isinstance(s, For):
                visit(s.body, loops + (s,), top)
                continue
            if isinstance(s, (If, While)):
                continue  # conditional loads are left to the hardware
            if loops and _unit_loops(loops):
                for e in _stmt_exprs(s):
                    for ld in _loads(e):
                        ptr = _subst(ld.ptr, env)
                        if _tree_size(ptr) > MAX_HINT_NODES or not safe_address(ptr):
                            continue
                        own = {lp.var.name for lp in loops}
                        free = [x.name for x in _vars(ptr) if x.name not in own]
                        if any(x in adv for x in free) and all(
                                x in adv or counts.get(x, 0) == 0 for x in free) and not \
                                slow_address(ptr, steps):
                            key = tuple(id(lp) for lp in loops)
                            nest = nests.get(key) or nests.setdefault(key, _Nest(loops, fresh))
                            if nest.add(_subst(ptr, adv)):
                                last_load = max(last_load, top)
            define(s)

    for top, s in enumerate(body):
        visit([s], (), top)
    hints = [st for n in nests.values() if n.hints for st in n.build()]
    return _place(body, hints, last_load) if hints else body


def _place(body: list[Stmt], hints: list[Stmt], after: int) -> list[Stmt]:
    """Spread the hint nests over the iterations of the costliest constant-trip loop after
    statement `after` of `body` (the last one with a prefetched load); hints of no loop, and
    all of them where no such loop follows, go right after that statement."""
    nests = [h for h in hints if isinstance(h, For)]
    single = [h for h in hints if not isinstance(h, For)]
    best, best_cost = None, 0
    for j in range(after + 1, len(body)):
        s = body[j]
        if isinstance(s, For) and _unit_trips(s) >= MIN_SPREAD_TRIPS and _cost(s) > best_cost:
            best, best_cost = j, _cost(s)
    if best is None or not nests:
        return body[:after + 1] + hints + body[after + 1:]
    host = body[best]
    trips, lo, st = _unit_trips(host), _const(host.lo), _const(host.step)
    it = ix.div(Binary("sub", host.var, host.lo), st) if lo else ix.div(host.var, st)
    spread: list[Stmt] = []
    for h in nests:  # (built by _Nest: constant bounds)
        hlo, hhi, hst = _const(h.lo), _const(h.hi), _const(h.step)
        n = (hhi - hlo + hst - 1) // hst
        chunk = -(-n // trips)  # outer iterations of the nest per iteration of the host
        start = ix.add(ix.c32(hlo), ix.mul(it, chunk * hst))
        part: Stmt = For(h.var, start, ix.add(start, ix.c32(chunk * hst)), h.step, h.body)
        used = -(-n // chunk)  # host iterations with a chunk to issue
        if used < trips:
            part = If(Binary("lt", it, ix.c32(used)), [part], [])
        # (the last chunk may run past the nest's bound by less than a chunk: a hint never
        # faults, and the lines just past a tile are usually the next program's)
        spread.append(part)
    new_host = For(host.var, host.lo, host.hi, host.step, spread + host.body)
    return body[:after + 1] + single + body[after + 1:best] + [new_host] + body[best + 1:]


def _unit_trips(s: For) -> int:
    """Iterations of a loop with constant bounds and a positive step (0 otherwise)."""
    lo, hi, st = _const(s.lo), _const(s.hi), _const(s.step)
    return 0 if None in (lo, hi, st) or st <= 0 else max(0, (hi - lo + st - 1) // st)


def lower_prefetch(L: Any, op: Any) -> None:
    """`kd.prefetch`: a `Prefetch` per cache line of the pointer tile (module docstring)."""
    if not (HINT_CAPS & L.target.caps) or not L.target.one_thread_per_program:
        return
    ptr = op.operands[0]
    if ptr.type.is_scalar:
        L.close()
        L.emit(Prefetch(L.scalar(ptr)))
        return
    L.close()  # a group of its own: its loop steps by a line, the others by an element
    shape = ptr.shape
    g = L.open_group(prod(shape), shape)
    g.ops.add(id(op))
    g.body.append(Prefetch(L.read(ptr)))
    last = shape[-1] if shape else 1
    g.step = max(1, min(LINE // ptr.type.elem.pointee.itemsize, last))
    if not g.loops and last != prod(shape):
        g.step = 1  # a flat loop over several rows: one hint per element keeps every row
    L.close()
