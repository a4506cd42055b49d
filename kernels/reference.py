"""float64 NumPy references of every library kernel, with the same signatures.

Each accepts what the kernel accepts (NumPy arrays, device arrays, torch tensors, bfloat16
views or ml_dtypes arrays), computes in float64 on the host and returns a float64 NumPy array.  They are
the ground truth of the tests (never another backend).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kdsl.runtime.binding import DTypeView

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _torch_host(x: Any, dtype: Any = None) -> np.ndarray | None:
    """A NumPy copy of a torch tensor (bfloat16 and autograd tensors included), else None."""
    if (type(x).__module__ or "").split(".", 1)[0] != "torch" or not hasattr(x, "detach"):
        return None
    import torch

    t = x.detach().cpu()
    if dtype is not None or t.dtype == torch.bfloat16:
        t = t.to(torch.float64)  # exact for every float dtype
    return t.numpy()


def to_float64(x: Any) -> np.ndarray:
    """A float64 host copy of an array in any spelling the library accepts."""
    t = _torch_host(x, np.float64)
    if t is not None:
        return t
    if isinstance(x, DTypeView):  # bfloat16 bits
        bits = x.array.get() if hasattr(x.array, "get") else np.asarray(x.array)
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if not isinstance(x, np.ndarray) and hasattr(x, "get"):  # CuPy / PyOpenCL
        x = x.get()
    x = np.asarray(x)
    return x.astype(np.float64)


def _host(x: Any) -> np.ndarray:
    t = _torch_host(x)
    if t is not None:
        return t
    if not isinstance(x, np.ndarray) and hasattr(x, "get"):
        return x.get()
    return np.asarray(x)


def softmax(x: Any, axis: int = -1, backend: str | None = None) -> np.ndarray:
    x = to_float64(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x: Any, weight: Any, bias: Any, eps: float = 1e-5,
               backend: str | None = None) -> np.ndarray:
    x = to_float64(x)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * to_float64(weight) + to_float64(bias)


def rms_norm(x: Any, weight: Any, eps: float = 1e-6, backend: str | None = None) -> np.ndarray:
    x = to_float64(x)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * to_float64(weight)


def gelu(x: np.ndarray) -> np.ndarray:
    """The erf form: x * Phi(x)."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


ACTIVATIONS = {None: lambda x: x, "relu": lambda x: np.maximum(x, 0.0), "gelu": gelu,
               "silu": silu}


def matmul(a: Any, b: Any, bias: Any = None, activation: str | None = None,
           backend: str | None = None) -> np.ndarray:
    c = to_float64(a) @ to_float64(b)
    if bias is not None:
        c = c + to_float64(bias)
    return ACTIVATIONS[activation](c)


def mlp(x: Any, w_gate: Any, w_up: Any, w_down: Any, backend: str | None = None) -> np.ndarray:
    x = to_float64(x)
    h = silu(x @ to_float64(w_gate)) * (x @ to_float64(w_up))
    return h @ to_float64(w_down)


