"""libdevice (`kd.extra.libdevice`) and `kd.math` on every backend, against float64 or exact
references (tests/backend/libdevice_ref.py), on tiles of edge cases: signed zeros,
infinities, NaN, subnormals, extremes, halfway cases for rounding, then random values.

Tolerances are in ulps of the result type.  Exact functions (rounding to integers, directed
rounding, conversions, bit functions, copysign, nextafter, ldexp, fmod, remainder, fdim, logb)
must match bit for bit, the sign of zero included.  Several functions share one kernel (one
row of the input tile each), so that a backend compiles a handful of kernels."""

from __future__ import annotations

import math
import zlib
from decimal import Decimal
from fractions import Fraction

import libdevice_ref as R
import numpy as np
import pytest

import kdsl as kd
from kdsl.language.extra import libdevice as ld
from kdsl.backends import get_backend

BLOCK = R.N
F32, F64 = np.float32, np.float64


def multi_kernel(fns: tuple, nargs: int):
    """A kernel applying fns[i] to row i of each input array (BLOCK elements a row)."""
    n = len(fns)
    if nargs == 1:
        @kd.jit
        def k1(a_ptr, o_ptr, BLOCK: kd.constexpr):
            offs = kd.arange(0, BLOCK)
            for i in kd.static_range(n):
                a = kd.load(a_ptr + i * BLOCK + offs)
                kd.store(o_ptr + i * BLOCK + offs, fns[i](a))
        return k1
    if nargs == 2:
        @kd.jit
        def k2(a_ptr, b_ptr, o_ptr, BLOCK: kd.constexpr):
            offs = kd.arange(0, BLOCK)
            for i in kd.static_range(n):
                a = kd.load(a_ptr + i * BLOCK + offs)
                b = kd.load(b_ptr + i * BLOCK + offs)
                kd.store(o_ptr + i * BLOCK + offs, fns[i](a, b))
        return k2
    if nargs == 3:
        @kd.jit
        def k3(a_ptr, b_ptr, c_ptr, o_ptr, BLOCK: kd.constexpr):
            offs = kd.arange(0, BLOCK)
            for i in kd.static_range(n):
                a = kd.load(a_ptr + i * BLOCK + offs)
                b = kd.load(b_ptr + i * BLOCK + offs)
                c = kd.load(c_ptr + i * BLOCK + offs)
                kd.store(o_ptr + i * BLOCK + offs, fns[i](a, b, c))
        return k3

    @kd.jit
    def k4(a_ptr, b_ptr, c_ptr, d_ptr, o_ptr, BLOCK: kd.constexpr):
        offs = kd.arange(0, BLOCK)
        for i in kd.static_range(n):
            a = kd.load(a_ptr + i * BLOCK + offs)
            b = kd.load(b_ptr + i * BLOCK + offs)
            c = kd.load(c_ptr + i * BLOCK + offs)
            d = kd.load(d_ptr + i * BLOCK + offs)
            kd.store(o_ptr + i * BLOCK + offs, fns[i](a, b, c, d))
    return k4


_KERNELS: dict = {}


def run_group(backend: str, names: list[str], inputs: list[list[np.ndarray]], out_dtype,
              fns=None) -> list[np.ndarray]:
    """Run libdevice functions `names` (inputs[i]: the argument rows of function i) in one
    kernel; returns each function's output row."""
    fns = tuple(fns or (getattr(ld, n) for n in names))
    nargs = len(inputs[0])
    key = (fns, nargs)
    if key not in _KERNELS:
        _KERNELS[key] = multi_kernel(fns, nargs)
    arrays = [np.concatenate([row[j] for row in inputs]) for j in range(nargs)]
    out = np.zeros(len(names) * BLOCK, out_dtype)
    _KERNELS[key][(1,)](*arrays, out, BLOCK=BLOCK, backend=backend)
    return [out[i * BLOCK:(i + 1) * BLOCK] for i in range(len(names))]


def _ref(f, *xs):
    with np.errstate(all="ignore"):
        return np.asarray(R.vec(f)(*[np.asarray(x, np.float64) for x in xs]))


_REFS: dict = {}


def _cached_ref(key, f, *xs):
    """References are the same for every backend: computed once per function and dtype."""
    if key not in _REFS:
        _REFS[key] = _ref(f, *xs)
    return _REFS[key]


def _check_all(failures: list[str]) -> None:
    if failures:
        raise AssertionError("\n".join(failures))


# ------------------------------------------------------------------- unary, float -> float

def _np(f):
    return lambda v: float(f(np.float64(v)))


def rng_for(name: str, dt) -> np.random.Generator:
    """The same inputs for a function whatever the order tests run in."""
    return np.random.default_rng(zlib.crc32(f"{name}/{np.dtype(dt).name}".encode()))


def _edge(dt, rng):
    return R.edge_values(dt, rng)


