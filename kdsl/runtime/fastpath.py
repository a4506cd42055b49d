"""The launch fast path: one generated Python function per kernel (`build`).

`kernel[grid]` is `functools.partial(fast, grid)` (kdsl/runtime/jit.py), so a launch enters
the kernel's fast function with no Python frame in between.  The function takes
`(grid, *args, **kwargs)`, binds them in straight-line code made for the kernel's signature
(one branch per count of positional arguments; defaults; anything it cannot bind goes to the
full path, whose binder words the error), and classifies every argument by exactly what the
full launch path (`JITFunction._specialise`) specialises on:

    NumPy array (C-contiguous, writable, non-empty)  dtype, 16-byte alignment; slot: address
    Python int in int32                               `== 1` (unless do_not_specialize: the
                                                      kernel has the constant 1) or
                                                      `% 16 == 0`; slot: the value
    Python float in float32 range, bool               the type; slot: the value
    None                                              a compile-time None
    float64-annotated parameter (int or float)        slot: float(value)
    constexpr                                         its type and value

together with the other keywords given (launch options, in call order) and the raw values of
KDSL_BACKEND, KDSL_CHECK, KDSL_POISON and KDSL_DEBUG.  That tuple is looked up in
`JITFunction._fast`, filled by the full path after each launch it may repeat (not checked,
not poisoned, on a backend with a `DirectLauncher`: the llvm backend's pack-and-call).  A hit
launches there (a small 1-D grid as `call(pack(g0, 1, 1, *slots))`, two calls) and returns
the `CompiledKernel`.  Anything else takes the full path with the call's own arguments:
another argument type, a read-only or strided array, an int outside int32, NaN, a
`kd.constexpr(...)` wrapper, a poisoned launch, an observed one (`record_launches`), or a key
not in the table yet (then the full path records it).

Every runtime parameter has a slot at its position whatever its value; a kernel compiled
without some of them (None, `== 1`) gets launchers that pick the others (`entry`).  The
generated text is kept in `JITFunction._fast_source` for reading.
"""

from __future__ import annotations

import ctypes
import keyword
import operator
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kdsl.ir import types as T

from .binding import _MISSING, normalize_grid

_PREFIX = "_kd_"
_ENV = ("KDSL_BACKEND", "KDSL_CHECK", "KDSL_POISON", "KDSL_DEBUG")
_F32_MAX = float(np.finfo(np.float32).max)
_I2F = 1 << 1000  # ints that float() converts without overflow
#: the generated code's way out to the full launch path (with the call's own arguments)
_SLOW = "return _kd_slow(_kd_grid, _kd_args, _kd_kw)"


