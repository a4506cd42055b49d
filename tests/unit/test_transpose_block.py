"""The Loop IR `Transpose` statement (an n x n block copied transposed) and the CPU dot's
packing of a transposed operand through it (kdsl/lowering/dot_cpu.py `_pack_transposed`):
its meaning in the simulator, the verifier's rules, the llvm backend's shuffle network and
the C dialects' loops, all against NumPy; and that attention-style first dot without an
accumulator."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd
from kdsl.frontend import build_function
from kdsl.ir import loop as L
from kdsl.ir.loop_interp import run_kernel
from kdsl.ir.loop_verify import LoopVerifyError, verify
from kdsl.ir.types import PointerType, float32, int32, scalar
from kdsl.lowering import lower
from kdsl.passes import run_tile_passes
from kdsl.target import Target
from kdsl.testing import assert_close

I = lambda v: L.Const(v, int32)  # noqa: E731


def _block_kernel(n: int, src_size: int, dst_size: int, src_at: int, ss: int, dst_at: int,
                  ds: int) -> L.Kernel:
    """x -> src (a register array), Transpose(dst <- src), dst -> y."""
    x, y = L.KParam("x", PointerType(float32)), L.KParam("y", PointerType(float32))
    src, dst = L.Array("src", float32, src_size), L.Array("dst", float32, dst_size)
    i = L.Var("i", int32)
    xv, yv = L.Var("x", x.dtype), L.Var("y", y.dtype)
    body = [
        L.For(i, I(0), I(src_size), I(1), [L.ArrayStore(src, i, L.Load(L.PtrAdd(xv, i)))]),
        L.For(i, I(0), I(dst_size), I(1), [L.ArrayStore(dst, i, L.Const(-1.0, float32))]),
        L.Transpose(dst, I(dst_at), ds, src, I(src_at), ss, n),
        L.For(i, I(0), I(dst_size), I(1), [L.Store(L.PtrAdd(yv, i), L.Index(dst, i))]),
    ]
    return L.Kernel("k", [x, y], body, [i], [src, dst], 1)


@pytest.mark.parametrize("n,ss,ds,src_at,dst_at", [(2, 2, 2, 0, 0), (4, 7, 5, 3, 2),
                                                   (16, 64, 32, 16, 32)])
def test_the_statement_means_its_loop_nest(n, ss, ds, src_at, dst_at):
    src_size, dst_size = src_at + (n - 1) * ss + n, dst_at + (n - 1) * ds + n
    x = np.random.default_rng(n).standard_normal(src_size).astype(np.float32)
    y = np.zeros(dst_size, np.float32)
    k = _block_kernel(n, src_size, dst_size, src_at, ss, dst_at, ds)
    assert f"transpose{n}x{n}(dst[{dst_at}:int32::{ds}], src[{src_at}:int32::{ss}])" \
        in L.print_kernel(k)
    run_kernel(k, (1,), [x, y])
    want = np.full(dst_size, -1.0, np.float32)
    for i in range(n):
        for j in range(n):
            want[dst_at + j * ds + i] = x[src_at + i * ss + j]
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("n,ss,why", [(3, 8, "power of two"), (4, 2, "overlap")])
def test_the_verifier_names_a_bad_block(n, ss, why):
    k = _block_kernel(n, 64, 64, 0, ss, 0, 8)
    with pytest.raises(LoopVerifyError, match=why):
        verify(k)


@kd.jit
def scores(q_ptr, k_ptr, s_ptr, BM: kd.constexpr, BN: kd.constexpr, BD: kd.constexpr):
    # attention's first dot: q @ k^T with k loaded as [BN, BD] rows
    m = kd.arange(0, BM)
    n = kd.arange(0, BN)
    d = kd.arange(0, BD)
    q = kd.load(q_ptr + m[:, None] * BD + d[None, :])
    k = kd.load(k_ptr + n[:, None] * BD + d[None, :])
    kd.store(s_ptr + m[:, None] * BN + n[None, :], kd.dot(q, kd.trans(k)))


def test_dot_without_accumulator_starts_its_blocks_at_zero():
    """`dot(a, b)` (no accumulator) writes its output array only from the register blocks,
    which start at zero: no zeroing loop over the output, no loads of it."""
    rng = np.random.default_rng(9)
    s = np.empty((16, 32), np.float32)
    q = rng.standard_normal((16, 64)).astype(np.float32)
    k = rng.standard_normal((32, 64)).astype(np.float32)
    loop = scores.compile(q, k, s, BM=16, BN=32, BD=64, backend="llvm").ir["loop"]
    assert "dot0[" in loop and not any(
        line.strip().startswith("dot0[") and line.strip().endswith("= 0.0:float32")
        for line in loop.splitlines()), loop
    if "llvm" in kd.available_backends():
        scores[(1,)](q, k, s, BM=16, BN=32, BD=64, backend="llvm")
        assert_close(s, q.astype(np.float64) @ k.T.astype(np.float64))


def _lowered(caps: frozenset[str], bits: int, BM: int, BN: int, BD: int) -> L.Kernel:
    p = scalar(PointerType(float32))
    fn, _ = run_tile_passes(build_function(scores.fn, {"q_ptr": p, "k_ptr": p, "s_ptr": p},
                                           {"BM": BM, "BN": BN, "BD": BD}))
    return lower(fn, Target("llvm", threads=1, caps=caps, vector_bits=bits,
                            vector_regs=32 if bits == 512 else 16))


CPU = frozenset({"fp64", "reduce_partials", "cpu_microkernel"})


@pytest.mark.parametrize("bits,BM,BN,BD,blocks", [(512, 16, 32, 64, 8), (256, 8, 16, 32, 8),
                                                  (512, 16, 32, 8, 0)])
def test_transposed_operand_packed_by_blocks(bits, BM, BN, BD, blocks):
    """With the capability the packing of trans(k) is `Transpose` blocks of the target's lane
    count (a BD too short for one block keeps the loops); the simulated results are
    bit-identical to the loop-nest packing's, and equal to NumPy's product."""
    rng = np.random.default_rng(BD)
    q = rng.standard_normal((BM, BD)).astype(np.float32)
    k = rng.standard_normal((BN, BD)).astype(np.float32)
    n = bits // 32
    got = {}
    for caps in (CPU, CPU | {"transpose_block"}):
        kern = _lowered(caps, bits, BM, BN, BD)
        text = L.print_kernel(kern)
        if "transpose_block" in caps:
            assert text.count(f"transpose{n}x{n}(") == (1 if blocks else 0), text
        else:
            assert "transpose" not in text
        s = np.zeros((BM, BN), np.float32)
        run_kernel(kern, (1,), [q, k, s])
        got[caps] = s
    a, b = got.values()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, q.astype(np.float64) @ k.T.astype(np.float64),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.skipif("llvm" not in kd.available_backends(), reason="llvm backend not available")
def test_llvm_shuffles_the_blocks():
    """The llvm backend's shuffle network gives the loop nest's values (the product against
    NumPy and bitwise against the simulator) and its assembly has no scatter or gather."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((32, 64)).astype(np.float32)
    k = rng.standard_normal((64, 64)).astype(np.float32)
    s = np.zeros((32, 64), np.float32)
    scores[(1,)](q, k, s, BM=32, BN=64, BD=64, backend="llvm")
    ck = scores.warmup(q, k, s, BM=32, BN=64, BD=64, grid=(1,), backend="llvm")
    assert "transpose" in ck.ir["loop"]  # any host with 2+ float lanes (64 = 2**6)
    asm = ck.ir["asm"]
    assert "scatter" not in asm and "gather" not in asm
    np.testing.assert_allclose(s, q.astype(np.float64) @ k.T.astype(np.float64), rtol=1e-5,
                               atol=1e-5)
    ref = np.zeros_like(s)
    run_kernel(ck.kernel, (1,), [q, k, ref])
    np.testing.assert_array_equal(s, ref)


