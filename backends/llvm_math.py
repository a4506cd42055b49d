"""Vectorisable math for the LLVM backend.

float32 `exp exp2 log log2 sin cos` are built here as internal, always-inlined LLVM functions
made only of arithmetic, bit operations and `select` (no branches, no calls to libm), so that
the loop vectoriser turns a loop of them into SIMD code.  Each uses a range reduction and a
polynomial:

  exp, exp2   Cephes-style: x = n*ln2 + r, polynomial in r, then scale by 2^n in two steps so
              that results in the denormal range are rounded once.
  log, log2   Cephes-style: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), polynomial in m - 1;
              denormal inputs are scaled by 2^23 first.
  sin, cos    computed in float64: x = j*pi/2 + r.  |x| < 2^28: pi/2 split in three parts
              (exact products); larger |x|: x*2/pi mod 4 summed from exact products of x with
              28-bit chunks of 2/pi (a branch-free Payne-Hanek).  Taylor polynomials of r,
              quadrant chosen by select.

float32 `tanh` and `erf`, and `sigmoid`, are target-neutral compositions of these and plain
arithmetic: the lowering's legalize pass writes them in Loop IR (kdsl/lowering/legalize.py),
because this backend does not list them among its ops (`OPS` in llvm.py).  float64 math uses
LLVM intrinsics (`llvm.exp.f64`, ...) and libm calls (`tanh`, `erf`), which are correct but
not vectorised.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

from llvmlite import ir

F32 = ir.FloatType()
F64 = ir.DoubleType()
I32 = ir.IntType(32)
I64 = ir.IntType(64)



def _machin_pi(bits: int) -> Fraction:
    """pi to `bits` bits: 16 atan(1/5) - 4 atan(1/239) in integer fixed point."""
    one = 1 << (bits + 16)

    def atan_inv(n: int) -> int:
        total, term, k, sign = 0, one // n, 1, 1
        while term:
            total += sign * (term // k)
            term //= n * n
            k += 2
            sign = -sign
        return total

    return Fraction(16 * atan_inv(5) - 4 * atan_inv(239), one)


_PI = _machin_pi(320)


def _split_pio2() -> tuple[float, float, float]:
    """pi/2 = P1 + P2 + P3 with P1, P2 of 24 significant bits (so j*P1, j*P2 are exact for
    |j| < 2^29) and P3 the rounded rest."""
    rest = _PI / 2
    parts = []
    for _ in range(2):
        e = math.frexp(float(rest))[1]
        scale = Fraction(2) ** (24 - e)
        part = Fraction(math.floor(rest * scale)) / scale
        parts.append(float(part))
        rest -= part
    return parts[0], parts[1], float(rest)


PIO2 = _split_pio2()
# 2/pi in 7 chunks of 28 bits (chunk k holds bits 28k+1 .. 28k+28): x * chunk is exact in
# float64 for a float32 x, and 196 bits cover |x| up to FLT_MAX with 60 bits to spare.
TWO_OVER_PI_CHUNKS = [
    float(Fraction(math.floor(2 / _PI * 2 ** (28 * (k + 1))) % (1 << 28), 2 ** (28 * (k + 1))))
    for k in range(7)
]
SIN_TAYLOR = [(-1) ** k / math.factorial(2 * k + 1) for k in range(6)]  # r, r^3, ... r^11
COS_TAYLOR = [(-1) ** k / math.factorial(2 * k) for k in range(7)]  # 1, r^2, ... r^12

# Cephes float32 coefficients (highest degree first).
EXP_P = [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
         1.6666665459e-1, 5.0000001201e-1]
EXP2_P = [1.535336188319500e-4, 1.339887440266574e-3, 9.618437357674640e-3,
          5.550332471162809e-2, 2.402264791363012e-1, 6.931472028550421e-1]
LOG_P = [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
         1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
         3.3333331174e-1]
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4  # Cody-Waite split of ln 2
LOG2E = 1.44269504088896341
LOG2EA = 0.44269504088896340736  # log2(e) - 1


class _B:
    """Small helpers over an IRBuilder for one float type."""

    def __init__(self, b: ir.IRBuilder, module: ir.Module, scalef: bool = False):
        self.b = b
        self.m = module
        self.scalef = scalef

    def c(self, ty: ir.Type, v: float) -> ir.Constant:
        return ir.Constant(ty, v)

    def intr(self, name: str, ty: ir.Type, *args: ir.Value) -> ir.Value:
        return self.b.call(intrinsic(self.m, name, ty), list(args))

    def sel(self, cond, a, b):
        return self.b.select(cond, a, b)

    def lt(self, a, b):
        return self.b.fcmp_ordered("<", a, b)

    def fma(self, a: ir.Value, x: ir.Value, c: ir.Value) -> ir.Value:
        """a * x + c, fused where the CPU has FMA (`llvm.fmuladd`: every x86-64 core with
        AVX2 and every AArch64 core): one instruction and one rounding instead of two."""
        return self.intr("fmuladd", a.type, a, x, c)

    def horner(self, x: ir.Value, coeffs) -> ir.Value:
        acc = self.c(x.type, coeffs[0])
        for k in coeffs[1:]:
            acc = self.fma(acc, x, self.c(x.type, k))
        return acc

    def isnan(self, x):
        return self.b.fcmp_unordered("uno", x, x)

    def clamp(self, x, lo: float, hi: float):
        """min(max(x, lo), hi) that also maps NaN to `hi` (NaN is restored by the caller)."""
        x = self.sel(self.lt(x, self.c(x.type, hi)), x, self.c(x.type, hi))
        return self.sel(self.b.fcmp_ordered(">", x, self.c(x.type, lo)), x, self.c(x.type, lo))

    def pow2(self, n: ir.Value) -> ir.Value:
        """2^n as float32 for n in the normal exponent range."""
        bits = self.b.shl(self.b.add(n, self.c(I32, 127)), self.c(I32, 23))
        return self.b.bitcast(bits, F32)

    def ldexp(self, y: ir.Value, n: ir.Value) -> ir.Value:
        """y * 2^n for n in [-152, 130] with one rounding: `llvm.ldexp` where the CPU scales
        a vector in one instruction (`scalef`: AVX-512's `vscalefps`, 1 instruction where the
        two factors below take 8), else two exact-range factors.  Without such an
        instruction LLVM would call libm's `ldexpf` once per lane."""
        if self.scalef:
            name = "llvm.ldexp.f32.i32"
            fn = self.m.globals.get(name) or ir.Function(
                self.m, ir.FunctionType(F32, [F32, I32]), name)
            return self.b.call(fn, [y, n])
        n1 = self.b.ashr(n, self.c(I32, 1))
        n2 = self.b.sub(n, n1)
        return self.b.fmul(self.b.fmul(y, self.pow2(n1)), self.pow2(n2))


