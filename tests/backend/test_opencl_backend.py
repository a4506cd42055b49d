"""OpenCL backend: hand-built Loop IR kernels (tests/codegen/test_c_like.py) compiled and run on
the OpenCL device (PoCL's CPU device here) with 128 and 32 work-items per program; results
checked against NumPy."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

import kdsl as kd
from kdsl.backends.base import BoundArg
from kdsl.backends.opencl import OpenCLBackend
from kdsl.ir import loop
from kdsl.ir.types import from_numpy
from kdsl.runtime.device import launch

_spec = importlib.util.spec_from_file_location(
    "kdsl_c_like_samples", Path(__file__).parents[1] / "codegen" / "test_c_like.py")
samples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(samples)

BACKEND = OpenCLBackend()
if not BACKEND.is_available():
    pytest.skip("no OpenCL device (pyopencl or a platform missing)", allow_module_level=True)

RNG = np.random.default_rng(7)
THREADS = [128, 32]


def run(kernel: loop.Kernel, grid: int, **values) -> None:
    """Build `kernel` and launch it on `grid` programs with NumPy arrays / Python scalars."""
    args = []
    for p in kernel.params:
        v = values[p.name]
        if isinstance(v, np.ndarray):
            args.append(BoundArg(p.name, "array", p.dtype.pointee, v, host=v, nbytes=v.nbytes,
                                 numel=v.size))
        else:
            args.append(BoundArg(p.name, "scalar", p.dtype, v))
    handle = BACKEND.build(kernel, BACKEND.codegen(kernel))
    launch(BACKEND, handle, kernel, (grid, 1, 1), args)


def test_target_and_hash(monkeypatch):
    monkeypatch.delenv("KDSL_OPENCL_LOWERING", raising=False)
    t = BACKEND.target(4)
    if BACKEND.device_kind() == "cpu":  # one work-item per program, the CPU strategies
        assert (t.backend, t.threads, t.warp_size) == ("opencl", 1, 1)
        assert {"cpu_microkernel", "reduce_partials"} <= t.caps and t.vector_bits >= 128
        assert BACKEND.is_cpu and BACKEND.lowering() == "one-thread"
    else:
        assert (t.backend, t.threads, t.warp_size) == ("opencl", 128, 32)
    assert t.shared_bytes > 0
    assert BACKEND.hash().startswith("opencl:")


def test_lowering_override(monkeypatch):
    monkeypatch.setenv("KDSL_OPENCL_LOWERING", "work-group")
    t = OpenCLBackend().target(4)
    assert (t.threads, t.warp_size) == (128, 32) and "cpu_microkernel" not in t.caps
    assert not OpenCLBackend().is_cpu
    monkeypatch.setenv("KDSL_OPENCL_LOWERING", "one-thread")
    assert OpenCLBackend().target(4).threads == 1
    monkeypatch.setenv("KDSL_OPENCL_LOWERING", "warps")
    with pytest.raises(ValueError, match="KDSL_OPENCL_LOWERING='warps'"):
        OpenCLBackend().target(4)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("n", [1, 1000, 4096])
def test_vector_add_ragged(threads, n):
    x, y = RNG.random(n, np.float32), RNG.random(n, np.float32)
    out = np.full(n, -1, np.float32)
    k = samples.vector_add(threads)
    run(k, math.ceil(n / (2 * threads)), x=x, y=y, out=out, n=n)
    np.testing.assert_array_equal(out, x + y)


def test_zero_size_arrays():
    z = np.empty(0, np.float32)
    run(samples.vector_add(32), 1, x=z, y=z, out=z, n=0)


@pytest.mark.parametrize("threads", THREADS)
def test_block_sum_through_local_memory(threads):
    n, programs = 1000, 3
    x = RNG.standard_normal(n * programs).astype(np.float32)
    out = np.zeros(programs, np.float32)
    run(samples.block_sum(threads), programs, x=x, out=out, n=n)
    ref = x.astype(np.float64).reshape(programs, n).sum(1)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("op,ref,lo,hi", [
    ("exp", np.exp, -80, 80), ("tanh", np.tanh, -20, 20),
    ("erf", lambda x: np.vectorize(math.erf)(x), -5, 5)])
def test_math_accuracy(op, ref, lo, hi):
    n = 2000
    x = RNG.uniform(lo, hi, n).astype(np.float32)
    out = np.empty_like(x)
    run(samples.unary(op, 32), math.ceil(n / 64), x=x, out=out, n=n)
    exact = ref(x.astype(np.float64))
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    err = np.abs(out - exact) / np.maximum(ulp, np.finfo(np.float32).tiny)
    assert err.max() <= 4, f"{op}: {err.max()} ulp"


def test_sigmoid_float64():
    n = 500
    x = RNG.uniform(-30, 30, n)
    out = np.empty_like(x)
    run(samples.unary("sigmoid", 128, samples.float64), 2, x=x, out=out, n=n)
    np.testing.assert_allclose(out, 1 / (1 + np.exp(-x)), rtol=1e-14)


def c_int_reference(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C semantics on NumPy ints (wrapping; x/0 == 0 and x%0 == 0; truncating division)."""
    dt, bits = a.dtype, a.dtype.itemsize * 8
    wide_a, wide_b = a.astype(object), b.astype(object)
    wrap = (lambda v: np.array(
        [((int(x) + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1)) if dt.kind == "i"
         else int(x) % (1 << bits) for x in v], dtype=dt))

    def cdiv(x, y):
        return 0 if y == 0 else (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1)
    ops = {
        "add": lambda: wrap(wide_a + wide_b), "sub": lambda: wrap(wide_a - wide_b),
        "mul": lambda: wrap(wide_a * wide_b),
        "div": lambda: wrap([cdiv(x, y) for x, y in zip(wide_a, wide_b)]),
        "mod": lambda: wrap([0 if y == 0 else x - cdiv(x, y) * y
                             for x, y in zip(wide_a, wide_b)]),
        "shl": lambda: wrap([x << (y & (bits - 1)) for x, y in zip(wide_a, wide_b)]),
        "shr": lambda: wrap([x >> (y & (bits - 1)) for x, y in zip(wide_a, wide_b)]),
        "maximum": lambda: np.maximum(a, b), "minimum": lambda: np.minimum(a, b),
        "and": lambda: a & b, "xor": lambda: a ^ b, "neg": lambda: wrap(-wide_a),
        "not": lambda: ~a, "abs": lambda: wrap(abs(wide_a)),
    }
    return ops[op]()


