"""`@kd.heuristics`: meta-parameters computed from the launch arguments, as `triton.heuristics`.

    @kd.heuristics(values={"BLOCK": lambda args: kd.next_power_of_2(args["n"]),
                           "EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
    @kd.jit
    def kernel(x_ptr, n, BLOCK: kd.constexpr, EVEN: kd.constexpr): ...

    kernel[grid](x, n)

At each launch, each function of `values` (in order) receives the dict of the arguments by
name (positional ones under their parameter names, plus every keyword of the launch,
including the values computed by the heuristics before it and, below `@kd.autotune`, the
chosen config's) and its result is passed as the keyword argument of that name.  It stacks
with `@kd.autotune` in either order and with other `@kd.heuristics`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Heuristics:
    """The object `@kd.heuristics` returns: launch it like the kernel it wraps."""

    def __init__(self, fn: Any, values: dict[str, Callable[[dict[str, Any]], Any]]):
        names = getattr(fn, "arg_names", None)
        if names is None or not hasattr(fn, "run"):
            raise TypeError("@kd.heuristics goes above @kd.jit (or @kd.autotune)")
        if not isinstance(values, dict) or not all(callable(v) for v in values.values()):
            raise TypeError("@kd.heuristics(values=...): expected a dict of parameter name -> "
                            "function of the dict of arguments")
        unknown = [k for k in values if k not in names]
        if unknown:
            raise ValueError(f"@kd.heuristics: {unknown} are not parameters of "
                             f"{getattr(fn, '__name__', 'the kernel')} ({', '.join(names)})")
        self.fn = fn
        self.values = dict(values)
        self.arg_names = list(names)
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __repr__(self) -> str:
        return f"<Heuristics {sorted(self.values)} of {self.fn!r}>"

    def _apply(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        for name, heur in self.values.items():
            kwargs[name] = heur({**dict(zip(self.arg_names, args)), **kwargs})
        return kwargs

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Launch (`grid=` among the keywords, as for `JITFunction.run`)."""
        return self.fn.run(*args, **self._apply(args, dict(kwargs)))

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def compile(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn.compile(*args, **self._apply(args, dict(kwargs)))

    def __getattr__(self, name: str) -> Any:
        # signature, identity(), cache, default_backend, ...: those of the wrapped kernel
        if name == "fn":
            raise AttributeError(name)
        return getattr(self.fn, name)


def heuristics(values: dict[str, Callable[[dict[str, Any]], Any]]
               ) -> Callable[[Any], Heuristics]:
    """Decorator over `@kd.jit` or `@kd.autotune` (see the module docstring)."""
    def decorator(fn: Any) -> Heuristics:
        return Heuristics(fn, values)
    return decorator


__all__ = ["Heuristics", "heuristics"]
