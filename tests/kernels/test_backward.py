"""Gradient kernels (softmax, layer_norm, rms_norm, attention): every backend, every dtype,
ragged and long rows, grouped-query and causal attention, against the float64 references in
kdsl.kernels.reference (themselves checked against finite differences).  On opencl the 16-bit
variants, and the cases adding only more variants of kernels already covered, are slow cases
(PoCL compiles each kernel variant for seconds)."""

import numpy as np
import pytest
from kcases import DTYPES, check, rand, skip_heavy, slow_on_opencl
from kdsl.kernels import (
    attention,
    attention_backward,
    layer_norm_backward,
    rms_norm_backward,
    softmax,
    softmax_backward,
)
from kdsl.kernels import reference as R


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 37), (2, 3, 16)])
def test_softmax_backward(backend, rng, dtype, shape):
    skip_heavy(backend, dtype)
    if len(shape) == 3:
        slow_on_opencl(backend, "one more variant of a kernel covered there")
    y = softmax(rand(rng, shape, dtype), backend=backend)
    dy = rand(rng, shape, dtype)
    dx = softmax_backward(dy, y, backend=backend)
    check(dx, R.softmax_backward(dy, y), dtype, k=shape[-1])


def test_softmax_backward_axis_and_long_rows(backend, rng):
    slow_on_opencl(backend, "two more variants")
    y = softmax(rand(rng, (6, 4), "float32"), axis=0, backend=backend)
    dy = rand(rng, (6, 4), "float32")
    check(softmax_backward(dy, y, axis=0, backend=backend), R.softmax_backward(dy, y, axis=0),
          "float32", k=6)
    y = softmax(rand(rng, (2, 9000), "float32"), backend=backend)
    dy = rand(rng, (2, 9000), "float32")
    check(softmax_backward(dy, y, backend=backend), R.softmax_backward(dy, y), "float32", k=9000)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(70, 33), (2, 3, 8)])
def test_norm_backward(backend, rng, dtype, shape):
    skip_heavy(backend, dtype)
    if len(shape) == 3:
        slow_on_opencl(backend, "more variants of kernels covered there")
    n = shape[-1]
    rows = int(np.prod(shape[:-1]))
    x, dy = rand(rng, shape, dtype, shift=1.0), rand(rng, shape, dtype)
    w, b = rand(rng, n, "float32"), rand(rng, n, dtype)   # mixed: fp32 weight
    got = layer_norm_backward(dy, x, w, b, backend=backend)
    want = R.layer_norm_backward(dy, x, w, b)
    check(got[0], want[0], dtype, k=n)
    check(got[1], want[1], "float32", k=rows + n)
    check(got[2], want[2], dtype, k=rows)
    got = rms_norm_backward(dy, x, w, eps=1e-5, backend=backend)
    want = R.rms_norm_backward(dy, x, w, eps=1e-5)
    check(got[0], want[0], dtype, k=n)
    check(got[1], want[1], "float32", k=rows + n)


def test_norm_backward_long_rows(backend, rng):
    slow_on_opencl(backend, "the looping variants")
    x, dy = rand(rng, (3, 9000), "float32"), rand(rng, (3, 9000), "float32")
    w, b = rand(rng, 9000, "float32"), rand(rng, 9000, "float32")
    for got, want in zip(layer_norm_backward(dy, x, w, b, backend=backend),
                         R.layer_norm_backward(dy, x, w, b)):
        check(got, want, "float32", k=9000)


# (batch, heads, kv_heads, seq_q, seq_k, dim, causal)
ATTENTION = {
    "mha": (1, 2, 2, 19, 19, 16, False),
    "gqa_causal_prefix": (2, 4, 2, 7, 23, 24, True),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", sorted(ATTENTION))
def test_attention_backward(backend, rng, dtype, case):
    skip_heavy(backend, dtype)
    if case == "mha":
        slow_on_opencl(backend, "the non-causal variants; gqa_causal_prefix runs by default")
    B, H, KVH, Sq, Sk, D, causal = ATTENTION[case]
    q, do = rand(rng, (B, H, Sq, D), dtype), rand(rng, (B, H, Sq, D), dtype)
    k, v = rand(rng, (B, KVH, Sk, D), dtype), rand(rng, (B, KVH, Sk, D), dtype)
    o = attention(q, k, v, causal=causal, backend=backend)
    got = attention_backward(do, q, k, v, o, causal=causal, backend=backend)
    want = R.attention_backward(do, q, k, v, o, causal=causal)
    # P and dS are rounded to the inputs' dtype before their dots (k_out), as in the forward
    for g, w in zip(got, want):
        check(g, w, dtype, k=Sq + Sk + D, k_out=4)


def test_attention_backward_empty_and_bad(rng):
    q = np.zeros((1, 2, 0, 16), np.float32)
    kv = np.zeros((1, 2, 5, 16), np.float32)
    dq, dk, dv = attention_backward(q, q, kv, kv, q, backend="interp")
    assert dq.shape == q.shape and (dk == 0).all() and (dv == 0).all()
    q = np.zeros((1, 2, 4, 16), np.float32)
    with pytest.raises(ValueError, match="do: expected q's shape"):
        attention_backward(q[:, :1], q, kv, kv, q)


def _numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def test_references_match_finite_differences(rng):
    """The references are the ground truth: check them against central differences of the
    forward references (float64) for a random output gradient."""
    x, dy = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    w, b = rng.standard_normal(5), rng.standard_normal(5)
    y = R.softmax(x)
    assert np.allclose(R.softmax_backward(dy, y), _numeric_grad(lambda t: (R.softmax(t) * dy)
                                                                 .sum(), x), atol=1e-7)
    dx, dw, db = R.layer_norm_backward(dy, x, w, b)
    assert np.allclose(dx, _numeric_grad(lambda t: (R.layer_norm(t, w, b) * dy).sum(), x),
                       atol=1e-6)
    assert np.allclose(dw, _numeric_grad(lambda t: (R.layer_norm(x, t, b) * dy).sum(), w))
    assert np.allclose(db, dy.sum(0))
    dx, dw = R.rms_norm_backward(dy, x, w)
    assert np.allclose(dx, _numeric_grad(lambda t: (R.rms_norm(t, w) * dy).sum(), x),
                       atol=1e-6)
    assert np.allclose(dw, _numeric_grad(lambda t: (R.rms_norm(x, t) * dy).sum(), w))
    q, do = rng.standard_normal((1, 2, 3, 4)), rng.standard_normal((1, 2, 3, 4))
    k, v = rng.standard_normal((1, 1, 5, 4)), rng.standard_normal((1, 1, 5, 4))
    dq, dk, dv = R.attention_backward(do, q, k, v, None, causal=True)
    for t, g in ((0, dq), (1, dk), (2, dv)):
        def f(a, t=t):
            args = [q, k, v]
            args[t] = a
            return (R.attention(*args, causal=True) * do).sum()
        assert np.allclose(g, _numeric_grad(f, [q, k, v][t]), atol=1e-6)
