"""Every library kernel lowered for the CUDA target (tensor cores, 16-bit shared copies,
resident accumulators, 32-thread warps) and run by the Loop IR simulator with its
shared-memory race detector on (`cuda_sim.CudaSimBackend`), against the float64 references of
`kdsl.kernels.reference` under the one tolerance rule of `kdsl compare`.  No GPU needed."""

from __future__ import annotations

import cuda_sim
import numpy as np
import pytest

from kdsl.tools.compare import compare_case

# Small shapes (the simulator runs every thread in Python), ragged where the kernel allows.
SHAPES = {
    "softmax": (4, 100), "rms_norm": (4, 100), "layer_norm": (4, 100),
    "matmul": (40, 32, 48), "mlp": (16, 32, 48), "attention": (1, 2, 32, 32),
    "decode_attention": (2, 2, 32, 40, 16), "quant_matmul": (16, 64, 128, 32),
    "block_sparse_matmul": (32, 64, 64, 32, 50), "semi_structured_matmul": (32, 32, 64),
}
DTYPES = ["float16", pytest.param("bfloat16", marks=pytest.mark.slow),
          pytest.param("float32", marks=pytest.mark.slow)]


@pytest.fixture(scope="module")
def cudasim():
    from kdsl.backends import register_backend, unregister_backend

    from kdsl.runtime import registry

    register_backend(cuda_sim.NAME, "cuda_sim", "CudaSimBackend")
    registry.clear_caches()
    yield cuda_sim.NAME
    unregister_backend(cuda_sim.NAME)
    registry.clear_caches()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_library_kernel_in_the_simulator(cudasim, name, dtype, monkeypatch):
    monkeypatch.setenv("KDSL_AUTOTUNE", "0")  # the first config: tuning would time the simulator
    report = compare_case(name, SHAPES[name], dtype, [cudasim])
    assert report.results, f"{name}: nothing was compared"
    assert report.passed, report.text()


def test_grouped_decode_in_the_simulator(cudasim, monkeypatch):
    """The grouped decode kernel (one program per kv head, dots of a 3-head group padded to
    4 rows), forced on the GPU profile, against the float64 reference."""
    from kdsl.kernels import configs, decode_attention
    from kdsl.kernels import reference as R

    from kdsl.testing import assert_close

    monkeypatch.setattr(configs, "DECODE_GROUP_MIN", {"default": 2})
    rng = np.random.default_rng(3)
    kc, vc = (rng.standard_normal((6, 8, 2, 16)).astype(np.float16) for _ in range(2))
    table = rng.permutation(6).reshape(2, 3).astype(np.int32)
    lens = np.array([19, 7], np.int32)
    q = rng.standard_normal((2, 6, 16)).astype(np.float16)
    o = decode_attention(q, kc, vc, table, lens, backend=cudasim)
    assert_close(o, R.decode_attention(q, kc, vc, table, lens), k=19, k_out=2)


def test_split_decode_in_the_simulator(cudasim, monkeypatch):
    """Flash-decoding on the CUDA lowering (runs of 2 blocks, a ragged and an empty run, a
    sequence of length 0) and the quant kernel split over K, against float64 references."""
    from kdsl.kernels import configs, decode_attention, quant_matmul
    from kdsl.kernels import reference as R

    from kdsl.runtime.launches import record_launches
    from kdsl.testing import assert_close

    monkeypatch.setenv("KDSL_AUTOTUNE", "0")
    monkeypatch.setattr(configs, "DECODE_SPLIT", {"default": {"PROGRAMS": 64, "MAX_SPLIT": 3,
                                                              "MIN_BLOCKS": 2}})
    rng = np.random.default_rng(4)
    kc, vc = (rng.standard_normal((8, 4, 2, 16)).astype(np.float16) for _ in range(2))
    table = np.array([[0, 3, 5, 7, 1, 2], [4, 6, 0, 0, 0, 0]], np.int32)
    lens = np.array([22, 0], np.int32)
    q = rng.standard_normal((2, 2, 16)).astype(np.float16)
    with record_launches() as launches:
        o = decode_attention(q, kc, vc, table, lens, backend=cudasim)
    assert [ln.kwargs.get("SPLIT") for ln in launches] == [3, 3]
    assert_close(o, R.decode_attention(q, kc, vc, table, lens), k=22, k_out=2)
    x = rng.standard_normal((3, 128)).astype(np.float16)
    w = rng.integers(0, 256, (64, 64)).astype(np.uint8)
    sc = (rng.random((4, 64)) * 0.05 + 0.01).astype(np.float32)
    with record_launches() as launches:
        y = quant_matmul(x, w, sc, 32, 4, backend=cudasim)
    assert [ln.jit.fn.__name__ for ln in launches] == ["quant_matmul_kernel", "sum_splits_kernel"]
    assert_close(y, R.quant_matmul(x, w, sc, 32, 4), k=128, k_out=2)
