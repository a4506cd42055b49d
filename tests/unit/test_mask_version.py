"""Loop versioning on bounds masks (kdsl/lowering/mask_version.py): on one-thread targets a
loop nest whose bound tests are all true runs an unmasked copy; values never change."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd
from kdsl.ir import loop as L
from kdsl.lowering import mask_version as MV

BACKENDS = [b for b in ("llvm", "opencl") if b in kd.available_backends()]


@kd.jit
def halo(x_ptr, y_ptr, N, BLOCK: kd.constexpr):
    cols = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    left = kd.load(x_ptr + cols - 1, mask=(cols - 1 >= 0) & (cols - 1 < N), other=0.0)
    mid = kd.load(x_ptr + cols, mask=cols < N, other=0.0)
    right = kd.load(x_ptr + cols + 1, mask=cols + 1 < N, other=0.0)
    kd.store(y_ptr + cols, left + mid + right, mask=cols < N)


@kd.jit
def reverse(x_ptr, y_ptr, N, BLOCK: kd.constexpr):
    cols = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    src = N - 1 - cols  # decreasing in the lane: never proven by the maximum
    v = kd.load(x_ptr + src, mask=(src >= 0) & (cols < N), other=-1.0)
    kd.store(y_ptr + cols, v, mask=cols < N)


@kd.jit
def row_sums(x_ptr, y_ptr, N, BLOCK: kd.constexpr):
    row = kd.program_id(0).to(kd.int64)
    acc = kd.zeros((BLOCK,), kd.float32)
    for off in range(0, N, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        acc += kd.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)
    kd.store(y_ptr + row, kd.sum(acc, axis=0))


@kd.jit
def strided_sums(x_ptr, y_ptr, N, BLOCK: kd.constexpr):
    # every other tile of the row: a loop of step 2 * BLOCK
    acc = kd.zeros((BLOCK,), kd.float32)
    for off in range(0, N, 2 * BLOCK):
        cols = off + kd.arange(0, BLOCK)
        acc += kd.load(x_ptr + cols, mask=cols < N, other=0.0)
    kd.store(y_ptr + kd.arange(0, BLOCK), acc)


@kd.jit
def tile_scale(x_ptr, y_ptr, M, N, BM: kd.constexpr, BN: kd.constexpr):
    rm = kd.program_id(0) * BM + kd.arange(0, BM)
    rn = kd.program_id(1) * BN + kd.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None].to(kd.int64) * N + rn[None, :]
    x = kd.load(x_ptr + offs, mask=mask, other=0.0)
    kd.store(y_ptr + offs, kd.where(mask, x * 2.0, 7.0), mask=mask)


def _halo_ref(x):
    p = np.concatenate([[0.0], x.astype(np.float64), [0.0]])
    return p[:-2] + p[1:-1] + p[2:]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 15, 16, 17, 64, 100])
def test_halo_and_reverse_every_length(backend, n):
    x = np.arange(1, n + 1, dtype=np.float32)
    y = np.full(n, np.nan, np.float32)
    grid = (-(-n // 16),)
    halo[grid](x, y, n, BLOCK=16, backend=backend)
    np.testing.assert_array_equal(y, _halo_ref(x).astype(np.float32))
    reverse[grid](x, y, n, BLOCK=16, backend=backend)
    np.testing.assert_array_equal(y, x[::-1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 31, 32, 33, 96, 97])
def test_row_loops_full_and_partial_tiles(backend, n):
    x = np.random.default_rng(n).standard_normal((3, n)).astype(np.float32)
    y = np.zeros(3, np.float32)
    row_sums[(3,)](x, y, n, BLOCK=32, backend=backend)
    np.testing.assert_allclose(y, x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
    v = np.arange(n, dtype=np.float32)
    z = np.zeros(16, np.float32)
    strided_sums[(1,)](v, z, n, BLOCK=16, backend=backend)
    want = np.zeros(16)
    for off in range(0, n, 32):
        part = v[off:off + 16]
        want[:len(part)] += part
    np.testing.assert_array_equal(z, want.astype(np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("m,n", [(8, 16), (7, 16), (8, 13), (20, 40)])
def test_two_dim_masks(backend, m, n):
    x = np.random.default_rng(m * n).standard_normal((m, n)).astype(np.float32)
    y = np.full((m, n), np.nan, np.float32)
    tile_scale[(-(-m // 8), -(-n // 16))](x, y, m, n, BM=8, BN=16, backend=backend)
    np.testing.assert_array_equal(y, x * 2)


def _walk(stmts):
    for s in stmts:
        yield s
        for f in ("body", "then", "orelse"):
            yield from _walk(getattr(s, f, None) or [])


def _compares(stmts):
    out = []
    for s in _walk(stmts):
        for f in s.__dataclass_fields__:
            v = getattr(s, f)
            stack = [v] if isinstance(v, L.Expr) else []
            while stack:
                e = stack.pop()
                if isinstance(e, L.Binary) and e.op in L.COMPARE:
                    out.append(e)
                stack += [getattr(e, g) for g in e.__dataclass_fields__
                          if isinstance(getattr(e, g), L.Expr)]
    return out


def test_fused_row_kernel_has_an_unmasked_copy():
    """The library's whole-row rms_norm on llvm: each element nest sits under a guard on N, and
    the guarded copy has no bound test left."""
    from kdsl.kernels import norms, reference
    n = 256
    x = np.random.default_rng(0).standard_normal((2, n)).astype(np.float32)
    w = np.ones(n, np.float32)
    y = np.zeros_like(x)
    ck = norms.rms_norm_row_kernel[(2,)](x, w, y, n, n, 1e-6, BLOCK=n, backend="llvm")
    np.testing.assert_allclose(y, reference.rms_norm(x, w), rtol=1e-5, atol=1e-6)
    guards = [s for s in ck.kernel.body if isinstance(s, L.If)]
    assert guards, L.print_kernel(ck.kernel)
    for g in guards:
        assert [c.op for c in _compares([g])][:1] == ["lt"]  # the guard itself: 255 < N
        assert "N" in L.format_expr(g.cond)
        assert not _compares(g.then), L.format_stmts(g.then)
        assert _compares(g.orelse)


def test_no_version_without_masked_access_or_proof():
    i, j = L.Var("i", L.int32), L.Var("j", L.int32)
    n = L.Var("N", L.int32)
    t = L.Var("t", L.int1)
    arr = L.Array("a", L.float32, 16)

    def nest(cond):
        return L.For(i, L.Const(0, L.int32), L.Const(16, L.int32), L.Const(1, L.int32),
                     [L.Assign(t, cond), L.ArrayStore(arr, i, L.Select(t, L.Const(1.0, L.float32),
                                                                        L.Const(0.0, L.float32)))])

    # a register-only nest is left alone (nothing is masked)
    s = MV._version(nest(L.Binary("lt", i, n)))
    assert isinstance(s, L.For)
    # a loop whose bound is written inside the nest cannot be proven
    p = L.Var("p", L.PointerType(L.float32))
    inner = L.For(j, L.Const(0, L.int32), i, L.Const(1, L.int32),
                  [L.Store(L.PtrAdd(p, j), L.Const(0.0, L.float32), L.Binary("lt", j, n))])
    outer = L.For(i, L.Const(0, L.int32), L.Const(4, L.int32), L.Const(1, L.int32), [inner])
    s = MV._version(outer)
    assert isinstance(s, L.For) and isinstance(s.body[0], L.If)  # only the inner nest
    # a decreasing index is not proven
    st = L.Store(L.PtrAdd(p, i), L.Const(0.0, L.float32),
                 L.Binary("lt", L.Binary("sub", n, i), n))
    s = MV._version(L.For(i, L.Const(0, L.int32), L.Const(8, L.int32), L.Const(1, L.int32),
                          [st]))
    assert isinstance(s, L.For)


def _library_matmul(n: int, bm: int, bn: int, bk: int):
    """The library's matmul kernel on n x n float32 on llvm, checked; returns the compiled
    kernel (its Loop IR and assembly)."""
    from kdsl.kernels.matmul import matmul_kernel
    rng = np.random.default_rng(n)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    out = np.empty((n, n), np.float32)
    grid = ((n // bm) * (n // bn), 1)
    ck = matmul_kernel[grid](a, b, a, out, n, n, n, 0, 0, n, n, GROUP_M=8, HAS_BIAS=False,
                             ACT=0, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=1,
                             backend="llvm")
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    return ck


def test_unmasked_tile_loads_are_vector_loops():
    """The unmasked copy of a tile load is marked as a vector loop: fully unrolled first, LLVM's
    SLP vectoriser had built gathers from its loads (int32 indices that may wrap)."""
    import platform
    ck = _library_matmul(256, 64, 128, 32)
    fast = [s.then for s in _walk(ck.kernel.body)
            if isinstance(s, L.If) and s.then and isinstance(s.then[0], L.Comment)
            and s.then[0].text == MV.UNMASKED]
    inner = [s for f in fast for s in _walk(f) if isinstance(s, L.For)
             and not any(isinstance(x, L.For) for x in _walk(s.body))]
    assert inner and all(L.loop_hint(s) == L.VECTOR_HINT for s in inner)
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert "vgather" not in ck.ir["asm"]


def test_equal_numel_tiles_of_other_shapes_load_in_nests_of_their_own():
    """A [64, 32] and B [32, 64] tile loads (the same numel) are two nests on a one-thread
    target, each with an unmasked copy, A's with a prefetch of the next step (B, which only
    the dot reads, is copied from memory into the dot's panels, a loop the prefetch rewrite
    leaves alone: dot_cpu.py `_pack_from_memory`): fused into one element loop, B's
    coordinates came from A's loops by shifts and masks, and its copy stayed masked."""
    ck = _library_matmul(128, 64, 64, 32)
    k_loop = next(s for s in ck.kernel.body if isinstance(s, L.For)
                  and any(isinstance(x, L.Prefetch) for x in _walk(s.body)))
    loads = [s for s in k_loop.body if isinstance(s, L.If)]  # one versioned nest per tile
    assert len(loads) == 2
    for nest in loads:
        assert isinstance(nest.then[0], L.Comment) and nest.then[0].text == MV.UNMASKED
        stores = [x for x in _walk(nest.then) if isinstance(x, L.ArrayStore)]
        assert len(stores) == 1  # one tile's copy, not both
    hints = [x for x in _walk(k_loop.body) if isinstance(x, L.Prefetch)]
    bases = {name for x in hints for name in _var_names(x.ptr) if name.endswith("_ptr0")}
    assert bases == {"a_ptr0"}, bases
    assert any(a.name.startswith("bpack") for a in ck.kernel.arrays)


