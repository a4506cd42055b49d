"""libdevice's special functions that no backend library has everywhere, written as
compositions of Tile IR ops: `sinpi cospi erfcx erfinv erfcinv normcdf normcdfinv
cyl_bessel_i0 cyl_bessel_i1`, the norms, reciprocal roots and `pow` with an integer exponent.

Each `*_64` function computes in float64; `in64(f)` applies it to float32 operands and rounds
the float64 result once to float32, so float32 results are within about one ulp (usually
correctly rounded).  float64 results are accurate to a few ulps: the methods are

- sinpi/cospi: exact reduction of x to t in [-1/2, 1/2] (x - 2 rint(x/2), then reflections
  that are exact by Sterbenz's lemma), then sin/cos of pi*t with pi*t as a double-float sum.
- erfcx: exp(x^2) erfc(x) with x^2 as an exact sum of two floats, below 12; above, the
  asymptotic series 1/(x sqrt(pi)) sum (-1)^k (2k-1)!! / (2x^2)^k (12 terms, error < 1e-18).
- erfinv/erfcinv: Newton's method from a close start: on erf for |y| <= 1/2 (start: the odd
  series of erfinv to y^11); on log(erfc(x)) = log(erfcx(x)) - x^2 (which never underflows)
  for the tails (start: Abramowitz & Stegun 26.2.23 for the normal quantile).
- normcdf(x) = erfc(-x/sqrt 2)/2 with the rounding error of -x/sqrt 2 corrected to first order;
  normcdfinv(p) = -sqrt(2) erfcinv(2p).
- cyl_bessel_i0/i1: the power series in (x/2)^2 (positive terms, Horner) for |x| < 25, the
  asymptotic expansion e^x / sqrt(2 pi x) sum a_k / x^k (20 terms) above.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal, getcontext
from fractions import Fraction

from ..ir.types import float32, float64
from .fpbits import exponent, isinf, isnan, ldexp
from .mathexpr import X, bi, fma, un, where

getcontext().prec = 60
INF = float("inf")


def _split(value: Decimal) -> tuple[float, float]:
    """A constant as hi + lo floats (hi the nearest float, lo the nearest float to the rest)."""
    hi = float(value)
    return hi, float(value - Decimal(hi))


_PI = Decimal("3.14159265358979323846264338327950288419716939937510582097494459")
PI_HI, PI_LO = _split(_PI)
RSQRT2_HI, RSQRT2_LO = _split(1 / Decimal(2).sqrt())
SQRT2 = math.sqrt(2.0)
TWO_OVER_SQRT_PI = float(2 / _PI.sqrt())
SQRT_PI_OVER_2 = float(_PI.sqrt() / 2)
RSQRT_PI = float(1 / _PI.sqrt())


def in64(f: Callable[..., X]) -> Callable[..., X]:
    """`f` (a float64 algorithm) on float32 operands: computed in float64, rounded once."""

    def g(*xs: X) -> X:
        if xs[0].dtype == float64:
            return f(*xs)
        return f(*(x.to(float64) if x.dtype == float32 else x for x in xs)).to(float32)

    return g


def _horner(y: X, coeffs: list[float]) -> X:
    """sum coeffs[k] y^k, highest power first with fma."""
    acc = y.like(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = fma(acc, y, c)
    return acc


def _horner_compensated(y: X, coeffs: list[float]) -> X:
    """The same sum as if evaluated in twice the precision: each step's rounding errors (of
    the product, exact by fma, and of the sum, by TwoSum) are accumulated by a second Horner
    recurrence and added at the end (Graillat, Langlois and Louvet)."""
    s = y.like(coeffs[-1])
    r = y.like(0.0)
    for c in reversed(coeffs[:-1]):
        p = s * y
        pe = fma(s, y, -p)
        s2 = p + c
        bb = s2 - p
        se = (p - (s2 - bb)) + (c - bb)
        r = fma(r, y, pe + se)
        s = s2
    return s + r


# ------------------------------------------------------------------------- sinpi, cospi


def _pi_times(t: X) -> tuple[X, X]:
    """pi * t as p + pe (p the rounded product, pe its error plus pi's own rounding)."""
    p = t * PI_HI
    return p, fma(t, PI_HI, -p) + t * PI_LO


def _sin_pi(t: X) -> X:
    """sin(pi t) for |t| <= 1/2: sin(p + pe) = sin(p) + pe cos(p) to first order."""
    p, pe = _pi_times(t)
    return fma(pe, un("cos", p), un("sin", p))


def _reduce2(x: X) -> X:
    """x - 2 rint(x / 2): in [-1, 1], exact; NaN for infinities."""
    return x - un("rint", x * 0.5) * 2.0


def sinpi_64(x: X) -> X:
    r = _reduce2(x)
    one = bi("copysign", x.like(1.0), r)
    t = where(un("abs", r) > 0.5, one - r, r)  # exact: sinpi(r) = sinpi(1 - r)
    s = _sin_pi(t)
    return where(s.eq(0.0), bi("copysign", x.like(0.0), x), s)  # sinpi(+-n) = +-0


def cospi_64(x: X) -> X:
    a = un("abs", _reduce2(x))
    flip = a > 0.5
    t = where(flip, 1.0 - a, a)  # exact; cospi(a) = -cospi(1 - a)
    p, pe = _pi_times(t)
    near = fma(-pe, un("sin", p), un("cos", p))  # cos(p + pe), t <= 1/4
    far = _sin_pi(0.5 - t)  # exact argument; cos(pi t) = sin(pi (1/2 - t)), t > 1/4
    c = where(t > 0.25, far, near)
    c = where(flip, -c, c)
    return where(c.eq(0.0), x.like(0.0), c)  # cospi(n + 1/2) = +0


# ----------------------------------------------------------------------------- erfcx


_ERFCX_TERMS = [float((-1) ** k * math.prod(range(1, 2 * k, 2))) for k in range(12)]


def erfcx_64(x: X) -> X:
    x2 = x * x
    x2e = fma(x, x, -x2)  # x^2 = x2 + x2e exactly
    ex = un("exp", x2)
    small = fma(ex, x2e, ex) * un("erfc", x)
    y = 1.0 / (x2 + x2)
    large = _horner(y, _ERFCX_TERMS) * RSQRT_PI / x
    r = where(x < 12.0, small, large)
    return where(x < -26.7, x.like(INF), r)  # 2 exp(x^2) overflows


# ---------------------------------------------------------------------- erfinv, erfcinv


# erfinv(y) = sum c_k / (2k+1) (sqrt(pi) y / 2)^(2k+1), c_0 = 1, c_k = sum_m c_m c_(k-1-m) /
# ((m+1)(2m+1)): the Maclaurin series of the inverse error function.
def _erfinv_series(n: int) -> list[float]:
    c = [Fraction(1)]
    for k in range(1, n):
        c.append(sum(c[m] * c[k - 1 - m] / ((m + 1) * (2 * m + 1)) for m in range(k)))
    s = SQRT_PI_OVER_2
    return [float(ck / (2 * k + 1)) * s ** (2 * k + 1) for k, ck in enumerate(c)]


_ERFINV_COEFFS = _erfinv_series(6)  # in powers y, y^3, ..., y^11


def _erfinv_central(y: X) -> X:
    """erfinv(y) for 0 <= y <= 1/2: series start, two Newton steps on erf(x) = y."""
    x = y * _horner(y * y, _ERFINV_COEFFS)
    for _ in range(2):
        x = x - (un("erf", x) - y) * SQRT_PI_OVER_2 * un("exp", x * x)
    return x


def _erfc_inv_tail(q: X) -> X:
    """x >= 0 with erfc(x) = q for 0 < q <= 1/2: A&S 26.2.23 start for the normal quantile of
    q/2, divided by sqrt 2; Newton on g(x) = log(erfcx(x)) - x^2 - log(q), whose derivative is
    -2 / (sqrt(pi) erfcx(x))."""
    t = un("sqrt", -2.0 * un("log", q * 0.5))
    num = 2.515517 + t * (0.802853 + t * 0.010328)
    den = 1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308))
    x = (t - num / den) * RSQRT2_HI
    lq = un("log", q)
    for _ in range(4):
        ex = erfcx_64(x)
        g = un("log", ex) - x * x - lq
        x = x + g * SQRT_PI_OVER_2 * ex
    return x


