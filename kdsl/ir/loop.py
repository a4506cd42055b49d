"""The Loop IR: what one thread of a program instance executes.

A program instance (one `program_id`) runs on `Kernel.threads` threads (1 on the CPU: tile
dimensions become loops; `num_warps * warp_size` on OpenCL/CUDA: a work-group / thread block).
The lowering (`kdsl/lowering/lowerer.py`) spreads the elements of a tile over the threads:
flat element `e` (row-major) of a tile lives in thread `e % threads`, register slot
`e // threads`.  Data that crosses threads goes through `shared` arrays between `Barrier`s.

The IR is a small imperative language over scalars with mutable variables (C-like; the LLVM
backend turns variables into allocas that mem2reg promotes):

  expressions (pure, typed by `.dtype`):
    Const(value, dtype)           Var(name, dtype)             Special(kind, axis)
    Index(array, index)           Unary(op, x)                 Binary(op, a, b)
    Select(cond, a, b)            Cast(x, dtype)               Bitcast(x, dtype)
    Round(x, fmt)                 Fma(a, b, c)                 PtrAdd(ptr, offset)
    PtrDiff(ptr, base)            Load(ptr, mask, other)       PairBits(array, index)
    SharedRow(array, index)

  statements:
    Assign(var, value)            ArrayStore(array, index, value)
    Store(ptr, value, mask)       AtomicRMW(op, ptr, value, mask, result, sem, scope)
    AtomicCAS(ptr, cmp, value, mask, result, sem, scope)        Print(fmt, args)
    For(var, lo, hi, step, body)  While(cond_body, cond, body)
    If(cond, then, orelse)        Barrier()                     Comment(text)
    Intrinsic(name, args, results)
    VecLoad(ptr, dst, mask)       VecStore(ptr, src, mask)
    AsyncCopy(dst, index, ptr, n, mask)     AsyncCommit()       AsyncWait(pending)
    Prefetch(ptr)                 (a hint; no semantics)
    Transpose(dst, dst_at, dst_stride, src, src_at, src_stride, n)
    TileDot(kind, out, out_at, out_stride, a, a_at, a_stride, b, b_at, b_stride,
            rows, cols, depth, zero)   (a block of a dot on a CPU's matrix unit)

Types: every expression has a `DType` or `PointerType`.  float16/bfloat16 never appear as the
type of a variable or expression: values of those types are held in float32 (`compute_dtype`)
and `Round(x, "float16" | "bfloat16")` rounds a float32 to the nearest representable value
(ties to even), keeping the float32 type.  `Load` through a `ptr<float16>` gives float32;
`Store`/`AtomicRMW` of a float32 through a `ptr<float16>` converts (exactly, the value having
been rounded already).  A *shared* array may hold float16/bfloat16 elements (the 16-bit
operand copies of tensor-core dots): `Index` of it gives float32 and `ArrayStore` takes a
float32 (converted exactly, as a store through a pointer), and `PairBits(array, i)` reads the
bits of elements i and i + 1 (i even) as one uint32, low half first: the packed register form
tensor-core instructions take.  8-bit floats (`float8e4nv`, ...) are float32 in registers as well,
but memory holds their codes: a `Load` through a `ptr<float8...>` gives the code as a uint8 and
a `Store` takes one; the lowering converts (kdsl/lowering/fp8.py).  Pointers convert to and
from 64-bit integers with `Cast` (the address) and to other pointers with `Bitcast`.  Integer
ops wrap in their type (int8 + int8 is int8).

Atomics: `AtomicRMW.op` is one of add max min and or xor xchg and `AtomicCAS` a compare-and-swap,
with the values of kdsl/ir/atomics.py (the Tile IR interpreter's); `sem` ("relaxed", "acquire",
"release", "acq_rel") and `scope` ("cta", "gpu", "sys") are Triton's; a backend emits code at
least that strong.  `Print(fmt, args)` prints one line, `fmt.format(*args)`: `fmt` is a Python
format string whose fields are `{:d}` `{:Nd}` (integers), `{:f}` (floats) and `{:0Nx}` (an
unsigned integer, hex) in order (kdsl/ir/debug_print.py builds them).

Unary ops:  neg not exp exp2 log log2 sqrt rsqrt abs sin cos tanh erf sigmoid floor ceil isnan,
            and those of kdsl/ir/mathops.py (trunc rint round tan ... lgamma tgamma j0 j1 y0 y1
            on floats, clz popc on integers), with the Tile IR's meaning
Binary ops: add sub mul div (float: IEEE; int: C truncation, x/0 == 0) mod (int: C remainder,
            x%0 == 0; float: fmod) pow and or xor shl shr (arithmetic for signed)
            maximum minimum (float: NaN-propagating) eq ne lt le gt ge (-> int1, float ordered
            except ne) land lor (int1); float atan2 hypot copysign nextafter remainder;
            ldexp jn yn take (float a, int32 b) and give a's type
Special kinds: "tid" (thread index in the program, 0 on the CPU), "pid" and "nprog" with axis.

`Intrinsic` is a named operation with scalar arguments that assigns its result variables: how
a target computes something the IR has no node for (a warp's tensor-core `mma`).  Names are
defined by the passes that emit them (kdsl/lowering/dot_mma.py); a backend spells them
from its dialect table, and the lowering records in `Kernel.intrinsics` how the simulator
(kdsl/ir/loop_interp.py) runs each one the kernel uses (an `IntrinsicSim`).  A
`warp` intrinsic is collective: all lanes of a warp execute it together (like a barrier of
the warp), so it is only emitted for targets whose caps promise it, under warp-uniform control.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from typing import Any

from kdsl.compile_options import CompileOptions

from .tile import Loc
from .types import DType, PointerType, float32, int1, int8, int32, int64, uint8, uint16, uint32

Type = DType | PointerType

UNARY = frozenset(
    "neg not exp exp2 log log2 sqrt rsqrt abs sin cos tanh erf sigmoid floor ceil isnan".split()
    + ["trunc", "rint", "round", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
       "atanh", "log1p", "expm1", "cbrt", "exp10", "log10", "erfc", "lgamma", "tgamma", "j0",
       "j1", "y0", "y1", "clz", "popc"]
)
BINARY = frozenset(
    "add sub mul div mod pow and or xor shl shr maximum minimum land lor".split()
    + ["atan2", "hypot", "copysign", "nextafter", "remainder", "ldexp", "jn", "yn"]
)
COMPARE = frozenset("eq ne lt le gt ge".split())


class Expr:
    dtype: Type


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: Any
    dtype: Type


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """A mutable scalar variable, declared in `Kernel.variables`."""

    name: str
    dtype: Type


@dataclass(frozen=True, eq=False)
class Special(Expr):
    kind: str  # "tid" | "pid" | "nprog"
    axis: int = 0
    dtype: Type = int32


@dataclass(frozen=True, eq=False)
class Array:
    """A per-thread register array (`space="reg"`) or a per-program shared array
    (`space="shared"`, OpenCL `__local`, CUDA `__shared__`) of `size` elements."""

    name: str
    dtype: Type
    size: int
    space: str = "reg"


HALF_NAMES = ("float16", "bfloat16")


def element_type(t: Type) -> Type:
    """The register type of an array element of type t (float32 for 16-bit floats)."""
    return float32 if isinstance(t, DType) and t.name in HALF_NAMES else t


@dataclass(frozen=True, eq=False)
class Index(Expr):
    array: Array
    index: Expr

    @property
    def dtype(self) -> Type:
        return element_type(self.array.dtype)


@dataclass(frozen=True, eq=False)
class SharedRow(Expr):
    """The 32-bit shared-memory address of element `index` (a multiple of 8) of a 16-bit
    shared array: one lane's row of eight elements in a warp-collective matrix load
    (`ldmatrix`), and only ever an argument of such an intrinsic.  In the simulator its value
    is the row itself: the eight elements' 16-bit codes."""

    array: Array
    index: Expr

    @property
    def dtype(self) -> Type:
        return uint32


