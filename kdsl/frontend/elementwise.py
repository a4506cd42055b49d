"""The body of `kd.map_elementwise`'s scalar function, compiled over tiles.

Triton compiles `scalar_fn` once per element, so it may branch on an element's value (`if x
> 0: return x else: return alpha * (exp(x) - 1)`). A kdsl tile cannot branch per element:
the function is inlined with the argument tiles in place of its scalars, by a visitor
(`ElementwiseGenerator`, also used for the helpers it calls) that compiles every runtime `if`
by **selection**: both branches are computed on every element, then each variable they change
(and the early-return flag and value) is `where(cond, then_value, else_value)`. Early returns
therefore work per element (the statements after a return run, and their values are not
selected where the element had returned), and so do ifs in runtime loops whose bounds are
uniform. Memory accesses keep Triton's meaning, where only the taken branch runs: each load,
store and atomic of a branch (or of a side of `a if c else b`) is masked by the branch's
condition (a masked-off load reads 0, and its value is not selected), an assertion only checks
where its branch is taken, and printing under an element-wise condition is an error.

What cannot be per element is an error naming the line: a `for` loop whose bounds or a
`while` loop whose condition (or early exit by `return`) depend on an element, since every
element of a tile runs the same iterations.

A variable a loop carries is a scalar on entry (`acc = 0.0`) and becomes a tile in the body
(`acc += x`): in Triton both are one element's scalar. The visitor then compiles the loop
again with that variable broadcast to the tile's shape before it (`_Widen`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import CompilationError
from ..ir.tile import ISOLATED_REGIONS, Block, Op, Value
from ..ir.types import TileType, int1
from ..language import semantic
from .aggregates import describe_spec, flatten, same_spec, unflatten
from .codegen import CodeGenerator
from .control import _MISSING, RET_FLAG, RET_VAL, _same_const, _show

_WHERE = "inside kd.map_elementwise"


class _Widen(Exception):
    """A loop-carried variable entered the loop narrower than the body makes it."""

    def __init__(self, name: str, shape: tuple[int, ...]):
        super().__init__(name)
        self.name, self.shape = name, shape


def inline_elementwise(gen: CodeGenerator, f: Any, args: list[Any],
                       shape: tuple[int, ...]) -> Any:
    """Call `f` (kd.map_elementwise's scalar_fn) on `args`, tiles of `shape`, from the visitor
    `gen`: a @kd.jit function is inlined by an `ElementwiseGenerator`; a builtin (`kd.exp`)
    is element-wise already."""
    pyfn = getattr(f, "__kdsl_jit__", None)
    if pyfn is None:
        return gen.call(f, args, {})

    def make(src: Any, scope: dict[str, Any], fn: Any) -> ElementwiseGenerator:
        return ElementwiseGenerator(src, gen.b, scope, fn, gen.kernel, gen.depth + 1,
                                    gen.ptr_sources, gen.map_inline, map_shape=shape)

    return gen.inline(pyfn, args, {}, make)


class ElementwiseGenerator(CodeGenerator):
    """Compiles a function body per element of tiles of `map_shape` (module docstring)."""

    def __init__(self, *args: Any, map_shape: tuple[int, ...], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.map_shape = map_shape

    def helper_generator(self, src: Any, scope: dict[str, Any], pyfn: Any) -> CodeGenerator:
        return ElementwiseGenerator(src, self.b, scope, pyfn, self.kernel, self.depth + 1,
                                    self.ptr_sources, self.map_inline, map_shape=self.map_shape)

    # ------------------------------------------------------------------------ conditions

    def if_condition(self, cond: Any) -> Value:
        return semantic.to_int1(self.b, cond)  # a tile selects per element

    def loop_condition(self, cond: Any) -> Value:
        if semantic.shape(cond):
            raise semantic.error(f"{_WHERE}, a while condition cannot depend on the element "
                                 f"(got a tile of shape {list(semantic.shape(cond))}): every "
                                 "element of the tile runs the same iterations")
        return super().loop_condition(cond)

    def while_condition(self, node: Any, has_ret: bool) -> Value | None:
        if has_ret and semantic.shape(self.scope.get(RET_FLAG, False)):
            raise self.error(f"{_WHERE}, a while loop cannot return under a condition that "
                             "depends on the element (its iterations would differ per "
                             "element)", node)
        return super().while_condition(node, has_ret)

    # --------------------------------------------------------------------------- loops

    def runtime_for(self, node: Any, args: list[Any], attrs: dict[str, Any]) -> None:
        for a in args:
            if semantic.shape(a):
                raise self.error(f"{_WHERE}, the bounds of a loop cannot depend on the element "
                                 f"(got a tile of shape {list(semantic.shape(a))}): every "
                                 "element of the tile runs the same iterations", node.iter)
        base = super().runtime_for
        self.widening(lambda: base(node, args, attrs))

    def visit_While(self, node: Any) -> None:
        base = super().visit_While
        self.widening(lambda: base(node))

    def loop_out(self, name: str, new: Any, t: TileType) -> Value:
        if (semantic.is_value(new) and new.type.elem == t.elem and new.shape != t.shape
                and semantic.broadcast_shapes(t.shape, new.shape) == new.shape):
            raise _Widen(name, new.shape)
        return super().loop_out(name, new, t)

    def widening(self, build: Callable[[], None]) -> None:
        """Build a loop; while a carried variable comes out of the body wider than it went
        in, broadcast it before the loop and build the loop again (the failed attempt left
        only dead constants behind)."""
        while True:
            try:
                return build()
            except _Widen as w:
                old = self.scope.get(w.name, _MISSING)
                if old is _MISSING:
                    raise semantic.error(f"{_show(w.name)} changes shape in the loop") from None
                leaves, spec = flatten(old)
                wide = [semantic.broadcast_to(self.b, semantic.to_value(self.b, v), w.shape)
                        if semantic.shape(v) != w.shape else v for v in leaves]
                if all(a is b for a, b in zip(wide, leaves)):
                    raise semantic.error(f"{_show(w.name)} changes shape in the loop") from None
                self.scope[w.name] = unflatten(spec, wide)

    # ------------------------------------------------------------------------------- if

    def visit_IfExp(self, node: Any) -> Any:
        """`a if c else b`: both sides, their memory accesses masked as an if's branches."""
        cond = self.visit(node.test)
        if not semantic.is_value(cond):
            return self.visit(node.body if cond else node.orelse)
        c = semantic.to_int1(self.b, cond)
        sides = []
        for side, m in ((node.body, c), (node.orelse, semantic.logical_not(self.b, c))):
            blk = Block()
            with self.b.at_block(blk):
                sides.append(self.visit(side))
            _guard(self, blk, m)
            self.b.block.ops.extend(blk.ops)
        return semantic.where(self.b, c, *sides)

    def build_if(self, c: Value, branches: list[Callable[[], None]],
                 entry: tuple[dict, dict] = ({}, {}), tail: bool = False,
                 fill: Callable[[Any], Any] | None = None) -> None:
        """Both branches built in the current block (their memory accesses masked by their
        condition), then every variable either changed merged by `where(c, ...)`."""
        c = semantic.to_int1(self.b, c)
        conds = (c, semantic.logical_not(self.b, c))
        here = self.b.block
        scopes = []
        for build, over, cond in zip(branches, entry, conds):
            blk = Block()
            with self.scoped({**self.scope, **over}, blk) as sc:
                build()
            _guard(self, blk, cond)
            here.ops.extend(blk.ops)
            scopes.append(sc)
        returns_value = any(sc.get(RET_VAL) is not None for sc in scopes)
        for name in dict.fromkeys([*scopes[0], *scopes[1]]):
            if tail and name not in (RET_FLAG, RET_VAL):
                continue  # nothing follows in the function: no variable is read again
            vals = [sc.get(name, _MISSING) for sc in scopes]
            if name == RET_FLAG:
                if tail and not returns_value:
                    continue
                vals = [False if v is _MISSING else v for v in vals]
            elif _MISSING in vals:
                i = vals.index(_MISSING)
                if name == RET_VAL and fill is not None and i == 1:
                    # a loop's earlier return value: carried at the merged value's shape
                    vals[1] = fill(self.widened(vals[0], c.shape))
                elif name == RET_VAL or scopes[i].get(RET_FLAG) is True:
                    vals[i] = vals[1 - i]  # never read where branch i is taken
                else:
                    self.scoped_out.add(name)
                    continue
            self.scope[name] = self.select(name, c, vals[0], vals[1])

    def widened(self, x: Any, shape: tuple[int, ...]) -> Any:
        leaves, spec = flatten(x)
        out = []
        for v in leaves:
            v = semantic.to_value(self.b, v)
            out.append(semantic.broadcast_to(
                self.b, v, semantic.broadcast_shapes(v.shape, shape)))
        return unflatten(spec, out)

    def select(self, name: str, c: Value, a: Any, e: Any) -> Any:
        """`a` where c else `e`, leaf by leaf (the same structure, element types)."""
        (tl, ts), (el, es) = flatten(a), flatten(e)
        if not same_spec(ts, es):
            if name == RET_VAL:
                raise self.return_error(f"returns {describe_spec(ts)} on one path and "
                                        f"{describe_spec(es)} on another")
            if not tl and not el:
                raise semantic.error(f"{_show(name)} gets different compile-time values in "
                                     "the two branches of an if")
            raise semantic.error(f"{_show(name)} is {describe_spec(ts)} in one branch of the "
                                 f"if and {describe_spec(es)} in the other")
        here = self.b.block
        leaves = []
        for x, y in zip(tl, el):
            if x is y or _same_const(x, y):
                leaves.append(x)
                continue
            xv = self.materialize(x, y, here)
            yv = self.materialize(y, xv, here)
            if xv.type.elem != yv.type.elem:
                if name == RET_VAL:
                    raise self.return_error(f"returns {xv.type.elem} on one path and "
                                            f"{yv.type.elem} on another")
                raise semantic.error(f"{_show(name)} has type {xv.type.elem} in one branch of "
                                     f"the if and {yv.type.elem} in the other")
            leaves.append(semantic.where(self.b, c, xv, yv))
        return unflatten(ts, leaves)


# ------------------------------------------------------------------ effects under a branch

_MASKED_3RD = ("store", "atomic_rmw")  # (ptr, value[, mask])
_REFUSED = {"print": "printing", "barrier": "a barrier", "breakpoint": "a breakpoint",
            "atomic_cas": "atomic_cas (it has no mask)"}


def _guard(gen: CodeGenerator, blk: Block, cond: Value) -> None:
    """Make the memory accesses and assertions of `blk` (a branch, nested regions included)
    take effect only where `cond` holds."""
    i = 0
    while i < len(blk.ops):
        op = blk.ops[i]
        pre = Block()
        with gen.b.at_block(pre), gen.b.at_loc(op.loc):
            _guard_op(gen, op, cond)
        blk.ops[i:i] = pre.ops
        i += len(pre.ops) + 1
        if op.kind not in ISOLATED_REGIONS:
            for r in op.regions:
                _guard(gen, r, cond)


def _guard_op(gen: CodeGenerator, op: Op, cond: Value) -> None:
    b = gen.b
    if op.kind in _REFUSED:
        raise CompilationError(f"{_WHERE}, {_REFUSED[op.kind]} cannot be under a condition "
                               "that depends on the element", op.loc, gen.kernel)
    if op.kind not in ("load", "assert", *_MASKED_3RD):
        return
    shp = op.operands[0].shape
    if op.kind == "assert":  # checks only where the branch is taken
        shp = semantic.broadcast_shapes(cond.shape, shp)
        c = semantic.broadcast_to(b, op.operands[0], shp)
        op.operands[0] = semantic.binary(b, "or", c, semantic.logical_not(
            b, semantic.broadcast_to(b, cond, shp)))
        return
    if semantic.broadcast_shapes(cond.shape, shp) != shp:
        raise CompilationError(
            f"{_WHERE}, a {op.kind} of shape {list(shp)} cannot be under a condition of "
            f"shape {list(cond.shape)} (make its pointer a tile of the element shape)",
            op.loc, gen.kernel)
    m = semantic.broadcast_to(b, cond, shp)
    if op.kind == "load":
        if len(op.operands) == 1:
            pointee = op.operands[0].type.elem.pointee
            op.operands += [m, semantic.coerce(b, 0, pointee, shp)]
        else:
            op.operands[1] = b.op("and", [op.operands[1], m], TileType(shp, int1))
    elif len(op.operands) == 2:
        op.operands.append(m)
    else:
        op.operands[2] = b.op("and", [op.operands[2], m], TileType(shp, int1))
