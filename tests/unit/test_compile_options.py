"""`CompileOptions` (kdsl/compile_options.py): one frozen record of what changes the compiled
code, built by the launcher, carried by the tile function and the lowered kernel, and part of
the disk cache key together with the lowering's `Target`."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

import kdsl as kd
from kdsl.compile_options import CompileOptions
from kdsl.runtime import cache
from kdsl.runtime.jit import jit
from kdsl.target import Target


def test_frozen_with_a_stable_key():
    o = CompileOptions(num_warps=8, fast_math=True, multiple_of_16=("x_ptr",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.fast_math = False  # type: ignore[misc]
    assert o.key() == CompileOptions(num_warps=8, fast_math=True, multiple_of_16=("x_ptr",)).key()
    keys = {CompileOptions(**{f.name: v}).key() for f, v in zip(
        dataclasses.fields(CompileOptions), (2, 1, True, True, True, ("n",), ("s",), 64))}
    assert len(keys | {CompileOptions().key()}) == len(dataclasses.fields(CompileOptions)) + 1


@kd.jit
def scale(x_ptr, o_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(o_ptr + offs, kd.load(x_ptr + offs, mask=m) * 2.0, mask=m)


def test_the_launch_options_reach_the_kernel():
    x = np.arange(32, dtype=np.float32)
    ck = scale.compile(x, np.empty_like(x), 32, BLOCK=32, backend="llvm", fast_math=True,
                       num_stages=2)
    o = ck.kernel.options
    assert (o.fast_math, o.num_stages, o.check, o.debug) == (True, 2, False, False)
    assert set(o.multiple_of_16) == {"x_ptr", "o_ptr", "n"}  # NumPy buffers: 16-byte aligned
    assert ck.kernel.stored_indices() == (1,)


def test_key_has_the_options_and_the_target():
    base = cache.make_key("v", "src", ("s",), "llvm", "h", CompileOptions(), Target("llvm"))
    assert base == cache.make_key("v", "src", ("s",), "llvm", "h", CompileOptions(),
                                  Target("llvm"))
    others = [cache.make_key("v", "src", ("s",), "llvm", "h", CompileOptions(check=True),
                             Target("llvm")),
              cache.make_key("v", "src", ("s",), "llvm", "h", CompileOptions(),
                             Target("llvm", shared_bytes=1024)),
              cache.make_key("v", "src", ("s",), "llvm", "h", CompileOptions(),
                             Target("llvm", ops=frozenset({"exp"})))]
    assert len({base, *others}) == 4


def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: "kd.constexpr"):  # noqa: UP037
    pass


def test_another_target_is_another_disk_entry(fake, monkeypatch):
    """Two compiles that differ only in the lowering's Target never share an entry."""
    from conftest import FakePipeline

    x = np.zeros(8, np.float32)

    def launch():
        return jit(_add)[(1,)](x, x, np.empty_like(x), 8, BLOCK=4, backend="fake")

    launch()
    n = FakePipeline.compiles
    launch()  # same target: a disk hit
    assert FakePipeline.compiles == n
    monkeypatch.setattr(fake, "target", lambda self, num_warps: Target("fake", threads=64))
    launch()
    assert FakePipeline.compiles == n + 1
    assert len(list(Path(os.environ["KDSL_CACHE_DIR"]).rglob("*.kc"))) == 2
