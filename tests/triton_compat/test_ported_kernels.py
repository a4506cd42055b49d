"""Triton-form kernels (kernels/*.py), ported by the mechanical rename, launched as Triton users
launch them (grids, strides, meta-parameters and launch options by keyword) on every backend
and checked against float64 NumPy references."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kdsl.testing import assert_close

from .conftest import stride

RNG = np.random.default_rng(2026)


def f64(a):
    return np.asarray(a, np.float64)


# ------------------------------------------------------------------------------ softmax


@pytest.mark.parametrize("shape", [(7, 100), (33, 513)])
def test_persistent_softmax(ported, backend, shape):
    k = ported("softmax")
    x = RNG.standard_normal(shape).astype(np.float32) * 3
    y = np.empty_like(x)
    block = 1 << (shape[1] - 1).bit_length()
    k.softmax_rows[(4,)](y, x, stride(x, 0), stride(y, 0), shape[0], shape[1],
                         BLOCK_SIZE=block, num_stages=2, num_warps=4, backend=backend)
    e = np.exp(f64(x) - f64(x).max(1, keepdims=True))
    assert_close(y, e / e.sum(1, keepdims=True), k=shape[1])


def test_softmax_fp16_output(ported, backend):
    k = ported("softmax")
    x = RNG.standard_normal((5, 64)).astype(np.float16)
    y = np.empty_like(x)
    k.softmax_rows[(5,)](y, x, 64, 64, 5, 64, BLOCK_SIZE=64, num_stages=3, backend=backend)
    e = np.exp(f64(x) - f64(x).max(1, keepdims=True))
    assert_close(y, e / e.sum(1, keepdims=True), dtype="float16", k=64, acc_dtype="float32")


# ---------------------------------------------------------------------------- layer norm


def test_layer_norm_forward_backward(ported, backend):
    k = ported("layernorm")
    M, N, G = 12, 300, 4
    x = RNG.standard_normal((M, N)).astype(np.float32)
    w = RNG.standard_normal(N).astype(np.float32)
    b = RNG.standard_normal(N).astype(np.float32)
    dy = RNG.standard_normal((M, N)).astype(np.float32)
    eps = 1e-5
    y = np.empty_like(x)
    mean = np.empty(M, np.float32)
    rstd = np.empty(M, np.float32)
    k.ln_forward[(M,)](x, y, w, b, mean, rstd, stride(x, 0), N, eps, BLOCK_SIZE=128,
                       num_warps=4, backend=backend)
    xd = f64(x)
    mu = xd.mean(1, keepdims=True)
    var = ((xd - mu) ** 2).mean(1, keepdims=True)
    rs = 1 / np.sqrt(var + eps)
    assert_close(y, (xd - mu) * rs * w + b, k=N)
    assert_close(mean, mu[:, 0], k=N)
    assert_close(rstd, rs[:, 0], k=N)

    dx = np.empty_like(x)
    lock = np.zeros(2 * G, np.int32)
    dw_part = np.zeros((G, N), np.float32)
    db_part = np.zeros((G, N), np.float32)
    k.ln_backward_dx[(M,)](dx, dy, dw_part, db_part, x, w, mean, rstd, lock, stride(x, 0), N,
                           GROUP_SIZE_M=G, BLOCK_SIZE_N=512, num_warps=8, backend=backend)
    dw = np.empty(N, np.float32)
    db = np.empty(N, np.float32)
    k.ln_backward_dwdb[(math.ceil(N / 64),)](dw_part, db_part, dw, db, G, N, BLOCK_SIZE_M=4,
                                             BLOCK_SIZE_N=64, backend=backend)
    xhat = (xd - f64(mean)[:, None]) * f64(rstd)[:, None]
    wdy = f64(w) * dy
    c1 = (xhat * wdy).sum(1, keepdims=True) / N
    c2 = wdy.sum(1, keepdims=True) / N
    assert_close(dx, (wdy - (xhat * c1 + c2)) * f64(rstd)[:, None], k=N)
    assert_close(dw, (f64(dy) * xhat).sum(0), k=M)
    assert_close(db, f64(dy).sum(0), k=M)
    assert (lock[:G] == 0).all(), "every lock released"


# ------------------------------------------------------------------------------ dropout


def philox4x32(seed: int, counters: np.ndarray, rounds: int = 10) -> np.ndarray:
    """Reference Philox4x32: counter (offset, 0, 0, 0) and key (seed low, seed high) -> 4 words
    per offset, in NumPy uint64 arithmetic."""
    m0, m1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    w0, w1 = 0x9E3779B9, 0xBB67AE85
    mask = np.uint64(0xFFFFFFFF)
    c = [np.asarray(counters, np.uint64) & mask, *(np.zeros(len(counters), np.uint64),) * 3]
    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    for _ in range(rounds):
        p0, p1 = m0 * c[0], m1 * c[2]
        c = [((p1 >> np.uint64(32)) ^ c[1] ^ np.uint64(k0)) & mask, p1 & mask,
             ((p0 >> np.uint64(32)) ^ c[3] ^ np.uint64(k1)) & mask, p0 & mask]
        k0, k1 = (k0 + w0) & 0xFFFFFFFF, (k1 + w1) & 0xFFFFFFFF
    return np.stack(c, axis=1).astype(np.uint32)


def uniform(bits: np.ndarray) -> np.ndarray:
    """Triton's uint32 -> [0, 1) float32 mapping."""
    x = bits.view(np.int32).astype(np.int64)
    x = np.where(x < 0, -x - 1, x)
    return (x.astype(np.float32) * np.float32(4.6566127342e-10)).astype(np.float32)


