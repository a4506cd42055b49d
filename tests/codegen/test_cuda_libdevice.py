"""CUDA C for kernels using every supported libdevice function (and so every new math op of
the Tile IR) is generated with no GPU and compiles with NVRTC for sm_80 and sm_90."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from kdsl.backends import cuda

import kdsl as kd
from kdsl.ir import mathops
from kdsl.language.extra import libdevice as ld
from kdsl.language.libdevice_table import TABLE

needs_compiler = pytest.mark.skipif(not cuda.compiler_available(),
                                    reason="neither NVRTC nor nvcc works here")

_NP = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "uint32": np.uint32,
       "int64": np.int64, "uint64": np.uint64, "int1": np.int8}


_TYPES = ("float32", "float64", "int32", "uint32", "int64", "uint64")


def _signature(name: str) -> tuple[tuple[str, ...], str]:
    """The first libdevice signature of `name` (pow: its integer-exponent form)."""
    sigs = TABLE[name][0]
    args, res = sigs[0]
    return tuple(a.name for a in args), res.name


def _specs() -> tuple:
    """(function, indices of its argument types, index of its result type, output row)."""
    rows = dict.fromkeys(_TYPES, 0)
    specs = []
    for name in sorted(ld.SUPPORTED):
        args, res = _signature(name)
        res = "int32" if res == "int1" else res
        specs.append((getattr(ld, name), tuple(_TYPES.index(a) for a in args),
                      _TYPES.index(res), rows[res]))
        rows[res] += 1
    return tuple(specs)


SPECS = _specs()


@kd.jit
def every_function(p0, p1, p2, p3, p4, p5, o0, o1, o2, o3, o4, o5, BLOCK: kd.constexpr):
    """Calls every supported libdevice function on loaded tiles of its signature's dtypes;
    each result goes to a row of the output array of its type."""
    offs = kd.arange(0, BLOCK)
    v = (kd.load(p0 + offs), kd.load(p1 + offs), kd.load(p2 + offs), kd.load(p3 + offs),
         kd.load(p4 + offs), kd.load(p5 + offs))
    outs = (o0, o1, o2, o3, o4, o5)
    for spec in SPECS:
        f, a, res, row = spec
        if len(a) == 1:
            r = f(v[a[0]])
        elif len(a) == 2:
            r = f(v[a[0]], v[a[1]])
        elif len(a) == 3:
            r = f(v[a[0]], v[a[1]], v[a[2]])
        else:
            r = f(v[a[0]], v[a[1]], v[a[2]], v[a[3]])
        kd.store(outs[res] + row * BLOCK + offs, r)


_COMPILED: list = []


def _compiled():
    if not _COMPILED:
        arrays = [np.zeros(4, _NP[t]) for t in _TYPES] * 2
        _COMPILED.append(every_function.compile(*arrays, BLOCK=32, backend="cuda",
                                                num_warps=1))
    return _COMPILED[0]


def _source() -> str:
    return _compiled().source


def test_every_supported_function_generates_cuda():
    text = _source()
    for fn in ("tanf(", "lgammaf(", "j0f(", "jnf(", "ldexpf(", "nextafterf(", "__clz(",
               "__popc(", "erfcf(", "roundf(", "rintf(", "remainderf(", "y1f(", "exp10f("):
        assert fn in text, fn


@needs_compiler
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_libdevice_kernel_compiles(arch):
    cubin = cuda.compile_cubin(_source(), arch)
    assert cubin[:4] == b"\x7fELF"


def test_the_kernel_uses_every_new_math_op():
    tile_ir = _compiled().ir["tile"]
    kinds = set(re.findall(r"= (\w+)\(", tile_ir))
    new_ops = set(mathops.UNARY) | set(mathops.BINARY)  # the ops beyond the basic set
    assert new_ops <= kinds, new_ops - kinds
    assert len(ld.SUPPORTED) == 197
    assert all(len(inspect.signature(getattr(ld, n)).parameters) >= 2 for n in ld.SUPPORTED)
