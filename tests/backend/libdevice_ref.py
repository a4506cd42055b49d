"""float64 and exact references for the libdevice tests, written independently of kdsl's
implementation: Python's `math`, NumPy's float64 functions, exact rational arithmetic
(`fractions.Fraction`) for rounding and bit functions, quadrature for the Bessel functions,
bisection for the inverse error functions and a continued fraction for erfcx."""

from __future__ import annotations

import math
from decimal import Decimal, getcontext
from fractions import Fraction

import numpy as np

getcontext().prec = 60
INF, NAN = math.inf, math.nan
_PI = Decimal("3.14159265358979323846264338327950288419716939937510582097494459")

# ----------------------------------------------------------------------------- inputs

_F32_EDGES = [
    0.0, -0.0, INF, -INF, NAN, 1e-45, -1e-45, 1e-40, -3e-39, 1.1754944e-38, 3.4028235e38,
    -3.4028235e38, 0.5, -0.5, 1.5, 2.5, -2.5, 3.5, -1.5, 1.0, -1.0, 2.0, 3.0, 0.25, 0.75, 0.1,
    -0.1, 3.7, -3.7, 10.0, -10.0, 100.0, 1e10, -1e10, 1e30, 8388609.0, 16777216.0, 0.49999997,
    1e-7, -7.25, 7.5, 20.0, 30.0, 45.0, 88.0, -20.0, 0.999, -0.999, 5e-20, 1e20,
]
_F64_EDGES = [
    0.0, -0.0, INF, -INF, NAN, 5e-324, -5e-324, 1e-310, -3e-309, 2.2250738585072014e-308,
    1.7976931348623157e308, -1.7976931348623157e308, 0.5, -0.5, 1.5, 2.5, -2.5, 3.5, -1.5,
    1.0, -1.0, 2.0, 3.0, 0.25, 0.75, 0.1, -0.1, 3.7, -3.7, 10.0, -10.0, 100.0, 1e10, -1e10,
    1e200, 4503599627370497.0, 9007199254740992.0, 0.49999999999999994, 1e-17, -7.25, 7.5,
    20.0, 30.0, 45.0, 88.0, -20.0, 0.999, -0.999, 5e-160, 1e160,
]
N = 128


def edge_values(dtype, rng: np.random.Generator, n: int = N) -> np.ndarray:
    """Edge cases (signed zeros, infinities, NaN, subnormals, extremes, halfway cases) then
    random values of random sign over many magnitudes."""
    edges = _F32_EDGES if dtype == np.float32 else _F64_EDGES
    rest = n - len(edges)
    mag = np.exp(rng.uniform(np.log(1e-4), np.log(1e4), rest))
    vals = np.concatenate([np.array(edges), mag * rng.choice([-1.0, 1.0], rest)])
    return vals.astype(dtype)


def interval_values(dtype, rng, lo: float, hi: float, extra=(), n: int = N) -> np.ndarray:
    """`extra` then uniform values in [lo, hi]."""
    extra = list(extra)
    vals = np.concatenate([np.array(extra, dtype=np.float64),
                           rng.uniform(lo, hi, n - len(extra))])
    return vals.astype(dtype)


# ------------------------------------------------------------------ comparison helpers


