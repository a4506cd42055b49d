import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def topk_gating(logits_ptr, weights_ptr, ids_ptr, counts_ptr, n_tokens, n_experts,
                TOPK: tl.constexpr, BLOCK_E: tl.constexpr, RENORMALIZE: tl.constexpr):
    # softmax over experts, the k best by repeated argmax, tokens counted per expert
    tok = tl.program_id(0)
    e = tl.arange(0, BLOCK_E)
    emask = e < n_experts
    x = tl.load(logits_ptr + tok * n_experts + e, mask=emask, other=-float("inf")).to(tl.float32)
    p = tl.exp(x - tl.max(x, axis=0))
    p = p / tl.sum(p, axis=0)
    p = tl.where(emask, p, -1.0)
    total = 0.0
    for k in tl.static_range(TOPK):
        best, best_idx = tl.max(p, axis=0, return_indices=True)
        tl.store(weights_ptr + tok * TOPK + k, best)
        tl.store(ids_ptr + tok * TOPK + k, best_idx)
        tl.atomic_add(counts_ptr + best_idx, 1)
        total += best
        p = tl.where(e == best_idx, -1.0, p)
    if RENORMALIZE:
        w = tl.load(weights_ptr + tok * TOPK + tl.arange(0, TOPK))
        tl.store(weights_ptr + tok * TOPK + tl.arange(0, TOPK), w / total)


@triton.jit
def align_block_size(counts_ptr, offsets_ptr, n_experts, BLOCK_SIZE: tl.constexpr,
                     BLOCK_E: tl.constexpr):
    # padded per-expert offsets: exclusive cumsum of counts rounded up to BLOCK_SIZE
    e = tl.arange(0, BLOCK_E)
    c = tl.load(counts_ptr + e, mask=e < n_experts, other=0)
    padded = tl.cdiv(c, BLOCK_SIZE) * BLOCK_SIZE
    incl = tl.cumsum(padded, axis=0)
    tl.store(offsets_ptr + e + 1, incl, mask=e < n_experts)
    tl.store(offsets_ptr + tl.arange(0, 1), tl.zeros([1], tl.int32))


@triton.jit
def expert_histogram(ids_ptr, counts_ptr, n, NUM_EXPERTS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ids = tl.load(ids_ptr + offs, mask=offs < n, other=0)
    h = tl.histogram(ids, NUM_EXPERTS, mask=offs < n)
    tl.store(counts_ptr + tl.arange(0, NUM_EXPERTS), h)


@triton.jit
def per_token_quant_int8(x_ptr, xq_ptr, scale_ptr, stride_x, stride_xq, N,
                         BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    absmax = tl.maximum(tl.max(tl.abs(x)), 1e-10)
    scale_x = absmax / 127
    x_q = x * (127 / absmax)
    x_q = libdevice.round(x_q).to(tl.int8)
    tl.store(xq_ptr + row * stride_xq + cols, x_q, mask=mask)
    tl.store(scale_ptr + row, scale_x)


@triton.jit
def per_token_quant_fp8(x_ptr, xq_ptr, scale_ptr, N, FP8_MAX: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    scale = tl.maximum(tl.max(tl.abs(x)), 1e-12) / FP8_MAX
    q = tl.clamp(x / scale, -FP8_MAX, FP8_MAX).to(xq_ptr.dtype.element_ty)
    tl.store(xq_ptr + row * N + cols, q, mask=mask)
    tl.store(scale_ptr + row, scale)


@triton.jit
def rint_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(out_ptr + offs, libdevice.rint(x), mask=m)
    tl.store(out_ptr + n + offs, libdevice.trunc(x), mask=m)
    tl.store(out_ptr + 2 * n + offs, libdevice.nearbyint(x), mask=m)
