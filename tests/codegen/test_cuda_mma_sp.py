"""`kd.sparse_dot` and its sparse tensor-core lowering (kdsl/lowering/dot_sparse.py) with no
GPU.

- the fragment and metadata layouts of mma.sp m16n8k32 are checked against the PTX ISA's
  statement of them ("Matrix fragments for sparse mma.m16n8k32 with .f16 and .bf16 types",
  "Sparse matrix storage"), element by element and bit by bit;
- `mma_sp_reference` (the NumPy model the Loop IR simulator runs) against a float64 matmul;
- kernels are lowered for the CUDA target and their Loop IR, the intrinsic included, runs in
  the simulator; so does the library's mma.sp kernel of `semi_structured_matmul`;
- the other cases take the generic strategy, which runs on interp, llvm and opencl;
- the CUDA source compiles for sm_80 and sm_90 with `mma.sp` in its PTX.
"""

from __future__ import annotations

import kdsl.kernels as K
import numpy as np
import pytest
from kdsl.backends import cuda
from kdsl.kernels import configs
from kdsl.kernels import reference as R

import kdsl as kd
from kdsl.ir import tile
from kdsl.ir.loop import Intrinsic, Stmt
from kdsl.ir.loop_interp import round_bf16, run_kernel
from kdsl.ir.parser import parse_function
from kdsl.lowering.dot_mma import C_LAYOUT
from kdsl.lowering.dot_sparse import SPARSE_MMA_KINDS, meta_fields, mma_sp_reference
from kdsl.testing import assert_close

RNG = np.random.default_rng(11)
needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")


# ------------------------------------------------------------------ layouts vs the PTX ISA

def _isa_a(lane: int, i: int) -> tuple[int, int]:
    """(row, kept-value column) of A element a_i: row groupID for i in {0,1,4,5}, else +8;
    the values of the 4-wide chunk at column threadID_in_group * 4 (+16 for i >= 4), the
    chunk's two kept values being kept columns 2 * chunk and 2 * chunk + 1."""
    g, t = lane >> 2, lane % 4
    row = g if i in (0, 1, 4, 5) else g + 8
    chunk = (t * 4 + (16 if i >= 4 else 0)) // 4
    return row, 2 * chunk + (i & 1)


def _isa_b(lane: int, i: int) -> tuple[int, int]:
    """(row, col) of B element b_i: register i // 2 holds rows 8 * (i // 2) + 2t, + 1."""
    g, t = lane >> 2, lane % 4
    return 8 * (i >> 1) + 2 * t + (i & 1), g


def _isa_meta(lane: int) -> dict[int, tuple[int, int]]:
    """Bit offset -> (row, kept-value column) of each 2-bit index in the lane's metadata:
    selector 0 makes lanes T0 and T1 of each quad the pair; lane 2i + p holds 16-bit halves for
    rows groupID (bits 0-15) and groupID + 8 (bits 16-31) over the 16 columns 16p ..; each
    4-wide chunk takes 4 bits from the low end, its first kept index in the low 2."""
    g, t = lane >> 2, lane % 4
    if t > 1:
        return {}
    out = {}
    for half, row in ((0, g), (1, g + 8)):
        for chunk in range(4):
            for s in (0, 1):
                out[16 * half + 4 * chunk + 2 * s] = (row, 2 * (4 * t + chunk) + s)
    return out


@pytest.mark.parametrize("dt", sorted(SPARSE_MMA_KINDS))
def test_layouts_match_the_isa(dt):
    k = SPARSE_MMA_KINDS[dt]
    seen = {"a": np.zeros((16, 16), int), "b": np.zeros((32, 8), int),
            "e": np.zeros((16, 16), int), "c": np.zeros((16, 8), int)}
    for lane in range(32):
        assert k.a.coords(lane) == [_isa_a(lane, i) for i in range(8)]
        assert k.b.coords(lane) == [_isa_b(lane, i) for i in range(8)]
        fields = {bit: (r, c) for bit, r, c in meta_fields(lane)}
        assert fields == _isa_meta(lane)
        for name, coords in (("a", k.a.coords(lane)), ("b", k.b.coords(lane)),
                             ("e", list(fields.values())), ("c", C_LAYOUT.coords(lane))):
            for r, c in coords:
                seen[name][r, c] += 1
    for name, count in seen.items():
        assert (count == 1).all(), name  # the warp covers each element (and index) once


