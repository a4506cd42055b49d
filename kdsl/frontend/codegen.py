"""The AST visitor: Python syntax of a kernel body -> Tile IR, through `Builder` and `semantic`.

It knows Python syntax, names and control flow; every type, promotion and shape rule is in
`kdsl/language/semantic.py`. Values flowing through the visitor are Tile IR `Value`s or
compile-time Python objects (ints, floats, bools, strings, tuples, dtypes, modules, functions):
operators on compile-time operands are evaluated by Python itself (`BLOCK // 2` stays an int),
and constants become `const` ops only when they meet an IR value or cross runtime control flow.

Runtime control flow is built in SSA form: the variables a loop body assigns that existed before
the loop are carried (block arguments, yielded back, results of the loop op); a runtime `if`
yields the variables either branch changed, and those first defined in both branches.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import operator
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np

from ..errors import CompilationError
from ..ir.tile import Block, Value
from ..ir.types import DType, TileType
from ..language import core, semantic
from .builder import Builder
from .source import Source, get_source

# Python operator -> (IR kind, Python function for compile-time operands)
_BINOPS: dict[type, tuple[str, Any]] = {
    ast.Add: ("add", operator.add), ast.Sub: ("sub", operator.sub),
    ast.Mult: ("mul", operator.mul), ast.Div: ("div", operator.truediv),
    ast.FloorDiv: ("floordiv", operator.floordiv), ast.Mod: ("mod", operator.mod),
    ast.Pow: ("pow", operator.pow), ast.BitAnd: ("and", operator.and_),
    ast.BitOr: ("or", operator.or_), ast.BitXor: ("xor", operator.xor),
    ast.LShift: ("shl", operator.lshift), ast.RShift: ("shr", operator.rshift),
}
_CMPOPS: dict[type, tuple[str | None, Any]] = {
    ast.Eq: ("eq", operator.eq), ast.NotEq: ("ne", operator.ne), ast.Lt: ("lt", operator.lt),
    ast.LtE: ("le", operator.le), ast.Gt: ("gt", operator.gt), ast.GtE: ("ge", operator.ge),
    ast.Is: (None, operator.is_), ast.IsNot: (None, operator.is_not),
    ast.In: (None, lambda a, b: a in b), ast.NotIn: (None, lambda a, b: a not in b),
}
# Python builtins a kernel may call on compile-time values.
_PY_BUILTINS: dict[str, Any] = {
    n: getattr(builtins, n)
    for n in ["range", "min", "max", "abs", "len", "int", "float", "bool", "isinstance", "tuple", "list", "getattr"]
}
# min/max of runtime values mean maximum/minimum, as users expect from Python.
_PY_MINMAX = {builtins.min: "minimum", builtins.max: "maximum"}
_MISSING = object()
_MAX_INLINE_DEPTH = 32


class BoundMethod:
    """`x.to`, `x.sum`, ...: a builtin with the tile as first argument."""

    def __init__(self, fn: Any, self_value: Value):
        self.fn, self.self_value = fn, self_value


def normalize(obj: Any) -> Any:
    """What a name from outside the kernel means inside it: constexpr wrappers give their value
    and NumPy scalars their Python equivalent."""
    if isinstance(obj, core.constexpr):
        return normalize(obj.value)
    if isinstance(obj, np.generic) and isinstance(obj, (np.bool_, np.integer, np.floating)):
        return obj.item()
    return obj


def assigned_names(stmts: list[ast.stmt]) -> list[str]:
    """Names a list of statements assigns, in order of first appearance."""
    seen: dict[str, None] = {}
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                seen.setdefault(n.id, None)
    return list(seen)


def _is_runtime_data(x: Any) -> bool:
    return semantic.is_value(x) or semantic.is_scalar_const(x)


def _ends_with_bare_return(stmts: list[ast.stmt]) -> bool:
    return bool(stmts) and isinstance(stmts[-1], ast.Return) and stmts[-1].value is None


class CodeGenerator(ast.NodeVisitor):
    """Visits one function body (the kernel, or an inlined helper) into the builder's block."""

    def __init__(self, src: Source, builder: Builder, scope: dict[str, Any], pyfn: Any,
                 kernel: str, depth: int = 0):
        self.src, self.b, self.scope, self.kernel, self.depth = src, builder, scope, kernel, depth
        self.globals = pyfn.__globals__
        self.closure: dict[str, Any] = {}
        for name, cell in zip(pyfn.__code__.co_freevars, pyfn.__closure__ or ()):
            try:
                self.closure[name] = cell.cell_contents
            except ValueError:  # an empty cell: name not bound yet
                pass
        self.runtime_depth = 0  # > 0 inside a runtime loop or branch
        self.returned = False
        self.ret_value: Any = None
        self.scoped_out: set[str] = set()  # names defined only inside a loop or a branch

    # ------------------------------------------------------------------------ plumbing

    def error(self, msg: str, node: ast.AST | None = None) -> CompilationError:
        loc = self.src.loc(node) if node is not None else self.b.loc
        return CompilationError(msg, loc, self.kernel)

    def visit(self, node: ast.AST) -> Any:
        loc = self.src.loc(node) if hasattr(node, "lineno") else self.b.loc
        with self.b.at_loc(loc):
            try:
                return super().visit(node)
            except CompilationError as e:
                if e.loc is None or not e.loc.line:
                    raise CompilationError(e.msg, loc, self.kernel) from None
                raise
            except RecursionError:
                raise CompilationError("nesting too deep", loc, self.kernel) from None
            except Exception as e:  # a Python error while evaluating compile-time code
                raise CompilationError(f"{type(e).__name__}: {e}", loc, self.kernel) from e

    def generic_visit(self, node: ast.AST) -> Any:
        raise self.error(f"unsupported syntax in a kernel: {type(node).__name__}", node)

    @contextmanager
    def scoped(self, scope: dict[str, Any], block: Block) -> Iterator[dict[str, Any]]:
        """Visit a region: `scope` as the variables, `block` as the insertion point."""
        saved = self.scope
        self.scope = scope
        self.runtime_depth += 1
        try:
            with self.b.at_block(block):
                yield scope
        finally:
            self.scope = saved
            self.runtime_depth -= 1

    def lookup(self, name: str) -> Any:
        for table in (self.scope, self.closure, self.globals):
            if name in table:
                return normalize(table[name])
        if hasattr(builtins, name):  # only those in _PY_BUILTINS can be called
            return getattr(builtins, name)
        hint = " (it is defined only inside a loop or one branch of an if)" \
            if name in self.scoped_out else ""
        raise semantic.error(f"unknown name {name!r}{hint}")

    def bind(self, name: str, value: Any) -> None:
        if isinstance(value, Value) and not value.name and not isinstance(value.owner, Block):
            value.name = name
        self.scope[name] = value

    # ---------------------------------------------------------------------- statements

    def visit_stmts(self, stmts: list[ast.stmt], tail: bool = False) -> None:
        """Visit statements in order. `tail`: nothing follows them in the function, which lets
        `if cond: ...; return` at runtime become an if/else over the remaining statements."""
        for i, s in enumerate(stmts):
            if self.returned:
                return
            if tail and isinstance(s, ast.If) and (
                    _ends_with_bare_return(s.body) or _ends_with_bare_return(s.orelse)):
                self.visit_if(s, rest=stmts[i + 1:])
                return
            self.visit(s)

    def visit_Expr(self, node: ast.Expr) -> None:
        self.visit(node.value)

    def visit_Pass(self, node: ast.Pass) -> None:
        pass

    def visit_Assign(self, node: ast.Assign) -> None:
        value = self.visit(node.value)
        for t in node.targets:
            self.assign(t, value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.assign(node.target, self.visit(node.value))

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if not isinstance(node.target, ast.Name):
            raise self.error("augmented assignment needs a plain variable", node)
        cur = self.lookup(node.target.id)
        self.assign(node.target, self.binop(node.op, cur, self.visit(node.value)))

    def assign(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.bind(target.id, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, (tuple, list)) or len(value) != len(target.elts):
                n = len(value) if isinstance(value, (tuple, list)) else "a non-tuple"
                raise self.error(f"cannot unpack {n} into {len(target.elts)} names", target)
            for t, v in zip(target.elts, value):
                self.assign(t, v)
        else:
            raise self.error("only variables can be assigned (tiles are immutable values)",
                             target)

    def visit_Return(self, node: ast.Return) -> None:
        if self.runtime_depth:
            raise self.error("return inside a runtime loop or if is not supported", node)
        self.ret_value = self.visit(node.value) if node.value is not None else None
        self.returned = True

    def visit_Assert(self, node: ast.Assert) -> None:
        cond = self.visit(node.test)
        if semantic.is_value(cond):
            raise self.error("assert needs a compile-time condition", node)
        if not cond:
            msg = self.visit(node.msg) if node.msg is not None else ""
            raise self.error(f"assertion failed: {msg}" if msg else "assertion failed", node)

    # ------------------------------------------------------------------------------ if

    def visit_If(self, node: ast.If) -> None:
        self.visit_if(node, rest=None)

    def visit_if(self, node: ast.If, rest: list[ast.stmt] | None) -> None:
        with self.b.at_loc(self.src.loc(node)):
            cond = self.visit(node.test)
            if not semantic.is_value(cond):
                # Compile-time condition: only the taken branch is compiled.
                taken = node.body if cond else node.orelse
                if rest is None:
                    self.visit_stmts(taken)
                else:
                    self.visit_stmts(list(taken) + list(rest), tail=True)
                return
            try:
                self.runtime_if(node, cond, rest)
            except CompilationError as e:
                if e.loc is None or not e.loc.line:
                    raise self.error(e.msg, node) from None
                raise

    def runtime_if(self, node: ast.If, cond: Value, rest: list[ast.stmt] | None) -> None:
        c = semantic.condition(self.b, cond, "an if")
        branches = [list(node.body), list(node.orelse)]
        tail = rest is not None
        if tail:  # `if c: A; return` followed by R is `if c: A else: R`
            for i, br in enumerate(branches):
                if _ends_with_bare_return(br):
                    branches[i] = br[:-1]
                else:
                    branches[i] = br + list(rest)
        blocks, scopes = [Block(), Block()], []
        for br, blk in zip(branches, blocks):
            with self.scoped(dict(self.scope), blk) as sc:
                self.visit_stmts(br, tail=tail)
                self.returned = False
            scopes.append(sc)
        names = list(dict.fromkeys([*scopes[0], *scopes[1]]))
        merged: dict[str, Any] = {}  # name -> its value after the if (unchanged or constant)
        results: dict[str, int] = {}  # name -> index of the if result that holds it
        yields: tuple[list[Value], list[Value]] = ([], [])
        for name in names:
            tv, ev = scopes[0].get(name, _MISSING), scopes[1].get(name, _MISSING)
            if tv is _MISSING or ev is _MISSING:
                self.scoped_out.add(name)
                continue
            if tv is ev or (semantic.is_scalar_const(tv) and type(tv) is type(ev) and tv == ev):
                merged[name] = tv
                continue
            if not (_is_runtime_data(tv) and _is_runtime_data(ev)):
                raise semantic.error(f"variable {name!r} gets different compile-time values "
                                     "in the two branches of a runtime if")
            tvv = self.materialize(tv, ev, blocks[0])
            evv = self.materialize(ev, tvv, blocks[1])
            if tvv.type != evv.type:
                raise semantic.error(f"variable {name!r} has type {tvv.type} in one branch of "
                                     f"the if and {evv.type} in the other")
            results[name] = len(yields[0])
            yields[0].append(tvv)
            yields[1].append(evv)
        for blk, ys in zip(blocks, yields):
            with self.b.at_block(blk):
                self.b.create("yield", ys)
        op = self.b.create("if", [c], [v.type for v in yields[0]], regions=blocks)
        for name, v in merged.items():
            self.scope[name] = v
        for name, i in results.items():
            op.results[i].name = name
            self.scope[name] = op.results[i]
        if tail:
            self.returned = True

    def materialize(self, x: Any, like: Any, block: Block) -> Value:
        """`x` as a Value in `block`. A Python constant takes the type and shape of `like` when
        that is a Value (as a weakly typed literal would), else the common literal type."""
        if semantic.is_value(x):
            return x
        with self.b.at_block(block):
            if not semantic.is_value(like):
                return semantic.to_value(self.b, x, semantic.binary_dtype(x, like))
            dt = like.type.elem
            if isinstance(dt, DType) and dt.is_bool and isinstance(x, int) and x in (0, 1):
                # 0/1/False/True beside a boolean value is that boolean (not an int32 literal)
                v = semantic.to_value(self.b, x, dt)
            else:
                v = semantic.to_value(self.b, x, semantic.weak_dtype(x, dt)
                                      if isinstance(dt, DType) else None)
            return semantic.broadcast_to(self.b, v, like.shape)

    # --------------------------------------------------------------------------- loops

    def carried_names(self, body: list[ast.stmt], exclude: set[str]) -> list[str]:
        """Variables a loop body assigns that exist before the loop and hold runtime data."""
        out = []
        for n in assigned_names(body):
            if n in exclude or n not in self.scope:
                continue
            if _is_runtime_data(self.scope[n]):
                out.append(n)
        return out

    def loop_out(self, name: str, new: Any, init: Value) -> Value:
        """End-of-body value of a carried variable, which must keep the type it entered with."""
        if semantic.is_value(new) or not semantic.is_scalar_const(new):
            v = new
        else:
            v = semantic.to_value(self.b, new, semantic.weak_dtype(new, init.type.elem)
                                  if isinstance(init.type.elem, DType) else None)
        if not semantic.is_value(v) or v.type != init.type:
            got = v.type if semantic.is_value(v) else repr(v)
            raise semantic.error(
                f"loop-carried variable {name!r} changes type in the loop: {init.type} before "
                f"the loop, {got} at the end of the body (give it its final type before the "
                "loop, e.g. with kd.zeros or .to())")
        return v

    def check_untouched(self, before: dict, after: dict, carried: list[str]) -> None:
        for n, v in before.items():
            if n not in carried and after.get(n, _MISSING) is not v:
                raise semantic.error(f"variable {n!r} (a {type(v).__name__}) cannot be "
                                     "reassigned inside a runtime loop")

    def visit_For(self, node: ast.For) -> None:
        if node.orelse:
            raise self.error("for ... else is not supported", node)
        it = node.iter
        if isinstance(it, ast.Call):
            fn = self.visit(it.func)
            args = [self.visit(a) for a in it.args]
            kwargs = {k.arg: self.visit(k.value) for k in it.keywords}
            if fn is builtins.range:
                if kwargs:
                    raise self.error("range() takes no keyword arguments", it)
                return self.runtime_for(node, args)
            iterable = self.call(fn, args, kwargs)
        else:
            iterable = self.visit(it)
        if isinstance(iterable, (core.static_range, tuple, list)):
            return self.unrolled_for(node, iterable)
        raise self.error("a for loop needs range(...), kd.static_range(...) or a tuple", node)

    def unrolled_for(self, node: ast.For, iterable: Any) -> None:
        for v in iterable:
            self.assign(node.target, v)
            self.visit_stmts(node.body)
            if self.returned:
                return

    def runtime_for(self, node: ast.For, args: list[Any]) -> None:
        if not 1 <= len(args) <= 3:
            raise self.error(f"range expects 1 to 3 arguments, got {len(args)}", node.iter)
        lo, hi, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
        if not isinstance(node.target, ast.Name):
            raise self.error("the loop variable of a runtime loop must be a plain name", node)
        lo, hi, step = semantic.loop_bounds(self.b, lo, hi, step)
        iv_dt = lo.type.elem
        iv_name = node.target.id
        carried = self.carried_names(node.body, {iv_name})
        inits = [semantic.to_value(self.b, self.scope[n]) for n in carried]
        body = Block()
        iv = body.add_arg(TileType((), iv_dt), iv_name)
        inner = dict(self.scope)
        inner[iv_name] = iv
        for n, v in zip(carried, inits):
            inner[n] = body.add_arg(v.type, n)
        with self.scoped(inner, body):
            self.visit_stmts(node.body)
            with self.b.at_loc(self.src.loc(node)):
                outs = [self.loop_out(n, inner[n], v) for n, v in zip(carried, inits)]
                self.b.create("yield", outs)
        self.check_untouched({k: v for k, v in self.scope.items() if k != iv_name}, inner,
                             carried)
        op = self.b.create("for", [lo, hi, step, *inits], [v.type for v in inits],
                           regions=[body])
        self.finish_loop(op, carried, inner)

    def finish_loop(self, op, carried: list[str], inner: dict) -> None:
        for n, r in zip(carried, op.results):
            r.name = n
            self.scope[n] = r
        self.scoped_out.update(k for k in inner if k not in self.scope)

    def visit_While(self, node: ast.While) -> None:
        if node.orelse:
            raise self.error("while ... else is not supported", node)
        carried = self.carried_names(node.body, set())
        inits = [semantic.to_value(self.b, self.scope[n]) for n in carried]
        cond_blk = Block()
        cond_scope = dict(self.scope)
        for n, v in zip(carried, inits):
            cond_scope[n] = cond_blk.add_arg(v.type, n)
        with self.scoped(cond_scope, cond_blk):
            c = self.visit(node.test)
            if not semantic.is_value(c):
                if c:
                    raise self.error("a while loop needs a runtime condition (no break)",
                                     node.test)
                return  # while False: the body is never compiled
            c = semantic.condition(self.b, c, "a while")
            self.b.create("condition", [c, *cond_blk.args])
        body = Block()
        inner = dict(self.scope)
        for n, v in zip(carried, inits):
            inner[n] = body.add_arg(v.type, n)
        with self.scoped(inner, body):
            self.visit_stmts(node.body)
            with self.b.at_loc(self.src.loc(node)):
                outs = [self.loop_out(n, inner[n], v) for n, v in zip(carried, inits)]
                self.b.create("yield", outs)
        self.check_untouched(self.scope, inner, carried)
        op = self.b.create("while", inits, [v.type for v in inits], regions=[cond_blk, body])
        self.finish_loop(op, carried, inner)

    # ---------------------------------------------------------------------- expressions

    def visit_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def visit_Name(self, node: ast.Name) -> Any:
        return self.lookup(node.id)

    def visit_Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.expand(node.elts))

    def visit_List(self, node: ast.List) -> tuple:
        return tuple(self.expand(node.elts))

    def expand(self, elts: list[ast.expr]) -> list[Any]:
        out = []
        for e in elts:
            if isinstance(e, ast.Starred):
                out.extend(self.visit(e.value))
            else:
                out.append(self.visit(e))
        return out

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        obj = self.visit(node.value)
        if isinstance(obj, Value):
            if node.attr in core.TILE_METHODS:
                return BoundMethod(core.TILE_METHODS[node.attr], obj)
            return semantic.value_attr(self.b, obj, node.attr)
        try:
            return normalize(semantic.type_attr(obj, node.attr))
        except AttributeError:
            what = obj.__name__ if isinstance(obj, ModuleType) else type(obj).__name__
            raise semantic.error(f"{what} has no attribute {node.attr!r}") from None

    def visit_BinOp(self, node: ast.BinOp) -> Any:
        return self.binop(node.op, self.visit(node.left), self.visit(node.right))

    def binop(self, op: ast.operator, x: Any, y: Any) -> Any:
        if type(op) not in _BINOPS:
            raise semantic.error(f"unsupported operator {type(op).__name__}")
        kind, pyop = _BINOPS[type(op)]
        if not (semantic.is_value(x) or semantic.is_value(y)):
            return pyop(x, y)
        return semantic.binary(self.b, kind, x, y)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Any:
        x = self.visit(node.operand)
        if not semantic.is_value(x):
            return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert,
                    ast.Not: operator.not_}[type(node.op)](x)
        rules = {ast.USub: semantic.neg, ast.UAdd: lambda b, v: v,
                 ast.Invert: semantic.invert, ast.Not: semantic.logical_not}
        return rules[type(node.op)](self.b, x)

    def visit_BoolOp(self, node: ast.BoolOp) -> Any:
        is_and = isinstance(node.op, ast.And)
        result = self.visit(node.values[0])
        for e in node.values[1:]:
            if not semantic.is_value(result):
                if bool(result) != is_and:  # Python's short-circuit on a constant
                    return result
                result = self.visit(e)
                continue
            rhs = self.visit(e)
            if not semantic.is_value(rhs) and bool(rhs) == is_and:
                result = semantic.to_int1(self.b, result)  # x and True / x or False
                continue
            result = semantic.logical(self.b, "and" if is_and else "or", result, rhs)
        return result

    def visit_Compare(self, node: ast.Compare) -> Any:
        left, result = self.visit(node.left), None
        for op, comp in zip(node.ops, node.comparators):
            right = self.visit(comp)
            kind, pyop = _CMPOPS[type(op)]
            if kind is None or not (semantic.is_value(left) or semantic.is_value(right)):
                r = pyop(left, right)
            else:
                r = semantic.compare(self.b, kind, left, right)
            if result is None:
                result = r
            elif semantic.is_value(result) or semantic.is_value(r):
                result = semantic.binary(self.b, "and", result, r)
            else:
                result = result and r
            left = right
        return result

    def visit_IfExp(self, node: ast.IfExp) -> Any:
        cond = self.visit(node.test)
        if not semantic.is_value(cond):
            return self.visit(node.body if cond else node.orelse)
        return semantic.where(self.b, cond, self.visit(node.body), self.visit(node.orelse))

    def visit_Subscript(self, node: ast.Subscript) -> Any:
        obj = self.visit(node.value)
        idx = self.visit(node.slice)
        if isinstance(obj, Value):
            return semantic.subscript(self.b, obj, idx if isinstance(idx, tuple) else (idx,))
        if semantic.is_value(idx):
            raise semantic.error("compile-time sequences need compile-time indices")
        return obj[idx]

    def visit_Slice(self, node: ast.Slice) -> slice:
        parts = [self.visit(p) if p is not None else None
                 for p in (node.lower, node.upper, node.step)]
        return slice(*parts)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> str:
        out = []
        for v in node.values:
            if isinstance(v, ast.FormattedValue):
                out.append(format(self.visit(v.value)))
            else:
                out.append(v.value)
        return "".join(out)

    # --------------------------------------------------------------------------- calls

    def visit_Call(self, node: ast.Call) -> Any:
        fn = self.visit(node.func)
        args = self.expand(node.args)
        kwargs = {}
        for k in node.keywords:
            if k.arg is None:
                raise self.error("**kwargs calls are not supported in kernels", node)
            kwargs[k.arg] = self.visit(k.value)
        return self.call(fn, args, kwargs)

    def call(self, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if isinstance(fn, BoundMethod):
            return self.call(fn.fn, [fn.self_value, *args], kwargs)
        if getattr(fn, "__kdsl_builtin__", False):
            name = getattr(fn, "__kdsl_name__", f"kd.{fn.__name__}")
            try:
                bound = inspect.signature(fn).bind(*args, **kwargs)
            except TypeError as e:
                raise semantic.error(f"{name}: {e}") from None
            fn_params = getattr(fn, "__kdsl_fn_params__", ())
            if fn_params:  # e.g. kd.reduce's combine_fn: inlined where the builtin asks
                for p in fn_params:
                    if p in bound.arguments:
                        bound.arguments[p] = self.inliner(bound.arguments[p], name, p)
                args, kwargs = list(bound.args), dict(bound.kwargs)
            return fn(*args, _builder=self.b, **kwargs)
        if getattr(fn, "__kdsl_jit__", None) is not None:
            return self.inline(fn.__kdsl_jit__, args, kwargs)
        if fn is core.static_range or fn is core.constexpr:
            return normalize(fn(*args, **kwargs))
        if fn in _PY_MINMAX and any(semantic.is_value(a) for a in args):
            if len(args) != 2 or kwargs:
                raise semantic.error("min/max of runtime values take exactly two arguments")
            return semantic.binary(self.b, _PY_MINMAX[fn], *args)
        if any(fn is f for f in _PY_BUILTINS.values()):
            if any(semantic.is_value(a) for a in [*args, *kwargs.values()]):
                raise semantic.error(f"{fn.__name__}() works on compile-time values only")
            return fn(*args, **kwargs)
        if isinstance(fn, DType):
            raise semantic.error(f"{fn} is a dtype, not a function; use x.to(kd.{fn})")
        name = getattr(fn, "__name__", repr(fn))
        module = getattr(fn, "__module__", None)
        name = f"{module}.{name}" if module and module != "builtins" else name
        raise semantic.error(f"{name} is not a kdsl function: a kernel can call kd.* builtins "
                             "and @kd.jit functions only")

    def inliner(self, f: Any, builtin: str, param: str) -> Any:
        """A Python callable that inlines the kdsl function `f` (a @kd.jit function or a
        builtin) at the builder's insertion point, for a builtin parameter taking a function."""
        if not (getattr(f, "__kdsl_jit__", None) is not None
                or getattr(f, "__kdsl_builtin__", False)):
            what = getattr(f, "__name__", None) or type(f).__name__
            raise semantic.error(f"{builtin}: {param} must be a @kd.jit function, got {what}")
        return lambda *xs: self.call(f, list(xs), {})

    def inline(self, pyfn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Compile a @kd.jit helper's body in place with its parameters bound to the arguments;
        its `return` value (a value or a tuple) is the call's value."""
        if self.depth >= _MAX_INLINE_DEPTH:
            raise semantic.error(f"helper calls nested more than {_MAX_INLINE_DEPTH} deep "
                                 "(recursion is not supported)")
        try:
            bound = inspect.signature(pyfn).bind(*args, **kwargs)
        except TypeError as e:
            raise semantic.error(f"{pyfn.__name__}(): {e}") from None
        bound.apply_defaults()
        scope = {k: normalize(v) for k, v in bound.arguments.items()}
        gen = CodeGenerator(get_source(pyfn), self.b, scope, pyfn, self.kernel, self.depth + 1)
        gen.visit_stmts(gen.src.fn_def.body, tail=True)
        return gen.ret_value
