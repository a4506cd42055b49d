"""The compile pipeline driver and the compiled-kernel object.

    build_function (frontend) -> run_tile_passes -> lowering.lower(fn, backend.target(num_warps))
    -> backend.add_stages -> backend.codegen -> backend.build (lazily, on first launch)

`compile_kernel` records every stage's text in `CompiledKernel.ir` ("tile", the tile passes,
"loop", backend stages, then the source under the backend's name).  Building is deferred so
that code generation works with no device (CUDA source on a machine without a GPU).
The frontend, passes and backends are imported inside the functions: `import kdsl` must not
depend on them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kdsl.backends.base import Backend, BoundArg
from kdsl.compile_options import CompileOptions
from kdsl.target import Target

from .device import launcher
from .stages import Stages


def _resolve_backend(backend: str | Backend) -> Backend:
    if isinstance(backend, Backend):
        return backend
    from kdsl.backends import get_backend
    return get_backend(backend)


def _stored_indices(kernel: Any) -> tuple[int, ...]:
    """Indices of the runtime parameters the kernel stores through; used to refuse read-only
    outputs before a launch.  A lowered kernel says (`loop.Kernel.stored_indices`); a tile
    function (tile-level backends) is analysed."""
    stored = getattr(kernel, "stored_indices", None)
    if stored is not None:
        return stored()
    if getattr(kernel, "runtime_params", None) is None:
        return ()
    from kdsl.passes.provenance import stored_params
    return tuple(sorted(stored_params(kernel)))


class CompiledKernel:
    """One specialisation of a kernel for one backend.

    `.source` generated code, `.ir` ordered dict stage -> text, `.backend` backend name,
    `.kernel` the lowered `loop.Kernel` (or the tile function for tile-level backends),
    `.name`, `.num_warps`, `.handle` (built on first use), `.run(grid, args)`."""

    def __init__(self, name: str, backend: Backend, kernel: Any, source: str,
                 ir: dict[str, str], num_warps: int, handle: Any = None):
        self.name = name
        self.backend = backend.name
        self.backend_obj = backend
        self.kernel = kernel
        self.source = source
        self.ir = ir
        self.num_warps = num_warps
        self._handle = handle
        # a device backend's arrays go through the runtime's copy-in/copy-back (device.py)
        self._launch = launcher(backend)
        self._stored = _stored_indices(kernel)
        #: checked mode's site table and hidden parameters (kdsl/passes/checks.py), or None
        self.checks = (getattr(kernel, "attrs", None) or {}).get("checks")
        #: called with the built handle after a lazy build (the disk cache stores the binary)
        self.on_built: Callable[[CompiledKernel], None] | None = None

    @property
    def handle(self) -> Any:
        if self._handle is None:
            self._handle = self.backend_obj.build(self.kernel, self.source)
            if self.on_built is not None:
                cb, self.on_built = self.on_built, None
                try:
                    cb(self)
                except Exception:  # caching is best effort, never a launch failure
                    pass
        return self._handle

    @property
    def is_built(self) -> bool:
        return self._handle is not None

    def run(self, grid: tuple[int, ...], args: list[BoundArg]) -> None:
        """Launch on `grid` (1-3 positive ints) with bound arguments following the kernel's
        runtime parameters."""
        if len(grid) != 3:
            from .binding import normalize_grid
            grid = normalize_grid(grid)
        if self.checks is not None:  # hidden arguments in, error record out
            from .checked import run_checked
            run_checked(self.checks, self._run_bound, grid, args)
            return
        self._run_bound(grid, args)

    def _run_bound(self, grid: tuple[int, int, int], args: list[BoundArg]) -> None:
        for i in self._stored:
            host = args[i].host
            if host is not None and not host.flags.writeable:
                raise ValueError(f"argument {args[i].name!r}: the kernel stores to it but the "
                                 f"array is read-only")
        handle = self._handle if self._handle is not None else self.handle
        self._launch(handle, self.kernel, grid, args)

    def __repr__(self) -> str:
        return f"<CompiledKernel {self.name} backend={self.backend} num_warps={self.num_warps}>"


def build_tile(jitfn: Any, arg_types: dict[str, Any], constexprs: dict[str, Any],
               num_warps: int = 4, check: bool = False, *,
               options: CompileOptions | None = None) -> tuple[Any, dict[str, str]]:
    """Frontend and tile passes for one specialisation: (optimised tile function, stages).
    Cheap (milliseconds); its final text identifies the kernel exactly for the disk cache.
    `options` (default: those of `num_warps` and `check`) travel with the function to the
    passes, the lowering and the backends (`tile.Function.options`)."""
    from kdsl.frontend import build_function
    from kdsl.ir.tile import print_function
    from kdsl.passes import run_tile_passes

    if options is None:
        options = CompileOptions(num_warps=num_warps, check=bool(check))
    pyfn = getattr(jitfn, "fn", jitfn)
    fn = build_function(pyfn, arg_types, constexprs, equal_to_1=options.equal_to_1)
    fn.options = options
    ir: dict[str, str] = Stages(tile=print_function(fn))
    fn, stages = run_tile_passes(fn)
    ir.update(stages)
    return fn, ir


def finish_kernel(fn: Any, ir: dict[str, str], backend: str | Backend,
                  num_warps: int | None = None, build: bool = False,
                  target: Target | None = None) -> CompiledKernel:
    """Lowering (for loop-level backends), backend stages and code generation; with `build`,
    also build the handle.  `target` defaults to the backend's for the options' num_warps."""
    be = _resolve_backend(backend)
    if num_warps is not None and num_warps != fn.options.num_warps:
        fn.options = replace(fn.options, num_warps=num_warps)
    num_warps = fn.options.num_warps
    ir = Stages(ir)
    kernel: Any = fn
    if be.level == "loop":
        from kdsl.ir.loop import print_kernel
        from kdsl.lowering import lower
        kernel = lower(fn, target if target is not None else be.target(num_warps))
        ir["loop"] = print_kernel(kernel)
    be.add_stages(kernel, ir)
    # a backend whose stages start from its own source (llvm) has generated it already
    source = dict.get(ir, be.name)
    if not isinstance(source, str):
        source = be.codegen(kernel)
    ir[be.name] = source
    ck = CompiledKernel(fn.name, be, kernel, source, ir, num_warps)
    if build:
        _ = ck.handle
    return ck


def compile_kernel(jitfn: Any, arg_types: dict[str, Any], constexprs: dict[str, Any],
                   backend: str | Backend, num_warps: int = 4, check: bool = False,
                   build: bool = False, options: CompileOptions | None = None
                   ) -> CompiledKernel:
    """Run the pipeline for one specialisation.  `arg_types`: runtime parameter name ->
    TileType; `constexprs`: constexpr name -> value.  With `build`, also build the handle."""
    fn, ir = build_tile(jitfn, arg_types, constexprs, num_warps, check, options=options)
    return finish_kernel(fn, ir, backend, build=build)
