"""Checked mode's race detection between program instances (`kd.RaceError`) on every backend:
two programs storing one element, one program loading what another stores; no report for a
program's own accesses, atomics, masked-off lanes, or accesses ordered by a spin lock or an
atomic's result."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from kdsl.backends import cuda

import kdsl as kd

HERE = Path(__file__).resolve()


def _line(marker: str) -> int:
    for i, text in enumerate(HERE.read_text().splitlines(), start=1):
        if f"# {marker}" in text and "_line(" not in text:
            return i
    raise AssertionError(marker)


def _kw(backend: str) -> dict:
    return {"backend": backend, "num_warps": 1} if backend.startswith("opencl") else {"backend": backend}


@kd.jit
def overlapping_rows(out_ptr, BLOCK: kd.constexpr):
    # program p stores elements [p * (BLOCK - 1), p * (BLOCK - 1) + BLOCK): each shares its
    # first one with the program before it
    pid = kd.program_id(0)
    offs = pid * (BLOCK - 1) + kd.arange(0, BLOCK)
    kd.store(out_ptr + offs, pid.to(kd.float32))  # WW_LINE


@kd.jit
def shift_in_place(x_ptr, n, BLOCK: kd.constexpr):
    # x[i] = x[i + 1]: the last element of each block reads the next program's first one
    pid = kd.program_id(0)
    offs = pid * BLOCK + kd.arange(0, BLOCK)
    v = kd.load(x_ptr + offs + 1, mask=offs + 1 < n, other=0.0)  # READ_LINE
    kd.store(x_ptr + offs, v, mask=offs < n)  # WRITE_LINE


@kd.jit
def scale_in_place(x_ptr, n, BLOCK: kd.constexpr):
    # each program loads and then stores its own elements only
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(x_ptr + offs, kd.load(x_ptr + offs, mask=m) * 2.0, mask=m)


@kd.jit
def grid_2d(out_ptr, BLOCK: kd.constexpr):
    # programs (i, j) and (i, j + 1) both store the element at i * BLOCK + j + 1 ... of row i
    i = kd.program_id(0)
    j = kd.program_id(1)
    offs = i * (2 * BLOCK) + j * (BLOCK - 1) + kd.arange(0, BLOCK)
    kd.store(out_ptr + offs, 1.0)


def test_two_programs_storing_one_element(backend):
    out = np.zeros(40, np.float32)
    with pytest.raises(kd.RaceError) as info:
        overlapping_rows[(4,)](out, BLOCK=8, check=True, **_kw(backend))
    e = info.value
    assert e.arg == "out_ptr" and e.offset == 7 and e.count == 3  # elements 7, 14, 21
    assert e.program_ids == ((0, 0, 0), (1, 0, 0))
    assert [a.kind for a in e.accesses] == ["store", "store"]
    assert e.lines == (_line("WW_LINE"), _line("WW_LINE"))
    msg = str(e)
    assert "'overlapping_rows'" in msg and "element offset 7" in msg and "both store it" in msg
    assert f"{HERE}:{_line('WW_LINE')}" in msg and "kd.store(out_ptr + offs" in msg
    assert "program_id (0, 0, 0)" in msg and "program_id (1, 0, 0)" in msg
    assert "3 elements" in msg


def test_one_program_loading_what_another_stores(backend):
    # on interp program 0 loads element 8 before program 1 stores it: the shadow keeps the
    # loads too, so the order the programs ran in does not matter
    x = np.arange(32, dtype=np.float32)
    with pytest.raises(kd.RaceError) as info:
        shift_in_place[(4,)](x, 32, BLOCK=8, check=True, **_kw(backend))
    e = info.value
    assert e.arg == "x_ptr" and e.offset == 8 and e.count == 3
    store, load = e.accesses
    assert (store.kind, store.program_id, store.line) == ("store", (1, 0, 0), _line("WRITE_LINE"))
    assert (load.kind, load.program_id, load.line) == ("load", (0, 0, 0), _line("READ_LINE"))
    assert "one stores it while the other loads it" in str(e)
    assert "kd.load(x_ptr + offs + 1" in str(e)


def test_program_ids_on_a_2d_grid(backend):
    out = np.zeros(32, np.float32)
    with pytest.raises(kd.RaceError) as info:
        grid_2d[(2, 2)](out, BLOCK=8, check=True, **_kw(backend))
    e = info.value
    assert e.offset == 7 and e.program_ids == ((0, 0, 0), (0, 1, 0)) and e.count == 2


def test_own_elements_are_no_race(backend):
    x = np.arange(30, dtype=np.float32)
    scale_in_place[(4,)](x, 30, BLOCK=8, check=True, **_kw(backend))
    np.testing.assert_array_equal(x, 2 * np.arange(30))
    # the same launch without a race, one program: its loads of later elements are its own
    y = np.arange(9, dtype=np.float32)
    shift_in_place[(1,)](y, 9, BLOCK=16, check=True, **_kw(backend))
    np.testing.assert_array_equal(y, list(range(1, 9)) + [0])


@kd.jit
def strided_shift(x_ptr, stride, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    v = kd.load(x_ptr + (offs + 1) * stride, mask=offs + 1 < n, other=0.0)
    kd.store(x_ptr + offs * stride, v, mask=offs < n)


def test_negative_stride_view_offsets(backend):
    base = np.arange(24, dtype=np.float32)
    x = base[::-1]  # the pointer at base[23]: element offsets -23 .. 0
    with pytest.raises(kd.RaceError) as info:
        strided_shift[(3,)](x, -1, 24, BLOCK=8, check=True, **_kw(backend))
    e = info.value  # logical elements 8 and 16 race; the lowest offset is element 16's
    assert e.offset == -16 and e.count == 2 and e.program_ids == ((2, 0, 0), (1, 0, 0))


@kd.jit
def masked_overlap(out_ptr, n, BLOCK: kd.constexpr):
    # the pointers of neighbouring programs overlap, but only in lanes their masks turn off
    offs = kd.program_id(0) * BLOCK + kd.arange(0, 2 * BLOCK)
    kd.store(out_ptr + offs, 3.0, mask=(kd.arange(0, 2 * BLOCK) < BLOCK) & (offs < n))


@kd.jit
def atomics_and_plain(x_ptr, hist_ptr, out_ptr, n, BLOCK: kd.constexpr):
    # every program adds into the same bins (atomics never race) and stores its own block
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    v = kd.load(x_ptr + offs, mask=m, other=0)
    kd.atomic_add(hist_ptr + v % 4, 1, mask=m)
    kd.atomic_max(hist_ptr + 4, v, mask=m)
    kd.store(out_ptr + offs, v + 1, mask=m)


def test_masked_off_lanes_and_atomics_are_no_race(backend):
    out = np.zeros(20, np.float32)
    masked_overlap[(3,)](out, 20, BLOCK=8, check=True, **_kw(backend))
    assert (out == 3.0).all()
    x = np.arange(30, dtype=np.int32)
    hist = np.zeros(5, np.int32)
    y = np.zeros(30, np.int32)
    atomics_and_plain[(4,)](x, hist, y, 30, BLOCK=8, check=True, **_kw(backend))
    np.testing.assert_array_equal(hist, [8, 8, 7, 7, 29])
    np.testing.assert_array_equal(y, x + 1)


@kd.jit
def locked_accumulate(x_ptr, acc_ptr, lock_ptr, LOCKED: kd.constexpr, BLOCK: kd.constexpr):
    # every program adds its row into acc with plain loads and stores; with LOCKED, under a
    # spin lock as Triton's layer-norm backward does (so they are ordered: no race)
    cols = kd.arange(0, BLOCK)
    row = kd.load(x_ptr + kd.program_id(0) * BLOCK + cols)
    if LOCKED:
        while kd.atomic_cas(lock_ptr, 0, 1) == 1:
            pass
    kd.store(acc_ptr + cols, kd.load(acc_ptr + cols) + row)  # LOCKED_LINE
    if LOCKED:
        kd.atomic_xchg(lock_ptr, 0)
    kd.store(acc_ptr + BLOCK + cols, row)  # AFTER_UNLOCK_LINE


def test_accesses_under_a_spin_lock_are_no_race(backend):
    x = np.arange(32, dtype=np.float32)
    acc = np.zeros(16, np.float32)
    lock = np.zeros(1, np.int32)
    with pytest.raises(kd.RaceError) as info:  # after the unlock: a race again
        locked_accumulate[(4,)](x, acc, lock, LOCKED=True, BLOCK=8, check=True,
                                **_kw(backend))
    assert info.value.lines == (_line("AFTER_UNLOCK_LINE"),) * 2 and info.value.offset == 8
    np.testing.assert_array_equal(acc[:8], x.reshape(4, 8).sum(0))  # the lock worked
    assert lock[0] == 0
    acc[:] = 0
    with pytest.raises(kd.RaceError) as info:  # no lock: the read-modify-write races
        locked_accumulate[(4,)](x, acc, lock, LOCKED=False, BLOCK=8, check=True,
                                **_kw(backend))
    assert info.value.offset == 0 and _line("LOCKED_LINE") in info.value.lines


@kd.jit
def last_program_sums(x_ptr, part_ptr, count_ptr, out_ptr, BLOCK: kd.constexpr):
    # each program stores its partial sum; the last to arrive at the counter adds them up
    pid = kd.program_id(0)
    kd.store(part_ptr + pid, kd.sum(kd.load(x_ptr + pid * BLOCK + kd.arange(0, BLOCK))))
    n = kd.num_programs(0)
    if kd.atomic_add(count_ptr, 1) == n - 1:
        parts = kd.load(part_ptr + kd.arange(0, BLOCK), mask=kd.arange(0, BLOCK) < n,
                        other=0.0)
        kd.store(out_ptr, kd.sum(parts))


def test_accesses_ordered_by_an_atomics_result_are_no_race(backend):
    x = np.arange(32, dtype=np.float32)
    part, count, out = np.zeros(4, np.float32), np.zeros(1, np.int32), np.zeros(1, np.float32)
    last_program_sums[(4,)](x, part, count, out, BLOCK=8, check=True, **_kw(backend))
    assert out[0] == x.sum() and count[0] == 4


def test_bounds_violations_are_reported_first(backend):
    out = np.zeros(20, np.float32)  # the last program stores past the end, and races too
    with pytest.raises(kd.OutOfBoundsError):
        overlapping_rows[(4,)](out, BLOCK=8, check=True, **_kw(backend))


def test_env_variable_turns_race_detection_on(backend, monkeypatch):
    monkeypatch.setenv("KDSL_CHECK", "1")
    with pytest.raises(kd.RaceError):
        overlapping_rows[(2,)](np.zeros(16, np.float32), BLOCK=8, **_kw(backend))
    monkeypatch.setenv("KDSL_CHECK", "")
    overlapping_rows[(2,)](np.zeros(16, np.float32), BLOCK=8, **_kw(backend))  # unchecked


# ---------------------------------------------------------------------------- cost and codegen

def test_shadows_only_for_stored_arguments_and_only_when_checked():
    x = np.zeros(8, np.float32)
    plain = shift_in_place.compile(x, 8, BLOCK=8, backend="cuda")
    checked = shift_in_place.compile(x, 8, BLOCK=8, backend="cuda", check=True)
    assert "kd_shadow" not in plain.source and "kd_shadow_x_ptr" in checked.source
    ck = atomics_and_plain.compile(x.view(np.int32), x.view(np.int32), x.view(np.int32), 8,
                                   BLOCK=8, backend="llvm", check=True)
    assert ck.checks["shadows"] == (2,)  # out_ptr; hist_ptr is only updated atomically
    ck = locked_accumulate.compile(x, x, x.view(np.int32), LOCKED=True, BLOCK=8,
                                   backend="llvm", check=True)
    assert ck.checks["shadows"] == (1,)


@pytest.mark.skipif(not cuda.compiler_available(), reason="neither NVRTC nor nvcc works here")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_checked_race_detection_compiles_for_cuda(arch):
    x = np.zeros(8, np.float32)
    for kernel, args, cx in [(shift_in_place, (x, 8), {"BLOCK": 128}),
                             (grid_2d, (x,), {"BLOCK": 64}),
                             (locked_accumulate, (x, x, x.view(np.int32)),
                              {"LOCKED": True, "BLOCK": 64})]:
        ck = kernel.compile(*args, backend="cuda", check=True, **cx)
        assert "kd_shadow" in ck.source
        assert cuda.compile_cubin(ck.source, arch)[:4] == b"\x7fELF"
