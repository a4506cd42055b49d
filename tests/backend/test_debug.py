"""Debugging in kernels on every backend: kd.device_assert (and `assert` on runtime values) in
debug mode and its absence otherwise, kd.device_print / print (the same lines everywhere),
kd.static_print, kd.debug_barrier, breakpoint(), and checked mode on atomics."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

import kdsl as kd
from kdsl.runtime.compiler import CompiledKernel
from kdsl.backends import get_backend


@kd.jit
def checked_double(x_ptr, y_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    x = kd.load(x_ptr + offs, mask=m)
    kd.device_assert(x >= 0, "x must be non-negative", mask=m)
    assert kd.program_id(0) < 4, "too many programs"
    kd.store(y_ptr + offs, x * 2, mask=m)


def _line(fn, text: str) -> int:
    import inspect
    lines, start = inspect.getsourcelines(getattr(fn, "fn", fn))
    return start + next(i for i, ln in enumerate(lines) if text in ln)


def test_device_assert_fires_with_debug(backend):
    x = np.arange(100, dtype=np.float32)
    y = np.zeros_like(x)
    checked_double[(4,)](x, y, 100, BLOCK=32, backend=backend, debug=True)  # holds: no error
    np.testing.assert_array_equal(y, 2 * x)
    x[70] = -1
    with pytest.raises(kd.DeviceAssertionError) as info:
        checked_double[(4,)](x, y, 100, BLOCK=32, backend=backend, debug=True)
    err = info.value
    assert isinstance(err, AssertionError)
    assert err.line == _line(checked_double, "kd.device_assert") and err.msg == \
        "x must be non-negative"
    assert err.program_id == (2, 0, 0)
    text = str(err)
    assert f"{__file__}:{err.line}" in text and "x must be non-negative" in text
    assert "element (6,)" in text  # lane 6 of program 2 is x[70]


def test_python_assert_on_runtime_value_is_device_assert(backend):
    x = np.zeros(200, np.float32)
    with pytest.raises(kd.DeviceAssertionError, match="too many programs") as info:
        checked_double[(7,)](x, x.copy(), 200, BLOCK=32, backend=backend, debug=True)
    assert info.value.line == _line(checked_double, "assert kd.program_id(0) < 4")


def test_device_assert_off_without_debug(backend):
    x = -np.ones(100, np.float32)
    y = np.zeros_like(x)
    checked_double[(4,)](x, y, 100, BLOCK=32, backend=backend)  # off: nothing is checked
    np.testing.assert_array_equal(y, 2 * x)


def _kernel(with_assert: bool):
    @kd.jit
    def same(x_ptr, y_ptr, n, BLOCK: kd.constexpr):
        offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
        m = offs < n
        x = kd.load(x_ptr + offs, mask=m)
        if with_assert:
            kd.device_assert(x >= 0, "x must be non-negative", mask=m)
            assert x.sum() > 0, "sum"
        kd.store(y_ptr + offs, x * 2, mask=m)
    return same


def test_debug_off_costs_nothing(codegen_backend):
    """Without debug the assertions leave no trace in the generated code."""
    x = np.zeros(64, np.float32)
    plain = _kernel(False).compile(x, x, 64, BLOCK=32, backend=codegen_backend)
    off = _kernel(True).compile(x, x, 64, BLOCK=32, backend=codegen_backend)
    on = _kernel(True).compile(x, x, 64, BLOCK=32, backend=codegen_backend, debug=True)
    assert off.source == plain.source
    assert off.checks is None and on.checks is not None
    assert on.source != plain.source and "kd_errors" in on.source


def test_debug_switches(monkeypatch):
    x = -np.ones(32, np.float32)

    @kd.jit(debug=True)
    def always(x_ptr):
        kd.device_assert(kd.load(x_ptr + kd.arange(0, 32)) > 0, "positive")

    with pytest.raises(kd.DeviceAssertionError, match="positive"):
        always[(1,)](x, backend="interp")
    always[(1,)](x, backend="interp", debug=False)  # the launch option wins

    @kd.jit
    def env(x_ptr):
        kd.device_assert(kd.load(x_ptr + kd.arange(0, 32)) > 0, "positive")

    env[(1,)](x, backend="llvm")
    monkeypatch.setenv("KDSL_DEBUG", "1")
    with pytest.raises(kd.DeviceAssertionError):
        env[(1,)](x, backend="llvm")
    assert len(env.cache) == 2  # debug is part of the specialisation
    monkeypatch.setenv("KDSL_DEBUG", "0")
    env[(1,)](x, backend="llvm")
    ck = env.compile(x, backend="interp", debug=True)
    assert isinstance(ck, CompiledKernel) and "assert" in ck.ir["tile"]


# -------------------------------------------------------------------------------- printing

@kd.jit
def print_kernel(x_ptr, n, BLOCK: kd.constexpr):
    pid = kd.program_id(0)
    offs = pid * BLOCK + kd.arange(0, BLOCK)
    x = kd.load(x_ptr + offs)
    kd.device_print("x", x)
    print("pid", pid, hex=True)
    kd.device_print("two", x.to(kd.float16), (offs < n).to(kd.int8))
    kd.device_print("2d", kd.reshape(x, (2, BLOCK // 2)).to(kd.int64))
    kd.device_print("neg", (x * -4).to(kd.int16), hex=True)
    kd.device_print("done")


def expected_lines(x: np.ndarray, n: int, block: int, grid: int) -> list[str]:
    """What Triton's format gives (written out by hand, not computed by kdsl)."""
    out = []
    for p in range(grid):
        pid = f"pid ({p}, 0, 0)"
        xs = x[p * block:(p + 1) * block]
        out += [f"{pid} idx ({i}) x: {v:f}" for i, v in enumerate(xs)]
        out.append(f"{pid} idx () pid: 0x{p:08x}")
        out += [f"{pid} idx ({i}) two: (operand 0) {v:f}" for i, v in enumerate(xs)]
        out += [f"{pid} idx ({i}) two: (operand 1) {int(p * block + i < n)}"
                for i in range(block)]
        half = block // 2
        out += [f"{pid} idx ({i // half}, {i % half}) 2d: {int(v)}" for i, v in enumerate(xs)]
        out += [f"{pid} idx ({i}) neg: 0x{int(v * -4) & 0xFFFF:04x}" for i, v in enumerate(xs)]
        out.append(f"{pid} done")
    return out


