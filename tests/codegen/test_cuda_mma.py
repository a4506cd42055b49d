"""Tensor-core `dot` (kdsl/lowering/dot_mma.py) with no GPU.

- the fragment layouts are checked against the PTX ISA's statement of them, element by element;
- `mma_reference` (the NumPy model of one warp's mma, which the Loop IR simulator runs) is
  checked against a float64 matmul;
- kernels are lowered for the CUDA target and the Loop IR, intrinsics included, is executed by
  the simulator (so the lowering's index mapping, staging and barriers are what is tested);
- the CUDA source compiles for sm_80 and sm_90 with `mma.sync` in its PTX; resources reported.
"""

from __future__ import annotations

import numpy as np
import pytest
from kdsl.backends import cuda

import kdsl as kd
from kdsl.ir.loop import Intrinsic, Kernel, Stmt
from kdsl.ir.loop_interp import round_bf16, run_kernel
from kdsl.lowering.dot_mma import C_LAYOUT, MMA_KINDS, mma_reference
from kdsl.testing import assert_close

RNG = np.random.default_rng(7)
needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")

# ------------------------------------------------------------------ layouts vs the PTX ISA


def _isa(kind: str, operand: str, lane: int, i: int) -> tuple[int, int]:
    """(row, col) of fragment element i of `lane`, as the PTX ISA states it."""
    g, t = lane >> 2, lane % 4
    if operand == "c":
        return (g if i < 2 else g + 8), t * 2 + (i & 1)
    if kind in ("float16", "bfloat16"):
        if operand == "a":
            return (g if i in (0, 1, 4, 5) else g + 8), t * 2 + (i & 1) + (8 if i >= 4 else 0)
        return t * 2 + (i & 1) + (8 if i >= 2 else 0), g
    if kind == "tf32":
        if operand == "a":
            return (g if i in (0, 2) else g + 8), (t if i < 2 else t + 4)
        return (t if i == 0 else t + 4), g
    if operand == "a":  # int8, m16n8k32
        return (g if i < 4 or 8 <= i < 12 else g + 8), t * 4 + (i & 3) + (16 if i >= 8 else 0)
    return t * 4 + (i & 3) + (16 if i >= 4 else 0), g


@pytest.mark.parametrize("kind", sorted(MMA_KINDS))
def test_layouts_match_the_isa(kind):
    k = MMA_KINDS[kind]
    for operand, layout, shape in (("a", k.a, (k.m, k.k)), ("b", k.b, (k.k, k.n)),
                                   ("c", C_LAYOUT, (k.m, k.n))):
        seen = np.zeros(shape, int)
        for lane in range(32):
            coords = layout.coords(lane)
            assert coords == [_isa(kind, operand, lane, i) for i in range(len(coords))]
            for r, c in coords:
                seen[r, c] += 1
        assert (seen == 1).all(), (kind, operand)  # the warp covers each element once


def _fragments(kind, a, b, c) -> list[list]:
    return [[a[r, col] for r, col in kind.a.coords(lane)]
            + [b[r, col] for r, col in kind.b.coords(lane)]
            + [c[r, col] for r, col in C_LAYOUT.coords(lane)] for lane in range(32)]


@pytest.mark.parametrize("kind", sorted(MMA_KINDS))
def test_mma_reference(kind):
    k = MMA_KINDS[kind]
    if kind == "int8":
        a = RNG.integers(-128, 128, (k.m, k.k))
        b = RNG.integers(-128, 128, (k.k, k.n))
        c = RNG.integers(-1000, 1000, (k.m, k.n))
    else:
        a, b = RNG.standard_normal((k.m, k.k)), RNG.standard_normal((k.k, k.n))
        c = RNG.standard_normal((k.m, k.n)).astype(np.float32)
        if kind == "float16":
            a, b = a.astype(np.float16), b.astype(np.float16)
        elif kind == "bfloat16":
            a, b = (np.vectorize(round_bf16)(x) for x in (a, b))
        a, b = a.astype(np.float32), b.astype(np.float32)
    out = mma_reference(k, _fragments(k, a, b, c))
    d = np.zeros((k.m, k.n))
    for lane, vals in enumerate(out):
        for (r, col), v in zip(C_LAYOUT.coords(lane), vals):
            d[r, col] = v
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    if kind == "int8":
        np.testing.assert_array_equal(d, want)
    else:  # tf32 rounds its inputs to 10 mantissa bits
        assert_close(d, want, dtype=np.float32 if kind != "tf32" else np.float16, k=k.k)


