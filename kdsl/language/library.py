"""Builtins written in the kd language itself (`kd.sort`, `kd.randint`, ...).

`@kd_function` turns a Python function of kd-language code into a builtin: a kernel's call
compiles the function's body in place, as for a `@kd.jit` helper, but as a builtin its ops carry
the *caller's* line (the IR and every error point at the kernel, not at this library's source)
and on the host it raises like every builtin.  Every backend runs the same decomposition into
Tile IR ops, so the results are identical wherever the ops are.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

from ..errors import CompilationError
from ..ir.tile import Loc


class KdFunction:
    """A builtin whose body is kd-language code (see the module docstring)."""

    __kdsl_builtin__ = True

    def __init__(self, fn: Callable):
        functools.update_wrapper(self, fn)
        self.fn = fn

    def __repr__(self) -> str:
        return f"<kd function {self.fn.__name__}>"

    def __call__(self, *args: Any, _builder: Any = None, **kwargs: Any) -> Any:
        if _builder is None:
            raise RuntimeError(
                f"kd.{self.fn.__name__} can only be called inside a @kd.jit kernel")
        # The frontend imports the language: import it at the first call, not at load time.
        from ..frontend.codegen import CodeGenerator, normalize
        from ..frontend.elementwise import inline_elementwise
        from ..frontend.source import get_source

        bound = inspect.signature(self.fn).bind(*args, **kwargs)
        bound.apply_defaults()
        scope = {k: normalize(v) for k, v in bound.arguments.items()}
        src = _AtCall(get_source(self.fn).fn_def, _builder.loc)
        # depth 1: compiled as a helper (it returns values), not as a kernel
        gen = CodeGenerator(src, _builder, scope, self.fn, self.fn.__name__, 1,
                            map_inline=inline_elementwise)
        try:
            gen.visit_stmts(src.fn_def.body, tail=True)
        except CompilationError as e:
            # Without a location: the caller's visitor names the kernel's line.
            raise CompilationError(f"kd.{self.fn.__name__}: {e.msg}"
                                   if not e.msg.startswith("kd.") else e.msg) from None
        return gen.result()


@dataclasses.dataclass(frozen=True)
class _AtCall:
    """A library function's source (as `kdsl.frontend.source.Source` serves the code
    generator) whose every node is located at the call."""

    fn_def: Any
    call: Loc

    def loc(self, node: Any) -> Loc:
        return self.call


def kd_function(fn: Callable) -> KdFunction:
    """Decorator: `fn` (kd-language code) becomes a builtin (see `KdFunction`)."""
    return KdFunction(fn)