def test_randint4x_bit_exact(ported, backend):
    k = ported("dropout")
    n, seed = 300, 0x1234_5678_9ABC
    out = np.zeros(4 * n, np.uint32)
    k.random_bits[(3,)](out, seed, n, BLOCK=128, backend=backend)
    np.testing.assert_array_equal(out.reshape(n, 4), philox4x32(seed, np.arange(n)))


def test_seeded_dropout(ported, backend):
    k = ported("dropout")
    n, p, seed = 1000, 0.4, 123
    x = RNG.standard_normal(n).astype(np.float32)
    out = np.empty_like(x)
    k.seeded_dropout[(math.ceil(n / 256),)](x, out, n, p, seed, BLOCK_SIZE=256, backend=backend)
    keep = uniform(philox4x32(seed, np.arange(n))[:, 0]) > np.float32(p)
    expected = np.where(keep, f64(x) / np.float32(1 - p), 0)
    assert_close(out, expected)
    assert 0.5 < keep.mean() < 0.7


def test_rand_and_randn(ported, backend):
    k = ported("dropout")
    n, seed = 4096, 7
    u = np.empty(n, np.float32)
    z = np.empty(n, np.float32)
    k.random_uniform_normal[(n // 512,)](u, z, seed, n, BLOCK=512, backend=backend)
    np.testing.assert_array_equal(u, uniform(philox4x32(seed, np.arange(n))[:, 0]))
    assert abs(z.mean()) < 0.06 and abs(z.std() - 1) < 0.06


# ---------------------------------------------------------------------------- attention


def attention_ref(q, k, v, scale, causal):
    s = np.einsum("zhmd,zhnd->zhmn", f64(q), f64(k)) * scale
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("zhmn,zhnd->zhmd", p / p.sum(-1, keepdims=True), f64(v))


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_block_pointers(ported, backend, causal):
    k = ported("attention")
    Z, H, N, D = 1, 2, 64, 16
    q, kk, v = (RNG.standard_normal((Z, H, N, D)).astype(np.float16) for _ in range(3))
    o = np.empty_like(q)
    m = np.empty((Z * H, N), np.float32)
    scale = 0.5
    BLOCK_M, BLOCK_N = 32, 16
    k.attn_fwd[(N // BLOCK_M, Z * H, 1)](
        q, kk, v, scale, m, o,
        *(stride(q, d) for d in range(4)), *(stride(kk, d) for d in range(4)),
        *(stride(v, d) for d in range(4)), *(stride(o, d) for d in range(4)),
        Z, H, N_CTX=N, HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
        STAGE=3 if causal else 1, num_warps=4, num_stages=2, backend=backend)
    assert_close(o, attention_ref(q, kk, v, scale, causal), dtype="float16", k=N,
                 acc_dtype="float32", k_out=2)


def test_attention_ragged_boundary_check(ported, backend):
    k = ported("attention")
    S, D = 45, 16
    q, kk, v = (RNG.standard_normal((S, D)).astype(np.float32) for _ in range(3))
    o = np.full((S, D), 7.0, np.float32)
    k.attn_ragged[(math.ceil(S / 16),)](q, kk, v, o, 0.25, S, D, HEAD_DIM=D, BLOCK_M=16,
                                        BLOCK_N=16, backend=backend)
    ref = attention_ref(q[None, None], kk[None, None], v[None, None], 0.25, False)[0, 0]
    assert_close(o, ref, k=S)


# ------------------------------------------------------------------------------ matmuls


def test_grouped_gemm_pointer_tables(ported, backend):
    if backend == "cuda":
        pytest.skip("host addresses in the pointer table: a CUDA run needs device addresses")
    k = ported("matmul")
    sizes = [(40, 24, 32), (16, 48, 20), (33, 17, 16)]
    As = [RNG.standard_normal((m, kk)).astype(np.float16) for m, n, kk in sizes]
    Bs = [RNG.standard_normal((kk, n)).astype(np.float16) for m, n, kk in sizes]
    Cs = [np.zeros((m, n), np.float16) for m, n, kk in sizes]
    table = lambda arrs: np.array([a.ctypes.data for a in arrs], np.int64)  # noqa: E731
    dims = np.array(sizes, np.int32).reshape(-1)
    lds = np.array([[kk, n, n] for m, n, kk in sizes], np.int32).reshape(-1)
    NUM_SM = 4
    k.grouped_gemm[(NUM_SM,)](table(As), table(Bs), table(Cs), dims, lds, len(sizes),
                              NUM_SM=NUM_SM, BLOCK_SIZE_M=16, BLOCK_SIZE_N=16, BLOCK_SIZE_K=16,
                              backend=backend)
    for a, b, c, (m, n, kk) in zip(As, Bs, Cs, sizes):
        assert_close(c, f64(a) @ f64(b), dtype="float16", k=kk, acc_dtype="float32")


@pytest.mark.parametrize("with_bias", [False, True])
def test_persistent_matmul(ported, backend, with_bias):
    k = ported("matmul")
    M, N, K = 50, 40, 70
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = np.asfortranarray(RNG.standard_normal((K, N)).astype(np.float32))  # column-major B
    c = np.zeros((M, N), np.float32)
    bias = RNG.standard_normal(N).astype(np.float32) if with_bias else None
    k.persistent_matmul[(3,)](a, b, c, bias, M, N, K, stride(a, 0), stride(a, 1),
                              stride(b, 0), stride(b, 1), stride(c, 0), stride(c, 1),
                              BLOCK_SIZE_M=16, BLOCK_SIZE_N=16, BLOCK_SIZE_K=32,
                              GROUP_SIZE_M=2, NUM_SMS=3, ACTIVATION="leaky_relu",
                              backend=backend)
    ref = f64(a) @ f64(b) + (f64(bias) if with_bias else 0)
    assert_close(c, np.where(ref >= 0, ref, 0.01 * ref), k=K)


def test_swizzled_matmul_early_exit(ported, backend):
    k = ported("matmul")
    M, N, K = 40, 24, 48
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = RNG.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    grid = (4, 3)  # one row of programs past M exits early
    k.swizzled_matmul[grid](a, b, c, M, N, K, K, 1, N, 1, N, 1, BLOCK_M=16, BLOCK_N=16,
                            BLOCK_K=16, GROUP_M=2, backend=backend)
    assert_close(c, f64(a) @ f64(b), k=K)


# --------------------------------------------------------------------------- LLM kernels


def test_rms_norm(ported, backend):
    k = ported("llm")
    M, N = 6, 200
    x = RNG.standard_normal((M, N)).astype(np.float32)
    w = RNG.standard_normal(N).astype(np.float32)
    y = np.empty_like(x)
    rstd = np.empty(M, np.float32)
    k.rms_norm_fwd[(M,)](y, stride(y, 0), x, stride(x, 0), w, rstd, N, 1e-6, 1.0,
                         BLOCK_SIZE=256, backend=backend)
    rs = 1 / np.sqrt((f64(x) ** 2).mean(1) + 1e-6)
    assert_close(rstd, rs, k=N)
    assert_close(y, f64(x) * rs[:, None] * (1.0 + f64(w)), k=N)


def test_swiglu_geglu(ported, backend):
    k = ported("llm")
    M, N = 4, 100
    a = RNG.standard_normal((M, N)).astype(np.float32)
    b = RNG.standard_normal((M, N)).astype(np.float32)
    c = np.empty_like(a)
    k.swiglu_fwd[(M,)](a, b, c, N, n_cols=N, BLOCK_SIZE=128, backend=backend)
    ad = f64(a)
    assert_close(c, ad / (1 + np.exp(-ad)) * b, k=4)
    erf = np.vectorize(math.erf)
    for approximate in (False, True):
        k.geglu_fwd[(M,)](a, b, c, N, n_cols=N, BLOCK_SIZE=128, APPROXIMATE=approximate,
                          backend=backend)
        if approximate:
            gelu = 0.5 * ad * (1 + np.tanh(0.7978845608028654 * (ad + 0.044715 * ad ** 3)))
        else:
            gelu = 0.5 * ad * (1 + erf(ad / math.sqrt(2)))
        assert_close(c, gelu * b, k=8)


def test_rope(ported, backend):
    k = ported("llm")
    T, H, D, S = 6, 3, 16, 4
    q = RNG.standard_normal((T, H, D)).astype(np.float32)
    theta = np.arange(S)[:, None] * (10000.0 ** (-np.arange(D // 2) / (D // 2)))[None, :]
    cos, sin = np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)
    out = q.copy()
    k.rope_fwd[(T,)](out, H * D, cos, D // 2, sin, D // 2, S, n_qh=H, hd=D, pad_n_qh=4,
                     pad_hd=16, backend=backend)
    c, s = f64(cos)[np.arange(T) % S][:, None], f64(sin)[np.arange(T) % S][:, None]
    q1, q2 = f64(q[..., :D // 2]), f64(q[..., D // 2:])
    assert_close(out, np.concatenate([q1 * c - q2 * s, q2 * c + q1 * s], -1), k=2)


def test_cross_entropy(ported, backend):
    k = ported("llm")
    T, V = 5, 300
    logits = RNG.standard_normal((T, V)).astype(np.float32) * 2
    target = RNG.integers(0, V, T).astype(np.int32)
    target[2] = -100
    x = logits.copy()
    loss = np.zeros(T, np.float32)
    k.cross_entropy_fwd_bwd[(T,)](x, V, target, loss, V, -100, BLOCK_SIZE=128, backend=backend)
    ld = f64(logits)
    lse = np.log(np.exp(ld - ld.max(1, keepdims=True)).sum(1)) + ld.max(1)
    keep = target != -100
    ref_loss = np.where(keep, lse - ld[np.arange(T), np.where(keep, target, 0)], 0)
    grad = np.exp(ld - lse[:, None])
    grad[np.arange(T)[keep], target[keep]] -= 1
    grad[~keep] = 0
    assert_close(loss, ref_loss, k=V)
    assert_close(x, grad, k=V)


# ------------------------------------------------------------------- scans and reductions


@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(ported, backend, reverse):
    k = ported("scans")
    x = RNG.integers(-50, 50, (3, 100)).astype(np.int32)
    out = np.zeros_like(x)
    k.row_cumsum[(3,)](x, out, 100, 100, BLOCK=128, REVERSE=reverse, backend=backend)
    ref = np.cumsum(x[:, ::-1], 1)[:, ::-1] if reverse else np.cumsum(x, 1)
    np.testing.assert_array_equal(out, ref)


def test_cumprod_and_linear_scan(ported, backend):
    k = ported("scans")
    x = RNG.uniform(0.9, 1.1, (4, 32)).astype(np.float32)
    out = np.empty_like(x)
    k.row_cumprod_2d[(1,)](x, out, R=4, C=32, backend=backend)
    assert_close(out, np.cumprod(f64(x), 1), k=32)
    n = 200
    a = RNG.uniform(0.5, 1.0, n).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    h = np.empty(n, np.float32)
    k.linear_scan[(1,)](a, b, h, n, BLOCK=256, backend=backend)
    ref, acc = np.empty(n), 0.0
    for i in range(n):
        acc = f64(a[i]) * acc + f64(b[i])
        ref[i] = acc
    assert_close(h, ref, k=n)


def test_argmax_return_indices(ported, backend):
    k = ported("scans")
    R, C = 6, 70
    x = RNG.standard_normal((R, C)).astype(np.float32)
    x[1, 5] = x[1, 40] = 10.0  # a tie: the first index wins
    vals = np.empty(R, np.float32)
    idx = np.zeros(2 * R, np.int32)
    k.row_argmax[(R,)](x, vals, idx, C, C, BLOCK=128, backend=backend)
    np.testing.assert_array_equal(vals, x.max(1))
    np.testing.assert_array_equal(idx[:R], x.argmax(1))
    np.testing.assert_array_equal(idx[R:], x.argmin(1))


def test_welford_tuple_reduce(ported, backend):
    k = ported("scans")
    R, C = 10, 150
    x = (RNG.standard_normal((R, C)) * 2 + 5).astype(np.float32)
    mean = np.empty(R, np.float32)
    var = np.empty(R, np.float32)
    k.welford_var_mean[(math.ceil(R / 4),)](x, mean, var, R, C, BLOCK_R=4, BLOCK_C=32,
                                            backend=backend)
    assert_close(mean, f64(x).mean(1), k=C)
    assert_close(var, f64(x).var(1), k=C)


# ---------------------------------------------------------------------- MoE and quant


def test_moe_routing(ported, backend):
    k = ported("moe_quant")
    T, E, K = 9, 6, 2
    logits = RNG.standard_normal((T, E)).astype(np.float32)
    w = np.zeros((T, K), np.float32)
    ids = np.zeros((T, K), np.int32)
    counts = np.zeros(E, np.int32)
    k.topk_gating[(T,)](logits, w, ids, counts, T, E, TOPK=K, BLOCK_E=8, RENORMALIZE=True,
                        backend=backend)
    p = np.exp(f64(logits) - f64(logits).max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    top = np.argsort(-p, 1, kind="stable")[:, :K]
    np.testing.assert_array_equal(ids, top)
    pw = np.take_along_axis(p, top, 1)
    assert_close(w, pw / pw.sum(1, keepdims=True), k=E)
    np.testing.assert_array_equal(counts, np.bincount(top.ravel(), minlength=E))
    offsets = np.zeros(E + 1, np.int32)
    k.align_block_size[(1,)](counts, offsets, E, BLOCK_SIZE=4, BLOCK_E=8, backend=backend)
    padded = -(-counts // 4) * 4
    np.testing.assert_array_equal(offsets, np.concatenate([[0], np.cumsum(padded)]))
    hist = np.zeros(8, np.int32)
    k.expert_histogram[(1,)](ids.ravel(), hist, T * K, NUM_EXPERTS=8, BLOCK=32, backend=backend)
    np.testing.assert_array_equal(hist, np.bincount(ids.ravel(), minlength=8))


def test_per_token_quant_int8(ported, backend):
    k = ported("moe_quant")
    M, N = 5, 90
    x = RNG.standard_normal((M, N)).astype(np.float32)
    x[0, :4] = [0.5, -0.5, 1.5, -2.5]
    xq = np.zeros((M, N), np.int8)
    scale = np.zeros(M, np.float32)
    k.per_token_quant_int8[(M,)](x, xq, scale, N, N, N, BLOCK=128, backend=backend)
    amax = np.abs(x).max(1)
    assert_close(scale, f64(amax) / 127)
    v = x * (np.float32(127) / amax[:, None].astype(np.float32))
    ref = np.sign(v) * np.floor(np.abs(v) + 0.5)  # round half away from zero
    assert np.abs(xq.astype(np.int32) - ref).max() <= 1
    assert (xq == ref).mean() > 0.98


def test_libdevice_rounding(ported, backend):
    k = ported("moe_quant")
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.7, -2.7, 0.0, 3.49999], np.float32)
    out = np.zeros(3 * x.size, np.float32)
    k.rint_kernel[(1,)](x, out, x.size, BLOCK=16, backend=backend)
    np.testing.assert_array_equal(out[:x.size], np.rint(x))
    np.testing.assert_array_equal(out[x.size:2 * x.size], np.trunc(x))
    np.testing.assert_array_equal(out[2 * x.size:], np.rint(x))


def test_fp8_quant(ported, backend):
    ml = pytest.importorskip("ml_dtypes")
    k = ported("moe_quant")
    import kdsl as kd

    M, N = 3, 64
    x = RNG.standard_normal((M, N)).astype(np.float32)
    q = np.zeros((M, N), ml.float8_e4m3fn)
    scale = np.zeros(M, np.float32)
    k.per_token_quant_fp8[(M,)](x, q, scale, N, FP8_MAX=448.0, BLOCK=64, backend=backend)
    s = np.abs(x).max(1).astype(np.float32) / np.float32(448.0)
    assert_close(scale, s)
    ref = np.clip(x / s[:, None], -448, 448).astype(ml.float8_e4m3fn)
    np.testing.assert_array_equal(q.view(np.uint8), ref.view(np.uint8))
    assert kd.float8e4nv is not None


# ---------------------------------------------------------------------------- language


def test_heuristics_and_options(ported, backend):
    k = ported("misc")
    for n in (256, 250):
        x = RNG.standard_normal(n).astype(np.float32)
        out = np.zeros(256, np.float32)
        k.scaled_copy[(1,)](x, out, np.float64(0.5), n, BLOCK=256, num_warps=2, num_stages=1,
                            num_ctas=1, maxnreg=128, enable_fp_fusion=False, backend=backend)
        assert_close(out[:n], f64(x) * 0.5)


def test_tile_logic_ops(ported, backend):
    k = ported("misc")
    x = np.linspace(-2, 2, 40).astype(np.float32)
    out = np.zeros(40, np.int32)
    k.masked_logic[(1,)](x, out, -1.0, 1.0, 40, BLOCK=64, backend=backend)
    inside = (x > -1) & (x < 1)
    np.testing.assert_array_equal(out, inside + 2 * ~inside)


@pytest.mark.parametrize("with_bias", [False, True])
def test_none_argument(ported, backend, with_bias):
    k = ported("misc")
    x = RNG.standard_normal(50).astype(np.float32)
    bias = RNG.standard_normal(50).astype(np.float32) if with_bias else None
    out = np.empty_like(x)
    k.optional_bias[(1,)](x, bias, out, 50, BLOCK=64, backend=backend)
    assert_close(out, f64(x) + (f64(bias) if with_bias else 0))


def test_split_join_interleave_flip(ported, backend):
    k = ported("misc")
    B = 16
    x = RNG.standard_normal((B, 2)).astype(np.float32)
    out = np.zeros(5 * B, np.float32)
    k.split_join[(1,)](x, out, BLOCK=B, backend=backend)
    re, im = x[:, 0], x[:, 1]
    np.testing.assert_array_equal(out[:2 * B], np.stack([im, re], 1).ravel())
    np.testing.assert_array_equal(out[2 * B:4 * B], np.stack([re * 2, im * 3], 1).ravel())
    np.testing.assert_array_equal(out[4 * B:], re[::-1])


def test_sort_and_gather(ported, backend):
    k = ported("misc")
    B = 32
    x = RNG.standard_normal(B).astype(np.float32)
    x[3] = x[7]
    idx = RNG.integers(0, B, B).astype(np.int32)
    out = np.zeros(3 * B, np.float32)
    k.sort_gather[(1,)](x, idx, out, BLOCK=B, backend=backend)
    np.testing.assert_array_equal(out[:B], np.sort(x))
    np.testing.assert_array_equal(out[B:2 * B], np.sort(x)[::-1])
    np.testing.assert_array_equal(out[2 * B:], x[idx])


def test_umulhi(ported, backend):
    k = ported("misc")
    a = RNG.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    b = RNG.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    out = np.zeros(64, np.uint32)
    k.umulhi_kernel[(1,)](a, b, out, BLOCK=64, backend=backend)
    np.testing.assert_array_equal(out, ((a.astype(np.uint64) * b) >> np.uint64(32)).astype(np.uint32))


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_type_introspection(ported, backend, dtype):
    k = ported("misc")
    x = np.arange(16).astype(dtype)
    out = np.zeros(16, dtype)
    k.type_introspection[(1,)](x, out, BLOCK=16, backend=backend)
    np.testing.assert_array_equal(out, (x * 2 if dtype == np.float32 else x + 1) + 32)


def test_early_exit_in_loop(ported, backend):
    k = ported("misc")
    x = np.ones(1000, np.float32)
    out = np.zeros(2, np.float32)
    k.early_exit_loop[(2,)](x, out, 1000, 300.0, BLOCK=128, backend=backend)
    np.testing.assert_array_equal(out, [384.0, 384.0])
    k.early_exit_loop[(2,)](x, out, 1000, 5000.0, BLOCK=128, backend=backend)
    np.testing.assert_array_equal(out, [-1000.0, -1000.0])


def test_device_assert(ported, backend):
    k = ported("misc")
    x = np.linspace(0.5, 3, 40).astype(np.float32)
    out = np.empty_like(x)
    k.device_checks[(1,)](x, out, 40, BLOCK=64, debug=True, backend=backend)
    assert_close(out, np.log(f64(x)))
    x[7] = -1
    with pytest.raises(AssertionError, match="inputs must be positive"):
        k.device_checks[(1,)](x, out, 40, BLOCK=64, debug=True, backend=backend)
    k.device_checks[(1,)](x, out, 40, BLOCK=64, backend=backend)  # debug off: not checked


def test_every_atomic(ported, backend):
    k = ported("misc")
    B = 32
    v = RNG.integers(0, 200, B).astype(np.int32)
    buf = np.zeros(20 + B + 4, np.int32)
    buf[4:8] = 1 << 20
    buf[12:16] = -1
    buf[20:20 + B] = np.arange(B) + 1000
    out = np.zeros(B, np.int32)
    k.atomics_all[(1,)](buf, v, out, BLOCK=B, backend=backend)
    groups = [v[s::4] for s in range(4)]
    np.testing.assert_array_equal(buf[0:4], [g.max() for g in groups])
    np.testing.assert_array_equal(buf[4:8], [g.min() for g in groups])
    np.testing.assert_array_equal(buf[8:12], [np.bitwise_or.reduce(g) for g in groups])
    np.testing.assert_array_equal(buf[12:16], [np.bitwise_and.reduce(g | 0x100) for g in groups])
    np.testing.assert_array_equal(buf[16:20], [np.bitwise_xor.reduce(g) for g in groups])
    np.testing.assert_array_equal(buf[20:20 + B], v)
    np.testing.assert_array_equal(out, np.arange(B) + 1000)
    np.testing.assert_array_equal(buf[20 + B:], [B // 4] * 4)
