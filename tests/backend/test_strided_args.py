"""Arguments as Triton users pass them, on every backend: transposed, sliced and negative-stride
views (the kernel gets the first element and the strides in elements), torch tensors
(non-contiguous, requires_grad, bfloat16), stored strided outputs landing in place, and checked
mode bounding each view by its memory span."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd


@kd.jit
def affine2d(x_ptr, y_ptr, M, N, sxm, sxn, sym, syn, a, b, BM: kd.constexpr,
             BN: kd.constexpr):
    rm = kd.program_id(0) * BM + kd.arange(0, BM)
    rn = kd.arange(0, BN)
    m = (rm[:, None] < M) & (rn[None, :] < N)
    v = kd.load(x_ptr + rm[:, None] * sxm + rn[None, :] * sxn, mask=m)
    kd.store(y_ptr + rm[:, None] * sym + rn[None, :] * syn, v * a + b, mask=m)


@kd.jit
def gather1d(x_ptr, y_ptr, n, step, start, B: kd.constexpr):
    i = kd.arange(0, B)
    m = i < n
    kd.store(y_ptr + i, kd.load(x_ptr + start + i * step, mask=m), mask=m)


def _es(a: np.ndarray) -> tuple[int, ...]:
    """Strides in elements, as a Triton user passes them."""
    return tuple(s // a.itemsize for s in a.strides)


def _launch(x, y, backend, **kw):
    M, N = x.shape
    affine2d[(kd.cdiv(M, 4),)](x, y, M, N, *_es(x), *_es(y), 2.0, 1.0, BM=4, BN=8,
                               backend=backend, **kw)


BASE = np.arange(7 * 9, dtype=np.float32).reshape(7, 9) / 8
VIEWS = {
    "transposed": lambda a: a.T,
    "sliced": lambda a: a[1:6, 2:8],
    "step": lambda a: a[::2, 1::3],
    "negative": lambda a: a[::-1, ::-2],
    "mixed": lambda a: a[5:0:-2, ::2].T,
}


@pytest.mark.parametrize("view", list(VIEWS))
def test_strided_input_and_output_views(backend, view):
    x = VIEWS[view](BASE.copy())
    out_base = np.full((9, 9), -7.0, np.float32)
    y = VIEWS[view](out_base)[: x.shape[0], : x.shape[1]]
    assert y.shape == x.shape and not y.flags.c_contiguous
    before = out_base.copy()
    _launch(x, y, backend)
    np.testing.assert_array_equal(y, x * 2 + 1)  # landed in the user's view
    untouched = ~np.isin(np.arange(out_base.size).reshape(out_base.shape),
                         _indices_of(out_base, y))
    np.testing.assert_array_equal(out_base[untouched], before[untouched])


def _indices_of(base: np.ndarray, view: np.ndarray) -> np.ndarray:
    """Flat indices into `base` of the elements of `view` (a view of it)."""
    start = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0])
    start //= base.itemsize
    idx = np.indices(view.shape).reshape(view.ndim, -1)
    return start + (np.asarray(_es(view))[:, None] * idx).sum(axis=0)


def test_negative_stride_reads_through_the_first_element(backend):
    base = np.arange(16, dtype=np.float32)
    x = base[::-3]  # 15, 12, 9, 6, 3, 0
    y = np.zeros(6, np.float32)
    gather1d[(1,)](x, y, 6, -3, 0, B=8, backend=backend)
    np.testing.assert_array_equal(y, x)
    # elements between the view's own (in its span) are addressable, as in Triton
    gather1d[(1,)](x, y, 6, -1, -1, B=8, backend=backend)
    np.testing.assert_array_equal(y, base[14:8:-1])


def test_checked_mode_bounds_a_view_by_its_span(backend):
    base = np.arange(20, dtype=np.float32)
    x = base[2:18][::-2]  # 17, 15, ..., 3: span base[3..17], pointer at base[17]
    y = np.zeros(8, np.float32)
    gather1d[(1,)](x, y, 8, -2, 0, B=8, backend=backend, check=True)
    np.testing.assert_array_equal(y, x)
    gather1d[(1,)](x, y, 1, 1, -14, B=8, backend=backend, check=True)  # base[3]: in the span
    assert y[0] == 3.0
    for start, bad in ((1, 1), (-15, -15)):  # base[18] after the span, base[2] before it
        with pytest.raises(kd.OutOfBoundsError, match=rf"'x_ptr'.*offset {bad} outside "
                                                      r"\[-14, 1\)") as e:
            gather1d[(1,)](x, y, 1, 1, start, B=8, backend=backend, check=True)
        assert e.value.arg == "x_ptr" and e.value.offset == bad
    t = base.reshape(4, 5).T  # a transposed view spans the whole base: [0, 20)
    with pytest.raises(kd.OutOfBoundsError, match=r"offset 20 outside \[0, 20\)"):
        gather1d[(1,)](t, y, 2, 19, 1, B=8, backend=backend, check=True)


def test_poison_writes_only_the_view(backend):
    if backend != "interp" and backend != "llvm":
        pytest.skip("poison fills host memory before any copy: one backend per kind suffices")
    out_base = np.zeros((4, 6), np.float32)
    y = out_base[:, ::2]
    x = np.ones((4, 3), np.float32)
    _launch(x, y, backend, poison=True)
    np.testing.assert_array_equal(y, 3.0)
    np.testing.assert_array_equal(out_base[:, 1::2], 0.0)  # outside the view: never poisoned


def test_torch_tensors(backend):
    torch = pytest.importorskip("torch")
    x = torch.arange(7 * 9, dtype=torch.float32).reshape(7, 9).div(8).requires_grad_(True)
    xt = x.t()[1:, ::2]  # non-contiguous, requires_grad
    y = torch.full((9, 9), -1.0, dtype=torch.bfloat16).t()[: xt.shape[0], : xt.shape[1]]
    M, N = xt.shape
    affine2d[(kd.cdiv(M, 4),)](xt, y, M, N, *xt.stride(), *y.stride(), 2.0, 1.0, BM=4, BN=8,
                               backend=backend)
    expected = xt.detach().numpy() * 2 + 1
    got = y.float().numpy()
    np.testing.assert_allclose(got, expected, rtol=2**-8)  # bfloat16 rounding
    assert x.grad is None
    h = torch.zeros(M, N, dtype=torch.float16)
    affine2d[(kd.cdiv(M, 4),)](xt, h, M, N, *xt.stride(), *h.stride(), 2.0, 1.0, BM=4, BN=8,
                               backend=backend)
    np.testing.assert_allclose(h.numpy(), expected, rtol=2**-11)
