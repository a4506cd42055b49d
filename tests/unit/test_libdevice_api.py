"""The math surface's names and rules: every Triton libdevice and tl.math name exists (or is in
the documented unsupported list), the modules resolve inside kernels, dispatch picks Triton's
signature from the dtypes, bad calls are CompilationErrors naming the kernel line, and the new
Tile IR ops lower for several threads exactly as the interpreter computes them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kdsl as kd
import kdsl.language.extra.cuda.libdevice as cuda_ld
from kdsl.frontend import build_function
from kdsl.ir import interp, tile
from kdsl.ir.loop_interp import run_kernel
from kdsl.ir.types import PointerType, TileType, float16, float32, float64, int32, scalar
from kdsl.language.extra import libdevice
from kdsl.passes import run_tile_passes
from kdsl.lowering import lower
from kdsl.target import Target

ROOT = Path(__file__).resolve().parents[2]
NAMES = [line.strip() for line in (ROOT / "tests/data/triton_libdevice_names.txt").read_text()
         .splitlines() if line.strip() and not line.startswith("#")]
TRITON_MATH = ["umulhi", "exp", "exp2", "log", "log2", "cos", "sin", "sqrt", "sqrt_rn", "rsqrt",
               "abs", "fdiv", "div_rn", "erf", "floor", "ceil", "fma"]
TRITON_TOP_LEVEL_MATH = TRITON_MATH  # Triton exports every tl.math name at top level too


def test_every_triton_libdevice_name_exists_or_is_documented_unsupported():
    assert len(NAMES) == 198
    docs = (ROOT / "docs/language.md").read_text()
    for name in NAMES:
        assert hasattr(libdevice, name), name
        assert getattr(cuda_ld, name) is getattr(libdevice, name)
        assert name in libdevice.SUPPORTED or name in libdevice.UNSUPPORTED, name
    for name in libdevice.UNSUPPORTED:
        assert f"`{name}`" in docs, f"{name} is missing from the unsupported list of the docs"
    assert set(libdevice.__all__) == set(NAMES)


def test_math_module_names():
    for name in TRITON_MATH:
        assert callable(getattr(kd.math, name)), name
        assert getattr(kd, name) is getattr(kd.math, name), name
    assert kd.math.exp is kd.exp and kd.extra.libdevice is libdevice
    assert kd.extra.cuda.libdevice is cuda_ld
    import kdsl.language.math as m
    from kdsl.language import extra
    assert m is kd.math and extra is kd.extra


def _compile(fn, **params):
    types = {k: v for k, v in params.items() if isinstance(v, TileType)}
    consts = {k: v for k, v in params.items() if not isinstance(v, TileType)}
    return build_function(fn, types, consts)


P = lambda t: scalar(PointerType(t))


def test_module_attributes_resolve_in_kernels():
    from kdsl.language.extra.cuda import libdevice as ldc

    @kd.jit
    def k(x_ptr, y_ptr, BLOCK: kd.constexpr):
        offs = kd.arange(0, BLOCK)
        x = kd.load(x_ptr + offs)
        y = kd.math.exp(x) + ldc.tanh(x) + libdevice.rsqrt(x) + kd.extra.libdevice.trunc(x)
        y = y + kd.math.fma(x, x, x) + kd.sqrt_rn(x) + kd.div_rn(x, 3.0) + kd.fdiv(x, 2.0)
        kd.store(y_ptr + offs, y)

    x = np.linspace(0.5, 4, 16).astype(np.float32)
    y = np.empty_like(x)
    k[(1,)](x, y, BLOCK=16, backend="interp")
    xd = x.astype(np.float64)
    want = (np.exp(xd) + np.tanh(xd) + 1 / np.sqrt(xd) + np.trunc(xd) + xd * xd + xd
            + np.sqrt(xd) + xd / 3 + xd / 2)
    np.testing.assert_allclose(y, want, rtol=1e-6)


def _types_of(fn, x_type):
    def k(x_ptr, y_ptr):
        x = kd.load(x_ptr + kd.arange(0, 8))
        kd.store(y_ptr + kd.arange(0, 8), fn(x))
    f = _compile(k, x_ptr=P(x_type), y_ptr=P(float32))
    return f


def test_dispatch_follows_the_dtypes():
    def k(x_ptr, d_ptr, h_ptr, o_ptr, od_ptr):
        offs = kd.arange(0, 8)
        x, d, h = kd.load(x_ptr + offs), kd.load(d_ptr + offs), kd.load(h_ptr + offs)
        kd.static_assert(libdevice.exp10(x).dtype == kd.float32)
        kd.static_assert(libdevice.exp10(d).dtype == kd.float64)
        kd.static_assert(libdevice.exp10(h).dtype == kd.float32)  # 16-bit floats widen
        kd.static_assert(libdevice.signbit(d).dtype == kd.int32)
        kd.static_assert(libdevice.isnan(x).dtype == kd.int1)
        kd.static_assert(libdevice.ilogb(d).dtype == kd.int32)
        kd.static_assert(libdevice.llrint(x).dtype == kd.int64)
        kd.static_assert(libdevice.double2float_rd(d).dtype == kd.float32)
        kd.static_assert(libdevice.float2uint_rn(x).dtype == kd.int32)  # as libdevice says
        kd.static_assert(libdevice.pow(x, 2).dtype == kd.float32)
        kd.static_assert(libdevice.hypot(x, d).dtype == kd.float64)  # float32 widens
        kd.static_assert(libdevice.clz(x.to(kd.int64)).dtype == kd.int32)
        kd.static_assert(libdevice.brev(x.to(kd.int64)).dtype == kd.int64)
        kd.static_assert(libdevice.mulhi(x.to(kd.uint32), 7).dtype == kd.uint32)
        kd.store(o_ptr + offs, libdevice.ldexp(x, 3))
        kd.store(od_ptr + offs, libdevice.jn(2, d))

    f = _compile(k, x_ptr=P(float32), d_ptr=P(float64), h_ptr=P(float16), o_ptr=P(float32),
                 od_ptr=P(float64))
    kinds = {op.kind for op in f.walk()}
    assert {"exp10", "ldexp", "jn"} <= kinds


def _error(body_fn, **types):
    with pytest.raises(kd.CompilationError) as e:
        _compile(body_fn, **types)
    return str(e.value)


def test_bad_calls_name_the_kernel_line():
    def int_to_float_fn(x_ptr):
        x = kd.load(x_ptr + kd.arange(0, 8))
        kd.store(x_ptr + kd.arange(0, 8), libdevice.tan(x))

    msg = _error(int_to_float_fn, x_ptr=P(int32))
    assert "libdevice.tan(x)" in msg and "line" in msg
    assert "no signature for (int32)" in msg and "(float32) -> float32" in msg

    def unsupported(x_ptr):
        x = kd.load(x_ptr + kd.arange(0, 8))
        kd.store(x_ptr + kd.arange(0, 8), libdevice.rcp64h(x))

    msg = _error(unsupported, x_ptr=P(float64))
    assert "libdevice.rcp64h is not supported" in msg and "libdevice.rcp64h(x)" in msg

    def arity(x_ptr):
        x = kd.load(x_ptr + kd.arange(0, 8))
        kd.store(x_ptr + kd.arange(0, 8), libdevice.jn(x))

    assert "libdevice.jn: missing a required argument: 'arg1'" in _error(arity, x_ptr=P(float32))

    def fdiv_int(x_ptr):
        x = kd.load(x_ptr + kd.arange(0, 8))
        kd.store(x_ptr + kd.arange(0, 8), kd.fdiv(x, x))

    assert "floating-point" in _error(fdiv_int, x_ptr=P(int32))

    def umulhi_float(x_ptr):
        x = kd.load(x_ptr + kd.arange(0, 8))
        kd.store(x_ptr + kd.arange(0, 8), kd.umulhi(x, x))

    assert "umulhi needs 32- or 64-bit integers" in _error(umulhi_float, x_ptr=P(float32))


def test_bessel_on_opencl_is_a_compilation_error_naming_the_line():
    @kd.jit
    def k(x_ptr, BLOCK: kd.constexpr):
        offs = kd.arange(0, BLOCK)
        kd.store(x_ptr + offs, libdevice.y1(kd.load(x_ptr + offs)))

    with pytest.raises(kd.CompilationError, match=r"y1 is not available on the opencl backend"
                       r" \(it is on interp, llvm and cuda\)") as e:
        k.compile(np.zeros(8, np.float32), BLOCK=8, backend="opencl")
    assert "libdevice.y1(" in str(e.value)


def test_verifier_checks_operand_kinds():
    body = tile.Block()
    x = body.add_arg(TileType((4,), int32), "x")
    op = tile.Op("atan2", [x, x], [x.type])
    body.append(op)
    fn = tile.Function("f", [tile.Param("x", x.type, x)], body)
    with pytest.raises(tile.VerifyError, match="needs a float"):
        tile.verify(fn)
    body.ops[0] = tile.Op("ldexp", [x, x], [x.type])
    with pytest.raises(tile.VerifyError, match=r"needs \(float, int32\)"):
        tile.verify(fn)
    body.ops[0] = tile.Op("clz", [body.add_arg(TileType((4,), float32), "f")],
                          [TileType((4,), float32)])
    with pytest.raises(tile.VerifyError, match="needs an integer"):
        tile.verify(fn)


def test_new_ops_lower_for_several_threads_like_the_interpreter():
    """Every primitive math op through the shared lowering and the Loop IR simulator at 1 and
    4 threads: the same bits as the Tile IR interpreter."""

    def k(x_ptr, n_ptr, o_ptr, oi_ptr, BLOCK: kd.constexpr):
        offs = kd.arange(0, BLOCK)
        x = kd.load(x_ptr + offs)
        n = kd.load(n_ptr + offs)
        row = 0
        for f in (libdevice.trunc, libdevice.rint, libdevice.round, libdevice.tan,
                  libdevice.asin, libdevice.acos, libdevice.atan, libdevice.sinh, libdevice.cosh,
                  libdevice.asinh, libdevice.acosh, libdevice.atanh, libdevice.log1p,
                  libdevice.expm1, libdevice.cbrt, libdevice.exp10, libdevice.log10,
                  libdevice.erfc, libdevice.lgamma, libdevice.tgamma, libdevice.j0,
                  libdevice.j1, libdevice.y0, libdevice.y1):
            kd.store(o_ptr + row * BLOCK + offs, f(x))
            row += 1
        for g in (libdevice.atan2, libdevice.hypot, libdevice.copysign, libdevice.nextafter,
                  libdevice.remainder):
            kd.store(o_ptr + row * BLOCK + offs, g(x, x * 0.5 - 1.0))
            row += 1
        kd.store(o_ptr + row * BLOCK + offs, libdevice.ldexp(x, n))
        kd.store(o_ptr + (row + 1) * BLOCK + offs, libdevice.jn(n % 4, x))
        kd.store(o_ptr + (row + 2) * BLOCK + offs, libdevice.yn(n % 4, x))
        kd.store(oi_ptr + offs, libdevice.clz(n) + libdevice.popc(n) * 100)

    B = 12
    fn, _ = run_tile_passes(_compile(k, x_ptr=P(float32), n_ptr=P(int32), o_ptr=P(float32),
                                     oi_ptr=P(int32), BLOCK=B))
    rng = np.random.default_rng(3)
    x = rng.uniform(-3, 3, B).astype(np.float32)
    x[:4] = [0.5, -0.0, 2.5, np.nan]
    n = rng.integers(-40, 40, B).astype(np.int32)
    rows = 32

    def args():
        return [x.copy(), n.copy(), np.zeros(rows * B, np.float32), np.zeros(B, np.int32)]

    ref = args()
    interp.run(fn, (1,), ref)
    for t in (1, 4):
        got = args()
        run_kernel(lower(fn, Target("test", threads=t, caps=frozenset({"bessel"}))), (1,), got)
        np.testing.assert_array_equal(got[2].view(np.uint32), ref[2].view(np.uint32))
        np.testing.assert_array_equal(got[3], ref[3])
    assert not np.isnan(ref[2][B:2 * B][4:]).any()  # rint ran on numbers
