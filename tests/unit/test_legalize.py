"""`legalize` (kdsl/lowering/legalize.py): a target that lacks an op gets its decomposition,
which the Loop IR simulator runs to the same values (within rounding) as the op itself; the
decomposed kernel has only the target's ops, reads each operand once, and keeps a masked
store's reads under its mask; an op with no decomposition is a CompilationError."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kdsl as kd
from kdsl.errors import CompilationError
from kdsl.frontend import build_function
from kdsl.ir import loop
from kdsl.ir.loop_interp import run_kernel
from kdsl.ir.loop_verify import has_op, verify
from kdsl.ir.types import PointerType, float32, float64, int1, int32, scalar
from kdsl.lowering import lower
from kdsl.lowering.legalize import ALL_OPS, DECOMPOSITIONS, legalize
from kdsl.passes import run_tile_passes
from kdsl.target import Target

LACKING = ALL_OPS - {"tanh", "erf", "sigmoid"}  # as the LLVM backend (float64 aside)


def P(dt):
    return scalar(PointerType(dt))


@kd.jit
def unary(x_ptr, o_ptr, n, OP: kd.constexpr, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    x = kd.load(x_ptr + offs, mask=m)
    if OP == "tanh":
        y = kd.tanh(x)
    elif OP == "erf":
        y = kd.erf(x)
    else:
        y = kd.sigmoid(x)
    kd.store(o_ptr + offs, y, mask=m)


def _fn(op: str, dt, block: int = 64):
    fn, _ = run_tile_passes(build_function(unary.fn, {"x_ptr": P(dt), "o_ptr": P(dt),
                                                      "n": scalar(int32)},
                                           {"OP": op, "BLOCK": block}))
    return fn


def _walk(stmts):
    for s in stmts:
        yield s
        for attr in ("body", "then", "orelse", "cond_body"):
            yield from _walk(getattr(s, attr, None) or [])


def _exprs(e):
    yield e
    for v in vars(e).values():
        if isinstance(v, loop.Expr):
            yield from _exprs(v)


def _ops(kernel):
    out = set()
    for s in _walk(kernel.body):
        for v in vars(s).values():
            for x in ([v] if isinstance(v, loop.Expr) else v if isinstance(v, list) else []):
                if isinstance(x, loop.Expr):
                    out |= {e.op for e in _exprs(x) if isinstance(e, (loop.Unary, loop.Binary))}
    return out


REFS = {"tanh": np.tanh, "erf": np.vectorize(math.erf, otypes=[np.float64]),
        "sigmoid": lambda v: np.exp(np.minimum(v, 0)) / (1 + np.exp(-np.abs(v)))}


def _inputs(dt):
    rng = np.random.default_rng(7)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, 0.625, -0.625, 0.6249, 1.0, 2.0, 3.0,
               3.999, 4.0, -4.5, 20.0, -90.0, 89.0]
    return np.concatenate([special, rng.uniform(-6, 6, 110)]).astype(dt.np)


def _ulps(got, want, dt):
    g, w = got.astype(dt.np), want.astype(dt.np)
    it = np.int64 if dt == float64 else np.int32
    gi, wi = (v.view(it).astype(np.int64) for v in (g, w))
    gi, wi = (np.where(v < 0, -(1 << (dt.bits - 1)) - v, v) for v in (gi, wi))
    d = np.abs(gi - wi)
    return np.where(np.isnan(g) & np.isnan(w), 0, np.where(np.isnan(g) != np.isnan(w), 1 << 40, d))


@pytest.mark.parametrize("op,dt", [("tanh", float32), ("erf", float32), ("sigmoid", float32),
                                   ("sigmoid", float64)])
@pytest.mark.parametrize("threads", [1, 4])
def test_decompositions_compute_the_op(op, dt, threads):
    target = Target("t", threads=threads, ops=LACKING)
    kernel = lower(_fn(op, dt), target)
    assert op not in _ops(kernel) and {"exp", "copysign"} & _ops(kernel)
    xs = _inputs(dt)
    out = np.full_like(xs, 7)
    run_kernel(kernel, (2,), [xs, out, xs.size])
    with np.errstate(all="ignore"):
        want = REFS[op](xs.astype(np.float64))
    d = _ulps(out, want, dt)
    worst = int(np.argmax(d))
    assert d.max() <= 2, f"{op}({xs[worst]!r}) = {out[worst]!r}, want {want[worst]!r}"


def test_every_decomposition_is_listed_by_op_and_type():
    for (op, t), dec in DECOMPOSITIONS.items():
        assert op in ALL_OPS and t in ("float32", "float64") and callable(dec)


def test_a_target_with_every_op_is_left_alone():
    fn = _fn("tanh", float32)
    assert "tanh" in _ops(lower(fn, Target("t", threads=4)))
    assert "tanh" in _ops(lower(fn, Target("t", threads=4, ops=ALL_OPS)))


def test_operands_are_read_once_and_masked_stores_keep_their_guard():
    """An operand read several times by a decomposition is one variable; the statements it
    needs run under a masked store's mask."""
    x, o = loop.Var("x", PointerType(float32)), loop.Var("o", PointerType(float32))
    k, m = loop.Var("k", int32), loop.Var("m", int1)
    load = loop.Load(loop.PtrAdd(x, k), m, loop.Const(0.0, float32))
    body = [loop.Assign(m, loop.Binary("lt", k, loop.Const(3, int32))),
            loop.Store(loop.PtrAdd(o, k), loop.Unary("tanh", load), m)]
    kern = loop.Kernel("g", [loop.KParam("x", x.dtype), loop.KParam("o", o.dtype)],
                       [loop.For(k, loop.Const(0, int32), loop.Const(8, int32),
                                 loop.Const(1, int32), body)], [k, m])
    legalize(kern, Target("t", ops=LACKING))
    verify(kern, LACKING)
    inner = kern.body[0].body
    assert isinstance(inner[1], loop.If) and inner[1].cond is m  # under the store's mask
    loads = [e for s in _walk(kern.body) for v in vars(s).values() if isinstance(v, loop.Expr)
             for e in _exprs(v) if isinstance(e, loop.Load)]
    assert len(loads) == 1  # x is loaded into a variable once, not once per use
    xs = np.array([0.1, -2.0, 30.0], np.float32)
    out = np.full(8, 5.0, np.float32)
    run_kernel(kern, (1,), [xs, out])
    np.testing.assert_allclose(out[:3], np.tanh(xs.astype(np.float64)), rtol=3e-7)
    assert (out[3:] == 5).all()


