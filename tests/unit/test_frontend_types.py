"""Frontend: Triton's type surface (kd.tensor, kd.dtype, block_type, pointer_type, ...), dtype
introspection, casts and tensor methods, kd.range options, hints and unsupported builtins."""
# ruff: noqa: F841  (kernels below assign values only to compile them)

# No `from __future__ import annotations`: the helpers' annotations (kd.tensor, kd.dtype,
# kd.const) are evaluated when they are defined, as in a Triton module.
import inspect

import pytest

import kdsl as kd
from kdsl.errors import CompilationError
from kdsl.frontend import build_function
from kdsl.ir.parser import parse_function
from kdsl.ir.tile import print_function, verify
from kdsl.ir.types import PointerType, TileType, float16, float32, int32


def P(d):
    return TileType((), PointerType(d))


def S(d):
    return TileType((), d)


class Jit:
    def __init__(self, fn):
        self.__kdsl_jit__ = fn


def build(fn, constexprs=None, **arg_types):
    f = build_function(fn, arg_types, constexprs or {})
    verify(f)
    return f


def kinds(f):
    return [op.kind for op in f.walk()]


def line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


def compiles(fn, **types):
    return build(fn, **(types or {"x_ptr": P(float32)}))


# ------------------------------------------------------------------------ type objects


def test_host_side_type_objects():
    assert isinstance(kd.float32, kd.dtype) and isinstance(kd.pointer_type(kd.int8), kd.dtype)
    assert kd.pointer_type(kd.float16) == PointerType(float16)
    assert isinstance(kd.pointer_type(kd.float16, 1), kd.pointer_type)
    assert kd.pointer_type(kd.float32).element_ty is kd.float32
    assert not isinstance(kd.float32, kd.pointer_type)
    bt = kd.block_type(kd.float32, [16, 8])
    assert bt.shape == (16, 8) and bt.scalar is kd.float32 and bt.numel == 128
    assert bt.is_block() and bt.nbytes == 512 and isinstance(bt, kd.dtype)
    assert kd.dtype("fp16") is kd.float16 and kd.dtype("bfloat16") is kd.bfloat16
    assert kd.void.is_void() and isinstance(kd.void, kd.dtype)
    assert kd.tuple([1, 2]) == (1, 2) and isinstance((1,), kd.tuple)
    assert kd.constexpr(3).type == kd.constexpr_type(3)
    with pytest.raises(TypeError):
        kd.tensor()
    assert kd.const is not None and kd.tensor_descriptor is not None


def _annotated(x: kd.tensor, dt: kd.dtype, N: kd.constexpr):  # evaluated at def time
    kd.static_assert(isinstance(x, kd.tensor) and not isinstance(x, kd.constexpr))
    kd.static_assert(isinstance(dt, kd.dtype) and isinstance(N, kd.constexpr))
    kd.static_assert(isinstance(N, int) and not isinstance(N, kd.tensor))
    return x.to(dt) * N


annotated = Jit(_annotated)


