"""The Loop IR verifier (kdsl/ir/loop_verify.py): each broken rule is an error naming the node;
what the lowering produces passes (lower() verifies every kernel it returns)."""

from __future__ import annotations

import pytest

from kdsl.ir import loop as L
from kdsl.ir.loop_verify import LoopVerifyError, verify
from kdsl.ir.types import PointerType, float16, float32, int1, int32, int64

F, I = float32, int32
PF = PointerType(float32)
x, n, k, f, m = L.Var("x", PF), L.Var("n", I), L.Var("k", I), L.Var("f", F), L.Var("m", int1)


def kern(body, variables=(k, f, m), arrays=()):
    return L.Kernel("t", [L.KParam("x", PF), L.KParam("n", I)], body, list(variables),
                    list(arrays))


def c(v, t=I):
    return L.Const(v, t)


def test_a_well_formed_kernel_passes():
    buf = L.Array("buf", F, 4)
    body = [L.For(k, c(0), n, c(1), [
        L.Assign(m, L.Binary("lt", k, n)),
        L.Assign(f, L.Load(L.PtrAdd(x, k), m, c(0.0, F))),
        L.ArrayStore(buf, c(0), L.Round(L.Unary("exp", f), "float16")),
        L.If(m, [L.Store(L.PtrAdd(x, k), L.Index(buf, c(0)), m)]),
    ])]
    verify(kern(body, arrays=[buf]))


BAD = {
    "operands of one type": [L.Assign(f, L.Binary("add", f, c(1)))],
    "variable q is not declared": [L.Assign(L.Var("q", F), c(1.0, F))],
    "variable f used as int32, declared float32": [L.Assign(L.Var("f", I), c(1))],
    "array a is not declared": [L.ArrayStore(L.Array("a", F, 2), c(0), f)],
    "array b used as reg float32\\[8\\], declared reg float32\\[2\\]":
        [L.ArrayStore(L.Array("b", F, 8), c(0), f)],
    "variable f of type float32 given a int32": [L.Assign(f, c(1))],
    "an if condition must be int1, got int32": [L.If(n, [])],
    "a store through ptr<float32> of type float32 given a int32":
        [L.Store(L.PtrAdd(x, k), c(1))],
    "a pointer offset must be an integer": [L.Store(L.PtrAdd(x, f), f)],
    "unknown unary op 'exp3'": [L.Assign(f, L.Unary("exp3", f))],
    "exp needs a float operand, got int32": [L.Assign(k, L.Unary("exp", k))],
    "Const of type float16": [L.Assign(f, L.Cast(L.Const(1.0, float16), F))],
    "bitcast of float32 to int64 \\(widths differ\\)": [
        L.Assign(L.Var("big", int64), L.Bitcast(f, int64))],
    "select of float32 and int32": [L.Assign(f, L.Select(m, f, k))],
    "unknown atomic op 'nand'": [L.AtomicRMW("nand", x, f)],
    "loop variable f of type float32": [L.For(f, c(0.0, F), c(1.0, F), c(1.0, F), [])],
}


@pytest.mark.parametrize("msg", sorted(BAD))
def test_each_rule_names_the_node(msg):
    variables = (k, f, m, L.Var("big", int64))
    with pytest.raises(LoopVerifyError, match=f"kernel t: .*{msg}"):
        verify(kern(BAD[msg], variables, [L.Array("b", F, 2)]))


def test_the_message_shows_the_statement():
    with pytest.raises(LoopVerifyError, match=r"in `\(f \+ 1:int32\)` \(statement `f = "):
        verify(kern([L.Assign(f, L.Binary("add", f, c(1)))]))


def test_unknown_nodes():
    class Weird(L.Stmt):
        pass

    with pytest.raises(LoopVerifyError, match="unknown statement node Weird"):
        verify(kern([Weird()]))

    class Odd(L.Expr):
        dtype = F

    with pytest.raises(LoopVerifyError, match="unknown expression node Odd"):
        verify(kern([L.Assign(f, Odd())]))


def test_the_backend_ops():
    """With `ops`, an op the backend does not list is an error (legalize removes such ops)."""
    body = [L.Assign(f, L.Unary("tanh", f))]
    verify(kern(body), frozenset({"tanh"}))
    verify(kern(body), frozenset({"tanh:float32"}))
    with pytest.raises(LoopVerifyError, match="op 'tanh' on float32 is not one the backend has"):
        verify(kern(body), frozenset({"tanh:float64", "exp"}))


def test_the_simulator_verifies_first():
    from kdsl.ir.loop_interp import run_kernel

    with pytest.raises(LoopVerifyError, match="operands of one type"):
        run_kernel(kern([L.Assign(f, L.Binary("add", f, c(1)))]), (1,), [None, 1])
