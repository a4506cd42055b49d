"""The Tile IR: SSA values of static-shape tiles, one `Op` class with a string kind, structured
control flow (`for`, `while`, `if`) with block arguments, a verifier and a stable text printer.

Ops (operands in order; `attrs` in braces; every value has a `TileType`):

  const            {value}                  -> splat constant of the result type (scalar or tile)
  program_id       {axis}                   -> int32 scalar
  num_programs     {axis}                   -> int32 scalar
  iota             {axis, start}            -> int32 tile; element = start + coordinate along `axis`
                                               (`arange(s, e)` is iota of shape (e-s,), axis 0, start s)
  splat            (x: scalar)              -> tile of x's elem with the result shape
  broadcast        (x)                      -> same rank; dims of size 1 expanded to the result shape
  reshape          (x)                      -> same numel, row-major order (also expand_dims / [:, None])
  trans            (x) {perm}               -> permuted dims
  slice            (x) {start, step}        -> same rank; element c = x[start + step * c] per dim
                                               (static strides, negative or 0 too: flip, split)
  gather           (src, index: int) {axis} -> index's shape, src's elem: src with coordinate
                                               `axis` replaced by index (clamped to the dim)
  histogram        (x: int [N][, mask]) {num_bins} -> int32 [num_bins]: count of each value
                                               in [0, num_bins) where mask (others not counted)
  <binary>         (a, b)                   -> same shape; a and b have equal types except shl/shr
                   add sub mul div(true float division) floordiv (int: C truncation; float: floor)
                   mod (int: C remainder; float: fmod) pow and or xor shl shr maximum minimum
                   atan2 hypot copysign nextafter remainder (IEEE, float only)
                   eq ne lt le gt ge (-> int1)
  <unary>          (x)                      -> same type: neg not (bitwise, or logical on int1)
                   exp exp2 log log2 sqrt rsqrt abs sin cos tanh erf sigmoid floor ceil
                   trunc rint round (half away from zero) tan asin acos atan sinh cosh asinh
                   acosh atanh log1p expm1 cbrt exp10 log10 erfc lgamma tgamma j0 j1 y0 y1
                   (floats); clz popc (integers: leading zero bits, set bits)
  <float-int>      (x: float, n: int32)     -> x's type: ldexp (x * 2**n), jn yn (Bessel
                                               functions of order n at x)
  fma              (a, b, c)                -> a * b + c, single rounding
  where            (cond: int1, a, b)       -> a where cond else b
  cast             (x)                      -> result elem; float->int truncates toward zero,
                                               float->f16/bf16 rounds to nearest even
  bitcast          (x)                      -> same bits, result elem of equal width; between
                                               pointers: the same address, another pointee
  int_to_ptr       (x: int64/uint64)        -> ptr<T>: the pointer at address x (process or
                                               device memory, not an argument buffer)
  ptr_to_int       (p)                      -> int64/uint64: the address p holds
  addptr           (ptr, offset: int)       -> ptr + offset elements
  ptr_offset       (ptr, base: ptr)         -> int64 element offset of ptr from base (same shape;
                                               inserted by checked mode, kdsl/passes/checks.py)
  load             (ptr[, mask, other])     {volatile?} -> elements at ptr (other where mask false)
  store            (ptr, value[, mask])     -> no result
  prefetch         (ptr[, mask])            -> no result; a hint, no semantics (HINT_OPS)
  atomic_rmw       (ptr, value[, mask])     {op, sem, scope} -> old values; op in add max min
                                               and or xor xchg (semantics: kdsl/ir/atomics.py)
  atomic_cas       (ptr, cmp, value[, mask]) {sem, scope} -> old values; writes value where
                                               the old bits equal cmp's (mask: checked mode)
  reduce           (x, ...) {op, axis}      -> x with `axis` removed (scalar when x is 1-D);
                                               op in sum max min argmax argmin (arg* give int32)
                                               on one operand, or custom on n >= 1 operands of
                                               one shape -> n results of their elems: region
                                               combine(a_1..a_n, b_1..b_n) of scalars ending in
                                               `yield(c_1..c_n)`; the region uses only its
                                               arguments (isolated from above)
  scan             (x, ...) {op, axis, reverse} -> inclusive scan along `axis`, results of the
                                               operands' types: y[0] = x[0], y[i] =
                                               combine(y[i-1], x[i]) (reverse: from the end,
                                               y[i] = combine(y[i+1], x[i])); op in sum prod on
                                               one operand, or custom with a region as reduce's
  dot              (a: MxK, b: KxN, acc: MxN) {precision}  -> MxN (acc's elem)
  sparse_dot       (a: MxK/2, meta: int MxK/2, b: KxN, acc: float32 MxN) -> MxN: a 2:4-sparse
                   A given by its kept values and their indices in each group of 4:
                   acc + sum_j a[m, j] * b[4 * (j // 2) + (meta[m, j] & 3), n]
  hint             (x) {multiple_of?, max_contiguous?, max_constancy?} -> x, with a promise
  for              (lo, hi, step, *inits)   region body(iv, *carried) ending in `yield` -> results
                   {num_stages?, loop_unroll_factor?, ...: kd.range's options, hints only}
  while            (*inits)                 region cond(*carried) ending in `condition(c, *carried)`,
                                            region body(*carried) ending in `yield` -> results
  if               (cond)                   regions then, else, each ending in `yield` -> results
  barrier          ()                       all threads of the program wait (kd.debug_barrier)
  print            (*values) {prefix, hex}  prints one line per element of each value
                                            (kdsl/ir/debug_print.py)
  assert           (cond: int1) {msg}       debug mode: cond must hold (rewritten into the
                                            error record by kdsl/passes/checks.py)
  breakpoint       (*values) {names, consts} stops in pdb on the interp backend
  yield            (*values)                terminator
  condition        (c, *values)             terminator of a while's cond region

Shapes are equal on both sides of binary ops: the frontend inserts `broadcast`/`splat` first
(rules in `kdsl/language/semantic.py`).
"""