def attention(q: Any, k: Any, v: Any, causal: bool = False, scale: float | None = None,
              backend: str | None = None) -> np.ndarray:
    """[batch, heads, seq, dim]; k/v may have fewer heads (grouped-query); causal masking is
    aligned to the end (query i sees keys j <= i + seq_k - seq_q)."""
    q, k, v = to_float64(q), to_float64(k), to_float64(v)
    heads, kv_heads = q.shape[1], k.shape[1]
    k = np.repeat(k, heads // kv_heads, axis=1)
    v = np.repeat(v, heads // kv_heads, axis=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = np.einsum("bhmd,bhnd->bhmn", q, k) * scale
    if causal:
        sq, sk = q.shape[2], k.shape[2]
        keep = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)
        s = np.where(keep, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhmn,bhnd->bhmd", p / p.sum(-1, keepdims=True), v)


def decode_attention(q: Any, k_cache: Any, v_cache: Any, block_table: Any, seq_lens: Any,
                     scale: float | None = None, backend: str | None = None) -> np.ndarray:
    """q [batch, heads, dim]; caches [num_blocks, block_size, kv_heads, dim]; a sequence of
    length 0 gives zeros."""
    q, kc, vc = to_float64(q), to_float64(k_cache), to_float64(v_cache)
    table, lens = _host(block_table), _host(seq_lens)
    batch, heads, dim = q.shape
    block_size, kv_heads = kc.shape[1], kc.shape[2]
    group = heads // kv_heads
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    out = np.zeros((batch, heads, dim))
    for b in range(batch):
        n = int(lens[b])
        if n == 0:
            continue
        blocks = table[b, :-(-n // block_size)]
        keys = kc[blocks].reshape(-1, kv_heads, dim)[:n]    # [n, kv_heads, dim]
        vals = vc[blocks].reshape(-1, kv_heads, dim)[:n]
        for h in range(heads):
            s = keys[:, h // group] @ q[b, h] * scale
            p = np.exp(s - s.max())
            out[b, h] = (p / p.sum()) @ vals[:, h // group]
    return out


def dequantize(w_q: Any, scales: Any, group_size: int, bits: int) -> np.ndarray:
    """The float64 weights [K, N] that `quant_matmul` multiplies by (docs/kernels.md)."""
    w = _host(w_q)
    if bits == 4:
        w = w.astype(np.int64)
        q = np.empty((2 * w.shape[0], w.shape[1]), np.int64)
        q[0::2] = (w & 0xF) - 8   # low nibble: even k
        q[1::2] = (w >> 4) - 8    # high nibble: odd k
    else:
        q = w.astype(np.int64)
    s = np.repeat(to_float64(scales), group_size, axis=0)
    return q.astype(np.float64) * s


def quant_matmul(x: Any, w_q: Any, scales: Any, group_size: int, bits: int,
                 backend: str | None = None) -> np.ndarray:
    return to_float64(x) @ dequantize(w_q, scales, group_size, bits)



# ------------------------------------------------------------------------------ sparsity

def block_sparse_dense(b_blocks: Any, layout: Any, block: int) -> np.ndarray:
    """The float64 dense b [K, N] of a block-sparse operand (docs/kernels.md): tile t of
    `b_blocks` sits at the t-th nonzero of `layout` in row-major order."""
    lay = _host(layout) != 0
    tiles = to_float64(b_blocks)
    b = np.zeros((lay.shape[0] * block, lay.shape[1] * block))
    for t, (i, j) in enumerate(zip(*np.nonzero(lay))):
        b[i * block:(i + 1) * block, j * block:(j + 1) * block] = tiles[t]
    return b


def block_sparse_matmul(a: Any, b_blocks: Any, layout: Any, block: int, bias: Any = None,
                        activation: str | None = None, backend: str | None = None) -> np.ndarray:
    return matmul(a, block_sparse_dense(b_blocks, layout, block), bias, activation)


def sparsify_2_4(w: Any, backend: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(values [K // 2, N] float64, meta [K // 2, N] int8): in each group of 4 rows of a
    column, the two largest magnitudes (a NaN counts as the largest; ties to the lower
    index), in index order."""
    w = to_float64(w)
    K, N = w.shape
    g = w.reshape(K // 4, 4, N)
    mag = np.where(np.isnan(g), np.inf, np.abs(g))
    # stable sort on -magnitude: equal magnitudes keep index order (ties to the lower index)
    order = np.argsort(-mag, axis=1, kind="stable")[:, :2]
    meta = np.sort(order, axis=1)                      # [K // 4, 2, N], index order
    values = np.take_along_axis(g, meta, axis=1)
    return values.reshape(K // 2, N), meta.reshape(K // 2, N).astype(np.int8)


def semi_structured_dense(values: Any, meta: Any) -> np.ndarray:
    """The float64 dense w [K, N] of a 2:4 operand: w[4 * (j // 2) + meta[j, n], n] =
    values[j, n]."""
    v, m = to_float64(values), _host(meta).astype(np.int64)
    K2, N = v.shape
    w = np.zeros((2 * K2, N))
    rows = 4 * (np.arange(K2) // 2)[:, None] + m
    np.add.at(w, (rows, np.broadcast_to(np.arange(N), (K2, N))), v)
    return w


def semi_structured_matmul(x: Any, values: Any, meta: Any, bias: Any = None,
                           activation: str | None = None, backend: str | None = None
                           ) -> np.ndarray:
    return matmul(x, semi_structured_dense(values, meta), bias, activation)

# ------------------------------------------------------------------------------ gradients

def softmax_backward(dy: Any, y: Any, axis: int = -1, backend: str | None = None) -> np.ndarray:
    """Input gradient of softmax from the output gradient `dy` and the output `y`."""
    dy, y = to_float64(dy), to_float64(y)
    return y * (dy - (dy * y).sum(axis=axis, keepdims=True))


def _norm_grads(dy: np.ndarray, xhat: np.ndarray, rstd: np.ndarray, w: np.ndarray,
                centred: bool) -> tuple[np.ndarray, np.ndarray]:
    g = dy * w
    dx = g - xhat * (g * xhat).mean(-1, keepdims=True)
    if centred:
        dx = dx - g.mean(-1, keepdims=True)
    lead = tuple(range(dy.ndim - 1))
    return dx * rstd, (dy * xhat).sum(axis=lead)


def layer_norm_backward(dy: Any, x: Any, weight: Any, bias: Any, eps: float = 1e-5,
                        backend: str | None = None) -> tuple[np.ndarray, ...]:
    """(dx, dweight, dbias) of layer_norm."""
    dy, x = to_float64(dy), to_float64(x)
    mean = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)
    dx, dw = _norm_grads(dy, (x - mean) * rstd, rstd, to_float64(weight), True)
    return dx, dw, dy.sum(axis=tuple(range(dy.ndim - 1)))


def rms_norm_backward(dy: Any, x: Any, weight: Any, eps: float = 1e-6,
                      backend: str | None = None) -> tuple[np.ndarray, ...]:
    """(dx, dweight) of rms_norm."""
    dy, x = to_float64(dy), to_float64(x)
    rstd = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return _norm_grads(dy, x * rstd, rstd, to_float64(weight), False)


def attention_backward(do: Any, q: Any, k: Any, v: Any, o: Any, causal: bool = False,
                       scale: float | None = None, backend: str | None = None
                       ) -> tuple[np.ndarray, ...]:
    """(dq, dk, dv) of attention; `o` is not read (delta comes from the exact P)."""
    do, q, k, v = to_float64(do), to_float64(q), to_float64(k), to_float64(v)
    heads, kv_heads = q.shape[1], k.shape[1]
    group = heads // kv_heads
    kr, vr = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = np.einsum("bhmd,bhnd->bhmn", q, kr) * scale
    if causal:
        sq, sk = q.shape[2], k.shape[2]
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dv = np.einsum("bhmn,bhmd->bhnd", p, do)
    dp = np.einsum("bhmd,bhnd->bhmn", do, vr)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    dq = np.einsum("bhmn,bhnd->bhmd", ds, kr) * scale
    dk = np.einsum("bhmn,bhmd->bhnd", ds, q) * scale
    b, _, sk, d = k.shape
    fold = (b, kv_heads, group, sk, d)  # a kv head's gradient sums its query heads'
    return dq, dk.reshape(fold).sum(2), dv.reshape(fold).sum(2)


def cast(x: Any, dtype: str) -> Any:
    """`x` (NumPy) rounded to `dtype` ("float32", "float16", "bfloat16", ...) in the spelling
    the library takes: bfloat16 becomes a `bfloat16_view` of uint16 bits (round to nearest
    even), other dtypes a NumPy array."""
    if dtype != "bfloat16":
        return np.ascontiguousarray(np.asarray(x, dtype=dtype))
    from kdsl.runtime.binding import bfloat16_view

    b = np.ascontiguousarray(np.asarray(x, np.float32)).view(np.uint32)
    bits = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return bfloat16_view(bits.astype(np.uint16))