def test_device_print(backend, capfd):
    if backend == "cuda":
        pytest.skip("CUDA kernels print from the GPU (covered by the code generation tests)")
    x = np.arange(8, dtype=np.float32) * 0.5 - 1  # exact in every format
    print_kernel[(2,)](x, 6, BLOCK=4, backend=backend)
    sys.stdout.flush()
    lines = capfd.readouterr().out.splitlines()
    want = expected_lines(x, 6, 4, 2)
    assert sorted(lines) == sorted(want)
    if backend in ("interp", "llvm"):  # one thread per program: each program's lines in order
        for p in range(2):
            mine = [ln for ln in lines if ln.startswith(f"pid ({p},")]
            assert mine == [ln for ln in want if ln.startswith(f"pid ({p},")]


def test_index_padding_and_prefix_spacing(capfd):
    @kd.jit
    def k(x_ptr):
        kd.device_print("", kd.load(x_ptr + kd.arange(0, 16)))
        kd.device_print("v= ", kd.load(x_ptr + 3))

    k[(1,)](np.arange(16, dtype=np.int32), backend="interp")
    lines = capfd.readouterr().out.splitlines()
    assert lines[0] == "pid (0, 0, 0) idx ( 0): 0" and lines[15] == "pid (0, 0, 0) idx (15): 15"
    assert lines[16] == "pid (0, 0, 0) idx () v=: 3"


def test_print_of_compile_time_values(capfd):
    @kd.jit
    def k(x_ptr, BLOCK: kd.constexpr):
        x = kd.load(x_ptr + kd.arange(0, BLOCK))
        print("x", x.dtype, (BLOCK, 2), BLOCK, x.shape[0] * 2)

    k[(1,)](np.zeros(4, np.float32), BLOCK=4, backend="interp")
    assert capfd.readouterr().out.splitlines() == [
        "pid (0, 0, 0) idx () x float32 (4, 2): (operand 0) 4",
        "pid (0, 0, 0) idx () x float32 (4, 2): (operand 1) 8"]


def test_static_print_runs_at_compile_time(capsys):
    @kd.jit
    def k(x_ptr, BLOCK: kd.constexpr):
        x = kd.load(x_ptr + kd.arange(0, BLOCK))
        kd.static_print("BLOCK is", BLOCK, x, sep="|")
        kd.store(x_ptr + kd.arange(0, BLOCK), x)

    a = np.zeros(8, np.float32)
    k[(1,)](a, BLOCK=8, backend="interp")
    assert capsys.readouterr().out == "BLOCK is|8|tile<8xfloat32>\n"
    k[(1,)](a, BLOCK=8, backend="interp")  # cached: not compiled again, not printed again
    assert capsys.readouterr().out == ""