@pytest.mark.skipif("opencl" not in kd.available_backends(), reason="no OpenCL device")
@pytest.mark.parametrize("form", ["shuffles", "loops"])
@pytest.mark.parametrize("n", [4, 16])
def test_c_dialect_forms_run(form, n):
    """The OpenCL dialect prints a block as vector loads, `shuffle2` and vector stores; a
    dialect without a shuffle spelling (CUDA's) prints the loop nest.  Both, compiled by the
    OpenCL device, give the loop nest's values."""
    import dataclasses

    import pyopencl as cl
    from kdsl.backends.c_like import emit
    from kdsl.backends.opencl import opencl_dialect

    d = opencl_dialect(simd_lanes=16)
    if form == "loops":
        d = dataclasses.replace(d, simd_shuffle="")
    ss, ds, src_at, dst_at = n + 3, n + 1, 2, 5
    src_size, dst_size = src_at + (n - 1) * ss + n, dst_at + (n - 1) * ds + n
    text = emit(_block_kernel(n, src_size, dst_size, src_at, ss, dst_at, ds), d)
    assert ("shuffle2(" in text) == (form == "shuffles") and ("kd_ti" in text) == (form == "loops")
    x = np.random.default_rng(n).standard_normal(src_size).astype(np.float32)
    y = np.zeros(dst_size, np.float32)
    ctx = cl.create_some_context(interactive=False)
    queue = cl.CommandQueue(ctx)
    mf = cl.mem_flags
    xb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    yb = cl.Buffer(ctx, mf.WRITE_ONLY, y.nbytes)
    cl.Program(ctx, text).build().k(queue, (1,), (1,), xb, yb)
    cl.enqueue_copy(queue, y, yb)
    want = np.full(dst_size, -1.0, np.float32)
    for i in range(n):
        for j in range(n):
            want[dst_at + j * ds + i] = x[src_at + i * ss + j]
    np.testing.assert_array_equal(y, want)


@pytest.mark.skipif("opencl" not in kd.available_backends(), reason="no OpenCL device")
def test_opencl_one_thread_kernels_shuffle_too():
    from kdsl.backends.opencl import OpenCLBackend

    if OpenCLBackend().lowering() != "one-thread":
        pytest.skip("the OpenCL device is not a CPU (the work-group lowering packs no operand)")
    rng = np.random.default_rng(2)
    q = rng.standard_normal((16, 32)).astype(np.float32)
    k = rng.standard_normal((32, 32)).astype(np.float32)
    s = np.zeros((16, 32), np.float32)
    ck = scores.warmup(q, k, s, BM=16, BN=32, BD=32, grid=(1,), backend="opencl")
    assert "shuffle2(" in ck.ir["opencl"]
    scores[(1,)](q, k, s, BM=16, BN=32, BD=32, backend="opencl")
    np.testing.assert_allclose(s, q.astype(np.float64) @ k.T.astype(np.float64), rtol=1e-5,
                               atol=1e-5)