def introspect(x_ptr, o_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    x = kd.load(x_ptr + offs)
    p = x_ptr + offs
    kd.static_assert(x_ptr.type.element_ty == kd.float32)
    kd.static_assert(x_ptr.dtype.element_ty.is_fp32() and x_ptr.dtype.is_ptr())
    kd.static_assert(isinstance(p.dtype, kd.pointer_type) and p.dtype.element_ty == kd.float32)
    kd.static_assert(p.type.is_block() and p.type.element_ty.is_ptr())
    kd.static_assert(x.type.shape == (BLOCK,) and x.shape == (BLOCK,) and x.numel == BLOCK)
    kd.static_assert(x.type.scalar == kd.float32 and x.type.element_ty == kd.float32)
    kd.static_assert(x.type == kd.block_type(kd.float32, [BLOCK]))
    kd.static_assert(x.dtype.is_floating() and not x.dtype.is_int() and not x.dtype.is_ptr())
    kd.static_assert(x.dtype.primitive_bitwidth == 32 and x.dtype.fp_mantissa_width == 23)
    kd.static_assert(x.dtype.itemsize == 4 and x.dtype.name == "fp32")
    kd.static_assert(x.dtype == "fp32" and x.dtype == "float32" and x.dtype != "fp16")
    kd.static_assert(x.dtype.is_standard_floating() and not x.dtype.is_fp8())
    kd.static_assert(x.dtype.scalar == kd.float32 and not x.dtype.is_block())
    s = kd.sum(x, 0)
    kd.static_assert(s.type == kd.float32 and s.shape == () and s.numel == 1)
    kd.static_assert(kd.int1.is_int() and kd.int1.is_int_unsigned() and kd.int1.is_bool())
    kd.static_assert(kd.int1.is_int1() and kd.int1.primitive_bitwidth == 1)
    kd.static_assert(kd.int8.is_int_signed() and kd.int8.is_signed() and kd.int8.is_int8())
    kd.static_assert(kd.uint16.is_uint16() and not kd.uint16.is_int_signed())
    kd.static_assert(kd.int16.int_bitwidth == 16 and kd.int64.is_int64())
    kd.static_assert(kd.int8.get_int_max_value() == 127 and kd.uint8.get_int_min_value() == 0)
    kd.static_assert(kd.uint32.is_uint32() and kd.uint64.is_uint64() and kd.int32.is_int32())
    kd.static_assert(kd.float16.is_fp16() and kd.bfloat16.is_bf16() and kd.float64.is_fp64())
    kd.static_assert(kd.bfloat16.fp_mantissa_width == 7 and kd.float16.exponent_bias == 15)
    kd.static_assert(kd.bfloat16.name == "bf16" and kd.uint8.itemsize == 1)
    kd.static_assert(kd.constexpr(5).value == 5 and BLOCK.value == BLOCK)
    kd.static_assert(isinstance((x, 1), kd.tuple) and isinstance(kd.tuple([x, x]), tuple))
    kd.static_assert(kd.dtype.is_dtype("fp16") and not kd.dtype.is_dtype("fp99"))
    y = annotated(x, kd.float16, 3)
    kd.static_assert(y.dtype == kd.float16)
    kd.store(o_ptr + offs, y)


def test_type_introspection_is_compile_time():
    f = build(introspect, {"BLOCK": 16}, x_ptr=P(float32), o_ptr=P(float16))
    assert kinds(f).count("store") == 1


def _bad_isinstance_runtime(x_ptr):
    kd.static_assert(isinstance(kd.load(x_ptr), kd.constexpr), "a runtime value")


def test_isinstance_on_runtime_values_is_answered():
    with pytest.raises(CompilationError, match="a runtime value") as e:
        compiles(_bad_isinstance_runtime)
    assert e.value.loc.line == line_of(_bad_isinstance_runtime, "isinstance(")


# ----------------------------------------------------------------------- casts, methods


def casts(x_ptr, o_ptr, i_ptr):
    x = kd.load(x_ptr + kd.arange(0, 8))
    a = x.cast(kd.float16)
    b = x.to(kd.float16, fp_downcast_rounding="rtz")
    c = kd.cast(x, kd.int32, bitcast=True)
    d = kd.cast(x, kd.float16, "rtne")  # Triton's positional order
    kd.store(o_ptr + kd.arange(0, 8), a + b + d)
    kd.store(i_ptr + kd.arange(0, 8), c)


def test_cast_spellings():
    f = build(casts, x_ptr=P(float32), o_ptr=P(float16), i_ptr=P(int32))
    ks = kinds(f)
    assert ks.count("bitcast") == 3  # one for `c`, two in the toward-zero rounding
    assert "where" in ks  # rtz: the round-to-nearest result stepped toward zero where needed


def _bad_rounding(x_ptr):
    y = kd.load(x_ptr).to(kd.float64, fp_downcast_rounding="rtz")


def _bad_rounding_mode(x_ptr):
    y = kd.load(x_ptr).to(kd.float16, fp_downcast_rounding="rtp")


@pytest.mark.parametrize("fn, msg", [(_bad_rounding, "only for casts to a narrower float"),
                                     (_bad_rounding_mode, "'rtne' or 'rtz'")])
def test_rounding_mode_errors(fn, msg):
    with pytest.raises(CompilationError, match=msg) as e:
        compiles(fn)
    assert e.value.loc.line == line_of(fn, "fp_downcast_rounding")


def methods(x_ptr, o_ptr):
    offs = kd.arange(0, 16)
    x = kd.load(x_ptr + offs)
    y = x.exp().log().sqrt().abs().sigmoid().erf().floor().ceil().rsqrt().cos().sin().exp2()
    z = x.reshape(4, 4).trans().permute(1, 0).view(16).expand_dims(0).broadcast_to(2, 16)
    w = z.sum(0) + z.max(0) + z.min(0) + offs.cdiv(2) + x.log2()
    i = x.argmax(0) + x.argmin(0)
    m = kd.max_constancy(x, 4)
    (o_ptr + offs).store(y + w + i.to(kd.float32) + m)


def test_tensor_methods():
    f = build(methods, x_ptr=P(float32), o_ptr=P(float32))
    ks = kinds(f)
    for k in ("exp", "sigmoid", "erf", "trans", "reduce", "store", "exp2", "log2"):
        assert k in ks
    hint = next(op for op in f.walk() if op.kind == "hint")
    assert hint.attrs == {"max_constancy": 4}


# ------------------------------------------------------------------------------ kd.range


def ranged(x_ptr, n):
    acc = 0.0
    for i in kd.range(0, n, 2, num_stages=3, loop_unroll_factor=2, flatten=True):
        acc += kd.load(x_ptr + i)
    for j in kd.range(n):
        acc += 1.0
    kd.store(x_ptr, acc)


def test_range_records_its_options_and_round_trips():
    f = build(ranged, x_ptr=P(float32), n=S(int32))
    loops = [op for op in f.walk() if op.kind == "for"]
    assert loops[0].attrs == {"num_stages": 3, "loop_unroll_factor": 2, "flatten": True}
    assert loops[1].attrs == {}
    text = print_function(f)
    assert "{flatten=True, loop_unroll_factor=2, num_stages=3}" in text
    assert print_function(parse_function(text)) == text


def _bad_range(x_ptr, n):
    for i in kd.range(0, 4, num_stages=n):
        pass


def test_range_options_must_be_compile_time():
    with pytest.raises(CompilationError, match="num_stages must be a compile-time int") as e:
        build(_bad_range, x_ptr=P(float32), n=S(int32))
    assert e.value.loc.line == line_of(_bad_range, "kd.range(")


# ------------------------------------------------------------------- hints, unsupported


def hints(x_ptr):
    offs = kd.arange(0, 8)
    kd.assume(offs >= 0)
    kd.assume(True)
    kd.store(x_ptr + kd.max_constancy(offs, 2), 1.0)


def test_assume_and_max_constancy():
    f = compiles(hints)
    assert [op.attrs for op in f.walk() if op.kind == "hint"] == [{"max_constancy": 2}]


def _asm(x_ptr):
    y = kd.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [kd.load(x_ptr)], kd.float32,
                                  True, 1)


