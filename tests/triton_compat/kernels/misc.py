import triton
import triton.language as tl


@triton.heuristics(values={"EVEN_N": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def scaled_copy(x_ptr, out_ptr, scale, n, BLOCK: tl.constexpr, EVEN_N: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN_N:
        x = tl.load(x_ptr + offs)
        tl.store(out_ptr + offs, x * scale)
    else:
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(out_ptr + offs, x * scale, mask=offs < n)


@triton.jit(do_not_specialize=["n"])
def masked_logic(x_ptr, out_ptr, lo, hi, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    inside = (x > lo) and (x < hi)
    outside = not inside
    tl.store(out_ptr + offs, inside.to(tl.int32) + 2 * outside.to(tl.int32), mask=offs < n)


@triton.jit
def optional_bias(x_ptr, bias_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if bias_ptr is not None:
        x += tl.load(bias_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x, mask=m)


@triton.jit
def split_join(x_ptr, out_ptr, BLOCK: tl.constexpr):
    # x holds BLOCK (re, im) pairs; out gets (im, re) interleaved, then flipped halves
    offs = tl.arange(0, BLOCK)
    pair = tl.load(x_ptr + offs[:, None] * 2 + tl.arange(0, 2)[None, :])
    re, im = tl.split(pair)
    swapped = tl.interleave(im, re)
    tl.store(out_ptr + tl.arange(0, 2 * BLOCK), swapped)
    joined = tl.join(re * 2, im * 3)
    tl.store(out_ptr + 2 * BLOCK + offs[:, None] * 2 + tl.arange(0, 2)[None, :], joined)
    tl.store(out_ptr + 4 * BLOCK + offs, tl.flip(re, 0))


@triton.jit
def sort_gather(x_ptr, idx_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.sort(x))
    tl.store(out_ptr + BLOCK + offs, tl.sort(x, descending=True))
    idx = tl.load(idx_ptr + offs)
    tl.store(out_ptr + 2 * BLOCK + offs, tl.gather(x, idx, 0))


@triton.jit
def umulhi_kernel(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    tl.store(out_ptr + offs, tl.umulhi(a, b))


@triton.jit
def type_introspection(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.static_print("introspection", x.dtype)
    dt: tl.constexpr = x_ptr.type.element_ty
    if dt.is_floating():
        y = x * 2
    else:
        y = x + 1
    bits = dt.primitive_bitwidth
    tl.static_assert(x.dtype == dt)
    tl.store(out_ptr + offs, y + bits)


@triton.jit
def early_exit_loop(x_ptr, out_ptr, n, limit, BLOCK: tl.constexpr):
    # each program sums blocks until the running total passes `limit`, then leaves
    pid = tl.program_id(0)
    total = 0.0
    for i in range(0, n, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        total += tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0))
        if total > limit:
            tl.store(out_ptr + pid, total)
            return
    tl.store(out_ptr + pid, -total)


@triton.jit
def device_checks(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=1.0)
    tl.device_assert(x > 0, "inputs must be positive")
    tl.store(out_ptr + offs, tl.log(x), mask=offs < n)


@triton.jit
def atomics_all(ptr, val_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(val_ptr + offs)
    slot = offs % 4
    tl.atomic_max(ptr + slot, v)
    tl.atomic_min(ptr + 4 + slot, v)
    tl.atomic_or(ptr + 8 + slot, v)
    tl.atomic_and(ptr + 12 + slot, v | 0x100)
    tl.atomic_xor(ptr + 16 + slot, v)
    old = tl.atomic_xchg(ptr + 20 + offs, v)
    tl.store(out_ptr + offs, old)
    tl.atomic_add(ptr + 20 + BLOCK + slot, 1, sem="relaxed", scope="gpu")
