"""The AST visitor: Python syntax of a kernel body -> Tile IR, through `Builder` and `semantic`.

It knows Python syntax, names and control flow; every type, promotion and shape rule is in
`kdsl/language/semantic.py`. Values flowing through the visitor are Tile IR `Value`s or
compile-time Python objects (ints, floats, bools, strings, tuples, dtypes, modules, functions,
block pointers): operators on compile-time operands are evaluated by Python itself (`BLOCK // 2`
stays an int), and constants become `const` ops only when they meet an IR value or cross
runtime control flow. Runtime control flow (SSA form, early returns) is in `control.py`.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import operator
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np

from ..errors import CompilationError
from ..ir.tile import Block, Value
from ..ir.types import DType, PointerType
from ..language import core, semantic, type_objects
from ..language.type_objects import Aggregate
from . import globals_used
from .builder import Builder
from .control import ControlFlow
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
_MAX_INLINE_DEPTH = 32


class BoundMethod:
    """`x.to`, `x.sum`, `desc.load`, ...: a builtin with the tile (or aggregate) first."""

    def __init__(self, fn: Any, self_value: Any):
        self.fn, self.self_value = fn, self_value


def normalize(obj: Any) -> Any:
    """What a name from outside the kernel means inside it: constexpr wrappers give their value
    and NumPy scalars their Python equivalent."""
    if isinstance(obj, core.constexpr):
        return normalize(obj.value)
    if isinstance(obj, np.generic) and isinstance(obj, (np.bool_, np.integer, np.floating)):
        return obj.item()
    return obj


#: (generator, scalar function, argument tiles, map shape) -> the call's value
MapInline = Callable[["CodeGenerator", Any, list[Any], tuple[int, ...]], Any]


class CodeGenerator(ControlFlow, ast.NodeVisitor):
    """Visits one function body (the kernel, or an inlined helper) into the builder's block."""

    def __init__(self, src: Source, builder: Builder, scope: dict[str, Any], pyfn: Any,
                 kernel: str, depth: int = 0, ptr_sources: list[Value] | None = None,
                 map_inline: MapInline | None = None):
        self.src, self.b, self.scope, self.kernel, self.depth = src, builder, scope, kernel, depth
        # how `kd.map_elementwise` inlines its scalar function (elementwise.py), given by the
        # frontend's entry point so that this module does not depend on its own subclass
        self.map_inline = map_inline
        # pointer parameters of the kernel (stand-ins on paths where a pointer is never read)
        self.ptr_sources: list[Value] = ptr_sources or []
        self.globals = pyfn.__globals__
        self.closure: dict[str, Any] = {}
        for name, cell in zip(pyfn.__code__.co_freevars, pyfn.__closure__ or ()):
            try:
                self.closure[name] = cell.cell_contents
            except ValueError:  # an empty cell: name not bound yet
                pass
        self.runtime_depth = 0  # > 0 inside a runtime loop or branch
        self.returns: list[ast.Return] = []  # the return statements compiled so far
        self.scoped_out: set[str] = set()  # names defined only inside a loop or a branch

    # ------------------------------------------------------------------------ plumbing

    def error(self, msg: str, node: ast.AST | None = None) -> CompilationError:
        loc = self.src.loc(node) if node is not None else self.b.loc
        return CompilationError(msg, loc, self.kernel)

    def visit(self, node: ast.AST) -> Any:
        return self.at(node, lambda: super(CodeGenerator, self).visit(node))

    def at(self, node: ast.AST, fn: Any) -> Any:
        """Run `fn` with `node`'s location: it stamps the ops built and errors raised without
        a location of their own."""
        loc = self.src.loc(node) if hasattr(node, "lineno") else self.b.loc
        with self.b.at_loc(loc):
            try:
                return fn()
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
        for table in (self.scope, self.closure):
            if name in table:
                return normalize(table[name])
        if name in self.globals:
            value = self.globals[name]
            globals_used.note(name, self.globals, value)  # the launch checks it stays the same
            return normalize(value)
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

    def visit_Assert(self, node: ast.Assert) -> None:
        cond = self.visit(node.test)
        if semantic.is_value(cond):  # a runtime condition: kd.device_assert, as in Triton
            msg = self.visit(node.msg) if node.msg is not None else ""
            semantic.device_assert(self.b, cond, msg)
            return
        if not cond:
            msg = self.visit(node.msg) if node.msg is not None else ""
            raise self.error(f"assertion failed: {msg}" if msg else "assertion failed", node)

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

    def visit_For(self, node: ast.For) -> None:
        if node.orelse:
            raise self.error("for ... else is not supported", node)
        it = node.iter
        if isinstance(it, ast.Call):
            fn = self.visit(it.func)
            args = self.expand(it.args)
            kwargs = {k.arg: self.visit(k.value) for k in it.keywords}
            if fn is builtins.range:
                if kwargs:
                    raise self.error("range() takes no keyword arguments", it)
                return self.runtime_for(node, args, {})
            if fn is core.range:
                try:
                    r = core.range(*args, **kwargs)
                except TypeError as e:
                    raise self.error(f"kd.range: {e}", it) from None
                return self.runtime_for(node, [r.start, r.end, r.step], r.attrs)
            iterable = self.call(fn, args, kwargs)
        else:
            iterable = self.visit(it)
        if isinstance(iterable, (core.static_range, tuple, list)):
            return self.unrolled_for(node, list(iterable))
        raise self.error("a for loop needs range(...), kd.range(...), kd.static_range(...) or "
                         "a tuple", node)

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
            method = tile_method(node.attr)
            if method is not None:
                return BoundMethod(method, obj)
            return semantic.value_attr(self.b, obj, node.attr)
        if isinstance(obj, Aggregate) and node.attr in obj.kd_methods:
            return BoundMethod(obj.kd_methods[node.attr], obj)
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
        if isinstance(x, Aggregate):
            raise semantic.error(f"unary operators are not defined on a {x!r}")
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
        """Comparisons; a chain `a < b < c` is `(a < b) and (b < c)` (element-wise on tiles),
        each operand evaluated once, stopping at a compile-time false link as Python does."""
        left, result = self.visit(node.left), None
        for op, comp in zip(node.ops, node.comparators):
            if result is not None and not semantic.is_value(result) and not result:
                return result
            right = self.visit(comp)
            kind, pyop = _CMPOPS[type(op)]
            if kind is None or not (semantic.is_value(left) or semantic.is_value(right)):
                r = _compile_time_compare(type(op), pyop, left, right)
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
        if fn is builtins.isinstance:
            if len(args) != 2 or kwargs:
                raise semantic.error("isinstance() takes exactly two arguments")
            return type_objects.kernel_isinstance(args[0], args[1], core.constexpr)
        if getattr(fn, type_objects.COMPILE_TIME, False):
            return normalize(fn(*args, **kwargs))  # a type constructor or dtype predicate
        if fn is builtins.print:  # Triton's meaning: kd.device_print
            unknown = set(kwargs) - {"hex"}
            if unknown:
                raise semantic.error(f"print() in a kernel takes no {sorted(unknown)} (it is "
                                     "kd.device_print(prefix, *values, hex=False))")
            # Leading compile-time values that are not numbers (strings, dtypes, tuples) form
            # the prefix, as Python would print them; numbers and runtime values are printed
            # values (Triton's print(prefix, *values) is the case of one leading string).
            n = 0
            while n < len(args) and not (semantic.is_value(args[n])
                                         or semantic.is_scalar_const(args[n])):
                n += 1
            prefix = " ".join(str(a) for a in args[:n])
            return semantic.device_print(self.b, prefix, args[n:], kwargs.get("hex", False))
        if fn is builtins.breakpoint:
            return self.breakpoint()
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

    def breakpoint(self) -> None:
        """`breakpoint()`: a `breakpoint` op holding the runtime values in scope (and, as
        attrs, the simple compile-time ones) for the interp backend to show in pdb."""
        names, values, consts = [], [], []
        for name, v in self.scope.items():
            if semantic.is_value(v):
                names.append(name)
                values.append(v)
            elif v is None or isinstance(v, (bool, int, float, str)):
                consts.append((name, v))
        self.b.op("breakpoint", values, None, names=tuple(names), consts=tuple(consts))

    def inliner(self, f: Any, builtin: str, param: str) -> Any:
        """A Python callable that inlines the kdsl function `f` (a @kd.jit function or a
        builtin) at the builder's insertion point, for a builtin parameter taking a function."""
        if not (getattr(f, "__kdsl_jit__", None) is not None
                or getattr(f, "__kdsl_builtin__", False)):
            what = getattr(f, "__name__", None) or type(f).__name__
            raise semantic.error(f"{builtin}: {param} must be a @kd.jit function, got {what}")

        def call(*xs: Any, map_shape: tuple[int, ...] | None = None) -> Any:
            if map_shape is None or self.map_inline is None:
                return self.call(f, list(xs), {})
            return self.map_inline(self, f, list(xs), map_shape)  # map_elementwise's scalar_fn

        return call

    def inline(self, pyfn: Any, args: list[Any], kwargs: dict[str, Any],
               make: Any = None) -> Any:
        """Compile a @kd.jit helper's body in place with its parameters bound to the arguments;
        its `return` value (a value or a tuple) is the call's value. `make(src, scope, pyfn)`
        gives the body's visitor (default: `helper_generator`)."""
        if self.depth >= _MAX_INLINE_DEPTH:
            raise semantic.error(f"helper calls nested more than {_MAX_INLINE_DEPTH} deep "
                                 "(recursion is not supported)")
        try:
            bound = inspect.signature(pyfn).bind(*args, **kwargs)
        except TypeError as e:
            raise semantic.error(f"{pyfn.__name__}(): {e}") from None
        bound.apply_defaults()
        scope = {k: normalize(v) for k, v in bound.arguments.items()}
        gen = (make or self.helper_generator)(get_source(pyfn), scope, pyfn)
        gen.visit_stmts(gen.src.fn_def.body, tail=True)
        return gen.result()

    def helper_generator(self, src: Source, scope: dict[str, Any], pyfn: Any) -> CodeGenerator:
        """The visitor of an inlined helper's body (of the same kind as this one)."""
        return CodeGenerator(src, self.b, scope, pyfn, self.kernel, self.depth + 1,
                             self.ptr_sources, self.map_inline)


def tile_method(name: str) -> Any:
    """The builtin behind `x.name(...)` on a tile: kdsl's table, then any of Triton's tensor
    methods that kdsl has as a builtin."""
    fn = core.TILE_METHODS.get(name)
    if fn is None and name in core.TRITON_TENSOR_METHODS:
        from .. import language

        fn = getattr(language, name, None)
        if not getattr(fn, "__kdsl_builtin__", False):
            fn = None
    return fn


def _compile_time_compare(op: type, pyop: Any, left: Any, right: Any) -> Any:
    """A comparison of compile-time values; a dtype equals a string that spells it
    (`x.dtype == "fp16"`, Triton's or kdsl's name)."""
    if op in (ast.Eq, ast.NotEq):
        for a, s in ((left, right), (right, left)):
            if isinstance(s, str) and isinstance(a, (DType, PointerType)):
                return type_objects.same_dtype_name(a, s) == (op is ast.Eq)
    return pyop(left, right)
