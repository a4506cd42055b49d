"""Non-contiguous inputs: the kernels that take strides read row slices, transposed matrices
and permuted attention tensors in place; every other layout is copied first.  Each result is
checked against the float64 reference of a contiguous copy."""

import numpy as np
import pytest
from kcases import check, rand, skip_heavy
from kdsl.kernels import _validate as V
from kdsl.kernels import attention, layer_norm, matmul, mlp, quant_matmul, rms_norm, softmax
from kdsl.kernels import reference as R

from kdsl.testing import assert_close


def _wide(rng, rows, n, pad=5, dtype="float32"):
    """x[:, :n] of a wider buffer: rows `n + pad` apart."""
    return rand(rng, (rows, n + pad), dtype)[:, :n]


def test_row_kernels_read_row_slices(backend, rng):
    x = _wide(rng, 6, 40)
    assert not x.flags.c_contiguous
    w, b = rand(rng, 40, "float32"), rand(rng, 40, "float32")
    assert_close(softmax(x, backend=backend), R.softmax(x), k=40)
    assert_close(layer_norm(x, w, b, backend=backend), R.layer_norm(x, w, b), k=40)
    assert_close(rms_norm(x, w, backend=backend), R.rms_norm(x, w), k=40)


def test_row_layouts_in_place_or_copied(rng):
    base = rand(rng, (4, 3, 20), "float32")
    # view -> row stride when read in place (leading dims collapse into one stride), else None
    cases = {
        "sliced columns": (base[:, :, :16], 20),
        "reversed rows": (base[::-1, ::-1], -20),
        "one batch": (base[1:2], 20),
        "every other batch": (base[::2], None),     # rows 0, 20, 40, then 120: no one stride
        "reversed middle axis": (base[:, ::-1], None),
        "strided columns": (base[:, :, ::2], None),
        "transposed": (base.transpose(1, 0, 2), None),
    }
    for name, (x, want) in cases.items():
        view, stride = V.row_layout(V.as_arg("x", x, V.FLOATS, strided=True))
        assert np.array_equal(np.asarray(view.data), x.reshape(-1, x.shape[-1])), name
        assert np.shares_memory(view.data, base) == (want is not None), name
        assert stride == (want if want is not None else x.shape[-1]), name
        assert_close(softmax(x, backend="interp"), R.softmax(x), k=x.shape[-1])


def test_matmul_blas_layouts(backend, rng):
    M, K, N = 19, 24, 13
    a, b = rand(rng, (M, K), "float32"), rand(rng, (K, N), "float32")
    at = np.ascontiguousarray(a.T).T          # column-major a
    bt = np.ascontiguousarray(b.T).T          # torch's w.t() of a [N, K] weight
    b_wide = rand(rng, (K, N + 7), "float32")[:, :N]
    for x, y in [(at, b), (a, bt), (at, bt), (a, b_wide), (a[::-1], b)]:
        assert_close(matmul(x, y, backend=backend), R.matmul(x, y), k=K)
    a3 = rand(rng, (3, K, M), "float32").transpose(0, 2, 1)  # batched, column-major
    assert_close(matmul(a3, bt, backend=backend), R.matmul(a3, bt), k=K)
    strided = rand(rng, (M, 2 * K), "float32")[:, ::2]  # neither layout: copied
    assert_close(matmul(strided, b, backend=backend), R.matmul(strided, b), k=K)


def test_blas_layout_choices(rng):
    a = rand(rng, (6, 8), "float32")
    for x, want in [(a, (False, 8)), (a.T, (True, 8)), (a[:, :5], (False, 8)),
                    (a[:4].T, (True, 8)), (a[:, ::2], (False, 4))]:
        arg, trans, ld, _ = V.blas_layout(V.as_arg("a", x, V.FLOATS, strided=True))
        assert (trans, ld) == want, x.strides
        assert np.array_equal(np.asarray(arg.data), x)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_attention_reads_permuted_tensors(backend, rng, dtype):
    skip_heavy(backend, dtype)
    B, S, H, D = 2, 9, 2, 16
    # [batch, seq, heads, dim] -> [batch, heads, seq, dim] views, as a model lays them out
    qkv = rand(rng, (B, S, 3, H, D), "float32")
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    if dtype == "bfloat16":
        bits = R.cast(qkv, "bfloat16")
        qkv_b = bits.array
        q, k, v = (V.bfloat16_view(qkv_b[:, :, i].transpose(0, 2, 1, 3)) for i in range(3))
    o = attention(q, k, v, causal=True, backend=backend)
    assert_close(R.to_float64(o), R.attention(q, k, v, causal=True), dtype=dtype, k=S)


def test_other_kernels_copy_strided_inputs(rng):
    x = _wide(rng, 5, 16)
    wg, wu = rand(rng, (16, 24), "float32") * 0.3, rand(rng, (16, 24), "float32") * 0.3
    wd = np.ascontiguousarray(rand(rng, (8, 24), "float32").T * 0.3)
    check(mlp(x, wg.T.copy().T, wu, wd.T.copy().T, backend="interp"), R.mlp(x, wg, wu, wd),
          "float32", k=40)
    wq = rng.integers(-127, 128, (16, 12)).astype(np.int8)
    s = (rng.random((2, 12)) * 0.02).astype(np.float32)
    check(quant_matmul(x, wq[:, ::1].T.copy().T, s, 8, 8, backend="interp"),
          R.quant_matmul(x, wq, s, 8, 8), "float32", k=16)