def _unit(dt, rng):
    return R.interval_values(dt, rng, -1, 1, [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.9999999,
                                              -0.99999, 1e-30, 1.5, -2.0, math.nan, 0.25,
                                              1 - 2**-23, 1 - 2**-52 if dt == F64 else 0.7])


def _two(dt, rng):
    return R.interval_values(dt, rng, 0, 2, [0.0, -0.0, 1.0, 2.0, 1e-30, 1e-300 if dt == F64
                                             else 1e-40, 1.9999999, 0.5, 1.5, -1.0, 2.5,
                                             math.nan, 1e-10, 2 - 2**-22])


def _prob(dt, rng):
    return R.interval_values(dt, rng, 0, 1, [0.0, 1.0, 0.5, 1e-30, 1e-300 if dt == F64
                                             else 1e-40, 0.999999, 1e-10, -0.1, 1.1, math.nan])


def _moderate(dt, rng):
    return R.interval_values(dt, rng, -30, 30, [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-40,
                                                0.5, -0.5, 12.0, 25.0, -26.0, 26.5, 30.0,
                                                -40.0, 100.0, 700.0, -700.0, 1e10])


# name: (reference, input generator, float32 ulps, float64 ulps, absolute tolerance)
UNARY: dict[str, tuple] = {
    "floor": (_np(np.floor), _edge, 0, 0, 0), "ceil": (_np(np.ceil), _edge, 0, 0, 0),
    "trunc": (_np(np.trunc), _edge, 0, 0, 0), "rint": (_np(np.rint), _edge, 0, 0, 0),
    "nearbyint": (_np(np.rint), _edge, 0, 0, 0), "round": (R._round_half_away, _edge, 0, 0, 0),
    "abs": (_np(np.abs), _edge, 0, 0, 0),
    "logb": (R.logb, _edge, 0, 0, 0),
    "sqrt": (_np(np.sqrt), _edge, 0, 0, 0), "rsqrt": (_np(lambda v: 1 / np.sqrt(v)), _edge, 2, 2, 0),
    "exp": (_np(np.exp), _edge, 2, 2, 0), "exp2": (_np(np.exp2), _edge, 2, 2, 0),
    "exp10": (_np(lambda v: np.power(10.0, v)), _edge, 2, 2, 0),
    "log": (_np(np.log), _edge, 2, 2, 0), "log2": (_np(np.log2), _edge, 2, 2, 0),
    "log10": (_np(np.log10), _edge, 2, 2, 0),
    "sin": (_np(np.sin), _moderate, 2, 2, 0), "cos": (_np(np.cos), _moderate, 2, 2, 0),
    "tan": (_np(np.tan), _moderate, 3, 2, 0),
    "sinh": (_np(np.sinh), _edge, 2, 2, 0), "cosh": (_np(np.cosh), _edge, 2, 2, 0),
    "tanh": (_np(np.tanh), _edge, 2, 2, 0),
    "asin": (_np(np.arcsin), _unit, 2, 2, 0), "acos": (_np(np.arccos), _unit, 2, 2, 0),
    "atan": (_np(np.arctan), _edge, 2, 2, 0), "asinh": (_np(np.arcsinh), _edge, 2, 2, 0),
    "acosh": (_np(np.arccosh), _edge, 2, 2, 0), "atanh": (_np(np.arctanh), _unit, 2, 2, 0),
    "log1p": (_np(np.log1p), _edge, 2, 2, 0), "expm1": (_np(np.expm1), _edge, 2, 2, 0),
    "cbrt": (_np(np.cbrt), _edge, 1, 2, 0), "rcbrt": (_np(lambda v: 1 / np.cbrt(v)), _edge, 1, 3, 0),
    "erf": (math.erf, _edge, 2, 2, 0), "erfc": (math.erfc, _moderate, 4, 4, 0),
    "lgamma": (R._c_lgamma, _moderate, 4, 4, "eps"),  # near its zeros: ulps of 1 "tgamma": (R._c_tgamma, _moderate, 4, 4, 0),
    "sinpi": (R.sinpi, _edge, 1, 2, 0), "cospi": (R.cospi, _edge, 1, 2, 0),
    "erfcx": (R._erfcx, _moderate, 1, 4, 0), "erfinv": (R.erfinv, _unit, 1, 4, 0),
    "erfcinv": (R.erfcinv, _two, 1, 4, 0), "normcdf": (R.normcdf, _moderate, 1, 4, 0),
    "normcdfinv": (R.normcdfinv, _prob, 1, 4, 0),
    "cyl_bessel_i0": (lambda v: R.bessel_i(0, v), _moderate, 1, 4, 0),
    "cyl_bessel_i1": (lambda v: R.bessel_i(1, v), _moderate, 1, 4, 0),
}
F32_ONLY = {
    "saturatef": (lambda v: v if 0 < v < 1 else (1.0 if v >= 1 else 0.0), _edge, 0, 0),
    "fast_expf": (_np(np.exp), _edge, 2, 0), "fast_logf": (_np(np.log), _edge, 2, 0),
    "fast_log2f": (_np(np.log2), _edge, 2, 0), "fast_log10f": (_np(np.log10), _edge, 2, 0),
    "fast_exp10f": (_np(lambda v: np.power(10.0, v)), _edge, 2, 0),
    "fast_sinf": (_np(np.sin), _moderate, 2, 0), "fast_cosf": (_np(np.cos), _moderate, 2, 0),
    "fast_tanf": (_np(np.tan), _moderate, 3, 0), "fast_tanhf": (_np(np.tanh), _edge, 2, 0),
    "rsqrt_rn": (_np(lambda v: 1 / np.sqrt(v)), _edge, 0, 0),
}