from __future__ import annotations

import itertools
import math
import struct
from dataclasses import dataclass, field
from typing import Any, Iterator

from ..compile_options import CompileOptions
from .types import DType, PointerType, TileType, int1, int32


@dataclass(frozen=True)
class Loc:
    """Source location of an op: file, line (1-based, in the file) and the source line text."""

    file: str = "<unknown>"
    line: int = 0
    col: int = 0
    text: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


UNKNOWN_LOC = Loc()

BINARY_OPS = frozenset(
    "add sub mul div floordiv mod pow and or xor shl shr maximum minimum".split()
    + ["atan2", "hypot", "copysign", "nextafter", "remainder", "ldexp", "jn", "yn"]
)
# Binary ops defined on floats only (kdsl/ir/mathops.py), and those taking (float, int32).
FLOAT_BINARY = frozenset({"atan2", "hypot", "copysign", "nextafter", "remainder"})
FLOAT_INT_BINARY = frozenset({"ldexp", "jn", "yn"})
COMPARE_OPS = frozenset("eq ne lt le gt ge".split())
UNARY_OPS = frozenset(
    "neg not exp exp2 log log2 sqrt rsqrt abs sin cos tanh erf sigmoid floor ceil".split()
    + ["trunc", "rint", "round", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
       "atanh", "log1p", "expm1", "cbrt", "exp10", "log10", "erfc", "lgamma", "tgamma", "j0",
       "j1", "y0", "y1", "clz", "popc"]
)
INT_ONLY_UNARY = frozenset({"clz", "popc"})
FLOAT_ONLY_UNARY = UNARY_OPS - {"neg", "not", "abs"} - INT_ONLY_UNARY
REDUCE_OPS = frozenset("sum max min argmax argmin".split())
SCAN_OPS = frozenset({"sum", "prod"})
# Ops whose region (a combine function) sees only its own arguments: isolated from above.
ISOLATED_REGIONS = frozenset({"reduce", "scan"})
# Ops computed independently per element on operands and result of one shape.
ELEMENTWISE = (
    BINARY_OPS | COMPARE_OPS | UNARY_OPS
    | {"fma", "where", "cast", "bitcast", "addptr", "ptr_offset", "load", "store", "atomic_rmw",
       "atomic_cas", "hint", "int_to_ptr", "ptr_to_int"}
)
ATOMIC_OPS = frozenset({"atomic_rmw", "atomic_cas"})
ATOMIC_RMW_OPS = ("add", "max", "min", "and", "or", "xor", "xchg")
MEM_SEMANTICS = ("acq_rel", "acquire", "release", "relaxed")  # Triton's; default first
MEM_SCOPES = ("gpu", "cta", "sys")
# Ops that write memory (their first operand is the pointer).
SIDE_EFFECTS = frozenset({"store"}) | ATOMIC_OPS
# Hints: no result and no semantics (a prefetch reads nothing and cannot fault), never removed
# or merged; a target without the capability drops them (kdsl/lowering/prefetch.py).
HINT_OPS = frozenset({"prefetch"})
# Debugging ops: no result, never removed or merged (docs/debugging.md).
DEBUG_OPS = frozenset({"barrier", "print", "assert", "breakpoint"})
TERMINATORS = frozenset({"yield", "condition"})

