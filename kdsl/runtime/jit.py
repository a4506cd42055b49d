"""`@kd.jit` and `JITFunction`: specialisation, the in-memory cache and the launch path.

    kernel[grid](*args, backend=None, num_warps=4, check=False, poison=False, fast_math=False,
                 num_stages=3, **constexprs_and_triton_options)
    kernel.run(*args, grid=grid, ...)          # the same
    kernel.compile(*args, backend=..., **constexprs) -> CompiledKernel, not run

A launch binds the arguments (`binding.py`; Triton's other launch options are checked by
`options.py`), builds the specialisation key (runtime argument signatures, which of them are
multiples of 16 (pointer address or int value, as Triton specialises, unless the parameter is
in `do_not_specialize`/`do_not_specialize_on_alignment`), which int arguments equal 1 (compiled
as the constant 1, `CompileOptions.equal_to_1`, unless in `do_not_specialize`), constexpr
values and their types,
runtime parameters given None (compile-time constants, as in Triton), num_warps, num_stages,
backend, check, fast_math and the options that change the code), and looks it up in a dict; a
miss compiles through the disk cache (`cache.py`).  The hit path is a few dict lookups and one
`backend.launch`: keep it free of anything slower.

Every launch tries a faster path first (`fastpath.py`): a function generated for the kernel's
signature classifies each argument by exactly what the full binder would specialise on (array
dtype and 16-byte alignment, int32 range, `== 1` and `% 16`, float32 range, constexpr type and
value, the launch options given and the KDSL_* variables that change the key) and maps that
tuple to a backend's direct launcher (`Backend.direct_launcher(handle)`: the CPU backend's
pack-and-call), skipping `BoundArg`s.  Anything unusual (another argument type, a read-only or
empty array, an int outside int32, a checked or poisoned launch, a binding error) misses and
runs the full binder, which raises the precise errors; a successful full launch then records
the fast entry.  The fast entries assume the kernel's launch defaults (`@kd.jit(backend=,
num_warps=, fast_math=, debug=)`) do not change after the first launch; changing the memory
cache (`kernel.cache.clear()`) forgets them.

`debug` (`@kd.jit(debug=True)`, the launch option `debug=True`, or `KDSL_DEBUG=1`, as Triton's
TRITON_DEBUG) turns `kd.device_assert` on (`CompileOptions.debug`, docs/debugging.md); it is part
of the key too, and a kernel compiled without it has no trace of its assertions.

`fast_math` (default off: IEEE semantics) lets the backends reassociate and contract float
math (`CompileOptions.fast_math`); it is part of the key, so both variants can coexist.
A miss turns the key's options into one `CompileOptions` (kdsl/compile_options.py), which the
whole compile sees.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from kdsl.backends import DEFAULT as DEFAULT_BACKEND
from kdsl.compile_options import CompileOptions

from .binding import Signature, bind_annotated, bind_arg, multiple_of_16, normalize_grid, sig_type
from .compiler import CompiledKernel
from .env import getenv, launch_flags
from .launches import OBSERVERS, observe
from .options import DEFAULT_NUM_STAGES, EXPLICIT, KDSL_KEYWORDS, OPTIONS, check_num_stages
from .options import parse as parse_options

_SIMPLE_CONSTS = (int, float, str, bool, complex, type(None))
_OFF = (None, "", "0")
_LAUNCHERS_MAX = 256  # `kernel[grid]` objects kept per kernel, by tuple grid


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


# Positions in the specialisation key (the memory cache's key; `_miss` reads them back).
(K_SIGS, K_M16, K_CX, K_WARPS, K_BACKEND, K_CHECK, K_FAST, K_STAGES, K_OPTS, K_RTCX,
 K_ONE, K_DEBUG) = range(12)


def _param_indices(what: str, spec: Any, names: tuple[str, ...]) -> frozenset[int]:
    """Parameter indices named (or numbered) in `do_not_specialize`-style lists."""
    if spec is None:
        return frozenset()
    if isinstance(spec, (str, int)):
        spec = (spec,)
    out = set()
    for s in spec:
        if isinstance(s, str) and s in names:
            out.add(names.index(s))
        elif isinstance(s, int) and not isinstance(s, bool) and 0 <= s < len(names):
            out.add(s)
        else:
            raise ValueError(f"{what}: {s!r} is not a parameter name or index of the kernel "
                             f"({', '.join(names)})")
    return frozenset(out)


class JITFunction:
    """A kernel: the decorated Python function plus its compiled specialisations."""

    def __init__(self, fn: Callable, *, num_warps: int | None = None,
                 backend: str | None = None, fast_math: bool = False, version: Any = None,
                 repr: Callable | None = None, launch_metadata: Callable | None = None,
                 do_not_specialize: Any = None, do_not_specialize_on_alignment: Any = None,
                 debug: bool | None = None, noinline: bool | None = None):
        if not inspect.isfunction(fn):
            raise TypeError(f"@kd.jit expects a Python function, got {type(fn).__name__}")
        functools.update_wrapper(self, fn)
        self.fn = fn
        #: the frontend inlines calls to other kernels through this attribute
        self.__kdsl_jit__ = fn
        self.signature = Signature(fn)
        sig = self.signature
        self.arg_names = list(sig.names)  # Triton's name (kd.heuristics reads it)
        # Triton's @jit arguments: stored with their meaning (docs/language.md "Launching")
        self.version = version
        self._repr = repr
        self.launch_metadata = launch_metadata
        self.do_not_specialize = do_not_specialize
        self.do_not_specialize_on_alignment = do_not_specialize_on_alignment
        self.debug = debug
        self.noinline = noinline
        dns = _param_indices("do_not_specialize", do_not_specialize, sig.names)
        dnsa = _param_indices("do_not_specialize_on_alignment", do_not_specialize_on_alignment,
                              sig.names)
        self._cx_index = tuple(i for i, c in enumerate(sig.is_constexpr) if c)
        self._rt_index = tuple((i, n) for i, (n, c) in enumerate(zip(sig.names,
                                                                     sig.is_constexpr)) if not c)
        # per runtime parameter: (index, name, annotated type or None, whether its address or
        # value is specialised on `% 16`: both do_not_specialize lists turn that off, as the
        # int and pointer specialisations of Triton's `specialize=False` / `align=False`;
        # whether an int equal to 1 is compiled as the constant 1: only do_not_specialize
        # turns that off, as in Triton, and only unannotated parameters have it)
        self._rt = tuple((i, n, sig.params[i].annotation, i not in dns and i not in dnsa,
                          i not in dns and sig.params[i].annotation is None)
                         for i, n in self._rt_index)
        self.default_num_warps = num_warps
        self.default_backend = backend
        self.default_fast_math = bool(fast_math)
        # the fast launch path (fastpath.py): argument classes -> `fastpath.entry` (the
        # CompiledKernel and how to launch it); any change of the memory cache but a
        # compile's own entry clears it
        self._fast: dict[tuple, tuple] = {}
        self._cache: dict[tuple, CompiledKernel] = _SpecCache(self._fast)
        self._fast_fn: Callable | None = None  # built by the first `kernel[grid]`
        self._fast_source: str | None = None
        self._launchers: dict[tuple, Callable] = {}
        # the module globals the compilations read (kdsl/frontend/globals_used.py): a launch
        # that would reuse a kernel compiled with an old value raises instead
        self._globals: dict = {}
        self._identity: str | None = None
        self._cx_flags = sig.is_constexpr
        self._cx_names = frozenset(sig.constexpr_names)
        self._names = frozenset(sig.names)
        self._n_runtime = len(sig.runtime_names)
        # launch keywords that are also parameter names (kdsl/runtime/options.py)
        self._shared = frozenset(sig.names) & (frozenset(OPTIONS) | frozenset(EXPLICIT)
                                               | frozenset(KDSL_KEYWORDS))

    # -- public --------------------------------------------------------------------------

    @property
    def cache(self) -> dict[tuple, CompiledKernel]:
        """The in-memory cache: specialisation key -> CompiledKernel."""
        return self._cache

    def __getitem__(self, grid: Any) -> Callable[..., CompiledKernel]:
        """`kernel[grid]`: the launcher, `launcher(*args, backend=None, num_warps=None,
        check=None, poison=None, fast_math=None, num_stages=None, **constexprs_and_options)`
        (a `functools.partial` of the kernel's fast function, `fastpath.py`: calling it is the
        launch hot path, so no Python frame stands between)."""
        if type(grid) is tuple:  # the common case: one launcher per grid, reused
            try:
                return self._launchers[grid]
            except KeyError:
                if len(self._launchers) >= _LAUNCHERS_MAX:
                    self._launchers.clear()
                ln = self._launchers[grid] = functools.partial(self._entry(), grid)
                return ln
            except TypeError:  # an unhashable element: normalize_grid explains
                pass
        return functools.partial(self._entry(), grid)

    def _entry(self) -> Callable[..., CompiledKernel]:
        """The function a launch calls with (grid, *args, **kwargs): the fast function, built
        on first use, or the full path for a signature without one."""
        if self._fast_fn is None:
            from .fastpath import build

            fn, self._fast_source = build(self)
            self._fast_fn = fn if fn is not None else self._full
        return self._fast_fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"kernel {self.__name__!r} is launched with a grid: "
                        f"{self.__name__}[grid](...) (or called from another kernel)")

    def __repr__(self) -> str:
        return f"<JITFunction {self.fn.__module__}.{self.fn.__qualname__}>"

    def repr(self, specialization: Any = None) -> str:
        """The kernel's display name (Triton's `repr=` callable of the specialisation, else
        the function's name)."""
        return self.fn.__name__ if self._repr is None else self._repr(specialization)

    def run(self, *args: Any, grid: Any, backend: str | None = None,
            num_warps: int | None = None, check: bool | None = None,
            poison: bool | None = None, fast_math: bool | None = None,
            num_stages: int | None = None, warmup: bool = False,
            **kwargs: Any) -> CompiledKernel:
        """Launch on `grid`; returns the compiled kernel that ran (Triton's `run`: with
        `warmup=True`, compile only)."""
        if warmup:
            return self.compile(*args, backend=backend, num_warps=num_warps, check=check,
                                fast_math=fast_math, num_stages=num_stages, **kwargs)
        for k, v in (("backend", backend), ("num_warps", num_warps), ("check", check),
                     ("poison", poison), ("fast_math", fast_math), ("num_stages", num_stages)):
            if v is not None:
                kwargs[k] = v
        return self[grid](*args, **kwargs)

    def warmup(self, *args: Any, grid: Any = None, **kwargs: Any) -> CompiledKernel:
        """Compile for these arguments without launching (Triton's `kernel.warmup`)."""
        return self.run(*args, grid=grid, warmup=True, **kwargs)

    def _full(self, grid: Any, *args: Any, **kwargs: Any) -> CompiledKernel:
        """The launch of a kernel whose signature has no fast function."""
        return self._slow(grid, args, kwargs)

    def _slow(self, grid: Any, args: tuple, kwargs: dict[str, Any], fk: Any = None
              ) -> CompiledKernel:
        """The full launch path, with kdsl's launch keywords taken out of `kwargs` (`fk`: the
        fast function's (key, slots), recorded after the launch)."""
        backend = num_warps = check = poison = fast_math = num_stages = None
        if kwargs:
            kwargs = dict(kwargs)
            pop = kwargs.pop
            backend, num_warps, check = pop("backend", None), pop("num_warps", None), \
                pop("check", None)
            poison, fast_math, num_stages = pop("poison", None), pop("fast_math", None), \
                pop("num_stages", None)
        return self._run(grid, args, kwargs, backend, num_warps, check, poison, fast_math,
                         num_stages, fk)

    def _run(self, grid, args, kwargs, backend, num_warps, check,
             poison=None, fast_math=None, num_stages=None, fk=None) -> CompiledKernel:
        if OBSERVERS:  # launches recorded by the tools (launches.py)
            done = observe(self, grid, args, kwargs, backend, num_warps, check)
            if done is not None:
                return done
        env = launch_flags()
        if self._shared:
            kwargs, backend, num_warps, check, poison, fast_math, num_stages = self._route(
                kwargs, backend, num_warps, check, poison, fast_math, num_stages)
        debug = self._debug(kwargs)
        values, key, bound = self._specialise(args, kwargs, backend, num_warps, check,
                                              fast_math, env, num_stages)
        key += (debug,)
        g = normalize_grid(grid, lambda: dict(zip(self.signature.names, values)))
        try:
            ck = self._cache[key]
        except KeyError:
            ck = self._miss(key, values, True)
        except TypeError:
            self._unhashable(values)
            raise
        else:
            if self._globals:
                self._check_globals()
        if ck._handle is None:  # compiled by compile(): check the backend can run here
            from .registry import require_backend
            require_backend(key[K_BACKEND])
        poisoned = poison or (poison is None and env[2] not in _OFF)
        if poisoned:
            # NaN poison (kdsl/runtime/checked.py): overwrite every output before the launch
            from .checked import poison as fill_poison
            from .checked import stored_indices
            fill_poison(bound, stored_indices(ck))
        ck.run(g, bound)
        if fk is not None and ck.checks is None and not poisoned:
            self._record_fast(fk[0], ck, key)
        return ck

    def _record_fast(self, fast_key: tuple, ck: CompiledKernel, key: tuple) -> None:
        """Remember a launch the fast function can repeat (its backend has a direct launcher).
        Slots of runtime parameters the compiled kernel does not take (None, the constant 1)
        are left out by a picking launcher."""
        direct = ck.backend_obj.direct_launcher(ck._handle)
        if direct is None:
            return
        from .fastpath import entry

        keep = [j for j, (s, one) in enumerate(zip(key[K_SIGS], key[K_ONE]))
                if s != "constexpr" and not one]
        self._fast[fast_key] = entry(ck, direct, keep, self._n_runtime)

    def compile(self, *args: Any, backend: str | None = None, num_warps: int | None = None,
                check: bool | None = None, fast_math: bool | None = None,
                num_stages: int | None = None, **kwargs: Any) -> CompiledKernel:
        """Compile for these arguments without running (no device needed for codegen)."""
        if self._shared:
            kwargs, backend, num_warps, check, _, fast_math, num_stages = self._route(
                kwargs, backend, num_warps, check, None, fast_math, num_stages)
        debug = self._debug(kwargs)
        values, key, _ = self._specialise(args, kwargs, backend, num_warps, check, fast_math,
                                          None, num_stages)
        key += (debug,)
        try:
            ck = self._cache.get(key)
            if ck is not None and self._globals:
                self._check_globals()
        except TypeError:
            self._unhashable(values)
            raise
        return ck if ck is not None else self._miss(key, values, False)

    # -- internals -----------------------------------------------------------------------

    def _check_globals(self) -> None:
        """Raise if a global the compiled kernels read has changed since (as Triton does)."""
        from kdsl.frontend.globals_used import changed

        c = changed(self._globals)
        if c is not None:
            name, old, new = c
            raise RuntimeError(
                f"kernel {self.__name__!r}: global variable {name!r} has changed since the "
                f"kernel was compiled, from {old!r} to {new!r}. A kernel reads globals when it "
                f"compiles; pass a value that changes as an argument (or a kd.constexpr "
                f"parameter), or call {self.__name__}.cache.clear() to recompile")

    def _debug(self, kwargs: dict[str, Any]) -> bool:
        """The debug switch of a launch: the `debug=` option (taken out of `kwargs`, unless the
        kernel has a parameter of that name), else `@kd.jit(debug=...)`, else KDSL_DEBUG."""
        d = kwargs.pop("debug", None) if "debug" not in self.signature.index else None
        if d is None:
            d = self.debug
        if d is None:
            d = getenv("KDSL_DEBUG") not in _OFF
        return bool(d)

    def _route(self, kwargs, backend, num_warps, check, poison, fast_math, num_stages):
        """Launch keywords that are also parameter names: Triton's options (num_warps, ...)
        bind the parameter AND set the option, as in Triton; kdsl's own keywords (backend,
        check, poison, fast_math) bind the parameter only."""
        shared = self._shared
        kwargs = dict(kwargs)
        for name, v in (("num_warps", num_warps), ("num_stages", num_stages)):
            if name in shared and v is not None:
                kwargs[name] = v
        own = {"backend": backend, "check": check, "poison": poison, "fast_math": fast_math}
        for name in KDSL_KEYWORDS:
            if name in shared and own[name] is not None:
                kwargs[name] = own[name]
                own[name] = None
        return (kwargs, own["backend"], num_warps, own["check"], own["poison"],
                own["fast_math"], num_stages)

    def _split(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(parameter keywords, launch options) of the keywords of a launch."""
        index = self.signature.index
        params, opts = {}, {}
        for k, v in kwargs.items():
            if k in index:
                params[k] = v
                if k in OPTIONS:  # a parameter named like an option is both
                    opts[k] = v
            elif k in OPTIONS:
                opts[k] = v
            else:
                raise TypeError(f"unknown keyword argument {k!r}; the kernel's parameters are: "
                                f"{', '.join(self.signature.names)} (launch options: backend, "
                                f"num_warps, check, poison, fast_math and Triton's, "
                                f"docs/language.md \"Launching\")")
        return params, opts

    def _specialise(self, args, kwargs, backend, num_warps, check, fast_math=None, env=None,
                    num_stages=None) -> tuple[list[Any], tuple, list]:
        """(parameter values, specialisation key, bound runtime arguments) of a launch."""
        # The launch hot path: index tables precomputed in __init__, one pass per kind.
        opts: tuple = ()
        if kwargs and (not kwargs.keys() <= self._names
                       or (self._shared and not self._shared.isdisjoint(kwargs))):
            kwargs, given = self._split(kwargs)
            keyed = parse_options(given)
            if "num_stages" in keyed:
                num_stages = keyed.pop("num_stages")
            opts = tuple(keyed.items())
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
        ones = []
        rt_cx = ()
        owner = owner_arg = None
        for i, name, ann, spec, one in self._rt:
            v = values[i]
            if v is None or type(v).__name__ == "constexpr":
                # Triton specialises None (and a constexpr) as a compile-time constant: the
                # parameter leaves the runtime signature (`if ptr is not None:` is static)
                if v is not None:
                    v = values[i] = v.value
                sigs.append("constexpr")
                m16.append(False)
                ones.append(False)
                rt_cx += ((name, type(v), v),)
                continue
            s, ba, own = bind_arg(name, v) if ann is None else bind_annotated(name, v, ann)
            sigs.append(s)
            if one and s == "int32" and ba.value == 1 and isinstance(v, int):
                # Triton's `== 1` specialisation: compiled as the constant 1, not passed
                m16.append(False)
                ones.append(True)
                continue
            bound.append(ba)
            ones.append(False)
            m16.append(spec and multiple_of_16(ba))
            if own is not None:
                if owner is not None and own != owner:
                    raise ValueError(f"argument {name!r} is a {own} device array but argument "
                                     f"{owner_arg!r} is a {owner} device array")
                owner, owner_arg = own, name
        if env is None:
            env = launch_flags()
        if backend is None:
            backend = owner or self.default_backend or env[0] or DEFAULT_BACKEND
        elif owner is not None and owner != backend:
            raise ValueError(f"argument {owner_arg!r} is a {owner} device array, which backend "
                             f"{backend!r} cannot use")
        if num_warps is None:
            num_warps = self.default_num_warps or 4
        num_stages = DEFAULT_NUM_STAGES if num_stages is None else check_num_stages(num_stages)
        if check is None:
            check = env[1] not in (None, "", "0")
        fast = self.default_fast_math if fast_math is None else bool(fast_math)
        key = (tuple(sigs), tuple(m16), tuple(cx), num_warps, backend, bool(check), fast,
               num_stages, opts, rt_cx, tuple(ones))
        return values, key, bound

    def _unhashable(self, values: list[Any]) -> None:
        for name, v in zip(self.signature.names, values):
            try:
                hash(v)
            except TypeError:  # a constexpr, or a compile-time value given to a runtime one
                if name in self._cx_names or not hasattr(v, "shape"):
                    raise TypeError(f"constexpr argument {name!r}: value of type "
                                    f"{type(v).__name__} is not hashable") from None

    def identity(self) -> str:
        """Text identifying this kernel's code (and its helpers') for the disk cache."""
        if self._identity is None:
            parts = _kernel_identity(self.fn)
            if self.version is not None:  # Triton's `version=`: a user-chosen cache epoch
                parts.append(f"version={self.version!r}")
            self._identity = "\n".join(parts)
        return self._identity

    def _miss(self, key: tuple, values: list[Any], build: bool) -> CompiledKernel:
        from kdsl import __version__
        from kdsl.backends import get_backend

        from .cache import cached_compile
        from .registry import require_backend

        sigs, m16, num_warps, backend = key[K_SIGS], key[K_M16], key[K_WARPS], key[K_BACKEND]
        check, fast, num_stages, opts = key[K_CHECK], key[K_FAST], key[K_STAGES], key[K_OPTS]
        debug = key[K_DEBUG]
        be = require_backend(backend) if build else get_backend(backend)
        if isinstance(num_warps, bool) or not isinstance(num_warps, int) or num_warps <= 0 \
                or num_warps & (num_warps - 1):
            raise ValueError(f"num_warps: expected a positive power of two, got {num_warps!r}")
        sig = self.signature
        arg_types = {n: sig_type(s) for n, s in zip(sig.runtime_names, sigs)
                     if s != "constexpr"}
        constexprs = {n: v for n, v, c in zip(sig.names, values, sig.is_constexpr) if c}
        rt_cx = {n: v for n, _, v in key[K_RTCX]}
        constexprs.update(rt_cx)
        aligned = tuple(n for n, a in zip(sig.runtime_names, m16) if a)
        ones = tuple(n for n, o in zip(sig.runtime_names, key[K_ONE]) if o)
        spec = (tuple(zip(sig.runtime_names, sigs)),
                tuple((n, type(v).__qualname__, v) for n, v in constexprs.items()),
                num_warps, check, aligned, fast, num_stages, opts) + \
            ((("debug", True),) if debug else ()) + ((("equal_to_1", ones),) if ones else ())
        from kdsl.frontend.globals_used import recording

        if not self._cache:  # (the user cleared the cache: forget what the old ones read)
            self._globals.clear()
        options = CompileOptions(num_warps=num_warps, num_stages=num_stages, check=bool(check),
                                 debug=bool(debug), fast_math=bool(fast), multiple_of_16=aligned,
                                 equal_to_1=ones,
                                 **dict(opts))  # the code-changing launch options (maxnreg)
        with recording() as read:
            ck = cached_compile(self, arg_types, constexprs, be, options,
                                sources=self.identity(), spec=spec, version=__version__,
                                build=build)
        self._globals.update(read)
        dict.__setitem__(self._cache, key, ck)  # (a new entry: the fast ones stay valid)
        return ck


class _SpecCache(dict):
    """The memory cache of a kernel (a dict): any change made from outside (`clear()`, `del`,
    an assignment) also clears the fast launch table built on its entries."""

    __slots__ = ("fast",)

    def __init__(self, fast: dict):
        super().__init__()
        self.fast = fast

    def _changed(self) -> None:
        self.fast.clear()

    def clear(self) -> None:
        self._changed()
        super().clear()

    def __setitem__(self, key: Any, value: Any) -> None:
        self._changed()
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self._changed()
        super().__delitem__(key)

    def pop(self, *args: Any) -> Any:
        self._changed()
        return super().pop(*args)

    def popitem(self) -> Any:
        self._changed()
        return super().popitem()

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._changed()
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._changed()
        super().update(*args, **kwargs)


def jit(fn: Callable | None = None, *, num_warps: int | None = None,
        backend: str | None = None, fast_math: bool = False, version: Any = None,
        repr: Callable | None = None, launch_metadata: Callable | None = None,
        do_not_specialize: Any = None, do_not_specialize_on_alignment: Any = None,
        debug: bool | None = None, noinline: bool | None = None) -> Any:
    """Decorator: `@kd.jit`, `@kd.jit()` or `@kd.jit(num_warps=8, backend="opencl",
    fast_math=True)` (launch defaults; fast_math off means IEEE float semantics), with
    Triton's arguments: `do_not_specialize` / `do_not_specialize_on_alignment` (parameter
    names or indices kept out of the `% 16` specialisation), `version`, `repr`,
    `launch_metadata`, `debug`, `noinline` (docs/language.md "Launching")."""
    opts = {"num_warps": num_warps, "backend": backend, "fast_math": fast_math,
            "version": version, "repr": repr, "launch_metadata": launch_metadata,
            "do_not_specialize": do_not_specialize,
            "do_not_specialize_on_alignment": do_not_specialize_on_alignment, "debug": debug,
            "noinline": noinline}
    if fn is None:
        return lambda f: jit(f, **opts)
    if isinstance(fn, JITFunction):
        return fn
    return JITFunction(fn, **opts)
