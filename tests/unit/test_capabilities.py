"""Every op a backend cannot run is a CompilationError naming the kernel line and the backends
that can, and `kdsl info`'s capability matrix agrees with docs/language.md ("Backend support"):
its backend-specific gaps are the table's, every cell it marks unsupported is a
CompilationError, every op the table says runs on a backend compiles there."""

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from kdsl.backends import all_backend_names, get_backend

import kdsl as kd
from kdsl.lowering.caps import TYPE_NEEDS
from kdsl.lowering.elementwise import NEEDS_CAP
from kdsl.tools import capabilities as caps

DOC = Path(__file__).parents[2] / "docs" / "language.md"
BACKENDS = {"interp", "llvm", "opencl", "cuda"}


def _loadable() -> list[str]:
    out = []
    for b in all_backend_names():
        try:
            get_backend(b)
            out.append(b)
        except Exception:  # a backend whose code generator does not load here has no column
            pass
    return out


def _table() -> list[tuple[str, str]]:
    """(ops cell, backends cell) of each row of the "Backend support" table."""
    text = DOC.read_text().split("## Backend support", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in text.splitlines() if line.startswith("| ")]
    return [(a.strip(), b.strip()) for a, b in rows[1:]]


def declared_ops() -> dict[str, set[str]]:
    """matrix row ("libdevice.j0") -> the backends the table says run it."""
    out = {}
    for ops, where in _table():
        names = re.findall(r"`(libdevice\.\w+|\w+)`", ops)
        if ops.startswith("any "):  # a type's row, not ops
            continue
        for n in names:
            out[n] = {b for b in BACKENDS if re.search(rf"\b{b}\b", where)}
    return out


def _backend_set(text: str) -> set[str]:
    return {b for b in BACKENDS if re.search(rf"\b{b}\b", text)}


def test_the_table_is_the_code():
    declared = declared_ops()
    assert {f"libdevice.{k}" for k in NEEDS_CAP} == set(declared)
    for kind, (_cap, text) in NEEDS_CAP.items():
        assert _backend_set(text) == declared[f"libdevice.{kind}"], kind
    types = {re.search(r"`(\w+)`", ops).group(1): where for ops, where in _table()
             if ops.startswith("any ")}
    assert set(types) == set(TYPE_NEEDS)
    for name, (_cap, text) in TYPE_NEEDS.items():
        assert _backend_set(text) == _backend_set(types[name])


def test_declared_gaps_compile_exactly_where_the_table_says():
    declared = declared_ops()
    backends = _loadable()
    controls = ["add", "exp", "atomic_add", "cumprod", "libdevice.sin", "libdevice.lgamma"]
    m = caps.capability_matrix(backends=backends, ops=sorted(declared) + controls)
    assert not caps.crashes(m)
    gaps = caps.backend_gaps(m)
    assert {op for op, _ in gaps} == set(declared)
    for (op, _dt), bad in gaps.items():
        assert bad == set(backends) - declared[op], op
    mod = caps._cap_module(caps.cap_ops())
    for op, ok in declared.items():
        for b in set(backends) - ok:
            kern = getattr(mod, caps._kernel_name(op))
            with pytest.raises(kd.CompilationError) as info:
                kern.compile(np.zeros(256, np.float32), np.zeros(256, np.float32),
                             np.zeros(256, np.float32), backend=b, BLOCK=256)
            text = str(info.value)
            assert re.search(r"line \d+, in cap_", text) and caps.cap_ops()[op] in text
            assert _backend_set(text.splitlines()[-1]) - {b} == ok, text


def test_float64_on_a_device_without_it(monkeypatch):
    pytest.importorskip("pyopencl")
    be = get_backend("opencl")
    real = type(be).target
    monkeypatch.setattr(type(be), "target", lambda self, nw: dataclasses.replace(
        real(self, nw), missing=frozenset({"fp64"})))

    @kd.jit
    def widen(x_ptr, out_ptr, BLOCK: kd.constexpr):
        offs = kd.arange(0, BLOCK)
        y = kd.load(x_ptr + offs).to(kd.float64) * 3.0
        kd.store(out_ptr + offs, y.to(kd.float32))

    x = np.zeros(16, np.float32)
    with pytest.raises(kd.CompilationError) as info:
        widen.compile(x, x, backend="opencl", BLOCK=16)
    text = str(info.value)
    assert "y = kd.load(x_ptr + offs).to(kd.float64) * 3.0" in text and "cl_khr_fp64" in text
    assert _backend_set(text.splitlines()[-1]) == BACKENDS
    widen.compile(x, x, backend="llvm", BLOCK=16)  # the others are untouched

    @kd.jit
    def narrow(x_ptr, out_ptr, BLOCK: kd.constexpr):
        offs = kd.arange(0, BLOCK)
        kd.store(out_ptr + offs, kd.load(x_ptr + offs) * 3.0)

    narrow.compile(x, x, backend="opencl", BLOCK=16)  # float32 compiles without fp64


def test_format_marks_gaps_and_crashes():
    m = {"llvm": {"j0": {"float32": "ok"}, "x": {"float32": "KeyError: 'x'"}},
         "opencl": {"j0": {"float32": "CompilationError: no"}, "x": {"float32": "ok"}}}
    text = caps.format_matrix(m)
    assert re.search(r"j0 +-ocl", text) and re.search(r"x +!-llv", text)
    assert caps.crashes(m) == [("llvm", "x", "float32", "KeyError: 'x'")]


@pytest.mark.slow
def test_full_matrix_agrees_with_the_table():
    """Every op of the language and libdevice, every dtype, every backend (a few minutes)."""
    declared = declared_ops()
    backends = _loadable()
    m = caps.capability_matrix(refresh=True) if set(backends) == set(all_backend_names()) \
        else caps.capability_matrix(backends=backends)
    assert not caps.crashes(m), caps.crashes(m)[:5]
    for (op, _dt), bad in caps.backend_gaps(m).items():
        assert op in declared and bad == set(backends) - declared[op], (op, bad)
