"""The C-like emitter shared by the OpenCL and CUDA backends.

`emit(kernel, dialect)` walks a `loop.Kernel` in Python and returns C source.  Expressions are
printed from tables (Loop IR op -> C format string); statements by a small visitor; the fixed
skeleton of the file (preamble, helper functions, kernel signature, index set-up) is rendered by
jinja2 from the dialect's template in `backends/templates/`.  Everything that differs between
OpenCL C and CUDA C lives in a frozen `CDialect`.

Semantic rules (those of `kdsl/ir/loop.py`):
- integer arithmetic wraps in its type: signed add/sub/mul/neg/shl are computed in the unsigned
  "wrap type" (signed overflow is undefined in C) and results narrower than 32 bits are cast back
  to their type (C promotes them to int);
- integer division and remainder go through helpers that give 0 for a zero divisor and wrap for
  MIN / -1 instead of trapping;
- float maximum/minimum propagate NaN (C's fmax/fmin do not);
- float16/bfloat16 values are float32 in registers: memory accesses convert, `Round` rounds to
  nearest even (bfloat16 by bit manipulation on uint16 storage, NaN kept quiet); 8-bit floats
  are bytes in memory (the lowering converts their codes, kdsl/lowering/fp8.py);
- pointers convert to and from 64-bit integers and to other pointers with C casts;
- a masked load is `(mask ? load : other)`: C's `?:` is lazy, so masked-off lanes never touch
  memory;
- float constants are printed so that they parse back to the same bits; inf/nan via macros.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import numpy as np

from kdsl.errors import CompilationError
from kdsl.ir import loop
from kdsl.ir.types import DType, PointerType, float32

from .c_atomics import AtomicSpelling
from .c_simd import VectorPrinter
from .c_simd import plan as simd_plan
from .transpose_net import stages

TEMPLATES = Path(__file__).parent / "templates"

# The math ops of kdsl/ir/mathops.py: C99 functions of the same name (CUDA: `...f` for float).
MATH_UNARY = ("trunc", "rint", "round", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
              "acosh", "atanh", "log1p", "expm1", "cbrt", "exp10", "log10", "erfc", "lgamma",
              "tgamma", "j0", "j1", "y0", "y1")
MATH_BINARY = ("atan2", "hypot", "copysign", "nextafter", "remainder", "ldexp")


@dataclass(frozen=True)
class CDialect:
    """The differences between C-like languages, as data.

    Format strings use `{x}`, `{a}`, `{b}`, `{p}` (pointer), `{v}` (value), `{T}` (C type).
    """

    name: str
    template: str                       # jinja2 file in backends/templates/
    kernel_qual: str                    # '__kernel' / 'extern "C" __global__'
    global_qual: str                    # qualifier of pointers to global memory ('__global ')
    shared_qual: str                    # '__local' / '__shared__'
    barrier: str                        # statement
    special: Mapping[str, str]          # "tid" / "pid" / "nprog" -> format with {axis}
    types: Mapping[str, str]            # DType name -> C scalar type (values and memory)
    mem_types: Mapping[str, str]        # overrides for elements in memory (int1, f16, bf16)
    wrap_types: Mapping[str, str]       # int DType name -> unsigned C type arithmetic wraps in
    int_suffix: Mapping[str, str]       # DType name -> integer literal suffix
    math: Callable[[str, str], str]     # (op, "float32"|"float64") -> C function name
    f16_load: str                       # format with {p} -> float
    f16_store: str                      # statement format with {p}, {v}
    f16_round: str                      # format with {x}
    bitcast: str                        # format with {T}, {x}
    atomics: AtomicSpelling             # AtomicRMW/AtomicCAS forms and helpers (c_atomics.py)
    fast_math_option: str
    helper_qual: str                    # prefix of helper function definitions
    extra: Mapping[str, object] = field(default_factory=dict)  # template-only settings
    # float32 op -> C function used instead of `math` when the kernel asks for fast math
    # (OpenCL's native_*; CUDA gets its fast intrinsics from --use_fast_math instead)
    math_fast: Mapping[str, str] = field(default_factory=dict)
    # Loop IR `Intrinsic` name -> C function, called as `f(&result..., arg...)`; the template
    # defines the functions of `intrinsics` (the names used).  Targets get an intrinsic only
    # with the capability that promises it, so a dialect lists just the ones it has.
    intrinsics: Mapping[str, str] = field(default_factory=dict)
    # Vector access (`VecLoad`/`VecStore`): pointee DType name -> base name of the built-in
    # vector type of its bits ("float" -> float4), and the format of a pointer to it with
    # {V} (the vector type) and {p}.  Empty: the dialect has no vector access.
    vector_types: Mapping[str, str] = field(default_factory=dict)
    vector_ptr: str = "(({V}*)({p}))"
    # pointee -> format converting one vector lane {c} to its register value, and a register
    # value {x} to a lane (16-bit floats travel as ushort lanes); other pointees are copied
    vector_lane_in: Mapping[str, str] = field(default_factory=dict)
    vector_lane_out: Mapping[str, str] = field(default_factory=dict)
    # Dynamic shared memory (CUDA): when a kernel's shared arrays need more than
    # `static_shared_bytes`, they are declared as aligned slices of the one unsized buffer
    # `dynamic_shared` names (`extern __shared__`), sized at launch.  Empty: always static.
    dynamic_shared: str = ""
    static_shared_bytes: int = 0
    # printf length modifier of a 64-bit integer argument ("l" in OpenCL C, "ll" in CUDA)
    printf_int64: str = "ll"
    # Integer bit counts `clz`/`popc`: "clz32", "clz64", ... -> format with {x} and {T}
    int_math: Mapping[str, str] = field(default_factory=dict)
    # the 32-bit shared-memory address of shared array {p} (its first element), for
    # `SharedRow` and `AsyncCopy`; empty: the dialect has no warp-collective matrix loads
    shared_address: str = ""
    # SIMD loops of one-thread kernels as vector types (backends/c_simd.py): float lanes per
    # vector (0: loops stay scalar), the vector type of {n} floats, a load from / store to
    # {p} (a pointer to float), and the statement asking the compiler to unroll a loop
    simd_lanes: int = 0
    simd_vector: str = "float{n}"
    simd_load: str = "vload{n}(0, {p})"
    simd_store: str = "vstore{n}({v}, 0, {p});"
    unroll_pragma: str = "#pragma unroll"
    # an element loop vectorised {n} lanes wide, and the kernel attribute making vectors of
    # {bits} bits legal (c_simd.py, "Element loops")
    vectorize_pragma: str = "#pragma clang loop vectorize_width({n})"
    vector_width_attr: str = " __attribute__((min_vector_width({bits})))"
    align_attr: str = " __attribute__((aligned({n})))"
    # the statement hinting that {p} will be read soon (`Prefetch`); empty: hints are dropped
    prefetch: str = ""
    # a two-vector shuffle of {a} and {b} (vectors of {n} floats) by the {n} indices {mask}
    # (transpose_net.py's convention); empty: `Transpose` is printed as its loop nest
    simd_shuffle: str = ""


# ----------------------------------------------------------------------------------- names

_C_WORDS = frozenset(
    [
        "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
        "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
        "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
        "union", "unsigned", "void", "volatile", "while", "bool", "true", "false", "half", "uchar",
        "ushort", "uint", "ulong", "kernel", "global", "local", "constant", "private", "read_only",
        "write_only", "read_write", "class", "namespace", "template", "typename", "new", "delete",
        "this", "operator", "public", "protected", "virtual", "friend", "using", "try", "catch",
        "throw", "export", "asm", "vector", "sampler_t", "image2d_t", "event_t", "size_t",
        "ptrdiff_t", "intptr_t", "uintptr_t", "NAN", "INFINITY", "threadIdx", "blockIdx",
        "blockDim", "gridDim", "warpSize", "main", "barrier"
    ]
)
# Functions the generated code calls: a variable of the same name would hide them.
_CALLED = frozenset(
    [
        "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "fabs", "sin", "cos", "tanh", "erf", "floor",
        "ceil", "fmod", "pow", "fma", "fmax", "fmin", "isnan", "abs", "max", "min", "expf", "exp2f",
        "logf", "log2f", "sqrtf", "rsqrtf", "fabsf", "sinf", "cosf", "tanhf", "erff", "floorf",
        "ceilf", "fmodf", "powf", "fmaf", "fmaxf", "fminf", "llabs", "vload_half",
        *MATH_UNARY, *(f"{n}f" for n in MATH_UNARY), *MATH_BINARY,
        *(f"{n}f" for n in MATH_BINARY), "jn", "jnf", "yn", "ynf", "clz", "popcount",
        "vstore_half_rte", "convert_half_rte", "atomic_add", "atom_add", "atomic_cmpxchg",
        "atom_cmpxchg", "atomicAdd", "atomicCAS", "atomicExch", "atomicMax", "atomicMin",
        "atomicAnd", "atomicOr", "atomicXor", "atomic_xchg", "atomic_max", "atomic_min",
        "atomic_and", "atomic_or", "atomic_xor", "atom_xchg", "atom_max", "atom_min", "atom_and",
        "atom_or", "atom_xor", "mem_fence", "printf", "get_local_id", "get_group_id",
        "get_num_groups", "as_float", "as_uint", "as_int", "as_double", "as_long", "as_ulong",
        "memcpy"
    ]
)


class _Names:
    """C identifiers for Loop IR names: kept as written unless reserved or already taken."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str], str] = {}
        self.taken: set[str] = set()

    def __call__(self, space: str, name: str) -> str:
        """`space`: "v" for variables and parameters (a `Var` names either), "a" for arrays,
        "k" for the kernel; all share one C namespace."""
        key = (space, name)
        if key not in self.by_key:
            base = re.sub(r"\W", "_", name) or "v"
            if (base[0].isdigit() or base in _C_WORDS or base in _CALLED
                    or keyword.iskeyword(base) or base.startswith(("kd_", "__"))):
                base = "v_" + base.lstrip("_")
            c, i = base, 1
            while c in self.taken:
                c, i = f"{base}_{i}", i + 1
            self.taken.add(c)
            self.by_key[key] = c
        return self.by_key[key]


