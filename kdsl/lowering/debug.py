"""Lowering of the debugging ops: `barrier` (kd.debug_barrier), `print` (kd.device_print) and
`breakpoint` (which only the interp backend honours).

A `print` prints each operand in turn, one line per element (kdsl/ir/debug_print.py): a tile is
printed by a group loop of its own, each element by the thread that owns it, so with one thread
the lines come in the interpreter's order; a scalar (or a print without values) is printed once
per program, by thread 0.  A hex print converts each value to the unsigned integer of its bits
(16-bit floats through their 16-bit pattern).  `assert` ops never reach the lowering: the tile
passes turn them into checks or delete them (kdsl/passes/checks.py).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from kdsl.errors import DebugWarning
from kdsl.ir import tile
from kdsl.ir.debug_print import bare_format, line_format
from kdsl.ir.loop import Bitcast, Cast, Expr, Print, Special
from kdsl.ir.types import DType, bfloat16, float16, uint8, uint16, uint32, uint64
from kdsl.target import Target

from . import index as ix
from .elementwise import half_bits

if TYPE_CHECKING:
    from .context import LoweringContext

_UNSIGNED = {8: uint8, 16: uint16, 32: uint32, 64: uint64}


def hex_value(x: Expr, elem: DType) -> Expr:
    """The bit pattern of a register value of `elem`, as an unsigned integer."""
    if elem in (float16, bfloat16):
        return half_bits(x, elem)
    if elem.is_float:
        return Bitcast(x, _UNSIGNED[elem.bits])
    if elem.is_bool:
        return Cast(x, uint8)
    return x if not elem.is_signed else Cast(x, _UNSIGNED[elem.bits])


def _pids() -> list[Expr]:
    return [Special("pid", a) for a in range(3)]


def lower_print(L: LoweringContext, op: tile.Op) -> None:
    L.close()
    prefix, hex = op.attrs.get("prefix", ""), bool(op.attrs.get("hex", False))
    n = len(op.operands)
    if not n:
        L.emit(L.once(Print(bare_format(prefix), _pids())))
    for k, v in enumerate(op.operands):
        elem, shape = v.type.elem, v.type.shape
        fmt = line_format(prefix, k, n, shape, elem, hex)
        if not shape:
            x = L.scalar(v)
            L.emit(L.once(Print(fmt, _pids() + [hex_value(x, elem) if hex else x])))
            continue
        g = L.open_group(v.type.numel)
        x = L.read(v)
        g.body.append(Print(fmt, _pids() + ix.unflatten(g.e, shape)
                            + [hex_value(x, elem) if hex else x]))
        g.effects = True
        L.close()


def lower_barrier(L: LoweringContext, op: tile.Op) -> None:
    L.close()
    L.barrier()


# Debug op kind -> its lowering (used by the driver's table of non-fusable ops).
DEBUG_LOWERINGS = {"print": lower_print, "barrier": lower_barrier}


def drop_breakpoints(fn: tile.Function, target: Target) -> None:
    """Remove `breakpoint` ops (in place), warning once per kernel: compiled code cannot stop
    in pdb.  Values only they used are then dead: DCE removes them."""
    found: list[tile.Op] = []

    def sweep(block: tile.Block) -> None:
        kept = []
        for op in block.ops:
            if op.kind == "breakpoint":
                found.append(op)
                continue
            for r in op.regions:
                sweep(r)
            kept.append(op)
        block.ops = kept

    sweep(fn.body)
    if found:
        from kdsl.passes.cse import dce

        dce(fn)
        lines = ", ".join(str(op.loc) for op in found)
        warnings.warn(f"kernel {fn.name!r}: breakpoint() at {lines} stops only on the interp "
                      f"backend; the {target.backend} kernel is compiled without it",
                      DebugWarning, stacklevel=2)


__all__ = ["DEBUG_LOWERINGS", "drop_breakpoints", "hex_value", "lower_barrier", "lower_print"]
