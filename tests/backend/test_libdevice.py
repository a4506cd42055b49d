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

import numpy as np
import pytest

import kdsl as kd
from kdsl.language.extra import libdevice as ld

import libdevice_ref as R

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
    "lgamma": (R._c_lgamma, _moderate, 4, 4, 1e-6), "tgamma": (R._c_tgamma, _moderate, 4, 4, 0),
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
        ref = _ref(spec[0], x)
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
    if backend == "opencl":
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
