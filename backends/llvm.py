"""LLVM backend (CPU): Loop IR -> LLVM IR (llvmlite IRBuilder) -> O3 -> MCJIT -> ctypes.

A program instance is one CPU thread; the lowering turned tile dimensions into loops, which
LLVM's loop vectoriser turns into SIMD code for the host CPU.  Layout of the generated module:

  internal @<name>.body(params..., i32 pid0, pid1, pid2, nprog0, nprog1, nprog2)  alwaysinline
  @<name>_grid(ptr args, i64 start, i64 end, i32 g0, i32 g1, i32 g2)
      loads each parameter from its 8-byte slot of `args`, then runs the body for the linear
      program ids [start, end) (pid0 fastest).
  @<name>_launch(ptr block)
      the whole grid: `<name>_grid(block + 16, 0, g0*g1*g2, g0, g1, g2)` with the grid in a
      16-byte header (i32 g0, g1, g2, padding) and the slots after it: one pointer argument,
      which ctypes passes in a fifth of the time of six (small grids, `llvm_runtime.py`).

`backends/llvm_runtime.py` packs the argument slots and spreads chunks of program ids over a
thread pool.  Every Loop IR variable is an alloca in the entry block (SROA/mem2reg promote
them); register and shared arrays are allocas of `[size x T]` (int1 arrays hold i8).
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from functools import lru_cache
from typing import Any

from llvmlite import ir

from kdsl.ir import loop as L
from kdsl.ir.types import DType, PointerType, int1
from kdsl.runtime.stages import Lazy
from kdsl.target import Target

from . import llvm_atomics, llvm_debug, llvm_host, llvm_pool, llvm_shuffle, llvm_tile_dot
from .base import Backend, BoundArg, DirectLauncher
from .llvm_math import F32, F64, MathLib, fp_to_int_sat, intrinsic
from .llvm_runtime import GRID_FN, INLINE_GRID, LAUNCH_FN, ArgPacker, GridRunner, workers
from .llvm_types import F16, I1, I8, I16, I32, I64, PTR, mem_type, reg_type

_ICMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
# IEEE comparisons: ordered (false on NaN) except `ne` (true on NaN), as in C.
_FCMP = {"eq": ("o", "=="), "ne": ("u", "!="), "lt": ("o", "<"), "le": ("o", "<="),
         "gt": ("o", ">"), "ge": ("o", ">=")}
_FBIN = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv", "mod": "frem"}
_IBIN = {"add": "add", "sub": "sub", "mul": "mul", "and": "and_", "or": "or_", "xor": "xor",
         "shl": "shl", "land": "and_", "lor": "or_"}
_F_INTRINSIC_UNARY = {"sqrt": "sqrt", "abs": "fabs", "floor": "floor", "ceil": "ceil",
                      "trunc": "trunc", "rint": "rint", "round": "round"}
# Math ops of kdsl/ir/mathops.py computed by libm: op -> (float32 function, float64 function).
# float32 uses the `f` variant, except where glibc's float version is less accurate than the
# double one rounded once (erfc, lgamma, tgamma, the Bessel functions): None = through float64.
_LIBM_UNARY = {
    **{op: (f"{op}f", op) for op in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
                                     "acosh", "atanh", "log1p", "expm1", "cbrt", "exp10",
                                     "log10")},
    **{op: (None, op) for op in ("erfc", "lgamma", "tgamma", "j0", "j1", "y0", "y1")},
}
_LIBM_BINARY = {op: (f"{op}f", op) for op in ("atan2", "hypot", "nextafter", "remainder")}
LIBM_NAMES = sorted({n for table in (_LIBM_UNARY, _LIBM_BINARY) for pair in table.values()
                     for n in pair if n} | {"ldexp", "ldexpf", "jn", "yn"})


# Loop hints: a Loop IR `For` whose body starts with `Comment(hint)` gets these loop
# properties.  L.SIMD_HINT ("simd", kdsl/ir/loop.py) marks the loop the lowering meant as the
# vector dimension (the CPU dot's NR loop), L.VECTOR_HINT an element loop to vectorise as a
# loop: it is never fully unrolled into scalars first (which would leave the vectoriser only
# the outer loop, or the SLP vectoriser, with gathers), so the cost model vectorises it; once
# vectorised it is unrolled.
# Vectorisation is not forced (`vectorize.enable`): a forced loop that cannot be vectorised
# makes LLVM print a remark on stderr.
_LOOP_HINTS: dict[str, list[tuple]] = {
    L.SIMD_HINT: [("llvm.loop.unroll.disable",),
                  ("llvm.loop.vectorize.followup_vectorized", ("llvm.loop.unroll.full",))],
}
_LOOP_HINTS[L.VECTOR_HINT] = _LOOP_HINTS[L.SIMD_HINT]  # (an element loop: the same handling)
_LOOP_HINTS[L.ROLLED_HINT] = [("llvm.loop.unroll.count", ir.Constant(ir.IntType(32), 4))]


# Register arrays of a cache line or more start on a cache line: their vector loads and stores
# (a tile copied in or out, a dot's operands read by the micro-kernels) then never split
# across two lines, which costs a second L1 access each; an element-aligned alloca is almost
# never line-aligned.  Measured on one Emerald Rapids core (1024^3 float32, separate
# processes, noisy host): semi_structured_matmul 1.3-1.6x and matmul up to 1.3x faster.
ARRAY_ALIGN = 64


def _elem_bytes(t: Any) -> int:
    """Bytes of a register array's element of Loop IR type `t` (a pointer: 8; int1: 1)."""
    return max(1, getattr(t, "bits", 64) // 8)


class _FnEmitter:
    """Emits one kernel body function from Loop IR statements."""

    def __init__(self, kernel: L.Kernel, module: ir.Module, math: MathLib):
        self.k = kernel
        self.m = module
        self.math = math
        self.fmf = ("fast",) if kernel.options.fast_math else ()
        ptys = [reg_type(p.dtype) for p in kernel.params] + [I32] * 6
        self.fn = ir.Function(module, ir.FunctionType(ir.VoidType(), ptys), f"{kernel.name}.body")
        self.fn.linkage = "internal"
        self.fn.attributes.add("alwaysinline")
        self.fn.attributes.add("nounwind")
        for a, p in zip(self.fn.args, kernel.params):
            a.name = p.name  # (user arrays may alias, in/out the same array: never noalias)
        self.entry = self.fn.append_basic_block("entry")
        self.b = ir.IRBuilder(self.entry)
        self.params = {p.name: a for p, a in zip(kernel.params, self.fn.args)}
        n = len(kernel.params)
        self.pids = self.fn.args[n:n + 3]
        self.nprogs = self.fn.args[n + 3:n + 6]
        self.vars: dict[str, ir.Value] = {}
        self.arrays: dict[str, ir.Value] = {}
        for v in kernel.variables:
            self._var_slot(v)
        for a in kernel.arrays:
            self._array_slot(a)
        self._loop_md = None
        self._scopes: dict[bool, Any] = {}  # private? -> the list of that one scope

    # -------------------------------------------------------------------------- storage

    def tag(self, inst: ir.Instruction, private: bool) -> ir.Instruction:
        """Marks a load or store as touching a register/shared array (`private`: an alloca of
        this function) or user memory.  A user pointer never points into an alloca (their
        addresses never leave the function), but LLVM cannot always prove it: the loop
        vectoriser then guards a loop that reads user memory and updates an array (a reduction's
        per-lane partials) with a runtime overlap check and keeps a scalar copy of the loop, whose
        variable-offset array accesses stop SROA from keeping the partials in registers (measured
        on a Zen 5 core: a row sum of squares read 4096 floats per row at 20 GB/s instead of 29,
        the partials stored to and reloaded from the stack on every iteration).  Two scopes of
        one alias domain say so (`!alias.scope` / `!noalias`, LLVM's scoped-noalias AA)."""
        if not self._scopes:
            md = self.m.add_metadata
            domain = md([ir.MetaDataString(self.m, "kdsl.memory")])
            for kind in (True, False):
                name = "kdsl.private" if kind else "kdsl.user"
                self._scopes[kind] = md([md([ir.MetaDataString(self.m, name), domain])])
        inst.set_metadata("alias.scope", self._scopes[private])
        inst.set_metadata("noalias", self._scopes[not private])
        return inst

    def _alloca(self, ty: ir.Type, name: str) -> ir.Value:
        with self.b.goto_entry_block():
            return self.b.alloca(ty, name=name)

    def _var_slot(self, v: L.Var) -> ir.Value:
        if v.name not in self.vars:
            self.vars[v.name] = self._alloca(reg_type(v.dtype), v.name)
        return self.vars[v.name]

    def _array_slot(self, a: L.Array) -> ir.Value:
        if a.name not in self.arrays:
            elem = I8 if a.dtype == int1 else reg_type(a.dtype)
            slot = self._alloca(ir.ArrayType(elem, a.size), a.name)
            if a.size * _elem_bytes(a.dtype) >= ARRAY_ALIGN:
                slot.align = ARRAY_ALIGN
            self.arrays[a.name] = slot
        return self.arrays[a.name]

    def _elem_ptr(self, a: L.Array, index: L.Expr) -> tuple[ir.Value, ir.Type]:
        slot = self._array_slot(a)
        idx = self._to_i64(self.expr(index), index.dtype)
        return (self.b.gep(slot, [ir.Constant(I64, 0), idx], inbounds=True),
                slot.allocated_type.element)

    def _to_i64(self, v: ir.Value, t: DType) -> ir.Value:
        if v.type.width == 64:
            return v
        return self.b.zext(v, I64) if t.kind in ("u", "b") else self.b.sext(v, I64)

    # ------------------------------------------------------------------------ expressions

    def expr(self, e: L.Expr) -> ir.Value:
        return getattr(self, "_e_" + type(e).__name__)(e)

    def _e_Const(self, e: L.Const) -> ir.Value:
        ty = reg_type(e.dtype)
        if isinstance(ty, ir.IntType):
            return ir.Constant(ty, int(e.value) & ((1 << ty.width) - 1))
        if ty == PTR:
            return ir.Constant(PTR, None)
        return ir.Constant(ty, float(e.value))

    def _e_Var(self, e: L.Var) -> ir.Value:
        if e.name in self.params and e.name not in self.vars:
            return self.params[e.name]
        return self.b.load(self._var_slot(e), typ=reg_type(e.dtype))

    def _e_Special(self, e: L.Special) -> ir.Value:
        if e.kind == "tid":
            return ir.Constant(I32, 0)
        val = (self.pids if e.kind == "pid" else self.nprogs)[e.axis]
        return self._convert_int(val, I32, reg_type(e.dtype), signed=True)

    def _e_Index(self, e: L.Index) -> ir.Value:
        ptr, elem = self._elem_ptr(e.array, e.index)
        v = self.tag(self.b.load(ptr, typ=elem), private=True)
        return self.b.trunc(v, I1) if e.array.dtype == int1 else v

    def _e_PairBits(self, e: L.PairBits) -> ir.Value:
        """Two 16-bit elements as one 32-bit load (a uint16 register array: llvm targets have
        no 16-bit shared arrays)."""
        ptr, _ = self._elem_ptr(e.array, e.index)
        return self.tag(self.b.load(ptr, typ=I32, align=2), private=True)

    def _e_Unary(self, e: L.Unary) -> ir.Value:
        x = self.expr(e.x)
        t = e.x.dtype
        b = self.b
        if t.is_float:
            if e.op == "neg":
                return b.fneg(x, flags=self.fmf)
            if e.op == "isnan":
                return b.fcmp_unordered("uno", x, x)
            if e.op == "rsqrt":
                root = b.call(intrinsic(self.m, "sqrt", x.type), [x], fastmath=self.fmf)
                return b.fdiv(ir.Constant(x.type, 1.0), root, flags=self.fmf)
            if e.op in _F_INTRINSIC_UNARY:
                return b.call(intrinsic(self.m, _F_INTRINSIC_UNARY[e.op], x.type), [x],
                              fastmath=self.fmf)
            if e.op in _LIBM_UNARY:
                return self._libm(_LIBM_UNARY[e.op], [x])
            return self.math.call(b, e.op, x)
        if e.op == "neg":
            return b.neg(x)
        if e.op == "not":
            return b.not_(x)
        if e.op == "abs":
            if not t.is_signed:
                return x
            return b.select(b.icmp_signed("<", x, ir.Constant(x.type, 0)), b.neg(x), x)
        if e.op in ("floor", "ceil"):
            return x
        if e.op == "isnan":
            return ir.Constant(I1, 0)
        if e.op == "clz":
            return b.ctlz(x, ir.Constant(I1, 0))
        if e.op == "popc":
            return b.ctpop(x)
        raise NotImplementedError(f"llvm backend: unary {e.op} on {t}")

    def _libm(self, names: tuple[str | None, str], args: list[ir.Value]) -> ir.Value:
        """Call libm's float32 or float64 function (`names`) on `args` (floats and C ints,
        in C's order); float32 without an `f` variant goes through the float64 one."""
        ty = next(a.type for a in args if a.type in (F32, F64))
        name = names[0] if ty == F32 else names[1]
        b = self.b
        if name is None:
            wide = [b.fpext(a, F64) if a.type == F32 else a for a in args]
            return b.fptrunc(self._libm(names, wide), F32)
        fty = ir.FunctionType(ty, [a.type for a in args])
        fn = self.m.globals.get(name) or ir.Function(self.m, fty, name)
        return b.call(fn, args)

    def _e_Binary(self, e: L.Binary) -> ir.Value:
        t = e.a.dtype
        a, c = self.expr(e.a), self.expr(e.b)
        b = self.b
        if e.op == "ldexp":
            return self._libm(("ldexpf", "ldexp"), [a, c])
        if e.op in ("jn", "yn"):  # Loop IR operands (x, n); C's jn(n, x)
            return self._libm((None, e.op), [c, a])
        if isinstance(t, PointerType):
            a, c = b.ptrtoint(a, I64), b.ptrtoint(c, I64)
            return b.icmp_unsigned(_ICMP[e.op], a, c)
        if c.type != a.type:  # e.g. a shift amount of another width
            c = self._convert_int(c, c.type, a.type, signed=e.b.dtype.is_signed)
        if t.is_float:
            if e.op in _FCMP:
                kind, op = _FCMP[e.op]
                cmp = b.fcmp_ordered if kind == "o" else b.fcmp_unordered
                return cmp(op, a, c, flags=self.fmf)
            if e.op in _FBIN:
                return getattr(b, _FBIN[e.op])(a, c, flags=self.fmf)
            if e.op in ("maximum", "minimum"):
                # NaN-propagating, as two selects: `a > c ? a : c` (c where either is NaN:
                # one vmaxps on x86), then a where a is NaN.  `llvm.maximum` also orders -0
                # below +0, which Loop IR leaves open, and costs a sign test and two blends
                # more per op (attention's row max was 9% of the kernel).
                cmp_op = ">" if e.op == "maximum" else "<"
                m = b.select(b.fcmp_ordered(cmp_op, a, c, flags=self.fmf), a, c)
                return b.select(b.fcmp_unordered("uno", a, a), a, m)
            if e.op in ("pow", "copysign"):
                return b.call(intrinsic(self.m, e.op, a.type), [a, c], fastmath=self.fmf)
            if e.op in _LIBM_BINARY:
                return self._libm(_LIBM_BINARY[e.op], [a, c])
            raise NotImplementedError(f"llvm backend: binary {e.op} on {t}")
        signed = t.is_signed
        if e.op in _ICMP:
            cmp = b.icmp_signed if signed else b.icmp_unsigned
            return cmp(_ICMP[e.op], a, c)
        if e.op in _IBIN:
            return getattr(b, _IBIN[e.op])(a, c)
        if e.op == "shr":
            return b.ashr(a, c) if signed else b.lshr(a, c)
        if e.op in ("div", "mod"):
            return self._int_divmod(e.op, a, c, signed)
        if e.op in ("maximum", "minimum"):
            cmp = b.icmp_signed if signed else b.icmp_unsigned
            return b.select(cmp(">" if e.op == "maximum" else "<", a, c), a, c)
        raise NotImplementedError(f"llvm backend: binary {e.op} on {t}")

    def _int_divmod(self, op: str, a: ir.Value, c: ir.Value, signed: bool) -> ir.Value:
        """C division/remainder that never traps: x/0 == x%0 == 0, INT_MIN/-1 == INT_MIN,
        INT_MIN%-1 == 0.  The divisor is replaced by 1 in those cases (select, no branch)."""
        b, ty = self.b, a.type
        zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
        is_zero = b.icmp_unsigned("==", c, zero)
        bad = is_zero
        if signed:
            int_min = ir.Constant(ty, 1 << (ty.width - 1))
            overflow = b.and_(b.icmp_unsigned("==", a, int_min),
                              b.icmp_unsigned("==", c, ir.Constant(ty, -1)))
            bad = b.or_(is_zero, overflow)
        safe = b.select(bad, one, c)
        if op == "mod":
            return (b.srem if signed else b.urem)(a, safe)
        q = (b.sdiv if signed else b.udiv)(a, safe)
        return b.select(is_zero, zero, q)

    def _e_Select(self, e: L.Select) -> ir.Value:
        return self.b.select(self.expr(e.cond), self.expr(e.a), self.expr(e.b))

    def _e_Cast(self, e: L.Cast) -> ir.Value:
        return self.convert(self.expr(e.x), e.x.dtype, e.dtype)

    def convert(self, x: ir.Value, src: Any, dst: Any) -> ir.Value:
        b = self.b
        sty, dty = reg_type(src), reg_type(dst)
        if isinstance(src, PointerType) or isinstance(dst, PointerType):
            if sty == dty:
                return x
            return b.ptrtoint(x, dty) if sty == PTR else b.inttoptr(x, PTR)
        if sty == dty and src.is_float == dst.is_float:
            return x
        if dst.is_bool:
            if src.is_float:
                return b.fcmp_unordered("!=", x, ir.Constant(sty, 0.0))
            return b.icmp_unsigned("!=", x, ir.Constant(sty, 0))
        if src.is_float and dst.is_float:
            return b.fpext(x, dty) if dty == F64 else b.fptrunc(x, dty)
        if src.is_float:
            # saturating conversion: NaN and out-of-range values give defined results
            return b.call(fp_to_int_sat(self.m, dty, sty, dst.is_signed), [x])
        if dst.is_float:
            return (b.sitofp if src.is_signed else b.uitofp)(x, dty)
        return self._convert_int(x, sty, dty, signed=src.is_signed)

    def _convert_int(self, x: ir.Value, sty: ir.IntType, dty: ir.IntType, signed: bool):
        if sty.width == dty.width:
            return x
        if sty.width > dty.width:
            return self.b.trunc(x, dty)
        return (self.b.sext if signed else self.b.zext)(x, dty)

    def _e_Bitcast(self, e: L.Bitcast) -> ir.Value:
        if isinstance(e.dtype, PointerType):
            return self.expr(e.x)  # opaque pointers: the same value
        return self.b.bitcast(self.expr(e.x), reg_type(e.dtype))

    def _e_Round(self, e: L.Round) -> ir.Value:
        x = self.expr(e.x)
        if e.fmt == "float16":
            return self.b.fpext(self.b.fptrunc(x, F16), F32)
        return self.b.bitcast(self._bf16_bits32(x), F32)

    def _bf16_bits32(self, x: ir.Value) -> ir.Value:
        """float32 -> bfloat16 rounded to nearest even, as the high half of an i32 (low half 0).
        NaN stays NaN (quiet bit set so truncation cannot turn it into infinity)."""
        b = self.b
        bits = b.bitcast(x, I32)
        lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
        rounded = b.add(bits, b.add(lsb, ir.Constant(I32, 0x7FFF)))
        nan = b.or_(bits, ir.Constant(I32, 0x400000))
        out = b.select(b.fcmp_unordered("uno", x, x), nan, rounded)
        return b.and_(out, ir.Constant(I32, 0xFFFF0000))

    def _e_Fma(self, e: L.Fma) -> ir.Value:
        a, c, d = (self.expr(v) for v in (e.a, e.b, e.c))
        if not e.dtype.is_float:
            return self.b.add(self.b.mul(a, c), d)
        return self.b.call(intrinsic(self.m, "fma", a.type), [a, c, d], fastmath=self.fmf)

    def _e_PtrAdd(self, e: L.PtrAdd) -> ir.Value:
        off = self._to_i64(self.expr(e.offset), e.offset.dtype)
        return self.b.gep(self.expr(e.ptr), [off], source_etype=mem_type(e.ptr.dtype.pointee))

    def _e_PtrDiff(self, e: L.PtrDiff) -> ir.Value:
        """Element offset of `ptr` from `base`: byte difference / element size (exact)."""
        b = self.b
        diff = b.sub(b.ptrtoint(self.expr(e.ptr), I64), b.ptrtoint(self.expr(e.base), I64))
        size = e.ptr.dtype.pointee.itemsize
        return b.sdiv(diff, ir.Constant(I64, size)) if size > 1 else diff

    def _e_Load(self, e: L.Load) -> ir.Value:
        ptr = self.expr(e.ptr)
        if e.mask is None:
            return self._load_mem(ptr, e.ptr.dtype.pointee)
        # Memory is only touched where the mask is true: a conditional block (the vectoriser
        # turns it into a masked load), never a select over an unconditional load.
        ty = reg_type(e.dtype)
        other = self.expr(e.other) if e.other is not None else ir.Constant(ty, 0)
        cond = self.expr(e.mask)
        before = self.b.block
        with self.b.if_then(cond, likely=True):
            loaded = self._load_mem(ptr, e.ptr.dtype.pointee)
            then_block = self.b.block
        phi = self.b.phi(ty)
        phi.add_incoming(loaded, then_block)
        phi.add_incoming(other, before)
        return phi

    def _load_mem(self, ptr: ir.Value, t: DType) -> ir.Value:
        b = self.b
        v = self.tag(b.load(ptr, typ=mem_type(t), align=t.itemsize), private=False)
        if t.name == "float16":
            return b.fpext(v, F32)
        if t.name == "bfloat16":
            return b.bitcast(b.shl(b.zext(v, I32), ir.Constant(I32, 16)), F32)
        if t.is_bool:
            return b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        return v

    def _to_mem(self, v: ir.Value, t: DType) -> ir.Value:
        b = self.b
        if t.name == "float16":
            return b.fptrunc(v, F16)
        if t.name == "bfloat16":
            return b.trunc(b.lshr(self._bf16_bits32(v), ir.Constant(I32, 16)), I16)
        if t.is_bool:
            return b.zext(v, I8)
        return v

    # ------------------------------------------------------------------------- statements

    def stmts(self, body: list[L.Stmt]) -> None:
        for s in body:
            getattr(self, "_s_" + type(s).__name__)(s)

    def _s_Assign(self, s: L.Assign) -> None:
        self.b.store(self.expr(s.value), self._var_slot(s.var))

    def _s_ArrayStore(self, s: L.ArrayStore) -> None:
        v = self.expr(s.value)
        ptr, _ = self._elem_ptr(s.array, s.index)
        self.tag(self.b.store(self.b.zext(v, I8) if s.array.dtype == int1 else v, ptr),
                 private=True)

    def _masked(self, mask: L.Expr | None):
        """Context manager: the statements inside run only where `mask` is true."""
        if mask is None:
            return _Nothing()
        return self.b.if_then(self.expr(mask), likely=True)

    def _s_Store(self, s: L.Store) -> None:
        t = s.ptr.dtype.pointee
        with self._masked(s.mask):
            ptr = self.expr(s.ptr)
            self.tag(self.b.store(self._to_mem(self.expr(s.value), t), ptr, align=t.itemsize),
                     private=False)

    def _s_AtomicRMW(self, s: L.AtomicRMW) -> None:
        llvm_atomics.emit_rmw(self, s)

    def _s_AtomicCAS(self, s: L.AtomicCAS) -> None:
        llvm_atomics.emit_cas(self, s)

    def _s_Transpose(self, s: L.Transpose) -> None:
        llvm_shuffle.emit_transpose(self, s)

    def _s_TileDot(self, s: L.TileDot) -> None:
        llvm_tile_dot.emit_tile_dot(self, s)

    def _s_Print(self, s: L.Print) -> None:
        llvm_debug.emit_print(self, s)

    def _from_mem_value(self, v: ir.Value, t: DType) -> ir.Value:
        if t.name == "float16":
            return self.b.fpext(v, F32)
        return v

    def _loop_metadata(self):
        if self._loop_md is None:
            props = [self.m.add_metadata(["llvm.loop.mustprogress"])]
            if self.fmf:
                props.append(self.m.add_metadata(
                    ["llvm.loop.vectorize.enable", ir.Constant(I1, 1)]))
            self._loop_md = props
        return self._loop_md

    def _hint_md(self, item: tuple):
        return self.m.add_metadata([self._hint_md(v) if isinstance(v, tuple) else v
                                    for v in item])

    def _mark_loop(self, branch: ir.Instruction, hint: str | None = None) -> None:
        # a distinct self-referential node per loop, as LLVM requires for loop ids
        # (llvmlite has no self-referential nodes: make a unique node, then point it at itself)
        props = self._loop_metadata()
        if hint is not None:
            props = props + [self._hint_md(item) for item in _LOOP_HINTS[hint]]
        md = self.m.add_metadata([ir.MetaDataString(self.m, f"kdsl.loop.{len(self.m.metadata)}")]
                                 + props)
        md.operands = (md, *props)
        branch.set_metadata("llvm.loop", md)

    def _s_For(self, s: L.For) -> None:
        b = self.b
        slot = self._var_slot(s.var)
        b.store(self.expr(s.lo), slot)
        head = b.append_basic_block("for.head")
        body = b.append_basic_block("for.body")
        latch = b.append_basic_block("for.latch")
        exit_ = b.append_basic_block("for.exit")
        b.branch(head)
        b.position_at_end(head)
        i, hi = self.expr(s.var), self.expr(s.hi)
        t = s.var.dtype
        cmp = b.icmp_signed if t.is_signed else b.icmp_unsigned
        if isinstance(s.step, L.Const):
            cond = cmp("<" if s.step.value > 0 else ">", i, hi)
        else:
            pos = b.icmp_signed(">", self.expr(s.step), ir.Constant(i.type, 0))
            cond = b.select(pos, cmp("<", i, hi), cmp(">", i, hi))
        b.cbranch(cond, body, exit_)
        b.position_at_end(body)
        self.stmts(s.body)
        b.branch(latch)
        b.position_at_end(latch)
        b.store(b.add(self.expr(s.var), self.expr(s.step)), slot)
        hint = L.loop_hint(s)
        hint = hint if hint in _LOOP_HINTS else None
        self._mark_loop(b.branch(head), hint)
        b.position_at_end(exit_)

    def _s_While(self, s: L.While) -> None:
        b = self.b
        head = b.append_basic_block("while.head")
        body = b.append_basic_block("while.body")
        exit_ = b.append_basic_block("while.exit")
        b.branch(head)
        b.position_at_end(head)
        self.stmts(s.cond_body)
        b.cbranch(self.expr(s.cond), body, exit_)
        b.position_at_end(body)
        self.stmts(s.body)
        self._mark_loop(b.branch(head))
        b.position_at_end(exit_)

    def _s_If(self, s: L.If) -> None:
        cond = self.expr(s.cond)
        if not s.orelse:
            with self.b.if_then(cond):
                self.stmts(s.then)
            return
        with self.b.if_else(cond) as (then, orelse):
            with then:
                self.stmts(s.then)
            with orelse:
                self.stmts(s.orelse)

    def _s_Barrier(self, s: L.Barrier) -> None:
        if self.k.threads != 1:
            raise NotImplementedError("llvm backend runs one thread per program instance")

    def _s_Comment(self, s: L.Comment) -> None:
        pass

    # `llvm.prefetch(ptr, rw, locality, cache)`: a read (0) into the data cache (1) with
    # locality 2, which x86 selects as `prefetcht1` (L2 and outward): the line is wanted by the
    # next iteration's loads, not by this iteration's arithmetic, whose operands hold L1
    _PREFETCH_ARGS = (0, 2, 1)

    def _s_Prefetch(self, s: L.Prefetch) -> None:
        name = "llvm.prefetch.p0"
        fn = self.m.globals.get(name) or ir.Function(
            self.m, ir.FunctionType(ir.VoidType(), [PTR, I32, I32, I32]), name)
        self.b.call(fn, [self.expr(s.ptr)] + [ir.Constant(I32, v) for v in self._PREFETCH_ARGS])

    def emit(self) -> ir.Function:
        tiles = llvm_tile_dot.uses_tiles(self.k)
        if tiles:  # the tile registers' shapes, once per program (llvm_tile_dot.py)
            llvm_tile_dot.configure(self)
        self.stmts(self.k.body)
        if tiles:
            llvm_tile_dot.release(self)
        self.b.ret_void()
        return self.fn


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _emit_grid(kernel: L.Kernel, module: ir.Module, body: ir.Function) -> ir.Function:
    """`void <name>_grid(ptr args, i64 start, i64 end, i32 g0, i32 g1, i32 g2)`."""
    fty = ir.FunctionType(ir.VoidType(), [PTR, I64, I64, I32, I32, I32])
    fn = ir.Function(module, fty, f"{kernel.name}_grid")
    args, start, end, g0, g1, g2 = fn.args
    for a, n in zip(fn.args, ("args", "start", "end", "g0", "g1", "g2")):
        a.name = n
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    params = []
    for i, p in enumerate(kernel.params):
        slot = b.gep(args, [ir.Constant(I64, 8 * i)], source_etype=I8)
        params.append(b.load(slot, typ=reg_type(p.dtype), align=1, name=p.name))
    g0w, g1w = b.zext(g0, I64), b.zext(g1, I64)
    g01 = b.mul(g0w, g1w)
    head = fn.append_basic_block("grid.head")
    loop = fn.append_basic_block("grid.body")
    done = fn.append_basic_block("grid.done")
    pre = b.block
    b.branch(head)
    b.position_at_end(head)
    lin = b.phi(I64, name="pid")
    lin.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", lin, end), loop, done)
    b.position_at_end(loop)
    pid0 = b.trunc(b.urem(lin, g0w), I32)
    pid1 = b.trunc(b.urem(b.udiv(lin, g0w), g1w), I32)
    pid2 = b.trunc(b.udiv(lin, g01), I32)
    b.call(body, params + [pid0, pid1, pid2, g0, g1, g2])
    nxt = b.add(lin, ir.Constant(I64, 1))
    lin.add_incoming(nxt, b.block)
    b.branch(head)
    b.position_at_end(done)
    b.ret_void()
    return fn


def _emit_launch(kernel: L.Kernel, module: ir.Module, grid: ir.Function) -> None:
    """`void <name>_launch(ptr block)`: `<name>_grid(block + 16, 0, g0*g1*g2, g0, g1, g2)`,
    the header {i32 g0, g1, g2, padding} at the block's start."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), f"{kernel.name}_launch")
    block = fn.args[0]
    block.name = "block"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    g = [b.load(b.gep(block, [ir.Constant(I64, 4 * i)], source_etype=I8), typ=I32, align=4,
                name=f"g{i}") for i in range(3)]
    total = b.mul(b.mul(b.zext(g[0], I64), b.zext(g[1], I64)), b.zext(g[2], I64), name="total")
    args = b.gep(block, [ir.Constant(I64, 16)], source_etype=I8, name="args")
    b.call(grid, [args, ir.Constant(I64, 0), total] + g)
    b.ret_void()


def generate_module(kernel: L.Kernel) -> ir.Module:
    if kernel.threads != 1:
        raise ValueError("llvm backend: kernels must be lowered for one thread per program")
    module = ir.Module(name=kernel.name)
    module.triple = _llvm().get_process_triple()
    simd = llvm_host.profile()
    body = _FnEmitter(kernel, module, MathLib(module, simd.scalef)).emit()
    _emit_launch(kernel, module, _emit_grid(kernel, module, body))
    llvm_host.apply(module, simd)  # prefer-vector-width (llvm_host.py)
    return module


# ------------------------------------------------------------------- llvmlite binding layer

_INIT = threading.Lock()
_STATE: dict[str, Any] = {}


def _llvm():
    """llvmlite.binding, with the native target initialised once (thread safe)."""
    import llvmlite.binding as llvm

    with _INIT:
        if "tm" not in _STATE:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _STATE["tm"] = _new_target_machine(llvm)
            _register_libm(llvm)
            llvm_debug.register(llvm)  # device_print's callback
    return llvm


def _new_target_machine(llvm):
    """A target machine for the host CPU (one shared for optimisation; each JIT engine takes
    ownership of its own)."""
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
        opt=3, codemodel="jitdefault", jit=True)


def _register_libm(llvm) -> None:
    """Make libm's functions visible to the JIT by name (calls from float64 math, pow, frem)."""
    import ctypes.util

    path = ctypes.util.find_library("m")
    if not path:
        return
    libm = ctypes.CDLL(path)
    for name in ("tanh", "erf", "pow", "powf", "fmod", "fmodf", "exp", "expf", "exp2",
                 "exp2f", "log", "logf", "log2", "log2f", "sin", "sinf", "cos", "cosf",
                 *LIBM_NAMES):
        try:
            llvm.add_symbol(name, ctypes.cast(getattr(libm, name), ctypes.c_void_p).value)
        except AttributeError:
            pass


def target_machine():
    _llvm()
    return _STATE["tm"]


# LLVM objects live in llvmlite's one global context, which is not thread safe: parsing,
# optimising and JIT-compiling are serialised (running compiled kernels is not).
_COMPILE = threading.RLock()


SPEED_LEVEL = 3


@lru_cache(maxsize=64)
def optimise(source: str) -> str:
    """Parse, verify and run the O3 pipeline (vectorisers on) for the host CPU."""
    with _COMPILE:
        return _optimise(source)


def _optimise(source: str) -> str:
    llvm = _llvm()
    mod = llvm.parse_assembly(source)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=SPEED_LEVEL)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(target_machine(), pto)
    pb.getModulePassManager().run(mod, pb)
    return str(mod)


