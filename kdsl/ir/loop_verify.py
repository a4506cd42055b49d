"""The Loop IR verifier: `verify(kernel)` checks the rules of kdsl/ir/loop.py and raises a
`LoopVerifyError` naming the first node that breaks one (its text, and the statement it sits in).

What it checks:
- every node is a known expression or statement class;
- every `Var` is a declared variable or a parameter, with the declared type; every array is
  declared (same name, type, size and space); names are unique;
- types: no expression, variable or array of float16/bfloat16/8-bit float type (they are
  float32 in registers); each op's operand types (arithmetic on equal types, comparisons give
  int1, conditions and masks are int1, pointers where pointers belong, integer indices and
  offsets); an assignment or store writes a value of the destination's (register) type;
- op names: unary and binary ops, `Round` formats, atomic ops, memory semantics and scopes;
  with `ops`, every unary and binary op is one the backend declares (after `legalize`).

The lowering runs it on every kernel (`kdsl.lowering.lower`), so a bad lowering is an error
here, at the node, rather than a KeyError in an emitter; the simulator runs it too. It reads
each expression node once (the IR shares subexpressions), which keeps it cheap.
"""

from __future__ import annotations

from collections.abc import Iterable

from . import loop as L
from .types import DType, PointerType, float32, int1, uint16, uint32

ATOMIC_RMW_OPS = frozenset({"add", "max", "min", "and", "or", "xor", "xchg"})
SEMANTICS = frozenset({"relaxed", "acquire", "release", "acq_rel"})
SCOPES = frozenset({"cta", "gpu", "sys"})
SPECIALS = frozenset({"tid", "pid", "nprog"})
# Unary ops that exist on integers (the others need a float operand).
INT_UNARY = frozenset({"neg", "not", "abs", "floor", "ceil", "isnan", "clz", "popc"})
INT_ONLY_UNARY = frozenset({"clz", "popc"})
# Binary ops whose second operand may have another integer type than the first.
SHIFTS = frozenset({"shl", "shr"})
FLOAT_INT = frozenset({"ldexp", "jn", "yn"})  # (float a, int32 b) -> a's type
FLOAT_ONLY_BINARY = frozenset({"pow", "atan2", "hypot", "copysign", "nextafter", "remainder"})
LOGICAL = frozenset({"land", "lor"})


def has_op(ops: frozenset[str] | None, op: str, t: L.Type) -> bool:
    """Whether a target with `ops` (`Target.ops`: "tanh" for every type, "tanh:float64" for
    one, None for every op) computes `op` on operands of type `t`."""
    return ops is None or op in ops or f"{op}:{getattr(t, 'name', t)}" in ops


class LoopVerifyError(ValueError):
    """A Loop IR kernel breaks a rule of kdsl/ir/loop.py."""


def _access_type(ptr: L.Expr) -> L.Type:
    """The type a load through `ptr` gives and a store takes (loop.py: float32 for 16-bit
    floats, the uint8 code of an 8-bit float)."""
    return L.Load(ptr).dtype


def _is_int(t: L.Type) -> bool:
    return isinstance(t, DType) and t.is_int and not t.is_bool


def _is_float(t: L.Type) -> bool:
    return isinstance(t, DType) and t.is_float


def _bad_register_type(t: object) -> bool:
    if isinstance(t, PointerType):
        return False
    if not isinstance(t, DType):
        return True
    return t.name in ("float16", "bfloat16") or t.is_fp8


