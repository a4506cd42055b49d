"""The vector layout and axis analysis (kdsl/lowering/vector.py), and the shared lowering's
kernels re-run in the Loop IR simulator with the "vector_loads" layout and 16-byte-aligned
pointers (the simulator checks every vector access's alignment and bounds)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kdsl.compile_options import CompileOptions
from kdsl.ir import loop
from kdsl.ir.loop import Const
from kdsl.ir.types import PointerType, int32
from kdsl.lowering import vector as lv
from kdsl.target import Target

VEC = frozenset({"vector_loads"})


def _const(e) -> int:
    assert isinstance(e, Const), e
    return e.value


@pytest.mark.parametrize("T,V", [(4, 1), (4, 4), (8, 4), (128, 4)])
def test_element_index_is_the_documented_bijection(T, V):
    n = 2 * V * T
    seen = {}
    for tid in range(T):
        for k in range(n // T):
            e = _const(lv.element_index(Const(tid, int32), Const(k, int32), T, V))
            assert (e // V) % T == tid and (e // (V * T)) * V + e % V == k
            seen[e] = (tid, k)
    assert sorted(seen) == list(range(n))


def test_layout_width_needs_the_capability_and_whole_runs():
    assert lv.layout_width(Target("gpu", threads=128, caps=VEC), 1024) == 4
    assert lv.layout_width(Target("gpu", threads=128, caps=VEC), 256) == 2  # 256 % 512
    assert lv.layout_width(Target("gpu", threads=128, caps=VEC), 192) == 1  # 192 % 256
    assert lv.layout_width(Target("gpu", threads=128, caps=VEC), 2048, 8) == 8
    assert lv.layout_width(Target("gpu", threads=128, caps=VEC), 512, 8) == 4
    assert lv.layout_width(Target("gpu", threads=128), 1024) == 1
    assert lv.layout_width(Target("cpu", threads=1, caps=VEC), 1024) == 1


def _infos(src, arg_types, cx, attrs=()):
    from kdsl.frontend import build_function
    from kdsl.passes import run_tile_passes
    fn, _ = run_tile_passes(build_function(src, arg_types, cx))
    fn.options = CompileOptions(multiple_of_16=tuple(attrs))
    A = lv.AxisAnalysis(fn)
    stores = [op for op in fn.walk() if op.kind == "store"]
    return ([A.get(op.operands[0]) for op in stores],
            [A.get(op.operands[2]) for op in stores if len(op.operands) > 2])


def test_axis_info_of_pointers_and_masks():
    import kdsl as kd
    from kdsl.ir.types import TileType, float32, scalar

    def k(x_ptr, n, BLOCK: kd.constexpr):
        offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
        kd.store(x_ptr + offs, 1.0, mask=offs < n)

    types = {"x_ptr": scalar(PointerType(float32)), "n": scalar(int32)}
    ptrs, masks = _infos(k, types, {"BLOCK": 256})
    (p,), (m,) = ptrs, masks
    assert p.contig == 256 and p.div == 4  # aligned to the element only
    assert m.const == 1  # n unknown: the mask may change anywhere
    ptrs, masks = _infos(k, types, {"BLOCK": 256}, {"x_ptr", "n"})
    (p,), (m,) = ptrs, masks
    assert p.contig == 256 and p.div == 16 and m.const == 16
    _ = TileType


def test_iota_along_another_axis_is_constant_along_the_last():
    import kdsl as kd
    from kdsl.ir.types import float32, scalar

    def k(x_ptr, BLOCK: kd.constexpr):
        r = kd.arange(0, BLOCK)
        kd.store(x_ptr + r[:, None] * BLOCK + r[None, :], 1.0)
        kd.store(x_ptr + r[:, None] + r[None, :] * BLOCK, 2.0)  # transposed: not contiguous

    ptrs, _ = _infos(k, {"x_ptr": scalar(PointerType(float32))}, {"BLOCK": 16}, {"x_ptr"})
    rows, cols = ptrs
    assert rows.contig == 16 and rows.div == 16
    assert cols.contig == 1


# ---------------------------------------------- the lowering's tests with the vector layout

_LT = Path(__file__).resolve().parent / "test_lower_tiles.py"


@pytest.fixture(scope="module")
def lt():
    spec = importlib.util.spec_from_file_location("kdsl_lt_vec", _LT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    lower, count = mod.lower, []

    def vec_target(backend, threads=1, **kw):
        return Target(backend, threads=threads, caps=VEC)

    def vec_lower(fn, target):
        fn.options = CompileOptions(multiple_of_16=tuple(
            p.name for p in fn.runtime_params if isinstance(p.type.elem, PointerType)))
        k = lower(fn, target)
        count.append(sum(isinstance(s, (loop.VecLoad, loop.VecStore))
                         for s in mod.walk(k.body)))
        return k

    mod.Target, mod.lower, mod.vec_count = vec_target, vec_lower, count
    return mod


CASES = [
    ("test_elementwise_masked_ragged", dict(block=16)),
    ("test_float16_bfloat16_casts", {}),
    ("test_broadcast_of_loaded_data_and_trans", {}),
    ("test_reductions", dict(kind="sum", shape=(4, 8), axis=1)),
    ("test_reductions", dict(kind="argmax", shape=(16,), axis=0)),
    ("test_dot", dict(M=16, K=16, N=16)),
    ("test_for_loop_carried_accumulator_and_swap", {}),
    ("test_if_and_while", {}),
    ("test_tile_atomic_add_returns_old_values", {}),
    ("test_through_the_frontend", {}),
    ("test_attention_through_the_frontend", {}),
    ("test_dot_accumulating_in_a_loop", {}),
]


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}{list(k.values())}" for n, k in CASES])
def test_lowering_kernels_with_the_vector_layout(lt, name, kw):
    getattr(lt, name)(**kw)


def test_vector_accesses_were_exercised(lt):
    lt.test_elementwise_masked_ragged(block=16)
    lt.test_through_the_frontend()
    assert sum(lt.vec_count) > 0