class _Kind:
    """A key part naming a scalar argument's class (never equal to a NumPy dtype, which
    compares equal to `int`, `float`, `bool` and to type codes such as "i")."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


INT, ONE, FLOAT, BOOL, NONE = (_Kind(n) for n in ("int32", "==1", "float32", "int1", "None"))


def _env_reader() -> tuple[Callable[[Any], Any], tuple[Any, ...]]:
    """(get, keys) reading the launch's environment variables: CPython's encoded mapping
    behind os.environ when it is there (a dict lookup), else os.environ itself."""
    data = getattr(os.environ, "_data", None)
    encode = getattr(os.environ, "encodekey", None)
    if isinstance(data, dict) and encode is not None:
        return data.get, tuple(encode(k) for k in _ENV)
    return os.environ.get, _ENV  # pragma: no cover - other Python implementations


def _runtime_code(name: str, j: int, one: bool) -> list[str]:
    """Classification of an unannotated runtime parameter: key parts a{j}, b{j}, slot s{j}."""
    a, b, s = f"_kd_a{j}", f"_kd_b{j}", f"_kd_s{j}"
    lines = [
        f"_kd_t = type({name})",
        "if _kd_t is _kd_nd:",
        "    try:",  # raises for read-only, non-C-contiguous and empty arrays
        f"        {s} = _kd_addr(_kd_fb({name}))",
        "    except _kd_buffer_errors:",
        "        " + _SLOW,
        f"    {a} = {name}.dtype",
        f"    {b} = not {s} & 15",
        "elif _kd_t is int:",
    ]
    if one:
        lines += [f"    if {name} == 1:",
                  f"        {a} = _kd_ONE",
                  f"        {b} = None",
                  f"        {s} = 0",
                  f"    elif -2147483648 <= {name} <= 2147483647:"]
    else:
        lines += [f"    if -2147483648 <= {name} <= 2147483647:"]
    lines += [
        f"        {a} = _kd_INT",
        f"        {b} = not {name} & 15",
        f"        {s} = {name}",
        "    else:",
        "        " + _SLOW,
        "elif _kd_t is float:",
        f"    if not -_kd_F32 <= {name} <= _kd_F32:",  # overflow, inf and NaN: full binder
        "        " + _SLOW,
        f"    {a} = _kd_FLOAT",
        f"    {b} = None",
        f"    {s} = {name}",
        f"elif {name} is None:",  # a compile-time None (Triton's constexpr specialisation)
        f"    {a} = _kd_NONE",
        f"    {b} = None",
        f"    {s} = 0",
        "elif _kd_t is bool:",
        f"    {a} = _kd_BOOL",
        f"    {b} = None",
        f"    {s} = {name}",
        "else:",
        "    " + _SLOW,
    ]
    return lines


def _float64_code(name: str, j: int) -> list[str]:
    s = f"_kd_s{j}"
    return [
        f"_kd_t = type({name})",
        f"if _kd_t is float or (_kd_t is int and -_kd_I2F < {name} < _kd_I2F):",
        f"    {s} = float({name})",
        "else:",
        "    " + _SLOW,
    ]


def _bind_code(sig: Any, k: int, ns: dict[str, Any]) -> list[str]:
    """Binding of a call with `k` positional arguments: the first `k` parameters from
    `_kd_args`, the others from `_kd_kw` (or their defaults); `_kd_f` counts the keywords
    taken, so that any other keyword (a launch option, or a parameter given twice) shows."""
    names = [p.name for p in sig.params]
    lines = []
    if k == 1:
        lines.append(f"{names[0]}, = _kd_args")
    elif k:
        lines.append(f"{', '.join(names[:k])} = _kd_args")
    rest = sig.params[k:]
    required = [p for p in rest if p.default is _MISSING]
    lines.append(f"_kd_f = {len(required)}")  # each one present, or the full path says so
    for i, p in enumerate(rest, start=k):
        lines += [f"{p.name} = _kd_kw.get({p.name!r}, _kd_M)",
                  f"if {p.name} is _kd_M:"]
        if p.default is _MISSING:
            lines.append("    " + _SLOW)  # missing: the full binder says so
        else:
            ns[f"_kd_d{i}"] = p.default
            lines += [f"    {p.name} = _kd_d{i}", "else:", "    _kd_f += 1"]
    return lines


def source(jit: Any) -> tuple[str, dict[str, Any]] | None:
    """(text, namespace) of the fast function of `jit` (a JITFunction), or None when its
    signature has no fast path (a parameter annotated with a type other than float64, a
    parameter named like a launch keyword or with the generated code's prefix)."""
    sig = jit.signature
    if jit._shared or any(n.startswith(_PREFIX) for n in sig.names):
        return None
    ns: dict[str, Any] = {}
    body: list[str] = []
    key: list[str] = []
    slots: list[str] = []
    one_flags = {r[0]: r[4] for r in jit._rt}  # (index, ..., `== 1` specialised)
    j = 0
    for i, p in enumerate(sig.params):
        if p.constexpr:
            body += [f"if type({p.name}) is _kd_cx:", "    " + _SLOW]
            key += [f"type({p.name})", p.name]
            continue
        if p.annotation is None:
            body += _runtime_code(p.name, j, one_flags[i])
            key += [f"_kd_a{j}", f"_kd_b{j}"]
        elif p.annotation is T.float64:
            body += _float64_code(p.name, j)
        else:
            return None
        slots.append(f"_kd_s{j}")
        j += 1
    # the binding: the common count of positional arguments first (every runtime parameter
    # by position, constexprs by keyword), then every parameter by position, then the rest
    n_pos = sig.n_positional
    first = next((i for i, p in enumerate(sig.params) if p.constexpr), len(sig.params))
    counts = list(dict.fromkeys([min(first, n_pos), n_pos, *range(n_pos + 1)]))
    bind: list[str] = ["_kd_n = len(_kd_args)"]
    for c, k in enumerate(counts):
        bind.append(f"{'if' if c == 0 else 'elif'} _kd_n == {k}:")
        bind += ["    " + ln for ln in _bind_code(sig, k, ns)]
    bind += ["else:", "    " + _SLOW]  # too many
    env = [f"_kd_env(_kd_e{k})" for k in range(len(_ENV))]
    slot_list = "".join(f"{s}, " for s in slots)
    meta = "{" + ", ".join(f"{n!r}: {n}" for n in sig.names) + "}"
    lines = [f"def {_def_name(jit)}(_kd_grid, *_kd_args, **_kd_kw):",
             "    if _kd_observers:",  # launches recorded by the tools: the full path
             "        " + _SLOW]
    lines += ["    " + ln for ln in bind + body]
    lines += [
        "    if len(_kd_kw) != _kd_f:",  # launch options (or a parameter given twice)
        "        if _kd_kw.get('poison'):",
        "            " + _SLOW,
        "        _kd_o = tuple(_kd_kw.items())",
        "    else:",
        "        _kd_o = ()",
        f"    _kd_key = ({', '.join(env + ['_kd_o'] + key)},)",
        "    try:",
        "        _kd_hit = _kd_table.get(_kd_key)",
        "    except TypeError:",  # an unhashable constexpr or option: the full path explains
        "        " + _SLOW,
        "    if _kd_hit is None:",
        f"        return _kd_slow(_kd_grid, _kd_args, _kd_kw, (_kd_key, ({slot_list})))",
        "    if _kd_self._globals:",
        "        _kd_self._check_globals()",
        "    _kd_g = _kd_grid",
        # a 1-D grid small enough to run inline: pack and call, nothing in between
        "    if type(_kd_g) is tuple and len(_kd_g) == 1:",
        "        _kd_g0 = _kd_g[0]",
        "        if type(_kd_g0) is int and 0 < _kd_g0 < _kd_hit[4]:",
        f"            _kd_hit[2](_kd_hit[3](_kd_g0, 1, 1, {slot_list}))",
        "            return _kd_hit[0]",
        "    try:",
        "        if callable(_kd_g):",
        f"            _kd_g = _kd_g({meta})",
        "        _kd_g = _kd_grid3(_kd_g)",
        "    except Exception:",  # the full path raises the grid's precise error
        "        " + _SLOW,
        f"    _kd_hit[1](_kd_g, ({slot_list}))",
        "    return _kd_hit[0]",
    ]
    get, keys = _env_reader()
    ns.update({f"_kd_e{k}": key_ for k, key_ in enumerate(keys)})
    from kdsl.language.core import constexpr

    from .launches import OBSERVERS

    ns.update(_kd_env=get, _kd_nd=np.ndarray, _kd_addr=ctypes.addressof,
              _kd_fb=ctypes.c_char.from_buffer,
              _kd_buffer_errors=(TypeError, ValueError, BufferError), _kd_M=_MISSING,
              _kd_F32=_F32_MAX, _kd_I2F=_I2F, _kd_INT=INT, _kd_ONE=ONE, _kd_FLOAT=FLOAT,
              _kd_BOOL=BOOL, _kd_NONE=NONE, _kd_cx=constexpr, _kd_table=jit._fast,
              _kd_self=jit, _kd_slow=jit._slow, _kd_grid3=normalize_grid,
              _kd_observers=OBSERVERS)
    return "\n".join(lines) + "\n", ns


def _def_name(jit: Any) -> str:
    """The generated function's name: the kernel's (tracebacks read well), when it can be."""
    name = jit.__name__
    ok = name.isidentifier() and not keyword.iskeyword(name) and not name.startswith(_PREFIX)
    return name if ok else "fast_launch"


def build(jit: Any) -> tuple[Callable[..., Any] | None, str | None]:
    """(fast function, its text) for `jit`, or (None, None)."""
    made = source(jit)
    if made is None:
        return None, None
    text, ns = made
    exec(compile(text, f"<kdsl fast launch of {jit.__name__}>", "exec"), ns)  # noqa: S102
    return ns[_def_name(jit)], text


def entry(ck: Any, direct: Any, keep: Sequence[int], n_runtime: int) -> tuple:
    """The fast table's value for a compiled kernel: (ck, launch(grid, slots), call, pack,
    inline limit) from the backend's `DirectLauncher`; `keep` are the runtime-parameter
    positions the kernel takes (fewer than `n_runtime` when some are None or the constant 1:
    its launcher then picks the others, and the inline form is not used)."""
    limit = min(direct.inline_limit, 1 << 31) if direct.call is not None else 0
    if len(keep) == n_runtime:
        return ck, direct.launch, direct.call, direct.pack, limit
    pack = _picking_pack(direct.pack, tuple(keep), n_runtime) if limit else None
    return ck, picking(direct.launch, keep), direct.call, pack, limit


_PICKERS: dict[tuple[tuple[int, ...], int], Callable[..., Any]] = {}


def _picking_pack(pack: Callable[..., Any], keep: tuple[int, ...], n: int) -> Callable[..., Any]:
    """`pack(g0, g1, g2, *slots)` taking all `n` slots and packing those at `keep`: a lambda
    generated once per (keep, n), so that the inline form keeps to two calls and a frame."""
    make = _PICKERS.get((keep, n))
    if make is None:
        names = [f"s{i}" for i in range(n)]
        text = (f"lambda pack: lambda g0, g1, g2, {', '.join(names)}: "
                f"pack(g0, g1, g2, {''.join(names[k] + ', ' for k in keep)})")
        make = _PICKERS[(keep, n)] = eval(text)  # (text made above from ints)
    return make(pack)


def picking(launch: Callable[[tuple, Sequence], None], keep: Sequence[int]
            ) -> Callable[[tuple, Sequence], None]:
    """`launch` given only the slots at positions `keep` (a kernel compiled without some of
    its runtime parameters: None or the constant 1)."""
    keep = tuple(keep)
    if len(keep) == 1:
        k = keep[0]
        return lambda grid, slots: launch(grid, (slots[k],))
    if not keep:
        return lambda grid, slots: launch(grid, ())
    pick = operator.itemgetter(*keep)
    return lambda grid, slots: launch(grid, pick(slots))


__all__ = ["BOOL", "FLOAT", "INT", "NONE", "ONE", "build", "entry", "picking", "source"]
