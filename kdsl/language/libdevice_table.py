"""The functions of Triton's `libdevice` (`tl.extra.libdevice`, `tl.extra.cuda.libdevice`): a
table of name -> signatures -> implementation, and the dispatch that picks a signature from
the argument types as Triton does.

Signatures are libdevice's (`(float32,) -> float32`, `(float64,) -> float64`, `(int32, int32,
uint32) -> int32`, ...).  Dispatch, per call: the signature whose argument types the arguments
match with the least conversion.  An exact match costs nothing; a Python int or float literal
takes the type of its position (an int literal also fits a float position); a float16 or
bfloat16 value is widened to float32 and a float32 to float64 when no exact signature exists;
a narrower integer is widened to int32/uint32; a signed/unsigned mismatch of the same width is
accepted as the same bits.  A float is never silently made an integer or vice versa: that is a
`CompilationError` listing the signatures (Triton raises for every inexact match; 16-bit floats
therefore give float32 results here instead of an error).

Implementations are exact compositions of Tile IR ops (kdsl/language/intbits.py, fpbits.py,
rounding.py, special.py) or single primitive ops, so every backend computes them.
`UNSUPPORTED` lists the names that have no meaning here; calling one is a `CompilationError`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..ir.types import (
    DType,
    bfloat16,
    float16,
    float32,
    float64,
    int1,
    int32,
    int64,
    uint32,
    uint64,
)
from . import fpbits, intbits, rounding, semantic, special
from .core import builtin
from .mathexpr import X, bi, float_int, fma, isinf, isnan, un

F, D, I, U, L, UL, B = float32, float64, int32, uint32, int64, uint64, int1

Sig = tuple[tuple[DType, ...], DType]
FU: list[Sig] = [((F,), F), ((D,), D)]
FB: list[Sig] = [((F, F), F), ((D, D), D)]
F3: list[Sig] = [((F, F, F), F), ((D, D, D), D)]
F4: list[Sig] = [((F, F, F, F), F), ((D, D, D, D), D)]
F32U: list[Sig] = [((F,), F)]
F32B: list[Sig] = [((F, F), F)]

# Functions that cannot have a meaning on every backend, with the reason.
UNSUPPORTED: dict[str, str] = {
    "rcp64h": "it is an approximation instruction of NVIDIA GPUs (the reciprocal of the high "
              "32 bits of a double) whose exact result is hardware-defined",
}


def _u(op: str) -> Callable[[X], X]:
    return lambda x: un(op, x)


def _b(op: str) -> Callable[[X, X], X]:
    return lambda x, y: bi(op, x, y)


TABLE: dict[str, tuple[list[Sig], Callable[..., X]]] = {}


def _add(names: str, sigs: list[Sig], impl: Callable[..., X]) -> None:
    for n in names.split():
        TABLE[n] = (sigs, impl)


# --- integers
_add("clz", [((I,), I), ((L,), I)], intbits.clz)
_add("popc", [((I,), I), ((L,), I)], intbits.popc)
_add("ffs", [((I,), I), ((L,), I)], intbits.ffs)
_add("brev", [((I,), I), ((L,), L)], intbits.brev)
_add("byte_perm", [((I, I, I), I)], intbits.byte_perm)
_add("mulhi", [((I, I), I), ((U, U), U), ((L, L), L), ((UL, UL), UL)], intbits.mulhi)
_add("mul24", [((I, I), I), ((U, U), U)], intbits.mul24)
_add("hadd", [((I, I), I), ((U, U), U)], intbits.hadd)
_add("rhadd", [((I, I), I), ((U, U), U)], intbits.rhadd)
_add("sad", [((I, I, U), I), ((U, U, U), U)], intbits.sad)
_add("abs", [((I,), I), ((L,), L), ((F,), F), ((D,), D)], _u("abs"))

# --- primitive float functions (one Tile IR op each)
for _op in ["floor", "ceil", "trunc", "rint", "round", "sqrt", "rsqrt", "exp", "exp2", "exp10", "log", "log2", "log10", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "log1p", "expm1", "cbrt", "erf", "erfc", "lgamma", "tgamma", "j0", "j1", "y0", "y1"]:
    _add(_op, FU, _u(_op))
_add("nearbyint", FU, _u("rint"))
for _op in ("atan2", "hypot", "copysign", "nextafter", "remainder"):
    _add(_op, FB, _b(_op))
_add("fmod", FB, _b("mod"))
_add("fma fma_rn", F3, lambda x, y, z: fma(x, y, z))
_add("ldexp scalbn", [((F, I), F), ((D, I), D)], lambda x, n: fpbits.ldexp(x, n))
_add("jn", [((I, F), F), ((I, D), D)], lambda n, x: float_int("jn", x, n))
_add("yn", [((I, F), F), ((I, D), D)], lambda n, x: float_int("yn", x, n))
_add("pow", [((F, I), F), ((D, I), D), ((F, F), F), ((D, D), D)],
     lambda x, y: special.in64(special.powi_64)(x, y) if y.dtype == I else bi("pow", x, y))

# --- fast_* (float32): the accurate functions on every backend
for _name, _op in (("fast_sinf", "sin"), ("fast_cosf", "cos"), ("fast_tanf", "tan"),
                   ("fast_expf", "exp"), ("fast_exp10f", "exp10"), ("fast_logf", "log"),
                   ("fast_log2f", "log2"), ("fast_log10f", "log10"), ("fast_tanhf", "tanh")):
    _add(_name, F32U, _u(_op))
_add("fast_powf", F32B, _b("pow"))
_add("fast_dividef", F32B, lambda x, y: x / y)

# --- exact compositions
_add("saturatef", F32U, fpbits.saturate)
_add("fdim", FB, fpbits.fdim)
_add("logb", FU, fpbits.logb)
_add("ilogb", [((F,), I), ((D,), I)], fpbits.ilogb)
_add("signbit", [((F,), I), ((D,), I)], lambda x: fpbits.signbit(x).to(I))
_add("isnan", [((F,), B), ((D,), B)], isnan)
_add("isinf", [((F,), B), ((D,), B)], isinf)
_add("finitef", [((F,), B)], lambda x: un("abs", x) < float("inf"))
_add("isfinited", [((D,), B)], lambda x: un("abs", x) < float("inf"))
_add("llrint", [((F,), L), ((D,), L)], lambda x: un("rint", x).to(L))
_add("llround", [((F,), L), ((D,), L)], lambda x: un("round", x).to(L))

# --- special functions (kdsl/language/special.py)
for _name, _f in (("sinpi", special.sinpi_64), ("cospi", special.cospi_64),
                  ("erfcx", special.erfcx_64), ("erfinv", special.erfinv_64),
                  ("erfcinv", special.erfcinv_64), ("normcdf", special.normcdf_64),
                  ("normcdfinv", special.normcdfinv_64), ("rcbrt", special.rcbrt_64)):
    _add(_name, FU, special.in64(_f))
_add("cyl_bessel_i0", FU, special.bessel_i0)
_add("cyl_bessel_i1", FU, special.bessel_i1)
_add("rhypot", FB, special.in64(special.rhypot_64))
_add("norm3d", F3, special.norm)
_add("norm4d", F4, special.norm)
_add("rnorm3d", F3, special.rnorm)
_add("rnorm4d", F4, special.rnorm)
_add("rsqrt_rn", F32U, special.rsqrt_rn)

# --- directed rounding (kdsl/language/rounding.py)
for _m in rounding.MODES:
    _add(f"add_{_m}", FB, lambda x, y, m=_m: rounding.add(x, y, m))
    _add(f"sub_{_m}", FB, lambda x, y, m=_m: rounding.sub(x, y, m))
    _add(f"mul_{_m}", FB, lambda x, y, m=_m: rounding.mul(x, y, m))
    _add(f"div_{_m}", FB, lambda x, y, m=_m: rounding.div(x, y, m))
    _add(f"rcp_{_m}", FU, lambda x, m=_m: rounding.rcp(x, m))
    _add(f"sqrt_{_m}", FU, lambda x, m=_m: rounding.sqrt(x, m))
    if _m != "rn":
        _add(f"fma_{_m}", F3, lambda x, y, z, m=_m: rounding.fma_dir(x, y, z, m))
    # conversions
    _add(f"double2float_{_m}", [((D,), F)], lambda x, m=_m: rounding.to_float(x, F, m))
    _add(f"double2int_{_m}", [((D,), I)], lambda x, m=_m: rounding.to_int(x, I, m))
    _add(f"double2uint_{_m}", [((D,), I)], lambda x, m=_m: rounding.to_int(x, U, m, I))
    _add(f"double2ll_{_m}", [((D,), L)], lambda x, m=_m: rounding.to_int(x, L, m))
    _add(f"double2ull_{_m}", [((D,), L)], lambda x, m=_m: rounding.to_int(x, UL, m, L))
    _add(f"float2int_{_m}", [((F,), I)], lambda x, m=_m: rounding.to_int(x, I, m))
    _add(f"float2uint_{_m}", [((F,), I)], lambda x, m=_m: rounding.to_int(x, U, m, I))
    _add(f"float2ll_{_m}", [((F,), L)], lambda x, m=_m: rounding.to_int(x, L, m))
    _add(f"float2ull_{_m}", [((F,), L)], lambda x, m=_m: rounding.to_int(x, UL, m, L))
    _add(f"int2float_{_m}", [((I,), F)], lambda x, m=_m: rounding.to_float(x, F, m))
    _add(f"uint2float_{_m}", [((U,), F)], lambda x, m=_m: rounding.to_float(x, F, m))
    _add(f"ll2float_{_m}", [((L,), F)], lambda x, m=_m: rounding.to_float(x, F, m))
    _add(f"ull2float_{_m}", [((UL,), F)], lambda x, m=_m: rounding.to_float(x, F, m))
    _add(f"ll2double_{_m}", [((L,), D)], lambda x, m=_m: rounding.to_float(x, D, m))
    _add(f"ull2double_{_m}", [((UL,), D)], lambda x, m=_m: rounding.to_float(x, D, m))
_add("int2double_rn", [((I,), D)], lambda x: x.to(D))
_add("uint2double_rn", [((U,), D)], lambda x: x.to(D))

# --- bit reinterpretation
_add("float_as_int", [((F,), I)], lambda x: x.bits(I))
_add("float_as_uint", [((F,), I)], lambda x: x.bits(I))
_add("int_as_float", [((I,), F)], lambda x: x.bits(F))
_add("uint_as_float", [((U,), F)], lambda x: x.bits(F))
_add("double_as_longlong", [((D,), L)], lambda x: x.bits(L))
_add("longlong_as_double", [((L,), D)], lambda x: x.bits(D))
_add("double2loint", [((D,), I)], lambda x: x.bits(L).to(I))
_add("double2hiint", [((D,), I)], lambda x: (x.bits(L) >> 32).to(I))
_add("hiloint2double", [((I, I), D)],
     lambda hi, lo: ((hi.to(L) << 32) | lo.bits(U).to(L)).bits(D))

# ------------------------------------------------------------------------------ dispatch

_NO = None  # a conversion that is not allowed


def _cost(arg: Any, want: DType) -> int | None:
    """Cost of passing `arg` where `want` is expected (None: not allowed)."""
    if isinstance(arg, bool):
        return 2 if want.is_int else None
    if isinstance(arg, int):
        return 0 if want.is_int else 1
    if isinstance(arg, float):
        return 0 if want.is_float else _NO
    t = arg.type.elem
    if t == want:
        return 0
    if t.is_float != want.is_float or not isinstance(t, DType):
        return _NO
    if t.is_float:
        if t in (float16, bfloat16):
            return 1 if want == float32 else 3
        return 2 if (t, want) == (float32, float64) else _NO
    if t.bits == want.bits:
        return 5  # same bits, the other signedness
    if t.bits < want.bits and want.bits == 32:
        return 1 if t.is_signed == want.is_signed or t.is_bool else 2
    return _NO


def _describe(a: Any) -> str:
    return str(a.type.elem) if semantic.is_value(a) else type(a).__name__


def _sig_text(sig: Sig) -> str:
    return f"({', '.join(map(str, sig[0]))}) -> {sig[1]}"


def dispatch(b: Any, name: str, args: list[Any]) -> Any:
    """Call libdevice function `name` on `args` (IR values or Python literals)."""
    if name in UNSUPPORTED:
        raise semantic.error(f"libdevice.{name} is not supported: {UNSUPPORTED[name]}")
    sigs, impl = TABLE[name]
    for a in args:
        semantic._check_operand(a)
        if semantic.is_ptr(a):
            raise semantic.error(f"libdevice.{name} is not defined on pointers")
    best, best_cost = None, None
    for sig in sigs:
        costs = [_cost(a, t) for a, t in zip(args, sig[0])]
        if any(c is None for c in costs):
            continue
        total = sum(costs)
        if best_cost is None or total < best_cost:
            best, best_cost = sig, total
    if best is None:
        got = ", ".join(_describe(a) for a in args)
        raise semantic.error(f"libdevice.{name} has no signature for ({got}); it takes "
                             + " or ".join(_sig_text(s) for s in sigs))
    shp = ()
    for a in args:
        shp = semantic.broadcast_shapes(shp, semantic.shape(a))
    xs = [X(b, semantic.coerce(b, a, t, shp)) for a, t in zip(args, best[0])]
    out = impl(*xs)
    assert out.dtype == best[1], (name, out.dtype, best[1])
    return out.v


def _make(name: str, arity: int) -> Callable:
    """A builtin with libdevice's parameter names (arg0, arg1, ...)."""

    def fn(*args, _builder=None):
        return dispatch(_builder, name, list(args))

    params = [inspect.Parameter(f"arg{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD)
              for i in range(arity)]
    params.append(inspect.Parameter("_builder", inspect.Parameter.KEYWORD_ONLY, default=None))
    fn.__signature__ = inspect.Signature(params)
    fn.__name__ = fn.__qualname__ = name
    sigs = TABLE[name][0] if name in TABLE else []
    fn.__doc__ = (f"libdevice {name}: " + "; ".join(_sig_text(s) for s in sigs)) if sigs \
        else f"libdevice {name}: not supported ({UNSUPPORTED.get(name, '')})"
    fn.__module__ = "kdsl.language.extra.libdevice"
    wrapped = builtin(fn)
    wrapped.__kdsl_name__ = f"libdevice.{name}"  # how errors name it
    return wrapped


_ARITY = {"rcp64h": 1}


def functions() -> dict[str, Callable]:
    """Every libdevice name -> its kernel builtin (unsupported names raise when called)."""
    out = {}
    for name, (sigs, _) in TABLE.items():
        out[name] = _make(name, len(sigs[0][0]))
    for name in UNSUPPORTED:
        out[name] = _make(name, _ARITY[name])
    return out
