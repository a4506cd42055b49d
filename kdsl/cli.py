"""The `kdsl` command line.

    kdsl info                                      versions, backends and their devices
    kdsl dump FILE.py:KERNEL --backend B [--stage S] [--args SPEC ...]
                                                   every IR stage and the generated source

Each subcommand is one entry of `COMMANDS`: a function adding its arguments and a function
running it (returning the exit status); new subcommands are new entries.

`dump` needs concrete argument types.  They come from `--args`, one spec per kernel parameter
in order:  `*float32` (array of float32; `*f32`, `*fp16`, `*bf16`, `*i32`... also work),
`int32`/`i64`/`f32` (a scalar of that type), or `NAME=VALUE` for a constexpr (a Python literal
or a dtype name such as `float16`).  Without `--args`, the module must define
`<KERNEL>_example_args()` returning `(args, kwargs, grid)`, the arguments of a real launch.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

_SHORT_DTYPES = {
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


def _devices(name: str, backend: Any) -> list[str]:
    """Devices a backend reports (`devices()` if it has one), else a direct probe."""
    fn = getattr(backend, "devices", None)
    if callable(fn):
        try:
            return [str(d) for d in fn()]
        except Exception as e:
            return [f"(could not list devices: {e})"]
    return _PROBES.get(name, list)()


def _probe_opencl() -> list[str]:
    try:
        import pyopencl as cl
        return [f"{p.name}: {d.name}" for p in cl.get_platforms() for d in p.get_devices()]
    except Exception as e:
        return [f"(none: {type(e).__name__})"]


def _probe_cuda() -> list[str]:
    try:
        import cupy
        n = cupy.cuda.runtime.getDeviceCount()
        return [cupy.cuda.runtime.getDeviceProperties(i)["name"].decode() for i in range(n)]
    except Exception as e:
        return [f"(none: {type(e).__name__})"]


def _probe_cpu() -> list[str]:
    import os
    import platform
    return [f"{platform.machine()} host CPU, {os.cpu_count()} cores"]


_PROBES: dict[str, Callable[[], list[str]]] = {
    "llvm": _probe_cpu, "interp": _probe_cpu, "opencl": _probe_opencl, "cuda": _probe_cuda,
}


def cmd_info(args: argparse.Namespace) -> int:
    import kdsl
    from kdsl.backends import all_backend_names, get_backend
    from kdsl.runtime.registry import backend_status

    print(f"{'kdsl':<18} {kdsl.__version__}")
    print(f"{'python':<18} {sys.version.split()[0]}")
    for dist in ("numpy", "llvmlite", "pyopencl", "cupy-cuda13x", "nvidia-cuda-nvrtc"):
        print(f"{dist:<18} {_version(dist)}")
    print("backends:")
    for name in all_backend_names():
        ok, why = backend_status(name)
        print(f"  {name:<7} {'available' if ok else 'unavailable: ' + why}")
        if ok:
            for d in _devices(name, get_backend(name)):
                print(f"          device: {d}")
    return 0


def _add_info(p: argparse.ArgumentParser) -> None:
    pass


# ------------------------------------------------------------------------------ dump

def _dtype(name: str):
    from kdsl.ir import types as T
    name = _SHORT_DTYPES.get(name, name)
    try:
        return T.BY_NAME[name]
    except KeyError:
        raise SystemExit(f"kdsl dump: unknown dtype {name!r}") from None


def _parse_arg_spec(spec: str) -> tuple[str | None, Any]:
    """(constexpr name or None, value) for one `--args` item."""
    from kdsl.runtime.binding import bfloat16_view
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


def _load_kernel(target: str):
    path, _, name = target.rpartition(":")
    if not path or not name:
        raise SystemExit("kdsl dump: expected FILE.py:KERNEL")
    file = Path(path)
    if not file.is_file():
        raise SystemExit(f"kdsl dump: no such file {path}")
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(file.stem, module)
    sys.path.insert(0, str(file.parent.resolve()))
    spec.loader.exec_module(module)
    kernel = getattr(module, name, None)
    if kernel is None or not hasattr(kernel, "compile"):
        raise SystemExit(f"kdsl dump: {path} has no @kd.jit kernel {name!r}")
    return module, kernel, name


def cmd_dump(args: argparse.Namespace) -> int:
    module, kernel, name = _load_kernel(args.target)
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
    ck = kernel.compile(*pos, backend=args.backend, num_warps=args.num_warps, **kw)
    if args.stage:
        if args.stage not in ck.ir:
            print(f"kdsl dump: no stage {args.stage!r}; stages: {', '.join(ck.ir)}",
                  file=sys.stderr)
            return 2
        print(ck.ir[args.stage])
        return 0
    for stage, text in ck.ir.items():
        print(f"// ===== {stage} =====")
        print(text.rstrip("\n"))
        print()
    return 0


def _add_dump(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="FILE.py:KERNEL")
    p.add_argument("--backend", "-b", default="llvm")
    p.add_argument("--stage", "-s", default=None, help="print only this stage")
    p.add_argument("--num-warps", type=int, default=4)
    p.add_argument("--args", nargs="+", default=None, metavar="SPEC",
                   help="*float32 (array), int32 (scalar), NAME=VALUE (constexpr)")


# ------------------------------------------------------------------------------ main

#: name -> (help, add arguments, run)
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None],
                          Callable[[argparse.Namespace], int]]] = {
    "info": ("versions, backends and devices found", _add_info, cmd_info),
    "dump": ("print every IR stage and the generated source of a kernel", _add_dump, cmd_dump),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kdsl", description="kdsl kernel DSL tools")
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
