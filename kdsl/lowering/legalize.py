"""`legalize(kernel, target)`: a Loop IR pass that rewrites the unary and binary ops a target
does not have into ops it has, so that a backend lists what it emits (`Target.ops`) instead of
spelling every math function itself.

A target's `ops` names each op it has: `"tanh"` for every type, `"tanh:float64"` for one type
only (the LLVM backend computes float64 `tanh` with libm, and float32 `tanh` through the
decomposition here).  `ops=None` (the default, and the simulator's) means every op of the Loop
IR.  An op the target lacks is replaced by the expression `DECOMPOSITIONS[(op, type)]` builds
from its operands; the decompositions are target-neutral Loop IR (arithmetic, compares, selects,
casts, and ops every target has, such as `exp`), and may themselves use ops a target lacks:
the rewrite repeats until none is left.  A value a decomposition reads several times is
computed once into a fresh variable, assigned just before the statement that holds the op
(inside the statement's own mask for a masked store or atomic).  An op with no decomposition
that the target lacks is a `CompilationError`.

The decompositions (float32; polynomials in float64, range reductions, then one rounding):

  tanh     |x| < 0.625: x * P(x^2), P of degree 6 in float64; else 1 - 2 / (exp(2|x|) + 1);
           the sign copied from x.
  erf      float64 on |x|: < 1 an odd polynomial of degree 7 in x^2; [1, 4) three pieces of
           degree 10; >= 4 is 1; the sign copied.
  sigmoid  e = exp(-|x|); (x >= 0 ? 1 : e) / (1 + e)  (no overflow, denormal tails kept; float32
           and float64).

The polynomials are least-squares fits on Chebyshev nodes against Python's `math.tanh` and
`math.erf` (float64), computed once when first needed; their error is far below float32
resolution.  These are the LLVM backend's former float32 kernels (backends/llvm_math.py keeps
the range-reduced `exp exp2 log log2 sin cos` it builds from bit operations); their results
are unchanged, op for op.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields, replace
from functools import cache

import numpy as np

from kdsl.errors import CompilationError
from kdsl.ir import loop
from kdsl.ir.loop_verify import has_op
from kdsl.ir.types import DType, float32, float64
from kdsl.target import Target

# --------------------------------------------------------------------------- decompositions


class Builder:
    """What a decomposition may do besides building expressions: `let(e)` gives a variable
    holding e's value (computed once, before the statement being rewritten)."""

    def __init__(self, fresh: Callable[[str, loop.Type], loop.Var],
                 legal: Callable[[loop.Expr], loop.Expr]):
        self.fresh = fresh
        self.legal = legal  # e with the ops the target lacks decomposed
        self.stmts: list[loop.Stmt] = []

    def let(self, e: loop.Expr, hint: str = "lg") -> loop.Expr:
        e = self.legal(e)
        if isinstance(e, (loop.Var, loop.Const)):
            return e
        v = self.fresh(hint, e.dtype)
        self.stmts.append(loop.Assign(v, e))
        return v


def _c(v: float, t: DType) -> loop.Const:
    return loop.Const(float(v), t)


def _bin(op: str, a: loop.Expr, b: loop.Expr) -> loop.Binary:
    return loop.Binary(op, a, b)


def _horner(x: loop.Expr, coeffs) -> loop.Expr:
    """coeffs[0] * x^n + ... + coeffs[n] (highest degree first), as multiply-adds."""
    t = x.dtype
    acc: loop.Expr = _c(coeffs[0], t)
    for k in coeffs[1:]:
        acc = _bin("add", _bin("mul", acc, x), _c(k, t))
    return acc


def _cheb(lo: float, hi: float, n: int) -> np.ndarray:
    k = np.arange(n)
    return lo + (hi - lo) * 0.5 * (1 + np.cos(np.pi * (k + 0.5) / n))


@cache
def odd_fit(name: str, hi: float, deg: int) -> tuple[float, ...]:
    """Coefficients (highest first) of P with f(x) ~ x * P(x^2) on (0, hi]."""
    f = np.vectorize(getattr(math, name))
    x = _cheb(1e-3, hi, 8 * deg)
    return tuple(np.polyfit(x * x, f(x) / x, deg).tolist())