@dataclass(frozen=True, eq=False)
class PairBits(Expr):
    """Elements `index` (even) and `index + 1` of a 16-bit shared array, or of a uint16
    register array (bit patterns), as the bits of one uint32 (element `index` in the low
    half)."""

    array: Array
    index: Expr

    @property
    def dtype(self) -> Type:
        return uint32


@dataclass(frozen=True, eq=False)
class Unary(Expr):
    op: str
    x: Expr

    @property
    def dtype(self) -> Type:
        return int1 if self.op == "isnan" else self.x.dtype


@dataclass(frozen=True, eq=False)
class Binary(Expr):
    op: str
    a: Expr
    b: Expr

    @property
    def dtype(self) -> Type:
        return int1 if self.op in COMPARE else self.a.dtype


@dataclass(frozen=True, eq=False)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr

    @property
    def dtype(self) -> Type:
        return self.a.dtype


@dataclass(frozen=True, eq=False)
class Cast(Expr):
    """Numeric conversion: float->int truncates toward zero and saturates (NaN -> 0),
    int->float rounds to nearest, int->int wraps or extends by the source's signedness,
    int1 -> 0/1."""

    x: Expr
    dtype: Type


@dataclass(frozen=True, eq=False)
class Bitcast(Expr):
    x: Expr
    dtype: Type