def erfinv_64(y: X) -> X:
    a = un("abs", y)
    central = a <= 0.5
    x = where(central, _erfinv_central(where(central, a, a.like(0.0))),
              _erfc_inv_tail(where(central, a.like(0.5), 1.0 - a)))
    x = where(a.eq(1.0), a.like(INF), where(a > 1.0, a.like(float("nan")), x))
    return bi("copysign", x, y)  # also keeps NaN and erfinv(-0) = -0


def erfcinv_64(q: X) -> X:
    upper = q > 1.0
    qq = where(upper, 2.0 - q, q)  # exact on [1, 2]; erfcinv(q) = -erfcinv(2 - q)
    tail = qq <= 0.5
    x = where(tail, _erfc_inv_tail(where(tail, qq, qq.like(0.5))),
              _erfinv_central(where(tail, qq.like(0.0), 1.0 - qq)))
    x = where(upper, -x, x)
    x = where(q.eq(0.0), q.like(INF), where(q.eq(2.0), q.like(-INF), x))
    bad = (q < 0.0) | (q > 2.0) | isnan(q)
    return where(bad, q.like(float("nan")), x)


def normcdf_64(x: X) -> X:
    z = x * -RSQRT2_HI
    zl = fma(x, -RSQRT2_HI, -z) + x * -RSQRT2_LO  # -x/sqrt(2) = z + zl
    corr = zl * TWO_OVER_SQRT_PI * un("exp", -(z * z))
    corr = where(un("abs", corr) < INF, corr, x.like(0.0))
    return (un("erfc", z) - corr) * 0.5


