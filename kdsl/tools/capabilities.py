"""The capability matrix of `kdsl info`: one tiny kernel per op (the ops come from the
language's own function signatures, and libdevice's table of signatures) compiled for each
dtype on each backend; a cell is what the compiler did, never a hand-written claim.  Cached per
compiler build and backend identity.

A cell is "ok" or "<exception type>: <last line of the message>".  An op a backend cannot run
must be a `CompilationError` there (`crashes` lists any cell that is not), and the ops some
backends lack (`backend_gaps`) are the ones docs/language.md names ("Backend support");
tests/unit/test_capabilities.py checks both."""

from __future__ import annotations

from typing import Any

import numpy as np

from kdsl.backends import all_backend_names, get_backend
from kdsl.runtime.dtype_views import bfloat16_view
from kdsl.term import Progress

from .loader import load_module

_OPERATORS = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%"}
_CAP_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int32", "int64")
#: the columns of the printed matrix, in order (libdevice adds the unsigned ones)
COLUMNS = ("float16", "bfloat16", "float32", "float64", "int8", "int32", "uint32", "int64",
           "uint64")
_SHORT = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64",
          "int8": "i8", "int32": "i32", "uint32": "u32", "int64": "i64", "uint64": "u64"}


def cap_ops() -> dict[str, str]:
    """op name -> kernel body computing `r` from tiles `a`, `b` (BLOCK elements)."""
    return {name: body for name, (body, _) in _cap_table().items()}


def cap_dtypes(op: str) -> tuple[str, ...]:
    """The dtypes the matrix compiles `op` at (libdevice functions: their signatures')."""
    return _cap_table()[op][1]


_TABLE: dict[str, tuple[str, tuple[str, ...]]] = {}


def _cap_table() -> dict[str, tuple[str, tuple[str, ...]]]:
    if not _TABLE:
        _TABLE.update({k: (v, _CAP_DTYPES) for k, v in _language_ops().items()})
        _TABLE.update(_libdevice_ops())
    return _TABLE


def _language_ops() -> dict[str, str]:
    import inspect

    import kdsl.language as L
    ops = {name: f"r = a {sym} b" for name, sym in _OPERATORS.items()}
    for name in L.__all__:
        f = getattr(L, name)
        try:
            params = [p for p in inspect.signature(f).parameters if p != "_builder"]
        except (TypeError, ValueError):
            continue
        if params == ["x"] and name != "zeros_like":
            ops[name] = f"r = kd.{name}(a)"
        elif params[:3] == ["x", "y", "z"]:
            ops[name] = f"r = kd.{name}(a, b, a)"
        elif params[:2] == ["x", "y"]:
            ops[name] = f"r = kd.{name}(a, b)"
        elif "combine_fn" in params:
            continue  # needs a function
        elif params[:2] == ["input", "axis"] and "keep_dims" in params:  # reductions
            ops[name] = f"r = kd.{name}(a, axis=0) + kd.zeros((BLOCK,), kd.int32)"
        elif params[:3] == ["input", "axis", "reverse"]:  # scans
            ops[name] = f"r = kd.{name}(a, 0)"
        elif params[:3] == ["a", "b", "acc"]:
            ops[name] = (f"r = kd.reshape(kd.{name}(kd.reshape(a, (16, 16)), "
                         "kd.reshape(b, (16, 16))), (BLOCK,))")
        elif params[:2] == ["pointer", "val"]:
            ops[name] = f"r = kd.{name}(o_ptr + offs, a)"
    return ops


def _libdevice_ops() -> dict[str, tuple[str, tuple[str, ...]]]:
    """`libdevice.NAME` -> (body, the dtypes of its signatures): each signature is compiled
    with its own argument types (the column is its first float argument's type, else its
    first argument's; the other arguments are `b` converted)."""
    from kdsl.language.libdevice_table import TABLE, UNSUPPORTED
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for name, (sigs, _impl) in TABLE.items():
        if name in UNSUPPORTED:
            continue
        bodies: dict[str, str] = {}
        for args, _res in sigs:
            names = [t.name for t in args]
            col = next((n for n in names if n.startswith("float")), names[0])
            call = ", ".join("a" if n == col else f"b.to(kd.{n})" for n in names)
            bodies.setdefault(col, f"r = libdevice.{name}({call})")
        # one body per row: the signatures differ only in types, which the column's `a` picks
        first = next(iter(bodies.values()))
        if all(_same_call(b, first) for b in bodies.values()):
            out[f"libdevice.{name}"] = (first, tuple(bodies))
        else:  # e.g. an int-typed second argument in one signature only: a row per column
            for col, body in bodies.items():
                out[f"libdevice.{name}.{_SHORT.get(col, col)}"] = (body, (col,))
    return out


def _same_call(a: str, b: str) -> bool:
    import re
    return re.sub(r"kd\.\w+", "T", a) == re.sub(r"kd\.\w+", "T", b)


def _kernel_name(op: str) -> str:
    return "cap_" + op.replace(".", "__")


def _cap_module(ops: dict[str, str]) -> Any:
    from kdsl.runtime.cache import cache_dir
    lines = ['"""Generated by kdsl info: one kernel per op."""', "import kdsl as kd",
             "from kdsl.language.extra import libdevice", ""]
    for name, body in ops.items():
        lines += ["@kd.jit", f"def {_kernel_name(name)}(x_ptr, y_ptr, o_ptr, BLOCK: kd.constexpr):",
                  "    offs = kd.arange(0, BLOCK)",
                  "    a = kd.load(x_ptr + offs)", "    b = kd.load(y_ptr + offs)",
                  f"    {body}", "    kd.store(o_ptr + kd.arange(0, BLOCK), r)", ""]
    path = cache_dir() / "caps" / "cap_kernels.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return load_module(path, "kdsl_cap_kernels")