@dataclass(frozen=True, eq=False)
class Round(Expr):
    """Round a float32 to the nearest float16 or bfloat16 value (ties to even); stays float32."""

    x: Expr
    fmt: str  # "float16" | "bfloat16"

    @property
    def dtype(self) -> Type:
        return float32


@dataclass(frozen=True, eq=False)
class Fma(Expr):
    a: Expr
    b: Expr
    c: Expr

    @property
    def dtype(self) -> Type:
        return self.a.dtype


@dataclass(frozen=True, eq=False)
class PtrAdd(Expr):
    """`ptr + offset` elements of the pointee (offset: any integer type, sign-extended)."""

    ptr: Expr
    offset: Expr

    @property
    def dtype(self) -> Type:
        return self.ptr.dtype


@dataclass(frozen=True, eq=False)
class PtrDiff(Expr):
    """`ptr - base` in elements of the pointee, as an int64 (both point into one buffer;
    checked mode compares it with the buffer's extent)."""

    ptr: Expr
    base: Expr

    @property
    def dtype(self) -> Type:
        return int64


@dataclass(frozen=True, eq=False)
class Load(Expr):
    """Read `*ptr` from global memory; with a mask, memory is not touched where the mask is
    false and the value is `other`.  Type: compute type of the pointee (for an 8-bit float,
    uint8: the code)."""

    ptr: Expr
    mask: Expr | None = None
    other: Expr | None = None
    loc: Loc | None = None

    @property
    def dtype(self) -> Type:
        pointee = self.ptr.dtype.pointee
        if isinstance(pointee, DType) and pointee.is_fp8:
            return uint8  # the code; see the module docstring
        return float32 if pointee.name in ("float16", "bfloat16") else pointee


class Stmt:
    pass


@dataclass(eq=False)
class Assign(Stmt):
    var: Var
    value: Expr


@dataclass(eq=False)
class ArrayStore(Stmt):
    array: Array
    index: Expr
    value: Expr


@dataclass(eq=False)
class Store(Stmt):
    ptr: Expr
    value: Expr
    mask: Expr | None = None
    loc: Loc | None = None


@dataclass(eq=False)
class AtomicRMW(Stmt):
    """`result = atomic fetch-<op>(*ptr, value)` where mask; result may be None."""

    op: str
    ptr: Expr
    value: Expr
    mask: Expr | None = None
    result: Var | None = None
    loc: Loc | None = None
    sem: str = "acq_rel"
    scope: str = "gpu"