_ids = itertools.count()


class Value:
    """An SSA value. `owner` is the producing Op, or the Block whose argument it is."""

    __slots__ = ("type", "name", "owner", "id")

    def __init__(self, type: TileType, name: str = "", owner: Any = None):
        self.type = type
        self.name = name
        self.owner = owner
        self.id = next(_ids)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def elem(self):
        return self.type.elem

    def __repr__(self) -> str:
        return f"%{self.name or self.id}:{self.type}"


class Block:
    """A list of ops with block arguments (loop induction variable, carried values)."""

    def __init__(self, args: list[Value] | None = None, ops: list[Op] | None = None):
        self.args: list[Value] = args or []
        for a in self.args:
            a.owner = self
        self.ops: list[Op] = ops or []

    def add_arg(self, type: TileType, name: str = "") -> Value:
        v = Value(type, name, self)
        self.args.append(v)
        return v

    def append(self, op: Op) -> Op:
        self.ops.append(op)
        return op

    @property
    def terminator(self) -> Op | None:
        return self.ops[-1] if self.ops and self.ops[-1].kind in TERMINATORS else None


class Op:
    """One operation. `attrs` values are hashable (ints, floats, strings, tuples, dtypes)."""

    __slots__ = ("kind", "operands", "attrs", "results", "regions", "loc")

    def __init__(
        self,
        kind: str,
        operands: list[Value],
        result_types: list[TileType] = (),
        attrs: dict[str, Any] | None = None,
        regions: list[Block] | None = None,
        loc: Loc = UNKNOWN_LOC,
    ):
        self.kind = kind
        self.operands = list(operands)
        self.attrs = dict(attrs or {})
        self.results = [Value(t, "", self) for t in result_types]
        self.regions = list(regions or [])
        self.loc = loc

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, self.kind
        return self.results[0]

    def key(self) -> tuple:
        """Structural identity for CSE (ops without regions or side effects)."""
        return (
            self.kind,
            tuple(o.id for o in self.operands),
            tuple(sorted(self.attrs.items())),
            tuple(r.type for r in self.results),
        )

    def walk(self) -> Iterator[Op]:
        yield self
        for r in self.regions:
            for op in r.ops:
                yield from op.walk()

    def __repr__(self) -> str:
        return f"Op({self.kind}, {self.operands}, {self.attrs})"


@dataclass
class Param:
    """A kernel parameter: a runtime value (`value` is its block argument) or a constexpr."""

    name: str
    type: TileType | None  # None for constexpr
    value: Value | None = None
    constexpr: Any = None

    @property
    def is_constexpr(self) -> bool:
        return self.type is None


