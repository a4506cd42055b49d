"""What `kd.device_print` (and `print` in a kernel) prints, and `breakpoint()` on the interp
backend.

Every backend prints the same text: one line per element of each printed value, in Triton's
format

    pid (<pid0>, <pid1>, <pid2>) idx (<i0>, <i1>, ...)<prefix>[(operand <k>) ]<value>

`idx ()` for a scalar (a print without values is `pid (...)<prefix>`, once per program); each index is padded to the width of its dimension's largest index;
`(operand k)` only when several values are printed.  Values print as C's `%d`/`%u` (integers,
int1 as 0/1), `%f` (floats, 16-bit ones included) or, with `hex=True`, `0x` and the bit pattern
zero-padded to the type's width (`0x0000002a` for an int32, `0x3c00` for a float16 1.0).

`line_format` gives the line as a Python format string with the fields (pid0, pid1, pid2,
*index, value); it is the Loop IR `Print` statement's format (kdsl/ir/loop.py), which the C
backends translate to printf and the LLVM backend hands to a Python callback, so all of them
format through this one definition.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from itertools import product
from typing import Any

import numpy as np

from .atomics import bits
from .types import DType


def munge_prefix(prefix: str, nargs: int) -> str:
    """Triton's spacing of a print prefix: with values to print it ends in ": ", and a prefix
    longer than that starts with a space (`"x"` -> `" x: "`)."""
    if nargs:
        if not prefix.endswith(" "):
            prefix += " "
        if not prefix.endswith(": "):
            prefix = prefix[:-1] + ": "
    if len(prefix) > 2 and not prefix.startswith(" "):
        prefix = " " + prefix
    return prefix


def hex_digits(elem: DType) -> int:
    return max(1, -(-elem.bits // 4))


def value_spec(elem: DType, hex: bool) -> str:
    """Format of one value: `0x{:08x}` (hex), `{:f}` (floats) or `{:d}` (integers)."""
    if hex:
        return f"0x{{:0{hex_digits(elem)}x}}"
    return "{:f}" if elem.is_float else "{:d}"


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def index_width(dim: int) -> int:
    return len(str(max(dim - 1, 0)))


def line_format(prefix: str, operand: int, noperands: int, shape: Sequence[int], elem: DType,
                hex: bool) -> str:
    """The printed line of one element as a Python format string of the fields (pid0, pid1,
    pid2, *index, value); `prefix` is already munged (`munge_prefix`)."""
    idx = ", ".join(f"{{:{index_width(d)}d}}" for d in shape)
    which = f"(operand {operand}) " if noperands > 1 else ""
    return ("pid ({:d}, {:d}, {:d}) idx (" + idx + ")" + _escape(prefix + which)
            + value_spec(elem, hex))


def python_value(v: Any, elem: DType, hex: bool) -> int | float:
    """The number a printed register value of `elem` formats as."""
    if hex:
        return int(bits(np.asarray(v, dtype=np.asarray(v).dtype), elem))
    return float(v) if elem.is_float else int(v)


def print_op_lines(op: Any, values: list, pid: tuple[int, int, int]) -> Iterator[str]:
    """The lines a Tile IR `print` op prints for one program (operands in order, elements in
    row-major order)."""
    prefix, hex = op.attrs.get("prefix", ""), bool(op.attrs.get("hex", False))
    n = len(values)
    for k, (v, operand) in enumerate(zip(values, op.operands)):
        elem, shape = operand.type.elem, operand.type.shape
        fmt = line_format(prefix, k, n, shape, elem, hex)
        arr = np.asarray(v)
        for idx in product(*(range(d) for d in shape)):
            yield fmt.format(*pid, *idx, python_value(arr[idx], elem, hex))
    if not values:
        yield bare_format(prefix).format(*pid)


def bare_format(prefix: str) -> str:
    """The line of a print without values (fields pid0, pid1, pid2), as Triton prints it."""
    return "pid ({:d}, {:d}, {:d})" + _escape(prefix)


def stop_at_breakpoint(op: Any, values: list, pid: tuple[int, int, int], params: list,
                       buffers: list) -> None:
    """`breakpoint()` in a kernel (interp backend): Python's breakpoint hook (pdb unless
    PYTHONBREAKPOINT says otherwise) in a frame whose local names are the kernel's variables
    at that line (NumPy values; a pointer is an `interp.Ptr` into `arrays[name]`), and, unless
    the kernel uses these names, `program_id` (a tuple) and `arrays` (the argument arrays by
    parameter name)."""
    names = op.attrs.get("names", ())
    env: dict[str, Any] = dict(op.attrs.get("consts", ()))
    env.update(zip(names, values))
    env.setdefault("program_id", pid)
    env.setdefault("arrays", {p.name: b for p, b in zip(params, buffers) if b is not None})
    where = f"{op.loc.file}:{op.loc.line}"
    code = compile("breakpoint()  # the kernel's values are local names here\n",
                   f"<kdsl breakpoint at {where}>", "exec")
    exec(code, {"__builtins__": builtins}, env)  # noqa: S102 - a fixed one-line program


__all__ = ["bare_format", "line_format", "munge_prefix", "print_op_lines", "python_value", "stop_at_breakpoint",
           "value_spec"]