def AtomicAdd(ptr: Expr, value: Expr, mask: Expr | None = None, result: Var | None = None,
              loc: Loc | None = None, sem: str = "relaxed", scope: str = "gpu") -> AtomicRMW:
    """A relaxed fetch-add (the spelling of the Loop IR before `AtomicRMW`)."""
    return AtomicRMW("add", ptr, value, mask, result, loc, sem, scope)


@dataclass(eq=False)
class AtomicCAS(Stmt):
    """`result = atomic compare-and-swap(*ptr, cmp, value)` where mask: writes value where the
    old bits equal cmp's; result (the old value) may be None."""

    ptr: Expr
    cmp: Expr
    value: Expr
    mask: Expr | None = None
    result: Var | None = None
    loc: Loc | None = None
    sem: str = "acq_rel"
    scope: str = "gpu"


@dataclass(eq=False)
class Print(Stmt):
    """Print one line: `fmt.format(*args)` (fields described in the module docstring)."""

    fmt: str
    args: list[Expr]


@dataclass(eq=False)
class For(Stmt):
    """`for (var = lo; step > 0 ? var < hi : var > hi; var += step) body`.  All threads of a
    program run the same trip count (bounds are uniform) so barriers inside are legal."""

    var: Var
    lo: Expr
    hi: Expr
    step: Expr
    body: list[Stmt]


@dataclass(eq=False)
class While(Stmt):
    """`while (true) { cond_body; if (!cond) break; body }` with a uniform condition."""

    cond_body: list[Stmt]
    cond: Expr
    body: list[Stmt]


@dataclass(eq=False)
class If(Stmt):
    cond: Expr
    then: list[Stmt]
    orelse: list[Stmt] = field(default_factory=list)


@dataclass(eq=False)
class Barrier(Stmt):
    """Work-group barrier with local-memory fence (no-op with one thread)."""


@dataclass(eq=False)
class Comment(Stmt):
    text: str


#: Loop hints: a `For` whose body starts with `Comment(hint)` carries that hint to the code
#: generators (ignored by those that do not know it).  SIMD_HINT: the loop the lowering means
#: as the vector dimension (the CPU dot's NR loop and its accumulator copies): the llvm
#: backend hands it to LLVM's vectoriser (backends/llvm.py `_LOOP_HINTS`), the C emitter
#: prints it with vector types (backends/c_simd.py).
SIMD_HINT = "simd"
#: VECTOR_HINT: an element loop (loads, math, stores) to be vectorised as a loop, not fully
#: unrolled first (kdsl/lowering/mask_version.py's unmasked copies): the llvm backend gives it
#: SIMD_HINT's loop properties; the C emitter treats it as any other element loop.
VECTOR_HINT = "vector"
#: ROLLED_HINT: a loop to keep as a loop, partly unrolled at most (kdsl/lowering/sparse_dot_cpu.py's
#: k loop on a 16-register target: fully unrolled, each iteration's broadcast is invariant in
#: the enclosing column-block loop, LLVM hoists all of them out of it and spills them).
ROLLED_HINT = "rolled"
#: PIPELINE_HINT: `"pipeline N"` on a loop whose cp.async copies may be spread over a ring of N
#: stages (Triton's `num_stages`, kdsl/lowering/async_ring.py, which removes the hint).
PIPELINE_HINT = "pipeline"


def walk(stmts: list[Stmt]) -> Iterator[Stmt]:
    """Every statement of `stmts` and of the statement lists nested in them (a loop's body,
    an if's branches, ...), in order."""
    for s in stmts:
        yield s
        for f in fields(s):
            v = getattr(s, f.name)
            if isinstance(v, list) and v and isinstance(v[0], Stmt):
                yield from walk(v)


def loop_hint(s: For) -> str | None:
    """The hint of loop `s` (the text of its first statement when that is a Comment)."""
    return s.body[0].text if s.body and isinstance(s.body[0], Comment) else None