# ----------------------------------------------------------------------------------- tables

# Formats for float operands; {f} is the dialect's math function for the op and type, {s} the
# type name (helper suffix).
FLOAT_UNARY = {
    "neg": "(-{x})", "abs": "{f}({x})", "sigmoid": "kd_sigmoid_{s}({x})", "isnan": "isnan({x})",
    **{op: "{f}({x})" for op in
       [
           "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "floor",
           "ceil", *MATH_UNARY
       ]},
}
INT_UNARY = {
    "neg": "wrap:(0 - {x})", "not": "small:(~{x})", "abs": "kd_abs_{s}({x})",
}
FLOAT_BINARY = {
    "add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "div": "({a} / {b})",
    "mod": "{f}({a}, {b})", "pow": "{f}({a}, {b})",
    "maximum": "kd_fmax_{s}({a}, {b})", "minimum": "kd_fmin_{s}({a}, {b})",
    **{op: "{f}({a}, {b})" for op in MATH_BINARY},
    "jn": "{f}({b}, {a})", "yn": "{f}({b}, {a})",  # Loop IR operands are (x, n)
}
# "wrap:" computes in the unsigned wrap type and casts back; "small:" casts back to the type
# when it is narrower than int (C promotes it).
# Operands of "wrap:" ops arrive already converted to the wrap type (see `_wrapped`).
INT_BINARY = {
    "add": "wrap:({a} + {b})", "sub": "wrap:({a} - {b})", "mul": "wrap:({a} * {b})",
    "div": "kd_div_{s}({a}, {b})",
    "mod": "kd_mod_{s}({a}, {b})", "and": "small:({a} & {b})", "or": "small:({a} | {b})",
    "xor": "small:({a} ^ {b})", "shl": "wrap:({a} << {b})", "shr": "small:({a} >> {b})",
    "maximum": "kd_max_{s}({a}, {b})", "minimum": "kd_min_{s}({a}, {b})",
}
BOOL_BINARY = {
    "and": "({a} & {b})", "or": "({a} | {b})", "xor": "({a} ^ {b})", "land": "({a} && {b})",
    "lor": "({a} || {b})", "maximum": "({a} | {b})", "minimum": "({a} & {b})",
    # int1 arithmetic wraps modulo 2, as on the other backends: + and - are xor, * is and;
    # x // y is x & y and x % y is 0 (x / 0 == x % 0 == 0); shift amounts are 0 modulo 1
    "add": "({a} ^ {b})", "sub": "({a} ^ {b})", "mul": "({a} & {b})", "div": "({a} & {b})",
    "mod": "(({a}) & 0)", "shl": "({a})", "shr": "({a})",
}
COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
# Helpers a format refers to: prefix of the call -> helper kind rendered by the template.
_HELPER_CALLS = ("kd_sigmoid", "kd_abs", "kd_div", "kd_mod", "kd_fmax", "kd_fmin", "kd_max",
                 "kd_min", "kd_exp")


