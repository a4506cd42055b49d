"""Runtime control flow of the AST visitor: `if`, `for`, `while` and `return`, in SSA form.

Variables: the variables a loop body assigns that existed before the loop are carried (block
arguments, yielded back, results of the loop op); a runtime `if` yields the variables either
branch changed, and those first defined in both branches. A variable may hold a tuple or an
aggregate (a block pointer, a tensor descriptor): it is carried as its flattened leaves
(`aggregates.py`), so loops and branches only ever carry Tile IR values; a loop leaf that comes
back unchanged (a block pointer's base, shape and strides under `kd.advance`) is not carried.

Early returns: `return` may appear anywhere, nested in runtime `if`s and loops. Two hidden
variables describe it: `$returned` (compile-time False before any return, True after one on
every path, else an int1 value) and `$retval` (the value returned, None for a bare `return`).
They flow through ifs and loops like user variables. After a statement that may have returned,
the rest of the block runs under `if not $returned`; a `for` body containing a `return` runs
under the same guard, so the remaining iterations do nothing; a `while` checks the flag before
its condition, which is then not evaluated again. An `if` whose branch ends with `return` takes
the statements after it into its other branch instead of a guard (`if c: return` followed by
R is `if c: ... else: R`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from ..errors import CompilationError
from ..ir.tile import Block, Op, Value
from ..ir.types import DType, TileType, int1
from ..language import semantic
from ..language.type_objects import Aggregate
from .aggregates import (
    describe_spec,
    flatten,
    placeholder,
    placeholder_leaf,
    same_spec,
    unflatten,
)

RET_FLAG = "$returned"
RET_VAL = "$retval"
_MISSING = object()


def assigned_names(stmts: list[ast.stmt]) -> list[str]:
    """Names a list of statements assigns, in order of first appearance."""
    seen: dict[str, None] = {}
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                seen.setdefault(n.id, None)
    return list(seen)


def contains_return(stmts: list[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Return) for s in stmts for n in ast.walk(s))


def _ends_with_return(stmts: list[ast.stmt]) -> bool:
    return bool(stmts) and isinstance(stmts[-1], ast.Return)


def _show(name: str) -> str:
    return "the return value" if name == RET_VAL else f"variable {name!r}"


def _same_const(a: Any, b: Any) -> bool:
    return a is b or (semantic.is_scalar_const(a) and type(a) is type(b) and a == b)


def _replace_uses(block: Block, mapping: dict[int, Value]) -> None:
    for op in block.ops:
        if any(o.id in mapping for o in op.operands):
            op.operands = [mapping.get(o.id, o) for o in op.operands]
        for r in op.regions:
            _replace_uses(r, mapping)


class Carried:
    """The variables a loop carries, flattened: `inits` are the IR values entering the loop
    (Python constants materialised with their literal type), one block argument per leaf."""

    def __init__(self, gen: Any, names: list[str]):
        self.names: list[str] = []
        self.specs: list[Any] = []
        self.counts: list[int] = []
        self.inits: list[Value] = []
        self.late_types: list[TileType] = []  # leaves carried from the body on (add_late)
        for n in names:
            leaves, spec = flatten(gen.scope[n])
            self.names.append(n)
            self.specs.append(spec)
            self.counts.append(len(leaves))
            self.inits += [semantic.to_value(gen.b, v) for v in leaves]

    @property
    def types(self) -> list[TileType]:
        return [v.type for v in self.inits] + self.late_types

    def bind_args(self, block: Block, scope: dict[str, Any]) -> None:
        i = 0
        for n, spec, k in zip(self.names, self.specs, self.counts):
            args = [block.add_arg(v.type, n.lstrip("$")) for v in self.inits[i:i + k]]
            scope[n] = unflatten(spec, args)
            i += k

    def add_late(self, name: str, like: Any, blocks: list[Block],
                 passthrough: Op | None = None) -> Any:
        """Carry `name` from the body on (an early-return value, whose type is known only once
        the body returned it): block arguments in each of `blocks` (the first one's passed
        through by the `condition` op `passthrough`), of the types of `like`'s leaves (a
        Python constant: its literal type); the initial value is a placeholder."""
        leaves, spec = flatten(like)
        types = [v.type if semantic.is_value(v) else TileType((), semantic.literal_dtype(v))
                 for v in leaves]
        self.names.append(name)
        self.specs.append(spec)
        self.counts.append(len(types))
        self.late_types += types
        args: list[Value] = []
        for blk in blocks:
            args = [blk.add_arg(t, name.lstrip("$")) for t in types]
            if passthrough is not None and blk is blocks[0]:
                passthrough.operands += args
        return unflatten(spec, args)

    def late_inits(self, gen: Any) -> list[Value]:
        return [placeholder_leaf(gen.b, t, gen.ptr_sources) for t in self.late_types]

    def outs(self, gen: Any, scope: dict[str, Any]) -> list[Value]:
        """End-of-body values of the carried leaves, which must keep their spec and types."""
        out, i = [], 0
        types = self.types
        for n, spec, k in zip(self.names, self.specs, self.counts):
            leaves, sp = flatten(scope[n])
            if not same_spec(spec, sp):
                if n == RET_VAL:
                    raise gen.return_error(f"returns {describe_spec(spec)} on one path and "
                                           f"{describe_spec(sp)} on another")
                raise semantic.error(
                    f"loop-carried {_show(n)} changes structure in the loop: "
                    f"{describe_spec(spec)} before the loop, {describe_spec(sp)} at the end of "
                    "the body")
            out += [gen.loop_out(n, v, t) for v, t in zip(leaves, types[i:i + k])]
            i += k
        return out

    def bind_results(self, loop: Op, values: list[Value], scope: dict[str, Any]) -> None:
        i = 0
        for n, spec, k in zip(self.names, self.specs, self.counts):
            vals = values[i:i + k]
            for v in vals:
                if v.owner is loop:
                    v.name = n.lstrip("$")
            scope[n] = unflatten(spec, vals)
            i += k


class _Slot:
    """A merged leaf that is the if op's result `index`."""

    def __init__(self, index: int):
        self.index = index


