"""The C-like emitter on hand-built Loop IR kernels (no device needed).

The kernel builders at the top (`SAMPLES`) are shared with tests/backend/test_opencl_backend.py
(run on PoCL) and tests/codegen/test_cuda_codegen.py (compiled with NVRTC): each builds a
`loop.Kernel` the way the shared lowering does for a GPU-like target (`threads` work-items, a
program instance per work-group).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from kdsl.compile_options import CompileOptions
from kdsl.backends.c_like import emit, format_const, kernel_name
from kdsl.backends.cuda import cuda_dialect
from kdsl.backends.opencl import opencl_dialect
from kdsl.ir import loop
from kdsl.ir.loop import (
    ArrayStore,
    Assign,
    AtomicAdd,
    Barrier,
    Binary,
    Cast,
    Comment,
    Const,
    For,
    If,
    Index,
    Load,
    PtrAdd,
    Round,
    Select,
    Special,
    Store,
    Unary,
    Var,
    While,
)
from kdsl.ir.types import (
    PointerType,
    bfloat16,
    float16,
    float32,
    float64,
    int1,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint32,
)

F32P, F16P, BF16P = PointerType(float32), PointerType(float16), PointerType(bfloat16)


def c(value, dtype=int32) -> Const:
    return Const(value, dtype)


def b(op: str, x, y) -> Binary:
    return Binary(op, x, y)


TID, PID = Special("tid"), Special("pid", 0)


def _elementwise(name: str, threads: int, params: list[loop.KParam], per_elem, reps: int = 2,
                 stored=("out",)) -> loop.Kernel:
    """A kernel whose program handles `reps * threads` elements `offs < n`: for each register
    slot r, `offs = pid*BLOCK + r*threads + tid`, `m = offs < n`, then `per_elem(offs, m)`."""
    offs, m = Var("offs", int32), Var("m", int1)
    n = Var("n", int32)
    body: list[loop.Stmt] = [Comment(f"{reps} elements per work-item")]
    for r in range(reps):
        body += [
            Assign(offs, b("add", b("mul", PID, c(reps * threads)),
                           b("add", c(r * threads), TID))),
            Assign(m, b("lt", offs, n)),
            *per_elem(offs, m),
        ]
    return loop.Kernel(name, params + [loop.KParam("n", int32)], body, [offs, m],
                       threads=threads,
                       stored_params=frozenset(i for i, p in enumerate(params) if p.name in stored))


def vector_add(threads: int) -> loop.Kernel:
    x, y, out = Var("x", F32P), Var("y", F32P), Var("out", F32P)

    def elem(offs, m):
        lx = Load(PtrAdd(x, offs), m, c(0.0, float32))
        ly = Load(PtrAdd(y, offs), m, c(0.0, float32))
        return [Store(PtrAdd(out, offs), b("add", lx, ly), m)]
    return _elementwise("add_kernel", threads, [loop.KParam(p, F32P) for p in ("x", "y", "out")],
                        elem)


def unary(op: str, threads: int, dtype=float32) -> loop.Kernel:
    p = PointerType(dtype)
    x, out = Var("x", p), Var("out", p)

    def elem(offs, m):
        return [Store(PtrAdd(out, offs), Unary(op, Load(PtrAdd(x, offs), m, c(1.0, dtype))), m)]
    return _elementwise(f"{op}_kernel", threads, [loop.KParam("x", p), loop.KParam("out", p)],
                        elem)


INT_OPS = ("add", "sub", "mul", "div", "mod", "shl", "shr", "maximum", "minimum", "and", "xor")


def int_ops(dtype, threads: int) -> loop.Kernel:
    """out_<op>[i] = a[i] <op> b[i] for each op of INT_OPS (shift amounts masked to the width,
    as the lowering does), plus neg/not/abs of a."""
    p = PointerType(dtype)
    a, bb = Var("a", p), Var("b", p)
    outs = [f"out_{op}" for op in INT_OPS + ("neg", "not", "abs")]
    va, vb = Var("va", dtype), Var("vb", dtype)

    def elem(offs, m):
        stmts = [Assign(va, Load(PtrAdd(a, offs), m, c(0, dtype))),
                 Assign(vb, Load(PtrAdd(bb, offs), m, c(1, dtype)))]
        for op in INT_OPS:
            rhs = b("and", vb, c(dtype.bits - 1, dtype)) if op in ("shl", "shr") else vb
            stmts.append(Store(PtrAdd(Var(f"out_{op}", p), offs), b(op, va, rhs), m))
        for op in ("neg", "not", "abs"):
            stmts.append(Store(PtrAdd(Var(f"out_{op}", p), offs), Unary(op, va), m))
        return stmts
    k = _elementwise(f"int_ops_{dtype}", threads,
                     [loop.KParam(n, p) for n in ["a", "b"] + outs], elem, stored=outs)
    k.variables += [va, vb]
    return k


def block_sum(threads: int) -> loop.Kernel:
    """out[pid] = sum(x[pid*n : pid*n + n]): a strided `For` per work-item, then a tree
    reduction through a shared array (`While` + `If` + `Barrier`)."""
    x, out, n = Var("x", F32P), Var("out", F32P), Var("n", int32)
    acc, k, s = Var("acc", float32), Var("k", int32), Var("s", int32)
    buf = loop.Array("buf", float32, threads, "shared")
    base = b("mul", PID, n)
    body = [
        Assign(acc, c(0.0, float32)),
        For(k, TID, n, c(threads), [
            Assign(acc, b("add", acc, Load(PtrAdd(x, b("add", base, k))))),
        ]),
        ArrayStore(buf, TID, acc),
        Barrier(),
        Assign(s, c(threads // 2)),
        While([], b("gt", s, c(0)), [
            If(b("lt", TID, s), [
                ArrayStore(buf, TID, b("add", Index(buf, TID), Index(buf, b("add", TID, s)))),
            ]),
            Barrier(),
            Assign(s, b("shr", s, c(1))),
        ]),
        If(b("eq", TID, c(0)), [Store(PtrAdd(out, PID), Index(buf, c(0)))]),
    ]
    return loop.Kernel("block_sum", [loop.KParam("x", F32P), loop.KParam("out", F32P),
                                     loop.KParam("n", int32)],
                       body, [acc, k, s], [buf], threads=threads, stored_params=frozenset({1}))


def half_kernel(threads: int) -> loop.Kernel:
    """y16 = f16(x16 * 3), r16 = round_f16(x32) kept in float32, yb = bf16(xb * 3),
    rb = round_bf16(x32) in float32."""
    x16, y16, xb, yb = Var("x16", F16P), Var("y16", F16P), Var("xb", BF16P), Var("yb", BF16P)
    x32, r16, rb = Var("x32", F32P), Var("r16", F32P), Var("rb", F32P)
    three = c(3.0, float32)

    def elem(offs, m):
        return [
            Store(PtrAdd(y16, offs), Round(b("mul", Load(PtrAdd(x16, offs), m, c(0.0, float32)),
                                             three), "float16"), m),
            Store(PtrAdd(r16, offs), Round(Load(PtrAdd(x32, offs), m, c(0.0, float32)),
                                           "float16"), m),
            Store(PtrAdd(yb, offs), Round(b("mul", Load(PtrAdd(xb, offs), m, c(0.0, float32)),
                                            three), "bfloat16"), m),
            Store(PtrAdd(rb, offs), Round(Load(PtrAdd(x32, offs), m, c(0.0, float32)),
                                          "bfloat16"), m),
        ]
    params = [loop.KParam("x16", F16P), loop.KParam("y16", F16P), loop.KParam("xb", BF16P),
              loop.KParam("yb", BF16P), loop.KParam("x32", F32P), loop.KParam("r16", F32P),
              loop.KParam("rb", F32P)]
    return _elementwise("half_kernel", threads, params, elem, stored=("y16", "yb", "r16", "rb"))


def atomics(threads: int) -> loop.Kernel:
    """total[0] += x[i] (float CAS loop); count[0] += 1 with the old value stored to ticket[i]."""
    x, total = Var("x", F32P), Var("total", F32P)
    count, ticket = Var("count", PointerType(int32)), Var("ticket", PointerType(int32))
    old = Var("old", int32)

    def elem(offs, m):
        return [
            AtomicAdd(total, Load(PtrAdd(x, offs), m, c(0.0, float32)), m),
            AtomicAdd(count, c(1), m, old),
            Store(PtrAdd(ticket, offs), old, m),
        ]
    k = _elementwise("atomics", threads, [loop.KParam("x", F32P), loop.KParam("total", F32P),
                                          loop.KParam("count", PointerType(int32)),
                                          loop.KParam("ticket", PointerType(int32))],
                     elem, stored=("total", "count", "ticket"))
    k.variables.append(old)
    return k


def control(threads: int) -> loop.Kernel:
    """out[i] = x[i] > 0 ? sum_{j<i%5} j*x[i] : -x[i], via If/else and a For; also Select,
    Cast, maximum with NaN and int64 constants."""
    x, out, other = Var("x", F32P), Var("out", F32P), Var("other", F32P)
    v, j, t = Var("v", float32), Var("j", int32), Var("t", float32)
    big = Var("big", int64)

    def elem(offs, m):
        return [
            Assign(v, Load(PtrAdd(x, offs), m, c(0.0, float32))),
            If(b("gt", v, c(0.0, float32)), [
                Assign(t, c(0.0, float32)),
                For(j, c(0), b("mod", offs, c(5)), c(1), [
                    Assign(t, b("add", t, b("mul", Cast(j, float32), v))),
                ]),
            ], [Assign(t, Unary("neg", v))]),
            If(m, [Store(PtrAdd(out, offs), t)]),
            Assign(big, b("add", Cast(offs, int64), c(1 << 40, int64))),
            Store(PtrAdd(other, offs),
                  Select(b("eq", b("sub", big, c(1 << 40, int64)), Cast(offs, int64)),
                         b("maximum", v, c(float("nan"), float32)), c(-1.0, float32)), m),
        ]
    k = _elementwise("control", threads, [loop.KParam("x", F32P), loop.KParam("out", F32P),
                                          loop.KParam("other", F32P)], elem,
                     stored=("out", "other"))
    k.variables += [v, j, t, big]
    return k


SAMPLES = {
    "vector_add": vector_add,
    "block_sum": block_sum,
    "exp": lambda t: unary("exp", t),
    "tanh": lambda t: unary("tanh", t),
    "erf": lambda t: unary("erf", t),
    "sigmoid_f64": lambda t: unary("sigmoid", t, float64),
    "int32_ops": lambda t: int_ops(int32, t),
    "int8_ops": lambda t: int_ops(int8, t),
    "int16_ops": lambda t: int_ops(int16, t),
    "int64_ops": lambda t: int_ops(int64, t),
    "uint8_ops": lambda t: int_ops(uint8, t),
    "uint32_ops": lambda t: int_ops(uint32, t),
    "half": half_kernel,
    "atomics": atomics,
    "control": control,
}

# ------------------------------------------------------------------------------------- tests

DIALECTS = {"opencl": opencl_dialect(), "cuda": cuda_dialect()}


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("sample", SAMPLES)
def test_every_sample_emits(sample, dialect):
    src = emit(SAMPLES[sample](32), DIALECTS[dialect])
    assert src.count("{") == src.count("}")
    assert "kd_tid" in src


def test_opencl_vector_add_reads_like_c():
    src = emit(vector_add(128), DIALECTS["opencl"])
    assert "__kernel __attribute__((reqd_work_group_size(128, 1, 1)))" in src
    assert "__global float* x" in src
    assert "const int kd_tid = (int)get_local_id(0);" in src
    # masked load: lazy ?: with the `other` value, store guarded by the mask
    assert "(m ? x[offs] : 0.0f)" in src
    assert "if (m) out[offs] = " in src
    assert "// 2 elements per work-item" in src


def test_cuda_dialect_spelling():
    src = emit(block_sum(64), DIALECTS["cuda"])
    assert 'extern "C" __global__ void __launch_bounds__(64)' in src
    assert "__shared__ float buf[64];" in src
    assert "__syncthreads();" in src
    assert "(int)threadIdx.x" in src and "(int)blockIdx.x" in src
    assert "while (1) {" in src and "break;" in src


def test_opencl_reduction_uses_local_memory_and_barriers():
    src = emit(block_sum(32), DIALECTS["opencl"])
    assert "__local float buf[32];" in src
    assert src.count("barrier(CLK_LOCAL_MEM_FENCE") == 2
    assert "for (k = kd_tid; k < n; k += 32) {" in src


def test_half_without_native_fp16_uses_vload_half():
    src = emit(half_kernel(32), opencl_dialect(native_fp16=False))
    assert "vload_half(0, (x16 + offs))" in src
    assert "vstore_half_rte(" in src
    assert "#pragma OPENCL EXTENSION cl_khr_fp16" not in src
    native = emit(half_kernel(32), opencl_dialect(native_fp16=True))
    assert "#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in native
    assert "convert_half_rte" in native


def test_cuda_half_and_bf16():
    src = emit(half_kernel(32), DIALECTS["cuda"])
    assert "#include <cuda_fp16.h>" in src
    assert "__half2float" in src and "__float2half_rn" in src
    assert "__uint_as_float" in src  # bf16 load helper
    assert "unsigned short* xb" in src


def test_math_names_per_dialect():
    ocl = emit(unary("exp", 32), DIALECTS["opencl"])
    cu = emit(unary("exp", 32), DIALECTS["cuda"])
    cu64 = emit(unary("tanh", 32, float64), DIALECTS["cuda"])
    assert " exp(" in ocl and "native_" not in ocl
    assert "expf(" in cu
    assert "tanh(" in cu64 and "tanhf" not in cu64
    assert "#pragma OPENCL EXTENSION cl_khr_fp64 : enable" in emit(unary("exp", 32, float64),
                                                                   DIALECTS["opencl"])


def test_int_helpers_only_when_used():
    src = emit(int_ops(int8, 32), DIALECTS["opencl"])
    assert "kd_div_int8" in src and "kd_mod_int8" in src
    assert "kd_div_int32" not in src
    # narrow results are cast back to their type; signed arithmetic wraps through unsigned
    assert "((char)((uint)va + (uint)vb))" in src
    assert "offs = ((int)(((uint)kd_pid0 * 64u) + (0u + (uint)kd_tid)));" in src
    assert "kd_bf16" not in emit(vector_add(32), DIALECTS["opencl"])


def test_atomic_spellings():
    ocl = emit(atomics(32), DIALECTS["opencl"])
    cu = emit(atomics(32), DIALECTS["cuda"])
    assert "kd_atomic_add_float32(total, " in ocl and "atomic_cmpxchg" in ocl
    assert "old = atomic_add(count, 1);" in ocl
    assert "atomicAdd(total, " in cu and "old = atomicAdd(count, 1);" in cu


@pytest.mark.parametrize("value", [0.1, 1.0, -2.5, 3.4028234663852886e38, 1e-45, 1e-38,
                                   16777217.0, 0.333333343267, 5e-324])
def test_float32_literals_are_exact(value):
    text = format_const(value, float32, DIALECTS["opencl"])
    assert text.endswith("f")
    assert np.float32(text[:-1]) == np.float32(value)


def test_float64_literals_and_specials():
    d = DIALECTS["cuda"]
    assert float(format_const(0.1, float64, d)) == 0.1
    assert format_const(float("inf"), float32, d) == "INFINITY"
    assert format_const(float("-inf"), float32, d) == "(-INFINITY)"
    assert format_const(float("nan"), float32, d) == "NAN"
    assert format_const(2.0, float32, d) == "2.0f"


def test_int_literals():
    ocl, cu = DIALECTS["opencl"], DIALECTS["cuda"]
    assert format_const(-2**31, int32, ocl) == "(-2147483647 - 1)"
    assert format_const(-2**63, int64, cu) == "(-9223372036854775807LL - 1)"
    assert format_const(1 << 40, int64, ocl) == "1099511627776L"
    assert format_const(1 << 40, int64, cu) == "1099511627776LL"
    assert format_const(4000000000, uint32, ocl) == "4000000000u"
    assert format_const(-3, int8, ocl) == "((char)-3)"
    assert format_const(True, int1, ocl) == "true"


def test_reserved_names_are_renamed():
    v = Var("float", float32)
    kern = loop.Kernel("kernel", [loop.KParam("exp", F32P)],
                       [Assign(v, Load(Var("exp", F32P))),
                        Store(PtrAdd(Var("exp", F32P), TID), Unary("exp", v))],
                       [v], threads=32)
    src = emit(kern, DIALECTS["opencl"])
    assert kernel_name("kernel") == "v_kernel"
    assert "void v_kernel(__global float* v_exp)" in src
    assert "v_float = v_exp[0];" in src
    assert "v_exp[kd_tid] = exp(v_float);" in src


def test_fast_math_is_opt_in():
    k = unary("exp", 32)
    assert "-cl-fast-relaxed-math" not in emit(k, DIALECTS["opencl"])
    k.options = CompileOptions(fast_math=True)
    assert "-cl-fast-relaxed-math" in emit(k, DIALECTS["opencl"])
    assert "--use_fast_math" in emit(k, DIALECTS["cuda"])


def test_pointers_are_never_restrict():
    k = vector_add(32)  # user arrays may alias (in and out the same array)
    assert "__global float* x" in emit(k, DIALECTS["opencl"])
    assert "restrict" not in emit(k, DIALECTS["cuda"])


def test_variables_keep_loop_ir_names():
    src = emit(control(32), DIALECTS["cuda"])
    for decl in ("float v;", "int j;", "float t;", "long long big;", "bool m;"):
        assert re.search(rf"^\s+{re.escape(decl)}$", src, re.MULTILINE), decl


def test_stored_params_or_default():
    from kdsl.backends.c_like import stored_params

    k = vector_add(32)
    assert stored_params(k) == {2}
    k.stored_params = frozenset({0})
    assert stored_params(k) == {0}
    k.stored_params = None  # unknown: every pointer parameter
    assert stored_params(k) == {0, 1, 2}
