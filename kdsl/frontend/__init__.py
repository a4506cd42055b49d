"""Frontend: a kernel's Python function -> a verified Tile IR `Function` (`build_function`)."""

from __future__ import annotations

import inspect
from typing import Any

from ..errors import CompilationError
from ..ir import tile
from ..ir.types import TileType
from .builder import Builder
from .codegen import CodeGenerator, normalize
from .source import get_source

__all__ = ["build_function"]


def build_function(pyfn: Any, arg_types: dict[str, TileType],
                   constexprs: dict[str, Any]) -> tile.Function:
    """Compile `pyfn` for one specialisation. Each parameter of its signature is in `arg_types`
    (runtime scalars and pointers, which become the body's block arguments) or in `constexprs`
    (compile-time values). Helpers called through objects carrying `__kdsl_jit__` are inlined.
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
            v = body.add_arg(t, pname)
            params.append(tile.Param(pname, t, value=v))
            scope[pname] = v
        elif pname in constexprs:
            params.append(tile.Param(pname, None, constexpr=constexprs[pname]))
            scope[pname] = normalize(constexprs[pname])
        else:
            raise CompilationError(f"parameter {pname!r} has no type and no constexpr value",
                                   loc, name)
    extra = (set(arg_types) | set(constexprs)) - set(sig.parameters)
    if extra:
        raise CompilationError(f"{name} has no parameter(s) {sorted(extra)}", loc, name)
    gen = CodeGenerator(src, Builder(body, loc), scope, pyfn, name)
    gen.visit_stmts(src.fn_def.body, tail=True)
    if gen.ret_value is not None:
        raise CompilationError("a kernel cannot return a value", loc, name)
    fn = tile.Function(name, params, body, loc=loc, src_file=src.file)
    tile.verify(fn)
    return fn