def _check_unary(backend, dt, table):
    names = sorted(table)
    rows = [[table[n][1](dt, rng_for(n, dt))] for n in names]
    outs = run_group(backend, names, rows, dt)
    fails = []
    for n, (x,), got in zip(names, rows, outs):
        spec = table[n]
        ulps = spec[2] if dt == F32 else spec[3]
        atol = spec[4] if len(spec) > 4 else 0.0
        atol = 8 * float(np.finfo(dt).eps) if atol == "eps" else atol
        ref = _cached_ref((n, np.dtype(dt).name), spec[0], x)
        try:
            if ulps == 0:
                R.assert_bits(got, ref.astype(dt), n, [x])
            else:
                R.assert_ulps(got, ref, dt, ulps, n, [x], atol=atol)
        except AssertionError as e:
            fails.append(str(e))
    _check_all(fails)


@pytest.mark.parametrize("dt", [F32, F64], ids=["f32", "f64"])
def test_unary_float(backend, dt):
    _check_unary(backend, dt, UNARY)


def test_unary_float32_only(backend):
    _check_unary(backend, F32, F32_ONLY)


# ------------------------------------------------------------------------- Bessel J, Y

BESSEL = {
    "j0": (lambda v: R.bessel_j(0, v), 2, 2), "j1": (lambda v: R.bessel_j(1, v), 2, 2),
    "y0": (lambda v: R.bessel_y(0, v), 2, 2), "y1": (lambda v: R.bessel_y(1, v), 2, 2),
}


@kd.jit
def jn3(x):
    return ld.jn(3, x)


@kd.jit
def yn2(x):
    return ld.yn(2, x)


def _bessel_x(dt, rng):
    return R.interval_values(dt, rng, 0, 60, [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-30,
                                              0.5, 1.0, 2.404825557695773, 3.8317059702075125,
                                              0.8935769662791675, 10.0, -1.0, -7.5, 100.0,
                                              1000.5])


@pytest.mark.parametrize("dt", [F32, F64], ids=["f32", "f64"])
def test_bessel_jy(backend, dt):
    """J and Y of orders 0, 1 and n; the quadrature references are accurate in absolute terms
    (near a zero the relative error of any implementation grows), hence the absolute part."""
    names = sorted(BESSEL) + ["jn", "yn"]
    xs = [_bessel_x(dt, rng_for(n, dt)) for n in names]
    fns = [getattr(ld, n) for n in sorted(BESSEL)] + [jn3, yn2]
    be = get_backend(backend)
    if be.level == "loop" and "bessel" not in be.caps:  # (OpenCL C has no Bessel functions)
        with pytest.raises(kd.CompilationError, match="j0 is not available on the opencl"):
            run_group(backend, names[:1], [[xs[0]]], dt, fns[:1])
        return
    outs = run_group(backend, names, [[x] for x in xs], dt, fns)
    refs = [BESSEL[n][0] for n in sorted(BESSEL)] + [lambda v: R.bessel_j(3, v),
                                                      lambda v: R.bessel_y(2, v)]
    fails = []
    for n, x, got, ref in zip(names, xs, outs, refs):
        r = _ref(ref, x)
        # absolute error grows with the argument (its phase x - n pi/2 - pi/4 is inexact)
        scale = np.maximum(8.0, np.nan_to_num(np.abs(x.astype(F64)), posinf=8.0))
        atol = 2.0**-24 * 4 if dt == F32 else 2.0**-53 * scale
        try:
            R.assert_ulps(got, r, dt, 4, n, [x], atol=atol)
        except AssertionError as e:
            fails.append(str(e))
    _check_all(fails)


# --------------------------------------------------------------------- binary, ternary

def _pairs(dt, rng):
    """Pairs of edge values (every edge against a few others) and random pairs."""
    a = R.edge_values(dt, rng)
    b = np.roll(R.edge_values(dt, rng), 7)
    b[:20] = a[20:40]
    return a, b


def _remainder_ref(a, b):
    return R._remainder(a, b)


