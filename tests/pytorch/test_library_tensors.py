"""torch tensors through every library kernel: float32, float16, bfloat16, strided views and
`requires_grad=True` tensors go in, torch tensors of the same dtype come out, matching
torch's own operators (computed in float64 from the same rounded inputs).  The tensors are
turned into NumPy views before any backend sees them: opencl runs these as slow cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from kcases import check, skip_heavy, slow_on_opencl

torch = pytest.importorskip("torch")
F = torch.nn.functional

import kdsl.kernels as K

DTYPES = ["float32", "float16", "bfloat16"]


def rnd(shape, dtype, scale=1.0, grad=False, gen=None):
    t = (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(getattr(torch, dtype))
    return t.requires_grad_(grad)


def f64(t):
    return t.detach().to(torch.float64)


def same(out, like, expected, k, dtype, k_out=1):
    """`out` is a torch tensor of like's dtype, close to torch's float64 `expected`."""
    assert isinstance(out, torch.Tensor), type(out)
    assert out.dtype == like.dtype and out.device.type == "cpu"
    assert not out.requires_grad
    check(out.numpy() if dtype != "bfloat16" else f64(out).numpy(), expected.numpy(), dtype, k=k,
          k_out=k_out)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(7)


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_kernels(backend, dtype, gen):
    slow_on_opencl(backend, "torch tensors reach every backend as NumPy views")
    skip_heavy(backend, dtype)
    x = rnd((4, 6, 40), dtype, grad=True, gen=gen)
    w, b = rnd(40, dtype, grad=True, gen=gen), rnd(40, dtype, grad=True, gen=gen)
    same(K.softmax(x, backend=backend), x, torch.softmax(f64(x), -1), 40, dtype)
    same(K.softmax(x, axis=1, backend=backend), x, torch.softmax(f64(x), 1), 6, dtype)
    same(K.layer_norm(x, w, b, backend=backend), x,
         F.layer_norm(f64(x), (40,), f64(w), f64(b), 1e-5), 40, dtype)
    same(K.rms_norm(x, w, backend=backend), x, F.rms_norm(f64(x), (40,), f64(w), 1e-6), 40,
         dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_and_mlp(backend, dtype, gen):
    slow_on_opencl(backend, "torch tensors reach every backend as NumPy views")
    skip_heavy(backend, dtype)
    a = rnd((9, 24), dtype, grad=True, gen=gen)
    w = rnd((13, 24), dtype, grad=True, gen=gen)       # an nn.Linear weight: [out, in]
    bias = rnd(13, "float32", gen=gen)
    # F.linear's layout: w.t() is a column-major view, read in place
    same(K.matmul(a, w.t(), bias, activation="gelu", backend=backend), a,
         F.gelu(f64(a) @ f64(w).t() + f64(bias)), 24, dtype)
    wg, wu = rnd((24, 32), dtype, 0.3, gen=gen), rnd((24, 32), dtype, 0.3, gen=gen)
    wd = rnd((32, 24), dtype, 0.3, gen=gen)
    ref = (F.silu(f64(a) @ f64(wg)) * (f64(a) @ f64(wu))) @ f64(wd)
    same(K.mlp(a, wg, wu, wd, backend=backend), a, ref, 56, dtype, k_out=2)


def _sdpa_end_aligned(q, k, v, causal):
    """torch's attention with kdsl's conventions: grouped heads, causal aligned to the end."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    mask = None
    if causal:
        sq, sk = q.shape[2], k.shape[2]
        mask = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + (sk - sq)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention(backend, dtype, gen):
    slow_on_opencl(backend, "torch tensors reach every backend as NumPy views")
    skip_heavy(backend, dtype)
    B, S, H, KVH, D = 2, 11, 4, 2, 16
    q = rnd((B, S, H, D), dtype, grad=True, gen=gen).transpose(1, 2)   # a strided view
    k = rnd((B, KVH, S + 5, D), dtype, gen=gen)
    v = rnd((B, KVH, S + 5, D), dtype, gen=gen)
    out = K.attention(q, k, v, causal=True, backend=backend)
    assert out.is_contiguous() and out.shape == q.shape
    same(out, q, _sdpa_end_aligned(f64(q), f64(k), f64(v), True), S + 5, dtype)


def test_decode_attention(backend, gen):
    slow_on_opencl(backend, "torch tensors reach every backend as NumPy views")
    dtype = "float32"
    nb, bs, KVH, D = 6, 8, 2, 16
    kc, vc = rnd((nb, bs, KVH, D), dtype, gen=gen), rnd((nb, bs, KVH, D), dtype, gen=gen)
    table = torch.tensor([[3, 1, 5], [0, 2, 4]], dtype=torch.int32)
    lens = torch.tensor([20, 9], dtype=torch.int32)
    q = rnd((2, 4, D), dtype, grad=True, gen=gen)
    out = K.decode_attention(q, kc, vc, table, lens, backend=backend)
    ref = torch.empty(2, 4, D, dtype=torch.float64)
    for s in range(2):
        n = int(lens[s])
        keys = f64(kc)[table[s].long()].reshape(-1, KVH, D)[:n].transpose(0, 1)   # [KVH, n, D]
        vals = f64(vc)[table[s].long()].reshape(-1, KVH, D)[:n].transpose(0, 1)
        ref[s] = _sdpa_end_aligned(f64(q)[s][None, :, None], keys[None], vals[None],
                                   False)[0, :, 0]
    same(out, q, ref, 20, dtype)


def test_quant_matmul(backend, gen):
    slow_on_opencl(backend, "torch tensors reach every backend as NumPy views")
    x = rnd((5, 64), "float32", grad=True, gen=gen)
    wq = torch.randint(-127, 128, (64, 12), generator=gen, dtype=torch.int8)
    scales = torch.rand((2, 12), generator=gen) * 0.02
    ref = f64(x) @ (wq.double() * f64(scales).repeat_interleave(32, 0))
    same(K.quant_matmul(x, wq, scales, 32, 8, backend=backend), x, ref, 64, "float32")


def test_bfloat16_result_chains_and_reads_in_place(gen):
    x = rnd((3, 16), "bfloat16", gen=gen)
    y = K.softmax(K.softmax(x, backend="interp"), backend="interp")
    assert y.dtype == torch.bfloat16
    check(f64(y).numpy(), torch.softmax(torch.softmax(f64(x), -1).to(torch.bfloat16).double(),
                                        -1).numpy(), "bfloat16", k=16)


def test_outputs_share_no_memory_with_inputs_and_inputs_are_untouched(gen):
    x = rnd((4, 8), "float32", grad=True, gen=gen)
    before = x.detach().clone()
    y = K.rms_norm(x, torch.ones(8), backend="llvm")
    assert torch.equal(x.detach(), before) and x.grad is None
    assert y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


def test_numpy_and_ml_dtypes_stay_numpy():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(3, 8)
    assert type(K.softmax(x, backend="interp")) is np.ndarray
    y = K.softmax(x.astype(ml_dtypes.bfloat16), backend="interp")
    assert type(y) is np.ndarray and y.dtype == ml_dtypes.bfloat16


def test_bad_tensors():
    with pytest.raises(TypeError, match="x: dtype int64"):
        K.softmax(torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(TypeError, match="meta"):
        K.softmax(torch.zeros(2, 3, device="meta"))
    assert math.isfinite(float(K.softmax(torch.zeros(1, 3), backend="interp")[0, 0]))