@dataclass(eq=False)
class Intrinsic(Stmt):
    """`results... = name(args...)`: all arguments are read before any result is written, so
    a result may also be an argument (an accumulator updated in place)."""

    name: str
    args: list[Expr]
    results: list[Var]


@dataclass(eq=False)
class VecLoad(Stmt):
    """`dst[0:n] = ptr[0:n]` (n = `dst.size`, a register array) as ONE access of n consecutive
    elements (backends split one wider than 16 bytes into 16-byte pieces).  The emitter of
    the access (kdsl/lowering/vector.py) proves that `ptr` is aligned to min(n * itemsize, 16)
    bytes.  With a mask (uniform over the n elements), memory is not touched and `dst` is left
    unchanged where it is false."""

    ptr: Expr
    dst: Array
    mask: Expr | None = None
    loc: Loc | None = None


@dataclass(eq=False)
class VecStore(Stmt):
    """`ptr[0:n] = src[0:n]` (n = `src.size`) as one aligned access, like `VecLoad`; values
    convert to the pointee as `Store` does."""

    ptr: Expr
    src: Array
    mask: Expr | None = None
    loc: Loc | None = None


@dataclass(eq=False)
class AsyncCopy(Stmt):
    """`dst[index : index + n] = ptr[0:n]` (n elements, 16 bytes) issued asynchronously from
    global to shared memory, the elements' bits copied as they are; where `mask` is false the
    destination is filled with zeros and nothing is read.  The copy lands at the thread's next
    `AsyncWait`, which must come before any thread reads the destination (CUDA `cp.async`)."""

    dst: Array
    index: Expr
    ptr: Expr
    n: int
    mask: Expr | None = None
    loc: Loc | None = None


@dataclass(eq=False)
class AsyncCommit(Stmt):
    """Close this thread's open `AsyncCopy`s into one group (CUDA `cp.async.commit_group`)."""


@dataclass(eq=False)
class AsyncWait(Stmt):
    """Wait for this thread's `AsyncCopy`s (then a barrier publishes them to the others):
    with `pending` 0 all of them, committed or not; otherwise all but the `pending` most
    recently committed groups (CUDA `cp.async.wait_group`: the copies of a multi-stage ring
    stay in flight while the oldest stage is read, kdsl/lowering/async_ring.py)."""

    pending: int = 0


@dataclass(eq=False)
class Prefetch(Stmt):
    """A hint that `*ptr` will be read soon (the cache line holding it is fetched ahead).  No
    semantics: `ptr` may be any address, out of bounds included; nothing is read, nothing can
    fault, and a backend may drop it (kdsl/lowering/prefetch.py)."""

    ptr: Expr


@dataclass(eq=False)
class Transpose(Stmt):
    """`dst[dst_at + j * dst_stride + i] = src[src_at + i * src_stride + j]` for i, j in
    range(n): an n x n block of one register array of 32-bit elements (float32, or uint32
    words) copied transposed into another of the same type (the CPU dot's packing of a
    transposed operand, kdsl/lowering/dot_cpu.py; the words of a matrix-unit dot's,
    dot_tile.py).  Its meaning is that
    loop nest; a backend with the `transpose_block` capability emits n vector loads, n log2(n)
    two-vector shuffles and n vector stores (backends/llvm.py), the others the loops."""

    dst: Array
    dst_at: Expr
    dst_stride: int
    src: Array
    src_at: Expr
    src_stride: int
    n: int


#: TileDot kinds: (register type of the output, values of k per 32-bit word of the unit, the
#: element type of the operand arrays).
TILE_DOT_KINDS: dict[str, tuple[DType, int, DType]] = {
    "bf16": (float32, 2, uint16),  # bfloat16 bit patterns
    "int8": (int32, 4, int8),
}
#: TileDot blocks are made of 16 x 16 output tiles; a step of k covers 16 words of the unit.
TILE = 16


