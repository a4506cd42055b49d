"""No barrier inside a conditional (kdsl/lowering/hoist_barriers.py): kernels whose runtime `if`s
and loops hold reductions lower, for several threads per program, to Loop IR where every
`Barrier` is unconditional, and the Loop IR simulator still computes the right values."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd
from kdsl.ir import loop
from kdsl.ir.loop_interp import run_kernel
from kdsl.ir.types import PointerType, TileType, float32, int32
from kdsl.lowering import lower
from kdsl.runtime.compiler import build_tile
from kdsl.target import Target


@kd.jit
def guarded_sums(x_ptr, out_ptr, sf, n, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    t = kd.load(x_ptr + offs, mask=offs < n, other=0.0)
    acc = 0.0
    if sf > 0.0:
        acc = kd.sum(t, axis=0)
        if sf > 1.0:  # nested
            acc += kd.max(t, axis=0)
    else:
        acc = kd.min(t, axis=0)
    v = kd.zeros([BLOCK], kd.float32)
    if sf > 0.0:
        v = kd.load(x_ptr + offs, mask=offs < 1, other=0.0)
    for i in range(0, n, 8):  # a loop with a reduction...
        if sf > 2.0:  # ...and an if with a reduction inside it
            acc += kd.sum(t * i, axis=0)
    kd.store(out_ptr + offs, acc + v, mask=offs < 1)


@kd.jit
def loop_in_if(x_ptr, out_ptr, flag, n, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    acc = 0.0
    if flag > 0:
        for i in range(0, n, BLOCK):
            acc += kd.sum(kd.load(x_ptr + i + offs, mask=i + offs < n, other=0.0), axis=0)
        j = 0
        while j < flag:
            acc += kd.max(kd.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0)
            j += 1
    kd.store(out_ptr, acc)


def _lower(fn, types, consts, threads):
    tile_fn, _ = build_tile(fn, types, consts)
    return lower(tile_fn, Target("test", threads=threads, warp_size=min(threads, 32)))


def _barriers_in_ifs(stmts, inside=False) -> int:
    n = 0
    for s in stmts:
        if isinstance(s, loop.Barrier):
            n += inside
        elif isinstance(s, loop.If):
            n += _barriers_in_ifs(s.then, True) + _barriers_in_ifs(s.orelse, True)
        elif isinstance(s, loop.For):
            n += _barriers_in_ifs(s.body, inside)
        elif isinstance(s, loop.While):
            n += _barriers_in_ifs(s.cond_body, inside) + _barriers_in_ifs(s.body, inside)
    return n


def _count_barriers(stmts) -> int:
    n = 0
    for s in stmts:
        n += isinstance(s, loop.Barrier)
        for field in ("then", "orelse", "body", "cond_body"):
            n += _count_barriers(getattr(s, field, []) or [])
    return n


PTR = TileType((), PointerType(float32))
I32 = TileType((), int32)
F32 = TileType((), float32)


def _ref_guarded(x, sf, n):
    t = np.where(np.arange(16) < n, x[:16], 0).astype(np.float64)
    acc = t.sum() + (t.max() if sf > 1 else 0) if sf > 0 else t.min()
    if sf > 2:
        acc += sum(t.sum() * i for i in range(0, n, 8))
    return acc + (x[0] if sf > 0 else 0)


@pytest.mark.parametrize("threads", [4, 8, 32])
@pytest.mark.parametrize("sf", [-1.0, 0.5, 1.5, 3.0])
def test_reductions_under_ifs(threads, sf):
    k = _lower(guarded_sums, {"x_ptr": PTR, "out_ptr": PTR, "sf": F32, "n": I32},
               {"BLOCK": 16}, threads)
    assert _count_barriers(k.body) > 0 and _barriers_in_ifs(k.body) == 0
    x = np.arange(1, 17, dtype=np.float32)
    out = np.full(4, -7.0, np.float32)
    run_kernel(k, (1,), [x, out, sf, 13])
    assert out[0] == pytest.approx(_ref_guarded(x, sf, 13))
    assert (out[1:] == -7.0).all()


@pytest.mark.parametrize("threads", [4, 8])
@pytest.mark.parametrize("flag", [0, 2])
def test_loops_under_ifs(threads, flag):
    k = _lower(loop_in_if, {"x_ptr": PTR, "out_ptr": PTR, "flag": I32, "n": I32},
               {"BLOCK": 8}, threads)
    assert _barriers_in_ifs(k.body) == 0
    x = np.arange(20, dtype=np.float32)
    out = np.zeros(1, np.float32)
    run_kernel(k, (1,), [x, out, flag, 20])
    expected = (x.sum() + flag * x[:8].max()) if flag > 0 else 0.0
    assert out[0] == pytest.approx(expected)


def test_one_thread_keeps_its_ifs():
    k = _lower(guarded_sums, {"x_ptr": PTR, "out_ptr": PTR, "sf": F32, "n": I32},
               {"BLOCK": 16}, 1)
    assert _count_barriers(k.body) == 0
    assert not any(v.name.startswith("hb_") for v in k.variables)
