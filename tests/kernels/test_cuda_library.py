"""The CUDA source of every kernel configuration the library launches (per dtype, variant and
size class, as kernels/configs.py picks them for backend "cuda") is generated with no GPU and
compiled with NVRTC (or nvcc) for sm_80 and sm_90.

The configurations are collected by calling the library functions with backend="cuda" while
`kernel[grid](...)` is redirected to `kernel.compile(...)`: the exact arguments, constexprs and
num_warps the library would launch with, no device needed.
"""

from __future__ import annotations

import kdsl.kernels as K
import numpy as np
import pytest
from kcases import DTYPES, rand
from kdsl.backends import cuda

import kdsl as kd

needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")


def _calls(dtype: str):
    """Library calls covering each kernel variant for `dtype`."""
    rng = np.random.default_rng(0)
    r = lambda *shape: rand(rng, shape, dtype)
    f32 = np.ones(64, np.float32)
    yield "softmax_fused", lambda: K.softmax(r(4, 100), backend="cuda")
    yield "softmax_online", lambda: K.softmax(r(2, 9000), backend="cuda")
    yield "layer_norm", lambda: K.layer_norm(r(4, 64), f32, f32, backend="cuda")
    yield "rms_norm", lambda: K.rms_norm(r(4, 64), f32, backend="cuda")
    for act in (None, "relu", "gelu", "silu"):
        yield f"matmul_{act}", lambda act=act: K.matmul(r(100, 64), r(64, 100), f32[:1].repeat(100),
                                                      act, backend="cuda")
    yield "matmul_small", lambda: K.matmul(r(8, 16), r(16, 8), backend="cuda")
    yield "mlp", lambda: K.mlp(r(8, 32), r(32, 48), r(32, 48), r(48, 32), backend="cuda")
    for causal in (False, True):
        yield f"attention_causal{causal}", lambda causal=causal: K.attention(
            r(1, 4, 64, 64), r(1, 2, 64, 64), r(1, 2, 64, 64), causal=causal, backend="cuda")
    yield "softmax_backward", lambda: K.softmax_backward(r(4, 100), r(4, 100), backend="cuda")
    yield "layer_norm_backward", lambda: K.layer_norm_backward(r(4, 64), r(4, 64), f32, f32,
                                                               backend="cuda")
    yield "rms_norm_backward", lambda: K.rms_norm_backward(r(4, 64), r(4, 64), f32,
                                                           backend="cuda")
    yield "attention_backward", lambda: K.attention_backward(
        r(1, 4, 64, 64), r(1, 4, 64, 64), r(1, 2, 64, 64), r(1, 2, 64, 64), r(1, 4, 64, 64),
        causal=True, backend="cuda")
    table = np.arange(8, dtype=np.int32).reshape(2, 4)
    yield "decode", lambda: K.decode_attention(
        r(2, 4, 64), r(8, 16, 2, 64), r(8, 16, 2, 64), table, np.array([30, 64], np.int32),
        backend="cuda")
    long_table = np.arange(32, dtype=np.int32).reshape(2, 16)
    yield "decode_split", lambda: K.decode_attention(  # flash-decoding: 16 blocks, 4 runs
        r(2, 4, 64), r(32, 16, 2, 64), r(32, 16, 2, 64), long_table,
        np.array([250, 64], np.int32), backend="cuda")
    for bits, w in ((8, np.zeros((64, 32), np.int8)), (4, np.zeros((32, 32), np.uint8))):
        yield f"quant_int{bits}", lambda bits=bits, w=w: K.quant_matmul(
            r(8, 64), w, np.ones((2, 32), np.float32), 32, bits, backend="cuda")
    for bits, w in ((8, np.zeros((256, 32), np.int8)), (4, np.zeros((128, 32), np.uint8))):
        yield f"quant_int{bits}_split_k", lambda bits=bits, w=w: K.quant_matmul(
            r(8, 256), w, np.ones((8, 32), np.float32), 32, bits, backend="cuda")
    layout = np.array([[True, False], [True, True]])
    for block in (32, 128):
        yield f"block_sparse_{block}", lambda block=block: K.block_sparse_matmul(
            r(40, 2 * block), r(3, block, block), layout, block, np.ones(2 * block, np.float32),
            "gelu", backend="cuda")
    yield "sparsify_2_4", lambda: K.sparsify_2_4(r(64, 48), backend="cuda")
    values, meta = K.reference.sparsify_2_4(r(64, 48))
    yield "semi_structured", lambda: K.semi_structured_matmul(
        r(40, 64), K.reference.cast(values, dtype), meta, f32[:48], "relu", backend="cuda")


def test_semi_structured_uses_sparse_tensor_cores(monkeypatch):
    """float16/bfloat16 2:4 products take the mma.sp kernel on CUDA, float32 the gather one."""
    seen: list = []
    monkeypatch.setattr(kd.JITFunction, "__getitem__", lambda self, grid: _Recorder(self, seen))
    rng = np.random.default_rng(0)
    for dtype, sparse_mma in (("float16", True), ("bfloat16", True), ("float32", False)):
        seen.clear()
        values, meta = K.reference.sparsify_2_4(rng.standard_normal((64, 48)))
        K.semi_structured_matmul(rand(rng, (40, 64), dtype), K.reference.cast(values, dtype),
                                 meta, backend="cuda")
        sources = "".join(ck.source for _, ck in seen)
        assert ("kd_mma_sp_m16n8k32" in sources) == sparse_mma, dtype


class _Recorder:
    def __init__(self, jit, seen):
        self.jit, self.seen = jit, seen

    def __call__(self, *args, backend=None, num_warps=None, **constexprs):
        ck = self.jit.compile(*args, backend=backend, num_warps=num_warps, **constexprs)
        self.seen.append((self.jit.__name__, ck))
        return ck


def _compiled(dtype: str, monkeypatch) -> dict[str, list]:
    found: dict[str, list] = {}
    seen: list = []
    monkeypatch.setattr(kd.JITFunction, "__getitem__", lambda self, grid: _Recorder(self, seen))
    for name, call in _calls(dtype):
        seen.clear()
        call()
        assert seen, f"{name}: launched no kernel"
        found[name] = list(seen)
    return found


# Generating and compiling one dtype's ~16 kernels takes ~15 s on 2 cores: the default run
# covers float32 for sm_90; the other dtypes and sm_80 are slow cases.
MATRIX = [pytest.param(d, a, marks=() if (d, a) == ("float32", "sm_90") else pytest.mark.slow)
          for d in DTYPES for a in ("sm_90", "sm_80")]


@needs_compiler
@pytest.mark.parametrize("dtype, arch", MATRIX)
def test_library_compiles_for_cuda(dtype, arch, monkeypatch):
    found = _compiled(dtype, monkeypatch)
    sources = {ck.source: f"{case}:{kernel}" for case, cks in found.items() for kernel, ck in cks}
    for source, what in sources.items():
        assert "__global__" in source, what
        cubin = cuda.compile_cubin(source, arch)
        assert cubin[:4] == b"\x7fELF", f"{what} ({arch})"