@dataclass(eq=False)
class TileDot(Stmt):
    """One `rows x cols` block of a dot on a CPU's matrix unit (AMX), from packed operands:

        out[out_at + i * out_stride + j] = (0 if zero else out[...]) + sum over k < depth
                                           of A(i, k) * B(k, j)        (i < rows, j < cols)

    `a` and `b` are register arrays of the kind's operand type (`TILE_DOT_KINDS[kind]`:
    bfloat16 bit patterns as uint16, or int8); the unit reads `g` consecutive values of k as
    one 32-bit word (g = 2 or 4), so b is stored g rows interleaved (the "VNNI" layout):

        A(i, k) = a[a_at + i * a_stride + k]
        B(k, j) = b[b_at + (k // g) * b_stride + g * j + k % g]

    Either may instead be a uint32 array of those words (its index and stride in words: A(i,
    k) part k % g of a[a_at + i * a_stride + k // g], B(k, j) part k % g of b[b_at + (k // g)
    * b_stride + j], the lowest k in the lowest bits), as a word `Transpose` leaves it.

    `rows` and `cols` are multiples of TILE, `depth` of TILE * g; a block takes at most 8 tile
    registers ((rows/16) * (cols/16) accumulators, rows/16 tiles of a, cols/16 of b).  kind
    "bf16": float32 `out`, products exact, the sum in the order and intermediate precision of
    the unit (AMX's is not a sequential fused multiply-add chain), bfloat16 subnormal inputs
    read as zero and subnormal results flushed; "int8": int32 `out`, exact (wrapping) sums.
    Emitted only for targets with the capability "tile_dot_<kind>"
    (kdsl/lowering/dot_tile.py)."""

    kind: str
    out: Array
    out_at: Expr
    out_stride: int
    a: Array
    a_at: Expr
    a_stride: int
    b: Array
    b_at: Expr
    b_stride: int
    rows: int
    cols: int
    depth: int
    zero: bool = False


@dataclass(frozen=True)
class IntrinsicSim:
    """How the simulator runs an `Intrinsic`.  Per thread: `fn(args) -> results`.  With
    `warp=True`: `fn([args of lane 0, ...]) -> [results of lane 0, ...]` for a whole warp."""

    fn: Callable
    warp: bool = False


@dataclass
class KParam:
    name: str
    dtype: Type


@dataclass
class Kernel:
    """A lowered kernel.  `params` are the runtime parameters in call order; `variables` and
    `arrays` are declared at function scope; `threads` is the number of threads per program.

    What the lowering found, for the runtime and the backends:
    options        the compile's options (fast math, maxnreg, ...: kdsl/compile_options.py)
    stored_params  indices of the parameters stored through (device backends copy only those
                   back); None: unknown, every pointer parameter
    shared_bytes   shared memory the arrays declare
    raw_pointers   where the kernel first makes a pointer from an integer (None: never)
    warp_size      threads of a warp (lanes of a warp intrinsic)
    intrinsics     how the simulator runs each `Intrinsic` name the body uses
    attrs          records of passes for the runtime (checked mode's "checks" table)
    """

    name: str
    params: list[KParam]
    body: list[Stmt]
    variables: list[Var] = field(default_factory=list)
    arrays: list[Array] = field(default_factory=list)
    threads: int = 1
    attrs: dict[str, Any] = field(default_factory=dict)
    options: CompileOptions = field(default_factory=CompileOptions)
    stored_params: frozenset[int] | None = None
    shared_bytes: int = 0
    raw_pointers: Loc | None = None
    warp_size: int = 32
    intrinsics: dict[str, IntrinsicSim] = field(default_factory=dict)

    def stored_indices(self) -> tuple[int, ...]:
        """The indices of the parameters stored through, in order (every pointer parameter
        when the lowering did not say)."""
        if self.stored_params is None:
            return tuple(i for i, p in enumerate(self.params) if isinstance(p.dtype, PointerType))
        return tuple(sorted(self.stored_params))


# ----------------------------------------------------------------------------------- printer

_BIN_SYM = {
    "add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "and": "&", "or": "|",
    "xor": "^", "shl": "<<", "shr": ">>", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
    "gt": ">", "ge": ">=", "land": "&&", "lor": "||",
}