WRAPPING = frozenset({"add", "sub", "mul", "shl"})
#: the Loop IR ops the tables spell (`Backend.ops` of the C-like backends)
C_OPS = frozenset(FLOAT_UNARY) | frozenset(INT_UNARY) | {"clz", "popc"} | frozenset(
    FLOAT_BINARY) | frozenset(INT_BINARY) | frozenset(BOOL_BINARY)


def _is_small(t: DType) -> bool:
    return t.is_int and t.bits < 32


class CEmitter:
    """Prints one kernel in one dialect; records which helpers the preamble must define."""

    def __init__(self, kernel: loop.Kernel, dialect: CDialect) -> None:
        self.k = kernel
        self.d = dialect
        self.names = _Names()
        self.helpers: dict[str, set[str]] = {}   # helper kind -> type names
        self.specials: dict[str, str] = {}      # C name of an index set-up constant -> expr
        self.uses_fp64 = False
        self.uses_int64_atomics = False
        self.uses_int64_ext_atomics = False
        self.atomic_helpers: dict[str, str] = {}  # name -> C definition, in dependency order
        self.fast_math = kernel.options.fast_math
        self.intrinsics: set[str] = set()       # Intrinsic names used (template defines them)
        self.simd = VectorPrinter(self, simd_plan(kernel, dialect.simd_lanes))
        self.expr_table: dict[type, Callable[[loop.Expr], str]] = {
            loop.Const: self._const, loop.Var: self._var, loop.Special: self._special,
            loop.Index: self._index, loop.PairBits: self._pair_bits,
            loop.SharedRow: self._shared_row,
            loop.Unary: self._unary, loop.Binary: self._binary,
            loop.Select: self._select, loop.Cast: self._cast, loop.Bitcast: self._bitcast,
            loop.Round: self._round, loop.Fma: self._fma, loop.PtrAdd: self._ptradd,
            loop.PtrDiff: self._ptrdiff, loop.Load: self._load,
        }
        self.stmt_table: dict[type, Callable[[loop.Stmt, str], list[str]]] = {
            loop.Assign: self._assign, loop.ArrayStore: self._array_store,
            loop.Store: self._store, loop.AtomicRMW: self._atomic, loop.AtomicCAS: self._atomic,
            loop.Print: self._print, loop.For: self._for,
            loop.While: self._while, loop.If: self._if, loop.Barrier: self._barrier,
            loop.Comment: self._comment, loop.Intrinsic: self._intrinsic,
            loop.VecLoad: self._vec_load, loop.VecStore: self._vec_store,
            loop.AsyncCopy: self._async_copy, loop.AsyncWait: self._async_wait,
            loop.AsyncCommit: self._async_commit,
            loop.Prefetch: self._prefetch, loop.Transpose: self._transpose,
        }

    # -- types

    def need(self, kind: str, tname: str = "") -> None:
        self.helpers.setdefault(kind, set()).add(tname)
        if kind == "sigmoid" and self.d.math("exp", tname).startswith("kd_exp_"):
            self.need("exp", tname)  # the sigmoid helper calls the dialect's exp

    def ctype(self, t: loop.Type) -> str:
        """C type of a value (variable, parameter, expression) of type `t`."""
        if isinstance(t, PointerType):
            return f"{self.d.global_qual}{self.mem_type(t.pointee)}*"
        if t.name in ("float16", "bfloat16"):
            raise NotImplementedError(f"{t} value outside memory (held as float32 in Loop IR)")
        if t.name == "float64":
            self.uses_fp64 = True
        return self.d.types[t.name]

    def mem_type(self, t: DType) -> str:
        """C type of an element of type `t` in memory (arrays, pointees)."""
        if t.name == "float64":
            self.uses_fp64 = True
        if t.is_fp8:  # the code (kdsl/ir/loop.py)
            return self.d.types["uint8"]
        return self.d.mem_types.get(t.name, self.d.types.get(t.name, ""))

    def _fill(self, fmt: str, t: DType, **kw: str) -> str:
        """Expand a table format for operands of type `t`."""
        mode, _, body = fmt.partition(":") if fmt.startswith(("wrap:", "small:")) else ("", "", fmt)
        ctype = self.ctype(t)
        wrap = self.d.wrap_types.get(t.name, ctype)
        op = kw.pop("op", "")
        f = (self.fast_math and t.name == "float32" and self.d.math_fast.get(op)) or \
            (self.d.math(op, t.name) if t.is_float else "")
        text = body.format(W=wrap, T=ctype, s=t.name, f=f, **kw)
        for call in _HELPER_CALLS:
            if text.startswith(call + "_"):
                self.need(call[3:], t.name)
        if mode == "wrap" and wrap != ctype or mode == "small" and _is_small(t):
            text = f"(({ctype}){text})"
        return text

    # -- expressions

    def expr(self, e: loop.Expr) -> str:
        try:
            return self.expr_table[type(e)](e)
        except KeyError:
            raise TypeError(f"{self.d.name}: no C form for {type(e).__name__}") from None

    def _const(self, e: loop.Const) -> str:
        return format_const(e.value, e.dtype, self.d) if not isinstance(
            e.dtype, PointerType) else f"(({self.ctype(e.dtype)})0)"

    def _var(self, e: loop.Var) -> str:
        return self.names("v", e.name)

    def _special(self, e: loop.Special) -> str:
        name = "kd_tid" if e.kind == "tid" else f"kd_{e.kind}{e.axis}"
        self.specials[name] = self.d.special[e.kind].format(axis=e.axis, xyz="xyz"[e.axis])
        return name

    def _index(self, e: loop.Index) -> str:
        name, i = self.names('a', e.array.name), self.expr(e.index)
        half = getattr(e.array.dtype, "name", "")  # pointer arrays have no name
        if half == "float16":  # a 16-bit shared array (loop.py)
            self.need("f16")
            return self.d.f16_load.format(p=f"(&{name}[{i}])")
        if half == "bfloat16":
            self.need("bf16")
            return f"kd_bf16_to_f32({name}[{i}])"
        return f"{name}[{i}]"

    def _shared_row(self, e: loop.SharedRow) -> str:
        return self.shared_address(e.array, e.index)

    def shared_address(self, a: loop.Array, index: loop.Expr) -> str:
        """The 32-bit shared-memory address of `a[index]`.  An index `i + v * n` (a ring
        slot's offset last, kdsl/lowering/async_ring.py) is the array's address plus the
        slot's bytes plus i's, in unsigned 32-bit arithmetic (the shared window's): the
        slot's part is then added once per iteration and the invariant rest stays in
        registers.  Any other index is the address of the element (which ptxas hoists out
        of loops best as it is)."""
        b = index.b if isinstance(index, loop.Binary) and index.op == "add" else None
        if (isinstance(b, loop.Binary) and b.op == "mul" and isinstance(b.a, loop.Var)
                and isinstance(b.b, loop.Const)):
            base = self.d.shared_address.format(p=self.names('a', a.name))
            size = a.dtype.itemsize
            return (f"(({base} + {size}u * (unsigned)({self.expr(b)})) + "
                    f"{size}u * (unsigned)({self.expr(index.a)}))")
        name, i = self.names('a', a.name), self.expr(index)
        return self.d.shared_address.format(p=f"(&{name}[{i}])")

    def _pair_bits(self, e: loop.PairBits) -> str:
        name, i = self.names('a', e.array.name), self.expr(e.index)
        return f"(*(const {self.d.types['uint32']}*)(&{name}[{i}]))"

    def _unary(self, e: loop.Unary) -> str:
        t = e.x.dtype
        x = self.expr(e.x)
        if t.is_bool:
            return {"not": f"(!{x})", "abs": x, "neg": x}[e.op]
        if t.is_float:
            return self._fill(FLOAT_UNARY[e.op], t, x=x, op="fabs" if e.op == "abs" else e.op)
        if e.op == "abs" and not t.is_signed:
            return x
        if e.op in ("clz", "popc"):
            key = f"{e.op}{t.bits}"
            if key not in self.d.int_math:
                raise NotImplementedError(f"{self.d.name}: {e.op} of {t}")
            return self.d.int_math[key].format(x=x, T=self.ctype(t))
        if e.op == "neg":
            x = self._wrapped(e.x, t)
        return self._fill(INT_UNARY[e.op], t, x=x)

    def _wrapped(self, e: loop.Expr, t: DType) -> str:
        """`e` (of int type `t`) converted to its unsigned wrap type: the inner text of a
        wrapping op of the same type (no cast back and forth), an unsigned literal, or a cast."""
        wrap = self.d.wrap_types.get(t.name)
        if wrap is None:
            return self.expr(e)
        if isinstance(e, loop.Const) and int(e.value) >= 0:
            bits = 64 if t.bits == 64 else 32
            return format_const(int(e.value), DType(f"uint{bits}", "u", bits), self.d)
        if isinstance(e, loop.Binary) and e.op in WRAPPING and e.a.dtype == t:
            return INT_BINARY[e.op].partition(":")[2].format(
                a=self._wrapped(e.a, t), b=self._wrapped(e.b, t) if e.op != "shl"
                else self.expr(e.b))
        return f"({wrap}){self.expr(e)}"

    def _binary(self, e: loop.Binary) -> str:
        t = e.a.dtype
        if t.is_int and e.op in WRAPPING:
            a = self._wrapped(e.a, t)
            b = self._wrapped(e.b, t) if e.op != "shl" else self.expr(e.b)
            return self._fill(INT_BINARY[e.op], t, a=a, b=b)
        a, b = self.expr(e.a), self.expr(e.b)
        if e.op in COMPARE:
            return f"({a} {COMPARE[e.op]} {b})"
        if t.is_bool:
            return BOOL_BINARY[e.op].format(a=a, b=b)
        if t.is_float:
            return self._fill(FLOAT_BINARY[e.op], t, a=a, b=b,
                              op="fmod" if e.op == "mod" else e.op)
        return self._fill(INT_BINARY[e.op], t, a=a, b=b)

    def _select(self, e: loop.Select) -> str:
        return f"({self.expr(e.cond)} ? {self.expr(e.a)} : {self.expr(e.b)})"

    def _cast(self, e: loop.Cast) -> str:
        x = self.expr(e.x)
        if isinstance(e.dtype, DType) and e.dtype.is_bool:
            return f"({x} != 0)"
        src = e.x.dtype
        if isinstance(src, DType) and src.is_float and isinstance(e.dtype, DType):
            return self._float_to_int(x, src, e.dtype)
        return f"(({self.ctype(e.dtype)}){x})"

    def _float_to_int(self, x: str, src: DType, dst: DType) -> str:
        """float -> int saturates and maps NaN to 0 (as the interpreter and the LLVM backend's
        fptosi.sat); a C cast of an out-of-range value is undefined (x86 OpenCL gives
        INT_MIN).  The bounds are powers of two, exact in every float type."""
        if dst.is_float:
            return f"(({self.ctype(dst)}){x})"
        T = self.ctype(dst)
        hi_exp = dst.bits - 1 if dst.is_signed else dst.bits
        lo = format_const(-(2.0 ** hi_exp) if dst.is_signed else 0.0, src, self.d)
        hi = format_const(2.0 ** hi_exp, src, self.d)
        lo_int = format_const(-(1 << hi_exp) if dst.is_signed else 0, dst, self.d)
        hi_int = format_const((1 << hi_exp) - 1, dst, self.d)
        return (f"(isnan({x}) ? ({T})0 : {x} <= {lo} ? {lo_int} : {x} >= {hi} ? {hi_int} "
                f": ({T}){x})")

    def _bitcast(self, e: loop.Bitcast) -> str:
        if isinstance(e.dtype, PointerType):  # the same address, another pointee
            return f"(({self.ctype(e.dtype)})({self.expr(e.x)}))"
        return self.d.bitcast.format(T=self.ctype(e.dtype), x=self.expr(e.x))

    def _round(self, e: loop.Round) -> str:
        x = self.expr(e.x)
        if e.fmt == "bfloat16":
            self.need("bf16")
            return f"kd_round_bf16({x})"
        self.need("f16")
        return self.d.f16_round.format(x=x)

    def _fma(self, e: loop.Fma) -> str:
        t = e.dtype
        if t.is_float:
            a, b, c = self.expr(e.a), self.expr(e.b), self.expr(e.c)
            return f"{self.d.math('fma', t.name)}({a}, {b}, {c})"
        return self._binary(loop.Binary("add", loop.Binary("mul", e.a, e.b), e.c))

    def _ptradd(self, e: loop.PtrAdd) -> str:
        return f"({self.expr(e.ptr)} + {self.expr(e.offset)})"

    def _ptrdiff(self, e: loop.PtrDiff) -> str:
        # C pointer subtraction counts elements of the pointee (checked mode's offsets).
        return f"(({self.ctype(e.dtype)})({self.expr(e.ptr)} - {self.expr(e.base)}))"

    def _element(self, ptr: loop.Expr) -> tuple[str, str]:
        """`(base, index)` of a pointer expression, so that accesses print as `base[index]`."""
        if isinstance(ptr, loop.PtrAdd):
            return self.expr(ptr.ptr), self.expr(ptr.offset)
        return self.expr(ptr), "0"

    def _read(self, ptr: loop.Expr) -> str:
        base, idx = self._element(ptr)
        pointee = ptr.dtype.pointee.name
        if pointee == "float16":
            self.need("f16")
            return self.d.f16_load.format(p=f"({base} + {idx})" if idx != "0" else base)
        if pointee == "bfloat16":
            self.need("bf16")
            return f"kd_bf16_to_f32({base}[{idx}])"
        if pointee == "int1":
            return f"({base}[{idx}] != 0)"
        return f"{base}[{idx}]"

    def _load(self, e: loop.Load) -> str:
        value = self._read(e.ptr)
        if e.mask is None:
            return value
        other = (self.expr(e.other) if e.other is not None
                 else format_const(0, e.dtype, self.d))
        return f"({self.expr(e.mask)} ? {value} : {other})"

    # -- statements

    def stmts(self, body: list[loop.Stmt], pad: str) -> list[str]:
        out: list[str] = []
        for s in body:
            try:
                out += self.stmt_table[type(s)](s, pad)
            except KeyError:
                raise TypeError(f"{self.d.name}: no C form for {type(s).__name__}") from None
        return out

    @staticmethod
    def _guard(mask: str | None, stmt: str, pad: str) -> list[str]:
        return [f"{pad}if ({mask}) {stmt}" if mask is not None else pad + stmt]

    def _assign(self, s: loop.Assign, pad: str) -> list[str]:
        return [f"{pad}{self.expr(s.var)} = {self.expr(s.value)};"]

    def _array_store(self, s: loop.ArrayStore, pad: str) -> list[str]:
        name, i, v = self.names("a", s.array.name), self.expr(s.index), self.expr(s.value)
        half = getattr(s.array.dtype, "name", "")  # pointer arrays have no name
        if half == "float16":  # a 16-bit shared array converts (loop.py)
            self.need("f16")
            return [pad + self.d.f16_store.format(p=f"(&{name}[{i}])", v=v)]
        if half == "bfloat16":
            self.need("bf16")
            return [f"{pad}{name}[{i}] = kd_f32_to_bf16({v});"]
        return [f"{pad}{name}[{i}] = {v};"]

    def _store(self, s: loop.Store, pad: str) -> list[str]:
        base, idx = self._element(s.ptr)
        v = self.expr(s.value)
        pointee = s.ptr.dtype.pointee.name
        if pointee == "float16":
            self.need("f16")
            stmt = self.d.f16_store.format(p=f"({base} + {idx})" if idx != "0" else base, v=v)
        elif pointee == "bfloat16":
            self.need("bf16")
            stmt = f"{base}[{idx}] = kd_f32_to_bf16({v});"
        else:
            stmt = f"{base}[{idx}] = {v};"
        mask = self.expr(s.mask) if s.mask is not None else None
        return self._guard(mask, stmt, pad)

    def _atomic(self, s: loop.AtomicRMW | loop.AtomicCAS, pad: str) -> list[str]:
        """An atomic in the dialect's spelling (c_atomics.py), between the fences its memory
        semantics ask for."""
        pointee = s.ptr.dtype.pointee.name
        cas = isinstance(s, loop.AtomicCAS)
        op = "cas" if cas else s.op
        call = self.d.atomics.call(op, pointee, s.scope, self.expr(s.ptr), self.expr(s.value),
                                   self.expr(s.cmp) if cas else None)
        if call is None:
            raise CompilationError(f"atomic_{op} on {pointee} elements has no {self.d.name} "
                                   "form (kdsl/language/semantic.py lists the supported types)",
                                   s.loc)
        for name, text in call.helpers:
            self.atomic_helpers.setdefault(name, text)
        self.uses_int64_atomics |= "int64" in call.needs
        self.uses_int64_ext_atomics |= "int64_ext" in call.needs
        if "bf16" in call.needs:
            self.need("bf16")
        stmt = f"{self.expr(s.result)} = {call.expr};" if s.result is not None else \
            f"{call.expr};"
        fence = self.d.atomics.fence[s.scope]
        lines = ([fence] if s.sem in ("release", "acq_rel") else []) + [stmt] \
            + ([fence] if s.sem in ("acquire", "acq_rel") else [])
        if s.mask is None:
            return [pad + line for line in lines]
        if len(lines) == 1:
            return self._guard(self.expr(s.mask), stmt, pad)
        return ([f"{pad}if ({self.expr(s.mask)}) {{"] + [f"{pad}    {x}" for x in lines]
                + [f"{pad}}}"])

    def _print(self, s: loop.Print, pad: str) -> list[str]:
        """`printf` of a Loop IR `Print` (its Python format translated field by field)."""
        import string

        parts, args = [], []
        fields = iter(s.args)
        for literal, field_name, spec, _ in string.Formatter().parse(s.fmt):
            parts.append(_c_string_text(literal))
            if field_name is None:
                continue
            x = next(fields)
            conv, arg = self._printf_field(spec or "", x)
            parts.append(conv)
            args.append(arg)
        text = "".join(parts) + "\\n"
        return [f'{pad}printf("{text}"{"".join(", " + a for a in args)});']

    def _printf_field(self, spec: str, x: loop.Expr) -> tuple[str, str]:
        """(printf conversion, argument) of one `{:spec}` field of a Print: `f` (a float, which
        varargs promote to double), `[N]d` (an integer), `0Nx` (an unsigned integer, hex)."""
        t = x.dtype
        e = self.expr(x)
        if spec == "f":
            return "%f", e
        hexa, width = spec.endswith("x"), spec[:-1]
        unsigned = hexa or not (t.is_signed or t.is_bool)
        if t.bits == 64:
            mod, cast = self.d.printf_int64, self.d.types["uint64" if unsigned else "int64"]
        else:
            mod, cast = "", "unsigned int" if unsigned else "int"
        return f"%{width}{mod}{'x' if hexa else 'u' if unsigned else 'd'}", f"(({cast})({e}))"

    def _for(self, s: loop.For, pad: str) -> list[str]:
        vector = self.simd.loop(s, pad)
        if vector is not None:
            return vector
        v = self.expr(s.var)
        lo, hi, step = self.expr(s.lo), self.expr(s.hi), self.expr(s.step)
        if isinstance(s.step, loop.Const):
            cond = f"{v} {'<' if s.step.value > 0 else '>'} {hi}"
        else:
            cond = f"({step} > 0 ? {v} < {hi} : {v} > {hi})"
        inc = f"{v}++" if isinstance(s.step, loop.Const) and s.step.value == 1 else \
            f"{v} += {step}"
        return (self.simd.pragma(s, pad) + [f"{pad}for ({v} = {lo}; {cond}; {inc}) {{"]
                + self.stmts(s.body, pad + "    ") + [f"{pad}}}"])

    def _while(self, s: loop.While, pad: str) -> list[str]:
        inner = pad + "    "
        return ([f"{pad}while (1) {{"] + self.stmts(s.cond_body, inner)
                + [f"{inner}if (!{self.expr(s.cond)}) break;"] + self.stmts(s.body, inner)
                + [f"{pad}}}"])

    def _if(self, s: loop.If, pad: str) -> list[str]:
        out = [f"{pad}if ({self.expr(s.cond)}) {{"] + self.stmts(s.then, pad + "    ")
        if s.orelse:
            out += [f"{pad}}} else {{"] + self.stmts(s.orelse, pad + "    ")
        out.append(f"{pad}}}")
        if self.d.extra.get("join_barrier") and _has_barrier(s.then + s.orelse):
            # The branch is uniform (the lowering's invariant), so every thread reaches this
            # barrier too.  PoCL's work-group compiler (3.1) otherwise skips the statements
            # after such an `if` when a loop with barriers precedes it.
            out.append(pad + self.d.barrier)
        return out

    def _barrier(self, s: loop.Barrier, pad: str) -> list[str]:
        return [pad + self.d.barrier]

    def _comment(self, s: loop.Comment, pad: str) -> list[str]:
        return [f"{pad}// {line}" for line in s.text.splitlines() or [""]]

    def _vector(self, ptr: loop.Expr, n: int) -> tuple[str, list[str], int, int]:
        """An n-element access as pieces of at most 16 bytes: (vector type, the pointer
        expression of each piece as a pointer to it, elements per piece, elements per vector
        lane).  Pieces of 2 or 4 elements use the built-in vector type of the element's bits
        (float4, ushort4, double2); pieces of 8 or 16 narrow elements (float16, int8) use
        32-bit words (uint4), `per_lane` elements in each."""
        pointee = ptr.dtype.pointee
        size = max(pointee.itemsize, 1)
        per = min(n, 16 // size)
        if pointee.name not in self.d.vector_types or n % per or per not in (2, 4, 8, 16):
            raise NotImplementedError(f"{self.d.name}: no vector access of {n} x {pointee}")
        if per <= 4:
            vt, per_lane = f"{self.d.vector_types[pointee.name]}{per}", 1
        else:
            vt, per_lane = f"{self.d.vector_types['uint32']}{per * size // 4}", 4 // size
        base, idx = self._element(ptr)
        ptrs = []
        for first in range(0, n, per):
            at = idx if not first else (str(first) if idx == "0" else f"{idx} + {first}")
            p = f"{base} + {at}" if at != "0" else base
            ptrs.append(self.d.vector_ptr.format(V=f"{self.d.global_qual}{vt}", p=p))
        return vt, ptrs, per, per_lane

    _LANES = "xyzw"

    def _lane_bits(self, pointee: DType) -> str:
        """C type of the bits of one element packed in a 32-bit word (float16 as ushort)."""
        return "unsigned short" if pointee.name == "float16" else self.mem_type(pointee)

    def _vec_load(self, s: loop.VecLoad, pad: str) -> list[str]:
        vt, ptrs, per, per_lane = self._vector(s.ptr, s.dst.size)
        name = self.names("a", s.dst.name)
        pointee = s.ptr.dtype.pointee
        lane_in = self.d.vector_lane_in.get(pointee.name, "{c}")
        if pointee.name == "bfloat16":
            self.need("bf16")
        bits = 8 * max(pointee.itemsize, 1)
        lines = []
        for piece, vp in enumerate(ptrs):
            lines.append(f"{pad}{{ {vt} kd_v = *{vp};")
            for j in range(per):
                lane = f"kd_v.{self._LANES[j // per_lane]}"
                if per_lane > 1:  # the element's bits in its word
                    shift = bits * (j % per_lane)
                    lane = f"(({self._lane_bits(pointee)})({lane} >> {shift}))" if shift else \
                        f"(({self._lane_bits(pointee)}){lane})"
                lines.append(f"{pad}  {name}[{piece * per + j}] = {lane_in.format(c=lane)};")
            lines[-1] += " }"
        if s.mask is None:
            return lines
        return [f"{pad}if ({self.expr(s.mask)}) {{"] + [f"    {x}" for x in lines] + [f"{pad}}}"]

    def _async_copy(self, s: loop.AsyncCopy, pad: str) -> list[str]:
        self.need("async_copy")
        dst = self.shared_address(s.dst, s.index)
        pred = self.expr(s.mask) if s.mask is not None else "true"
        return [f"{pad}kd_cp_async16({dst}, {self.expr(s.ptr)}, {pred});"]

    def _prefetch(self, s: loop.Prefetch, pad: str) -> list[str]:
        d = self.d.prefetch
        return [pad + d.format(p=self.expr(s.ptr))] if d else []

    def _transpose(self, s: loop.Transpose, pad: str) -> list[str]:
        dst, src = self.names("a", s.dst.name), self.names("a", s.src.name)
        da, sa = self.expr(s.dst_at), self.expr(s.src_at)
        if self.d.simd_shuffle and s.n in (2, 4, 8, 16) and s.src.dtype == float32:
            return self._transpose_vectors(s, pad, dst, src, da, sa)
        # the statement's meaning as loops
        return [f"{pad}for (int kd_ti = 0; kd_ti < {s.n}; kd_ti++)",
                f"{pad}    for (int kd_tj = 0; kd_tj < {s.n}; kd_tj++)",
                f"{pad}        {dst}[({da}) + kd_tj * {s.dst_stride} + kd_ti] = "
                f"{src}[({sa}) + kd_ti * {s.src_stride} + kd_tj];"]

    def _transpose_vectors(self, s: loop.Transpose, pad: str, dst: str, src: str, da: str,
                           sa: str) -> list[str]:
        """n vector loads, the shuffle network of transpose_net.py, n vector stores, in a
        block of its own (the names are local to it)."""
        n, d = s.n, self.d
        vt = d.simd_vector.format(n=n)
        inner = pad + "    "
        out = [f"{pad}{{"]
        out += [f"{inner}{vt} kd_r{i} = "
                + d.simd_load.format(n=n, p=f"&{src}[({sa}) + {i * s.src_stride}]") + ";"
                for i in range(n)]
        out.append(f"{inner}{vt} " + ", ".join(f"kd_t{i}" for i in range(n)) + ";")
        for bit, lo, hi in stages(n):
            for p in range(n):
                if not p & bit:
                    a, b = f"kd_r{p}", f"kd_r{p | bit}"
                    out.append(f"{inner}kd_t{p} = " + d.simd_shuffle.format(
                        a=a, b=b, n=n, mask=", ".join(map(str, lo))) + ";")
                    out.append(f"{inner}kd_t{p | bit} = " + d.simd_shuffle.format(
                        a=a, b=b, n=n, mask=", ".join(map(str, hi))) + ";")
            out += [f"{inner}kd_r{p} = kd_t{p};" for p in range(n)]
        out += [inner + d.simd_store.format(n=n, v=f"kd_r{j}",
                                            p=f"&{dst}[({da}) + {j * s.dst_stride}]")
                for j in range(n)]
        return out + [f"{pad}}}"]

    def _async_wait(self, s: loop.AsyncWait, pad: str) -> list[str]:
        self.need("async_copy")
        if s.pending:
            return [f"{pad}kd_cp_async_wait_pending<{s.pending}>();"]
        return [f"{pad}kd_cp_async_wait();"]

    def _async_commit(self, s: loop.AsyncCommit, pad: str) -> list[str]:
        self.need("async_copy")
        return [f"{pad}kd_cp_async_commit();"]

    def _vec_store(self, s: loop.VecStore, pad: str) -> list[str]:
        vt, ptrs, per, per_lane = self._vector(s.ptr, s.src.size)
        name = self.names("a", s.src.name)
        pointee = s.ptr.dtype.pointee
        lane_out = self.d.vector_lane_out.get(pointee.name, "{x}")
        if pointee.name == "bfloat16":
            self.need("bf16")
        bits = 8 * max(pointee.itemsize, 1)
        unsigned = "unsigned char" if bits == 8 else "unsigned short"
        word = self.d.types["uint32"]
        lines = []
        for piece, vp in enumerate(ptrs):
            lines.append(f"{pad}{{ {vt} kd_v;")
            for w in range(per // per_lane):
                xs = [lane_out.format(x=f"{name}[{piece * per + w * per_lane + j}]")
                      for j in range(per_lane)]
                if per_lane == 1:
                    value = xs[0]
                else:  # the elements' bits packed into one 32-bit word
                    value = " | ".join(
                        f"(({word})({unsigned})({x}) << {bits * j})" if j else
                        f"(({word})({unsigned})({x}))" for j, x in enumerate(xs))
                lines.append(f"{pad}  kd_v.{self._LANES[w]} = {value};")
            lines.append(f"{pad}  *{vp} = kd_v; }}")
        if s.mask is None:
            return lines
        return [f"{pad}if ({self.expr(s.mask)}) {{"] + [f"    {x}" for x in lines] + [f"{pad}}}"]

    def _intrinsic(self, s: loop.Intrinsic, pad: str) -> list[str]:
        if s.name not in self.d.intrinsics:
            raise NotImplementedError(f"{self.d.name}: no intrinsic {s.name}")
        self.intrinsics.add(s.name)
        args = [f"&{self.expr(v)}" for v in s.results] + [self.expr(x) for x in s.args]
        return [f"{pad}{self.d.intrinsics[s.name]}({', '.join(args)});"]

    # -- the whole kernel

    def param(self, p: loop.KParam) -> str:
        name = self.names("v", p.name)
        if isinstance(p.dtype, PointerType):  # (user arrays may alias: never restrict)
            return f"{self.ctype(p.dtype)} {name}"
        # bool is not a legal OpenCL kernel argument type: scalars of int1 arrive as bytes
        ctype = self.mem_type(p.dtype) if p.dtype.is_bool else self.ctype(p.dtype)
        return f"{ctype} {name}"

    def declaration(self, a: loop.Array) -> str:
        vector = self.simd.declaration(a)
        if vector is not None:
            return vector
        offsets, total = shared_layout(self.k)
        if a.space == "shared" and self.d.dynamic_shared and total > self.d.static_shared_bytes:
            # a slice of the dynamic buffer: `float* x = (float*)(kd_smem + offset);`
            ptr = f"{self.mem_type(a.dtype)}*" if not isinstance(a.dtype, PointerType) else \
                f"{self.ctype(a.dtype)}*"
            return (f"{ptr} {self.names('a', a.name)} = ({ptr})({self.d.dynamic_shared} + "
                    f"{offsets[a.name]});  /* [{a.size}] */")
        qual = f"{self.d.shared_qual} " if a.space == "shared" else ""
        if isinstance(a.dtype, PointerType):  # a tile of pointers held per thread
            ct = self.ctype(a.dtype)
            if qual and ct.startswith("__"):  # OpenCL: `__global float* __local x[n]`, an
                # array in local memory of pointers to global (not pointers to local)
                return f"{ct} {qual}{self.names('a', a.name)}[{a.size}];"
            return f"{qual}{ct} {self.names('a', a.name)}[{a.size}];"
        if a.dtype.name in ("float16", "bfloat16") and a.space != "shared":
            raise NotImplementedError(f"array {a.name} of {a.dtype} (register arrays hold "
                                      "float32)")
        return f"{qual}{self.mem_type(a.dtype)} {self.names('a', a.name)}[{a.size}];"

    def render(self) -> str:
        k = self.k
        name = self.names("k", k.name)  # first, so that `kernel_name` predicts it
        # A `Var` carrying a parameter's name refers to that parameter.
        params = [self.param(p) for p in k.params]
        param_names = {p.name for p in k.params}
        arrays = [self.simd.aligned(a, self.declaration(a)) for a in k.arrays]
        variables = [f"{self.ctype(v.dtype)} {self.names('v', v.name)};" for v in k.variables
                     if v.name not in param_names]
        body = self.stmts(k.body, "    ")
        env = _environment()
        template = env.get_template(self.d.template)
        return template.render(
            d=self.d, name=name, params=params, threads=k.threads,
            kernel_attrs=self.simd.kernel_attributes(),
            shared=[a for a, arr in zip(arrays, k.arrays) if arr.space == "shared"],
            registers=[a for a, arr in zip(arrays, k.arrays) if arr.space != "shared"],
            variables=variables, specials=sorted(self.specials.items()), body=body,
            helpers=self._helper_records(), fp64=self.uses_fp64,
            int64_atomics=self.uses_int64_atomics, fast_math=k.options.fast_math,
            int64_ext_atomics=self.uses_int64_ext_atomics,
            intrinsics=sorted(self.intrinsics), dynamic_shared=self.dynamic_shared_bytes(),
            maxnreg=k.options.maxnreg,
        ).rstrip() + "\n"

    def dynamic_shared_bytes(self) -> int:
        """Bytes of the dynamic shared buffer (0: shared arrays are static)."""
        total = shared_layout(self.k)[1]
        return total if self.d.dynamic_shared and total > self.d.static_shared_bytes else 0

    def _helper_records(self) -> list[dict[str, str]]:
        """Helper definitions the template renders, in a stable order."""
        order = ["bf16", "f16", "exp", "sigmoid", "abs", "div", "mod", "max", "min", "fmax",
                 "fmin", "async_copy"]
        records = []
        for kind in order:
            for tname in sorted(self.helpers.get(kind, ())):
                rec = {"kind": kind, "s": tname}
                if tname in self.d.types:
                    ctype = self.d.types[tname]
                    rec.update(T=ctype, W=self.d.wrap_types.get(tname, ctype),
                               signed=tname.startswith("int"),
                               F="d" if tname == "float64" else "f",
                               one="1.0" if tname == "float64" else "1.0f",
                               fmax=self.d.math("maximum", tname) if tname.startswith("float")
                               else "", fmin=self.d.math("minimum", tname)
                               if tname.startswith("float") else "",
                               exp=self.d.math("exp", tname) if tname.startswith("float")
                               else "")
                records.append(rec)
        records += [{"kind": "atomic", "text": text} for text in self.atomic_helpers.values()]
        return records


def _has_barrier(stmts: list[loop.Stmt]) -> bool:
    for s in stmts:
        if isinstance(s, loop.Barrier):
            return True
        for body in (getattr(s, f, None) for f in ("then", "orelse", "body", "cond_body")):
            if body and _has_barrier(body):
                return True
    return False


def _c_string_text(text: str) -> str:
    """`text` inside a C string literal given to printf (quotes, backslashes, % escaped)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "%":
            out.append("%%")
        elif ch == "\n":
            out.append("\\n")
        elif ch.isprintable() and ch.isascii():
            out.append(ch)
        else:
            out.append(f"\\{ord(ch):03o}")
    return "".join(out)


def _environment() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        _ENV = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True,
            lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    return _ENV


_ENV: jinja2.Environment | None = None


def format_const(value: object, t: loop.Type, d: CDialect) -> str:
    """A C literal of type `t` holding exactly `value`."""
    if t.is_bool:
        return "true" if value else "false"
    if t.is_float:
        v = float(value)
        suffix = "f" if t.bits <= 32 else ""
        if np.isnan(v):
            return "NAN" if suffix else "((double)NAN)"
        if np.isinf(v):
            inf = "INFINITY" if suffix else "((double)INFINITY)"
            return inf if v > 0 else f"(-{inf})"
        # The shortest decimal that reads back as the same float32/float64 (NumPy's Dragon4).
        x = np.float32(v) if suffix else np.float64(v)
        positional = v == 0 or 1e-4 <= abs(v) < 1e16
        text = (np.format_float_positional(x, unique=True, trim="0") if positional
                else np.format_float_scientific(x, unique=True, trim="0"))
        text = text.replace(".e", ".0e")
        return f"{text}{suffix}"
    v = int(value)
    lo = -(1 << (t.bits - 1)) if t.is_signed else 0
    if v == lo and t.is_signed and t.bits >= 32:
        # -2147483648 is `-(2147483648)`, which does not fit int: spell it as MIN + 0.
        return f"({lo + 1}{d.int_suffix.get(t.name, '')} - 1)"
    text = f"{v}{d.int_suffix.get(t.name, '')}"
    if t.bits < 32:
        return f"(({d.types[t.name]}){text})"
    return f"({text})" if v < 0 else text


SHARED_ALIGN = 16  # bytes: every slice of a dynamic shared buffer starts at a multiple


def shared_layout(kernel: loop.Kernel) -> tuple[dict[str, int], int]:
    """Byte offset of each shared array in one buffer (declaration order, each aligned to
    `SHARED_ALIGN`) and the buffer's size."""
    offsets: dict[str, int] = {}
    end = 0
    for a in kernel.arrays:
        if a.space == "shared":
            end = -(-end // SHARED_ALIGN) * SHARED_ALIGN
            offsets[a.name] = end
            end += a.size * (8 if isinstance(a.dtype, PointerType) else a.dtype.itemsize)
    return offsets, end


def stored_params(kernel: loop.Kernel) -> set[int]:
    """Indices of the parameters whose NumPy arrays a device backend copies back after a launch
    (`loop.Kernel.stored_indices`)."""
    return set(kernel.stored_indices())


def kernel_name(name: str) -> str:
    """The C identifier `emit` gives a kernel called `name`."""
    return _Names()("k", name)


def emit(kernel: loop.Kernel, dialect: CDialect) -> str:
    """C source of `kernel` in `dialect`."""
    return CEmitter(kernel, dialect).render()


def math_names(suffix_f32: str = "", renames: Mapping[str, str] | None = None
               ) -> Callable[[str, str], str]:
    """(op, float type name) -> C function: `name + suffix_f32` for float32 (CUDA's expf) and the
    bare name for float64; `renames` maps Loop IR op names to C names (maximum -> fmax)."""
    table = {"maximum": "fmax", "minimum": "fmin", "fabs": "fabs", **(renames or {})}

    def lookup(op: str, tname: str) -> str:
        name = table.get(op, op)
        return name + suffix_f32 if tname == "float32" else name
    return lookup