def intrinsic(module: ir.Module, name: str, ty: ir.Type, nargs: int | None = None) -> ir.Function:
    """Declare (once) the overloaded intrinsic `llvm.<name>.<ty>`."""
    suffix = {F32: "f32", F64: "f64"}.get(ty, str(ty))
    full = f"llvm.{name}.{suffix}"
    if full in module.globals:
        return module.globals[full]
    arity = nargs or {"fma": 3, "fmuladd": 3, "pow": 2, "maximum": 2, "minimum": 2,
                      "copysign": 2}.get(name, 1)
    return ir.Function(module, ir.FunctionType(ty, [ty] * arity), full)


# ------------------------------------------------------------------------- float32 kernels


def _exp(h: _B, x):
    b = h.b
    xc = h.clamp(x, -104.0, 89.0)
    n = h.intr("floor", F32, h.fma(xc, h.c(F32, LOG2E), h.c(F32, 0.5)))
    r = h.fma(n, h.c(F32, -LN2_HI), xc)  # (n * LN2_HI is exact: LN2_HI has 9 bits)
    r = h.fma(n, h.c(F32, -LN2_LO), r)
    p = h.horner(r, EXP_P)
    y = b.fadd(h.fma(p, b.fmul(r, r), r), h.c(F32, 1.0))
    y = h.ldexp(y, b.fptosi(n, I32))
    return h.sel(h.isnan(x), x, y)


