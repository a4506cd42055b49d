"""Numba peers for the CPU benchmarks: softmax, layer norm and RMS norm over the rows of a 2-D
float32 array, `@njit(parallel=True, fastmath=True)` with a `prange` over rows (the strongest
plain-Python CPU peer). `available()` is False when Numba is not installed."""

from __future__ import annotations

import numpy as np

try:
    import numba
    from numba import njit, prange
except ImportError:  # the benchmarks print "no numba" instead
    numba = None


def available() -> bool:
    return numba is not None


if numba is not None:

    @njit(parallel=True, fastmath=True, cache=False)
    def softmax(x, out):
        rows, cols = x.shape
        for i in prange(rows):
            m = x[i, 0]
            for j in range(1, cols):
                m = max(m, x[i, j])
            s = np.float32(0.0)
            for j in range(cols):
                e = np.exp(x[i, j] - m)
                out[i, j] = e
                s += e
            inv = np.float32(1.0) / s
            for j in range(cols):
                out[i, j] *= inv

    @njit(parallel=True, fastmath=True, cache=False)
    def layer_norm(x, w, b, eps, out):
        rows, cols = x.shape
        for i in prange(rows):
            mean = np.float32(0.0)
            for j in range(cols):
                mean += x[i, j]
            mean /= cols
            var = np.float32(0.0)
            for j in range(cols):
                d = x[i, j] - mean
                var += d * d
            rstd = np.float32(1.0) / np.sqrt(var / cols + eps)
            for j in range(cols):
                out[i, j] = (x[i, j] - mean) * rstd * w[j] + b[j]

    @njit(parallel=True, fastmath=True, cache=False)
    def rms_norm(x, w, eps, out):
        rows, cols = x.shape
        for i in prange(rows):
            ss = np.float32(0.0)
            for j in range(cols):
                ss += x[i, j] * x[i, j]
            r = np.float32(1.0) / np.sqrt(ss / cols + eps)
            for j in range(cols):
                out[i, j] = x[i, j] * r * w[j]
