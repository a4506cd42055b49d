"""The ported Triton kernels on CUDA without a GPU: each generates CUDA C that NVRTC (or nvcc)
compiles for sm_80 and sm_90."""

from __future__ import annotations

import numpy as np
import pytest

from kdsl.backends import cuda

needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")
F32, F16, I32 = np.float32, np.float16, np.int32


def z(*shape, dtype=F32):
    return np.zeros(shape, dtype)


# (module, kernel, positional args, meta-parameters)
CASES = [
    ("softmax", "softmax_rows", lambda: [z(8, 100), z(8, 100), 100, 100, 8, 100],
     {"BLOCK_SIZE": 128, "num_stages": 2}),
    ("layernorm", "ln_forward", lambda: [z(4, 300), z(4, 300), z(300), z(300), z(4), z(4), 300,
                                         300, 1e-5], {"BLOCK_SIZE": 128}),
    ("layernorm", "ln_backward_dx", lambda: [z(4, 300), z(4, 300), z(2, 300), z(2, 300),
                                             z(4, 300), z(300), z(4), z(4), z(4, dtype=I32),
                                             300, 300], {"GROUP_SIZE_M": 2, "BLOCK_SIZE_N": 512}),
    ("dropout", "seeded_dropout", lambda: [z(500), z(500), 500, 0.3, 7], {"BLOCK_SIZE": 128}),
    ("dropout", "random_bits", lambda: [z(1200, dtype=np.uint32), 7, 300], {"BLOCK": 128}),
    ("attention", "attn_fwd",
     lambda: [z(1, 2, 64, 16, dtype=F16), z(1, 2, 64, 16, dtype=F16),
              z(1, 2, 64, 16, dtype=F16), 0.5, z(2, 64), z(1, 2, 64, 16, dtype=F16),
              *([2048, 1024, 16, 1] * 4), 1, 2],
     {"N_CTX": 64, "HEAD_DIM": 16, "BLOCK_M": 32, "BLOCK_N": 16, "STAGE": 3}),
    ("attention", "attn_ragged", lambda: [z(45, 16), z(45, 16), z(45, 16), z(45, 16), 0.25, 45,
                                          16], {"HEAD_DIM": 16, "BLOCK_M": 16, "BLOCK_N": 16}),
    ("matmul", "persistent_matmul", lambda: [z(50, 70), z(70, 40), z(50, 40), None, 50, 40, 70,
                                             70, 1, 40, 1, 40, 1],
     {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 2,
      "NUM_SMS": 3, "ACTIVATION": "leaky_relu"}),
    ("matmul", "grouped_gemm", lambda: [z(3, dtype=np.int64), z(3, dtype=np.int64),
                                        z(3, dtype=np.int64), z(9, dtype=I32), z(9, dtype=I32), 3],
     {"NUM_SM": 4, "BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 16}),
    ("matmul", "swizzled_matmul", lambda: [z(40, 48), z(48, 24), z(40, 24), 40, 24, 48, 48, 1,
                                           24, 1, 24, 1],
     {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2}),
    ("llm", "rms_norm_fwd", lambda: [z(4, 200), 200, z(4, 200), 200, z(200), z(4), 200, 1e-6,
                                     0.0], {"BLOCK_SIZE": 256}),
    ("llm", "geglu_fwd", lambda: [z(4, 100), z(4, 100), z(4, 100), 100],
     {"n_cols": 100, "BLOCK_SIZE": 128, "APPROXIMATE": False}),
    ("llm", "rope_fwd", lambda: [z(6, 3, 16), 48, z(4, 8), 8, z(4, 8), 8, 4],
     {"n_qh": 3, "hd": 16, "pad_n_qh": 4, "pad_hd": 16}),
    ("llm", "cross_entropy_fwd_bwd", lambda: [z(5, 300), 300, z(5, dtype=I32), z(5), 300, -100],
     {"BLOCK_SIZE": 128}),
    ("scans", "linear_scan", lambda: [z(100), z(100), z(100), 100], {"BLOCK": 128}),
    ("scans", "welford_var_mean", lambda: [z(10, 150), z(10), z(10), 10, 150],
     {"BLOCK_R": 4, "BLOCK_C": 32}),
    ("moe_quant", "topk_gating", lambda: [z(9, 6), z(9, 2), z(9, 2, dtype=I32), z(6, dtype=I32),
                                          9, 6], {"TOPK": 2, "BLOCK_E": 8, "RENORMALIZE": True}),
    ("moe_quant", "per_token_quant_int8", lambda: [z(5, 90), z(5, 90, dtype=np.int8), z(5), 90,
                                                   90, 90], {"BLOCK": 128}),
    ("misc", "sort_gather", lambda: [z(32), z(32, dtype=I32), z(96)], {"BLOCK": 32}),
    ("misc", "atomics_all", lambda: [z(60, dtype=I32), z(32, dtype=I32), z(32, dtype=I32)],
     {"BLOCK": 32}),
]


@needs_compiler
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}.{c[1]}")
def test_ported_kernel_compiles_for_sm80_and_sm90(ported, case):
    module, kernel, args, meta = case
    ck = getattr(ported(module), kernel).compile(*args(), backend="cuda", **meta)
    for arch in ("sm_80", "sm_90"):
        ptx = cuda.compile_ptx(ck.source, arch)
        assert f".target {arch}" in ptx and ".entry" in ptx