def _exp2(h: _B, x):
    b = h.b
    xc = h.clamp(x, -152.0, 130.0)
    n = h.intr("floor", F32, b.fadd(xc, h.c(F32, 0.5)))
    r = b.fsub(xc, n)
    y = h.fma(r, h.horner(r, EXP2_P), h.c(F32, 1.0))
    y = h.ldexp(y, b.fptosi(n, I32))
    return h.sel(h.isnan(x), x, y)


def _log_reduce(h: _B, x):
    """x > 0 finite -> (f, e) with x = (1 + f) * 2^e, 1 + f in [sqrt(1/2), sqrt(2))."""
    b = h.b
    den = h.lt(x, h.c(F32, 1.1754943508222875e-38))
    xs = h.sel(den, b.fmul(x, h.c(F32, 8388608.0)), x)
    bits = b.bitcast(xs, I32)
    e = b.sub(b.and_(b.lshr(bits, h.c(I32, 23)), h.c(I32, 255)), h.c(I32, 126))
    e = b.sub(e, h.sel(den, h.c(I32, 23), h.c(I32, 0)))
    m = b.bitcast(b.or_(b.and_(bits, h.c(I32, 0x807FFFFF)), h.c(I32, 0x3F000000)), F32)
    small = h.lt(m, h.c(F32, 0.707106781186547524))
    e = b.sub(e, h.sel(small, h.c(I32, 1), h.c(I32, 0)))
    f = b.fsub(h.sel(small, b.fadd(m, m), m), h.c(F32, 1.0))
    return f, b.sitofp(e, F32)


def _log_specials(h: _B, x, y):
    """log(+inf) = +inf, log(0) = -inf, log(x < 0) = NaN, log(NaN) = NaN."""
    b = h.b
    inf = h.c(F32, math.inf)
    y = h.sel(b.fcmp_ordered("==", x, inf), inf, y)
    y = h.sel(b.fcmp_ordered("==", x, h.c(F32, 0.0)), h.c(F32, -math.inf), y)
    return h.sel(b.fcmp_unordered("<", x, h.c(F32, 0.0)), h.c(F32, math.nan), y)


def _log(h: _B, x):
    b = h.b
    f, e = _log_reduce(h, x)
    z = b.fmul(f, f)
    y = b.fmul(f, b.fmul(z, h.horner(f, LOG_P)))
    y = b.fadd(y, b.fmul(e, h.c(F32, LN2_LO)))
    y = b.fsub(y, b.fmul(z, h.c(F32, 0.5)))
    r = b.fadd(f, y)
    r = b.fadd(r, b.fmul(e, h.c(F32, LN2_HI)))
    return _log_specials(h, x, r)


def _log2(h: _B, x):
    b = h.b
    f, e = _log_reduce(h, x)
    z = b.fmul(f, f)
    y = b.fmul(f, b.fmul(z, h.horner(f, LOG_P)))
    y = b.fsub(y, b.fmul(z, h.c(F32, 0.5)))
    k = h.c(F32, LOG2EA)
    r = b.fmul(y, k)
    r = b.fadd(r, b.fmul(f, k))
    r = b.fadd(r, y)
    r = b.fadd(r, f)
    r = b.fadd(r, e)
    return _log_specials(h, x, r)


