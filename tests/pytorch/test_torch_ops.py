"""`import kdsl.torch`: every library kernel is a torch operator `torch.ops.kdsl.<name>` that
passes `torch.library.opcheck` (schema, autograd registration, fake tensors, AOT dispatch
with dynamic shapes) and runs under `torch.compile(fullgraph=True)`; the gradients of
softmax, layer_norm, rms_norm and attention (gradient kernels), matmul and mlp (kdsl matmuls)
match torch's autograd on every backend."""

from __future__ import annotations

import inspect

import pytest
from kcases import skip_heavy, slow_on_opencl

torch = pytest.importorskip("torch")
F = torch.nn.functional

import kdsl.kernels as K

import kdsl.torch as kt

ops = torch.ops.kdsl


def _library_kernels():
    return [n for n in K.__all__ if n != "reference" and callable(getattr(K, n))]


def test_every_library_kernel_is_an_operator_with_its_arguments():
    registered = kt.library_ops()
    assert sorted(registered) == sorted(_library_kernels())
    for name in registered:
        op = getattr(ops, name).default
        schema_args = [a.name for a in op._schema.arguments]
        # (a library `out=` is not an operator argument: a functional operator returns its
        # result, which torch's compiler may place where it likes)
        params = [p for p in inspect.signature(getattr(K, name)).parameters if p != "out"]
        assert schema_args == params, name


def _t(*shape, dtype=torch.float32, grad=False, scale=1.0):
    return (torch.randn(shape, dtype=torch.float64) * scale).to(dtype).requires_grad_(grad)


def _cases():
    """(op name, args, kwargs) covering every operator; differentiable inputs require grad."""
    x, w, b = _t(4, 24, grad=True), _t(24, grad=True), _t(24, grad=True)
    q, kv = _t(1, 4, 9, 16, grad=True), _t(1, 2, 12, 16, grad=True)
    table = torch.tensor([[1, 0], [2, 3]], dtype=torch.int32)
    lens = torch.tensor([5, 16], dtype=torch.int32)
    cache = _t(4, 8, 2, 16)
    return [
        ("softmax", (x,), {"axis": -1}),
        ("layer_norm", (x, w, b), {"eps": 1e-5}),
        ("rms_norm", (x, w), {}),
        ("attention", (q, kv, kv), {"causal": True}),
        ("attention", (q, kv, kv), {"scale": 0.3}),
        ("matmul", (x, _t(24, 8, grad=True)), {"bias": _t(8, grad=True), "activation": "silu"}),
        ("matmul", (_t(2, 4, 24, grad=True), _t(8, 24, grad=True).t()), {}),
        ("mlp", (x, _t(24, 32, scale=0.2, grad=True), _t(24, 32, scale=0.2, grad=True),
                 _t(32, 8, grad=True)), {}),
        ("decode_attention", (_t(2, 4, 16), cache, cache, table, lens), {}),
        ("quant_matmul", (x.detach(), torch.randint(-9, 9, (24, 8), dtype=torch.int8),
                          torch.rand(3, 8), 8, 8), {}),
        ("softmax_backward", (x.detach(), torch.softmax(x.detach(), -1)), {}),
        ("layer_norm_backward", (x.detach(), x.detach(), w.detach(), b.detach()), {}),
        ("rms_norm_backward", (x.detach(), x.detach(), w.detach()), {}),
        ("attention_backward", (q.detach(), q.detach(), kv.detach(), kv.detach(),
                                ops.attention(q.detach(), kv.detach(), kv.detach())), {}),
        ("block_sparse_matmul", (_t(4, 32), _t(3, 16, 16),
                                 torch.tensor([[True, False], [True, True]]), 16),
         {"bias": _t(32), "activation": "relu"}),
        ("sparsify_2_4", (_t(8, 6),), {}),
        ("semi_structured_matmul", (x.detach(), *ops.sparsify_2_4(_t(24, 8))), {}),
    ]


@pytest.mark.parametrize("case", range(len(_cases())), ids=[c[0] for c in _cases()])
def test_opcheck(case):
    name, args, kwargs = _cases()[case]
    torch.library.opcheck(getattr(ops, name).default, args, {**kwargs, "backend": "llvm"})


@pytest.mark.parametrize("case", range(len(_cases())), ids=[c[0] for c in _cases()])
def test_each_operator_under_compile_fullgraph(case):
    name, args, kwargs = _cases()[case]
    args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
    op = getattr(ops, name)

    def f(*a):
        return op(*a, **kwargs, backend="llvm")

    torch._dynamo.reset()  # `f` is one code object for every case: no recompile limit
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(*args)
    want = f(*args)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g, w, rtol=0, atol=0)  # the same kernels: bit for bit


def test_compiled_graph_of_operators_fullgraph():
    """One graph mixing kdsl operators and torch operations, traced whole and run, forward and
    backward, with dynamic shapes."""
    def f(x, w, b, q, k, v):
        h = ops.layer_norm(x, w, b) * 2.0
        h = ops.softmax(h + 1.0)
        a = ops.attention(q, k, v, causal=True)
        return ops.rms_norm(h, w).sum() + a.sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=True)
    x, w, b = _t(5, 16, grad=True), _t(16, grad=True), _t(16, grad=True)
    q, k, v = _t(1, 2, 7, 16, grad=True), _t(1, 2, 7, 16, grad=True), _t(1, 2, 7, 16, grad=True)
    out = compiled(x, w, b, q, k, v)
    out.backward()
    got = [t.grad.clone() for t in (x, w, b, q, k, v)]
    for t in (x, w, b, q, k, v):
        t.grad = None
    want = f(x, w, b, q, k, v)
    want.backward()
    torch.testing.assert_close(out, want)
    for g, t in zip(got, (x, w, b, q, k, v)):
        torch.testing.assert_close(g, t.grad)


