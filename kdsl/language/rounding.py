"""Directed rounding (`_rn _rz _rd _ru`) of libdevice's arithmetic and conversions, built from
round-to-nearest Tile IR ops and error-free transformations, so every backend computes them
exactly (none of them needs a hardware rounding mode).

The scheme: compute the round-to-nearest result `y` together with the side of `y` the exact
result lies on (`lt`: exact < y, `gt`: exact > y; neither: `y` is exact), then step to the
neighbouring float with `nextafter` where the mode asks for the other side.  This is correct
whenever `y` is one of the two floats bracketing the exact result, which holds even when `y`
was rounded twice (first to a wider format, then to the target: rounding is monotonic and the
bracketing floats are representable in both).

- float32: `+ - * / sqrt fma` of float32 operands are computed in float64 with the exact error
  (a product of two float32 is exact in float64; a sum's error by TwoSum; a quotient's or root's
  residual by `fma`), then narrowed (`narrow`).
- float64: the same quantities within float64.  Products and quotients are first scaled to
  [1, 2) by powers of two (exact), so that the residual never underflows; the result is scaled
  back with one rounding (`ldexp`) and compared with the scaled exact value.  `fma` determines
  the sign of `a*b + c - y` exactly as a Shewchuk expansion of four floats.
- integer to float conversions compare the rounded value with the integer exactly.

Signed zeros follow IEEE 754: an exact zero sum of operands of opposite signs is -0 when
rounding down and +0 otherwise.  Overflow rounds to the largest finite float toward zero and
down/up as the mode says.  These decompositions rely on IEEE arithmetic: with `fast_math`
(which lets compilers reassociate and flush subnormals) they are not exact.
"""

from __future__ import annotations

from ..ir.types import DType, float32, float64, int1, int64, uint64
from .fpbits import exponent, ldexp, nextafter, signbit
from .mathexpr import X, fma, isinf, un, where

MODES = ("rn", "rz", "rd", "ru")
INF = float("inf")


def _false(x: X) -> X:
    return x.like(False, int1)


def directed(y: X, lt: X | None, gt: X | None, mode: str) -> X:
    """`y` rounded in `mode`, given on which side of `y` the exact value lies."""
    if mode == "rn" or lt is None:
        return y
    if mode == "rd":
        return where(lt, nextafter(y, -INF), y)
    if mode == "ru":
        return where(gt, nextafter(y, INF), y)
    toward_zero = ((y > 0.0) & lt) | ((y < 0.0) & gt)
    return where(toward_zero, nextafter(y, 0.0), y)


def narrow(v: X, lt: X | None, gt: X | None) -> tuple[X, X, X]:
    """float64 value `v` (with the side of v the exact value lies on) rounded to the nearest
    float32, and the side of that float32 the exact value lies on."""
    y = v.to(float32)
    w = y.to(float64)
    same = w.eq(v)
    lt = (w > v) | (same & lt) if lt is not None else w > v
    gt = (w < v) | (same & gt) if gt is not None else w < v
    return y, lt, gt