@pytest.mark.parametrize("dtype", ["int32", "int8", "int16", "int64", "uint8", "uint32"])
def test_int_c_semantics(dtype):
    dt = np.dtype(dtype)
    info = np.iinfo(dt)
    n = 300
    a = RNG.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    b = RNG.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    special = [0, 1, info.max, info.min, 7]
    a[:len(special)] = special
    b[:5] = 0          # division by zero
    if info.min < 0:
        a[5], b[5] = info.min, -1  # MIN / -1 wraps
        b[6:20] = RNG.integers(-9, 9, 14)
    kernel = samples.int_ops(from_numpy(dt), 32)
    outs = {kernel.params[i].name: np.zeros(n, dt) for i in kernel.stored_indices()}
    run(kernel, math.ceil(n / 64), a=a, b=b, n=n, **outs)
    for name, got in outs.items():
        op = name[len("out_"):]
        want = c_int_reference(op, a, b)
        np.testing.assert_array_equal(got, want, err_msg=f"{dtype} {op}")


def bf16_round_reference(x: np.ndarray) -> np.ndarray:
    u = x.view(np.uint32).astype(np.uint64)
    r = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)
    return np.where(np.isnan(x), (u >> 16).astype(np.uint16) | 0x40, r).astype(np.uint16)


@pytest.mark.parametrize("threads", THREADS)
def test_f16_and_bf16(threads):
    n = 1000
    x32 = (RNG.standard_normal(n) * 1000).astype(np.float32)
    x32[:6] = [np.nan, np.inf, -np.inf, 65520.0, 1e-8, 2049.0]  # NaN, overflow, ties
    x16 = RNG.standard_normal(n).astype(np.float16)
    xb = bf16_round_reference(RNG.standard_normal(n).astype(np.float32))
    y16, yb = np.zeros(n, np.float16), np.zeros(n, np.uint16)
    r16, rb = np.zeros(n, np.float32), np.zeros(n, np.float32)
    kernel = samples.half_kernel(threads)
    if "native_fp16" not in BACKEND.caps:
        assert "vload_half" in BACKEND.codegen(kernel)
    run(kernel, math.ceil(n / (2 * threads)), x16=x16, y16=y16, xb=xb, yb=yb, x32=x32,
        r16=r16, rb=rb, n=n)
    np.testing.assert_array_equal(y16, (x16.astype(np.float32) * 3).astype(np.float16))
    with np.errstate(over="ignore"):
        want_r16 = x32.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(r16, want_r16)
    xb32 = (xb.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(yb, bf16_round_reference(xb32 * np.float32(3)))
    want_rb = (bf16_round_reference(x32).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(rb.view(np.uint32), want_rb.view(np.uint32))


@pytest.mark.parametrize("threads", THREADS)
def test_atomic_add(threads):
    n = 777
    x = RNG.integers(-8, 8, n).astype(np.float32)  # exact in any order
    total, count = np.zeros(1, np.float32), np.zeros(1, np.int32)
    ticket = np.full(n, -1, np.int32)
    run(samples.atomics(threads), math.ceil(n / (2 * threads)), x=x, total=total, count=count,
        ticket=ticket, n=n)
    assert total[0] == x.sum()
    assert count[0] == n
    np.testing.assert_array_equal(np.sort(ticket), np.arange(n))


@pytest.mark.parametrize("threads", THREADS)
def test_loops_and_ifs(threads):
    n = 500
    x = RNG.standard_normal(n).astype(np.float32)
    out, other = np.zeros(n, np.float32), np.zeros(n, np.float32)
    run(samples.control(threads), math.ceil(n / (2 * threads)), x=x, out=out, other=other, n=n)
    i = np.arange(n)
    tri = np.array([sum(range(k % 5)) for k in i], np.float32)
    np.testing.assert_allclose(out, np.where(x > 0, tri * x, -x), rtol=1e-6)
    assert np.isnan(other).all()  # maximum(v, NaN) propagates NaN


def test_binary_cache_round_trip():
    k = samples.vector_add(32)
    handle = BACKEND.build(k, BACKEND.codegen(k))
    data = BACKEND.serialize(handle)
    assert isinstance(data, bytes) and data
    again = BACKEND.deserialize(k, data)
    x = np.arange(100, dtype=np.float32)
    out = np.zeros_like(x)
    args = [BoundArg(name, "array", samples.float32, v, host=v, nbytes=v.nbytes, numel=v.size)
            for name, v in (("x", x), ("y", x), ("out", out))]
    launch(BACKEND, again, k, (2, 1, 1), args + [BoundArg("n", "scalar", samples.int32, 100)])
    np.testing.assert_array_equal(out, 2 * x)


def test_pyopencl_arrays_are_used_in_place():
    import pyopencl.array as cla

    q = BACKEND.runtime().queue
    x = cla.to_device(q, np.arange(64, dtype=np.float32))
    out = cla.zeros(q, 64, np.float32)
    assert BACKEND.owns(x) and not BACKEND.owns(np.zeros(1))
    k = samples.vector_add(32)
    args = [BoundArg(name, "array", samples.float32, v, nbytes=v.nbytes, numel=v.size)
            for name, v in (("x", x), ("y", x), ("out", out))]
    launch(BACKEND, BACKEND.build(k, BACKEND.codegen(k)), k, (1, 1, 1),
                   args + [BoundArg("n", "scalar", samples.int32, 64)])
    np.testing.assert_array_equal(out.get(), 2 * np.arange(64, dtype=np.float32))


# A runtime `if` holding a reduction (barriers) followed by stores: PoCL 3.1 once compiled this
# shape so that every work-item stored regardless of its mask, past the end of the output
# (kdsl/lowering/hoist_barriers.py now keeps barriers out of conditionals).

@kd.jit
def _if_reduce_then_store(x_ptr, out_ptr, sf, n, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    t = kd.load(x_ptr + offs, mask=offs < n, other=0.0)
    acc = 0.0
    if sf > 0.0:
        acc = kd.sum(t, axis=0)
    v = kd.zeros([BLOCK], kd.float32)
    if sf > 0.0:
        v = kd.load(x_ptr + offs, mask=offs < 1, other=0.0)
    kd.store(out_ptr + offs, acc + v, mask=offs < 1)


@pytest.mark.parametrize("num_warps", [1, 4])
@pytest.mark.parametrize("sf", [1.0, -1.0])
def test_conditional_reduction_writes_only_its_element(num_warps, sf):
    x = np.arange(16, dtype=np.float32)
    buf = np.full(1 + 64 * num_warps, -7.0, np.float32)  # one output, then guard elements
    _if_reduce_then_store[(1,)](x, buf, sf, 16, BLOCK=16, backend="opencl",
                                num_warps=num_warps)
    assert buf[0] == (x.sum() + x[0] if sf > 0 else 0.0)
    assert (buf[1:] == -7.0).all(), f"{(buf[1:] != -7.0).sum()} stray stores"


@kd.jit
def _exp_rows(x_ptr, y_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    kd.store(y_ptr + offs, kd.exp(kd.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


def test_one_thread_exp_is_the_llvm_backends_bit_for_bit():
    """On a CPU device one-thread kernels compute float32 exp with `kd_exp_float32`, the llvm
    backend's algorithm: the same bits, denormal and overflowing outputs, NaN and infinities
    included (a GPU device's work-group kernels keep the built-in)."""
    be = OpenCLBackend()
    if be.lowering() != "one-thread":
        pytest.skip("work-group lowering: OpenCL's built-in exp")
    # (j - 0.5) ln 2 and its float neighbours put x log2(e) + 0.5 on and next to the integer j,
    # where the floor of the range reduction changes
    edge = ((np.arange(-150, 129) - 0.5) * math.log(2)).astype(np.float32)
    x = np.concatenate([RNG.uniform(-160, 100, 3000), edge, np.nextafter(edge, np.float32(-1e9)),
                        np.nextafter(edge, np.float32(1e9)),
                        [-87.5, -103.9, -149.5, -150.0, 88.8, np.inf, -np.inf, np.nan, 0.0,
                         -0.0]]).astype(np.float32)
    outs = {}
    for backend in ("opencl", "llvm"):
        if backend not in kd.available_backends():
            pytest.skip(f"{backend} backend unavailable")
        y = np.empty_like(x)
        _exp_rows[(math.ceil(x.size / 256),)](x, y, x.size, BLOCK=256, backend=backend)
        outs[backend] = y
    src = _exp_rows.compile(x, x, x.size, BLOCK=256, backend="opencl").ir["opencl"]
    assert "kd_exp_float32(" in src
    np.testing.assert_array_equal(outs["opencl"].view(np.int32), outs["llvm"].view(np.int32))