def _var_names(e):
    if isinstance(e, L.Var):
        return {e.name}
    return {n for f in getattr(e, "__dataclass_fields__", ()) for x in [getattr(e, f)]
            if isinstance(x, L.Expr) for n in _var_names(x)}


@kd.jit
def block_sums(x_ptr, out_ptr, n, BLOCK: kd.constexpr):
    total = 0.0
    for i in range(0, n, BLOCK):
        offs = i + kd.arange(0, BLOCK)
        total += kd.sum(kd.load(x_ptr + offs, mask=offs < n, other=0.0))
    kd.store(out_ptr + kd.program_id(0), total)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1000, 1024, 1088, 127])
def test_loop_variable_shared_by_loops_of_other_bounds(backend, n):
    """The lowering reuses a loop variable (`j`) for a 64-wide partial loop and the 1-wide last
    step of the partials' fold: the guard must take the widest bounds (it once took the last
    loop's, proved `i + 64 < n` instead of `i + 127 < n` and read past a ragged row)."""
    x = np.ones(n, np.float32)
    out = np.zeros(1, np.float32)
    ck = block_sums[(1,)](x, out, n, BLOCK=128, backend=backend)
    assert out[0] == n
    if backend == "llvm":
        guards = [L.format_expr(s.cond) for s in _walk(ck.kernel.body) if isinstance(s, L.If)
                  and s.then and isinstance(s.then[0], L.Comment)
                  and s.then[0].text == MV.UNMASKED]
        assert guards and all("+ 64:int32) < n" not in g for g in guards), guards