class _Verifier:
    def __init__(self, kernel: L.Kernel, ops: frozenset[str] | None):
        self.k = kernel
        self.ops = ops
        self.vars: dict[str, L.Type] = {}
        self.arrays: dict[str, L.Array] = {}
        self.seen: set[int] = set()
        self.stmt: L.Stmt | None = None
        for p in kernel.params:
            self.declare_var(p.name, p.dtype, "parameter")
        for v in kernel.variables:
            if v.name in self.vars and self.vars[v.name] != v.dtype:
                self.fail(f"variable {v.name} declared as {v.dtype} and as "
                          f"{self.vars[v.name]}")
            self.declare_var(v.name, v.dtype, "variable")
        for a in kernel.arrays:
            if a.name in self.arrays:
                self.fail(f"array {a.name} declared twice")
            if a.space not in ("reg", "shared") or a.size <= 0:
                self.fail(f"array {a.name}: space {a.space!r}, size {a.size}")
            if _bad_register_type(a.dtype) and not (a.space == "shared"
                                                    and a.dtype.name in L.HALF_NAMES):
                self.fail(f"array {a.name} of {a.dtype} (arrays hold register types; shared "
                          "arrays also 16-bit floats)")
            self.arrays[a.name] = a

    # ------------------------------------------------------------------------ reporting

    def fail(self, msg: str, node: object = None) -> None:
        where = ""
        if node is not None and isinstance(node, L.Expr):
            where = f" in `{_text(node)}`"
        if self.stmt is not None:
            where += f" (statement `{_stmt_text(self.stmt)}`)"
        raise LoopVerifyError(f"kernel {self.k.name}: {msg}{where}")

    def declare_var(self, name: str, t: L.Type, what: str) -> None:
        if _bad_register_type(t):
            self.fail(f"{what} {name} of type {t} (held as float32 in registers)")
        self.vars.setdefault(name, t)

    # ------------------------------------------------------------------------ expressions

    def expr(self, e: object) -> L.Type:
        if not isinstance(e, L.Expr):
            self.fail(f"{type(e).__name__} {e!r} where an expression belongs")
        check = _EXPR.get(type(e))
        if check is None:
            self.fail(f"unknown expression node {type(e).__name__}")
        if id(e) not in self.seen:
            check(self, e)
            self.seen.add(id(e))
        t = e.dtype
        if _bad_register_type(t):
            self.fail(f"{type(e).__name__} of type {t} (16-bit and 8-bit floats are float32 "
                      "in registers)", e)
        return t

    def want(self, e: L.Expr, pred, what: str, node: L.Expr) -> L.Type:
        t = self.expr(e)
        if not pred(t):
            self.fail(f"{what}, got {t}", node)
        return t

    def cond(self, e: L.Expr, what: str, node: object = None) -> None:
        t = self.expr(e)
        if t != int1:
            self.fail(f"{what} must be int1, got {t}", node if isinstance(node, L.Expr) else e)

    def array(self, a: object, node: object) -> L.Array:
        if not isinstance(a, L.Array):
            self.fail(f"{type(a).__name__} where an array belongs", node)
        d = self.arrays.get(a.name)
        if d is None:
            self.fail(f"array {a.name} is not declared", node)
        if d is not a and (d.dtype, d.size, d.space) != (a.dtype, a.size, a.space):
            self.fail(f"array {a.name} used as {a.space} {a.dtype}[{a.size}], declared "
                      f"{d.space} {d.dtype}[{d.size}]", node)
        return a

    def var(self, v: object, node: object) -> L.Var:
        if not isinstance(v, L.Var):
            self.fail(f"{type(v).__name__} where a variable belongs", node)
        t = self.vars.get(v.name)
        if t is None:
            self.fail(f"variable {v.name} is not declared", node)
        if t != v.dtype:
            self.fail(f"variable {v.name} used as {v.dtype}, declared {t}", node)
        return v

    def _const(self, e: L.Const) -> None:
        if not isinstance(e.dtype, (DType, PointerType)):
            self.fail(f"constant of type {e.dtype!r}", e)

    def _var(self, e: L.Var) -> None:
        self.var(e, e)

    def _special(self, e: L.Special) -> None:
        if e.kind not in SPECIALS or not 0 <= e.axis < 3:
            self.fail(f"special {e.kind!r} axis {e.axis}", e)

    def _index(self, e: L.Index) -> None:
        self.array(e.array, e)
        self.want(e.index, _is_int, "an array index must be an integer", e)

    def _shared_row(self, e: L.SharedRow) -> None:
        self._pair_bits(e)  # the same rules: a 16-bit shared array, an integer index

    def _pair_bits(self, e: L.PairBits | L.SharedRow) -> None:
        a = self.array(e.array, e)
        half = isinstance(a.dtype, DType) and a.dtype.name in L.HALF_NAMES
        ok = (half and a.space == "shared") or (
            isinstance(e, L.PairBits) and a.space == "reg" and a.dtype == uint16)
        if not ok:
            self.fail(f"{type(e).__name__} of {a.space} {a.dtype} array {a.name} (16-bit "
                      "shared arrays, or uint16 register arrays for PairBits)", e)
        self.want(e.index, _is_int, "an array index must be an integer", e)

    def _unary(self, e: L.Unary) -> None:
        if e.op not in L.UNARY:
            self.fail(f"unknown unary op {e.op!r}", e)
        t = self.expr(e.x)
        self._declared(e.op, t, e)
        if isinstance(t, PointerType):
            self.fail(f"{e.op} of a pointer", e)
        if e.op in INT_ONLY_UNARY and not _is_int(t):
            self.fail(f"{e.op} needs an integer operand, got {t}", e)
        if e.op not in INT_UNARY and not _is_float(t):
            self.fail(f"{e.op} needs a float operand, got {t}", e)

    def _binary(self, e: L.Binary) -> None:
        if e.op not in L.BINARY and e.op not in L.COMPARE:
            self.fail(f"unknown binary op {e.op!r}", e)
        a, b = self.expr(e.a), self.expr(e.b)
        self._declared(e.op, a, e)
        if e.op in L.COMPARE:
            if a != b:
                self.fail(f"{e.op} of {a} and {b}", e)
            return
        if isinstance(a, PointerType) or isinstance(b, PointerType):
            self.fail(f"{e.op} of a pointer (PtrAdd/PtrDiff move pointers)", e)
        if e.op in LOGICAL:
            if a != int1 or b != int1:
                self.fail(f"{e.op} needs int1 operands, got {a} and {b}", e)
        elif e.op in SHIFTS:
            if not (_is_int(a) or a == int1) or not (_is_int(b) or b == int1):
                self.fail(f"{e.op} needs integer operands, got {a} and {b}", e)
        elif e.op in FLOAT_INT:
            if not _is_float(a) or not _is_int(b):
                self.fail(f"{e.op} needs (float, integer) operands, got {a} and {b}", e)
        elif a != b:
            self.fail(f"{e.op} of {a} and {b} (operands of one type)", e)
        elif e.op in FLOAT_ONLY_BINARY and not _is_float(a):
            self.fail(f"{e.op} needs float operands, got {a}", e)

    def _declared(self, op: str, t: L.Type, e: L.Expr) -> None:
        if op not in L.COMPARE and not has_op(self.ops, op, t):
            self.fail(f"op {op!r} on {t} is not one the backend has (kdsl/lowering/legalize.py "
                      "decomposes such ops)", e)

    def _select(self, e: L.Select) -> None:
        self.cond(e.cond, "a select's condition", e)
        a, b = self.expr(e.a), self.expr(e.b)
        if a != b:
            self.fail(f"select of {a} and {b}", e)

    def _cast(self, e: L.Cast) -> None:
        src = self.expr(e.x)
        dst = e.dtype
        if isinstance(src, PointerType) != isinstance(dst, PointerType):
            other = dst if isinstance(src, PointerType) else src
            if not _is_int(other):
                self.fail(f"cast between a pointer and {other} (addresses are integers)", e)

    def _bitcast(self, e: L.Bitcast) -> None:
        src, dst = self.expr(e.x), e.dtype
        if isinstance(src, PointerType) and isinstance(dst, PointerType):
            return
        if isinstance(src, PointerType) or isinstance(dst, PointerType):
            self.fail(f"bitcast between {src} and {dst} (a pointer converts with Cast)", e)
        if src.bits != dst.bits:
            self.fail(f"bitcast of {src} to {dst} (widths differ)", e)

    def _round(self, e: L.Round) -> None:
        if e.fmt not in ("float16", "bfloat16"):
            self.fail(f"round to {e.fmt!r}", e)
        self.want(e.x, lambda t: t == L.float32, "Round takes a float32", e)

    def _fma(self, e: L.Fma) -> None:
        ts = {self.expr(x) for x in (e.a, e.b, e.c)}
        if len(ts) != 1 or isinstance(next(iter(ts)), PointerType):
            self.fail(f"fma of {sorted(map(str, ts))}", e)

    def _ptradd(self, e: L.PtrAdd) -> None:
        self.want(e.ptr, lambda t: isinstance(t, PointerType), "PtrAdd needs a pointer", e)
        self.want(e.offset, _is_int, "a pointer offset must be an integer", e)

    def _ptrdiff(self, e: L.PtrDiff) -> None:
        for x in (e.ptr, e.base):
            self.want(x, lambda t: isinstance(t, PointerType), "PtrDiff needs pointers", e)

    def _load(self, e: L.Load) -> None:
        self.want(e.ptr, lambda t: isinstance(t, PointerType), "Load needs a pointer", e)
        if e.mask is not None:
            self.cond(e.mask, "a load's mask", e)
        if e.other is not None and self.expr(e.other) != e.dtype:
            self.fail(f"a load's `other` of {e.other.dtype}, the load gives {e.dtype}", e)

    # ------------------------------------------------------------------------- statements

    def stmts(self, body: Iterable[object]) -> None:
        if not isinstance(body, list):
            self.fail(f"{type(body).__name__} where a statement list belongs")
        for s in body:
            check = _STMT.get(type(s))
            if check is None:
                self.stmt = None
                self.fail(f"unknown statement node {type(s).__name__}: {s!r}")
            saved, self.stmt = self.stmt, s
            check(self, s)
            self.stmt = saved

    def _value_for(self, value: L.Expr, want: L.Type, what: str) -> None:
        t = self.expr(value)
        if t != want:
            self.fail(f"{what} of type {want} given a {t}", value)

    def _assign(self, s: L.Assign) -> None:
        v = self.var(s.var, None)
        self._value_for(s.value, v.dtype, f"variable {v.name}")

    def _array_store(self, s: L.ArrayStore) -> None:
        a = self.array(s.array, None)
        self.want(s.index, _is_int, "an array index must be an integer", s.index)
        self._value_for(s.value, L.element_type(a.dtype), f"array {a.name}")

    def _pointer(self, p: L.Expr) -> PointerType:
        t = self.expr(p)
        if not isinstance(t, PointerType):
            self.fail(f"a pointer was expected, got {t}", p)
        return t

    def _store(self, s: L.Store) -> None:
        t = self._pointer(s.ptr)
        self._value_for(s.value, _access_type(s.ptr), f"a store through {t}")
        if s.mask is not None:
            self.cond(s.mask, "a store's mask")

    def _atomic(self, s: L.AtomicRMW | L.AtomicCAS) -> None:
        if isinstance(s, L.AtomicRMW) and s.op not in ATOMIC_RMW_OPS:
            self.fail(f"unknown atomic op {s.op!r}")
        if s.sem not in SEMANTICS or s.scope not in SCOPES:
            self.fail(f"atomic semantics {s.sem!r} / scope {s.scope!r}")
        t = self._pointer(s.ptr)
        want = _access_type(s.ptr)
        self._value_for(s.value, want, f"an atomic on {t}")
        if isinstance(s, L.AtomicCAS):
            self._value_for(s.cmp, want, f"an atomic compare on {t}")
        if s.mask is not None:
            self.cond(s.mask, "an atomic's mask")
        if s.result is not None:
            r = self.var(s.result, None)
            if r.dtype != want:
                self.fail(f"an atomic's result {r.name} is {r.dtype}, the old value {want}")

    def _print(self, s: L.Print) -> None:
        if not isinstance(s.fmt, str):
            self.fail("a print's format is not a string")
        for x in s.args:
            self.expr(x)

    def _for(self, s: L.For) -> None:
        v = self.var(s.var, None)
        if not _is_int(v.dtype):
            self.fail(f"loop variable {v.name} of type {v.dtype}")
        for bound in (s.lo, s.hi, s.step):
            self._value_for(bound, v.dtype, f"a bound of loop {v.name}")
        self.stmts(s.body)

    def _while(self, s: L.While) -> None:
        self.stmts(s.cond_body)
        self.cond(s.cond, "a while condition")
        self.stmts(s.body)

    def _if(self, s: L.If) -> None:
        self.cond(s.cond, "an if condition")
        self.stmts(s.then)
        self.stmts(s.orelse)

    def _nothing(self, s: L.Stmt) -> None:
        pass

    def _comment(self, s: L.Comment) -> None:
        if not isinstance(s.text, str):
            self.fail("a comment's text is not a string")

    def _intrinsic(self, s: L.Intrinsic) -> None:
        for x in s.args:
            self.expr(x)
        for r in s.results:
            self.var(r, None)

    def _async_copy(self, s: L.AsyncCopy) -> None:
        t = self._pointer(s.ptr)
        a = self.array(s.dst, None)
        if a.space != "shared" or a.dtype != t.pointee:
            self.fail(f"async copy of {s.ptr.dtype} into {a.space} {a.dtype} array {a.name} "
                      "(a shared array of the pointee type)")
        if s.n * a.dtype.itemsize != 16:
            self.fail(f"async copy of {s.n} x {a.dtype} (16 bytes only)")
        self.want(s.index, _is_int, "an array index must be an integer", s.index)
        if s.mask is not None:
            self.cond(s.mask, "an async copy's mask")

    def _async_wait(self, s: L.AsyncWait) -> None:
        if not isinstance(s.pending, int) or s.pending < 0:
            self.fail(f"async wait for {s.pending!r} pending groups (a count >= 0)")

    def _async_commit(self, s: L.AsyncCommit) -> None:
        pass

    def _prefetch(self, s: L.Prefetch) -> None:
        self._pointer(s.ptr)

    def _transpose(self, s: L.Transpose) -> None:
        d, a = self.array(s.dst, None), self.array(s.src, None)
        if ((d.space, a.space) != ("reg", "reg") or d.dtype != a.dtype
                or d.dtype not in (float32, uint32)):
            self.fail(f"transpose of {a.space} {a.dtype} array {a.name} into {d.space} "
                      f"{d.dtype} array {d.name} (float32 or uint32 register arrays, alike)")
        if s.n < 2 or s.n & (s.n - 1):
            self.fail(f"transpose of a {s.n} x {s.n} block (a power of two >= 2 only)")
        for at, stride, arr in ((s.dst_at, s.dst_stride, d), (s.src_at, s.src_stride, a)):
            self.want(at, _is_int, "an array index must be an integer", at)
            if stride < s.n:
                self.fail(f"transpose rows of {arr.name} {stride} apart overlap ({s.n} wide)")

    def _tile_dot(self, s: L.TileDot) -> None:
        if s.kind not in L.TILE_DOT_KINDS:
            self.fail(f"tile dot of kind {s.kind!r} (one of {', '.join(L.TILE_DOT_KINDS)})")
        acc, g, part = L.TILE_DOT_KINDS[s.kind]
        out, a, b = (self.array(x, None) for x in (s.out, s.a, s.b))
        if out.dtype != acc or a.dtype not in (part, uint32) or b.dtype not in (part, uint32) \
                or {out.space, a.space, b.space} != {"reg"}:
            self.fail(f"tile dot {s.kind} of {a.space} {a.dtype} {a.name} and {b.space} "
                      f"{b.dtype} {b.name} into {out.space} {out.dtype} {out.name} (register "
                      f"arrays: {part} or uint32 operands, a {acc} output)")
        tm, tn = s.rows // L.TILE, s.cols // L.TILE
        if (s.rows % L.TILE or s.cols % L.TILE or s.depth % (L.TILE * g) or min(tm, tn) < 1
                or tm * tn + tm + tn > 8):
            self.fail(f"tile dot block {s.rows} x {s.cols} x {s.depth} (multiples of "
                      f"{L.TILE} x {L.TILE} x {L.TILE * g}, in at most 8 tiles)")
        wa = s.depth // g if a.dtype == uint32 else s.depth  # a row's elements
        wb = s.cols if b.dtype == uint32 else s.cols * g
        for at, stride, width in ((s.out_at, s.out_stride, s.cols), (s.a_at, s.a_stride, wa),
                                  (s.b_at, s.b_stride, wb)):
            self.want(at, _is_int, "an array index must be an integer", at)
            if stride < width:
                self.fail(f"tile dot rows {stride} apart overlap ({width} wide)")

    def _vector(self, s: L.VecLoad | L.VecStore) -> None:
        self._pointer(s.ptr)
        a = self.array(s.dst if isinstance(s, L.VecLoad) else s.src, None)
        if a.space != "reg":
            self.fail(f"vector access of {a.space} array {a.name} (register arrays only)")
        if a.dtype != _access_type(s.ptr):
            self.fail(f"vector access of {s.ptr.dtype} into {a.dtype} array {a.name}")
        if s.mask is not None:
            self.cond(s.mask, "a vector access's mask")