class LLVMHandle:
    """A JIT-compiled kernel: the engine (kept alive), the grid function and the one-argument
    launch function (None in a module compiled without it)."""

    def __init__(self, engine: Any, fn: Any, opt_ir: str, kernel: L.Kernel,
                 launch: Any = None):
        self.engine = engine
        self.fn = fn
        self.opt_ir = opt_ir
        self.name = kernel.name
        self.address = 0
        self.packer = ArgPacker(kernel)
        self._pack = self.packer.struct.pack
        self.launch_fn = launch
        self.runner = GridRunner(fn, launch, ctypes.cast(fn, ctypes.c_void_p).value or 0)
        self.direct_launch = _direct_launch(self.runner, self._pack, self.packer.block.pack)

    def run(self, grid: tuple[int, int, int], args: list[BoundArg]) -> None:
        """Launch on bound arguments: small grids inline, others as `GridRunner` says."""
        g0, g1, g2 = grid
        total = g0 * g1 * g2
        runner = self.runner
        if self.launch_fn is not None and (total < INLINE_GRID or runner.inline(total)):
            block = self.packer.pack_block(args, grid)
            if total < INLINE_GRID:
                self.launch_fn(block)
            else:
                runner.run_inline(block, total)
        else:
            runner.run_pooled(self.packer.pack(args), grid, total)


