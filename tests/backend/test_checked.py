"""Checked mode (bounds and hint checks, `kd.OutOfBoundsError`) and NaN poison on every backend.

The done-when test runs out-of-bounds loads and stores in a child process, which catches the
errors and exits normally; the others run in this process (a checked launch never touches
memory outside its arrays, and the unchecked launches here stay inside a larger allocation).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from kdsl.backends import cuda

import kdsl as kd

HERE = Path(__file__).resolve()


@kd.jit
def shifted_copy(x_ptr, y_ptr, n, shift, BLOCK: kd.constexpr):
    pid = kd.program_id(0)
    offs = pid * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    v = kd.load(x_ptr + offs + shift, mask=m)  # LOAD_LINE
    kd.store(y_ptr + offs, v, mask=m)


@kd.jit
def shifted_store(x_ptr, y_ptr, n, shift, BLOCK: kd.constexpr):
    pid = kd.program_id(0)
    offs = pid * BLOCK + kd.arange(0, BLOCK)
    v = kd.load(x_ptr + offs, mask=offs < n)
    kd.store(y_ptr + offs - shift, v, mask=offs < n)  # STORE_LINE


@kd.jit
def loop_rows(x_ptr, y_ptr, rows, cols, BM: kd.constexpr, BN: kd.constexpr):
    # a pointer carried through a loop, on a 2-D tile
    rm = kd.arange(0, BM)
    rn = kd.arange(0, BN)
    p = x_ptr + rm[:, None] * cols + rn[None, :]
    acc = kd.zeros((BM, BN), kd.float32)
    for _ in range(rows):
        acc += kd.load(p)  # LOOP_LINE
        p += BN
    kd.store(y_ptr + rm[:, None] * BN + rn[None, :], acc)


@kd.jit
def hinted(x_ptr, y_ptr, start, BLOCK: kd.constexpr):
    offs = kd.max_contiguous(kd.multiple_of(start + kd.arange(0, BLOCK), 8), 8)  # HINT_LINE
    kd.store(y_ptr + kd.arange(0, BLOCK), kd.load(x_ptr + offs))


@kd.jit
def strided(x_ptr, y_ptr, step, BLOCK: kd.constexpr):
    offs = kd.max_contiguous(kd.arange(0, BLOCK) * step, 4)  # CONTIG_LINE
    kd.store(y_ptr + kd.arange(0, BLOCK), kd.load(x_ptr + offs))


@kd.jit
def partial_write(y_ptr, n, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    kd.store(y_ptr + offs, offs.to(kd.float32), mask=offs < n)


def _line(marker: str) -> int:
    for i, text in enumerate(HERE.read_text().splitlines(), start=1):
        if f"# {marker}" in text and "_line(" not in text:
            return i
    raise AssertionError(marker)


def _kw(backend: str) -> dict:
    return {"backend": backend, "num_warps": 1} if backend.startswith("opencl") else {"backend": backend}


# ---------------------------------------------------------------------------- bounds checks

def test_in_bounds_passes_and_matches(backend):
    x = np.arange(40, dtype=np.float32)
    y = np.zeros(40, np.float32)
    shifted_copy[(5,)](x, y, 40, 0, BLOCK=8, check=True, **_kw(backend))
    np.testing.assert_array_equal(y, x)


def test_masked_off_lanes_are_not_reported(backend):
    # BLOCK 16 > n: the lanes past n are masked off, so offsets past the end are no error
    x = np.arange(10, dtype=np.float32)
    y = np.zeros(10, np.float32)
    shifted_copy[(1,)](x, y, 10, 0, BLOCK=16, check=True, **_kw(backend))
    np.testing.assert_array_equal(y, x)


def test_out_of_bounds_load(backend):
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(32, np.float32)
    with pytest.raises(kd.OutOfBoundsError) as info:
        shifted_copy[(4,)](x, y, 32, 3, BLOCK=8, check=True, **_kw(backend))
    e = info.value
    assert e.line == _line("LOAD_LINE") and e.kind == "load" and e.arg == "x_ptr"
    assert e.offset == 32 and e.program_id == (3, 0, 0)
    msg = str(e)
    assert f"{HERE}:{_line('LOAD_LINE')}" in msg and "kd.load(x_ptr + offs + shift" in msg
    assert "'shifted_copy'" in msg and "x_ptr" in msg and "[0, 32)" in msg
    # the in-range lanes still ran, the others read nothing
    np.testing.assert_array_equal(y[:29], x[3:])


def test_out_of_bounds_store_writes_nothing_outside(backend):
    x = np.arange(16, dtype=np.float32) + 1
    buf = np.full(24, -7.0, np.float32)
    y = buf[4:20]  # the guard elements around `y` belong to the same allocation
    with pytest.raises(kd.OutOfBoundsError) as info:
        shifted_store[(2,)](x, y, 16, 2, BLOCK=8, check=True, **_kw(backend))
    e = info.value
    assert e.line == _line("STORE_LINE") and e.kind == "store" and e.arg == "y_ptr"
    assert e.offset == -2 and e.program_id == (0, 0, 0)
    np.testing.assert_array_equal(buf[:4], -7.0)
    np.testing.assert_array_equal(buf[20:], -7.0)
    np.testing.assert_array_equal(y[:14], x[2:])


def test_loop_carried_pointer_2d(backend):
    cols = 8
    x = np.arange(4 * cols * 3, dtype=np.float32)
    y = np.zeros((4, 8), np.float32)
    loop_rows[(1,)](x, y, 3, cols * 3, BM=4, BN=8, check=True, **_kw(backend))
    ref = sum(x.reshape(4, 3 * cols)[:, 8 * i:8 * i + 8] for i in range(3))
    np.testing.assert_array_equal(y, ref)
    with pytest.raises(kd.OutOfBoundsError) as info:  # 4 trips walk off the last row
        loop_rows[(1,)](x, y, 4, cols * 3, BM=4, BN=8, check=True, **_kw(backend))
    assert info.value.line == _line("LOOP_LINE") and info.value.offset == x.size


def test_env_variable_turns_checking_on(backend, monkeypatch):
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    monkeypatch.setenv("KDSL_CHECK", "1")
    with pytest.raises(kd.OutOfBoundsError):
        shifted_copy[(1,)](x, y, 8, 1, BLOCK=8, **_kw(backend))


# ---------------------------------------------------------------------------- hints

def test_hints_kept_and_broken(backend):
    x = np.arange(64, dtype=np.int32)
    y = np.zeros(16, np.int32)
    hinted[(1,)](x, y, 16, BLOCK=16, check=True, **_kw(backend))
    np.testing.assert_array_equal(y, x[16:32])
    with pytest.raises(kd.OutOfBoundsError) as info:
        hinted[(1,)](x, y, 12, BLOCK=16, check=True, **_kw(backend))
    e = info.value
    assert e.kind == "multiple_of" and e.line == _line("HINT_LINE") and e.offset == 12
    assert "multiple_of(8)" in str(e)


def test_max_contiguous_kept_and_broken(backend):
    x = np.arange(64, dtype=np.int32)
    y = np.zeros(16, np.int32)
    strided[(1,)](x, y, 1, BLOCK=16, check=True, **_kw(backend))
    np.testing.assert_array_equal(y, x[:16])
    with pytest.raises(kd.OutOfBoundsError) as info:
        strided[(1,)](x, y, 2, BLOCK=16, check=True, **_kw(backend))
    e = info.value
    assert e.kind == "max_contiguous" and e.line == _line("CONTIG_LINE") and e.offset == 0
    assert "max_contiguous(4)" in str(e)


# ---------------------------------------------------------------------------- cost and codegen

def test_unchecked_specialisation_has_no_hidden_arguments():
    x = np.zeros(8, np.float32)
    plain = shifted_copy.compile(x, x, 8, 0, BLOCK=8, backend="cuda")
    checked = shifted_copy.compile(x, x, 8, 0, BLOCK=8, backend="cuda", check=True)
    assert "kd_errors" not in plain.source and "kd_extent" not in plain.source
    assert "kd_errors" in checked.source and "kd_extent_x_ptr" in checked.source
    assert "tile.check" in checked.ir and "ptr_offset" in checked.ir["tile.check"]


@pytest.mark.skipif(not cuda.compiler_available(), reason="neither NVRTC nor nvcc works here")
def test_checked_cuda_source_compiles():
    x = np.zeros(8, np.float32)
    for kernel, args, cx in [(shifted_copy, (x, x, 8, 0), {"BLOCK": 128}),
                             (loop_rows, (x, x, 1, 8), {"BM": 16, "BN": 32}),
                             (hinted, (x.view(np.int32), x.view(np.int32), 0), {"BLOCK": 64})]:
        ck = kernel.compile(*args, backend="cuda", check=True, **cx)
        assert cuda.compile_cubin(ck.source, "sm_80")[:4] == b"\x7fELF"


# ---------------------------------------------------------------------------- NaN poison

def test_poison_marks_unwritten_elements(backend):
    y = np.zeros(8, np.float32)
    partial_write[(1,)](y, 5, BLOCK=8, poison=True, **_kw(backend))
    np.testing.assert_array_equal(y[:5], np.arange(5))
    assert np.isnan(y[5:]).all()


@pytest.mark.parametrize("dtype,pattern", [(np.int32, 0x7F7F7F7F), (np.int16, 0x7F7F),
                                           (np.uint8, 0x7F), (np.int64, 0x7F7F7F7F7F7F7F7F),
                                           (np.float16, None), (np.float64, None)])
def test_poison_patterns(dtype, pattern):
    from kdsl.backends.base import BoundArg

    from kdsl.ir import types as T
    from kdsl.runtime.checked import poison

    y, s = np.zeros(4, dtype), np.zeros(4, dtype)
    args = [BoundArg("s", "array", T.from_numpy(s.dtype), s, s, s.nbytes, s.size),
            BoundArg("y", "array", T.from_numpy(y.dtype), y, y, y.nbytes, y.size)]
    poison(args, {1})
    assert (s == 0).all()  # only the stored-to arrays are poisoned
    if pattern is None:
        assert np.isnan(y).all()
    else:
        assert (y == dtype(pattern)).all()


def test_poison_from_environment(monkeypatch):
    y = np.zeros(8, np.float32)
    monkeypatch.setenv("KDSL_POISON", "1")
    partial_write[(1,)](y, 3, BLOCK=8, backend="interp")
    assert np.isnan(y[3:]).all() and (y[:3] == np.arange(3)).all()


# ---------------------------------------------------------------------------- done-when

_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import kdsl as kd
    sys.path.insert(0, {here!r})
    import test_checked as t

    for backend in {backends!r}:
        kw = t._kw(backend)
        big = np.arange(64, dtype=np.float32)
        x, y = big[:32], np.zeros(32, np.float32)
        for kernel, shift, line in [(t.shifted_copy, 3, t._line("LOAD_LINE")),
                                    (t.shifted_store, 2, t._line("STORE_LINE"))]:
            try:
                kernel[(4,)](x, y, 32, shift, BLOCK=8, check=True, **kw)
            except kd.OutOfBoundsError as e:
                assert e.line == line, (backend, e.line, line)
                print(backend, kernel.__name__, "raised at line", e.line)
            else:
                raise SystemExit(f"{{backend}}: no OutOfBoundsError")
        # unchecked: reads 3 elements past `x` but inside `big`, and raises nothing (the
        # interpreter checks every access anyway and raises IndexError)
        try:
            t.shifted_copy[(4,)](x, y, 32, 3, BLOCK=8, **kw)
        except IndexError:
            assert backend == "interp"
            print(backend, "unchecked ok")
            continue
        assert (y[29:] == big[32:35]).all()
        print(backend, "unchecked ok")
""")


