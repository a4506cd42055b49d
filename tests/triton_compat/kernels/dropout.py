import triton
import triton.language as tl


@triton.jit
def seeded_dropout(x_ptr, out_ptr, n_elements, p, seed, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    random = tl.rand(seed, offsets)
    x_keep = random > p
    output = tl.where(x_keep, x / (1 - p), 0.0)
    tl.store(out_ptr + offsets, output, mask=mask)


@triton.jit
def random_bits(out_ptr, seed, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    r0, r1, r2, r3 = tl.randint4x(seed, offs)
    m = offs < n
    tl.store(out_ptr + 4 * offs, r0, mask=m)
    tl.store(out_ptr + 4 * offs + 1, r1, mask=m)
    tl.store(out_ptr + 4 * offs + 2, r2, mask=m)
    tl.store(out_ptr + 4 * offs + 3, r3, mask=m)


@triton.jit
def random_uniform_normal(u_ptr, z_ptr, seed, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(u_ptr + offs, tl.rand(seed, offs), mask=m)
    tl.store(z_ptr + offs, tl.randn(seed, offs), mask=m)