def _direct_launch(runner: GridRunner, pack: Any, pack_block: Any) -> Any:
    """The launch fast path of one kernel (kdsl/runtime/fastpath.py): `direct(grid, slots)`
    with `slots` the runtime arguments in parameter order, array addresses and scalar values
    already classified and range-checked by the caller, and `grid` normalised.  (A closure:
    every name the common case reads is a local.)"""
    launch = runner.launch
    limit = INLINE_GRID if launch is not None else 0

    def direct(grid: tuple[int, int, int], slots: Any) -> None:
        g0, g1, g2 = grid
        total = g0 * g1 * g2
        if total < limit:
            launch(pack_block(g0, g1, g2, *slots))
        elif runner.inline(total):
            runner.run_inline(pack_block(g0, g1, g2, *slots), total)
        else:
            runner.run_pooled(pack(*slots), grid, total)

    return direct


#: The JIT-compiled kernels alive in this process (a profiler maps samples onto their code:
#: benchmarks/cpu_profile.py).
LIVE: weakref.WeakSet[LLVMHandle] = weakref.WeakSet()


def jit_functions(source: str, names: tuple[str, ...]) -> tuple[Any, dict[str, int]]:
    """JIT-compile LLVM IR text (no optimisation passes) for the host; returns the engine
    (keep it alive) and the address of each function in `names`: the native pool's code
    (backends/llvm_pool.py)."""
    llvm = _llvm()
    with _COMPILE:
        mod = llvm.parse_assembly(source)
        mod.verify()
        engine = llvm.create_mcjit_compiler(mod, _new_target_machine(llvm))
        engine.finalize_object()
        addrs = {n: engine.get_function_address(n) for n in names}
    if not all(addrs.values()):
        raise RuntimeError(f"llvm backend: {names} not all found in the JIT module")
    return engine, addrs