@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_reference_matches_the_isa(trans):
    """ldmatrix .x4 (PTX ISA): lane l addresses row l % 8 of matrix l / 8; register j of lane l
    holds matrix j's row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 (low half first); with
    .trans, the elements of column l / 4 in rows 2 (l % 4) and 2 (l % 4) + 1."""
    from kdsl.lowering.dot_mma import ldmatrix_reference

    mats = RNG.integers(0, 1 << 16, (4, 8, 8))
    lanes = [[tuple(int(x) for x in mats[lane // 8, lane % 8])] for lane in range(32)]
    out = ldmatrix_reference(lanes, trans=trans)
    for lane in range(32):
        g, t2 = lane // 4, 2 * (lane % 4)
        m = mats.transpose(0, 2, 1) if trans else mats  # m[j, i, c]: what lane reads as row i
        assert out[lane] == [int(m[j, g, t2]) | int(m[j, g, t2 + 1]) << 16 for j in range(4)]


@pytest.mark.parametrize("trans", [False, True])
def test_mma_uses_ldmatrix_when_the_b_tiles_pair_up(trans):
    """One warp, 2 x 2 tiles of 16x8: per K step one ldmatrix per A tile and one per pair of
    B tiles; b [K][N] is copied as is and read with `.trans`, b = trans(x [N][K]) without."""
    ck = _lower(32, 16, 32, "float16", trans=trans, num_warps=1)
    names = _intrinsics(ck.kernel.body)
    steps = 2  # K = 32
    assert names.count("ldmatrix_x4") == steps * (3 if trans else 2)
    assert names.count("ldmatrix_x4_trans") == steps * (0 if trans else 1)
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ck.source
    assert ("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ck.source) != trans


# ------------------------------------------------------- lowered kernels in the simulator


@kd.jit
def mma_kernel(a_ptr, b_ptr, c_ptr, M: kd.constexpr, N: kd.constexpr, K: kd.constexpr,
               DT: kd.constexpr, TRANS_B: kd.constexpr, ACC: kd.constexpr,
               PREC: kd.constexpr):
    rm = kd.arange(0, M)
    rn = kd.arange(0, N)
    rk = kd.arange(0, K)
    a = kd.load(a_ptr + rm[:, None] * K + rk[None, :]).to(DT)
    if TRANS_B:
        b = kd.trans(kd.load(b_ptr + rn[:, None] * K + rk[None, :]).to(DT))
    else:
        b = kd.load(b_ptr + rk[:, None] * N + rn[None, :]).to(DT)
    c_ptrs = c_ptr + rm[:, None] * N + rn[None, :]
    if ACC:
        out = kd.dot(a, b, kd.load(c_ptrs), input_precision=PREC)
    else:
        out = kd.dot(a, b, input_precision=PREC)
    kd.store(c_ptrs, out)


def _intrinsics(stmts: list[Stmt]) -> list[str]:
    out = []
    for s in stmts:
        if isinstance(s, Intrinsic):
            out.append(s.name)
        for f in ("body", "then", "orelse", "cond_body"):
            out += _intrinsics(getattr(s, f, []) or [])
    return out


def _lower(M, N, K, dt, trans=False, acc=False, prec="ieee", num_warps=2) -> Kernel:
    x = np.zeros(4, np.int8 if dt == "int8" else np.float32)
    c = np.zeros(4, np.int32 if dt == "int8" else np.float32)
    ck = mma_kernel.compile(x, x, c, M=M, N=N, K=K, DT=getattr(kd, dt), TRANS_B=trans,
                            ACC=acc, PREC=prec, backend="cuda", num_warps=num_warps)
    return ck


CASES = {  # name: (M, N, K, dtype, trans_b, acc, precision, intrinsic)
    # 16-bit operands: K-major 16-bit shared copies, fragments read as packed pairs
    "f16": (32, 16, 32, "float16", False, False, "ieee", "mma_m16n8k16_f32_f16_bits"),
    "f16_trans_acc": (16, 32, 16, "float16", True, True, "ieee", "mma_m16n8k16_f32_f16_bits"),
    # a, b and c of one numel: loaded by one group, which copies a and b but must keep c
    "f16_square_acc": (16, 16, 16, "float16", False, True, "ieee",
                       "mma_m16n8k16_f32_f16_bits"),
    "bf16": (16, 16, 32, "bfloat16", False, True, "ieee", "mma_m16n8k16_f32_bf16_bits"),
    "tf32": (16, 16, 16, "float32", True, False, "tf32", "mma_m16n8k8_f32_tf32"),
    "int8": (16, 8, 64, "int8", False, True, "ieee", "mma_m16n8k32_s32_s8"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_simulated(case):
    M, N, K, dt, trans, acc, prec, name = CASES[case]
    ck = _lower(M, N, K, dt, trans, acc, prec)
    # 16-bit operands come through ldmatrix where a warp's B tiles pair up
    assert set(_intrinsics(ck.kernel.body)) - {"ldmatrix_x4", "ldmatrix_x4_trans"} == {name}
    if dt == "int8":
        a = RNG.integers(-128, 128, (M, K)).astype(np.int8)
        b = RNG.integers(-128, 128, (N, K) if trans else (K, N)).astype(np.int8)
        c = RNG.integers(-1000, 1000, (M, N)).astype(np.int32)
    else:
        a = RNG.standard_normal((M, K)).astype(np.float32)
        b = RNG.standard_normal((N, K) if trans else (K, N)).astype(np.float32)
        c = RNG.standard_normal((M, N)).astype(np.float32) if acc else np.zeros((M, N),
                                                                                np.float32)
    bb = b.T if trans else b
    if dt == "float16":
        ra, rb = a.astype(np.float16), bb.astype(np.float16)
    elif dt == "bfloat16":
        ra, rb = (np.vectorize(round_bf16)(x) for x in (a, bb))
    else:
        ra, rb = a, bb
    want = ra.astype(np.float64) @ rb.astype(np.float64) + (c if acc else 0)
    run_kernel(ck.kernel, (1,), [a, b, c])
    if dt == "int8":
        np.testing.assert_array_equal(c, want)
    else:
        assert_close(c, want, dtype=np.float16 if prec == "tf32" else np.float32, k=K)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_float32_copies_without_16bit_shared_arrays(dt, monkeypatch):
    """A target without 16-bit shared arrays stages float32 copies by flat index and passes
    the fragments as float32 values (the instruction's unpacked form)."""
    monkeypatch.setattr(cuda.CUDABackend, "caps", cuda.CUDABackend.caps - {"shared_16bit"})
    monkeypatch.setenv("KDSL_CACHE", "0")
    M, N, K = 32, 16, 32
    ck = _lower(M, N, K, dt, acc=True)
    assert set(_intrinsics(ck.kernel.body)) == {MMA_KINDS[dt].name}
    assert all(a.dtype.name == "float32" for a in ck.kernel.arrays if a.space == "shared")
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = RNG.standard_normal((K, N)).astype(np.float32)
    c = RNG.standard_normal((M, N)).astype(np.float32)
    r = np.vectorize(round_bf16) if dt == "bfloat16" else (lambda x: x.astype(np.float16))
    want = r(a).astype(np.float64) @ r(b).astype(np.float64) + c
    run_kernel(ck.kernel, (1,), [a, b, c])
    assert_close(c, want, dtype=np.float32, k=K)


def test_16bit_copies_are_k_major_and_padded():
    ck = _lower(32, 16, 32, "float16", trans=True)
    sizes = sorted(a.size for a in ck.kernel.arrays if a.dtype.name == "float16")
    assert sizes == [16 * (32 + 8), 32 * (32 + 8)]  # N and M rows of K + 8 elements


@pytest.mark.parametrize("shape,dt,prec", [
    ((16, 16, 24), "float16", "ieee"),   # K not a multiple of 16
    ((8, 16, 16), "float16", "ieee"),    # M not a multiple of 16
    ((16, 16, 16), "float32", "ieee"),   # fp32 stays exact by default
])
def test_fallback_is_generic(shape, dt, prec):
    ck = _lower(*shape, dt, prec=prec)
    assert not _intrinsics(ck.kernel.body) and "kd_mma" not in ck.source


def test_fallback_when_one_warp_is_too_many():
    ck = _lower(16, 16, 16, "float16", num_warps=1)
    assert _intrinsics(ck.kernel.body)  # one warp is enough
    x = np.zeros(4, np.float32)
    ck = mma_kernel.compile(x, x, x, M=16, N=16, K=16, DT=kd.float16, TRANS_B=False,
                            ACC=False, PREC="ieee", backend="opencl", num_warps=1)
    assert not _intrinsics(ck.kernel.body)  # OpenCL has no tensor_cores capability


# ------------------------------------------------------------------------ CUDA compilation

@needs_compiler
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", ["f16", "bf16", "f16_trans_acc", "int8"])
def test_ptx_has_mma(case, arch):
    M, N, K, dt, trans, acc, prec, _ = CASES[case]
    ck = _lower(M, N, K, dt, trans, acc, prec)
    ptx = cuda.compile_ptx(ck.source, arch)
    assert "mma.sync.aligned.m16n8k" in ptx
    assert "tf32" not in ptx  # only when asked for
    usage = cuda.resource_usage(ck.source, arch)
    print(f"{case} {arch}: {usage}")
    assert usage["registers"] > 0 and usage["spill_stores"] == 0


@needs_compiler
def test_tf32_only_when_asked():
    ck = _lower(16, 16, 16, "float32", prec="tf32")
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in cuda.compile_ptx(ck.source)
    assert "kd_mma" not in _lower(16, 16, 16, "float32").source


@needs_compiler
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_matmul_64x64x32(dt, arch):
    """A 64x64x32 tile with 4 warps (each takes 8 of the 32 16x8 output tiles)."""
    ck = _lower(64, 64, 32, dt, acc=True, num_warps=4)
    ptx = cuda.compile_ptx(ck.source, arch)
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{dt[:1] if dt == 'float16' else 'bf'}16" \
        in ptx.replace("f16.f16", "f16").replace("bf16.bf16", "bf16")
    usage = cuda.resource_usage(ck.source, arch)
    print(f"matmul 64x64x32 {dt} {arch}: {usage}")
    assert usage["spill_stores"] == 0


@needs_compiler
def test_tutorial_matmul_uses_mma():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "backend" / "test_tutorials.py"
    spec = importlib.util.spec_from_file_location("kdsl_mma_tutorials", path)
    tut = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tut)
    f16, f32 = np.zeros(4, np.float16), np.zeros(4, np.float32)
    ck = tut.matmul_kernel.compile(f16, f16, f32, *(4,) * 9, backend="cuda", num_warps=4,
                                   BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in cuda.compile_ptx(ck.source)


# ------------------------------------------- register accumulators, passes, chunked exchange

def _tutorials():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "backend" / "test_tutorials.py"
    spec = importlib.util.spec_from_file_location("kdsl_mma_tutorials", path)
    tut = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tut)
    return tut


@needs_compiler
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_matmul_128x128x32_8_warps(dt):
    """The 8-warp 128x128x32 tile: 2x4 warps of 4x4 16x8 tiles (64 accumulators per thread in
    registers), exchanged through shared memory in 64-row chunks (float16: the tutorial's
    matmul with its K loop; bfloat16: one dot with an accumulator)."""
    if dt == "float16":
        f16, f32 = np.zeros(4, np.float16), np.zeros(4, np.float32)
        ck = _tutorials().matmul_kernel.compile(f16, f16, f32, *(4,) * 9, backend="cuda",
                                                num_warps=8, BLOCK_M=128, BLOCK_N=128,
                                                BLOCK_K=32, GROUP_M=8)
    else:
        ck = _lower(128, 128, 32, dt, acc=True, num_warps=8)
    assert {s.size for s in ck.kernel.arrays if s.name.startswith("acc_sh")} == {64 * 128}
    kind = "f16.f16" if dt == "float16" else "bf16.bf16"
    for arch in ("sm_80", "sm_90"):
        assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.f32" in cuda.compile_ptx(
            ck.source, arch)
        usage = cuda.resource_usage(ck.source, arch)
        print(f"matmul 128x128x32 {dt} 8 warps {arch}: {usage}")
        assert usage["spill_stores"] <= 128 and usage["spill_loads"] <= 128


@pytest.mark.parametrize("acc", [False, True])
def test_passes_and_chunks_simulated(acc, monkeypatch):
    """The code path of big tiles on a small one: accumulator registers limited to 8 per
    thread (2 passes of 32 rows) and a 16-row exchange buffer (2 chunks per pass)."""
    from kdsl.lowering import dot_mma as lower_dot_mma

    monkeypatch.setattr(lower_dot_mma, "MAX_ACC_REGS", 8)
    monkeypatch.setattr(lower_dot_mma, "EXCHANGE_BYTES", 16 * 32 * 4)
    monkeypatch.setenv("KDSL_CACHE", "0")
    M, N, K = 64, 32, 32
    ck = _lower(M, N, K, "float16", acc=acc, num_warps=4)
    assert {s.size for s in ck.kernel.arrays if s.name.startswith("acc_sh")} == {16 * N}
    # 2 passes x (1 x 2 tiles per warp) x 2 K steps (unrolled)
    mmas = [n for n in _intrinsics(ck.kernel.body) if n.startswith("mma")]
    assert len(mmas) == 2 * 2 * 2
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = RNG.standard_normal((K, N)).astype(np.float32)
    c = RNG.standard_normal((M, N)).astype(np.float32) if acc else np.zeros((M, N), np.float32)
    want = a.astype(np.float16).astype(np.float64) @ b.astype(np.float16).astype(np.float64)
    want += c if acc else 0
    run_kernel(ck.kernel, (1,), [a, b, c])
    assert_close(c, want, dtype=np.float32, k=K)
