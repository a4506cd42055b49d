"""`@kd.jit` and `JITFunction`: specialisation, the in-memory cache and the launch path.

    kernel[grid](*args, backend=None, num_warps=4, check=False, poison=False, fast_math=False,
                 **constexprs)
    kernel.run(*args, grid=grid, ...)          # the same
    kernel.compile(*args, backend=..., **constexprs) -> CompiledKernel, not run

A launch binds the arguments (`binding.py`), builds the specialisation key
(runtime argument signatures, which of them are multiples of 16 (pointer address or int
value, as Triton specialises), constexpr values and their types, num_warps, backend, check,
fast_math), and looks it up in a dict; a miss compiles through the disk cache (`cache.py`).
The hit path is a few dict lookups and one `backend.launch`: keep it free of anything slower.

`fast_math` (default off: IEEE semantics) lets the backends reassociate and contract float
math (`kernel.attrs["fast_math"]`); it is part of the key, so both variants can coexist.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from .binding import Signature, bind_arg, multiple_of_16, normalize_grid, sig_type
from .compiler import CompiledKernel
from .env import launch_flags

_SIMPLE_CONSTS = (int, float, str, bool, complex, type(None))


def _code_names(code: Any) -> set[str]:
    """Global names a code object (and the code objects nested in it) refers to."""
    names = set(code.co_names)
    for c in code.co_consts:
        if inspect.iscode(c):
            names |= _code_names(c)
    return names


def _kernel_identity(fn: Callable, seen: set[int] | None = None) -> list[str]:
    """Text identifying the code of `fn` for the disk cache: its source, the sources of the
    `@kd.jit` helpers it calls by global name (recursively), and the values of the simple
    global and closure constants it reads."""
    seen = set() if seen is None else seen
    if id(fn) in seen:
        return []
    seen.add(id(fn))
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):  # no file (exec'd code): fall back on the bytecode
        code = fn.__code__
        src = code.co_code.hex() + repr(code.co_consts) + repr(code.co_names)
    parts = [f"{getattr(fn, '__module__', '')}.{fn.__qualname__}\n{src}"]
    env = dict(getattr(fn, "__globals__", {}))
    code = getattr(fn, "__code__", None)
    if code is not None and fn.__closure__:
        for name, cell in zip(code.co_freevars, fn.__closure__):
            try:
                env[name] = cell.cell_contents
            except ValueError:  # empty cell
                pass
    names = _code_names(code) | set(code.co_freevars) if code is not None else set()
    for name in sorted(names):
        obj = env.get(name)
        inner = getattr(obj, "__kdsl_jit__", None)
        if inner is not None and inspect.isfunction(inner):
            parts.extend(_kernel_identity(inner, seen))
        elif isinstance(obj, _SIMPLE_CONSTS) or type(obj).__name__ in ("constexpr", "DType"):
            parts.append(f"{name}={obj!r}")
    return parts


class JITFunction:
    """A kernel: the decorated Python function plus its compiled specialisations."""

    def __init__(self, fn: Callable, *, num_warps: int | None = None,
                 backend: str | None = None, fast_math: bool = False):
        if not inspect.isfunction(fn):
            raise TypeError(f"@kd.jit expects a Python function, got {type(fn).__name__}")
        functools.update_wrapper(self, fn)
        self.fn = fn
        #: the frontend inlines calls to other kernels through this attribute
        self.__kdsl_jit__ = fn
        self.signature = Signature(fn)
        sig = self.signature
        self._cx_index = tuple(i for i, c in enumerate(sig.is_constexpr) if c)
        self._rt_index = tuple((i, n) for i, (n, c) in enumerate(zip(sig.names,
                                                                     sig.is_constexpr)) if not c)
        self.default_num_warps = num_warps
        self.default_backend = backend
        self.default_fast_math = bool(fast_math)
        self._cache: dict[tuple, CompiledKernel] = {}
        self._identity: str | None = None

    # -- public --------------------------------------------------------------------------

    @property
    def cache(self) -> dict[tuple, CompiledKernel]:
        """The in-memory cache: specialisation key -> CompiledKernel."""
        return self._cache

    def __getitem__(self, grid: Any) -> _Launcher:
        return _Launcher(self, grid)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"kernel {self.__name__!r} is launched with a grid: "
                        f"{self.__name__}[grid](...) (or called from another kernel)")

    def __repr__(self) -> str:
        return f"<JITFunction {self.fn.__module__}.{self.fn.__qualname__}>"

    def run(self, *args: Any, grid: Any, backend: str | None = None,
            num_warps: int | None = None, check: bool | None = None,
            poison: bool | None = None, fast_math: bool | None = None,
            **kwargs: Any) -> CompiledKernel:
        """Launch on `grid`; returns the compiled kernel that ran."""
        return self._run(grid, args, kwargs, backend, num_warps, check, poison, fast_math)

    def _run(self, grid, args, kwargs, backend, num_warps, check,
             poison=None, fast_math=None) -> CompiledKernel:
        env = launch_flags()
        values, sigs, bound, cx, backend, num_warps, check, m16, fast = self._specialise(
            args, kwargs, backend, num_warps, check, fast_math, env)
        g = normalize_grid(grid, lambda: dict(zip(self.signature.names, values)))
        key = (sigs, m16, cx, num_warps, backend, check, fast)
        try:
            ck = self._cache[key]
        except KeyError:
            ck = self._miss(key, values, sigs, backend, num_warps, check, True, m16, fast)
        except TypeError:
            self._unhashable(values)
            raise
        if ck._handle is None:  # compiled by compile(): check the backend can run here
            from .registry import require_backend
            require_backend(backend)
        if poison or (poison is None and env[2] not in (None, "", "0")):
            # NaN poison (kdsl/runtime/checked.py): overwrite every output before the launch
            from .checked import poison as fill_poison
            from .checked import stored_indices
            fill_poison(bound, stored_indices(ck))
        ck.run(g, bound)
        return ck

    def compile(self, *args: Any, backend: str | None = None, num_warps: int | None = None,
                check: bool | None = None, fast_math: bool | None = None,
                **kwargs: Any) -> CompiledKernel:
        """Compile for these arguments without running (no device needed for codegen)."""
        values, sigs, _, cx, backend, num_warps, check, m16, fast = self._specialise(
            args, kwargs, backend, num_warps, check, fast_math)
        key = (sigs, m16, cx, num_warps, backend, check, fast)
        try:
            ck = self._cache.get(key)
        except TypeError:
            self._unhashable(values)
            raise
        return ck if ck is not None else self._miss(
            key, values, sigs, backend, num_warps, check, False, m16, fast)

    # -- internals -----------------------------------------------------------------------

    def _specialise(self, args, kwargs, backend, num_warps, check, fast_math=None, env=None):
        # The launch hot path: index tables precomputed in __init__, one pass per kind.
        values = self.signature.bind(args, kwargs)
        cx = []
        for i in self._cx_index:
            v = values[i]
            if type(v).__name__ == "constexpr":  # kd.constexpr(4) is passed as 4
                v = values[i] = v.value
            # the type is part of the key: 1, 1.0 and True compile differently
            cx.append((type(v), v))
        sigs = []
        bound = []
        m16 = []
        owner = owner_arg = None
        for i, name in self._rt_index:
            s, ba, own = bind_arg(name, values[i])
            sigs.append(s)
            bound.append(ba)
            m16.append(multiple_of_16(ba))
            if own is not None:
                if owner is not None and own != owner:
                    raise ValueError(f"argument {name!r} is a {own} device array but argument "
                                     f"{owner_arg!r} is a {owner} device array")
                owner, owner_arg = own, name
        if env is None:
            env = launch_flags()
        if backend is None:
            backend = owner or self.default_backend or env[0] or "llvm"
        elif owner is not None and owner != backend:
            raise ValueError(f"argument {owner_arg!r} is a {owner} device array, which backend "
                             f"{backend!r} cannot use")
        if num_warps is None:
            num_warps = self.default_num_warps or 4
        if check is None:
            check = env[1] not in (None, "", "0")
        fast = self.default_fast_math if fast_math is None else bool(fast_math)
        return (values, tuple(sigs), bound, tuple(cx), backend, num_warps, bool(check),
                tuple(m16), fast)

    def _unhashable(self, values: list[Any]) -> None:
        for name, is_cx, v in zip(self.signature.names, self.signature.is_constexpr, values):
            if is_cx:
                try:
                    hash(v)
                except TypeError:
                    raise TypeError(f"constexpr argument {name!r}: value of type "
                                    f"{type(v).__name__} is not hashable") from None

    def identity(self) -> str:
        """Text identifying this kernel's code (and its helpers') for the disk cache."""
        if self._identity is None:
            self._identity = "\n".join(_kernel_identity(self.fn))
        return self._identity

    def _miss(self, key, values, sigs, backend, num_warps, check, build, m16=(),
              fast=False) -> CompiledKernel:
        from kdsl import __version__
        from kdsl.backends import get_backend

        from .cache import cached_compile
        from .registry import require_backend

        be = require_backend(backend) if build else get_backend(backend)
        if isinstance(num_warps, bool) or not isinstance(num_warps, int) or num_warps <= 0 \
                or num_warps & (num_warps - 1):
            raise ValueError(f"num_warps: expected a positive power of two, got {num_warps!r}")
        sig = self.signature
        arg_types = {n: sig_type(s) for n, s in zip(sig.runtime_names, sigs)}
        constexprs = {n: v for n, v, c in zip(sig.names, values, sig.is_constexpr) if c}
        aligned = tuple(n for n, a in zip(sig.runtime_names, m16) if a)
        spec = (tuple(zip(sig.runtime_names, sigs)),
                tuple((n, type(v).__qualname__, v) for n, v in constexprs.items()),
                num_warps, check, aligned, fast)
        ck = cached_compile(_Specialised(self, aligned, fast), arg_types, constexprs, be, num_warps, check,
                            sources=self.identity(), spec=spec, version=__version__,
                            build=build)
        self._cache[key] = ck
        return ck


class _Specialised:
    """The kernel as one compile sees it: `fn` plus the specialisation options that
    `compiler.build_tile` reads (`multiple_of_16` names, `fast_math`)."""

    __slots__ = ("jit", "fn", "multiple_of_16", "fast_math")

    def __init__(self, jit: JITFunction, multiple_of_16: tuple[str, ...], fast_math: bool):
        self.jit = jit
        self.fn = jit.fn
        self.multiple_of_16 = multiple_of_16
        self.fast_math = fast_math

    def __getattr__(self, name: str) -> Any:
        return getattr(self.jit, name)


class _Launcher:
    """`kernel[grid]`: calling it launches."""

    __slots__ = ("grid", "jit")

    def __init__(self, jit: JITFunction, grid: Any):
        self.jit = jit
        self.grid = grid

    def __call__(self, *args: Any, backend: str | None = None, num_warps: int | None = None,
                 check: bool | None = None, poison: bool | None = None,
                 fast_math: bool | None = None, **kwargs: Any) -> CompiledKernel:
        return self.jit._run(self.grid, args, kwargs, backend, num_warps, check, poison,
                             fast_math)


def jit(fn: Callable | None = None, *, num_warps: int | None = None,
        backend: str | None = None, fast_math: bool = False) -> Any:
    """Decorator: `@kd.jit` or `@kd.jit(num_warps=8, backend="opencl", fast_math=True)`
    (launch defaults; fast_math off means IEEE float semantics)."""
    if fn is None:
        return lambda f: jit(f, num_warps=num_warps, backend=backend, fast_math=fast_math)
    if isinstance(fn, JITFunction):
        return fn
    return JITFunction(fn, num_warps=num_warps, backend=backend, fast_math=fast_math)