def normcdfinv_64(p: X) -> X:
    return erfcinv_64(p * 2.0) * -SQRT2


# ------------------------------------------------------------------- modified Bessel I


def _i_series(nu: int, n: int) -> list[float]:
    """Coefficients of sum_k y^k / (k! (k+nu)!), y = (x/2)^2."""
    return [1.0 / (math.factorial(k) * math.factorial(k + nu)) for k in range(n)]


def _i_asym(nu: int, n: int) -> list[float]:
    """I_nu(x) ~ e^x / sqrt(2 pi x) sum_k b_k / x^k."""
    mu, out, t = 4 * nu * nu, [], Fraction(1)
    for k in range(n):
        out.append(float(t))
        t *= Fraction(-(mu - (2 * k + 1) ** 2), (k + 1) * 8)
    return out


_I_SERIES = {0: _i_series(0, 45), 1: _i_series(1, 45)}
# d/dy of sum y^k / (k! (k+nu)!) is sum y^k / (k! (k+nu+1)!)
_I_DERIV = {0: _i_series(1, 45), 1: _i_series(2, 45)}
_I_ASYM = {0: _i_asym(0, 20), 1: _i_asym(1, 20)}
_I_SWITCH = 25.0


def _bessel_i_64(x: X, nu: int, compensated: bool) -> X:
    a = un("abs", x)
    small = a < _I_SWITCH
    s = where(small, a, a.like(1.0))
    h = s * 0.5
    y = h * h
    # (x/2)^2 = y + yl exactly; P(y + yl) = P(y) + yl P'(y), P' being the series of nu + 1
    yl = fma(h, h, -y)
    ser = (_horner_compensated if compensated else _horner)(y, _I_SERIES[nu])
    ser = fma(yl, _horner(y, _I_DERIV[nu]), ser)
    if nu == 1:
        ser = ser * h
    big = where(small, a.like(_I_SWITCH), a)
    half = un("exp", big * 0.5)  # e^x in two halves, so that no factor overflows early
    asym = _horner(1.0 / big, _I_ASYM[nu]) * half / un("sqrt", big * (2.0 * math.pi)) * half
    r = where(small, ser, asym)
    r = where(isinf(x), a, where(isnan(x), x, r))
    return bi("copysign", r, x) if nu == 1 else r