llvm_pool.COMPILE.append(jit_functions)


def jit(kernel: L.Kernel, opt_ir: str) -> LLVMHandle:
    llvm = _llvm()
    with _COMPILE:
        mod = llvm.parse_assembly(opt_ir)
        engine = llvm.create_mcjit_compiler(mod, _new_target_machine(llvm))
        engine.finalize_object()
        addr = engine.get_function_address(f"{kernel.name}_grid")
        one = engine.get_function_address(f"{kernel.name}_launch")
    if not addr:
        raise RuntimeError(f"llvm backend: {kernel.name}_grid not found in the JIT module")
    handle = LLVMHandle(engine, GRID_FN(addr), opt_ir, kernel, LAUNCH_FN(one) if one else None)
    handle.address = addr  # of the grid function (the kernel body is inlined into it)
    LIVE.add(handle)
    return handle


def object_code(opt_ir: str) -> bytes:
    """The ELF object of a kernel's optimised module, as the JIT compiles it (same target
    machine): what a profiler disassembles."""
    llvm = _llvm()
    with _COMPILE:
        return _new_target_machine(llvm).emit_object(llvm.parse_assembly(opt_ir))


@lru_cache(maxsize=1)
def _toolchain_id() -> str:
    import llvmlite

    llvm = _llvm()
    return "|".join([
        f"llvmlite-{llvmlite.__version__}",
        "llvm-" + ".".join(map(str, llvm.llvm_version_info)),
        llvm.get_host_cpu_name(),
        llvm.get_host_cpu_features().flatten(),
    ])


