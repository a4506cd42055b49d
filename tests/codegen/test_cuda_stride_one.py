"""The `== 1` specialisation on CUDA (no GPU needed): the tutorial-style matmul launched with
unit inner strides compiles with those strides as the constant 1, so its A and B tile loads
are contiguous and become vector accesses (`ld.global.v4`/`.v2` in the PTX for sm_80 and
sm_90); with strides the kernel cannot see (do_not_specialize) every global load stays
scalar."""

from __future__ import annotations

import numpy as np
import pytest
from kdsl.backends import cuda

import kdsl as kd
from kdsl.ir import loop

needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")


def matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
           stride_cm, stride_cn, BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr,
           BLOCK_K: kd.constexpr):
    pid_m = kd.program_id(0)
    pid_n = kd.program_id(1)
    rm = (pid_m * BLOCK_M + kd.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + kd.arange(0, BLOCK_N)) % N
    rm = kd.max_contiguous(kd.multiple_of(rm, BLOCK_M), BLOCK_M)
    rn = kd.max_contiguous(kd.multiple_of(rn, BLOCK_N), BLOCK_N)
    rk = kd.arange(0, BLOCK_K)
    a_tile = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_tile = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = kd.zeros((BLOCK_M, BLOCK_N), dtype=kd.float32)
    for kk in range(kd.cdiv(K, BLOCK_K)):
        left = K - kk * BLOCK_K
        a = kd.load(a_tile, mask=rk[None, :] < left, other=0.0)
        b = kd.load(b_tile, mask=rk[:, None] < left, other=0.0)
        acc = kd.dot(a, b, acc)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk
    cm = pid_m * BLOCK_M + kd.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + kd.arange(0, BLOCK_N)
    kd.store(c_ptr + cm[:, None] * stride_cm + cn[None, :] * stride_cn, acc.to(kd.float16),
             mask=(cm[:, None] < M) & (cn[None, :] < N))


specialised = kd.jit(matmul)
unspecialised = kd.jit(do_not_specialize=["stride_ak", "stride_bn", "stride_cn"])(matmul)
N = 256
f16 = np.zeros(16, np.float16)
ARGS = (f16, f16, f16, N, N, N, N, 1, N, 1, N, 1)
CX = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}


def _vec_loads(kernel: loop.Kernel) -> int:
    def walk(stmts):
        for s in stmts:
            yield s
            for attr in ("body", "then", "orelse", "cond_body"):
                yield from walk(getattr(s, attr, []) or [])
    # 16-byte accesses: vector loads, or the copies straight to shared memory (cp.async) that
    # the tensor-core dot makes of them
    return sum(isinstance(s, (loop.VecLoad, loop.AsyncCopy)) for s in walk(kernel.body))


def test_unit_strides_are_constants_and_give_vector_loads():
    ck = specialised.compile(*ARGS, backend="cuda", num_warps=4, **CX)
    assert ck.kernel.options.equal_to_1 == ("stride_ak", "stride_bn", "stride_cn")
    assert [p.name for p in ck.kernel.params][-3:] == ["stride_am", "stride_bk", "stride_cm"]
    assert _vec_loads(ck.kernel) >= 2  # the A and B tiles
    plain = unspecialised.compile(*ARGS, backend="cuda", num_warps=4, **CX)
    assert plain.kernel.options.equal_to_1 == () and _vec_loads(plain.kernel) == 0


@needs_compiler
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_unit_strides_give_vector_loads_in_ptx(arch):
    def loads(kernel):
        ptx = cuda.compile_ptx(kernel.compile(*ARGS, backend="cuda", num_warps=4, **CX).source,
                               arch)
        return [ln.split()[0] for ln in ptx.splitlines()
                if ln.strip().startswith(("ld.global", "cp.async.cg.shared.global"))]

    vec = loads(specialised)
    assert any(op.startswith(("ld.global.v4", "ld.global.v2", "cp.async")) for op in vec), vec
    scalar = loads(unspecialised)
    assert scalar and not any(".v" in op for op in scalar), scalar
