"""The `kdsl` command line.

    kdsl info [--no-caps] [--refresh]              versions, backends, devices, capabilities
    kdsl dump FILE.py:KERNEL|NAME --backend B [--stage S] [--args SPEC ...]
                                                   every IR stage and the generated source
    kdsl compare NAME|all|FILE.py:KERNEL|BUNDLE [--backends ...] [--shape ...] [--dtype ...]
                                                   every backend against the float64 reference
    kdsl bench NAME|FILE.py:KERNEL [--sizes ...] [--backends ...] [--json] [--plot out.png]
                                                   time, GB/s or GFLOP/s, fraction of roofline
    kdsl cache info|clear                          the disk cache: where, how big; empty it
    kdsl --version                                 (also `python -m kdsl ...`)

Each subcommand is one entry of `COMMANDS`: a function adding its arguments and a function
running it (returning the exit status); new subcommands are new entries.  The command line is
the top of the tools layer (kdsl/tools/__init__.py); `kdsl.cli:main` is its public entry.

`dump` needs concrete argument types.  They come from `--args`, one spec per kernel parameter
in order:  `*float32` (array of float32; `*f32`, `*fp16`, `*bf16`, `*i32`... also work),
`int32`/`i64`/`f32` (a scalar of that type), or `NAME=VALUE` for a constexpr (a Python literal
or a dtype name such as `float16`).  Without `--args`, the module must define
`<KERNEL>_example_args()` returning `(args, kwargs, grid)`, the arguments of a real launch.
A NAME (no `.py:`) is a library kernel (`kdsl.kernels`), dumped on its default inputs: its launches
are recorded without running (`kdsl.runtime.launches.record_launches(dry=True)`), so any backend's
code is produced on any machine.

`compare` and `bench` use the same file convention: `<KERNEL>_example_args()` (for bench's
`--sizes`, `<KERNEL>_example_args(size)`), optionally `<KERNEL>_reference(*args)` returning the
expected outputs (else the interpreter's result is the reference) and `<KERNEL>_cost(*args)`
returning `(flops, bytes)` (else bytes = the arrays' sizes, flops = 0).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from kdsl.backends import DEFAULT as DEFAULT_BACKEND

from .loader import load_kernel

SHORT_DTYPES = {
    "f16": "float16", "fp16": "float16", "half": "float16", "bf16": "bfloat16",
    "f32": "float32", "fp32": "float32", "float": "float32", "f64": "float64",
    "fp64": "float64", "double": "float64", "i8": "int8", "i16": "int16", "i32": "int32",
    "int": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32",
    "u64": "uint64", "bool": "int1", "i1": "int1",
}


# ------------------------------------------------------------------------------ info

def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _devices(backend: Any) -> list[str]:
    """The devices a backend reports (`Backend.devices()`)."""
    try:
        return [str(d) for d in backend.devices()]
    except Exception as e:
        return [f"(could not list devices: {type(e).__name__}: {e})"]


def cmd_info(args: argparse.Namespace) -> int:
    status = _cmd_info_versions()
    if not args.no_caps:
        print()
        from .capabilities import capability_matrix, format_matrix
        print(format_matrix(capability_matrix(refresh=args.refresh)))
    return status


def _cmd_info_versions() -> int:
    import kdsl
    from kdsl.backends import all_backend_names, get_backend
    from kdsl.runtime.registry import backend_status

    print(f"{'kdsl':<18} {kdsl.__version__}")
    print(f"{'python':<18} {sys.version.split()[0]}")
    for dist in ("numpy", "llvmlite", "pyopencl", "cupy-cuda13x", "nvidia-cuda-nvrtc", "torch"):
        print(f"{dist:<18} {_version(dist)}")
    print("backends:")
    names = all_backend_names()
    width = max(map(len, names), default=0)
    for name in names:
        ok, why = backend_status(name)
        print(f"  {name:<{width}} {'available' if ok else 'unavailable: ' + why}")
        if ok:
            for d in _devices(get_backend(name)):
                print(f"  {'':<{width}} device: {d}")
    return 0


def _add_info(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-caps", action="store_true", help="skip the capability matrix")
    p.add_argument("--refresh", action="store_true", help="recompute the capability matrix")


# ------------------------------------------------------------------------------ dump

def _dtype(name: str):
    from kdsl.ir import types as T
    name = SHORT_DTYPES.get(name, name)
    try:
        return T.BY_NAME[name]
    except KeyError:
        raise SystemExit(f"kdsl dump: unknown dtype {name!r}") from None


def _parse_arg_spec(spec: str) -> tuple[str | None, Any]:
    """(constexpr name or None, value) for one `--args` item."""
    from kdsl.runtime.dtype_views import bfloat16_view
    if "=" in spec:
        name, text = spec.split("=", 1)
        try:
            return name.strip(), ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return name.strip(), _dtype(text.strip().removeprefix("kd."))
    if spec.startswith("*"):
        dt = _dtype(spec[1:])
        if dt.name == "bfloat16":
            return None, bfloat16_view(np.empty(0, np.uint16))
        return None, np.empty(0, dt.np)
    dt = _dtype(spec)
    return None, np.array(0, dt.np)[()]  # a NumPy scalar keeps its dtype


def _dump_library(args: argparse.Namespace) -> int:
    import os

    from kdsl.kernels.cases import CASES, library_function
    from kdsl.runtime.launches import record_launches
    if args.target not in CASES:
        raise SystemExit(f"kdsl dump: {args.target!r} is neither FILE.py:KERNEL nor a library "
                         f"kernel ({', '.join(CASES)})")
    fn, _ = library_function(args.target)
    case = CASES[args.target]
    pos, kw = case.make(case.shape, np.dtype("float32"), np.random.default_rng(0))
    old = os.environ.get("KDSL_AUTOTUNE")
    os.environ["KDSL_AUTOTUNE"] = "0"  # dry launches must not be timed
    try:
        with record_launches(dry=True) as launches:
            try:
                fn(*pos, backend=args.backend, **kw)
            except Exception:  # the outputs of dry launches are garbage: stop at the first use
                if not launches:
                    raise
    finally:
        if old is None:
            os.environ.pop("KDSL_AUTOTUNE", None)
        else:
            os.environ["KDSL_AUTOTUNE"] = old
    status = 0
    for ln in launches:
        ck = ln.jit.compile(*ln.args, backend=args.backend, num_warps=ln.num_warps, **ln.kwargs)
        print(f"// ##### {ln.jit.__name__} #####")
        status |= _print_stages(ck, args.stage)
    return status


def _print_stages(ck: Any, stage: str | None) -> int:
    if stage:
        if stage not in ck.ir:
            print(f"kdsl dump: no stage {stage!r}; stages: {', '.join(ck.ir)}", file=sys.stderr)
            return 2
        print(ck.ir[stage])
        return 0
    for name, text in ck.ir.items():
        print(f"// ===== {name} =====")
        print(text.rstrip("\n"))
        print()
    return 0


def cmd_dump(args: argparse.Namespace) -> int:
    if ".py:" not in args.target:
        return _dump_library(args)
    module, kernel, name = load_kernel(args.target)
    if args.args:
        pos, kw = [], {}
        for item in args.args:
            k, v = _parse_arg_spec(item)
            if k is None:
                pos.append(v)
            else:
                kw[k] = v
    else:
        example = getattr(module, f"{name}_example_args", None)
        if example is None:
            raise SystemExit(f"kdsl dump: give --args, or define {name}_example_args() "
                             f"returning (args, kwargs, grid) in {args.target.rpartition(':')[0]}")
        pos, kw, _grid = example()
        pos, kw = list(pos), dict(kw)
    kw.pop("backend", None)
    try:
        ck = kernel.compile(*pos, backend=args.backend, num_warps=args.num_warps, **kw)
    except (TypeError, ValueError) as e:  # --args that do not fit the kernel's signature
        raise SystemExit(f"kdsl dump: {name}: {e}") from None
    return _print_stages(ck, args.stage)


def _add_dump(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="FILE.py:KERNEL|NAME")
    p.add_argument("--backend", "-b", default=DEFAULT_BACKEND)
    p.add_argument("--stage", "-s", default=None, help="print only this stage")
    p.add_argument("--num-warps", type=int, default=4)
    p.add_argument("--args", nargs="+", default=None, metavar="SPEC",
                   help="*float32 (array), int32 (scalar), NAME=VALUE (constexpr)")


# ------------------------------------------------------------------------------ compare

def _csv(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def _shape(text: str | None) -> tuple[int, ...] | None:
    return tuple(int(t) for t in text.replace("x", ",").split(",") if t) if text else None


def cmd_compare(args: argparse.Namespace) -> int:
    """Exit 0 when something was compared and all of it passed, 1 on a mismatch, 2 on a usage
    error (unknown kernel, backend, dtype or shape) or when nothing could be compared."""
    try:
        return _compare(args)
    except (ValueError, SystemExit) as e:
        if isinstance(e, SystemExit) and not isinstance(e.code, str):
            raise
        msg = str(e.code if isinstance(e, SystemExit) else e)
        print(msg if msg.startswith("kdsl") else f"kdsl compare: {msg}", file=sys.stderr)
        return 2


def _compare(args: argparse.Namespace) -> int:
    import json

    from kdsl.kernels import cases

    from . import compare as C
    from .report import CompareReport, Result
    from .repro import run_bundle
    backends = _csv(args.backends)
    if backends:
        C.check_backend_names(backends)
    opts = {"bundle_dir": args.bundle_dir}
    target = args.target
    if Path(target, "meta.json").is_file():
        return run_bundle(target, backends)
    if ".py:" in target:
        module, kernel, name = load_kernel(target, "kdsl compare")
        example = getattr(module, f"{name}_example_args", None)
        if example is None:
            raise SystemExit(f"kdsl compare: define {name}_example_args() returning "
                             f"(args, kwargs, grid) in {target.rpartition(':')[0]}")
        pos, kw, grid = example()
        ref = getattr(module, f"{name}_reference", None)
        reports = [C.compare(kernel, pos, backends, ref, grid=grid,
                             repro_command=f"kdsl compare {target}", **opts, **kw)]
    elif target == "all":
        cases.library_dtype(args.dtype)  # a bad --dtype is a usage error, not eight failures
        names = cases.library_kernels()
        if not names:
            print("kdsl compare all: no library kernels found in kdsl.kernels", file=sys.stderr)
            return 2
        reports = []
        for n in names:
            try:
                reports.append(C.compare_case(n, None, args.dtype, backends, **opts))
            except Exception as e:
                reports.append(CompareReport(n, [Result("*", "*", error=f"{e}")], "-"))
    elif target in cases.CASES:
        try:
            shape = _shape(args.shape)
        except ValueError:
            raise ValueError(f"--shape {args.shape!r}: expected integers, e.g. 64,1000") from None
        reports = [C.compare_case(target, shape, args.dtype, backends, **opts)]
    else:
        raise SystemExit(f"kdsl compare: {target!r} is not a library kernel "
                         f"({', '.join(cases.CASES)}), 'all', FILE.py:KERNEL or a repro bundle")
    if args.json:
        print(json.dumps([r.to_dict() for r in reports], indent=1))
    elif len(reports) == 1:
        print(reports[0].table())
    else:
        print(_summary_table(reports))
    for r in reports:
        if r.reason:
            print(f"kdsl compare {r.name}: {r.reason}", file=sys.stderr)
    return max(r.exit_status for r in reports)


def _summary_table(reports: list[Any]) -> str:
    from .report import fmt_ulp
    head = (f"{'kernel':<17} {'backend':<8} {'output':<8} {'dtype':<9} {'k':>6} {'max abs':>9} "
            f"{'max rel':>9} {'max ulp':>8} {'atol':>8} {'rtol':>8}  status")
    lines = [head, "-" * len(head)]
    for rep in reports:
        for r in rep.results:
            if r.error is not None:
                lines.append(f"{rep.name:<17} {r.backend:<8} {r.output:<8} "
                             f"ERROR: {r.error.splitlines()[0][:60]}")
            else:
                lines.append(f"{rep.name:<17} {r.backend:<8} {r.output:<8} {r.dtype:<9} "
                             f"{r.k:>6} {r.max_abs:9.2e} {r.max_rel:9.2e} "
                             f"{fmt_ulp(r.max_ulp):>8} {r.atol:8.1e} {r.rtol:8.1e}  {r.status}")
        if rep.reason:
            lines.append(f"{rep.name:<17} FAILED: {rep.reason}")
        if rep.bundle is not None:
            lines.append(f"{'':<17} repro bundle: {rep.bundle}")
    return "\n".join(lines)


def _add_compare(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="NAME|all|FILE.py:KERNEL|BUNDLE")
    p.add_argument("--backends", "-b", default=None, help="comma-separated (default: all)")
    p.add_argument("--shape", default=None, help="e.g. 64,1000 (library kernels)")
    p.add_argument("--dtype", default="float32", help="float32, float16 or bfloat16")
    p.add_argument("--bundle-dir", default=None, help="where repro bundles go")
    p.add_argument("--json", action="store_true")


# ------------------------------------------------------------------------------ bench

def cmd_bench(args: argparse.Namespace) -> int:
    from . import sweep
    if args.plot and not _have_extra("matplotlib", "kdsl bench --plot"):
        return 2  # said before the benchmark runs, not after
    try:
        rows, rooflines = sweep.bench_cli(args.target, _csv(args.sizes), _csv(args.backends),
                                          args.dtype, args.rep)
    except ValueError as e:  # a usage error (an unknown dtype): exit 2, as compare's
        print(f"kdsl bench: {e}", file=sys.stderr)
        return 2
    if args.json:
        import json
        print(json.dumps({"rows": rows, "roofline": rooflines}, indent=1))
    else:
        print(sweep.format_rows(rows, rooflines))
    if args.plot:
        sweep.plot(rows, rooflines, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def _add_bench(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="NAME|FILE.py:KERNEL")
    p.add_argument("--sizes", default=None, help="comma-separated sweep, e.g. 256,1024,4096")
    p.add_argument("--backends", "-b", default=None, help="comma-separated (default: all)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--rep", type=float, default=100, help="ms measured per point")
    p.add_argument("--json", action="store_true", help="JSON on stdout")
    p.add_argument("--plot", default=None, metavar="OUT.png")


def _have_extra(module: str, what: str) -> bool:
    """Whether optional `module` is installed; if not, say which extra installs it."""
    from kdsl.extras import MissingExtra, check
    try:
        check(module, what)
    except MissingExtra as e:
        print(f"kdsl: {e}", file=sys.stderr)
        return False
    return True


# ------------------------------------------------------------------------------ cache

def cmd_cache(args: argparse.Namespace) -> int:
    from kdsl.runtime import cache_limit as CL
    from kdsl.runtime.cache import cache_dir
    folder = cache_dir()
    if args.action == "clear":
        n = CL.clear(folder)
        print(f"removed {n} files from {folder}")
        return 0
    try:
        cap = CL.max_size()
    except ValueError as e:
        print(f"kdsl cache: {e}", file=sys.stderr)
        return 2
    use = CL.usage(folder)
    print(f"{'folder':<14} {folder}")
    for part, (files, size) in use.parts.items():
        what = "entries" if part == "kernels" else "files"
        print(f"{part:<14} {CL.format_size(size):>10}  {files} {what}")
    limit = f"kernels capped at {CL.format_size(cap)}" if cap else "no cap"
    print(f"{'total':<14} {CL.format_size(use.total):>10}  ({limit}: KDSL_CACHE_MAX_SIZE)")
    return 0


def _add_cache(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("info", "clear"), nargs="?", default="info")


# ------------------------------------------------------------------------------ port


def cmd_port(args: argparse.Namespace) -> int:
    from kdsl.porting import port_source

    try:
        text = open(args.file).read()
    except OSError as e:
        print(f"kdsl port: {e}", file=sys.stderr)
        return 2
    out = port_source(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(out)
    else:
        sys.stdout.write(out)
    return 0


def _add_port(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a Python file of Triton kernels")
    p.add_argument("-o", "--output", default=None, help="write here instead of stdout")


# ------------------------------------------------------------------------------ main

#: name -> (help, add arguments, run)
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None],
                          Callable[[argparse.Namespace], int]]] = {
    "info": ("versions, backends and devices found", _add_info, cmd_info),
    "dump": ("print every IR stage and the generated source of a kernel", _add_dump, cmd_dump),
    "compare": ("compare every backend with the float64 reference (exit 1 on a mismatch)",
                _add_compare, cmd_compare),
    "bench": ("time a kernel: ms, GB/s or GFLOP/s, fraction of the roofline", _add_bench,
              cmd_bench),
    "port": ("print a Triton source file renamed to kdsl (tl. -> kd., docs/porting.md)",
             _add_port, cmd_port),
    "cache": ("the disk cache of compiled kernels: `info` (folder, size) or `clear`",
              _add_cache, cmd_cache),
}


def build_parser() -> argparse.ArgumentParser:
    from kdsl import __version__
    parser = argparse.ArgumentParser(prog="kdsl", description="kdsl kernel DSL tools")
    parser.add_argument("--version", action="version", version=f"kdsl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_, add, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        add(p)
        p.set_defaults(run=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 2
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
