"""The `== 1` specialisation of integer arguments (as Triton's launcher does): an int argument
equal to 1 compiles the kernel with that parameter as the constant 1 (`CompileOptions.
equal_to_1`, out of the runtime signature), so `offs * stride` is contiguous; it is part of the
key (memory and disk caches, fast launch path) and `do_not_specialize` turns it off."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kdsl as kd
from kdsl.runtime.jit import K_ONE


@kd.jit
def strided_scale(x_ptr, y_ptr, n, stride, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    mask = offs < n
    x = kd.load(x_ptr + offs * stride, mask=mask, other=0.0)
    # the constant keeps the runtime scalar's type: `.to()` works (in Triton, where the
    # parameter becomes a constexpr, it would not)
    kd.store(y_ptr + offs, x * 2.0 + stride.to(kd.int64), mask=mask)


def _strided(backend, kernel, stride, n=40, block=16):
    x = np.arange(n * 3, dtype=np.float32)
    y = np.zeros(n, np.float32)
    ck = kernel[(kd.cdiv(n, block),)](x, y, n, stride, BLOCK=block, backend=backend)
    want = x[: n * stride : stride].astype(np.float64) * 2 + stride
    np.testing.assert_array_equal(y, want.astype(np.float32))
    return ck


def _fresh(**opts):
    return kd.jit(**opts)(strided_scale.fn)


def test_stride_one_and_three_are_two_specialisations(backend):
    k = _fresh()
    one = _strided(backend, k, 1)
    three = _strided(backend, k, 3)
    assert one is not three and len(k.cache) == 2
    assert one.kernel.options.equal_to_1 == ("stride",)
    assert three.kernel.options.equal_to_1 == ()
    assert _strided(backend, k, 1) is one and _strided(backend, k, 3) is three  # cached
    assert sorted(key[K_ONE] for key in k.cache) == [(False, False, False, False),
                                                   (False, False, False, True)]


@pytest.mark.parametrize("opts, n_kernels", [({"do_not_specialize": ["stride"]}, 1),
                                             ({"do_not_specialize": [3]}, 1),
                                             ({"do_not_specialize_on_alignment": ["stride"]}, 2)])
def test_do_not_specialize_keeps_one_kernel(backend, opts, n_kernels):
    """do_not_specialize turns the `== 1` case off (Triton's `specialize=False`);
    do_not_specialize_on_alignment does not (it is the `% 16` key only, as in Triton)."""
    k = _fresh(**opts)
    one = _strided(backend, k, 1)
    three = _strided(backend, k, 3)
    assert len(k.cache) == n_kernels and (one is three) == (n_kernels == 1)
    assert one.kernel.options.equal_to_1 == (() if n_kernels == 1 else ("stride",))


def test_the_constant_is_in_the_tile_ir_and_out_of_the_signature():
    ck = _fresh().compile(np.zeros(4, np.float32), np.zeros(4, np.float32), 4, 1, BLOCK=16,
                          backend="interp")
    tile = ck.ir["tile"]
    assert "stride: constexpr = 1" in tile and "%stride = const() {value=1} : int32" in tile
    assert [p.name for p in ck.kernel.runtime_params] == ["x_ptr", "y_ptr", "n"]
    # offs * 1 folded away: the load's pointer is x_ptr + offs
    assert re.search(r"(%\d+) = splat\(%x_ptr\).*\n.* = addptr\(\1, %offs\)",
                     ck.ir["tile.canonicalize"])


def test_only_python_ints_of_unannotated_parameters():
    """Not specialised: a bool (int1), a NumPy integer scalar (its own dtype), a parameter
    annotated with a type (as in Triton), a `kd.constexpr(1)` (a constexpr, not the int32
    constant: it is in the key as a compile-time value)."""
    @kd.jit
    def k(y_ptr, a, b, c: kd.int32, BLOCK: kd.constexpr):
        offs = kd.arange(0, BLOCK)
        kd.store(y_ptr + offs, offs * a + b + c)

    y = np.zeros(8, np.int32)
    ck = k.compile(y, True, np.int32(1), 1, BLOCK=8, backend="interp")
    assert ck.kernel.options.equal_to_1 == ()
    ck = k.compile(y, kd.constexpr(1), 1, 1, BLOCK=8, backend="interp")
    assert ck.kernel.options.equal_to_1 == ("b",)
    assert "a: constexpr = 1" in ck.ir["tile"] and "%a = const" not in ck.ir["tile"]


def test_fast_path_keys_the_one_case(backend):
    """Plain launches take the fast path (fastpath.py) for both strides, each to its own
    kernel, with the right numbers every time (the stride-1 kernel gets no stride slot)."""
    k = _fresh()
    for _ in range(3):
        for s in (1, 3, 1):
            x = np.arange(120, dtype=np.float32)
            y = np.zeros(40, np.float32)
            ck = k[(3,)](x, y, 40, s, BLOCK=16) if backend == "llvm" else \
                k[(3,)](x, y, 40, s, BLOCK=16, backend=backend)
            np.testing.assert_array_equal(y, x[: 40 * s : s] * 2 + s)
            assert ck.kernel.options.equal_to_1 == (("stride",) if s == 1 else ())
    assert len(k.cache) == 2
    if backend == "llvm":
        assert len(k._fast) == 2


def test_disk_cache_keeps_them_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    k = _fresh()
    args = (np.zeros(4, np.float32), np.zeros(4, np.float32), 4)
    three = k.compile(*args, 3, BLOCK=16, backend="interp")
    k.cache.clear()
    one = k.compile(*args, 1, BLOCK=16, backend="interp")
    assert one.kernel.options.equal_to_1 == ("stride",) and three.kernel.options.equal_to_1 == ()
    k.cache.clear()
    assert k.compile(*args, 1, BLOCK=16, backend="interp").ir["tile"] == one.ir["tile"]
    assert len(list(tmp_path.rglob("*.kc"))) == 2


@kd.jit
def copy_scaled(x_ptr, y_ptr, stride, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    kd.store(y_ptr + offs, kd.load(x_ptr + offs * stride) * 2.0)


def test_llvm_stride_one_loads_are_vectors():
    if "llvm" not in kd.available_backends():
        pytest.skip("llvm backend unavailable")
    x, y = np.zeros(1024, np.float32), np.zeros(256, np.float32)
    one = copy_scaled.compile(x, y, 1, BLOCK=256, backend="llvm")
    assert "stride" not in one.ir["loop"].splitlines()[0]
    assert re.search(r"load <\d+ x float>", one.ir["llvm.opt"]), one.ir["llvm.opt"][:2000]
    assert re.search(r"vmovups|vmulps\s+[-\w]*\(", one.ir["asm"])
    for s in (1, 3):
        xs = np.arange(256 * s, dtype=np.float32)
        copy_scaled[(1,)](xs, y, s, BLOCK=256)
        np.testing.assert_array_equal(y, xs[::s] * 2)