def map_operands(e: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    """`e` with `fn` applied to each of its sub-expressions (every `Expr` field, so a node
    added later is covered too); `e` itself when `fn` changes none.  The one rebuild under
    the Loop IR rewrites (kdsl/lowering/legalize.py, prefetch.py)."""
    changes = {}
    for f in fields(e):
        v = getattr(e, f.name)
        if isinstance(v, Expr):
            nv = fn(v)
            if nv is not v:
                changes[f.name] = nv
    return replace(e, **changes) if changes else e


def format_expr(e: Expr) -> str:
    match e:
        case Const(value=v, dtype=t):
            return f"{v!r}:{t}"
        case Var(name=n):
            return n
        case Special(kind=k, axis=a):
            return "tid" if k == "tid" else f"{k}{a}"
        case Index(array=a, index=i):
            return f"{a.name}[{format_expr(i)}]"
        case PairBits(array=a, index=i):
            return f"pair_bits({a.name}[{format_expr(i)}])"
        case SharedRow(array=a, index=i):
            return f"row({a.name}[{format_expr(i)}])"
        case Unary(op=o, x=x):
            return f"{o}({format_expr(x)})"
        case Binary(op=o, a=a, b=b) if o in _BIN_SYM:
            return f"({format_expr(a)} {_BIN_SYM[o]} {format_expr(b)})"
        case Binary(op=o, a=a, b=b):
            return f"{o}({format_expr(a)}, {format_expr(b)})"
        case Select(cond=c, a=a, b=b):
            return f"({format_expr(c)} ? {format_expr(a)} : {format_expr(b)})"
        case Cast(x=x, dtype=t):
            return f"({t})({format_expr(x)})"
        case Bitcast(x=x, dtype=t):
            return f"bitcast<{t}>({format_expr(x)})"
        case Round(x=x, fmt=f):
            return f"round_{f}({format_expr(x)})"
        case Fma(a=a, b=b, c=c):
            return f"fma({format_expr(a)}, {format_expr(b)}, {format_expr(c)})"
        case PtrAdd(ptr=p, offset=o):
            return f"({format_expr(p)} +p {format_expr(o)})"
        case PtrDiff(ptr=p, base=b):
            return f"({format_expr(p)} -p {format_expr(b)})"
        case Load(ptr=p, mask=None):
            return f"*{format_expr(p)}"
        case Load(ptr=p, mask=m, other=o):
            return f"load({format_expr(p)}, mask={format_expr(m)}, other={format_expr(o)})"
    raise TypeError(f"unknown expression {e!r}")


def format_stmts(stmts: list[Stmt], indent: int = 1) -> list[str]:
    pad = "  " * indent
    out: list[str] = []
    for s in stmts:
        match s:
            case Assign(var=v, value=x):
                out.append(f"{pad}{v.name} = {format_expr(x)}")
            case ArrayStore(array=a, index=i, value=x):
                out.append(f"{pad}{a.name}[{format_expr(i)}] = {format_expr(x)}")
            case Store(ptr=p, value=x, mask=m):
                cond = f" if {format_expr(m)}" if m is not None else ""
                out.append(f"{pad}*{format_expr(p)} = {format_expr(x)}{cond}")
            case AtomicRMW(op=o, ptr=p, value=x, mask=m, result=r, sem=sem, scope=sc):
                lhs = f"{r.name} = " if r is not None else ""
                cond = f" if {format_expr(m)}" if m is not None else ""
                out.append(f"{pad}{lhs}atomic_{o}.{sem}.{sc}({format_expr(p)}, "
                           f"{format_expr(x)}){cond}")
            case AtomicCAS(ptr=p, cmp=c, value=x, mask=m, result=r, sem=sem, scope=sc):
                lhs = f"{r.name} = " if r is not None else ""
                cond = f" if {format_expr(m)}" if m is not None else ""
                out.append(f"{pad}{lhs}atomic_cas.{sem}.{sc}({format_expr(p)}, {format_expr(c)}, "
                           f"{format_expr(x)}){cond}")
            case Print(fmt=f, args=a):
                args = "".join(f", {format_expr(x)}" for x in a)
                out.append(f"{pad}print({f!r}{args})")
            case For(var=v, lo=lo, hi=hi, step=st, body=b):
                out.append(f"{pad}for {v.name} in range({format_expr(lo)}, {format_expr(hi)}, "
                           f"{format_expr(st)}):")
                out += format_stmts(b, indent + 1)
            case While(cond_body=cb, cond=c, body=b):
                out.append(f"{pad}while:")
                out += format_stmts(cb, indent + 1)
                out.append(f"{pad}  break unless {format_expr(c)}")
                out += format_stmts(b, indent + 1)
            case If(cond=c, then=t, orelse=e):
                out.append(f"{pad}if {format_expr(c)}:")
                out += format_stmts(t, indent + 1)
                if e:
                    out.append(f"{pad}else:")
                    out += format_stmts(e, indent + 1)
            case Barrier():
                out.append(f"{pad}barrier()")
            case Comment(text=t):
                out.append(f"{pad}# {t}")
            case VecLoad(ptr=p, dst=a, mask=m):
                cond = f" if {format_expr(m)}" if m is not None else ""
                out.append(f"{pad}{a.name}[0:{a.size}] = vload({format_expr(p)}){cond}")
            case VecStore(ptr=p, src=a, mask=m):
                cond = f" if {format_expr(m)}" if m is not None else ""
                out.append(f"{pad}vstore({format_expr(p)}, {a.name}[0:{a.size}]){cond}")
            case AsyncCopy(dst=a, index=i, ptr=p, n=n, mask=m):
                cond = f" if {format_expr(m)} else zeros" if m is not None else ""
                out.append(f"{pad}{a.name}[{format_expr(i)}:+{n}] = async_copy("
                           f"{format_expr(p)}){cond}")
            case AsyncCommit():
                out.append(f"{pad}async_commit()")
            case AsyncWait(pending=n):
                out.append(f"{pad}async_wait({n})" if n else f"{pad}async_wait()")
            case Prefetch(ptr=p):
                out.append(f"{pad}prefetch({format_expr(p)})")
            case Transpose(dst=d, dst_at=da, dst_stride=ds, src=a, src_at=sa, src_stride=ss,
                           n=n):
                out.append(f"{pad}transpose{n}x{n}({d.name}[{format_expr(da)}::{ds}], "
                           f"{a.name}[{format_expr(sa)}::{ss}])")
            case TileDot():
                init = "0" if s.zero else f"{s.out.name}"
                out.append(f"{pad}{s.out.name}[{format_expr(s.out_at)}::{s.out_stride}] = "
                           f"{init} + tile_dot_{s.kind}<{s.rows}x{s.cols}x{s.depth}>("
                           f"{s.a.name}[{format_expr(s.a_at)}::{s.a_stride}], "
                           f"{s.b.name}[{format_expr(s.b_at)}::{s.b_stride}])")
            case Intrinsic(name=n, args=a, results=r):
                lhs = ", ".join(v.name for v in r)
                args = ", ".join(format_expr(x) for x in a)
                out.append(f"{pad}{lhs}{' = ' if r else ''}{n}({args})")
            case _:
                raise TypeError(f"unknown statement {s!r}")
    return out


def print_kernel(k: Kernel) -> str:
    lines = [f"kernel {k.name}({', '.join(f'{p.name}: {p.dtype}' for p in k.params)})"
             f"  threads={k.threads} {{"]
    for a in k.arrays:
        lines.append(f"  {a.space} {a.dtype} {a.name}[{a.size}]")
    if k.variables:
        lines.append("  var " + ", ".join(f"{v.name}: {v.dtype}" for v in k.variables))
    lines += format_stmts(k.body)
    lines.append("}")
    return "\n".join(lines)
