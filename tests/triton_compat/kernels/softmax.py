import triton
import triton.language as tl


@triton.jit
def softmax_rows(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols,
                 BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    # persistent programs walk the rows with a pipelined range, as the fused-softmax tutorial
    first = tl.program_id(0)
    step = tl.num_programs(0)
    for row in tl.range(first, n_rows, step, num_stages=num_stages):
        cols = tl.arange(0, BLOCK_SIZE)
        valid = cols < n_cols
        x = tl.load(in_ptr + row * in_row_stride + cols, mask=valid, other=-float("inf"))
        x = x.to(tl.float32)
        shifted = x - tl.max(x, axis=0)
        e = tl.exp(shifted)
        y = e / tl.sum(e, axis=0)
        tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty),
                 mask=valid)