def test_inline_asm_is_a_compilation_error_naming_the_line():
    with pytest.raises(CompilationError, match="inline_asm_elementwise is not supported") as e:
        compiles(_asm)
    assert e.value.loc.line == line_of(_asm, "inline_asm_elementwise")
    assert "interp, llvm, opencl, cuda" in str(e.value)


def _const_store(x_ptr: kd.const, y_ptr):
    v = kd.load(x_ptr)
    kd.store(y_ptr, v)
    kd.store(x_ptr + 1, v)


def _const_ok(x_ptr: "tl.const", y_ptr):  # noqa: F821  (a string annotation, as Triton reads it)
    kd.store(y_ptr, kd.load(x_ptr))


def test_store_through_a_const_pointer_is_rejected():
    with pytest.raises(CompilationError, match="constant pointer: parameter 'x_ptr'") as e:
        build(_const_store, x_ptr=P(float32), y_ptr=P(float32))
    assert e.value.loc.line == line_of(_const_store, "kd.store(x_ptr + 1")
    build(_const_ok, x_ptr=P(float32), y_ptr=P(float32))


def _bad_memory_option(x_ptr):
    y = kd.load(x_ptr, cache_modifier=".xx")


def _bad_boundary(x_ptr):
    y = kd.load(x_ptr + kd.arange(0, 4), boundary_check=(0,))


@pytest.mark.parametrize("fn, msg", [(_bad_memory_option, "cache_modifier must be one of"),
                                     (_bad_boundary, "need a block pointer")])
def test_load_option_errors(fn, msg):
    with pytest.raises(CompilationError, match=msg) as e:
        compiles(fn)
    assert e.value.loc.line == line_of(fn, "kd.load(")


def memory_options(x_ptr):
    v = kd.load(x_ptr, None, None, (), "", ".cg", "evict_last", True)
    kd.store(x_ptr + 1, v, cache_modifier=".cs", eviction_policy="evict_first")


def test_load_and_store_take_triton_signatures():
    f = compiles(memory_options)
    load = next(op for op in f.walk() if op.kind == "load")
    assert load.attrs == {"volatile": True}