@cache
def erf_pieces() -> tuple[tuple[float, ...], ...]:
    """Degree-10 fits of erf on [1,2), [2,3), [3,4) in t = x - (i + 1.5)."""
    f = np.vectorize(math.erf)
    out = []
    for lo in (1.0, 2.0, 3.0):
        x = _cheb(lo, lo + 1, 60)
        out.append(tuple(np.polyfit(x - (lo + 0.5), f(x), 10).tolist()))
    return tuple(out)


def _tanh_f32(b: Builder, x: loop.Expr) -> loop.Expr:
    x = b.let(x, "th_x")
    a = b.let(loop.Unary("abs", x), "th_a")
    ad = b.let(loop.Cast(a, float64), "th_ad")
    small = loop.Cast(_bin("mul", ad, _horner(b.let(_bin("mul", ad, ad), "th_z"),
                                           odd_fit("tanh", 0.625, 6))), float32)
    e = loop.Unary("exp", _bin("add", a, a))
    large = _bin("sub", _c(1.0, float32),
                 _bin("div", _c(2.0, float32), _bin("add", e, _c(1.0, float32))))
    r = loop.Select(_bin("lt", a, _c(0.625, float32)), small, large)
    return _bin("copysign", r, x)


def _erf_f32(b: Builder, x: loop.Expr) -> loop.Expr:
    x = b.let(x, "erf_x")
    a = b.let(loop.Cast(loop.Unary("abs", x), float64), "erf_a")
    small = _bin("mul", a, _horner(b.let(_bin("mul", a, a), "erf_z"), odd_fit("erf", 1.0, 7)))
    # piece 0, 1, 2 for a in [1, 2), [2, 3), [3, 4) (float compares: no int conversion)
    is0 = b.let(_bin("lt", a, _c(2.0, float64)), "erf_p0")
    is1 = b.let(_bin("lt", a, _c(3.0, float64)), "erf_p1")

    def pick(v0: float, v1: float, v2: float) -> loop.Expr:
        return loop.Select(is0, _c(v0, float64), loop.Select(is1, _c(v1, float64), _c(v2, float64)))

    t = b.let(_bin("sub", a, pick(1.5, 2.5, 3.5)), "erf_t")
    pieces = erf_pieces()
    acc: loop.Expr | None = None
    for k in range(len(pieces[0])):
        ck = pick(pieces[0][k], pieces[1][k], pieces[2][k])
        acc = ck if acc is None else _bin("add", _bin("mul", acc, t), ck)
    r = loop.Select(_bin("lt", a, _c(1.0, float64)), small, acc)
    r = loop.Select(_bin("ge", a, _c(4.0, float64)), _c(1.0, float64), r)
    return _bin("copysign", loop.Cast(r, float32), x)


def _sigmoid(b: Builder, x: loop.Expr) -> loop.Expr:
    t = x.dtype
    x = b.let(x, "sg_x")
    e = b.let(loop.Unary("exp", loop.Unary("neg", loop.Unary("abs", x))), "sg_e")
    num = loop.Select(_bin("ge", x, _c(0.0, t)), _c(1.0, t), e)
    return _bin("div", num, _bin("add", _c(1.0, t), e))


Decomposition = Callable[..., loop.Expr]  # (Builder, operand expressions...) -> expression

#: (op, operand type name) -> its decomposition into other Loop IR ops
DECOMPOSITIONS: dict[tuple[str, str], Decomposition] = {
    ("tanh", "float32"): _tanh_f32,
    ("erf", "float32"): _erf_f32,
    ("sigmoid", "float32"): _sigmoid,
    ("sigmoid", "float64"): _sigmoid,
}


# ---------------------------------------------------------------------------------- the pass