def prune_invariant(op: Op) -> list[Value]:
    """Drop the carried values of loop `op` that come back unchanged (yielded as their own
    block argument): their uses read the initial value instead. Returns, for every carried
    value in the original order, the value it has after the loop."""
    if op.kind == "for":
        body = op.regions[0]
        term = body.terminator
        args = body.args[1:]
        inits = op.operands[3:]
        invariant = [term.operands[j] is args[j] for j in range(len(args))]
        blocks = [body]
    else:
        cond, body = op.regions
        cterm, term = cond.terminator, body.terminator
        args = cond.args
        inits = op.operands
        invariant = [cterm.operands[1 + j] is cond.args[j] and term.operands[j] is body.args[j]
                     for j in range(len(args))]
        blocks = [cond, body]
    after = [inits[j] if inv else op.results[j] for j, inv in enumerate(invariant)]
    if not any(invariant):
        return after
    mapping: dict[int, Value] = {}
    for blk in blocks:
        blk_args = blk.args[1:] if op.kind == "for" else blk.args
        for j, inv in enumerate(invariant):
            if inv:
                mapping[blk_args[j].id] = inits[j]
        _replace_uses(blk, mapping)
    keep = [j for j, inv in enumerate(invariant) if not inv]
    if op.kind == "for":
        body.args = [body.args[0]] + [args[j] for j in keep]
        term.operands = [term.operands[j] for j in keep]
        op.operands = op.operands[:3] + [inits[j] for j in keep]
    else:
        cond.args = [cond.args[j] for j in keep]
        body.args = [body.args[j] for j in keep]
        cterm.operands = [cterm.operands[0]] + [cterm.operands[1 + j] for j in keep]
        term.operands = [term.operands[j] for j in keep]
        op.operands = [inits[j] for j in keep]
    op.results = [op.results[j] for j in keep]
    return after