def _sincos(h: _B, x, want_cos: bool):
    b = h.b
    xd = b.fpext(x, F64)
    # |x| < 2^28: x - j*pi/2 with pi/2 in three parts (exact products)
    j = h.intr("floor", F64, b.fadd(b.fmul(xd, h.c(F64, 2 / math.pi)), h.c(F64, 0.5)))
    r = xd
    for part in PIO2:
        r = b.fsub(r, b.fmul(j, h.c(F64, part)))
    # |x| >= 2^28: x * 2/pi mod 4 as a sum of exact products with 28-bit chunks of 2/pi
    total = h.c(F64, 0.0)
    for chunk in TWO_OVER_PI_CHUNKS:
        v = b.fmul(xd, h.c(F64, chunk))
        total = b.fadd(total, b.fsub(v, b.fmul(h.intr("floor", F64, b.fmul(v, h.c(F64, 0.25))),
                                                h.c(F64, 4.0))))
    j_big = h.intr("floor", F64, b.fadd(total, h.c(F64, 0.5)))
    r_big = b.fmul(b.fsub(total, j_big), h.c(F64, math.pi / 2))
    huge = b.fcmp_unordered(">=", h.intr("fabs", F32, x), h.c(F32, 2.0 ** 28))
    j, r = h.sel(huge, j_big, j), h.sel(huge, r_big, r)
    # quadrant j mod 4; fptosi.sat keeps NaN lanes defined (they are replaced below)
    q = b.and_(b.call(fp_to_int_sat(h.m, I64, F64), [j]), h.c(I64, 3))
    if want_cos:
        q = b.add(q, h.c(I64, 1))
    z = b.fmul(r, r)
    s = b.fmul(r, h.horner(z, SIN_TAYLOR[::-1]))
    c = h.horner(z, COS_TAYLOR[::-1])
    odd = b.icmp_unsigned("!=", b.and_(q, h.c(I64, 1)), h.c(I64, 0))
    neg = b.icmp_unsigned("!=", b.and_(q, h.c(I64, 2)), h.c(I64, 0))
    v = h.sel(odd, c, s)
    v = b.fptrunc(h.sel(neg, b.fneg(v), v), F32)
    # sin/cos of +-inf or NaN is NaN
    finite = b.fcmp_ordered("<", h.intr("fabs", F32, x), h.c(F32, math.inf))
    return h.sel(finite, v, b.fsub(x, x))


def _sin(h: _B, x):
    return _sincos(h, x, False)


def _cos(h: _B, x):
    return _sincos(h, x, True)


def fp_to_int_sat(module: ir.Module, ity: ir.IntType, fty: ir.Type, signed: bool = True
                  ) -> ir.Function:
    """`llvm.fpto[su]i.sat`: float -> int without poison (NaN -> 0, out of range saturates)."""
    name = f"llvm.fpto{'s' if signed else 'u'}i.sat.i{ity.width}.{'f32' if fty == F32 else 'f64'}"
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, ir.FunctionType(ity, [fty]), name)


F32_KERNELS: dict[str, Callable] = {
    "exp": _exp, "exp2": _exp2, "log": _log, "log2": _log2, "sin": _sin, "cos": _cos,
}

# float64: LLVM intrinsics (lowered to libm calls) or libm functions by name.
F64_INTRINSICS = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "sin": "sin",
                  "cos": "cos"}
F64_LIBM = {"tanh": "tanh", "erf": "erf"}


class MathLib:
    """Builds (once per module) and calls the math functions of one LLVM module."""

    def __init__(self, module: ir.Module, scalef: bool = False):
        self.module = module
        self.scalef = scalef  # llvm_host.SimdProfile.scalef

    def _f32(self, op: str) -> ir.Function:
        name = f"kdsl.{op}.f32"
        if name in self.module.globals:
            return self.module.globals[name]
        fn = ir.Function(self.module, ir.FunctionType(F32, [F32]), name)
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        fn.attributes.add("nounwind")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.ret(F32_KERNELS[op](_B(b, self.module, self.scalef), fn.args[0]))
        return fn

    def _f64(self, op: str) -> ir.Function:
        if op in F64_INTRINSICS:
            return intrinsic(self.module, F64_INTRINSICS[op], F64)
        name = F64_LIBM[op]
        if name in self.module.globals:
            return self.module.globals[name]
        return ir.Function(self.module, ir.FunctionType(F64, [F64]), name)

    def call(self, b: ir.IRBuilder, op: str, x: ir.Value) -> ir.Value:
        """`op(x)`: float32 `x` for op in F32_KERNELS, float64 `x` for op in F64_INTRINSICS or
        F64_LIBM (float32 tanh and erf, and sigmoid, arrive decomposed by the lowering's
        legalize pass: `OPS` in llvm.py)."""
        if x.type == F32:
            return b.call(self._f32(op), [x])
        return b.call(self._f64(op), [x])