def _fmod_ref(a, b):
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or b == 0:
        return math.nan
    if math.isinf(b):
        return a
    r = float(Fraction(a) - Fraction(b) * math.trunc(Fraction(a) / Fraction(b)))
    return math.copysign(r, a) if r == 0 else r


def _fdim_ref(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.nan
    return a - b if a > b else 0.0


def _nextafter_ref(dt):
    return lambda a, b: float(np.nextafter(dt(a), dt(b)))


def _pow_ref(a, b):
    with np.errstate(all="ignore"):
        return float(np.power(np.float64(a), np.float64(b)))


BINARY = {
    "atan2": (lambda a, b: math.atan2(a, b) if not (math.isnan(a) or math.isnan(b))
              else math.nan, 2, 2),
    "hypot": (lambda a, b: float(np.hypot(np.float64(a), np.float64(b))), 1, 2),
    "rhypot": (lambda a, b: 1 / float(np.hypot(np.float64(a), np.float64(b)))
               if (a, b) != (0, 0) else math.inf, 1, 2),
    "copysign": (math.copysign, 0, 0), "fmod": (_fmod_ref, 0, 0),
    "remainder": (_remainder_ref, 0, 0), "fdim": (_fdim_ref, 0, 0),
    "pow": (_pow_ref, 2, 2),
}


@pytest.mark.parametrize("dt", [F32, F64], ids=["f32", "f64"])
def test_binary_float(backend, dt):
    names = sorted(BINARY) + ["nextafter", "fast_powf", "fast_dividef"]
    if dt == F64:
        names = names[:-2]
    rows = [list(_pairs(dt, rng_for(n, dt))) for n in names]
    outs = run_group(backend, names, rows, dt)
    refs = {**{n: BINARY[n][0] for n in BINARY}, "nextafter": _nextafter_ref(dt),
            "fast_powf": _pow_ref, "fast_dividef": lambda a, b: float(np.float64(a) / b)
            if b != 0 else (math.copysign(math.inf, a) * math.copysign(1, b) if a != 0
                            and not math.isnan(a) else math.nan)}
    ulps = {n: BINARY[n][1 if dt == F32 else 2] for n in BINARY}
    ulps.update(nextafter=0, fast_powf=2, fast_dividef=0)
    fails = []
    for n, (a, b), got in zip(names, rows, outs):
        ref = _ref(refs[n], a, b)
        try:
            if ulps[n] == 0:
                R.assert_bits(got, ref.astype(dt), n, [a, b])
            else:
                R.assert_ulps(got, ref, dt, ulps[n], n, [a, b])
        except AssertionError as e:
            fails.append(str(e))
    _check_all(fails)


def _norm_ref(*xs):
    xs = [float(x) for x in xs]
    if any(math.isinf(x) for x in xs):
        return math.inf
    if any(math.isnan(x) for x in xs):
        return math.nan
    return float(Decimal(sum(Fraction(x) ** 2 for x in xs).numerator).sqrt()
                 / Decimal(sum(Fraction(x) ** 2 for x in xs).denominator).sqrt()) \
        if any(xs) else 0.0


@pytest.mark.parametrize("dt", [F32, F64], ids=["f32", "f64"])
def test_norms_and_fma(backend, dt):
    rng = rng_for("norm", dt)
    a, b = _pairs(dt, rng)
    c = np.roll(a, 3)
    d = np.roll(b, 11)
    names = ["fma", "fma_rn", "norm3d", "rnorm3d"]
    outs = run_group(backend, names, [[a, b, c]] * 4, dt)
    out4 = run_group(backend, ["norm4d", "rnorm4d"], [[a, b, c, d]] * 2, dt)
    fma_ref = np.array([R.directed("fma", "rn", dt, *t) for t in zip(a, b, c)])
    n3 = np.array([_norm_ref(*t) for t in zip(a, b, c)])
    n4 = np.array([_norm_ref(*t) for t in zip(a, b, c, d)])
    with np.errstate(all="ignore"):
        R.assert_bits(outs[0], fma_ref.astype(dt), "fma", [a, b, c])
        R.assert_bits(outs[1], fma_ref.astype(dt), "fma_rn", [a, b, c])
        R.assert_ulps(outs[2], n3, dt, 2, "norm3d", [a, b, c])
        R.assert_ulps(outs[3], 1 / n3, dt, 2, "rnorm3d", [a, b, c])
        R.assert_ulps(out4[0], n4, dt, 2, "norm4d", [a, b, c, d])
        R.assert_ulps(out4[1], 1 / n4, dt, 2, "rnorm4d", [a, b, c, d])


# ------------------------------------------------------------------ directed rounding

def _directed_inputs(dt, rng):
    """Operands whose exact results are halfway cases, tiny, huge, subnormal or exact."""
    a, b = _pairs(dt, rng)
    eps = np.finfo(dt).eps
    tiny = np.finfo(dt).smallest_subnormal
    big = np.finfo(dt).max
    special = [(1.0, eps / 2), (1.0, -eps / 4), (1.0, eps * 0.75), (3.0, -3.0), (-0.0, 0.0),
               (-0.0, -0.0), (tiny, 0.5), (tiny * 3, 0.5), (big, big), (big, -big / 2),
               (big, 2.0), (1 / 3, 3.0), (2.0, 0.1), (1e-30, 1e-30), (-1e-30, 1e-30),
               (big / 2, 1.5), (0.1, 0.2), (tiny, -tiny), (1.0, 3.0), (-1.0, 3.0), (2.0, -7.0)]
    for i, (x, y) in enumerate(special):
        a[i + 60], b[i + 60] = x, y
    return a, b


@pytest.mark.parametrize("dt", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_directed_binary(backend, dt, op):
    """{add,sub,mul,div}_{rn,rz,rd,ru} bit-exact against exact rational arithmetic."""
    a, b = _directed_inputs(dt, rng_for(op, dt))
    names = [f"{op}_{m}" for m in ("rn", "rz", "rd", "ru")]
    outs = run_group(backend, names, [[a, b]] * 4, dt)
    fails = []
    for n, got in zip(names, outs):
        ref = np.array([R.directed(op, n[-2:], dt, x, y) for x, y in zip(a, b)])
        try:
            R.assert_bits(got, ref.astype(dt), n, [a, b])
        except AssertionError as e:
            fails.append(str(e))
    _check_all(fails)


@pytest.mark.parametrize("dt", [F32, F64], ids=["f32", "f64"])
def test_directed_unary_and_fma(backend, dt):
    a, b = _directed_inputs(dt, rng_for("sqrt", dt))
    c = np.roll(a, 5)
    with np.errstate(all="ignore"):
        c[60:70] = -(a[60:70] * b[60:70])  # exact cancellations, zero signs
        c[70:75] = a[70:75] * b[70:75] * np.finfo(dt).eps
    modes = ("rn", "rz", "rd", "ru")
    names = [f"{f}_{m}" for f in ("sqrt", "rcp") for m in modes]
    outs = run_group(backend, names, [[np.abs(a) if n.startswith("sqrt") else a]
                                      for n in names], dt)
    fmas = [f"fma_{m}" for m in modes[1:]]
    outs += run_group(backend, fmas, [[a, b, c]] * 3, dt)
    fails = []
    for n, got in zip(names + fmas, outs):
        op, m = n.split("_")
        args = [np.abs(a)] if op == "sqrt" else [a] if op == "rcp" else [a, b, c]
        ref = np.array([R.directed(op, m, dt, *t) for t in zip(*args)])
        try:
            R.assert_bits(got, ref.astype(dt), n, args)
        except AssertionError as e:
            fails.append(str(e))
    _check_all(fails)


# ------------------------------------------------------------- float with int arguments

I32 = np.int32


def _exponents(rng):
    e = rng.integers(-300, 300, BLOCK).astype(I32)
    e[:12] = [0, 1, -1, 2**31 - 1, -(2**31), 128, -150, 1100, -1100, -1075, 2000, -2000]
    return e


@pytest.mark.parametrize("dt", [F32, F64], ids=["f32", "f64"])
def test_ldexp_and_integer_pow(backend, dt):
    rng = rng_for("ldexp", dt)
    x = R.edge_values(dt, rng)
    n = _exponents(rng)
    small = (n % 7 - 3).astype(I32)
    outs = run_group(backend, ["ldexp", "scalbn", "pow"], [[x, n], [x, n], [x, small]], dt)

    def ldexp_ref(v, k):
        v, k = float(v), int(k)
        if not math.isfinite(v) or v == 0:
            return v
        return R.round_exact(Fraction(v) * Fraction(2) ** k, dt, "rn")

    ref = np.array([ldexp_ref(v, k) for v, k in zip(x, n)])
    R.assert_bits(outs[0], ref.astype(dt), "ldexp", [x, n])
    R.assert_bits(outs[1], ref.astype(dt), "scalbn", [x, n])
    with np.errstate(all="ignore"):
        pref = np.power(x.astype(F64), small.astype(F64))
    R.assert_ulps(outs[2], pref, dt, 2, "pow(x, int)", [x, small])


# ------------------------------------------------------------- predicates, int results

def _int_results(dt):
    return {
        "isnan": lambda v: math.isnan(v), "isinf": lambda v: math.isinf(v),
        "signbit": lambda v: math.copysign(1, v) < 0,
        "ilogb": lambda v: -(2**31) if v == 0 or math.isnan(v) else (
            2**31 - 1 if math.isinf(v) else math.frexp(v)[1] - 1),
        "llrint": lambda v: _sat(np.rint(v), 64), "llround": lambda v: _sat(
            R._round_half_away(v), 64),
        ("finitef" if dt == F32 else "isfinited"): lambda v: math.isfinite(v),
    }


def _sat(v: float, bits: int, signed: bool = True) -> int:
    """float -> int conversion as kdsl defines it: NaN -> 0, out of range saturates."""
    if math.isnan(v):
        return 0
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    if v <= lo:
        return lo
    if v >= hi:
        return hi
    return int(v)


@pytest.mark.parametrize("dt", [F32, F64], ids=["f32", "f64"])
def test_predicates_and_integer_results(backend, dt):
    table = _int_results(dt)
    names = list(table)
    x = R.edge_values(dt, rng_for("pred", dt))
    outs = run_group(backend, names, [[x]] * len(names), np.int64)
    for n, got in zip(names, outs):
        ref = np.array([int(table[n](float(v))) for v in x], np.int64)
        R.assert_bits(got, ref, n, [x])


# ------------------------------------------------------------------------ conversions

def _float_to_int_refs(src):
    """name -> reference for the float -> integer conversions of a float32/float64 source."""
    p = "float" if src == F32 else "double"
    rnd = {"rn": np.rint, "rz": np.trunc, "rd": np.floor, "ru": np.ceil}
    out = {}
    for m, f in rnd.items():
        def conv(bits, signed, result_bits, f=f):
            def g(v):
                r = _sat(float(f(v)), bits, signed)
                return r - 2**result_bits if r >= 2 ** (result_bits - 1) else r  # same bits
            return g
        out[f"{p}2int_{m}"] = conv(32, True, 32)
        out[f"{p}2uint_{m}"] = conv(32, False, 32)
        out[f"{p}2ll_{m}"] = conv(64, True, 64)
        out[f"{p}2ull_{m}"] = conv(64, False, 64)
    return out


@pytest.mark.parametrize("src", [F32, F64], ids=["f32", "f64"])
def test_float_to_int_conversions(backend, src):
    table = _float_to_int_refs(src)
    names = sorted(table)
    x = R.edge_values(src, rng_for("f2i", src))
    x[50:60] = [2.5, -2.5, 3.5, -0.5, 2**31 - 0.5 if src == F64 else 2**31, -(2**31) - 0.5,
                2**32 + 7 if src == F64 else 2**32, -1.5, 2**63, 2**64]
    outs = run_group(backend, names, [[x]] * len(names), np.int64)
    for n, got in zip(names, outs):
        ref = np.array([table[n](float(v)) for v in x], np.int64)
        R.assert_bits(got, ref, n, [x])


def _bits_of(v, dt):
    return int(np.asarray(v, dt).view(np.int32 if dt == F32 else np.int64))


def test_bit_reinterpretations(backend):
    x = R.edge_values(F32, rng_for("bits", F32))
    d = R.edge_values(F64, rng_for("bits", F64))
    out = run_group(backend, ["float_as_int", "float_as_uint"], [[x], [x]], np.int64)
    ref = np.array([_bits_of(v, F32) for v in x])
    R.assert_bits(out[0], ref, "float_as_int", [x])
    R.assert_bits(out[1], ref, "float_as_uint", [x])
    out = run_group(backend, ["double_as_longlong", "double2loint", "double2hiint"],
                    [[d]] * 3, np.int64)
    bits = np.array([_bits_of(v, F64) for v in d], np.int64)
    R.assert_bits(out[0], bits, "double_as_longlong", [d])
    R.assert_bits(out[1], bits.astype(np.int32).astype(np.int64), "double2loint", [d])
    R.assert_bits(out[2], (bits >> 32).astype(np.int64), "double2hiint", [d])
    hi, lo = (bits >> 32).astype(I32), bits.astype(I32)
    back = run_group(backend, ["hiloint2double"], [[hi, lo]], F64)[0]
    R.assert_bits(back, d, "hiloint2double", [hi, lo])
    back = run_group(backend, ["longlong_as_double"], [[bits]], F64)[0]
    R.assert_bits(back, d, "longlong_as_double", [bits])
    ib = ref.astype(I32)
    back = run_group(backend, ["int_as_float"], [[ib]], F32)[0]
    R.assert_bits(back, x, "int_as_float", [ib])
    back = run_group(backend, ["uint_as_float"], [[ib.view(np.uint32)]], F32)[0]
    R.assert_bits(back, x, "uint_as_float", [ib])


def _ints(dtype, rng):
    info = np.iinfo(dtype)
    edges = [0, 1, -1, 2, 3, info.max, info.min, info.max - 1, info.min + 1, 2**24 - 1, 2**24,
             2**24 + 1, -(2**24) - 1, 2**31 - 1, 2**53 + 1, -(2**53) - 1, 2**62 + 3, 12345678]
    edges = [v for v in edges if info.min <= v <= info.max]
    vals = rng.integers(info.min, info.max, BLOCK, dtype=dtype, endpoint=True)
    vals[:len(edges)] = edges
    return vals


@pytest.mark.parametrize("src", [np.int32, np.uint32, np.int64, np.uint64],
                         ids=["i32", "u32", "i64", "u64"])
def test_int_to_float_conversions(backend, src):
    v = _ints(src, rng_for("i2f", src))
    short = {np.int32: ("int2float", "int2double"), np.uint32: ("uint2float", "uint2double"),
             np.int64: ("ll2float", "ll2double"), np.uint64: ("ull2float", "ull2double")}[src]
    modes = ("rn", "rz", "rd", "ru")
    names = [f"{short[0]}_{m}" for m in modes]
    outs = run_group(backend, names, [[v]] * 4, F32)
    dnames = [f"{short[1]}_{m}" for m in modes] if src in (np.int64, np.uint64) \
        else [f"{short[1]}_rn"]
    douts = run_group(backend, dnames, [[v]] * len(dnames), F64)
    for n, got in zip(names + dnames, outs + douts):
        dt = F32 if n in names else F64
        ref = np.array([R.to_float_exact(int(k), dt, n[-2:]) for k in v])
        R.assert_bits(got, ref.astype(dt), n, [v])


@pytest.mark.parametrize("mode", ["rn", "rz", "rd", "ru"])
def test_double_to_float(backend, mode):
    d = R.edge_values(F64, rng_for("d2f", F64))
    d[50:60] = [1 + 2**-24, 1 + 2**-24 + 2**-50, -(1 + 2**-24), 3.4028235677973366e38,
                3.4028236e38, 1e-45, 7e-46, 1e-50, -1e-50, 0.1]
    got = run_group(backend, [f"double2float_{mode}"], [[d]], F32)[0]
    ref = np.array([R.to_float_exact(float(v), F32, mode) for v in d])
    R.assert_bits(got, ref.astype(F32), f"double2float_{mode}", [d])


# --------------------------------------------------------------------------- integers

def _to_unsigned(v: int, bits: int) -> int:
    return v & ((1 << bits) - 1)


def _to_type(v: int, bits: int, signed: bool) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


def _int_refs(bits: int, signed: bool) -> dict:
    u = lambda v: _to_unsigned(int(v), bits)
    t = lambda v: _to_type(v, bits, signed)
    refs = {
        "clz": lambda a: bits - u(a).bit_length(),
        "popc": lambda a: u(a).bit_count(),
        "ffs": lambda a: (u(a) & -u(a)).bit_length(),
        "brev": lambda a: t(int(f"{u(a):0{bits}b}"[::-1], 2)),
        "mulhi": lambda a, b: t((int(a) * int(b)) >> bits),
        "umulhi": lambda a, b: t((u(a) * u(b)) >> bits),
        "abs": lambda a: t(abs(int(a))),
    }
    if bits == 32:
        s24 = (lambda v: _to_type(int(v), 24, True)) if signed else (lambda v: int(v) & 0xFFFFFF)
        refs.update({
            "mul24": lambda a, b: t(s24(a) * s24(b)),
            "hadd": lambda a, b: t((int(a) + int(b)) >> 1),
            "rhadd": lambda a, b: t((int(a) + int(b) + 1) >> 1),
        })
    return refs


_ONE_ARG = ("clz", "popc", "ffs", "brev", "abs")
_INT_NAMES = {
    (32, True): ["clz", "popc", "ffs", "brev", "abs", "mulhi", "umulhi", "mul24", "hadd",
                 "rhadd"],
    (32, False): ["mulhi", "umulhi", "mul24", "hadd", "rhadd"],
    (64, True): ["clz", "popc", "ffs", "brev", "abs", "mulhi", "umulhi"],
    (64, False): ["mulhi", "umulhi"],
}


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64],
                         ids=["i32", "u32", "i64", "u64"])