def _array(dt: str) -> Any:
    if dt == "bfloat16":
        return bfloat16_view(np.zeros(256, np.uint16))
    return np.zeros(256, dt)


def compile_cell(kernel: Any, backend: str, dtype: str) -> str:
    """"ok" or "<exception type>: <last line of its message>" for one cell."""
    try:
        kernel.compile(_array(dtype), _array(dtype), _array(dtype), backend=backend, BLOCK=256)
        return "ok"
    except Exception as e:  # a cell records what the compiler did, whatever it was
        msg = [t for t in str(e).splitlines() if t.strip()] or [""]
        return f"{type(e).__name__}: {msg[-1].strip()[:160]}"


def capability_matrix(refresh: bool = False, backends: list[str] | None = None,
                      ops: list[str] | None = None) -> dict[str, dict[str, dict[str, str]]]:
    """backend -> op -> dtype -> "ok" or the compile error (`compile_cell`); all backends and
    ops unless narrowed (a narrowed matrix is not cached)."""
    import hashlib
    import json

    import kdsl
    from kdsl.runtime.cache import cache_dir, compiler_fingerprint

    table = _cap_table()
    names = backends or all_backend_names()
    chosen = {k: table[k] for k in (ops or table)}
    ids = []
    for b in names:
        try:
            ids.append(f"{b}:{get_backend(b).hash()}")
        except Exception as e:  # an unloadable backend still gets its (failing) column
            ids.append(f"{b}:{e}")
    key = hashlib.sha256(repr((kdsl.__version__, compiler_fingerprint(), ids,
                               chosen)).encode()).hexdigest()
    path = cache_dir() / "caps" / f"{key[:24]}.json"
    full = backends is None and ops is None
    if full and not refresh and path.is_file():
        try:
            return json.loads(path.read_text())
        except ValueError:
            pass
    mod = _cap_module({k: body for k, (body, _) in table.items()})
    out: dict[str, dict[str, dict[str, str]]] = {}
    with Progress(len(names) * len(chosen), "capabilities") as bar:
        for b in names:
            out[b] = {}
            for op, (_body, dts) in chosen.items():
                kern = getattr(mod, _kernel_name(op))
                out[b][op] = {dt: compile_cell(kern, b, dt) for dt in dts}
                bar.step(f"{b} {op}")
    if full:
        path.write_text(json.dumps(out, indent=1))
    return out


def crashes(m: dict[str, dict[str, dict[str, str]]]) -> list[tuple[str, str, str, str]]:
    """(backend, op, dtype, error) of every cell that failed with anything but a
    CompilationError: a compiler bug, never a way to say "unsupported"."""
    return [(b, op, dt, v) for b, ops in m.items() for op, row in ops.items()
            for dt, v in row.items() if v != "ok" and not v.startswith("CompilationError")]


def backend_gaps(m: dict[str, dict[str, dict[str, str]]]) -> dict[tuple[str, str], set[str]]:
    """(op, dtype) -> the backends where it does not compile, for the cells that compile on
    some backends and not on others (a cell failing everywhere is a language rule)."""
    gaps: dict[tuple[str, str], set[str]] = {}
    backends = list(m)
    for op, row in (m[backends[0]].items() if backends else ()):
        for dt in row:
            bad = {b for b in backends if m[b].get(op, {}).get(dt, "ok") != "ok"}
            if bad and len(bad) < len(backends):
                gaps[(op, dt)] = bad
    return gaps


def _label(backend: str) -> str:
    """The backend's short column label (`Backend.label`)."""
    try:
        return get_backend(backend).label
    except Exception:  # an unloadable backend: its name
        return backend


def format_matrix(m: dict[str, dict[str, dict[str, str]]]) -> str:
    """One row per op, one column per dtype: `+` compiles on every backend, `-` on none (a
    language rule, e.g. atomics of int8), `-ocl` (say) compiles on every backend but those, `!`
    a compiler crash (not a CompilationError); blank: not a dtype the op takes."""
    backends = list(m)
    if not backends:
        return "capabilities: no backends"
    ops = m[backends[0]]
    cols = [c for c in COLUMNS if any(c in row for row in ops.values())]
    names = ", ".join(f"{_label(b)} = {b}" for b in backends)
    title = ("capabilities (every op compiled per dtype on every backend: + everywhere, - "
             f"nowhere, -B not on B, ! a compiler crash; {names}):")
    lines = [title, f"  {'op':<26}" + "".join(f"{_SHORT.get(c, c):>8}" for c in cols)]
    crash = {(op, dt) for _b, op, dt, _v in crashes(m)}
    for op, row in ops.items():
        cells = []
        for c in cols:
            if c not in row:
                cells.append("")
                continue
            bad = [b for b in backends if m[b].get(op, {}).get(c, "ok") != "ok"]
            cell = "+" if not bad else "-" if len(bad) == len(backends) else \
                "-" + ",".join(_label(b) for b in bad)
            cells.append(("!" if (op, c) in crash else "") + cell)
        lines.append(f"  {op:<26}" + "".join(f"{cell:>8}" for cell in cells))
    return "\n".join(lines)


__all__ = ["COLUMNS", "backend_gaps", "cap_dtypes", "cap_ops", "capability_matrix",
           "compile_cell", "crashes", "format_matrix"]