def two_sum(a: X, b: X) -> tuple[X, X]:
    """s = RN(a + b) and the exact error e = a + b - s (Knuth's TwoSum; exact without
    overflow, subnormals included)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _signs(e: X) -> tuple[X, X]:
    """(exact < y, exact > y) from the error e = exact - y."""
    return e < 0.0, e > 0.0


def _zero_sign_down(r: X, lt: X, gt: X, neg_addend: X, mode: str) -> X:
    """Rounding down, an exact zero sum is -0 when an addend is negative (or -0)."""
    if mode != "rd":
        return r
    exact_zero = r.eq(0.0) & ~lt & ~gt
    return where(exact_zero & neg_addend, r.like(-0.0), r)


def _overflow(y: X, lt: X, gt: X, *inputs: X) -> tuple[X, X]:
    """A rounded result that overflowed to infinity from finite inputs is above (below) a
    finite exact value."""
    fin = None
    for x in inputs:
        f = un("abs", x) < INF
        fin = f if fin is None else fin & f
    ovf = isinf(y) & fin
    return lt | (ovf & (y > 0.0)), gt | (ovf & (y < 0.0))


# ----------------------------------------------------------------------------- float32


def _f32_result(v: X, lt: X | None, gt: X | None, mode: str) -> X:
    y, lt, gt = narrow(v, lt, gt)
    return directed(y, lt, gt, mode)


def add(a: X, b: X, mode: str) -> X:
    if mode == "rn":
        return a + b
    neg = signbit(a) | signbit(b)
    if a.dtype == float32:
        s, e = two_sum(a.to(float64), b.to(float64))
        y, lt, gt = narrow(s, *_signs(e))
    else:
        y, e = two_sum(a, b)
        lt, gt = _overflow(y, *_signs(e), a, b)
    return _zero_sign_down(directed(y, lt, gt, mode), lt, gt, neg, mode)


def sub(a: X, b: X, mode: str) -> X:
    return add(a, -b, mode)


def mul(a: X, b: X, mode: str) -> X:
    if mode == "rn":
        return a * b
    if a.dtype == float32:
        return _f32_result(a.to(float64) * b.to(float64), None, None, mode)  # exact product
    ok = _normal_operands(a, b)
    a1, b1 = where(ok, a, a.like(1.0)), where(ok, b, b.like(1.0))
    ea, eb = exponent(a1), exponent(b1)
    an, bn = ldexp(a1, -ea), ldexp(b1, -eb)
    p = an * bn
    e = fma(an, bn, -p)  # exact: an, bn in [1, 2)
    big_e = ea + eb
    q = ldexp(p, big_e)
    d = ldexp(q, -big_e) - p
    r = directed(q, e < d, e > d, mode)
    return where(ok, r, a * b)


def div(a: X, b: X, mode: str) -> X:
    if mode == "rn":
        return a / b
    if a.dtype == float32:
        a64, b64 = a.to(float64), b.to(float64)
        q = a64 / b64
        r = fma(-q, b64, a64)  # exact residual: exact quotient = q + r / b
        pos = b64 > 0.0
        return _f32_result(q, ((r < 0.0) & pos) | ((r > 0.0) & ~pos),
                           ((r > 0.0) & pos) | ((r < 0.0) & ~pos), mode)
    ok = _normal_operands(a, b)
    a1, b1 = where(ok, a, a.like(1.0)), where(ok, b, b.like(1.0))
    ea, eb = exponent(a1), exponent(b1)
    an = ldexp(a1, -ea)
    bn = ldexp(un("abs", b1), -eb)
    an = where(b1 < 0.0, -an, an)
    qn = an / bn
    r = fma(-qn, bn, an)  # exact: exact scaled quotient = qn + r / bn, bn in [1, 2)
    big_e = ea - eb
    q = ldexp(qn, big_e)
    d = ldexp(q, -big_e) - qn
    w = fma(d, bn, -r)  # sign of (q - exact) * bn, exactly (no underflow at this scale)
    out = directed(q, w > 0.0, w < 0.0, mode)
    return where(ok, out, a / b)


def rcp(x: X, mode: str) -> X:
    return div(x.like(1.0), x, mode)


def sqrt(a: X, mode: str) -> X:
    if mode == "rn":
        return un("sqrt", a)
    if a.dtype == float32:
        a64 = a.to(float64)
        s = un("sqrt", a64)
        r = fma(-s, s, a64)
        return _f32_result(s, r < 0.0, r > 0.0, mode)
    ok = (a > 0.0) & (a < INF)
    a1 = where(ok, a, a.like(1.0))
    k = exponent(a1) >> 1
    an = ldexp(a1, -(k + k))  # in [1, 4)
    sn = un("sqrt", an)
    r = fma(-sn, sn, an)
    s = ldexp(sn, k)  # exact: the root of a float64 is never subnormal
    return where(ok, directed(s, r < 0.0, r > 0.0, mode), un("sqrt", a))


def fma_dir(a: X, b: X, c: X, mode: str) -> X:
    if mode == "rn":
        return fma(a, b, c)
    neg = (signbit(a) ^ signbit(b)) | signbit(c)
    if a.dtype == float32:
        p = a.to(float64) * b.to(float64)  # exact
        s, e = two_sum(p, c.to(float64))
        y, lt, gt = narrow(s, *_signs(e))
        return _zero_sign_down(directed(y, lt, gt, mode), lt, gt, neg, mode)
    y = fma(a, b, c)
    lt, gt = _fma_error_sign(a, b, c, y)
    lt, gt = _overflow(y, lt, gt, a, b, c)
    return _zero_sign_down(directed(y, lt, gt, mode), lt, gt, neg, mode)


def _fma_error_sign(a: X, b: X, c: X, y: X) -> tuple[X, X]:
    """Sign of a*b + c - y for float64, exactly.  a*b = p + ep (ep exact unless the product
    is tiny); when it is tiny and c dominates it, the sign is the product's; otherwise the
    operands are scaled by powers of two first.  The sum of the four floats p, ep, c, -y is
    grown into a nonoverlapping expansion whose last nonzero component has its sign."""
    prod_ok = _normal_operands(a, b)
    a1, b1 = where(prod_ok, a, a.like(1.0)), where(prod_ok, b, b.like(1.0))
    ea, eb = exponent(a1), exponent(b1)
    k = ea + eb
    tiny = prod_ok & (k < -960)
    dominant = tiny & (un("abs", c) >= ldexp(c.like(1.0), k + 100))
    ks = where(tiny, k, k.like(0))
    aa = where(tiny, ldexp(a1, -ea), a)
    bb = where(tiny, ldexp(b1, -eb), b)
    cc = where(tiny & ~dominant, ldexp(c, -ks), c)
    yy = where(tiny & ~dominant, ldexp(y, -ks), y)
    p = aa * bb
    ep = fma(aa, bb, -p)
    comps = [p]
    for t in (ep, cc, -yy):
        q, grown = t, []
        for comp in comps:
            q, h = two_sum(q, comp)
            grown.append(h)
        comps = grown + [q]
    v = comps[0]
    for comp in comps[1:]:
        v = where(comp.ne(0.0), comp, v)
    lt, gt = v < 0.0, v > 0.0
    prod_neg = signbit(a) ^ signbit(b)
    lt = where(dominant, prod_neg, lt)
    gt = where(dominant, ~prod_neg, gt)
    fin = (un("abs", y) < INF) & (un("abs", a) < INF) & (un("abs", b) < INF) \
        & (un("abs", c) < INF)
    return lt & fin, gt & fin


def _normal_operands(a: X, b: X) -> X:
    """Both finite and nonzero: the scaled paths apply."""
    return (un("abs", a) < INF) & (un("abs", b) < INF) & a.ne(0.0) & b.ne(0.0)


# ------------------------------------------------------------------------- conversions


def to_float(x: X, dst: DType, mode: str) -> X:
    """A float64 or an integer converted to the float type `dst` in `mode`."""
    src = x.dtype
    if mode == "rn" or (src.bits <= 32 and src.is_int and dst == float64):
        return x.to(dst)
    if src == float64:  # double2float
        return _f32_result(x, None, None, mode)
    if src.bits <= 32:  # (u)int32 -> float32: exact in float64
        return _f32_result(x.to(float64), None, None, mode)
    v = x.to(float64)
    limit = 2.0**63 if src.is_signed else 2.0**64
    back = v.to(int64 if src.is_signed else uint64)  # saturates at the type's maximum
    big = v >= limit  # v rounded up past the range: above every integer of the type
    lt = big | (back > x)
    gt = ~big & (back < x)
    if dst == float64:
        return directed(v, lt, gt, mode)
    return _f32_result(v, lt, gt, mode)


_TO_INT = {"rn": "rint", "rz": "trunc", "rd": "floor", "ru": "ceil"}


def to_int(x: X, dst: DType, mode: str, result: DType | None = None) -> X:
    """A float rounded to an integer in `mode`, then converted (saturating; NaN gives 0) to
    `dst`; `result` reinterprets the bits (libdevice's float2uint returns an int32)."""
    r = un(_TO_INT[mode], x).to(dst)
    return r.bits(result) if result is not None and result != dst else r


__all__ = ["MODES", "add", "directed", "div", "fma_dir", "mul", "narrow", "rcp", "sqrt", "sub",
           "to_float", "to_int", "two_sum"]