class ControlFlow:
    """Mixin of `CodeGenerator` (`codegen.py`): statements sequences, `if`, loops, returns.
    It uses the generator's `b` (builder), `scope`, `src`, `visit`, `at`, `scoped`, `assign`,
    `materialize`, `scoped_out` and `ptr_sources`."""

    # ------------------------------------------------------------------ statement lists

    def flag(self) -> Any:
        return self.scope.get(RET_FLAG, False)

    def visit_stmts(self, stmts: list[ast.stmt], tail: bool = False) -> None:
        """Visit statements in order. `tail`: nothing follows them in the function. After a
        statement that may have returned, the rest runs under `if not $returned`."""
        for i, s in enumerate(stmts):
            if self.flag() is True:
                return  # unreachable after a return on every path
            rest = stmts[i + 1:]
            if isinstance(s, ast.If):
                if self.at(s, lambda s=s, rest=rest: self.visit_if(s, rest, tail)):
                    return
            else:
                self.visit(s)
            if rest and semantic.is_value(self.flag()):
                self.at(s, lambda rest=rest: self.guard(lambda: self.visit_stmts(rest, tail),
                                                        tail))
                return

    def guard(self, fn: Callable[[], None], tail: bool = False) -> None:
        """Run what `fn` builds only if no return happened yet."""
        c = semantic.logical_not(self.b, self.flag())
        self.build_if(c, [fn, lambda: None], entry=({RET_FLAG: False}, {RET_FLAG: True}),
                      tail=tail)

    def visit_Return(self, node: ast.Return) -> None:
        value = self.visit(node.value) if node.value is not None else None
        if value is not None and self.depth == 0:
            raise self.error("a kernel cannot return a value", node)
        self.returns.append(node)
        self.scope[RET_VAL] = value
        self.scope[RET_FLAG] = True

    def return_error(self, msg: str) -> CompilationError:
        """Return values that do not merge: reported at the last `return` compiled, which is
        the one that meets the others."""
        node = self.returns[-1] if self.returns else self.src.fn_def
        return self.error(f"{self.src.fn_def.name}() {msg} (every return must give the same "
                          "types)", node)

    def result(self) -> Any:
        """The function's return value once its body is visited (None if it returns none)."""
        value = self.scope.get(RET_VAL)
        if value is not None and self.flag() is not True:
            raise self.error(f"{self.src.fn_def.name}() returns a value on some paths and "
                             "reaches its end without a return on others", self.src.fn_def)
        return value

    # ------------------------------------------------------------------------------- if

    def visit_If(self, node: ast.If) -> None:
        self.visit_if(node, [], False)

    def visit_if(self, node: ast.If, rest: list[ast.stmt], tail: bool) -> bool:
        """An `if` followed by `rest` in its block; True when it compiled `rest` too."""
        cond = self.visit(node.test)
        if not semantic.is_value(cond):
            # Compile-time condition: only the taken branch is compiled.
            if isinstance(cond, Aggregate):
                raise semantic.error("the truth of a block pointer or descriptor is not defined")
            self.visit_stmts(list(node.body if cond else node.orelse) + list(rest), tail)
            return True
        c = self.if_condition(cond)
        branches = [list(node.body), list(node.orelse)]
        consumed = bool(rest) and any(_ends_with_return(br) for br in branches)
        if consumed:  # `if c: A; return` followed by R is `if c: A; return else: R`
            branches = [br if _ends_with_return(br) else br + list(rest) for br in branches]
        inner_tail = tail and (consumed or not rest)
        self.build_if(c, [lambda br=br: self.visit_stmts(br, inner_tail) for br in branches],
                      tail=inner_tail)
        return consumed

    def if_condition(self, cond: Any) -> Value:
        """The int1 condition of a runtime `if` (kd.map_elementwise's bodies allow tiles)."""
        return semantic.condition(self.b, cond, "an if")

    def loop_condition(self, cond: Any) -> Value:
        return semantic.condition(self.b, cond, "a while")

    def build_if(self, c: Value, branches: list[Callable[[], None]],
                 entry: tuple[dict, dict] = ({}, {}), tail: bool = False,
                 fill: Callable[[Any], Any] | None = None) -> None:
        """An `if` op whose branches are built by `branches` (each in a copy of the scope,
        updated by `entry`), merging the variables. `fill(like)` gives the else-branch value
        of a `$retval` only the then-branch has (default: a placeholder)."""
        blocks = [Block(), Block()]
        scopes = []
        for build, blk, over in zip(branches, blocks, entry):
            with self.scoped({**self.scope, **over}, blk) as sc:
                build()
            scopes.append(sc)
        names = list(dict.fromkeys([*scopes[0], *scopes[1]]))
        plan: list[tuple[str, Any, list[Any]]] = []  # name, spec, leaves (or _Slot)
        yields: tuple[list[Value], list[Value]] = ([], [])
        returns_value = any(sc.get(RET_VAL) is not None for sc in scopes)
        for name in names:
            if tail and name not in (RET_FLAG, RET_VAL):
                continue  # nothing follows in the function: no variable is read again
            vals = [sc.get(name, _MISSING) for sc in scopes]
            if name == RET_FLAG:
                if tail and not returns_value:
                    continue  # nothing follows: whether it returned does not matter
                vals = [False if v is _MISSING else v for v in vals]
            elif _MISSING in vals:
                i = vals.index(_MISSING)
                if name == RET_VAL and fill is not None and i == 1:
                    vals[1] = fill(vals[0])
                elif name == RET_VAL or scopes[i].get(RET_FLAG) is True:
                    # never read on that path: the one that did not return yet (for the
                    # return value), or the one that returned (for a variable defined after
                    # a return on the other path)
                    try:
                        with self.b.at_block(blocks[i]):
                            vals[i] = placeholder(self.b, vals[1 - i], self.ptr_sources)
                    except CompilationError:
                        if name == RET_VAL:
                            raise
                        self.scoped_out.add(name)
                        continue
                else:
                    self.scoped_out.add(name)
                    continue
            if vals[0] is vals[1]:
                # unchanged by both branches (an aggregate too: rebuilding it would make a loop
                # around this if see it reassigned)
                plan.append((name, None, vals[0]))
                continue
            (tl, ts), (el, es) = flatten(vals[0]), flatten(vals[1])
            if not same_spec(ts, es):
                if name == RET_VAL:
                    raise self.return_error(f"returns {describe_spec(ts)} on one path and "
                                            f"{describe_spec(es)} on another")
                if not tl and not el:
                    raise semantic.error(f"{_show(name)} gets different compile-time values "
                                         "in the two branches of a runtime if")
                raise semantic.error(f"{_show(name)} is {describe_spec(ts)} in one branch of "
                                     f"the if and {describe_spec(es)} in the other")
            leaves: list[Any] = []
            for a, e in zip(tl, el):
                if _same_const(a, e):
                    leaves.append(a)
                    continue
                av = self.materialize(a, e, blocks[0])
                ev = self.materialize(e, av, blocks[1])
                if av.type != ev.type:
                    if name == RET_VAL:
                        raise self.return_error(f"returns {av.type} on one path and "
                                                f"{ev.type} on another")
                    raise semantic.error(f"{_show(name)} has type {av.type} in one branch of "
                                         f"the if and {ev.type} in the other")
                leaves.append(_Slot(len(yields[0])))
                yields[0].append(av)
                yields[1].append(ev)
            plan.append((name, ts, leaves))
        for blk, ys in zip(blocks, yields):
            with self.b.at_block(blk):
                self.b.create("yield", ys)
        op = self.b.create("if", [c], [v.type for v in yields[0]], regions=blocks)
        for name, spec, leaves in plan:
            if spec is None:  # kept as it was
                self.scope[name] = leaves
                continue
            out = []
            for leaf in leaves:
                if isinstance(leaf, _Slot):
                    leaf = op.results[leaf.index]
                    if not leaf.name:
                        leaf.name = name.lstrip("$")
                out.append(leaf)
            self.scope[name] = unflatten(spec, out)

    # --------------------------------------------------------------------------- loops

    def carried_names(self, body: list[ast.stmt], exclude: set[str]) -> list[str]:
        """Variables a loop body assigns that exist before the loop and hold runtime data."""
        out = []
        for n in assigned_names(body):
            if n in exclude or n not in self.scope:
                continue
            if flatten(self.scope[n])[0]:
                out.append(n)
        return out

    def loop_out(self, name: str, new: Any, t: TileType) -> Value:
        """End-of-body value of a carried leaf, which must keep the type `t` it entered with."""
        if semantic.is_value(new) or not semantic.is_scalar_const(new):
            v = new
        else:
            v = semantic.to_value(self.b, new, semantic.weak_dtype(new, t.elem)
                                  if isinstance(t.elem, DType) else None)
        if not semantic.is_value(v) or v.type != t:
            got = v.type if semantic.is_value(v) else repr(v)
            if name == RET_VAL:
                raise self.return_error(f"returns {t} on one path and {got} on another")
            raise semantic.error(
                f"loop-carried {_show(name)} changes type in the loop: {t} before "
                f"the loop, {got} at the end of the body (give it its final type before the "
                "loop, e.g. with kd.zeros or .to())")
        return v

    def check_untouched(self, before: dict, after: dict, carried: list[str]) -> None:
        for n, v in before.items():
            if n in carried:
                continue
            w = after.get(n, _MISSING)
            if w is not v and not (w is not _MISSING and same_spec(flatten(v)[1], flatten(w)[1])
                                   and not flatten(v)[0]):
                raise semantic.error(f"variable {n!r} (a {type(v).__name__}) cannot be "
                                     "reassigned inside a runtime loop")

    def loop_names(self, body: list[ast.stmt], exclude: set[str]) -> tuple[list[str], bool]:
        names = self.carried_names(body, exclude)
        has_ret = contains_return(body)
        if has_ret:
            self.scope.setdefault(RET_FLAG, False)
            names += [n for n in (RET_FLAG, RET_VAL)
                      if n in self.scope and n not in names and flatten(self.scope[n])[0]]
        return names, has_ret

    def runtime_for(self, node: ast.For, args: list[Any], attrs: dict[str, Any]) -> None:
        if not 1 <= len(args) <= 3:
            raise self.error(f"range expects 1 to 3 arguments, got {len(args)}", node.iter)
        lo, hi, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
        if not isinstance(node.target, ast.Name):
            raise self.error("the loop variable of a runtime loop must be a plain name", node)
        lo, hi, step = semantic.loop_bounds(self.b, lo, hi, step)
        iv_name = node.target.id
        names, has_ret = self.loop_names(node.body, {iv_name})
        carry = Carried(self, names)
        body = Block()
        iv = body.add_arg(TileType((), lo.type.elem), iv_name)
        inner = dict(self.scope)
        inner[iv_name] = iv
        carry.bind_args(body, inner)
        with self.scoped(inner, body):
            if has_ret:
                # once returned, the remaining iterations do nothing
                self.build_if(
                    semantic.logical_not(self.b, inner[RET_FLAG]),
                    [lambda: self.visit_stmts(node.body), lambda: None],
                    entry=({RET_FLAG: False}, {RET_FLAG: True}),
                    fill=lambda like: carry.add_late(RET_VAL, like, [body]))
            else:
                self.visit_stmts(node.body)
            with self.b.at_loc(self.src.loc(node)):
                outs = carry.outs(self, self.scope)
                self.b.create("yield", outs)
        self.check_untouched({k: v for k, v in self.scope.items() if k != iv_name}, inner,
                             carry.names)
        inits = carry.inits + carry.late_inits(self)
        op = self.b.create("for", [lo, hi, step, *inits], [v.type for v in inits],
                           attrs=attrs, regions=[body])
        self.finish_loop(op, carry, inner)

    def finish_loop(self, op: Op, carry: Carried, inner: dict) -> None:
        carry.bind_results(op, prune_invariant(op), self.scope)
        self.scoped_out.update(k for k in inner if k not in self.scope)

    def visit_While(self, node: ast.While) -> None:
        if node.orelse:
            raise self.error("while ... else is not supported", node)
        names, has_ret = self.loop_names(node.body, set())
        carry = Carried(self, names)
        cond_blk = Block()
        cond_scope = dict(self.scope)
        carry.bind_args(cond_blk, cond_scope)
        with self.scoped(cond_scope, cond_blk):
            c = self.while_condition(node, has_ret)
            if c is None:
                return  # while False: the body is never compiled
            term = self.b.create("condition", [c, *cond_blk.args])
        body = Block()
        inner = dict(self.scope)
        carry.bind_args(body, inner)
        if has_ret:
            inner[RET_FLAG] = False  # the condition is only true before a return
        with self.scoped(inner, body):
            self.visit_stmts(node.body)
            if has_ret and RET_VAL in self.scope and RET_VAL not in carry.names:
                carry.add_late(RET_VAL, self.scope[RET_VAL], [cond_blk, body], term)
            with self.b.at_loc(self.src.loc(node)):
                outs = carry.outs(self, self.scope)
                self.b.create("yield", outs)
        self.check_untouched(self.scope, inner, carry.names)
        inits = carry.inits + carry.late_inits(self)
        op = self.b.create("while", inits, [v.type for v in inits], regions=[cond_blk, body])
        self.finish_loop(op, carry, inner)

    def while_condition(self, node: ast.While, has_ret: bool) -> Value | None:
        """The int1 condition of a while loop in its cond region (None for `while False`).
        After a return the user's condition is not evaluated (it could read memory the program
        would not read): the region computes `if not returned: cond else: False`."""
        if not has_ret:
            c = self.visit(node.test)
            if not semantic.is_value(c):
                if c:
                    raise self.error("a while loop needs a runtime condition (no break)",
                                     node.test)
                return None
            return self.loop_condition(c)
        live = semantic.logical_not(self.b, self.scope[RET_FLAG])
        then = Block()
        with self.scoped(dict(self.scope), then):
            c = self.visit(node.test)
            if semantic.is_value(c):
                c = self.loop_condition(c)
            self.b.create("yield", [c] if semantic.is_value(c) else [])
        if not semantic.is_value(c):
            return live if c else None  # `while True:` ends by returning
        with self.b.at_block(Block()) as other:
            false = semantic.to_value(self.b, False)
            self.b.create("yield", [false])
        return self.b.create("if", [live], [TileType((), int1)],
                             regions=[then, other]).results[0]

    def unrolled_for(self, node: ast.For, items: list[Any]) -> None:
        for i, v in enumerate(items):
            if self.flag() is True:
                return
            self.assign(node.target, v)
            self.visit_stmts(node.body)
            if i + 1 < len(items) and semantic.is_value(self.flag()):
                self.guard(lambda i=i: self.unrolled_for(node, items[i + 1:]))
                return