def _pruned(m: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kept values [m, k/2], their indices, the dense [m, k]) of a random 2:4 matrix."""
    vals_t, meta_t = R.sparsify_2_4(RNG.standard_normal((k, m)))
    vals, meta = vals_t.T.copy(), meta_t.T.copy()
    dense = np.zeros((m, k))
    dense[np.arange(m)[:, None], 4 * (np.arange(k // 2) // 2)[None, :] + meta] = vals
    return vals, meta, dense


def _lanes(kind, vals, meta, b, c) -> list[list]:
    out = []
    for lane in range(32):
        word = 0
        for bit, r, col in meta_fields(lane):
            word |= int(meta[r, col]) << bit
        out.append([vals[r, col] for r, col in kind.a.coords(lane)]
                   + [b[r, col] for r, col in kind.b.coords(lane)]
                   + [c[r, col] for r, col in C_LAYOUT.coords(lane)]
                   + [np.int32(np.uint32(word).view(np.int32))])
    return out


@pytest.mark.parametrize("dt", sorted(SPARSE_MMA_KINDS))
def test_mma_sp_reference(dt):
    kind = SPARSE_MMA_KINDS[dt]
    vals, meta, dense = _pruned(16, 32)
    b = RNG.standard_normal((32, 8))
    c = RNG.standard_normal((16, 8)).astype(np.float32)
    vals, b = kind.convert(vals), kind.convert(b)
    dense = np.where(dense != 0, kind.convert(dense), 0.0)
    d = mma_sp_reference(kind, _lanes(kind, vals, meta, b, c))
    got = np.zeros((16, 8))
    for lane in range(32):
        for (r, col), v in zip(C_LAYOUT.coords(lane), d[lane]):
            got[r, col] = v
    np.testing.assert_allclose(got, dense @ b + c, rtol=1e-6, atol=1e-6)
    bad = meta.copy()
    bad[3, 0], bad[3, 1] = 2, 1  # a decreasing pair: undefined for the instruction
    with pytest.raises(AssertionError, match="not increasing"):
        mma_sp_reference(kind, _lanes(kind, vals, bad, b, c))


# ------------------------------------------------------- lowered kernels in the simulator

@kd.jit
def sparse_dot_kernel(a_ptr, e_ptr, b_ptr, c_ptr, M: kd.constexpr, N: kd.constexpr,
                      K: kd.constexpr, DT: kd.constexpr, ACC: kd.constexpr):
    rm = kd.arange(0, M)
    rn = kd.arange(0, N)
    rh = kd.arange(0, K // 2)
    rk = kd.arange(0, K)
    a = kd.load(a_ptr + rm[:, None] * (K // 2) + rh[None, :]).to(DT)
    e = kd.load(e_ptr + rm[:, None] * (K // 2) + rh[None, :])
    b = kd.load(b_ptr + rk[:, None] * N + rn[None, :]).to(DT)
    c_ptrs = c_ptr + rm[:, None] * N + rn[None, :]
    if ACC:
        out = kd.sparse_dot(a, e, b, kd.load(c_ptrs))
    else:
        out = kd.sparse_dot(a, e, b)
    kd.store(c_ptrs, out)


def _intrinsics(stmts: list[Stmt]) -> list[str]:
    out = []
    for s in stmts:
        if isinstance(s, Intrinsic):
            out.append(s.name)
        for f in ("body", "then", "orelse", "cond_body"):
            out += _intrinsics(getattr(s, f, []) or [])
    return out


def _compile(M, N, K, dt, acc=False, num_warps=2, backend="cuda"):
    x = np.zeros(4, np.float32)
    return sparse_dot_kernel.compile(x, np.zeros(4, np.int8), x, x, M=M, N=N, K=K,
                                     DT=getattr(kd, dt), ACC=acc, backend=backend,
                                     num_warps=num_warps)


def _round(x: np.ndarray, dt: str) -> np.ndarray:
    if dt == "float16":
        return x.astype(np.float16).astype(np.float64)
    if dt == "bfloat16":
        return np.vectorize(round_bf16)(x.astype(np.float32)).astype(np.float64)
    return x.astype(np.float64)


def _inputs(M, N, K, dt, acc):
    vals, meta, _ = _pruned(M, K)
    a = vals.astype(np.float32)
    b = RNG.standard_normal((K, N)).astype(np.float32)
    c = RNG.standard_normal((M, N)).astype(np.float32) if acc else np.zeros((M, N), np.float32)
    dense = np.zeros((M, K))
    dense[np.arange(M)[:, None], 4 * (np.arange(K // 2) // 2)[None, :] + meta] = _round(a, dt)
    return a, meta, b, c, dense @ _round(b, dt) + c


CASES = {  # name: (M, N, K, dtype, acc, num_warps)
    "f16": (16, 8, 32, "float16", False, 1),
    "f16_acc_2warps": (32, 16, 64, "float16", True, 2),
    "bf16_acc": (16, 16, 64, "bfloat16", True, 2),
    "f16_idle_warps": (16, 8, 32, "float16", True, 4),  # 1 tile, 4 warps: 3 idle
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_simulated(case):
    M, N, K, dt, acc, warps = CASES[case]
    ck = _compile(M, N, K, dt, acc, warps)
    assert set(_intrinsics(ck.kernel.body)) == {SPARSE_MMA_KINDS[dt].name}
    a, meta, b, c, want = _inputs(M, N, K, dt, acc)
    run_kernel(ck.kernel, (1,), [a, meta, b, c])
    assert_close(c, want, dtype=np.float32, k=K // 2)


@pytest.mark.parametrize("shape,dt", [
    ((16, 8, 48), "float16"),    # K not a multiple of 32
    ((8, 8, 32), "float16"),     # M not a multiple of 16
    ((16, 8, 32), "float32"),    # no float32 sparse tensor-core path (tf32 is 1:2 sparse)
])
def test_fallback_is_generic(shape, dt):
    ck = _compile(*shape, dt, acc=True)
    assert not _intrinsics(ck.kernel.body) and "kd_mma_sp" not in ck.source
    a, meta, b, c, want = _inputs(*shape, dt, True)
    run_kernel(ck.kernel, (1,), [a, meta, b, c])
    assert_close(c, want, dtype=np.float32, k=shape[2] // 2)


def test_generic_on_every_backend(backend):
    M, N, Kd = 16, 12, 24
    a, meta, b, c, want = _inputs(M, N, Kd, "float16", True)
    sparse_dot_kernel[(1,)](a, meta, b, c, M=M, N=N, K=Kd, DT=kd.float16, ACC=True,
                            backend=backend)
    assert_close(c, want, dtype=np.float32, k=Kd // 2)


def test_pruned_positions_of_b_are_not_read(backend):
    # every row of A keeps positions 0 and 1 of each group: rows 4g + 2, 4g + 3 of b are
    # infinite, which a dense product with A's zeros would turn into NaN; sparse_dot skips them
    M, N, Kd = 16, 8, 32
    a = RNG.standard_normal((M, Kd // 2)).astype(np.float32)
    meta = np.tile(np.array([0, 1], np.int8), (M, Kd // 4))
    b = RNG.standard_normal((Kd, N)).astype(np.float32)
    want = a.astype(np.float64) @ b[np.arange(Kd) % 4 < 2].astype(np.float64)
    b[np.arange(Kd) % 4 >= 2] = np.inf
    c = np.zeros((M, N), np.float32)
    sparse_dot_kernel[(1,)](a, meta, b, c, M=M, N=N, K=Kd, DT=kd.float32, ACC=False,
                            backend=backend)
    assert np.isfinite(c).all()
    assert_close(c, want, dtype=np.float32, k=Kd // 2)


def test_tile_ir_round_trips():
    ck = _compile(16, 8, 32, "float16", acc=True)
    for stage in ("tile", "tile.dce"):
        fn = parse_function(ck.ir[stage])
        tile.verify(fn)
        assert tile.print_function(fn) == ck.ir[stage]
    assert "sparse_dot(" in ck.ir["tile.dce"]


@kd.jit
def bad_sparse_dot(p, q, out, CASE: kd.constexpr):
    r = kd.arange(0, 16)
    a = kd.load(p + r[:, None] * 16 + r[None, :])
    e = kd.load(q + r[:, None] * 16 + r[None, :])
    b = kd.load(p + kd.arange(0, 32)[:, None] * 16 + r[None, :])
    if CASE == 0:
        c = kd.sparse_dot(a, e, a)  # b with 16 rows
    elif CASE == 1:
        c = kd.sparse_dot(a, kd.load(q + r[:, None] * 8 + kd.arange(0, 8)[None, :]), b)
    elif CASE == 2:
        c = kd.sparse_dot(a, a, b)
    else:
        c = kd.sparse_dot(a.to(kd.int8), e, b)
    kd.store(out + r[:, None] * 16 + r[None, :], c)


@pytest.mark.parametrize("case, message", [
    (0, "b has 16 rows but a holds the kept half of 32"),
    (1, r"sparse_dot: a_meta has shape \[16, 8\], a has \[16, 16\]"),
    (2, "a_meta must hold integers"),
    (3, "must be float16, bfloat16 or float32"),
])
def test_errors_name_the_line(case, message):
    x = np.zeros(512, np.float32)
    with pytest.raises(kd.CompilationError, match=message) as info:
        bad_sparse_dot.compile(x, np.zeros(256, np.int8), x, CASE=case, backend="llvm")
    assert "c = kd.sparse_dot" in str(info.value) and "test_cuda_mma_sp.py" in str(info.value)


# -------------------------------------------- the library's mma.sp kernel in the simulator

class _Recorder:
    def __init__(self, jit, grid, seen):
        self.jit, self.grid, self.seen = jit, grid, seen

    def __call__(self, *args, backend=None, num_warps=None, **constexprs):
        ck = self.jit.compile(*args, backend=backend, num_warps=num_warps, **constexprs)
        self.seen.append((self.jit.__name__, self.grid, args, ck))
        return ck


@pytest.mark.parametrize("bias, activation", [(False, None), (True, "relu")])
def test_library_kernel_simulated(monkeypatch, bias, activation):
    """semi_structured_matmul's CUDA float16 kernel, lowered with mma.sp and run by the
    simulator on ragged M and N and a K with a partial last step."""
    seen: list = []
    monkeypatch.setattr(kd.JITFunction, "__getitem__",
                        lambda self, grid: _Recorder(self, grid, seen))
    monkeypatch.setitem(configs.SEMI_STRUCTURED_MMA, "default", [
        (configs.INF, {"BLOCK_M": 8, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 2,
                       "num_warps": 1})])
    M, Kd, N = 11, 48, 19
    x = R.cast(RNG.standard_normal((M, Kd)), "float16")
    values, meta = R.sparsify_2_4(RNG.standard_normal((Kd, N)))
    values = R.cast(values, "float16")
    b = R.cast(RNG.standard_normal(N), "float32") if bias else None
    K.semi_structured_matmul(x, values, meta, bias=b, activation=activation, backend="cuda")
    [(name, grid, args, ck)] = seen
    assert name == "semi_structured_mma_kernel"
    assert set(_intrinsics(ck.kernel.body)) == {"mma_sp_m16n8k32_f32_f16"}
    out = np.zeros((M, N), np.float16)
    run_kernel(ck.kernel, grid, [x, values, meta, b if bias else values, out, *args[5:]])
    want = R.semi_structured_matmul(x, values, meta, b, activation)
    assert_close(out, want, dtype=np.float16, k=Kd // 2)


# ------------------------------------------------------------------------ CUDA compilation

@needs_compiler
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dt", sorted(SPARSE_MMA_KINDS))
def test_ptx_has_mma_sp(dt, arch):
    ck = _compile(64, 64, 64, dt, acc=True, num_warps=4)
    ptx = cuda.compile_ptx(ck.source, arch)
    kind = "f16" if dt == "float16" else "bf16"
    assert f"mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.{kind}.{kind}.f32" \
        in ptx
    usage = cuda.resource_usage(ck.source, arch)
    print(f"sparse_dot 64x64x64 {dt} {arch}: {usage}")
    assert usage["registers"] > 0 and usage["spill_stores"] == 0