def test_decompositions_inside_a_while_condition():
    """An op in a `while` condition is decomposed at the end of the condition's statements."""
    i, s = loop.Var("i", int32), loop.Var("s", float32)
    cond = loop.Binary("lt", loop.Unary("sigmoid", s), loop.Const(0.9, float32))
    w = loop.While([], cond, [loop.Assign(s, loop.Binary("add", s, loop.Const(0.5, float32))),
                              loop.Assign(i, loop.Binary("add", i, loop.Const(1, int32)))])
    o = loop.Var("o", PointerType(int32))
    kern = loop.Kernel("w", [loop.KParam("o", o.dtype)],
                       [loop.Assign(s, loop.Const(0.0, float32)),
                        loop.Assign(i, loop.Const(0, int32)), w, loop.Store(o, i)], [i, s])
    legalize(kern, Target("t", ops=LACKING))
    verify(kern, LACKING)
    out = np.zeros(1, np.int32)
    run_kernel(kern, (1,), [out])
    assert out[0] == 5  # sigmoid(2.5) > 0.9 > sigmoid(2.0)


def test_an_op_without_decomposition_is_a_compilation_error():
    f = loop.Var("f", float32)
    kern = loop.Kernel("c", [], [loop.Assign(f, loop.Unary("cbrt", f))], [f])
    with pytest.raises(CompilationError, match="cbrt on float32 is not available on the t "):
        legalize(kern, Target("t", ops=ALL_OPS - {"cbrt"}))


def test_a_decomposition_uses_only_what_is_left():
    """tanh's decomposition needs exp: a target lacking exp (which has no decomposition) is
    refused, naming exp."""
    with pytest.raises(CompilationError, match="exp on float32 is not available"):
        lower(_fn("tanh", float32), Target("t", ops=LACKING - {"exp"}))


def test_has_op_by_type():
    assert has_op(None, "tanh", float32)
    assert has_op(frozenset({"tanh:float64"}), "tanh", float64)
    assert not has_op(frozenset({"tanh:float64"}), "tanh", float32)
