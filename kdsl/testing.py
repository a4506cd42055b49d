"""Helpers for checking kernels: dtype-aware tolerances and comparisons against float64 references.

The tolerance rule (docs/numerics.md): an output of dtype `d` computed by a reduction of length `k`
(1 for elementwise work) may differ from the float64 reference by

    atol = rtol = c * eps_d * sqrt(k)

where `eps_d` is the machine epsilon of `d` (float16: 2**-10, bfloat16: 2**-7, float32: 2**-23,
float64: 2**-52) and `c = 8` covers the few-ULP error of the math functions and of reassociated
sums.  The sqrt(k) term is the standard deviation of a sum of k independently rounded terms.
Mixed precision (a float32 reduction, then one rounding to a 16-bit output) charges the reduction
at float32's epsilon: `c * eps_f32 * sqrt(k) + c * eps_d`.  Integers must match exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

_EPS = {
    "float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52,
}
_SAFETY = 8.0


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


def _dtype_name(dtype) -> str:
    """Name of a kdsl DType, NumPy dtype, NumPy scalar type or string."""
    if isinstance(dtype, str):
        return dtype
    if hasattr(dtype, "kind") and hasattr(dtype, "bits"):  # kdsl DType
        return dtype.name
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)


def tolerance(dtype, k: int = 1, acc_dtype=None, k_out: int = 1) -> Tolerance:
    """Tolerance for an output of `dtype` (NumPy dtype, kdsl DType or name) after a reduction of
    length `k`.

    With `acc_dtype` (mixed precision: the k-long reduction ran in `acc_dtype`, typically float32,
    and only `k_out` roundings to `dtype` reach the output), the reduction is charged at the
    accumulator's epsilon and the output's epsilon only for its own roundings:
    `c * eps(acc) * sqrt(k) + c * eps(dtype) * sqrt(k_out)` (docs/numerics.md)."""
    name = _dtype_name(dtype)
    if name not in _EPS:
        return Tolerance(0.0, 0.0)
    if acc_dtype is None:
        t = _SAFETY * _EPS[name] * math.sqrt(max(1, k))
    else:
        acc = _dtype_name(acc_dtype)
        t = _SAFETY * _EPS[acc] * math.sqrt(max(1, k))
        if name != acc:
            t += _SAFETY * _EPS[name] * math.sqrt(max(1, k_out))
    return Tolerance(t, t)


def assert_close(actual, expected, dtype=None, k: int = 1, what: str = "output",
                 acc_dtype=None, k_out: int = 1) -> None:
    """Assert `actual` matches the float64 `expected` within `tolerance(dtype, k, acc_dtype,
    k_out)`; NaN must match NaN.  `dtype` defaults to actual's dtype (bfloat16 given as uint16
    bits must pass dtype)."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    dtype = dtype or actual.dtype
    if _dtype_name(dtype) == "bfloat16" and actual.dtype == np.uint16:
        actual = (actual.astype(np.uint32) << 16).view(np.float32)
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != reference {e.shape}"
    tol = tolerance(dtype, k, acc_dtype, k_out)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    bad = nan_a != nan_e
    both = ~(nan_a | nan_e)
    with np.errstate(invalid="ignore"):
        err = np.abs(a - e)
        inf_ok = np.isinf(e) & (a == e)
        bad |= both & ~inf_ok & (err > tol.atol + tol.rtol * np.abs(e))
    if bad.any():
        idx = np.argwhere(bad)[:5]
        worst = [(tuple(int(x) for x in i), a[tuple(i)], e[tuple(i)]) for i in idx]
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.size} elements differ beyond atol=rtol={tol.atol:.3g}"
            f" ({_dtype_name(dtype)}, k={k}); first (index, got, expected): {worst}"
        )


# The comparison and timing tools live in their own modules; `kd.testing` is their public home.
from .bench import Timings, do_bench
from .compare import CompareReport, compare

__all__ = ["CompareReport", "Timings", "Tolerance", "assert_close", "compare", "do_bench",
           "tolerance"]
