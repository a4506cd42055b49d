"""A kernel reads module globals when it compiles; a launch that would reuse a kernel compiled
with an older value raises an error naming the global (as Triton does), on the fast launch path
too, and clearing the kernel's cache recompiles with the new value."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import kdsl as kd

SCALE = 2.0
BLOCK = kd.constexpr(16)
EXPONENT = 1


@kd.jit
def scaled(x_ptr, out_ptr):
    offs = kd.arange(0, BLOCK)
    kd.store(out_ptr + offs, kd.load(x_ptr + offs) * SCALE + EXPONENT)


def _launch(backend):
    x = np.arange(16, dtype=np.float32)
    out = np.zeros(16, np.float32)
    scaled[(1,)](x, out, backend=backend)
    return x, out


def test_a_changed_global_is_an_error_not_a_stale_kernel(backend):
    module = sys.modules[__name__]
    scaled.cache.clear()
    try:
        x, out = _launch(backend)
        np.testing.assert_array_equal(out, x * 2 + 1)
        _launch(backend)  # again: the fast path where there is one
        module.SCALE = 3.0
        with pytest.raises(RuntimeError, match="global variable 'SCALE' has changed.*2.0 to 3.0"):
            _launch(backend)
        with pytest.raises(RuntimeError, match="SCALE"):
            _launch(backend)  # and again (no stale fast entry either)
        scaled.cache.clear()
        x, out = _launch(backend)
        np.testing.assert_array_equal(out, x * 3 + 1)
    finally:
        module.SCALE = 2.0
        scaled.cache.clear()


def test_unchanged_and_untouched_globals_cost_nothing():
    scaled.cache.clear()
    _launch("interp")
    assert set(n for n, _ in scaled._globals) >= {"SCALE", "BLOCK", "EXPONENT"}
    assert not any(n in ("kd", "np") for n, _ in scaled._globals)  # modules are not tracked
    _launch("interp")  # an equal value is no change
