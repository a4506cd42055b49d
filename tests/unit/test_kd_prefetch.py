"""`kd.prefetch(ptrs, mask)` (kdsl/lowering/prefetch.py `lower_prefetch`): no effect on any
result on any backend, one hint per cache line on targets with the capability, nothing on
the others, clear errors for bad operands."""

from __future__ import annotations

import platform

import numpy as np
import pytest

import kdsl as kd
from kdsl.errors import CompilationError
from kdsl.ir import loop as L
from kdsl.ir.types import PointerType
from kdsl.lowering.prefetch import LINE


@kd.jit
def next_row_sum(x_ptr, y_ptr, n_rows, n_cols, BLOCK: kd.constexpr):
    # a row sum that asks for the next row (past the last one too: a hint never faults)
    row = kd.program_id(0)
    acc = kd.zeros((BLOCK,), kd.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        kd.prefetch(x_ptr + (row + 1) * n_cols + cols)
        kd.prefetch(x_ptr + (row + 1) * n_cols + cols, mask=cols < n_cols)
        acc += kd.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    kd.prefetch(y_ptr + row + 1)  # a scalar pointer
    kd.store(y_ptr + row, kd.sum(acc, axis=0))


@kd.jit
def tile_2d(x_ptr, y_ptr, R: kd.constexpr, C: kd.constexpr):
    r = kd.arange(0, R)[:, None]
    c = kd.arange(0, C)[None, :]
    kd.prefetch(x_ptr + R * C + r * C + c)
    kd.store(y_ptr + r * C + c, kd.load(x_ptr + r * C + c) * 2)


def _prefetches(stmts):
    for s in stmts:
        if isinstance(s, L.Prefetch):
            yield s
        for f in ("body", "then", "orelse"):
            yield from _prefetches(getattr(s, f, None) or [])


def _hint_loops(stmts):
    for s in stmts:
        if isinstance(s, L.For) and any(isinstance(x, L.Prefetch) for x in s.body):
            yield s
        for f in ("body", "then", "orelse"):
            yield from _hint_loops(getattr(s, f, None) or [])


def test_prefetch_changes_no_result(backend, rng):
    x = rng.standard_normal((5, 300)).astype(np.float32)
    y = np.zeros(5, np.float32)
    next_row_sum[(5,)](x, y, 5, 300, BLOCK=64, backend=backend)
    np.testing.assert_allclose(y, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-4)
    t = rng.standard_normal((4, 32)).astype(np.float16)
    out = np.zeros_like(t)
    tile_2d[(1,)](t, out, R=4, C=32, backend=backend)
    np.testing.assert_array_equal(out, t * 2)


def test_one_hint_per_line_where_the_target_prefetches():
    x = np.zeros((3, 256), np.float32)
    ck = next_row_sum.compile(x, x, 3, 256, BLOCK=256, backend="llvm")
    # (the tile hints, in both versions of the mask-versioned loop body, beside the loop
    # rewrite's own hints for the next step's load: every one steps by a line)
    loops = list(_hint_loops(ck.kernel.body))
    assert len(loops) >= 2
    assert all(lp.step.value == LINE // 4 and lp.hi.value == 256 for lp in loops)
    assert any(isinstance(s, L.Prefetch) for s in ck.kernel.body)  # the scalar pointer's
    if platform.machine() in ("x86_64", "AMD64"):
        assert "prefetcht1" in ck.ir["asm"]
    # 16-bit elements: a line holds 32; a 2-D tile gets one hint per line of each row
    h = np.zeros((8, 64), np.float16)
    ck = tile_2d.compile(h, h, R=4, C=64, backend="llvm")
    (inner,) = [lp for lp in _hint_loops(ck.kernel.body)]
    assert inner.step.value == LINE // 2 and inner.hi.value == 64


def test_opencl_one_thread_hints_and_work_group_drops():
    """A CPU OpenCL device's one-thread lowering emits clang's `__builtin_prefetch` for
    kd.prefetch (OpenCL's `prefetch()` compiles to nothing on PoCL) but not the loop rewrite's
    hints; the work-group lowering drops it."""
    if "opencl" not in kd.available_backends():
        pytest.skip("opencl backend unavailable")
    from kdsl.backends import get_backend

    x = np.zeros((3, 256), np.float32)
    if get_backend("opencl").lowering() == "one-thread":
        ck = next_row_sum.compile(x, x, 3, 256, BLOCK=256, backend="opencl")
        hints = list(_prefetches(ck.kernel.body))
        # the two tile hints (in both versions of the mask-versioned loop) and the scalar
        # one, each at a temporary; the loop rewrite's hints would name `ptr + next step`
        assert len(hints) >= 3 and all(isinstance(h.ptr, L.Var) for h in hints)
        assert ck.ir["opencl"].count("__builtin_prefetch(") == len(hints)
    ck = next_row_sum.compile(x, x, 3, 256, BLOCK=256, backend="opencl_wg")
    assert not list(_prefetches(ck.kernel.body))
    assert "prefetch" not in ck.ir["opencl_wg"]


@kd.jit
def bad_scalar(x_ptr, n):
    kd.prefetch(n)


@kd.jit
def bad_mask(x_ptr, n, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    kd.prefetch(x_ptr + offs, mask=offs)


def test_bad_operands_name_the_line():
    x = np.zeros(16, np.float32)
    with pytest.raises(CompilationError, match="prefetch needs a pointer") as e:
        bad_scalar[(1,)](x, 3, backend="llvm")
    assert "kd.prefetch(n)" in str(e.value)
    with pytest.raises(CompilationError, match="mask must be int1"):
        bad_mask[(1,)](x, 3, BLOCK=16, backend="llvm")


def test_example_runs(capsys):
    """examples/cpu_prefetch_rows.py: equal results with and without the hints everywhere."""
    import runpy
    from pathlib import Path

    path = Path(__file__).parents[2] / "examples" / "cpu_prefetch_rows.py"
    runpy.run_path(str(path), run_name="__main__")
    out = capsys.readouterr().out
    assert "results equal with and without kd.prefetch: False" not in out
    assert out.count("results equal with and without kd.prefetch: True") == len(
        kd.available_backends())


@kd.jit
def strip_ahead(w_ptr, y_ptr, N, K, BLOCK_R: kd.constexpr, BLOCK_N: kd.constexpr):
    # a pointer tile of more ops than the lowering recomputes for values used twice
    rn = kd.program_id(0) * BLOCK_N + kd.arange(0, BLOCK_N)
    acc = kd.zeros((BLOCK_N,), kd.float32)
    for k0 in range(0, K, BLOCK_R):
        rows = k0 + kd.arange(0, BLOCK_R)
        kd.prefetch(w_ptr + (rows + BLOCK_R)[:, None] * N + rn[None, :])
        acc += kd.sum(kd.load(w_ptr + rows[:, None] * N + rn[None, :]), axis=0)
    kd.store(y_ptr + rn, acc)


def test_hint_addresses_are_computed_in_the_hint_loop():
    """A pointer tile only a prefetch reads is recomputed in the hint's own loop, never
    stored to an array of pointers for it (which cost more than the hints saved)."""
    w = np.ones((64, 256), np.float32)
    y = np.zeros(256, np.float32)
    ck = strip_ahead[(2,)](w, y, 256, 64, BLOCK_R=16, BLOCK_N=128, backend="llvm")
    np.testing.assert_array_equal(y, np.full(256, 64, np.float32))
    assert not [a for a in ck.kernel.arrays if isinstance(a.dtype, PointerType)], ck.kernel.arrays
    assert list(_prefetches(ck.kernel.body))