def bessel_i0(x: X) -> X:
    """float64: the series summed with compensated Horner (its 45 terms would otherwise cost
    up to ~12 ulps); float32: computed in float64 with plain Horner."""
    if x.dtype == float64:
        return _bessel_i_64(x, 0, True)
    return _bessel_i_64(x.to(float64), 0, False).to(float32)


def bessel_i1(x: X) -> X:
    if x.dtype == float64:
        return _bessel_i_64(x, 1, True)
    return _bessel_i_64(x.to(float64), 1, False).to(float32)


# -------------------------------------------------------------------- norms and roots


def _norm_64(*xs: X) -> X:
    """sqrt(sum x_i^2) without overflow or underflow: the operands are scaled by a power of two
    (exactly) near 1 first.  An infinite operand gives +inf, even next to a NaN."""
    m = un("abs", xs[0])
    for x in xs[1:]:
        m = bi("maximum", m, un("abs", x))
    ok = (m > 0.0) & (m < INF)
    e = exponent(where(ok, m, m.like(1.0)))
    acc = None
    for x in xs:
        s = ldexp(x, -e)
        acc = s * s if acc is None else fma(s, s, acc)
    r = ldexp(un("sqrt", acc), e)
    r = where(m.eq(0.0), m, r)
    inf = None
    for x in xs:
        i = isinf(x)
        inf = i if inf is None else inf | i
    return where(inf, m.like(INF), r)


def _norm_32(*xs: X) -> X:
    """float32 operands: squares and their sum are exact enough in float64 (no overflow)."""
    acc = None
    for x in xs:
        d = x.to(float64)
        acc = d * d if acc is None else fma(d, d, acc)
    r = un("sqrt", acc)
    inf = None
    for x in xs:
        i = isinf(x)
        inf = i if inf is None else inf | i
    return where(inf, r.like(INF), r)


def norm(*xs: X) -> X:
    return _norm_64(*xs) if xs[0].dtype == float64 else _norm_32(*xs).to(float32)


def rnorm(*xs: X) -> X:
    if xs[0].dtype == float64:
        return 1.0 / _norm_64(*xs)
    return (1.0 / _norm_32(*xs)).to(float32)


def rhypot_64(x: X, y: X) -> X:
    return 1.0 / bi("hypot", x, y)


def rcbrt_64(x: X) -> X:
    return 1.0 / un("cbrt", x)


def powi_64(x: X, n: X) -> X:
    """x ** n for an int32 n: pow with n converted exactly to float64."""
    return bi("pow", x, n.to(float64))


def rsqrt_rn(x: X) -> X:
    """float32 1/sqrt(x) correctly rounded: the float64 quotient rounded to float32, moved to
    a neighbour when the exact value is past the midpoint between them.  The midpoints m have
    25 significant bits, so m*m is exact in float64 and fma(m*m, x, -1) has the sign of
    m - 1/sqrt(x) exactly (1/sqrt(x) is never a midpoint)."""
    d = x.to(float64)
    y = (1.0 / un("sqrt", d)).to(float32)
    w = y.to(float64)
    lo = (w + bi("nextafter", y, -INF).to(float64)) * 0.5
    hi = (w + bi("nextafter", y, INF).to(float64)) * 0.5
    down = fma(lo * lo, d, d.like(-1.0)) > 0.0
    up = fma(hi * hi, d, d.like(-1.0)) < 0.0
    ok = (x > 0.0) & (x < INF)
    y = where(ok & down, bi("nextafter", y, -INF), where(ok & up, bi("nextafter", y, INF), y))
    return y