def test_integer_functions(backend, dtype):
    info = np.iinfo(dtype)
    key = (info.bits, info.min < 0)
    refs = _int_refs(*key)
    rng = rng_for("int", dtype)
    a, b = _ints(dtype, rng), np.roll(_ints(dtype, rng), 5)
    for arity in (1, 2):
        names = [n for n in _INT_NAMES[key] if (n in _ONE_ARG) == (arity == 1)]
        if not names:
            continue
        fns = [kd.umulhi if n == "umulhi" else getattr(ld, n) for n in names]
        args = [a] if arity == 1 else [a, b]
        out_dt = np.int64 if names[0] in ("clz", "popc", "ffs") else dtype
        outs = run_group(backend, names, [args] * len(names), dtype, fns)
        for n, got in zip(names, outs):
            ref = np.array([refs[n](*t) for t in zip(*args)], dtype=object)
            if n in ("clz", "popc", "ffs"):
                got = got.astype(np.int64)
            R.assert_bits(np.asarray(got).astype(object), ref, n, args)
        del out_dt


def test_sad_and_byte_perm(backend):
    rng = rng_for("sad", np.int32)
    a, b = _ints(np.int32, rng), np.roll(_ints(np.int32, rng), 3)
    z = _ints(np.uint32, rng)
    got = run_group(backend, ["sad"], [[a, b, z]], np.int32)[0]
    ref = [_to_type(abs(int(x) - int(y)) + int(w), 32, True) for x, y, w in zip(a, b, z)]
    R.assert_bits(got, np.array(ref, np.int64).astype(np.int32), "sad", [a, b, z])
    ua, ub = a.view(np.uint32), b.view(np.uint32)
    got = run_group(backend, ["sad"], [[ua, ub, z]], np.uint32)[0]
    ref = [(abs(int(x) - int(y)) + int(w)) & 0xFFFFFFFF for x, y, w in zip(ua, ub, z)]
    R.assert_bits(got, np.array(ref, np.uint64).astype(np.uint32), "usad", [ua, ub, z])
    s = rng.integers(0, 2**31, BLOCK).astype(np.int32)
    s[:4] = [0x3210, 0x7654, 0x0123, 0x4444]
    got = run_group(backend, ["byte_perm"], [[a, b, s]], np.int32)[0]

    def perm(x, y, sel):
        v = (_to_unsigned(int(y), 32) << 32) | _to_unsigned(int(x), 32)
        r = 0
        for i in range(4):
            k = (int(sel) >> (4 * i)) & 7
            r |= ((v >> (8 * k)) & 0xFF) << (8 * i)
        return _to_type(r, 32, True)

    ref = np.array([perm(*t) for t in zip(a, b, s)], np.int64).astype(np.int32)
    R.assert_bits(got, ref, "byte_perm", [a, b, s])


