"""Frontend: a kernel's Python function -> a verified Tile IR `Function` (`build_function`)."""

from __future__ import annotations

import inspect
from typing import Any

from ..errors import CompilationError
from ..ir import tile
from ..ir.tile import SIDE_EFFECTS
from ..ir.types import TileType
from ..language.type_objects import const
from ..passes.provenance import pointer_roots
from .builder import Builder
from .codegen import CodeGenerator, normalize
from .elementwise import inline_elementwise
from .source import get_source

__all__ = ["build_function"]


def build_function(pyfn: Any, arg_types: dict[str, TileType], constexprs: dict[str, Any],
                   equal_to_1: tuple[str, ...] = ()) -> tile.Function:
    """Compile `pyfn` for one specialisation. Each parameter of its signature is in `arg_types`
    (runtime scalars and pointers, which become the body's block arguments) or in `constexprs`
    (compile-time values). Helpers called through objects carrying `__kdsl_jit__` are inlined.
    The integer parameters named in `equal_to_1` (in `arg_types` too) are known to be 1 (the
    launcher's `== 1` specialisation, `CompileOptions.equal_to_1`): each is a constant 1 of its
    type, so it types as the runtime scalar would (`.to()` works, promotion is unchanged), and
    a constexpr `Param` of value 1, out of the runtime signature.
    Raises CompilationError naming the file, line and source line of the first problem."""
    name = pyfn.__name__
    src = get_source(pyfn)
    loc = src.loc(src.fn_def)
    sig = inspect.signature(pyfn)
    body = tile.Block()
    params: list[tile.Param] = []
    scope: dict[str, Any] = {}
    for pname, p in sig.parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise CompilationError(f"kernels cannot take *args or **kwargs ({pname})", loc, name)
        if pname in arg_types:
            t = arg_types[pname]
            if not isinstance(t, TileType) or not t.is_scalar:
                raise CompilationError(f"parameter {pname!r}: expected a scalar or pointer "
                                       f"TileType, got {t!r}", loc, name)
            if pname in equal_to_1:
                if not t.elem.is_int or t.elem.is_bool:
                    raise CompilationError(f"parameter {pname!r}: only an integer can be "
                                           f"specialised as equal to 1, not {t}", loc, name)
                one = tile.Op("const", [], [t], {"value": 1}, None, loc)
                one.results[0].name = pname
                body.append(one)
                params.append(tile.Param(pname, None, constexpr=1))
                scope[pname] = one.results[0]
                continue
            v = body.add_arg(t, pname)
            params.append(tile.Param(pname, t, value=v))
            scope[pname] = v
        elif pname in constexprs:
            params.append(tile.Param(pname, None, constexpr=constexprs[pname]))
            scope[pname] = normalize(constexprs[pname])
        else:
            raise CompilationError(f"parameter {pname!r} has no type and no constexpr value",
                                   loc, name)
    extra = (set(arg_types) | set(constexprs) | set(equal_to_1)) - set(sig.parameters)
    if extra:
        raise CompilationError(f"{name} has no parameter(s) {sorted(extra)}", loc, name)
    ptrs = [p.value for p in params if not p.is_constexpr and p.type.is_ptr]
    gen = CodeGenerator(src, Builder(body, loc), scope, pyfn, name, ptr_sources=ptrs,
                        map_inline=inline_elementwise)
    gen.visit_stmts(src.fn_def.body, tail=True)
    fn = tile.Function(name, params, body, loc=loc, src_file=src.file)
    tile.verify(fn)
    _check_const_params(fn, sig, name)
    return fn


def _is_const_annotation(ann: Any) -> bool:
    """Triton's rule: an annotation naming `const` (and not `constexpr`) marks a read-only
    pointer parameter (`x_ptr: kd.const`)."""
    if ann is inspect.Parameter.empty:
        return False
    if ann is const:
        return True
    text = ann if isinstance(ann, str) else getattr(ann, "__name__", "")
    return "const" in text and "constexpr" not in text


def _check_const_params(fn: tile.Function, sig: inspect.Signature, name: str) -> None:
    const_idx = {i for i, p in enumerate(fn.runtime_params)
                 if _is_const_annotation(sig.parameters[p.name].annotation)}
    if not const_idx:
        return
    roots = pointer_roots(fn)
    for op in fn.walk():
        if op.kind in SIDE_EFFECTS and op.operands:
            hit = roots.get(op.operands[0].id, frozenset()) & const_idx
            if hit:
                pname = fn.runtime_params[min(hit)].name
                raise CompilationError(f"cannot store to a constant pointer: parameter "
                                       f"{pname!r} is annotated kd.const", op.loc, name)