def test_print_errors():
    @kd.jit
    def k(x_ptr):
        print("x", x_ptr)

    with pytest.raises(kd.CompilationError, match="cannot print pointers"):
        k.compile(np.zeros(4, np.float32), backend="interp")

    @kd.jit
    def j(x_ptr):
        print("x", kd.load(x_ptr), sep=",")

    with pytest.raises(kd.CompilationError, match=r"takes no \['sep'\]"):
        j.compile(np.zeros(4, np.float32), backend="interp")


# ------------------------------------------------------------------- barrier, breakpoint

@kd.jit
def reverse_through_memory(x_ptr, tmp_ptr, y_ptr, BLOCK: kd.constexpr):
    """Each thread writes its elements, then reads another thread's: the barrier orders it."""
    pid = kd.program_id(0)
    offs = kd.arange(0, BLOCK)
    base = pid * BLOCK
    kd.store(tmp_ptr + base + offs, kd.load(x_ptr + base + offs) + 1)
    kd.debug_barrier()
    kd.store(y_ptr + base + offs, kd.load(tmp_ptr + base + BLOCK - 1 - offs))


def test_debug_barrier(backend):
    x = np.arange(4 * 256, dtype=np.float32)
    tmp, y = np.zeros_like(x), np.zeros_like(x)
    reverse_through_memory[(4,)](x, tmp, y, BLOCK=256, backend=backend, num_warps=2)
    np.testing.assert_array_equal(y.reshape(4, 256), (x + 1).reshape(4, 256)[:, ::-1])


def test_debug_barrier_in_the_code(codegen_backend):
    x = np.zeros(256, np.float32)
    src = reverse_through_memory.compile(x, x, x, BLOCK=256, backend=codegen_backend).source
    target = get_backend(codegen_backend).target(4)
    barriers = 1 if target.needs_barriers else 0  # (a one-thread program needs none)
    if target.backend == "opencl":
        assert src.count("barrier(") == barriers
    elif target.backend == "cuda":
        assert src.count("__syncthreads()") == barriers


def test_breakpoint(backend, monkeypatch):
    @kd.jit
    def k(x_ptr, BLOCK: kd.constexpr):
        offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
        x = kd.load(x_ptr + offs)
        breakpoint()  # noqa: T100 - the feature under test
        kd.store(x_ptr + offs, x + 1)

    stops = []
    monkeypatch.setattr(sys, "breakpointhook", lambda: stops.append(dict(sys._getframe(1).f_locals)))
    x = np.arange(8, dtype=np.float32)
    if backend == "interp":
        k[(2,)](x, BLOCK=4, backend=backend)
        assert [s["program_id"] for s in stops] == [(0, 0, 0), (1, 0, 0)]
        np.testing.assert_array_equal(stops[1]["x"], [4, 5, 6, 7])
        assert stops[0]["BLOCK"] == 4 and set(stops[0]["arrays"]) == {"x_ptr"}
    else:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            k.compile(x, BLOCK=4, backend=backend)
        assert any(issubclass(w.category, kd.DebugWarning) and "interp" in str(w.message)
                   for w in caught)
        if backend != "cuda":
            k[(2,)](x, BLOCK=4, backend=backend)
        assert not stops
    if backend != "cuda":
        np.testing.assert_array_equal(x, np.arange(8) + 1)


# ---------------------------------------------------------------- checked mode on atomics

def test_checked_mode_covers_every_atomic(backend):
    @kd.jit
    def k(p_ptr, OP: kd.constexpr):
        offs = kd.arange(0, 8) + kd.program_id(0) * 3
        if OP == "cas":
            kd.atomic_cas(p_ptr + offs, 0, 1)
        else:
            getattr(kd, f"atomic_{OP}")(p_ptr + offs, 1)

    for op in ("add", "max", "xchg", "cas"):
        p = np.zeros(10, np.int32)
        with pytest.raises(kd.OutOfBoundsError) as info:
            k[(2,)](p, OP=op, backend=backend, check=True)
        assert info.value.kind == f"atomic_{op}" and info.value.offset == 10
        assert p.sum() > 0 and p.size == 10  # the in-range lanes ran
