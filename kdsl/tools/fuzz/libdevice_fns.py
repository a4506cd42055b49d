"""The libdevice functions the fuzzer calls, each with its error model (docs/fuzzing.md).

An entry is a call template, its argument kinds, its result type, a bound on the result's
magnitude and, per argument, a bound on the partial derivative (how an error in that argument
propagates) or None where the function is discontinuous in it (the argument must then be exact,
so that every backend sees the same value).  `ulps` is the allowance of the function against
another implementation (0: correctly rounded or exact, so bit for bit equal on exact arguments).
Templates clamp or shift the arguments into the function's domain, as a kernel would.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Mags = Sequence[float]

_U = 16.0  # a few ulps of an accurate math function (docs/language.md, "Math and libdevice")


@dataclass(frozen=True)
class Fn:
    tmpl: str                         # "libdevice.exp(kd.minimum({0}, 2.0))"
    args: str                         # one letter per argument: f (float32), i (int32)
    out: str                          # result type: float32, int32 or int1
    mag: Callable[[Mags], float]      # bound on |result| from bounds on |arguments|
    der: Callable[[Mags], Sequence[float | None]]  # partial derivative bounds (None: exact)
    ulps: float = 0.0
    max_arg: float = 1e6              # arguments above this magnitude are not passed

    def name(self) -> str:
        return self.tmpl.split("(")[0].split(".")[-1]


def _c(*ds: float | None) -> Callable[[Mags], Sequence[float | None]]:
    return lambda m: ds


def _k(v: float) -> Callable[[Mags], float]:
    return lambda m: v


_ONE_ARG_MATH = [
    # template, magnitude, derivative bound (templates keep the argument in the domain)
    ("exp(kd.minimum({0}, 2.0))", _k(math.exp(2)), math.exp(2)),
    ("exp2(kd.minimum({0}, 3.0))", _k(8.0), 5.6),
    ("exp10(kd.minimum({0}, 1.0))", _k(10.0), 23.1),
    ("expm1(kd.minimum({0}, 2.0))", _k(6.4), 7.4),
    ("log(kd.abs({0}) + 1.0)", lambda m: math.log(m[0] + 1), 1.0),
    ("log2(kd.abs({0}) + 1.0)", lambda m: math.log2(m[0] + 1), 1.45),
    ("log10(kd.abs({0}) + 1.0)", lambda m: math.log10(m[0] + 1), 0.44),
    ("log1p(kd.abs({0}))", lambda m: math.log1p(m[0]), 1.0),
    ("sqrt(kd.abs({0}) + 0.25)", lambda m: math.sqrt(m[0] + 0.25), 1.0),
    ("rsqrt(kd.abs({0}) + 1.0)", _k(1.0), 0.5),
    ("rcbrt(kd.abs({0}) + 1.0)", _k(1.0), 0.34),
    ("tan(kd.minimum(kd.maximum({0}, -1.0), 1.0))", _k(1.56), 3.43),
    ("asin(kd.minimum(kd.maximum({0} * 0.5, -0.9), 0.9))", _k(1.12), 1.15),
    ("acos(kd.minimum(kd.maximum({0} * 0.5, -0.9), 0.9))", _k(2.7), 1.15),
    ("atan({0})", _k(1.571), 1.0),
    ("sinh(kd.minimum(kd.maximum({0}, -3.0), 3.0))", _k(10.02), 10.07),
    ("cosh(kd.minimum(kd.maximum({0}, -3.0), 3.0))", _k(10.07), 10.02),
    ("tanh({0})", _k(1.0), 1.0),
    ("asinh({0})", lambda m: math.asinh(m[0]), 1.0),
    ("acosh(kd.abs({0}) + 1.5)", lambda m: math.acosh(m[0] + 1.5), 0.9),
    ("atanh(kd.minimum(kd.maximum({0} * 0.5, -0.9), 0.9))", _k(1.48), 2.64),
    ("erf({0})", _k(1.0), 1.13),
    ("erfc({0})", _k(2.0), 1.13),
    ("erfinv(kd.minimum(kd.maximum({0} * 0.5, -0.9), 0.9))", _k(1.17), 1.72),
    ("erfcinv(kd.minimum(kd.maximum(kd.abs({0}) * 0.5 + 0.1, 0.1), 1.9))", _k(1.17), 1.72),
    ("erfcx(kd.abs({0}))", _k(1.0), 1.13),
    ("normcdf({0})", _k(1.0), 0.4),
    ("normcdfinv(kd.minimum(kd.maximum({0} * 0.25 + 0.5, 0.05), 0.95))", _k(1.65), 2.43),
    ("cyl_bessel_i0(kd.minimum(kd.maximum({0}, -3.0), 3.0))", _k(4.9), 4.0),
    ("cyl_bessel_i1(kd.minimum(kd.maximum({0}, -3.0), 3.0))", _k(4.0), 3.6),
    ("fast_expf(kd.minimum({0}, 2.0))", _k(math.exp(2)), math.exp(2)),
    ("fast_exp10f(kd.minimum({0}, 1.0))", _k(10.0), 23.1),
    ("fast_logf(kd.abs({0}) + 1.0)", lambda m: math.log(m[0] + 1), 1.0),
    ("fast_log2f(kd.abs({0}) + 1.0)", lambda m: math.log2(m[0] + 1), 1.45),
    ("fast_log10f(kd.abs({0}) + 1.0)", lambda m: math.log10(m[0] + 1), 0.44),
    ("fast_tanf(kd.minimum(kd.maximum({0}, -1.0), 1.0))", _k(1.56), 3.43),
    ("fast_tanhf({0})", _k(1.0), 1.0),
]

FNS: list[Fn] = [Fn(f"libdevice.{t}", "f", "float32", m, _c(d), _U)
                 for t, m, d in _ONE_ARG_MATH]
FNS += [
    # periodic functions: arguments kept below 100 (argument reduction stays accurate)
    Fn("libdevice.sin({0})", "f", "float32", _k(1.0), _c(1.0), _U, max_arg=100),
    Fn("libdevice.cos({0})", "f", "float32", _k(1.0), _c(1.0), _U, max_arg=100),
    Fn("libdevice.fast_sinf({0})", "f", "float32", _k(1.0), _c(1.0), _U, max_arg=100),
    Fn("libdevice.fast_cosf({0})", "f", "float32", _k(1.0), _c(1.0), _U, max_arg=100),
    Fn("libdevice.sinpi({0})", "f", "float32", _k(1.0), _c(math.pi), _U, max_arg=1e4),
    Fn("libdevice.cospi({0})", "f", "float32", _k(1.0), _c(math.pi), _U, max_arg=1e4),
    # gamma functions on [0.5, 8.5] and [0.5, 4.5]
    Fn("libdevice.lgamma(kd.abs({0}) + 0.5)", "f", "float32", _k(10.0), _c(2.1), _U, max_arg=8),
    Fn("libdevice.tgamma(kd.abs({0}) + 0.5)", "f", "float32", _k(11.7), _c(17.0), _U,
       max_arg=4),
    # cbrt is steep at 0: exact arguments only
    Fn("libdevice.cbrt({0})", "f", "float32", lambda m: m[0] ** (1 / 3) + 1, _c(None), _U),
    Fn("libdevice.pow(kd.abs({0}) + 0.5, kd.minimum(kd.maximum({1}, -2.0), 2.0))", "ff",
       "float32", lambda m: max((m[0] + 0.5) ** 2, 4.0),
       lambda m: (2 * max(m[0] + 0.5, 8.0), max((m[0] + 0.5) ** 2, 4.0)
                  * max(math.log(m[0] + 0.5), 0.7)), _U, max_arg=1000),
    Fn("libdevice.fast_powf(kd.abs({0}) + 0.5, kd.minimum(kd.maximum({1}, -2.0), 2.0))", "ff",
       "float32", lambda m: max((m[0] + 0.5) ** 2, 4.0),
       lambda m: (2 * max(m[0] + 0.5, 8.0), max((m[0] + 0.5) ** 2, 4.0)
                  * max(math.log(m[0] + 0.5), 0.7)), _U, max_arg=1000),
    Fn("libdevice.pow({0}, 3)", "f", "float32", lambda m: m[0] ** 3,
       lambda m: (3 * m[0] ** 2,), _U, max_arg=90),
    Fn("libdevice.atan2({0}, kd.abs({1}) + 0.5)", "ff", "float32", _k(3.15), _c(2.0, 1.0), _U),
    Fn("libdevice.hypot({0}, {1})", "ff", "float32", lambda m: m[0] + m[1], _c(1.0, 1.0), _U),
    Fn("libdevice.rhypot(kd.abs({0}) + 0.5, {1})", "ff", "float32", _k(2.0), _c(4.0, 4.0), _U),
    Fn("libdevice.norm3d({0}, {1}, {2})", "fff", "float32", lambda m: sum(m), _c(1, 1, 1), _U),
    Fn("libdevice.rnorm3d(kd.abs({0}) + 0.5, {1}, {2})", "fff", "float32", _k(2.0),
       _c(4, 4, 4), _U),
    Fn("libdevice.norm4d({0}, {1}, {2}, {3})", "ffff", "float32", lambda m: sum(m),
       _c(1, 1, 1, 1), _U),
    Fn("libdevice.fast_dividef({0}, kd.abs({1}) + 1.0)", "ff", "float32", lambda m: m[0],
       lambda m: (1.0, m[0]), _U),
    # exact: correctly rounded, or exact by definition
    Fn("libdevice.abs({0})", "f", "float32", lambda m: m[0], _c(1.0)),
    Fn("libdevice.copysign({0}, {1} + 0.0)", "ff", "float32", lambda m: m[0], _c(1.0, None)),
    Fn("libdevice.fdim({0}, {1})", "ff", "float32", lambda m: m[0] + m[1], _c(1.0, 1.0)),
    Fn("libdevice.saturatef({0})", "f", "float32", _k(1.0), _c(1.0)),
    Fn("libdevice.fmod({0}, kd.abs({1}) + 1.0)", "ff", "float32", lambda m: m[0],
       _c(None, None)),
    Fn("libdevice.remainder({0}, kd.abs({1}) + 1.0)", "ff", "float32", lambda m: m[0],
       _c(None, None)),
    Fn("libdevice.nextafter({0}, {1})", "ff", "float32", lambda m: m[0] * 1.001 + 1e-30,
       _c(None, None)),
    Fn("libdevice.logb(kd.abs({0}) + 0.5)", "f", "float32",
       lambda m: abs(math.log2(m[0] + 0.5)) + 1, _c(None)),
    Fn("libdevice.ilogb(kd.abs({0}) + 0.5)", "f", "int32",
       lambda m: abs(math.log2(m[0] + 0.5)) + 1, _c(None)),
    Fn("libdevice.signbit({0} + 0.0)", "f", "int32", _k(1.0), _c(None)),
    Fn("libdevice.isnan({0})", "f", "int1", _k(1.0), _c(0.0)),
    Fn("libdevice.isinf({0})", "f", "int1", _k(1.0), _c(0.0)),
    Fn("libdevice.finitef({0})", "f", "int1", _k(1.0), _c(0.0)),
    Fn("libdevice.ldexp({0}, {1} % 4)", "fi", "float32", lambda m: 8 * m[0], _c(8.0, None)),
    Fn("libdevice.scalbn({0}, {1} % 4)", "fi", "float32", lambda m: 8 * m[0], _c(8.0, None)),
    Fn("libdevice.double2float_rn({0}.to(kd.float64))", "f", "float32", lambda m: m[0],
       _c(1.0)),
    Fn("libdevice.int_as_float(libdevice.float_as_int({0}))", "f", "float32", lambda m: m[0],
       _c(1.0)),
    Fn("(libdevice.float_as_int({0} + 0.0) >> 16)", "f", "int32", _k(2.0**15), _c(None)),
    Fn("libdevice.llrint({0}).to(kd.int32)", "f", "int32", lambda m: m[0] + 1, _c(None)),
    Fn("libdevice.llround({0}).to(kd.int32)", "f", "int32", lambda m: m[0] + 1, _c(None)),
    Fn("libdevice.float2ll_rz({0}).to(kd.int32)", "f", "int32", lambda m: m[0] + 1, _c(None)),
    Fn("libdevice.ll2float_rn({0}.to(kd.int64))", "i", "float32", lambda m: m[0], _c(None)),
    # integers (on int32 bit patterns)
    Fn("libdevice.clz({0})", "i", "int32", _k(32.0), _c(None)),
    Fn("libdevice.popc({0})", "i", "int32", _k(32.0), _c(None)),
    Fn("libdevice.ffs({0})", "i", "int32", _k(32.0), _c(None)),
    Fn("(libdevice.brev({0}) >> 16)", "i", "int32", _k(2.0**15), _c(None)),
    Fn("libdevice.abs({0})", "i", "int32", lambda m: m[0], _c(None)),
    Fn("libdevice.mulhi({0} * 65536, {1} * 65536)", "ii", "int32", lambda m: m[0] * m[1] + 1,
       _c(None, None), max_arg=2.0**14),
    Fn("libdevice.mul24({0}, {1})", "ii", "int32", lambda m: m[0] * m[1], _c(None, None),
       max_arg=2.0**12),
    Fn("libdevice.hadd({0}, {1})", "ii", "int32", lambda m: max(m), _c(None, None)),
    Fn("libdevice.rhadd({0}, {1})", "ii", "int32", lambda m: max(m) + 1, _c(None, None)),
    Fn("libdevice.sad({0}, {1}, {2})", "iii", "int32", lambda m: sum(m), _c(None, None, None)),
    Fn("(libdevice.byte_perm({0}, {1}, {2}) & 65535)", "iii", "int32", _k(65535.0),
       _c(None, None, None)),
]
# correctly rounded in a rounding mode: bit for bit on every backend
for _m in ("rn", "rz", "rd", "ru"):
    FNS += [
        Fn(f"libdevice.add_{_m}({{0}}, {{1}})", "ff", "float32", lambda m: m[0] + m[1],
           _c(1.0, 1.0)),
        Fn(f"libdevice.sub_{_m}({{0}}, {{1}})", "ff", "float32", lambda m: m[0] + m[1],
           _c(1.0, 1.0)),
        Fn(f"libdevice.mul_{_m}({{0}}, {{1}})", "ff", "float32", lambda m: m[0] * m[1],
           lambda m: (m[1], m[0])),
        Fn(f"libdevice.div_{_m}({{0}}, kd.abs({{1}}) + 1.0)", "ff", "float32", lambda m: m[0],
           lambda m: (1.0, m[0])),
        Fn(f"libdevice.fma_{_m}({{0}}, {{1}}, {{2}})", "fff", "float32",
           lambda m: m[0] * m[1] + m[2], lambda m: (m[1], m[0], 1.0)),
        Fn(f"libdevice.rcp_{_m}(kd.abs({{0}}) + 1.0)", "f", "float32", _k(1.0), _c(1.0)),
        Fn(f"libdevice.sqrt_{_m}(kd.abs({{0}}))", "f", "float32",
           lambda m: math.sqrt(m[0]) + 1, _c(None)),
        Fn(f"libdevice.float2int_{_m}({{0}})", "f", "int32", lambda m: m[0] + 1, _c(None)),
        Fn(f"libdevice.int2float_{_m}({{0}})", "i", "float32", lambda m: m[0], _c(None)),
        Fn(f"libdevice.double2float_{_m}({{0}}.to(kd.float64))", "f", "float32",
           lambda m: m[0], _c(1.0)),
    ]
FNS.append(Fn("libdevice.fma({0}, {1}, {2})", "fff", "float32", lambda m: m[0] * m[1] + m[2],
              lambda m: (m[1], m[0], 1.0)))