def test_done_when_child_process_catches_and_exits_normally():
    from kdsl.runtime.registry import backend_status

    backends = [b for b in ("llvm", "opencl", "interp") if backend_status(b)[0]]
    env = dict(os.environ, KDSL_CHECK="")
    code = _CHILD.format(here=str(HERE.parent), backends=backends)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    for b in backends:
        assert f"{b} shifted_copy raised" in r.stdout and f"{b} shifted_store raised" in r.stdout
        assert f"{b} unchecked ok" in r.stdout


# ---------------------------------------------------------- pointers chosen by control flow


@kd.jit
def _store_if(a_ptr, b_ptr, flag, n, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    if flag > 0:
        p = a_ptr
    else:
        p = b_ptr
    kd.store(p + offs, 1.0, mask=offs < n)


@kd.jit
def _store_where(a_ptr, b_ptr, flag, n, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    p = kd.where(flag > 0, a_ptr, b_ptr)
    kd.store(p + offs, 2.0, mask=offs < n)


@kd.jit
def _ping_pong(a_ptr, b_ptr, steps, n, BLOCK: kd.constexpr):
    # the pointers swap every iteration: each store's array depends on the trip count
    offs = kd.arange(0, BLOCK)
    src, dst = a_ptr, b_ptr
    for i in range(steps):
        x = kd.load(src + offs, mask=offs < n, other=0.0)
        kd.store(dst + offs, x + 1.0, mask=offs < n)
        src, dst = dst, src


@kd.jit
def _while_walk(a_ptr, b_ptr, n, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    p = a_ptr
    k = 0
    while k < 3:
        kd.store(p + offs, 3.0, mask=offs < n)
        p = b_ptr
        k += 1


CONTROL_SHAPES = [
    ("if", _store_if, lambda a, b, n: (a, b, 0, n)),
    ("where", _store_where, lambda a, b, n: (a, b, 0, n)),
    ("loop carry", _ping_pong, lambda a, b, n: (a, b, 2, n)),
    ("while carry", _while_walk, lambda a, b, n: (a, b, n)),
]


@pytest.mark.parametrize("name,kernel,args", CONTROL_SHAPES, ids=[c[0] for c in CONTROL_SHAPES])
def test_pointers_chosen_by_control_flow_are_checked(backend, name, kernel, args):
    a = np.zeros(16, np.float32)
    b = np.zeros(24, np.float32)  # 8 usable elements, then a guard region
    b_view = b[:8]
    kernel[(1,)](*args(a, b_view, 8), BLOCK=16, backend=backend, check=True)  # in bounds
    with pytest.raises(kd.OutOfBoundsError, match="lies inside none of them") as e:
        kernel[(1,)](*args(a, b_view, 16), BLOCK=16, backend=backend, check=True)
    assert e.value.line > 0 and "kd.store" in e.value.source
    assert (b[8:] == 0).all(), "the checked launch wrote past the array"
