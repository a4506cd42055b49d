"""Loop IR `Print` in the LLVM backend: a call of `kdsl_print`, a Python callback that formats
the line with the statement's format (kdsl/ir/debug_print.py, the interpreter's own) and writes
it to `sys.stdout`, so the lines of every backend are the same text.

The generated code passes the format and one type code per argument ("i" signed, "u" unsigned,
"f" float) as constant strings and the arguments as an array of 64-bit words (integers extended,
floats as float64 bits).  The callback is a process-wide symbol registered with the JIT before
any kernel is compiled; it may be called from several of the backend's threads at once (each
line is one write).
"""

from __future__ import annotations

import ctypes
import struct
import sys
from typing import TYPE_CHECKING, Any

from llvmlite import ir

from kdsl.ir import loop as L

if TYPE_CHECKING:
    from .llvm import _FnEmitter

SYMBOL = "kdsl_print"
_I8, _I32, _I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_PTR = ir.PointerType()

_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p,
                             ctypes.POINTER(ctypes.c_int64), ctypes.c_int32)


def format_line(fmt: str, codes: str, words: list[int]) -> str:
    """The printed line from the format, the type codes and the 64-bit argument words."""
    values: list[Any] = []
    for code, w in zip(codes, words):
        if code == "f":
            values.append(struct.unpack("<d", struct.pack("<q", w))[0])
        elif code == "u":
            values.append(w & 0xFFFFFFFFFFFFFFFF)
        else:
            values.append(w)
    return fmt.format(*values)


def _print(fmt: bytes, codes: bytes, words: Any, n: int) -> None:
    try:
        line = format_line(fmt.decode(), codes.decode(), [words[i] for i in range(n)])
        sys.stdout.write(line + "\n")
    except Exception as exc:  # noqa: BLE001 - never unwind through the JIT-compiled caller
        sys.stderr.write(f"kdsl: device_print failed: {exc!r}\n")


_KEEP = _CALLBACK(_print)  # alive for the whole process: the JIT holds its address


def register(llvm: Any) -> None:
    """Make `kdsl_print` resolvable by the JIT (once per process)."""
    llvm.add_symbol(SYMBOL, ctypes.cast(_KEEP, ctypes.c_void_p).value)


def _cstring(module: ir.Module, text: str, hint: str) -> ir.GlobalVariable:
    data = bytearray(text.encode() + b"\0")
    ty = ir.ArrayType(_I8, len(data))
    g = ir.GlobalVariable(module, ty, name=module.get_unique_name(hint))
    g.initializer = ir.Constant(ty, data)
    g.global_constant = True
    g.linkage = "private"
    g.unnamed_addr = True
    return g


def _callee(module: ir.Module) -> ir.Function:
    fn = module.globals.get(SYMBOL)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_PTR, _PTR, _PTR, _I32]),
                         SYMBOL)
    return fn


def emit_print(em: _FnEmitter, s: L.Print) -> None:
    b = em.b
    n = len(s.args)
    words = em._alloca(ir.ArrayType(_I64, max(n, 1)), "print.args")
    codes = []
    for i, x in enumerate(s.args):
        v, t = em.expr(x), x.dtype
        if t.is_float:
            d = v if t.bits == 64 else b.fpext(v, ir.DoubleType())
            w, code = b.bitcast(d, _I64), "f"
        elif t.bits == 64:
            w, code = v, "i" if t.is_signed else "u"
        elif t.is_signed:
            w, code = b.sext(v, _I64), "i"
        else:
            w, code = b.zext(v, _I64), "u"
        codes.append(code)
        b.store(w, b.gep(words, [ir.Constant(_I64, 0), ir.Constant(_I64, i)], inbounds=True))
    args = [_cstring(em.m, s.fmt, "kd.fmt"), _cstring(em.m, "".join(codes), "kd.codes"),
            b.gep(words, [ir.Constant(_I64, 0), ir.Constant(_I64, 0)], inbounds=True),
            ir.Constant(_I32, n)]
    b.call(_callee(em.m), args)


__all__ = ["SYMBOL", "emit_print", "format_line", "register"]