@pytest.mark.slow  # inductor compiles C++ for the graph around the operator: ~30 s
def test_inductor_compiles_through_a_kdsl_operator():
    def f(x, w):
        return torch.relu(ops.rms_norm(x * 3.0, w)) + 1.0

    x, w = _t(6, 32), _t(32)
    got = torch.compile(f, fullgraph=True)(x, w)
    want = torch.relu(F.rms_norm(x * 3.0, (32,), w, 1e-6)) + 1.0
    torch.testing.assert_close(got, want, atol=2e-6, rtol=2e-6)


# ------------------------------------------------------------------------------ gradients

def _grads(fn, inputs, dy):
    inputs = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*inputs)
    out.backward(dy)
    return out.detach(), [t.grad for t in inputs]


def _float64(ts):
    return [t.detach().to(torch.float64) for t in ts]


def _sdpa_end_aligned(q, k, v):
    """torch's causal attention with kdsl's conventions: grouped heads, aligned to the end."""
    group = q.shape[1] // k.shape[1]
    sq, sk = q.shape[2], k.shape[2]
    mask = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + (sk - sq)
    return F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1),
                                          v.repeat_interleave(group, 1), attn_mask=mask)


# The shapes are those of tests/kernels/test_backward.py: on opencl the compiled variants are
# shared (PoCL compiles each for seconds).
GRAD_CASES = {
    "softmax": (lambda x: ops.softmax(x, -1), lambda x: torch.softmax(x, -1),
                lambda: [_t(5, 37)]),
    "softmax_axis": (lambda x: ops.softmax(x, 0), lambda x: torch.softmax(x, 0),
                     lambda: [_t(6, 4)]),
    "layer_norm": (lambda x, w, b: ops.layer_norm(x, w, b, 1e-5),
                   lambda x, w, b: F.layer_norm(x, (33,), w, b, 1e-5),
                   lambda: [_t(70, 33) + 1.0, _t(33), _t(33)]),
    "rms_norm": (lambda x, w: ops.rms_norm(x, w, 1e-5),
                 lambda x, w: F.rms_norm(x, (33,), w, 1e-5),
                 lambda: [_t(70, 33) + 1.0, _t(33)]),
    "attention": (lambda q, k, v: ops.attention(q, k, v, True), _sdpa_end_aligned,
                  lambda: [_t(2, 4, 7, 24), _t(2, 2, 23, 24), _t(2, 2, 23, 24)]),
    "matmul_gelu_bias": (lambda a, b, c: ops.matmul(a, b.t(), c, "gelu"),
                         lambda a, b, c: F.gelu(a @ b.t() + c),
                         lambda: [_t(2, 10, 24), _t(12, 24, scale=0.3), _t(12)]),
    "matmul_silu_batched": (lambda a, b: ops.matmul(a, b, None, "silu"),
                            lambda a, b: F.silu(a @ b),
                            lambda: [_t(2, 10, 24), _t(2, 24, 12, scale=0.3)]),
    "matmul_relu": (lambda a, b: ops.matmul(a, b, None, "relu"),
                    lambda a, b: torch.relu(a @ b), lambda: [_t(10, 24), _t(24, 12)]),
    "mlp": (lambda x, g, u, d: ops.mlp(x, g, u, d),
            lambda x, g, u, d: (F.silu(x @ g) * (x @ u)) @ d,
            lambda: [_t(10, 24), _t(24, 32, scale=0.3), _t(24, 32, scale=0.3),
                     _t(32, 16, scale=0.3)]),
}

#: tolerance on gradients (relative to the largest one) per dtype
GRAD_TOL = {"float32": 2e-5, "float16": 2e-2, "bfloat16": 8e-2}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients_match_torch_autograd(backend, name, dtype, monkeypatch):
    """kdsl's backward kernels against torch's autograd of torch's own operators in float64
    on the same (rounded) inputs and output gradient."""
    skip_heavy(backend, dtype)
    if name.startswith(("matmul", "mlp", "softmax_axis")):
        slow_on_opencl(backend, "more kernel variants")
    if backend != "llvm":
        monkeypatch.setenv("KDSL_BACKEND", backend)  # the operators' default backend
    kd_fn, torch_fn, make = GRAD_CASES[name]
    torch.manual_seed(3)
    td = getattr(torch, dtype)
    inputs = [t.to(td) for t in make()]
    dy = _t(*kd_fn(*inputs).shape).to(td)
    out, grads = _grads(kd_fn, inputs, dy)
    ref_out, ref_grads = _grads(torch_fn, _float64(inputs), dy.double())
    tol = GRAD_TOL[dtype]
    torch.testing.assert_close(out.double(), ref_out, atol=tol, rtol=tol)
    for i, (g, r) in enumerate(zip(grads, ref_grads)):
        assert g.dtype == td, (i, g.dtype)
        scale = float(r.abs().max())
        err = float((g.double() - r).abs().max())
        assert err <= tol * max(1.0, scale), f"input {i}: max error {err:.3g} (scale {scale:.3g})"


def test_non_differentiable_operators_say_so():
    x = _t(4, 8, grad=True)
    y = ops.quant_matmul(x, torch.ones(8, 3, dtype=torch.int8), torch.ones(1, 3), 8, 8)
    with pytest.raises(RuntimeError, match="no autograd formula"):
        y.sum().backward()
