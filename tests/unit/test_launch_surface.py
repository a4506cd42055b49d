"""The launch and argument surface as Triton's: @kd.jit's arguments, every launch option,
parameters named like options, None arguments, scalar typing and annotations,
do_not_specialize, kd.heuristics and kd.Config.

Specialisation tests use the fake pipeline and backend of conftest.py; the rest compile for the
interp backend (no device)."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd
from kdsl.ir import types as T
from kdsl.runtime import options as O
from kdsl.runtime.binding import bind_annotated, bind_arg
from kdsl.runtime.jit import K_RTCX, K_SIGS, K_STAGES, jit


def add(x_ptr, y_ptr, out_ptr, n, BLOCK: kd.constexpr):
    pass


def vec(n=8):
    x = np.arange(n, dtype=np.float32)
    return x, np.ones_like(x), np.empty_like(x)


# ------------------------------------------------------------------ @kd.jit's arguments

def test_jit_bare_with_parentheses_and_triton_arguments():
    def f(x_ptr, n):
        pass

    def meta(grid, kernel, args):
        return {"name": "f"}

    assert isinstance(jit(f), kd.JITFunction) and isinstance(jit()(f), kd.JITFunction)
    k = jit(version=2, repr=lambda spec: "f<spec>", launch_metadata=meta, debug=True,
            noinline=True, do_not_specialize=("n",), do_not_specialize_on_alignment=[0])(f)
    assert k.version == 2 and k.debug is True and k.noinline is True
    assert k.launch_metadata is meta and k.repr(None) == "f<spec>" and jit(f).repr() == "f"
    assert k.do_not_specialize == ("n",) and k.arg_names == ["x_ptr", "n"]
    assert "version=2" in k.identity() and "version" not in jit(f).identity()
    with pytest.raises(ValueError, match="do_not_specialize.*'m'"):
        jit(do_not_specialize=["m"])(f)
    with pytest.raises(ValueError, match="do_not_specialize_on_alignment.*5"):
        jit(do_not_specialize_on_alignment=[5])(f)


@pytest.mark.parametrize("dns", [{"do_not_specialize": ["n", "x_ptr"]},
                                 {"do_not_specialize": [3, 0]},
                                 {"do_not_specialize_on_alignment": ["n", "x_ptr"]}])
def test_do_not_specialize_removes_the_multiple_of_16_key(fake, dns):
    x, y, o = vec(64)
    plain, kept = jit(add), jit(**dns)(add)
    for k in (plain, kept):
        k[(1,)](x, y, o, 16, BLOCK=4, backend="fake")
        k[(1,)](x, y, o, 7, BLOCK=4, backend="fake")  # n: a multiple of 16, then not
        k[(1,)](x[1:], y[1:], o[1:], 16, BLOCK=4, backend="fake")  # x_ptr: misaligned
    assert len(plain.cache) == 3
    # y_ptr and out_ptr are still specialised on alignment: only those two variants remain
    assert len(kept.cache) == 2
    m16 = {key[1] for key in kept.cache}
    assert m16 == {(False, True, True, False), (False, False, False, False)}


# ------------------------------------------------------------------ launch options

def test_every_triton_launch_option_is_accepted(fake):
    k = jit(add)
    x, y, o = vec()
    defaults = {n: opt.default for n, opt in O.OPTIONS.items()}
    a = k[(1,)](x, y, o, 8, BLOCK=4, backend="fake", **defaults)
    b = k[(1,)](x, y, o, 8, BLOCK=4, backend="fake", num_ctas=2, enable_fp_fusion=False,
                launch_cooperative_grid=True, extern_libs={"libdevice": "x.bc"},
                sanitize_overflow=False, arch="sm90", launch_pdl=True, waves_per_eu=2,
                ptx_options="-v", instrumentation_mode="")
    assert a is b and len(k.cache) == 1  # ignored options are not in the key
    assert k.compile(x, y, o, 8, BLOCK=4, backend="fake", num_ctas=4, kpack=2) is a
    for name in ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion",
                 "launch_cooperative_grid", "extern_libs", "sanitize_overflow", "arch"):
        assert name in O.OPTIONS or name in O.EXPLICIT


def test_unknown_and_bad_options(fake):
    k = jit(add)
    x, y, o = vec()
    with pytest.raises(TypeError, match="'num_warp'.*x_ptr, y_ptr"):
        k[(1,)](x, y, o, 8, BLOCK=4, backend="fake", num_warp=4)
    with pytest.raises(TypeError, match="'bogus'"):
        k.compile(x, y, o, 8, BLOCK=4, backend="fake", bogus=1)
    with pytest.raises(ValueError, match="num_ctas"):
        k[(1,)](x, y, o, 8, BLOCK=4, backend="fake", num_ctas=0)
    with pytest.raises(ValueError, match="num_stages"):
        k[(1,)](x, y, o, 8, BLOCK=4, backend="fake", num_stages=-1)
    with pytest.raises(ValueError, match="maxnreg"):
        k[(1,)](x, y, o, 8, BLOCK=4, backend="fake", maxnreg="many")


def test_num_stages_is_specialised_and_recorded(fake):
    k = jit(add)
    x, y, o = vec()
    a = k[(1,)](x, y, o, 8, BLOCK=4, backend="fake")
    b = k[(1,)](x, y, o, 8, BLOCK=4, backend="fake", num_stages=2)
    c = k.compile(x, y, o, 8, BLOCK=4, backend="fake", num_stages=2)
    d = k.run(x, y, o, 8, BLOCK=4, backend="fake", grid=(1,), num_stages=3)
    assert a is d and b is c and a is not b
    assert a.kernel.options.num_stages == 3 and b.kernel.options.num_stages == 2
    assert {key[K_STAGES] for key in k.cache} == {2, 3}
    e = k[(1,)](x, y, o, 8, BLOCK=4, backend="fake", maxnreg=32)
    assert e is not a and e.kernel.options.maxnreg == 32 and a.kernel.options.maxnreg is None


def test_parameter_named_like_an_option(fake):
    def f(x_ptr, num_warps: kd.constexpr, num_stages: kd.constexpr = 1,
          check: kd.constexpr = 0):
        pass

    k = jit(f)
    x = np.zeros(4, np.float32)
    ck = k[(1,)](x, num_warps=8, backend="fake")  # binds the parameter AND sets the option
    assert ck.num_warps == 8
    params = {p.name: p.constexpr for p in ck.kernel.params}
    assert params == {"x_ptr": None, "num_warps": 8, "num_stages": 1, "check": 0}
    ck = k[(1,)](x, 2, num_stages=5, check=1, backend="fake")
    params = {p.name: p.constexpr for p in ck.kernel.params}
    assert params["num_stages"] == 5 and ck.kernel.options.num_stages == 5
    assert params["check"] == 1 and ck.checks is None  # kdsl's own keyword: the parameter only
    assert ck.num_warps == 4  # num_warps by position: the parameter only, as in Triton

    def g(x_ptr, maxnreg: kd.constexpr):
        pass

    ck = jit(g)[(1,)](x, maxnreg=40, backend="fake")
    assert ck.kernel.options.maxnreg == 40


# ------------------------------------------------------------------ None and constexpr values

def test_none_argument_is_a_compile_time_constant(fake):
    k = jit(add)
    x, y, o = vec()
    a = k[(1,)](x, None, o, 8, BLOCK=4, backend="fake")
    b = k[(1,)](x, y, o, 8, BLOCK=4, backend="fake")
    assert a is not b
    params = {p.name: p for p in a.kernel.params}
    assert params["y_ptr"].type is None and params["y_ptr"].constexpr is None
    key = next(key for key, ck in k.cache.items() if ck is a)
    assert key[K_SIGS][1] == "constexpr" and key[K_RTCX] == (("y_ptr", type(None), None),)
    _, args = fake.launches[0]
    assert [ba.name for ba in args] == ["x_ptr", "out_ptr", "n"]
    c = k[(1,)](x, kd.constexpr(3), o, 8, BLOCK=4, backend="fake")  # a constexpr value
    assert {p.name: p.constexpr for p in c.kernel.params}["y_ptr"] == 3


def test_none_branch_is_static_on_the_interpreter():
    @kd.jit
    def axpb(x_ptr, b_ptr, y_ptr, n, B: kd.constexpr):
        i = kd.arange(0, B)
        v = kd.load(x_ptr + i, mask=i < n)
        if b_ptr is not None:
            v += kd.load(b_ptr + i, mask=i < n)
        kd.store(y_ptr + i, v, mask=i < n)

    x, b, y = vec()
    ck = axpb[(1,)](x, None, y, 8, B=8, backend="interp")
    assert np.array_equal(y, x) and "b_ptr" not in ck.ir["tile"].splitlines()[1]
    assert "load" in ck.ir["tile"] and ck.ir["tile"].count("= load(") == 1
    axpb[(1,)](x, b, y, 8, B=8, backend="interp")
    assert np.array_equal(y, x + 1)


# ------------------------------------------------------------------ scalars and annotations

def test_python_and_numpy_floats_are_float32():
    assert bind_arg("a", np.float64(0.1))[0] == "float32"
    assert bind_arg("a", np.float32(0.1))[0] == "float32"
    with pytest.raises(ValueError, match="'s'.*numpy.float64.*`s: kd.float64`"):
        bind_arg("s", np.float64(1e300))


@pytest.mark.parametrize("ann, value, sig, out", [
    (T.float64, 0.1, "float64", 0.1), ("fp64", 3, "float64", 3.0),
    ("tl.float64", np.float32(0.5), "float64", 0.5), ("kd.float32", 2, "float32", 2.0),
    ("i64", 7, "int64", 7), ("int64", np.int16(-3), "int64", -3), (int, 5, "int32", 5),
    ("u32", 2**32 - 1, "uint32", 2**32 - 1), ("i1", 1, "int1", True), (float, 1, "float32", 1.0),
    ("bf16", 1.5, "bfloat16", 1.5), ("int8_t", 4.0, "int8", 4),
])
def test_annotated_scalar_is_converted(ann, value, sig, out):
    from kdsl.runtime.annotations import annotation_type

    t = annotation_type(ann)
    s, ba, _ = bind_annotated("a", value, t)
    assert s == sig and ba.value == out and type(ba.value) is type(out)


def test_annotations_read_and_checked():
    from kdsl.runtime.annotations import annotation_type

    assert annotation_type("*fp16") == T.PointerType(T.float16)
    assert annotation_type("const *bf16") == T.PointerType(T.bfloat16)
    assert annotation_type("*kfp32") == T.PointerType(T.float32)
    assert annotation_type("tensor") is None and annotation_type(list) is None
    with pytest.raises(ValueError, match="'k'.*int8"):
        bind_annotated("k", 300, T.int8)
    with pytest.raises(ValueError, match="'k'.*float32"):
        bind_annotated("k", 1e300, T.float32)
    with pytest.raises(TypeError, match="'k'.*scalar"):
        bind_annotated("k", np.zeros(2), T.float64)
    s, ba, _ = bind_annotated("p", np.zeros(4, np.int16), T.PointerType(T.bfloat16))
    assert s == "*bfloat16" and ba.dtype is T.bfloat16
    with pytest.raises(TypeError, match="'p'.*float16.*float32"):
        bind_annotated("p", np.zeros(4, np.float32), T.PointerType(T.float16))
    with pytest.raises(TypeError, match="'p'.*pointer"):
        bind_annotated("p", 3, T.PointerType(T.float16))


def test_float64_annotation_runs_and_takes_the_fast_path():
    @kd.jit
    def fill(y_ptr, n, a: kd.float64, B: kd.constexpr):
        i = kd.arange(0, B)
        kd.store(y_ptr + i, a + i, mask=i < n)

    y = np.zeros(8)
    for be in ("interp", "llvm"):
        fill[(1,)](y, 8, 0.1, B=8, backend=be)
        assert np.array_equal(y, 0.1 + np.arange(8))  # 0.1 in float64, not float32
    ck = fill.compile(y, 8, 2, B=8, backend="llvm")
    assert "%a: float64" in ck.ir["tile"]
    before = len(fill._fast)  # (the launches with backend= have their own entries)
    fill[(1,)](y, 8, 0.25, B=8)
    fill[(1,)](y, 8, 3, B=8)  # an int for a float64 parameter: converted
    assert len(fill._fast) == before + 1 and np.array_equal(y, 3.0 + np.arange(8))


# ------------------------------------------------------------------ heuristics and Config

def test_heuristics(fake):
    seen = []

    def block(args):
        seen.append(dict(args))
        return 8 if args["n"] > 4 else 4

    k = kd.heuristics({"BLOCK": block})(jit(add))
    x, y, o = vec()
    ck = k[(1,)](x, y, o, 8, backend="fake")
    assert {p.name: p.constexpr for p in ck.kernel.params}["BLOCK"] == 8
    assert seen[0]["n"] == 8 and seen[0]["x_ptr"] is x and seen[0]["backend"] == "fake"
    ck = k.compile(x, y, o, 3, backend="fake")
    assert {p.name: p.constexpr for p in ck.kernel.params}["BLOCK"] == 4
    assert k.signature is k.fn.signature and k.__name__ == "add"
    with pytest.raises(ValueError, match="'NOPE'"):
        kd.heuristics({"NOPE": block})(jit(add))
    with pytest.raises(TypeError, match="above @kd.jit"):
        kd.heuristics({"BLOCK": block})(add)


@pytest.mark.autotune
def test_heuristics_stack_with_autotune(tmp_path, monkeypatch):
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))

    @kd.jit
    def scale(x_ptr, out_ptr, n, BLOCK: kd.constexpr, EVEN: kd.constexpr):
        offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
        if EVEN:
            kd.store(out_ptr + offs, kd.load(x_ptr + offs) * 2.0)
        else:
            m = offs < n
            kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=m) * 2.0, mask=m)

    def tune(fn):
        return kd.autotune([kd.Config({"BLOCK": 16}), kd.Config({"BLOCK": 32}, num_stages=2)],
                           key=["n"], warmup=1, rep=1)(fn)

    below = tune(kd.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})(scale))
    above = kd.heuristics({"EVEN": lambda a: a["n"] % 32 == 0})(tune(scale))
    for k in (below, above):
        for n in (64, 50):
            x = np.arange(n, dtype=np.float32)
            out = np.zeros_like(x)
            k[lambda m, n=n: (kd.cdiv(n, m["BLOCK"]),)](x, out, n, backend="llvm")
            assert np.array_equal(out, 2 * x)
    assert len(below.timings) == 2


def test_config_takes_tritons_arguments():
    def hook(args):
        return None

    c = kd.Config({"BLOCK": 64}, num_warps=8, num_stages=4, num_ctas=2, maxnreg=128,
                  pre_hook=hook, ir_override=None)
    assert (c.num_warps, c.num_stages, c.num_ctas, c.maxnreg, c.pre_hook) == (8, 4, 2, 128, hook)
    assert c.all_kwargs() == {"BLOCK": 64, "num_warps": 8, "num_ctas": 2, "num_stages": 4,
                              "maxnreg": 128}
    assert kd.Config({"BLOCK": 64}).key() == "{BLOCK: 64} num_warps=4"  # unchanged text
    assert "num_stages=4" in c.key() and "maxnreg=128" in c.key()
    assert kd.Config({"B": 1}, num_stages=2) != kd.Config({"B": 1})


# ------------------------------------------------------------------ torch tensors

def test_torch_tensors_bind_as_triton_takes_them():
    torch = pytest.importorskip("torch")
    g = torch.arange(6, dtype=torch.float32, requires_grad=True)
    s, ba, _ = bind_arg("g", g)
    assert s == "*float32" and ba.host[2] == 2.0 and ba.value is g
    b = torch.tensor([1.0, -2.0], dtype=torch.bfloat16)
    s, ba, _ = bind_arg("b", b)
    assert s == "*bfloat16" and ba.dtype is T.bfloat16
    assert list(ba.host.view(np.uint16)) == [0x3F80, 0xC000]
    t = torch.arange(12, dtype=torch.float16).reshape(3, 4).t()
    s, ba, _ = bind_arg("t", t)
    assert s == "*float16" and ba.numel == 12 and ba.view is not None
    assert ba.address == t.data_ptr()
    with pytest.raises(TypeError, match="'c'"):
        bind_arg("c", torch.zeros(2, dtype=torch.complex64))


def test_fast_path_with_none_and_noinline_helper():
    if "llvm" not in kd.available_backends():
        pytest.skip("llvm backend unavailable")

    @kd.jit(noinline=True)
    def twice(v):
        return v * 2

    @kd.jit
    def axpb(x_ptr, b_ptr, y_ptr, n, B: kd.constexpr):
        i = kd.arange(0, B)
        v = twice(kd.load(x_ptr + i, mask=i < n))
        if b_ptr is not None:
            v += kd.load(b_ptr + i, mask=i < n)
        kd.store(y_ptr + i, v, mask=i < n)

    x, b, y = vec()
    for _ in range(2):  # the first launch records the fast entry, the second uses it
        axpb[(1,)](x, None, y, 8, B=8)
        np.testing.assert_array_equal(y, 2 * x)
        axpb[(1,)](x, b, y, 8, B=8)
        np.testing.assert_array_equal(y, 2 * x + 1)
    assert len(axpb._fast) == 2 and len(axpb.cache) == 2
    y[:] = 0
    hit = axpb[(1,)](x, None, y, 8, B=8)
    assert [p.name for p in hit.kernel.params] == ["x_ptr", "y_ptr", "n"]
    np.testing.assert_array_equal(y, 2 * x)