def ulp_error(got: np.ndarray, ref: np.ndarray, dtype) -> np.ndarray:
    """|got - ref| in ulps of `dtype` at the reference (0 when both are the same NaN/inf/zero;
    inf when only one is NaN or an infinity differs)."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    with np.errstate(all="ignore"):
        r = ref.astype(dtype)
        spacing = np.spacing(np.abs(r).astype(dtype)).astype(np.float64)
        err = np.abs(got - ref) / spacing
    r = r.astype(np.float64)
    both_nan = np.isnan(got) & np.isnan(r)
    same = (got == r) | both_nan
    nonfinite = ~np.isfinite(got) | ~np.isfinite(r)
    err = np.where(same, 0.0, np.where(nonfinite, np.inf, err))
    return np.where(np.isnan(err), np.inf, err)


def assert_ulps(got, ref, dtype, ulps: float, what: str, inputs=(), atol: float = 0.0,
                signed_zero: bool = False) -> None:
    """Every element within `ulps` ulps (plus `atol`) of the reference; NaN where it is NaN.
    `signed_zero`: a zero must also have the reference's sign."""
    got = np.asarray(got)
    ref = np.asarray(ref, np.float64)
    err = ulp_error(got, ref, dtype)
    with np.errstate(all="ignore"):
        close = np.abs(np.asarray(got, np.float64) - ref) <= atol
    ok = (err <= ulps) | (close & np.isfinite(ref) & np.isfinite(got))
    if signed_zero:
        zero = (ref == 0) & (np.asarray(got, np.float64) == 0)
        ok &= ~zero | (np.signbit(got) == np.signbit(ref))
    if not ok.all():
        bad = np.flatnonzero(~ok)[:8]
        rows = [f"  in={[x[i] for x in inputs]} got={got[i]!r} ref={ref[i]!r} "
                f"err={err[i]:.3g} ulp" for i in bad]
        raise AssertionError(f"{what}: {(~ok).sum()} of {ok.size} beyond {ulps} ulp\n"
                             + "\n".join(rows))


def assert_bits(got, ref, what: str, inputs=()) -> None:
    """Exactly the reference: same value, same sign of zero, NaN where it is NaN."""
    got, ref = np.asarray(got), np.asarray(ref).astype(np.asarray(got).dtype)
    if got.dtype.kind == "f":
        ok = ((got == ref) & (np.signbit(got) == np.signbit(ref))) | (np.isnan(got) & np.isnan(ref))
    else:
        ok = got == ref
    if not ok.all():
        bad = np.flatnonzero(~ok)[:8]
        rows = [f"  in={[x[i] for x in inputs]} got={got[i]!r} ref={ref[i]!r}" for i in bad]
        raise AssertionError(f"{what}: {(~ok).sum()} of {ok.size} differ\n" + "\n".join(rows))


def vec(f, otype=np.float64):
    return np.vectorize(f, otypes=[otype])


# ---------------------------------------------------------------------- float64 math


def _c_lgamma(v: float) -> float:
    if math.isnan(v):
        return v
    if math.isinf(v) or (v <= 0 and v == math.floor(v)):
        return INF
    return math.lgamma(v)


def _c_tgamma(v: float) -> float:
    if math.isnan(v) or v == INF:
        return v
    if v == 0:
        return math.copysign(INF, v)
    if v == -INF or (v < 0 and v == math.floor(v)):
        return NAN
    try:
        return math.gamma(v)
    except OverflowError:
        return INF


def _round_half_away(v: float) -> float:
    if not math.isfinite(v):
        return v
    f = Fraction(v)
    r = math.floor(abs(f) + Fraction(1, 2))
    return math.copysign(float(r), v)