# ----------------------------------------------------------------- scalars and literals

@kd.jit
def scalar_kernel(o_ptr, s, d):
    kd.store(o_ptr + 0, ld.erfinv(s))
    kd.store(o_ptr + 1, ld.tan(s) + ld.sinpi(1.5))
    kd.store(o_ptr + 2, ld.pow(s, 3))
    kd.store(o_ptr + 3, ld.add_ru(s, 1e-9))
    kd.store(o_ptr + 4, ld.clz(kd.program_id(0) + 1).to(kd.float32))
    kd.store(o_ptr + 5, ld.j0(2.0))  # a constant: folded at compile time, also for OpenCL
    kd.store(o_ptr + 6, ld.ldexp(s, d))
    kd.store(o_ptr + 7, kd.umulhi(d, -1).to(kd.float32))
    kd.store(o_ptr + 8, ld.float_as_int(s).to(kd.float32))


def test_scalars_and_literals(backend):
    """Scalar operands (runtime arguments, program ids, literals) take the same paths."""
    o = np.zeros(9, np.float32)
    scalar_kernel[(1,)](o, 0.5, 3, backend=backend)
    want = [R.erfinv(0.5), math.tan(0.5) - 1, 0.125, float(np.nextafter(F32(0.5), F32(1))),
            31, R.bessel_j(0, 2.0), 4.0, 2.0, float(0x3F000000)]
    np.testing.assert_allclose(o, np.array(want, F32), rtol=2e-7)