@dataclass
class Function:
    """A kernel after specialisation: runtime params are the body's block arguments."""

    name: str
    params: list[Param]
    body: Block
    loc: Loc = UNKNOWN_LOC
    src_file: str = "<unknown>"
    attrs: dict[str, Any] = field(default_factory=dict)  # records of passes ("checks")
    options: CompileOptions = field(default_factory=CompileOptions)  # of the compile

    @property
    def runtime_params(self) -> list[Param]:
        return [p for p in self.params if not p.is_constexpr]

    def walk(self) -> Iterator[Op]:
        for op in self.body.ops:
            yield from op.walk()


# ----------------------------------------------------------------------------------- printer


_DEFAULT_NAN_BITS = 0x7FF8000000000000


def format_attr(v: Any) -> str:
    """Text of an attribute or constexpr value: Python's `repr` (strings quoted, dtypes by name,
    `inf`/`-inf`/`nan`), except that a NaN other than the default quiet one keeps its sign and
    payload (`-nan`, `nan(0x7ff8000000000001)`), so the text parses back to the same bits
    (`kdsl/ir/parser.py`). A constant folded from `0.0 / 0.0` is such a NaN on most CPUs."""
    if type(v) is float and math.isnan(v):
        bits = struct.unpack("<Q", struct.pack("<d", v))[0]
        if bits & ~(1 << 63) == _DEFAULT_NAN_BITS:
            return "-nan" if bits >> 63 else "nan"
        return f"nan(0x{bits:016x})"
    if type(v) is tuple:
        inner = ", ".join(format_attr(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if type(v) is list:
        return "[" + ", ".join(format_attr(x) for x in v) + "]"
    return repr(v)


def print_function(fn: Function) -> str:
    """Stable text form: values numbered in order of definition, one op per line."""
    names: dict[int, str] = {}

    def name(v: Value) -> str:
        if v.id not in names:
            names[v.id] = f"%{v.name}" if v.name and not v.name[0].isdigit() else f"%{len(names)}"
            if names[v.id] in list(names.values())[:-1]:
                names[v.id] = f"%{v.name}.{len(names)}"
        return names[v.id]

    lines: list[str] = []
    params = []
    for p in fn.params:
        if p.is_constexpr:
            params.append(f"{p.name}: constexpr = {format_attr(p.constexpr)}")
        else:
            params.append(f"{name(p.value)}: {p.type}")
    lines.append(f"func @{fn.name}({', '.join(params)}) {{")

    def attrs_str(op: Op) -> str:
        if not op.attrs:
            return ""
        items = sorted(op.attrs.items())
        return " {" + ", ".join(f"{k}={format_attr(v)}" for k, v in items) + "}"

    def emit_block(block: Block, indent: int) -> None:
        pad = "  " * indent
        for op in block.ops:
            res = ", ".join(name(r) for r in op.results)
            lhs = f"{res} = " if res else ""
            ops = ", ".join(name(o) for o in op.operands)
            types = ", ".join(str(r.type) for r in op.results)
            tail = f" : {types}" if types else ""
            loc = f"  # line {op.loc.line}" if op.loc.line else ""
            if not op.regions:
                lines.append(f"{pad}{lhs}{op.kind}({ops}){attrs_str(op)}{tail}{loc}")
                continue
            lines.append(f"{pad}{lhs}{op.kind}({ops}){attrs_str(op)}{tail} {{{loc}")
            for i, region in enumerate(op.regions):
                args = ", ".join(f"{name(a)}: {a.type}" for a in region.args)
                lines.append(f"{pad}  ^region{i}({args}):")
                emit_block(region, indent + 2)
            lines.append(f"{pad}}}")

    emit_block(fn.body, 1)
    lines.append("}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- verifier


class VerifyError(Exception):
    """The IR breaks an invariant (a compiler bug, not a user error)."""


def _check(cond: bool, op: Op, msg: str) -> None:
    if not cond:
        raise VerifyError(f"{op.kind} at {op.loc}: {msg}")


def _verify_op(op: Op) -> None:
    k, ins, outs = op.kind, op.operands, op.results
    t = outs[0].type if outs else None
    if k in FLOAT_INT_BINARY:
        _check(len(ins) == 2 and ins[0].shape == ins[1].shape == t.shape, op, "shapes differ")
        _check(ins[0].type == t and t.elem.is_float and ins[1].elem == int32, op,
               "needs (float, int32) operands")
    elif k in BINARY_OPS:
        _check(len(ins) == 2 and ins[0].shape == ins[1].shape == t.shape, op, "shapes differ")
        if k in FLOAT_BINARY:
            _check(isinstance(t.elem, DType) and t.elem.is_float, op, "needs a float")
        if k not in ("shl", "shr"):
            _check(ins[0].type == ins[1].type == t, op, f"types differ: {ins[0].type} {ins[1].type}")
    elif k in COMPARE_OPS:
        _check(ins[0].type == ins[1].type, op, "operand types differ")
        _check(t == TileType(ins[0].shape, int1), op, "compare gives int1")
    elif k in UNARY_OPS:
        _check(ins[0].type == t, op, "unary keeps the type")
        if k in FLOAT_ONLY_UNARY:
            _check(isinstance(t.elem, DType) and t.elem.is_float, op, "needs a float")
        elif k in INT_ONLY_UNARY:
            _check(isinstance(t.elem, DType) and t.elem.is_int, op, "needs an integer")
    elif k == "fma":
        _check(all(i.type == t for i in ins) and t.elem.is_float, op, "fma types")
    elif k == "where":
        _check(ins[0].type.elem == int1 and ins[1].type == ins[2].type == t, op, "where types")
        _check(ins[0].shape == t.shape, op, "where shapes")
    elif k in ("cast", "bitcast", "hint", "splat", "broadcast", "reshape", "trans"):
        _check(len(ins) == 1, op, "one operand")
        if k == "splat":
            _check(ins[0].type.is_scalar and ins[0].elem == t.elem, op, "splat of a scalar")
        elif k == "broadcast":
            src = ins[0].shape
            _check(len(src) == len(t.shape) and all(a in (1, b) for a, b in zip(src, t.shape)),
                   op, f"cannot broadcast {src} to {t.shape}")
        elif k == "reshape":
            _check(ins[0].type.numel == t.numel and ins[0].elem == t.elem, op, "reshape numel")
        elif k == "trans":
            perm = op.attrs["perm"]
            _check(tuple(ins[0].shape[p] for p in perm) == t.shape, op, "trans shape")
        elif k in ("cast", "bitcast"):
            _check(ins[0].shape == t.shape, op, "cast keeps shape")
            _check(ins[0].type.is_ptr == t.is_ptr, op, "pointers convert with int_to_ptr, "
                   "ptr_to_int, or a bitcast to another pointer")
        else:
            _check(ins[0].type == t, op, "hint keeps type")
    elif k in ("int_to_ptr", "ptr_to_int"):
        src, dst = (ins[0].type, t) if k == "int_to_ptr" else (t, ins[0].type)
        _check(len(ins) == 1 and ins[0].shape == t.shape, op, f"{k} keeps shape")
        _check(dst.is_ptr and isinstance(src.elem, DType) and src.elem.is_int
               and src.elem.bits == 64, op, f"{k} converts between a pointer and a 64-bit int")
    elif k in ("slice", "gather", "histogram"):
        _verify_indexing(op, t)
    elif k == "addptr":
        _check(ins[0].type.is_ptr and ins[0].shape == ins[1].shape == t.shape, op, "addptr shapes")
        _check(isinstance(ins[1].elem, DType) and ins[1].elem.is_int, op, "integer offset")
    elif k == "ptr_offset":
        _check(ins[0].type.is_ptr and ins[1].type == ins[0].type, op, "ptr_offset operands")
        _check(t.shape == ins[0].shape and t.elem.name == "int64", op, "ptr_offset gives int64")
    elif k == "load":
        _check(ins[0].type.is_ptr and t == TileType(ins[0].shape, ins[0].elem.pointee), op, "load")
        if len(ins) > 1:
            _check(len(ins) == 3 and ins[1].type == TileType(t.shape, int1) and ins[2].type == t,
                   op, "load mask/other")
    elif k in ("store", "atomic_rmw", "atomic_cas"):
        nvals = 2 if k == "atomic_cas" else 1  # (cmp,) value
        _check(ins[0].type.is_ptr and all(
            v.type == TileType(ins[0].shape, ins[0].elem.pointee) for v in ins[1:1 + nvals]),
            op, "store value type")
        if len(ins) > 1 + nvals:
            _check(len(ins) == 2 + nvals and ins[-1].type == TileType(ins[0].shape, int1), op,
                   "store mask")
        if k != "store":
            _check(t == ins[1].type, op, "atomics return the old values")
            _check(op.attrs.get("sem") in MEM_SEMANTICS
                   and op.attrs.get("scope") in MEM_SCOPES, op, "atomic sem/scope")
            _check(k == "atomic_cas" or op.attrs.get("op") in ATOMIC_RMW_OPS, op, "atomic op")
    elif k in HINT_OPS:
        _check(not outs and ins and ins[0].type.is_ptr, op, "prefetch takes pointers")
        _check(len(ins) == 1 or (len(ins) == 2 and ins[1].type == TileType(ins[0].shape, int1)),
               op, "prefetch mask")
    elif k in DEBUG_OPS:
        _check(not outs, op, "debug ops have no result")
        if k == "assert":
            _check(len(ins) == 1 and ins[0].elem == int1, op, "assert takes an int1 value")
    elif k in ISOLATED_REGIONS:
        _verify_combine_op(op)
    elif k == "dot":
        a, b, c = ins
        _check(a.type.rank == b.type.rank == 2 and a.shape[1] == b.shape[0], op, "dot shapes")
        _check(c.shape == (a.shape[0], b.shape[1]) and t == c.type, op, "dot acc")
    elif k == "sparse_dot":
        a, e, b, c = ins
        _check(a.type.rank == b.type.rank == 2 and 2 * a.shape[1] == b.shape[0]
               and e.shape == a.shape and e.elem.is_int, op, "sparse_dot shapes")
        _check(c.shape == (a.shape[0], b.shape[1]) and t == c.type, op, "sparse_dot acc")
    elif k in ("const", "program_id", "num_programs", "iota"):
        _check(not ins, op, "no operands")
        if k in ("program_id", "num_programs"):
            _check(t == TileType((), int32), op, "int32 scalar")
    elif k == "for":
        body = op.regions[0]
        _check(all(i.type.is_scalar for i in ins[:3]), op, "scalar bounds")
        _check([a.type for a in body.args[1:]] == [i.type for i in ins[3:]] == [r.type for r in outs],
               op, "carried types")
        _check(body.terminator is not None and body.terminator.kind == "yield", op, "body yields")
        _check([v.type for v in body.terminator.operands] == [r.type for r in outs], op, "yield types")
    elif k == "if":
        _check(ins[0].type == TileType((), int1) and len(op.regions) == 2, op, "if cond")
        for r in op.regions:
            term = r.terminator
            _check(term is not None and [v.type for v in term.operands] == [x.type for x in outs],
                   op, "if yields")
    elif k == "while":
        cond, body = op.regions
        _check(cond.terminator is not None and cond.terminator.kind == "condition", op, "while cond")
        _check(body.terminator is not None and body.terminator.kind == "yield", op, "while body")
    elif k in TERMINATORS:
        pass
    else:
        raise VerifyError(f"unknown op kind {k!r} at {op.loc}")


def _verify_combine_op(op: Op) -> None:
    """`reduce` and `scan`: built-in kinds on one operand, or `custom` on n operands of one
    shape with a combine region of 2n scalars yielding n."""
    k, ins, outs = op.kind, op.operands, op.results
    kind, ax = op.attrs.get("op"), op.attrs.get("axis")
    builtin = REDUCE_OPS if k == "reduce" else SCAN_OPS
    _check(bool(ins) and (kind in builtin or kind == "custom") and isinstance(ax, int)
           and 0 <= ax < ins[0].type.rank, op, f"{k} op/axis")
    shape = ins[0].shape
    out_shape = shape[:ax] + shape[ax + 1:] if k == "reduce" else shape
    _check(all(i.shape == shape for i in ins) and len(outs) == len(ins), op,
           f"{k} operands of one shape, one result each")
    _check(all(r.shape == out_shape for r in outs), op, f"{k} shape")
    if k == "scan":
        _check(isinstance(op.attrs.get("reverse"), bool), op, "scan reverse is a bool")
    if kind != "custom":
        _check(len(ins) == 1 and not op.regions, op, f"built-in {k} has one operand, no region")
        if k == "scan":
            _check(outs[0].type == ins[0].type, op, "scan keeps the type")
        return
    st = [TileType((), i.elem) for i in ins]
    _check([r.elem for r in outs] == [i.elem for i in ins] and len(op.regions) == 1, op,
           f"custom {k} region")
    r = op.regions[0]
    _check([a.type for a in r.args] == st + st, op, f"combine takes {2 * len(ins)} scalars")
    _check(r.terminator is not None and r.terminator.kind == "yield"
           and [v.type for v in r.terminator.operands] == st, op, "combine yields")


def _verify_indexing(op: Op, t: TileType) -> None:
    """slice, gather and histogram: ops that read their source at other coordinates."""
    ins, k = op.operands, op.kind
    x = ins[0].type
    if k == "slice":
        start, step = tuple(op.attrs["start"]), tuple(op.attrs["step"])
        _check(len(ins) == 1 and t.elem == x.elem and x.rank == t.rank == len(start) == len(step)
               and x.rank > 0, op, "slice keeps the rank and the type")
        for d, (s0, st, n, m) in enumerate(zip(start, step, t.shape, x.shape)):
            _check(0 <= s0 < m and 0 <= s0 + st * (n - 1) < m, op,
                   f"slice dim {d}: start {s0}, step {st}, {n} elements outside [0, {m})")
    elif k == "gather":
        idx, ax = ins[1].type, op.attrs["axis"]
        _check(len(ins) == 2 and x.rank == idx.rank > 0 and 0 <= ax < x.rank, op, "gather rank")
        _check(isinstance(idx.elem, DType) and (idx.elem.is_int or idx.elem.is_bool), op,
               "gather index must be an integer")
        _check(t == TileType(idx.shape, x.elem), op, "gather result: index's shape, src's type")
        _check(all(idx.shape[d] == x.shape[d] for d in range(x.rank) if d != ax), op,
               "gather: index and src differ outside the axis")
    else:
        n = op.attrs["num_bins"]
        _check(x.rank == 1 and isinstance(x.elem, DType) and x.elem.is_int, op,
               "histogram of a 1-D integer tile")
        _check(isinstance(n, int) and n > 0 and t == TileType((n,), int32), op,
               "histogram gives int32 [num_bins]")
        if len(ins) > 1:
            _check(len(ins) == 2 and ins[1].type == TileType(x.shape, int1), op,
                   "histogram mask")


def verify(fn: Function) -> None:
    """Check types and shapes of every op and that every operand is defined before use."""
    defined: set[int] = {p.value.id for p in fn.runtime_params}

    def visit(block: Block, scope: set[int]) -> None:
        scope = set(scope) | {a.id for a in block.args}
        for i, op in enumerate(block.ops):
            for o in op.operands:
                if o.id not in scope:
                    raise VerifyError(f"{op.kind} at {op.loc}: operand {o!r} used before definition")
            if op.kind in TERMINATORS and i != len(block.ops) - 1:
                raise VerifyError(f"{op.kind} at {op.loc}: terminator not last")
            _verify_op(op)
            for r in op.regions:
                # A combine region is isolated: it sees only its own arguments.
                visit(r, set() if op.kind in ISOLATED_REGIONS else scope)
            scope |= {r.id for r in op.results}

    visit(fn.body, defined)


def is_ptr_elem(e: Any) -> bool:
    return isinstance(e, PointerType)