def _remainder(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or b == 0:
        return NAN
    return math.remainder(a, b)


def _sin_pi_exact(f: Fraction) -> float:
    """sin(pi f) for an exact rational f: reduced exactly to [-1/2, 1/2], then the product
    pi * f in 50 digits, split into two floats."""
    f = f % 2
    if f > 1:
        f -= 2
    if f > Fraction(1, 2):
        f = 1 - f
    elif f < -Fraction(1, 2):
        f = -1 - f
    arg = Decimal(f.numerator) / Decimal(f.denominator) * _PI
    hi = float(arg)
    lo = float(arg - Decimal(hi))
    return math.sin(hi) + lo * math.cos(hi)


def sinpi(v: float) -> float:
    if not math.isfinite(v):
        return NAN
    r = _sin_pi_exact(Fraction(v))
    return math.copysign(0.0, v) if r == 0.0 else r


def cospi(v: float) -> float:
    if not math.isfinite(v):
        return NAN
    r = _sin_pi_exact(Fraction(v) + Fraction(1, 2))
    return 0.0 if r == 0.0 else r


def logb(v: float) -> float:
    if math.isnan(v):
        return v
    if math.isinf(v):
        return INF
    if v == 0:
        return -INF
    return float(math.frexp(v)[1] - 1)


def _erfcx(v: float) -> float:
    if math.isnan(v):
        return v
    if v < 25:
        if v < -26.7:
            return INF
        h = v * v
        lo = float(Fraction(v) ** 2 - Fraction(h))
        try:
            return math.exp(h) * (1 + lo) * math.erfc(v)
        except OverflowError:
            return INF
    # continued fraction: erfcx(x) = (1/sqrt(pi)) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))
    if v == INF:
        return 0.0
    t = v
    for k in range(60, 0, -1):
        t = v + (k / 2) / t
    return 1 / (math.sqrt(math.pi) * t)


def _invert(f, target: float, lo: float, hi: float, increasing: bool) -> float:
    """Bisection to the float64 resolution."""
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if (f(mid) < target) == increasing:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def erfinv(y: float) -> float:
    if math.isnan(y) or abs(y) > 1:
        return NAN
    if abs(y) == 1:
        return math.copysign(INF, y)
    if y == 0:
        return y
    a = abs(y)
    if a > 0.5:
        q = 1 - a  # exact
        x = _invert(math.erfc, q, 0.0, 30.0, False)
    else:
        x = _invert(math.erf, a, 0.0, 1.0, True)
    return math.copysign(x, y)


def erfcinv(q: float) -> float:
    if math.isnan(q) or q < 0 or q > 2:
        return NAN
    if q == 0:
        return INF
    if q == 2:
        return -INF
    if 0.5 <= q <= 1.5:
        return erfinv(1 - q)  # exact argument
    if q > 1:
        return -erfcinv(2 - q)
    return _invert(math.erfc, q, 0.0, 30.0, False)


def normcdf(x: float) -> float:
    if math.isnan(x):
        return x
    z = -x / math.sqrt(2)
    exact = -Decimal(x) / Decimal(2).sqrt()
    zl = float(exact - Decimal(z)) if math.isfinite(z) else 0.0
    return 0.5 * (math.erfc(z) - zl * 2 / math.sqrt(math.pi) * math.exp(-z * z))


def normcdfinv(p: float) -> float:
    """sqrt(2) erfinv(2p - 1) in the middle, -sqrt(2) erfcinv(2p) in the tails (exact
    arguments)."""
    if math.isnan(p) or p < 0 or p > 1:
        return NAN
    s2 = Decimal(2).sqrt()
    if 0.25 <= p <= 0.75:
        return float(Decimal(erfinv(2 * p - 1)) * s2)
    if p < 0.25:
        return float(-Decimal(erfcinv(2 * p)) * s2) if p > 0 else -INF
    return float(Decimal(erfcinv(2 - 2 * p)) * s2) if p < 1 else INF


# Bessel functions J_n, Y_n: ascending series in 60-digit decimal arithmetic for x <= 60
# (DLMF 10.2.2 and 10.8.1; the alternating terms stay far inside the precision), Hankel's
# asymptotic expansion above (DLMF 10.17.3, the phase reduced modulo 2 pi exactly).
_EULER = Decimal("0.577215664901532860606512090082402431042159335939923598805767")


def _j_series(n: int, x: Decimal) -> Decimal:
    y = -(x * x) / 4
    term = (x / 2) ** n / math.factorial(n)
    total, k = term, 0
    while abs(term) > Decimal("1e-45") * max(abs(total), Decimal(1)) or k < 5:
        k += 1
        term = term * y / (k * (n + k))
        total += term
    return total


def _y_series(n: int, x: Decimal) -> Decimal:
    pi = _PI
    h = x / 2
    first = -sum(Decimal(math.factorial(n - k - 1)) / math.factorial(k) * (h * h) ** k
                 for k in range(n)) / h ** n / pi if n else Decimal(0)
    second = 2 / pi * h.ln() * _j_series(n, x)

    def psi(m: int) -> Decimal:  # digamma(m + 1) = -gamma + H_m
        return -_EULER + sum((Decimal(1) / j for j in range(1, m + 1)), Decimal(0))

    y = -(h * h)
    term = h ** n / math.factorial(n)  # (x/2)^n (-x^2/4)^k / (k! (n+k)!)
    total, k = psi(0) + psi(n), 0
    total *= term
    hk, hnk = Decimal(0), sum((Decimal(1) / j for j in range(1, n + 1)), Decimal(0))
    while True:
        k += 1
        term = term * y / (k * (n + k))
        hk += Decimal(1) / k
        hnk += Decimal(1) / (n + k)
        t = term * (-2 * _EULER + hk + hnk)
        total += t
        if abs(t) < Decimal("1e-45") and k > 5:
            break
    return first + second - total / pi


def _hankel(n: int, x: float, kind: str) -> float:
    mu = 4 * n * n
    z = Decimal(x)
    a, terms = Decimal(1), []
    for k in range(30):
        terms.append(a)
        a = a * (mu - (2 * k + 1) ** 2) / ((k + 1) * 8) / z
    p = sum(terms[0::2][i] * (-1) ** i for i in range(len(terms[0::2])))
    q = sum(terms[1::2][i] * (-1) ** i for i in range(len(terms[1::2])))
    two_pi = 2 * _PI
    w = (z - n * _PI / 2 - _PI / 4) % two_pi
    c, s_ = math.cos(float(w)), math.sin(float(w))
    amp = (2 / (_PI * z)).sqrt()
    if kind == "j":
        return float(amp * (Decimal(c) * p - Decimal(s_) * q))
    return float(amp * (Decimal(s_) * p + Decimal(c) * q))


def bessel_j(n: int, x: float) -> float:
    if math.isnan(x):
        return x
    if math.isinf(x):
        return 0.0
    if x == 0:
        return 1.0 if n == 0 else 0.0
    sign = -1 if (x < 0 and n % 2) else 1
    a = abs(x)
    if a > 60:
        return sign * _hankel(n, a, "j")
    return sign * float(_j_series(n, Decimal(a)))


def bessel_y(n: int, x: float) -> float:
    if math.isnan(x) or x < 0:
        return NAN
    if x == 0:
        return -INF
    if math.isinf(x):
        return 0.0
    if x > 60:
        return _hankel(n, x, "y")
    r = _y_series(n, Decimal(x))
    return float(r) if abs(r) < Decimal("1.7e308") else -INF


def bessel_i(nu: int, x: float) -> float:
    """I_nu(x) = sum_k (x/2)^(2k+nu) / (k! (k+nu)!) in 50-digit decimal arithmetic (positive
    terms: no cancellation)."""
    if math.isnan(x):
        return x
    if math.isinf(x) or abs(x) > 720:  # I_nu overflows float64 beyond 713.99
        return INF if nu == 0 or x > 0 else -INF
    h = Decimal(abs(x)) / 2
    y = h * h
    term = h if nu == 1 else Decimal(1)
    total, k = term, 0
    while term > total * Decimal("1e-40"):
        k += 1
        term = term * y / (k * (k + nu))
        total += term
    r = float(total) if total < Decimal("1.8e308") else INF
    return -r if nu == 1 and x < 0 else r


# ------------------------------------------------------------------- exact rounding


def _bracket(q: Fraction, dtype) -> tuple[float, float]:
    """The floats of `dtype` lo <= q <= hi (lo == hi when q is representable)."""
    big = np.finfo(dtype).max
    if q > Fraction(float(big)):
        return float(big), INF
    if q < -Fraction(float(big)):
        return -INF, -float(big)
    y = np.asarray(float(q)).astype(dtype)
    fy = Fraction(float(y))
    if fy == q:
        return float(y), float(y)
    if fy > q:
        return float(np.nextafter(y, dtype(-INF))), float(y)
    return float(y), float(np.nextafter(y, dtype(INF)))


def round_exact(q: Fraction, dtype, mode: str, zero_sign: float = 1.0) -> float:
    """The exact value `q` rounded to `dtype` in `mode` (rn: ties to even); `zero_sign` is
    the sign of an exact zero."""
    if q == 0:
        return math.copysign(0.0, zero_sign)
    lo, hi = _bracket(q, dtype)
    if lo == hi:
        return lo
    if mode == "rd":
        r = lo
    elif mode == "ru":
        r = hi
    elif mode == "rz":
        r = lo if q > 0 else hi
    else:
        dlo = q - Fraction(lo) if math.isfinite(lo) else None
        dhi = Fraction(hi) - q if math.isfinite(hi) else None
        if dlo is None:
            r = lo if dhi is None else (lo if _past_overflow(q, dtype) else hi)
        elif dhi is None:
            r = hi if _past_overflow(q, dtype) else lo
        elif dlo != dhi:
            r = lo if dlo < dhi else hi
        else:
            bits = np.asarray(lo).astype(dtype).view(np.uint32 if dtype == np.float32
                                                       else np.uint64)
            r = lo if int(bits) % 2 == 0 else hi
    if r == 0:
        return math.copysign(0.0, float(q))
    return r


def _past_overflow(q: Fraction, dtype) -> bool:
    """Round to nearest overflows at max + half an ulp of max."""
    top = np.finfo(dtype).max
    big = Fraction(float(top))
    half = (big - Fraction(float(np.nextafter(top, dtype(0))))) / 2
    return abs(q) >= big + half


def directed(op: str, mode: str, dtype, *xs: float) -> float:
    """add/sub/mul/div/fma/sqrt/rcp of floats in `mode`, from the exact rational result."""
    xs = tuple(float(x) for x in xs)
    if any(math.isnan(x) for x in xs):
        return NAN
    if op == "sqrt":
        (a,) = xs
        if a < 0:
            return NAN
        if a == 0 or math.isinf(a):
            return a
        y = np.asarray(math.sqrt(a)).astype(dtype)
        # bracket sqrt(a) by comparing squares exactly
        fa = Fraction(a)
        cands = [float(np.nextafter(y, dtype(-INF))), float(y), float(np.nextafter(y, dtype(INF)))]
        lo = max(c for c in cands if Fraction(c) ** 2 <= fa)
        hi = min(c for c in cands if Fraction(c) ** 2 >= fa)
        if lo == hi:
            return lo
        if mode in ("rd", "rz"):
            return lo
        if mode == "ru":
            return hi
        mid = (Fraction(lo) + Fraction(hi)) / 2
        return lo if mid * mid > fa else hi
    with np.errstate(all="ignore"):
        plain = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
                 "div": lambda a, b: a / b if b != 0 else (
                     math.copysign(INF, a) * math.copysign(1, b) if a != 0 else NAN),
                 "rcp": lambda a: 1 / a if a != 0 else math.copysign(INF, a),
                 "fma": lambda a, b, c: a * b + c}[op]
        if op == "fma" and math.isfinite(xs[0]) and math.isfinite(xs[1]) and math.isinf(xs[2]):
            return xs[2]  # the exact product is finite
        if not all(math.isfinite(x) for x in xs) or (op == "div" and xs[1] == 0) or (
                op == "rcp" and xs[0] == 0):
            v = plain(*(np.float64(x) for x in xs))
            return float(np.asarray(v).astype(dtype))
    f = [Fraction(x) for x in xs]
    q = {"add": lambda: f[0] + f[1], "sub": lambda: f[0] - f[1], "mul": lambda: f[0] * f[1],
         "div": lambda: f[0] / f[1], "rcp": lambda: 1 / f[0],
         "fma": lambda: f[0] * f[1] + f[2]}[op]()
    if q == 0:  # IEEE 754 signs of an exact zero
        sb = [math.copysign(1, x) < 0 for x in xs]
        if op in ("mul", "div"):
            return -0.0 if sb[0] != sb[1] else 0.0
        s1, s2 = {"add": (sb[0], sb[1]), "sub": (sb[0], not sb[1])}.get(
            op, (sb[0] != sb[1], sb[-1]))
        return -0.0 if (s1 and s2) or (s1 != s2 and mode == "rd") else 0.0
    return round_exact(q, dtype, mode)


def to_float_exact(v: float, dtype, mode: str) -> float:
    """An integer (or float64) converted to `dtype` in `mode`."""
    if isinstance(v, float) and not math.isfinite(v):
        return float(np.asarray(v).astype(dtype))
    if v == 0:
        return math.copysign(0.0, v) if isinstance(v, float) else 0.0
    return round_exact(Fraction(v), dtype, mode)