@pytest.mark.parametrize("dt", [F32, F64], ids=["f32", "f64"])
def test_directed_wide_exponents(backend, dt):
    """Random operands over the whole exponent range: subnormal and underflowing products and
    quotients, tiny products next to a dominant or comparable addend, cancellations."""
    rng = rng_for("wide", dt)
    lo, top = (-600, -1100) if dt == F64 else (-80, -150)
    ea, eb, ec = (rng.integers(lo, 20, BLOCK), rng.integers(lo, 20, BLOCK),
                  rng.integers(top, 10, BLOCK))

    def signed(e):
        return (rng.choice([-1.0, 1.0], BLOCK) * rng.uniform(1, 2, BLOCK) * 2.0 ** e).astype(dt)

    a, b, c = signed(ea), signed(eb), signed(ec)
    with np.errstate(all="ignore"):
        c[:20] = -(a[:20].astype(F64) * b[:20]).astype(dt)
    cases = [("fma", m, 3) for m in ("rz", "rd", "ru")] + [
        (op, m, 2) for op in ("mul", "div", "add") for m in ("rz", "rd", "ru")]
    names = [f"{op}_{m}" for op, m, _ in cases]
    outs = run_group(backend, names[:3], [[a, b, c]] * 3, dt)
    outs += run_group(backend, names[3:], [[a, b if op != "add" else c] for op, _, _ in
                                          cases[3:]], dt)
    fails = []
    for (op, m, n), name, got in zip(cases, names, outs):
        args = [a, b, c] if n == 3 else [a, c if op == "add" else b]
        ref = np.array([R.directed(op, m, dt, *t) for t in zip(*args)])
        try:
            R.assert_bits(got, ref.astype(dt), name, args)
        except AssertionError as e:
            fails.append(str(e))
    _check_all(fails)
