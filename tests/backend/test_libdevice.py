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