class _Legalizer:
    def __init__(self, kernel: loop.Kernel, target: Target):
        self.k = kernel
        self.target = target
        self.ops = target.ops
        self.used = ({p.name for p in kernel.params} | {v.name for v in kernel.variables}
                     | {a.name for a in kernel.arrays})
        self.count = 0

    def fresh(self, hint: str, t: loop.Type) -> loop.Var:
        while True:
            name = f"{hint}{self.count}"
            self.count += 1
            if name not in self.used:
                self.used.add(name)
                v = loop.Var(name, t)
                self.k.variables.append(v)
                return v

    def lacks(self, e: loop.Expr) -> bool:
        if isinstance(e, loop.Unary):
            return not has_op(self.ops, e.op, e.x.dtype)
        if isinstance(e, loop.Binary) and e.op not in loop.COMPARE:
            return not has_op(self.ops, e.op, e.a.dtype)
        return False

    def expr(self, e: loop.Expr, b: Builder, memo: dict[int, loop.Expr]) -> loop.Expr:
        """`e` with every op the target lacks decomposed (new statements go to `b`)."""
        if isinstance(e, (loop.Const, loop.Var, loop.Special)):
            return e
        got = memo.get(id(e))
        if got is not None:
            return got
        out = loop.map_operands(e, lambda x: self.expr(x, b, memo))
        if self.lacks(out):
            operands = [out.x] if isinstance(out, loop.Unary) else [out.a, out.b]
            t = operands[0].dtype
            dec = DECOMPOSITIONS.get((out.op, getattr(t, "name", "")))
            if dec is None:
                raise CompilationError(f"{out.op} on {t} is not available on the "
                                       f"{self.target.backend} backend (it has no "
                                       "decomposition into the ops it has)")
            out = self.expr(dec(b, *operands), b, memo)  # it may use ops the target lacks
        memo[id(e)] = out
        return out

    def builder(self) -> tuple[Builder, Callable[[loop.Expr], loop.Expr]]:
        memo: dict[int, loop.Expr] = {}
        b = Builder(self.fresh, lambda e: self.expr(e, b, memo))
        return b, b.legal

    def stmts(self, body: list[loop.Stmt]) -> list[loop.Stmt]:
        out: list[loop.Stmt] = []
        for s in body:
            out.extend(self.stmt(s))
        return out

    def stmt(self, s: loop.Stmt) -> list[loop.Stmt]:
        """`s` rewritten, preceded by the assignments its decompositions need."""
        b, legal = self.builder()
        changes = {}
        for f in fields(s):
            v = getattr(s, f.name)
            if isinstance(s, loop.While) and f.name == "cond":
                continue  # evaluated at the end of cond_body (below)
            if isinstance(v, loop.Expr):
                nv = legal(v)
            elif isinstance(v, list) and v and isinstance(v[0], loop.Stmt):
                nv = self.stmts(v)
            elif isinstance(v, list) and v and isinstance(v[0], loop.Expr):  # Print, Intrinsic
                nv = [legal(x) for x in v]
                nv = v if all(x is y for x, y in zip(nv, v)) else nv
            else:
                continue
            if nv is not v:
                changes[f.name] = nv
        if isinstance(s, loop.While):
            cb, cond_legal = self.builder()
            cond = cond_legal(s.cond)
            if cond is not s.cond:
                changes["cond"] = cond
                changes["cond_body"] = changes.get("cond_body", s.cond_body) + cb.stmts
        new = replace(s, **changes) if changes else s
        if not b.stmts:
            return [new]
        mask = getattr(s, "mask", None)
        if mask is not None and "mask" not in changes:
            # the statement runs only where its mask holds: so does what it alone reads
            return [loop.If(mask, b.stmts), new]
        return b.stmts + [new]


def legalize(kernel: loop.Kernel, target: Target) -> loop.Kernel:
    """Rewrite (in place) the ops of `kernel` that `target` lacks; returns it."""
    if target.ops is None:
        return kernel
    lz = _Legalizer(kernel, target)
    kernel.body = lz.stmts(kernel.body)
    return kernel


#: every unary and binary op of the Loop IR (a target with all of them may say `ops=None`)
ALL_OPS = loop.UNARY | loop.BINARY


__all__ = ["ALL_OPS", "DECOMPOSITIONS", "Builder", "legalize"]
