"""8-bit floats: the NumPy reference (kdsl/ir/fp8.py) against ml_dtypes, the Loop IR
conversions (kdsl/lowering/fp8.py) against the reference in the Loop IR simulator, the
lowering of fp8 kernels for 1, 4 and 8 threads, the language rules and argument binding."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import kdsl as kd
from kdsl.ir import fp8, interp
from kdsl.ir import loop as L
from kdsl.ir.loop_interp import run_kernel
from kdsl.ir.types import PointerType, float32, float64, int32, uint32
from kdsl.lowering import fp8 as lower_fp8
from kdsl.lowering import lower
from kdsl.runtime.binding import bind_arg
from kdsl.target import Target

ml_dtypes = pytest.importorskip("ml_dtypes", reason="float8 references need ml_dtypes (test extra)")

FORMATS = fp8.DTYPES
ML = {"float8e4nv": ml_dtypes.float8_e4m3fn, "float8e5": ml_dtypes.float8_e5m2,
      "float8e4b8": ml_dtypes.float8_e4m3fnuz, "float8e5b16": ml_dtypes.float8_e5m2fnuz}
CODES = np.arange(256, dtype=np.uint8)
RNG = np.random.default_rng(3)


def bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def probes(dt, n_random: int = 2000) -> np.ndarray:
    """float32 values at and around every rounding decision of the format, plus specials."""
    vals = fp8.decode(CODES, dt)
    fin = np.unique(np.abs(vals[np.isfinite(vals)]).astype(np.float64))
    mids = ((fin[1:] + fin[:-1]) / 2).astype(np.float32)
    mag = np.concatenate([
        fin.astype(np.float32), mids, np.nextafter(mids, np.float32(0)),
        np.nextafter(mids, np.float32(np.inf)), np.float32([fin[-1] * 1.0625, 2 * fin[-1], 1e30,
                                                            np.inf, fin[1] / 2, 1e-40, 1e-45]),
        np.abs(RNG.standard_normal(n_random) * fin[-1] / 3).astype(np.float32)])
    return np.concatenate([mag, -mag, np.float32([np.nan, -np.nan, 0.0, -0.0])])


def ml_reference(x: np.ndarray, dt) -> np.ndarray:
    """ml_dtypes' conversion (non-saturating) after kdsl's saturation: codes."""
    f = fp8.fmt(dt)
    if dt.name == "float8e4b15":  # float8_e4m3b11fnuz scaled by 2^4, with -0 and no NaN
        y = np.where(np.isnan(x), 0, np.clip(x.astype(np.float64) * 16, -30, 30))
        c = y.astype(np.float32).astype(ml_dtypes.float8_e4m3b11fnuz).view(np.uint8).copy()
        c = np.where((c == 0) & np.signbit(x), 0x80, c)
        return np.where(np.isnan(x), 0xFF, c).astype(np.uint8)
    y = np.where(np.isnan(x), x, np.clip(x, -f.max_value, f.max_value)).astype(np.float32)
    with np.errstate(invalid="ignore"):
        c = y.astype(ML[dt.name]).view(np.uint8)
    nan = np.isnan(x) | (np.isinf(x) if f.special == "fnuz" else False)
    return np.where(nan, f.nan_code, c).astype(np.uint8)


# ------------------------------------------------------------------- reference vs ml_dtypes


@pytest.mark.parametrize("dt", FORMATS, ids=str)
def test_decode_matches_ml_dtypes(dt):
    got = fp8.decode(CODES, dt)
    if dt.name in ML:
        want = CODES.view(ML[dt.name]).astype(np.float32)
    else:
        want = CODES.view(ml_dtypes.float8_e4m3b11fnuz).astype(np.float32) / 16
        want[0x80] = -0.0
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want) | (np.isnan(want) & (CODES > 127)))


@pytest.mark.parametrize("dt", FORMATS, ids=str)
def test_conversion_matches_ml_dtypes_with_saturation(dt):
    x = probes(dt)
    assert np.array_equal(fp8.convert(x, dt), ml_reference(x, dt))


@pytest.mark.parametrize("dt", FORMATS, ids=str)
def test_register_rule_keeps_every_code(dt):
    v = fp8.decode(CODES, dt)
    assert np.array_equal(fp8.encode(v, dt), CODES)        # NaN signs and payloads too
    assert np.array_equal(bits(fp8.register_value(v, dt)), bits(v))
    x = probes(dt)
    finite = np.isfinite(x)
    assert np.array_equal(fp8.encode(x, dt)[finite], fp8.convert(x, dt)[finite])


def test_overflow_rules():
    inf = np.float32([np.inf, -np.inf, np.nan, 1e9, -1e9])
    assert list(fp8.convert(inf, kd.float8e4nv)) == [0x7E, 0xFE, 0x7F, 0x7E, 0xFE]
    assert list(fp8.convert(inf, kd.float8e5)) == [0x7B, 0xFB, 0x7F, 0x7B, 0xFB]
    assert list(fp8.encode(inf, kd.float8e5)) == [0x7C, 0xFC, 0x7F, 0x7B, 0xFB]
    assert list(fp8.convert(inf, kd.float8e4b15)) == [0x7F, 0xFF, 0xFF, 0x7F, 0xFF]
    for dt in (kd.float8e4b8, kd.float8e5b16):
        assert list(fp8.convert(inf, dt)) == [0x80, 0x80, 0x80, 0x7F, 0xFF]
        assert fp8.convert(np.float32(-1e-30), dt) == 0  # no -0
    assert [f.max_value for f in fp8.FORMATS.values()] == [448, 57344, 1.875, 240, 57344]


def test_float64_rounds_once():
    """float64 -> fp8 is correctly rounded (round-to-odd through float32), unlike a plain
    float64 -> float32 -> fp8 chain, which turns values just off a halfway point into ties."""
    vals = np.unique(np.abs(fp8.decode(CODES[:0x7F], "float8e4nv")).astype(np.float64))
    mids = (vals[1:] + vals[:-1]) / 2
    x = np.concatenate([mids * (1 + 2.0**-35), mids * (1 - 2.0**-35), RNG.uniform(0, 448, 500)])
    got = fp8.decode(fp8.convert(x, "float8e4nv"), "float8e4nv").astype(np.float64)
    hi = np.searchsorted(vals, x)
    lo = np.maximum(hi - 1, 0)
    hi = np.minimum(hi, vals.size - 1)
    # no value here is within an ulp of a tie: float64 distances decide exactly
    want = np.where(np.abs(vals[hi] - x) < np.abs(x - vals[lo]), vals[hi], vals[lo])
    assert np.array_equal(got, want)
    twice = fp8.convert(x[: mids.size].astype(np.float32), "float8e4nv")  # the tie's even one
    assert not np.array_equal(twice, fp8.convert(x[: mids.size], "float8e4nv"))


# ------------------------------------------------------------- Loop IR conversions, simulated


def _simulate(build, x: np.ndarray, tin, tout) -> np.ndarray:
    k = L.Var("k", int32)
    src, dst = L.Var("src", PointerType(tin)), L.Var("dst", PointerType(tout))
    body = [L.For(k, L.Const(0, int32), L.Const(x.size, int32), L.Const(1, int32),
                  [L.Store(L.PtrAdd(dst, k), build(L.Load(L.PtrAdd(src, k))))])]
    kern = L.Kernel("conv", [L.KParam("src", src.dtype), L.KParam("dst", dst.dtype)], body, [k])
    out = np.zeros(x.size, tout.np)
    run_kernel(kern, (1,), [x, out])
    return out


@pytest.mark.parametrize("dt", FORMATS, ids=str)
def test_loop_ir_conversions_match_the_reference(dt):
    codes = CODES.astype(np.uint32)
    dec = _simulate(lambda h: lower_fp8.decode(h, dt), codes, uint32, float32)
    assert np.array_equal(bits(dec), bits(fp8.decode(CODES, dt)))
    x = probes(dt, n_random=0)
    x = np.concatenate([x[::3], x[-12:]])  # a third of the edges (the backends test all)
    enc = _simulate(lambda v: lower_fp8.encode(v, dt), x, float32, uint32)
    assert np.array_equal(enc, fp8.encode(x, dt))
    for register, ref in ((True, fp8.register_value), (False, fp8.convert_value)):
        r = _simulate(lambda v, reg=register: lower_fp8.round_value(v, dt, reg), x, float32,
                      float32)
        assert np.array_equal(bits(r), bits(ref(x, dt))), register


def test_loop_ir_float64_widening_rounds_to_odd():
    x = np.concatenate([RNG.standard_normal(500) * 10.0 ** RNG.integers(-50, 50, 500),
                        [0.0, -0.0, 1e-320, 1e300, -1e300, np.inf, np.nan, 1.5]])
    got = _simulate(lower_fp8.widen_f64, x, float64, float32)
    want = interp._f64_to_f32_odd(x)
    same = (bits(got) == bits(want)) | (np.isnan(got) & np.isnan(want))
    assert same.all()


# ------------------------------------------------------------ the lowering at 1, 4, 8 threads


@kd.jit
def fp8_mix(a_ptr, b_ptr, out_ptr, f_ptr, n, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    m = offs < n
    a = kd.load(a_ptr + offs, mask=m, other=0.5)              # float8e5
    b = kd.load(b_ptr + offs, mask=m)                          # float8e4nv
    if a.dtype == kd.float8e5:                                 # compile-time branch
        two = kd.full((BLOCK,), 2.0, kd.float8e5)
    else:
        two = kd.zeros((BLOCK,), kd.float8e5)
    t = kd.trans(kd.reshape(a * two, (4, BLOCK // 4)))         # crosses threads
    s = kd.reshape(kd.trans(t), (BLOCK,))
    kd.store(out_ptr + offs, kd.where(s > b.to(kd.float8e5), s, b.to(kd.float8e5)), mask=m)
    kd.store(f_ptr + offs, (a.to(kd.float32) + b).to(kd.float8e4nv).to(kd.float32))
    kd.store(f_ptr + BLOCK, kd.sum(b, axis=0))


def test_fp8_kernel_lowers_for_any_thread_count():
    n, BLOCK = 13, 16
    a = RNG.integers(0, 256, BLOCK).astype(np.uint8)
    b = RNG.integers(0, 256, BLOCK).astype(np.uint8)
    b[np.isnan(fp8.decode(b, "float8e4nv"))] = 0x38

    def args():
        return [a.copy(), b.copy(), np.zeros(BLOCK, np.uint8), np.zeros(BLOCK + 1, np.float32),
                n]
    views = [kd.float8_view(a, kd.float8e5), kd.float8_view(b, kd.float8e4nv),
             kd.float8_view(np.zeros(BLOCK, np.uint8), kd.float8e5),
             np.zeros(BLOCK + 1, np.float32), n]
    fn = fp8_mix.compile(*views, BLOCK=BLOCK, backend="interp").kernel
    ref = args()
    interp.run(fn, (1,), ref)
    av, bv = fp8.decode(a, "float8e5"), fp8.decode(b, "float8e4nv")
    want_f = fp8.convert_value(av + bv, "float8e4nv")
    assert np.array_equal(bits(ref[3][:n]), bits(want_f[:n]))
    assert ref[3][BLOCK] == np.float32(bv[:n].astype(np.float64).sum())
    for threads in (1, 4, 8):
        got = args()
        run_kernel(lower(fn, Target("test", threads=threads)), (1,), got)
        for r, g in zip(ref[:4], got[:4]):
            assert np.array_equal(r.view(np.uint8), g.view(np.uint8)), threads


# ----------------------------------------------------------------------------- the language


def _compile(src: str, *args, **kw):
    import importlib.util
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "k.py"
    path.write_text("import kdsl as kd\n\n@kd.jit\ndef k(a, b, o):\n" + src)
    spec = importlib.util.spec_from_file_location("kfp8", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.k.compile(*args, backend="interp", **kw)


E4 = kd.float8_view(np.zeros(16, np.uint8), kd.float8e4nv)
E5 = kd.float8_view(np.zeros(16, np.uint8), kd.float8e5)


@pytest.mark.parametrize("a,b,want", [
    (E4, E4, "float8e4nv"), (E4, E5, "float16"), (E4, np.zeros(16, np.float16), "float16"),
    (E5, np.zeros(16, np.float32), "float32"), (E4, np.zeros(16, np.int32), "float8e4nv"),
    (E4, kd.runtime.binding.bfloat16_view(np.zeros(16, np.uint16)), "float32"),
])
def test_promotion(a, b, want):
    ck = _compile("    r = kd.load(a + kd.arange(0, 4)) + kd.load(b + kd.arange(0, 4))\n"
                  "    kd.store(o + kd.arange(0, 4), r.to(kd.float32))\n",
                  a, b, np.zeros(4, np.float32))
    assert f"tile<4x{want}>" in ck.ir["tile"].split("add(")[1].split("\n")[0]


def test_dot_of_fp8_upcasts_to_float16():
    src = ("    r = kd.arange(0, 16)\n"
           "    x = kd.load(a + r[:, None] * 16 + r[None, :])\n"
           "    y = kd.load(b + r[:, None] * 16 + r[None, :])\n"
           "    kd.store(o + r[:, None] * 16 + r[None, :], kd.dot(x, y))\n")
    ir = _compile(src, kd.float8_view(np.zeros(256, np.uint8), kd.float8e4nv),
                  kd.float8_view(np.zeros(256, np.uint8), kd.float8e5),
                  np.zeros(256, np.float32)).ir["tile"]
    dot = next(line for line in ir.splitlines() if " dot(" in line)
    assert "tile<16x16xfloat32>" in dot
    assert ir.count("tile<16x16xfloat16>") >= 2


@pytest.mark.parametrize("src,msg", [
    ("    kd.atomic_add(a, 1.0)\n", "atomic_add does not support float8e4nv"),
    (("    x = kd.load(a + kd.arange(0, 16)[:, None] * 0 + kd.arange(0, 16)[None, :])\n"
      "    kd.dot(x, x, out_dtype=kd.float8e4nv)\n"), "accumulator cannot be float8e4nv"),
])
def test_fp8_errors(src, msg):
    with pytest.raises(kd.CompilationError, match=msg) as e:
        _compile(src, E4, E4, np.zeros(4, np.float32))
    assert src.splitlines()[-1].strip() in str(e.value)  # the offending line


# ---------------------------------------------------------------------------------- binding


@pytest.mark.parametrize("ml,dt", [(ml_dtypes.float8_e4m3fn, kd.float8e4nv),
                                   (ml_dtypes.float8_e5m2, kd.float8e5),
                                   (ml_dtypes.float8_e4m3fnuz, kd.float8e4b8),
                                   (ml_dtypes.float8_e5m2fnuz, kd.float8e5b16)])
def test_ml_dtypes_arrays_bind_to_fp8(ml, dt):
    sig, ba, _ = bind_arg("x", np.zeros(4, ml))
    assert (sig, ba.dtype, ba.nbytes) == ("*" + dt.name, dt, 4)
    assert bind_arg("u", np.zeros(4, np.uint8))[0] == "*uint8"  # bytes stay bytes


def test_float8_view_and_errors():
    sig, ba, _ = bind_arg("x", kd.float8_view(np.zeros(3, np.int8), kd.float8e4b15))
    assert sig == "*float8e4b15" and ba.dtype == kd.float8e4b15
    with pytest.raises(TypeError, match="8-bit float dtype"):
        kd.float8_view(np.zeros(3, np.uint8), kd.float16)
    with pytest.raises(TypeError, match="array of bytes"):
        kd.float8_view(np.zeros(3, np.uint16), kd.float8e5)
    with pytest.raises(TypeError, match="scalars are not kernel arguments"):
        bind_arg("s", np.zeros(1, ml_dtypes.float8_e4m3fn)[0])


class _FakeTensor:
    """The corner of torch's Tensor that binding uses: dtype, view(dtype), DLPack."""

    def __init__(self, codes: np.ndarray, dtype: str):
        self.codes, self.dtype = codes, dtype

    def view(self, dtype):
        assert dtype == "torch.uint8"
        return self.codes  # a uint8 array sharing the storage


def test_torch_float8_tensors_bind_through_their_uint8_view(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(uint8="torch.uint8"))
    codes = np.arange(8, dtype=np.uint8)
    for name, dt in (("torch.float8_e4m3fn", kd.float8e4nv), ("torch.float8_e5m2", kd.float8e5)):
        sig, ba, _ = bind_arg("t", _FakeTensor(codes, name))
        assert sig == "*" + dt.name and ba.dtype == dt and np.shares_memory(ba.host, codes)


@kd.jit
def _to_fp8(x_ptr, y_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    kd.store(y_ptr + offs, kd.load(x_ptr + offs))


def test_torch_float8_tensor_in_a_kernel():
    torch = pytest.importorskip("torch")
    x = torch.tensor([1.0, -2.5, 448.0, 1e9], dtype=torch.float32)
    y = torch.zeros(4, dtype=torch.float8_e4m3fn)
    _to_fp8[(1,)](x, y, BLOCK=4, backend="llvm")
    assert y.view(torch.uint8).tolist() == list(fp8.convert(x.numpy(), kd.float8e4nv))