_EXPR = {
    L.Const: _Verifier._const, L.Var: _Verifier._var, L.Special: _Verifier._special,
    L.Index: _Verifier._index, L.Unary: _Verifier._unary, L.Binary: _Verifier._binary,
    L.Select: _Verifier._select, L.Cast: _Verifier._cast, L.Bitcast: _Verifier._bitcast,
    L.Round: _Verifier._round, L.Fma: _Verifier._fma, L.PtrAdd: _Verifier._ptradd,
    L.PtrDiff: _Verifier._ptrdiff, L.Load: _Verifier._load, L.PairBits: _Verifier._pair_bits,
    L.SharedRow: _Verifier._shared_row,
}
_STMT = {
    L.Assign: _Verifier._assign, L.ArrayStore: _Verifier._array_store,
    L.Store: _Verifier._store, L.AtomicRMW: _Verifier._atomic, L.AtomicCAS: _Verifier._atomic,
    L.Print: _Verifier._print, L.For: _Verifier._for, L.While: _Verifier._while,
    L.If: _Verifier._if, L.Barrier: _Verifier._nothing, L.Comment: _Verifier._comment,
    L.Intrinsic: _Verifier._intrinsic, L.VecLoad: _Verifier._vector,
    L.VecStore: _Verifier._vector,
    L.AsyncCopy: _Verifier._async_copy, L.AsyncWait: _Verifier._async_wait,
    L.AsyncCommit: _Verifier._async_commit,
    L.Prefetch: _Verifier._prefetch, L.Transpose: _Verifier._transpose,
    L.TileDot: _Verifier._tile_dot,
}


def _text(e: L.Expr) -> str:
    try:
        text = L.format_expr(e)
    except Exception:  # noqa: BLE001 - a malformed node has no printed form
        text = repr(e)
    return text if len(text) <= 160 else text[:157] + "..."


def _stmt_text(s: L.Stmt) -> str:
    try:
        text = L.format_stmts([s], 0)[0]
    except Exception:  # noqa: BLE001
        text = type(s).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def verify(kernel: L.Kernel, ops: frozenset[str] | None = None) -> L.Kernel:
    """Check `kernel` (see the module docstring); returns it.  `ops`: the unary and binary op
    names the backend has, or None for any op of the Loop IR."""
    v = _Verifier(kernel, ops)
    v.stmts(kernel.body)
    return kernel


__all__ = ["LoopVerifyError", "has_op", "verify"]
