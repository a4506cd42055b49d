"""The tolerance rule and comparisons against float64 references (public as `kd.testing`).

The tolerance rule (docs/numerics.md), used by the tests, `kd.testing.compare`, `kdsl compare`
and the autotuner alike: an output of dtype `d` computed by a reduction of length `k` (1 for
elementwise work) may differ from the float64 reference `ref` element-wise by

    |got - ref| <= atol * scale + rtol * |ref|,   scale = max |ref| (finite elements; 1 if 0)
    atol = rtol = t = min(c * eps_d * sqrt(k), 1/4)

where `eps_d` is the machine epsilon of `d` (float16: 2**-10, bfloat16: 2**-7, float32: 2**-23,
float64: 2**-52) and `c = 8` covers the few-ULP error of the math functions and of reassociated
sums.  The sqrt(k) term is the standard deviation of a sum of k independently rounded terms.
Mixed precision (a float32 reduction, then `k_out` roundings to a 16-bit output) charges the
reduction at float32's epsilon: `t = c * eps_f32 * sqrt(k) + c * eps_d * sqrt(k_out)`.
The absolute part is relative to the reference's magnitude, so a small output (softmax
probabilities) is held to its own scale; the 1/4 cap keeps `atol + rtol < 1`, so that an
all-zero output fails whenever the reference is not all zero.  NaN must match NaN, infinities
must be equal, integers must match exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

_EPS = {
    "float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52,
}
_SAFETY = 8.0
#: the largest t: beyond it an output as wrong as all zeros could pass
MAX_TOL = 0.25


@dataclass(frozen=True)
class Tolerance:
    """`atol` (a fraction of the reference's scale, `scale_of`) and `rtol` (a fraction of each
    element) of the rule; `absolute` makes `atol` an absolute error instead."""

    atol: float
    rtol: float
    absolute: bool = False

    def scale(self, expected: np.ndarray) -> float:
        return 1.0 if self.absolute else scale_of(expected)

    def allowed(self, expected: np.ndarray, scale: float | None = None) -> np.ndarray:
        """The error allowed at each element of the float64 `expected`."""
        s = self.scale(expected) if scale is None else scale
        return self.atol * s + self.rtol * np.abs(np.nan_to_num(expected, posinf=0.0,
                                                                neginf=0.0))


def scale_of(expected: np.ndarray) -> float:
    """The magnitude the absolute tolerance is relative to: the largest finite |expected|, or
    1 when there is none (an all-zero reference is compared in absolute terms)."""
    e = np.abs(np.asarray(expected, np.float64))
    e = e[np.isfinite(e)]
    m = float(e.max()) if e.size else 0.0
    return m if m > 0 else 1.0


def dtype_name(dtype) -> str:
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
    name = dtype_name(dtype)
    if name not in _EPS:
        return Tolerance(0.0, 0.0)
    acc = dtype_name(acc_dtype) if acc_dtype is not None else name
    t = _SAFETY * _EPS.get(acc, _EPS[name]) * math.sqrt(max(1, k))
    if acc != name:
        t += _SAFETY * _EPS[name] * math.sqrt(max(1, k_out))
    t = min(t, MAX_TOL)
    return Tolerance(t, t)


def as_float64(a: Any, dtype: str | None = None) -> np.ndarray:
    """A float64 host copy of an array in any spelling kdsl takes: NumPy (ml_dtypes too), a
    device array (`.get()`), a `bfloat16_view`, or bfloat16 bits as uint16 with
    `dtype="bfloat16"`."""
    from kdsl.runtime.device import to_host
    from kdsl.runtime.dtype_views import DTypeView
    if isinstance(a, DTypeView):
        dtype, a = a.dtype.name, a.array
    a = to_host(a)
    if dtype == "bfloat16" and a.dtype in (np.uint16, np.int16):  # bf16 as its bits
        return (a.astype(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def elementwise_errors(a: np.ndarray, e: np.ndarray, tol: Tolerance,
                       scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(error, allowed error) per element of float64 `a` against float64 `e`: the error is 0
    where they are equal (infinities included) or both NaN, inf where exactly one is NaN or an
    infinity differs.  An element fails where error > allowed."""
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(a - e)
        same = (a == e) | (nan_a & nan_e)
        err = np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))
    return err, tol.allowed(e, scale)


def assert_close(actual, expected, dtype=None, k: int = 1, what: str = "output",
                 acc_dtype=None, k_out: int = 1, atol: float | None = None,
                 rtol: float | None = None) -> None:
    """Assert `actual` matches the float64 `expected` within `tolerance(dtype, k, acc_dtype,
    k_out)` (the rule above); NaN must match NaN.  `dtype` defaults to actual's dtype
    (bfloat16 given as uint16 bits must pass dtype).  `atol`/`rtol` replace the rule by
    explicit bounds, `atol` absolute (as in `numpy.testing.assert_allclose`)."""
    from kdsl.runtime.dtype_views import DTypeView
    if isinstance(actual, DTypeView):
        dtype = dtype or actual.dtype.name
    dtype = dtype or np.asarray(actual).dtype
    a = as_float64(actual, dtype_name(dtype))
    e = as_float64(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != reference {e.shape}"
    if atol is not None or rtol is not None:
        tol = Tolerance(atol or 0.0, rtol or 0.0, absolute=True)
    else:
        tol = tolerance(dtype, k, acc_dtype, k_out)
    scale = tol.scale(e)
    err, allowed = elementwise_errors(a, e, tol, scale)
    bad = err > allowed
    if bad.any():
        idx = np.argwhere(bad)[:5]
        worst = [(tuple(int(x) for x in i), a[tuple(i)], e[tuple(i)]) for i in idx]
        rule = (f"atol={tol.atol:.3g} rtol={tol.rtol:.3g}" if tol.absolute else
                f"atol={tol.atol:.3g} x scale {scale:.3g}, rtol={tol.rtol:.3g}")
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.size} elements differ beyond {rule}"
            f" ({dtype_name(dtype)}, k={k}); first (index, got, expected): {worst}"
        )


__all__ = ["MAX_TOL", "Tolerance", "as_float64", "assert_close", "elementwise_errors",
           "scale_of", "tolerance"]