# The Loop IR ops this backend emits itself: every one but float32 tanh and erf, and sigmoid,
# which kdsl/lowering/legalize.py decomposes into ops listed here (exp and friends come from
# llvm_math.py, the rest from LLVM intrinsics and libm).
OPS = (L.UNARY | L.BINARY) - {"tanh", "erf", "sigmoid"} | {"tanh:float64", "erf:float64"}


class LLVMBackend(Backend):
    name = "llvm"
    caps = frozenset({"fp64", "reduce_partials", "reduce_partials_minmax", "cpu_microkernel",
                      "bessel", "prefetch", "transpose_block"})
    ops = OPS
    is_cpu = True
    source_suffix = "ll"
    short_name = "llv"

    def is_available(self) -> bool:
        try:
            _llvm()
            return True
        except Exception:  # noqa: BLE001 - any failure means "not available", never raise
            return False

    def unavailable_reason(self) -> str:
        return "llvmlite could not create a native target"

    def parallelism(self) -> int:
        return workers()

    def devices(self) -> list[str]:
        import os
        import platform

        used = f"{workers()} threads used (CPU affinity, KDSL_NUM_THREADS)"
        unit = llvm_host.matrix_unit()
        kinds = sorted(c.removeprefix("tile_dot_") for c in llvm_host.matrix_caps()
                       if c != "tile_dot")
        matrix = f"matrix unit {unit} ({', '.join(kinds)} dots)" if unit else "no matrix unit"
        return [f"{platform.machine()} host CPU, {os.cpu_count()} cores, {used}, "
                f"{llvm_host.profile().vector_bits}-bit vectors, {matrix}"]

    def direct_launcher(self, handle: LLVMHandle) -> DirectLauncher:
        return DirectLauncher(handle.direct_launch, handle.launch_fn,
                              handle.packer.block.pack, INLINE_GRID)

    def target(self, num_warps: int) -> Target:
        simd = llvm_host.profile()  # the dot micro-kernel's register blocks follow it
        return Target("llvm", threads=1, warp_size=1, caps=self.host_caps(), ops=self.ops,
                      vector_bits=simd.vector_bits, vector_regs=simd.vector_regs)

    def host_caps(self) -> frozenset[str]:
        """`caps` plus the host CPU's matrix units (AMX: llvm_host.matrix_caps)."""
        return self.caps | llvm_host.matrix_caps()

    def hash(self) -> str:
        # the capabilities change the lowering (partial sums, the dot micro-kernel, the
        # matrix unit): part of the disk-cache key, so entries compiled without them are not
        # reused; so is the SIMD profile (vector width and register blocks: llvm_host.py)
        return (_toolchain_id() + "|caps=" + ",".join(sorted(self.host_caps())) + "|"
                + llvm_host.profile().key() + f"|matrix={llvm_host.matrix_unit()}")

    def codegen(self, kernel: L.Kernel) -> str:
        return str(generate_module(kernel))

    def add_stages(self, kernel: L.Kernel, stages: dict[str, str]) -> None:
        source = stages.get("llvm") or self.codegen(kernel)
        stages["llvm"] = source
        opt = optimise(source)
        stages["llvm.opt"] = opt
        # A second code generation costs about as much as the JIT itself: done when read.
        stages["asm"] = Lazy(host_assembly, opt)

    def build(self, kernel: L.Kernel, source: str) -> LLVMHandle:
        return jit(kernel, optimise(source))

    def serialize(self, handle: LLVMHandle) -> bytes | None:
        return handle.opt_ir.encode()

    def deserialize(self, kernel: L.Kernel, data: bytes) -> LLVMHandle:
        return jit(kernel, data.decode())

    def launch(self, handle: LLVMHandle, kernel: L.Kernel, grid: tuple[int, int, int],
               args: list[BoundArg]) -> None:
        handle.run(grid, args)


def host_assembly(opt_ir: str) -> str:
    """Host assembly of optimised LLVM IR (the `asm` stage)."""
    llvm = _llvm()
    with _COMPILE:
        return target_machine().emit_assembly(llvm.parse_assembly(opt_ir))


__all__ = ["LLVMBackend", "LLVMHandle", "generate_module", "optimise"]
