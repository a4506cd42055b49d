"""SIMD loops as OpenCL vector types, for one-thread programs (a CPU OpenCL device).

The shared lowering marks the loop it means as the vector dimension with `Comment("simd")` as
the first statement of its body (the CPU dot's NR loop and its accumulator copies,
kdsl/lowering/dot_cpu.py).  The llvm backend hands that loop to LLVM's vectoriser with loop
metadata.  An OpenCL compiler gets C, and a C loop over a private `float blk[256]` stays a loop
over memory: PoCL 3.1 neither vectorises the micro-kernel nor keeps its accumulators in
registers (matmul 512^3: 29 ms, against 7.9 ms with vector types).  So the C emitter renders
such a loop itself, `lanes` elements per step:

    for (j = 0; j < 32; j++) blk[i*32 + j] = fma(a, bpack[o + j], blk[i*32 + j]);
 -> #pragma unroll
    for (j = 0; j < 32; j += 16) blk_v[(i*32 + j) / 16] = fma((float16)(a), vload16(0, &bpack[o + j]), blk_v[(i*32 + j) / 16]);

A loop qualifies when it runs 0..N by 1 with N a multiple of the lane count, and every
statement of its body is an `ArrayStore` of a float32 array at `base + j` whose value is built
from float32 `Fma`/`add`/`sub`/`mul`, array elements at `base + j` and values that do not
depend on `j` (broadcast).  Any other shape is printed as the scalar loop it was.

An array whose every access is such a vector access at a `base` that is a multiple of the
lane count (`divisor`) is declared as an array of vectors (`float16 blk_v[16]`): under
`#pragma unroll` of the loops around it its indices become constants and the compiler keeps
it in vector registers.  Other arrays are read and written with `vloadN`/`vstoreN`.  The
enclosing loops whose variables a vector array's indices depend on are unrolled when their
trip count is a constant of at most `UNROLL_MAX` (the micro-kernel's MR loop; not the K loop
around it, whose variable only indexes the operand panels).

The values are the same as the scalar loop's: lane `l` computes element `base + j + l` with
the same operations in the same order (no reassociation; `fma` stays fused).

Element loops.  The other innermost loops (a tile's element loop: loads, math, stores) are
left to the compiler's vectoriser, which on an x86 core that "prefers" 256-bit vectors (PoCL
3.1 compiles for `skylake-avx512` so) uses half the lanes the core has.  A loop of at least
`PARALLEL_MIN_TRIP` iterations whose iterations are independent as far as scalars go (`parallel`: every
variable it reads is either not assigned in it or assigned earlier in the same iteration, so
no sum, max or other scalar is carried from one iteration to the next) is printed under
`vectorize_width(lanes)`, and the kernel gets `min_vector_width(lanes * 32)` so that the
wider vectors are legal.  A forced vectoriser may reassociate a carried float reduction:
such loops (the serial sum of `reduce.py`, the partials' final sum) are never marked, so
every result keeps its documented order.  A `simd` loop the plan cannot print (a CPU dot's
row of b computed from global loads, `_b_row`) is marked so whatever its trip count: it is
the vector dimension, and PoCL's own choice (8 lanes, the row stored in halves and read back
16 wide) failed store forwarding.  Memory dependences are still the compiler's to
check (forcing skips its cost model, not its legality analysis).  Softmax 1024x4096 on PoCL:
10.8-12.5 ms -> 9 ms.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from math import gcd

from kdsl.ir import loop
from kdsl.ir.types import float32

SIMD_HINT = loop.SIMD_HINT
#: Enclosing loops of at most this many iterations around vector-array accesses are unrolled.
UNROLL_MAX = 16
#: Element loops shorter than this are left to the compiler's cost model: LLVM unrolls a short
#: constant loop fully before it vectorises (the forced width then has nothing to act on and
#: clang says so, "unsupported transformation ordering"), and forcing skips the cost model.
#: 64 takes in the attention's 64-wide tile loops: once its exp was `kd_exp_float32` (branch
#: free) PoCL vectorised them 8 wide by its cost model, 16 wide when forced: 4.46-4.50 ->
#: 3.96-4.08 ms at 8 x 512 x 64 (llvm 2.8 ms; Emerald Rapids, 2026-12-03).
PARALLEL_MIN_TRIP = 64
#: Register arrays of at least this many bytes start on a cache line in one-thread code, as
#: on the llvm backend (backends/llvm.py ARRAY_ALIGN): their vector loads and stores then never
#: split across two lines.  The generated matmul 512^3 kernel on one PoCL thread: 10.5-12.4
#: -> 7.7-12.0 ms (noisy host; the llvm backend measured 1.1-1.3x for the same rule).
ARRAY_ALIGN = 64
#: Element-wise float ops the vector form prints as OpenCL vector operators.
VECTOR_BINARY = {"add": "+", "sub": "-", "mul": "*"}
#: Lane counts tried, widest first (OpenCL vector types of float).
LANES = (16, 8, 4)


def _parts(e: loop.Expr) -> list:
    """The sub-expressions and arrays of an expression node (every field, so that a node
    added to the Loop IR later is not overlooked)."""
    out = []
    for f in fields(e):
        value = getattr(e, f.name)
        out += [v for v in (value if isinstance(value, (list, tuple)) else [value])
                if isinstance(v, (loop.Expr, loop.Array))]
    return out


def _names(e: loop.Expr) -> set[str]:
    """Variable names read by `e`."""
    if isinstance(e, loop.Var):
        return {e.name}
    out: set[str] = set()
    for sub in _parts(e):
        if isinstance(sub, loop.Expr):
            out |= _names(sub)
    return out


def _terms(e: loop.Expr) -> list[loop.Expr]:
    """The addends of an integer sum (casts between 32-bit integers looked through)."""
    if isinstance(e, loop.Binary) and e.op == "add":
        return _terms(e.a) + _terms(e.b)
    return [e]


def unit_stride(index: loop.Expr, j: str) -> list[loop.Expr] | None:
    """The terms of `index` other than `j` when it is `base + j` (`j` once, coefficient 1,
    `base` free of `j`); None otherwise."""
    terms = _terms(index)
    hits = [t for t in terms if isinstance(t, loop.Var) and t.name == j]
    rest = [t for t in terms if not (isinstance(t, loop.Var) and t.name == j)]
    if len(hits) != 1 or any(j in _names(t) for t in rest):
        return None
    return rest


def divisor(e: loop.Expr, steps: dict[str, int]) -> int:
    """A power-of-two-free bound: an integer that divides every value `e` takes (0: `e` is
    0).  `steps` maps a loop variable to the divisor of its values (gcd of start and step)."""
    if isinstance(e, loop.Const) and isinstance(e.value, int):
        return abs(e.value)
    if isinstance(e, loop.Var):
        return steps.get(e.name, 1)
    if isinstance(e, loop.Cast):
        return divisor(e.x, steps)
    if isinstance(e, loop.Binary):
        a, b = divisor(e.a, steps), divisor(e.b, steps)
        if e.op == "add":
            return gcd(a, b)
        if e.op == "mul":
            return a * b
        if e.op == "shl" and isinstance(e.b, loop.Const):
            return a << e.b.value
    return 1


@dataclass
class SimdPlan:
    """What the emitter renders as vectors: `loops` maps id(For) to its lane count; `arrays`
    maps the name of an array of vectors to its lane count; `unroll` holds the ids of loops
    printed under `#pragma unroll`."""

    loops: dict[int, int] = field(default_factory=dict)
    arrays: dict[str, int] = field(default_factory=dict)
    unroll: set[int] = field(default_factory=set)
    parallel: dict[int, int] = field(default_factory=dict)  # id(For) -> vectorize width
    lanes: int = 0  # the kernel's vector width (its min_vector_width); 0: no vector code


class _Planner:
    def __init__(self, lanes: int) -> None:
        self.lanes = lanes
        self.plan = SimdPlan()
        # array name -> [(lanes, base divisor, enclosing loops the base depends on)]
        self.vector_uses: dict[str, list[tuple[int, int, list[loop.For]]]] = {}
        self.scalar_uses: set[str] = set()

    def walk(self, body: list[loop.Stmt], steps: dict[str, int], outer: list[loop.For]) -> None:
        for s in body:
            if isinstance(s, loop.For):
                if self.simd_loop(s, steps, outer):
                    continue
                inner = dict(steps)
                if isinstance(s.lo, loop.Const) and isinstance(s.step, loop.Const):
                    inner[s.var.name] = gcd(s.lo.value, s.step.value)
                else:
                    inner[s.var.name] = 1
                self.scalar_exprs([s.lo, s.hi, s.step])
                if parallel(s, self.lanes):
                    self.plan.parallel[id(s)] = self.lanes
                self.walk(s.body, inner, outer + [s])
            elif isinstance(s, loop.While):
                self.walk(s.cond_body, steps, outer)
                self.scalar_exprs([s.cond])
                self.walk(s.body, steps, outer)
            elif isinstance(s, loop.If):
                self.scalar_exprs([s.cond])
                self.walk(s.then, steps, outer)
                self.walk(s.orelse, steps, outer)
            else:
                self.scalar_stmt(s)

    def scalar_stmt(self, s: loop.Stmt) -> None:
        """Every array `s` names (in any field: a store's target, a vector access's, an
        intrinsic's) and every array its expressions read is used as scalars."""
        for f in fields(s):
            value = getattr(s, f.name)
            for sub in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(sub, loop.Array):
                    self.scalar_uses.add(sub.name)
                elif isinstance(sub, loop.Expr):
                    self.scalar_exprs([sub])

    def scalar_exprs(self, es: list[loop.Expr]) -> None:
        for e in es:
            for sub in _parts(e):
                if isinstance(sub, loop.Array):
                    self.scalar_uses.add(sub.name)
                else:
                    self.scalar_exprs([sub])

    def simd_loop(self, s: loop.For, steps: dict[str, int], outer: list[loop.For]) -> bool:
        """Plan `s` as a vector loop if it qualifies (module docstring)."""
        body = s.body
        if loop.loop_hint(s) != SIMD_HINT:
            return False
        if not all(isinstance(x, loop.Const) for x in (s.lo, s.hi, s.step)) or \
                s.lo.value != 0 or s.step.value != 1:
            return False
        n = s.hi.value
        lanes = next((w for w in LANES if w <= self.lanes and n % w == 0), 0)
        stores = [st for st in body if not isinstance(st, loop.Comment)]
        j = s.var.name
        uses: list[tuple[str, list[loop.Expr]]] = []
        if not lanes or not stores:
            return False
        for st in stores:
            if not (isinstance(st, loop.ArrayStore) and st.array.dtype == float32
                    and st.array.space == "reg"):
                return False
            base = unit_stride(st.index, j)
            if base is None or not self.vector_expr(st.value, j, uses):
                return False
            uses.append((st.array.name, base))
        self.plan.loops[id(s)] = lanes
        for name, base in uses:
            d = 0
            for t in base:
                d = gcd(d, divisor(t, steps))
            indexing = [f for f in outer if any(f.var.name in _names(t) for t in base)]
            self.vector_uses.setdefault(name, []).append((lanes, d, indexing))
        return True

    def vector_expr(self, e: loop.Expr, j: str, uses: list) -> bool:
        """Whether `e` has a vector form in a loop over `j` (recording its array accesses)."""
        if j not in _names(e):
            self.scalar_exprs([e])  # a broadcast value: its reads are scalar reads
            return True
        if isinstance(e, loop.Index):
            base = unit_stride(e.index, j)
            if base is None or e.array.dtype != float32 or e.array.space != "reg":
                return False
            uses.append((e.array.name, base))
            return True
        if e.dtype != float32:
            return False
        if isinstance(e, loop.Fma):
            return all(self.vector_expr(x, j, uses) for x in (e.a, e.b, e.c))
        if isinstance(e, loop.Binary) and e.op in VECTOR_BINARY:
            return self.vector_expr(e.a, j, uses) and self.vector_expr(e.b, j, uses)
        return False

    def finish(self, kernel: loop.Kernel) -> SimdPlan:
        for a in kernel.arrays:
            uses = self.vector_uses.get(a.name)
            if not uses or a.name in self.scalar_uses or a.space != "reg":
                continue
            lanes = {w for w, _, _ in uses}
            if len(lanes) != 1:
                continue
            w = lanes.pop()
            if a.size % w or any(d % w for _, d, _ in uses):  # (d == 0: base 0, aligned)
                continue
            self.plan.arrays[a.name] = w
            for _, _, outer in uses:
                for f in outer:
                    if all(isinstance(x, loop.Const) for x in (f.lo, f.hi, f.step)) and \
                            f.step.value > 0 and (f.hi.value - f.lo.value) <= UNROLL_MAX * f.step.value:
                        self.plan.unroll.add(id(f))
        return self.plan


#: statement fields that name what is written, not read
_WRITTEN = ("var", "results")


def _reads(s: loop.Stmt) -> set[str]:
    """Variable names a (non-compound) statement reads."""
    out: set[str] = set()
    for f in fields(s):
        if f.name in _WRITTEN:
            continue
        value = getattr(s, f.name)
        for sub in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(sub, loop.Expr):
                out |= _names(sub)
    return out


def _assigned(body: list[loop.Stmt]) -> set[str]:
    out: set[str] = set()
    for s in body:
        if isinstance(s, loop.Assign):
            out.add(s.var.name)
        elif isinstance(s, loop.If):
            out |= _assigned(s.then) | _assigned(s.orelse)
        elif isinstance(s, loop.Intrinsic):
            out |= {v.name for v in s.results}
    return out


#: statements an element loop may hold (anything else: not marked)
_PLAIN = (loop.Assign, loop.ArrayStore, loop.Store, loop.Comment)


def parallel(s: loop.For, lanes: int) -> bool:
    """Whether `s` is an innermost loop of at least `lanes` iterations that carries no
    scalar from one iteration to the next (module docstring, "Element loops")."""
    # (a SIMD loop of the plan never gets here; one it could not print, such as the CPU dot's
    # row of b evaluated where it is read, dot_cpu.py `_b_row`, is the vector dimension the
    # lowering meant: its width is forced whatever its trip count.  Left to its cost model,
    # PoCL vectorised that row 8 wide, stored it in two halves and read it back as one 16-wide
    # vector, a failed store-to-load forward on 38% of the samples: quant_matmul 16 x 4096 x
    # 4096 int8 6.3 -> 3.6 ms.)
    least = lanes if loop.loop_hint(s) == SIMD_HINT else max(lanes, PARALLEL_MIN_TRIP)
    if not all(isinstance(x, loop.Const) for x in (s.lo, s.hi, s.step)) or s.step.value != 1 \
            or s.hi.value - s.lo.value < least:
        return False
    body = s.body
    carried = _assigned(body)
    defined: set[str] = set()
    for st in body:
        if isinstance(st, loop.If):
            if any(not isinstance(x, _PLAIN) for x in st.then + st.orelse):
                return False
            reads = set(_names(st.cond)).union(*(_reads(x) for x in st.then + st.orelse))
            if (reads & carried) - defined:
                return False
            continue
        if not isinstance(st, _PLAIN):
            return False
        if (_reads(st) & carried) - defined:
            return False
        if isinstance(st, loop.Assign):
            defined.add(st.var.name)
    return True


def plan(kernel: loop.Kernel, lanes: int) -> SimdPlan:
    """The vector loops and arrays of a one-thread kernel for `lanes`-wide float vectors (an
    empty plan for lanes < 4 or a kernel of several threads)."""
    if lanes < LANES[-1] or kernel.threads != 1:
        return SimdPlan()
    p = _Planner(lanes)
    p.plan.lanes = lanes
    p.walk(kernel.body, {}, [])
    return p.finish(kernel)


class VectorPrinter:
    """Prints the loops of a `SimdPlan` in the emitter's dialect (`emitter.d`: `simd_vector`,
    `simd_load`, `simd_store` and `unroll_pragma` formats)."""

    def __init__(self, emitter, plan: SimdPlan) -> None:
        self.em = emitter
        self.plan = plan

    def pragma(self, s: loop.For, pad: str) -> list[str]:
        if id(s) in self.plan.unroll:
            return [pad + self.em.d.unroll_pragma]
        w = self.plan.parallel.get(id(s))
        return [pad + self.em.d.vectorize_pragma.format(n=w)] if w else []

    def kernel_attributes(self) -> str:
        """Attributes the kernel needs for its vector code (" __attribute__(...)" or "")."""
        return self.em.d.vector_width_attr.format(bits=32 * self.plan.lanes) \
            if self.plan.lanes else ""

    def declaration(self, a: loop.Array) -> str | None:
        w = self.plan.arrays.get(a.name)
        if w is None:
            return None
        vt = self.em.d.simd_vector.format(n=w)
        return f"{vt} {self.em.names('a', a.name)}[{a.size // w}];"

    def aligned(self, a: loop.Array, decl: str) -> str:
        """`decl` with the cache-line alignment of a one-thread kernel's large register
        array (`ARRAY_ALIGN`); unchanged elsewhere."""
        bits = getattr(a.dtype, "bits", 64)
        if not self.plan.lanes or a.space != "reg" or a.size * bits // 8 < ARRAY_ALIGN \
                or not decl.endswith("];"):
            return decl
        return decl[:-1] + self.em.d.align_attr.format(n=ARRAY_ALIGN) + ";"

    def loop(self, s: loop.For, pad: str) -> list[str] | None:
        """The vector form of a planned loop, or None (print it as a scalar loop)."""
        w = self.plan.loops.get(id(s))
        if w is None:
            return None
        v = self.em.expr(s.var)
        inner = pad + "    "
        body = []
        for st in s.body:
            if isinstance(st, loop.Comment):
                continue
            value = self.vector(st.value, s.var.name, w)
            body.append(inner + self.store(st.array, st.index, value, w))
        return ([pad + self.em.d.unroll_pragma,
                 f"{pad}for ({v} = 0; {v} < {self.em.expr(s.hi)}; {v} += {w}) {{  // simd x{w}"]
                + body + [f"{pad}}}"])

    def _slot(self, a: loop.Array, index: loop.Expr, w: int) -> str:
        return f"{self.em.names('a', a.name)}[({self.em.expr(index)}) / {w}]"

    def _address(self, a: loop.Array, index: loop.Expr) -> str:
        return f"&{self.em.names('a', a.name)}[{self.em.expr(index)}]"

    def store(self, a: loop.Array, index: loop.Expr, value: str, w: int) -> str:
        if a.name in self.plan.arrays:
            return f"{self._slot(a, index, w)} = {value};"
        return self.em.d.simd_store.format(n=w, v=value, p=self._address(a, index))

    def vector(self, e: loop.Expr, j: str, w: int) -> str:
        if j not in _names(e):
            return f"(({self.em.d.simd_vector.format(n=w)})({self.em.expr(e)}))"
        if isinstance(e, loop.Index):
            if e.array.name in self.plan.arrays:
                return self._slot(e.array, e.index, w)
            return self.em.d.simd_load.format(n=w, p=self._address(e.array, e.index))
        if isinstance(e, loop.Fma):
            args = ", ".join(self.vector(x, j, w) for x in (e.a, e.b, e.c))
            return f"{self.em.d.math('fma', 'float32')}({args})"
        assert isinstance(e, loop.Binary)
        return f"({self.vector(e.a, j, w)} {VECTOR_BINARY[e.op]} {self.vector(e.b, j, w)})"
