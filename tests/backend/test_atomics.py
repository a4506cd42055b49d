"""Every atomic on every dtype Triton allows, on every backend, against NumPy: duplicate
addresses within a tile and across programs, masks, scalar atomics (once per program), the old
values (each lane's must be the value its own operation replaced: the old values and the final
value of an address are the values its chain of operations went through, in some order), a spin
lock, and the errors of disallowed combinations."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import kdsl as kd
from kdsl.ir.atomics import CAS_DTYPES, RMW_DTYPES
from kdsl.runtime.binding import bfloat16_view

RNG = np.random.default_rng(7)
P, BLOCK, NADDR = 3, 64, 5  # 3 programs of 64 lanes on 5 addresses, plus one scalar address
N = P * BLOCK - 9           # the last 9 lanes are masked off


@kd.jit
def rmw_kernel(p_ptr, v_ptr, old_ptr, n, OP: kd.constexpr, NADDR: kd.constexpr,
               BLOCK: kd.constexpr):
    pid = kd.program_id(0)
    offs = pid * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    v = kd.load(v_ptr + offs, mask=m)
    atomic = getattr(kd, f"atomic_{OP}")
    old = atomic(p_ptr + offs % NADDR, v, mask=m)
    kd.store(old_ptr + offs, old, mask=m)
    # a scalar atomic runs once per program; its old value reaches every thread
    sold = atomic(p_ptr + NADDR, kd.load(v_ptr + n + pid))
    kd.store(old_ptr + n + pid, kd.zeros((BLOCK,), old.dtype) + sold, mask=kd.arange(0, BLOCK) < 1)


def _values(op: str, dt: str, size: int) -> np.ndarray:
    """Operands whose every partial result is exact in `dt`, so that the final value does not
    depend on the order of the lanes."""
    if dt in ("float16", "bfloat16", "float32", "float64"):
        step = 1.0 if dt == "bfloat16" else 0.25
        vals = RNG.integers(-8, 9, size) * step
        if op in ("max", "min", "xchg"):
            vals = vals + RNG.standard_normal(size).round(2)  # distinct, of both signs
            vals[vals == 0] = 0.5
        return vals
    info = np.iinfo(np.dtype(dt))
    if op in ("and", "or", "xor"):
        return RNG.integers(info.min, info.max, size, dtype=np.dtype(dt), endpoint=True)
    lo, hi = (-1000, 1000) if info.min < 0 else (0, 2000)
    vals = RNG.integers(lo, hi, size).astype(np.dtype(dt))
    if op in ("max", "min"):  # values beyond the signed range of unsigned types, and extremes
        vals[::7] = info.max - RNG.integers(0, 3, vals[::7].size).astype(np.dtype(dt))
        vals[3::11] = info.min
    return vals


def _store_dtype(dt: str) -> np.dtype:
    return np.dtype(np.uint16) if dt == "bfloat16" else np.dtype(dt)


def _to_bits_bf16(x: np.ndarray) -> np.ndarray:
    return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)  # exact values


def _from_bits_bf16(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def _ref_op(op: str, dt: str):
    """NumPy's meaning of one operation on values (floats compare as floats: no NaN and no
    zero of both signs in these operands)."""
    with np.errstate(over="ignore"):
        return {"add": lambda a, b: a + b, "max": np.maximum, "min": np.minimum,
                "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
                "xchg": lambda a, b: b}[op]


def _key(x) -> bytes:
    return np.asarray(x).tobytes()


def check_chains(init, final, lanes_by_addr, olds, vals, f):
    """For each address: the multiset {old values} + {final} equals {init} + {f(old, val)},
    which holds exactly when the lanes' operations form one chain (in some order)."""
    for a, lanes in lanes_by_addr.items():
        seen = Counter(_key(olds[i]) for i in lanes) + Counter([_key(final[a])])
        made = Counter(_key(f(olds[i], vals[i])) for i in lanes) + Counter([_key(init[a])])
        assert seen == made, f"address {a}: the old values are not one chain of operations"


RMW_CASES = [(op, dt) for op, dts in RMW_DTYPES.items() for dt in dts]


@pytest.mark.parametrize("op, dt", RMW_CASES, ids=[f"{o}-{d}" for o, d in RMW_CASES])
def test_atomic_rmw(backend, op, dt):
    sd = _store_dtype(dt)
    vals = _values(op, dt, N + P)
    init_vals = _values(op, dt, NADDR + 1)
    if dt == "bfloat16":
        v_mem, p_mem = _to_bits_bf16(vals), _to_bits_bf16(init_vals)
    else:
        v_mem, p_mem = vals.astype(sd), init_vals.astype(sd)
    vals_c = vals.astype(np.float32 if dt in ("float16", "bfloat16") else sd)
    init = init_vals.astype(np.float32 if dt in ("float16", "bfloat16") else sd)
    mem, old = p_mem.copy(), np.zeros(N + P, sd)
    wrap = bfloat16_view if dt == "bfloat16" else (lambda a: a)
    rmw_kernel[(P,)](wrap(mem), wrap(v_mem), wrap(old), N, OP=op, NADDR=NADDR, BLOCK=BLOCK,
                     backend=backend)
    final = _from_bits_bf16(mem) if dt == "bfloat16" else mem
    olds = _from_bits_bf16(old) if dt == "bfloat16" else old
    if dt == "float16":
        final, olds = final.astype(np.float32), olds.astype(np.float32)
    f = _ref_op(op, dt)
    lanes = {a: [i for i in range(N) if i % NADDR == a] for a in range(NADDR)}
    lanes[NADDR] = list(range(N, N + P))  # the scalar atomics, one per program
    if op != "xchg":  # order-independent: the final value is the sequential one
        ref = init.copy()
        for a, ls in lanes.items():
            for i in ls:
                ref[a] = f(ref[a], vals_c[i])
        np.testing.assert_array_equal(final, ref)
    else:
        for a, ls in lanes.items():
            assert _key(final[a]) in {_key(vals_c[i]) for i in ls}
    check_chains(init, final, lanes, olds, vals_c, lambda o, v: np.asarray(f(o, v), o.dtype))


@kd.jit
def cas_kernel(p_ptr, c_ptr, v_ptr, old_ptr, NADDR: kd.constexpr, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    old = kd.atomic_cas(p_ptr + offs % NADDR, kd.load(c_ptr + offs), kd.load(v_ptr + offs))
    kd.store(old_ptr + offs, old)


@pytest.mark.parametrize("dt", CAS_DTYPES)
def test_atomic_cas(backend, dt):
    """Lanes race to move each address along 0 -> 1 -> 2 -> 3: a lane expecting k writes k+1;
    every transition happens exactly once per address, by one lane that saw k.  The address
    after the last one is never touched (a 16-bit one shares a 32-bit word with it)."""
    sd = _store_dtype(dt)
    n = P * BLOCK
    expect = RNG.integers(0, 3, n)
    cmp_v, new_v = expect.astype(np.float64), (expect + 1).astype(np.float64)
    conv = _to_bits_bf16 if dt == "bfloat16" else (lambda a: a.astype(sd))
    mem = conv(np.zeros(NADDR + 1))
    mem[NADDR] = conv(np.array([7.0]))[0]
    old = np.zeros(n, sd)
    wrap = bfloat16_view if dt == "bfloat16" else (lambda a: a)
    cas_kernel[(P,)](wrap(mem), wrap(conv(cmp_v)), wrap(conv(new_v)), wrap(old), NADDR=NADDR,
                     BLOCK=BLOCK, backend=backend)
    back = _from_bits_bf16 if dt == "bfloat16" else (lambda a: a.astype(np.float64))
    final, olds = back(mem), back(old)
    assert final[NADDR] == 7
    for a in range(NADDR):
        lanes = [i for i in range(n) if i % NADDR == a]
        # the address ends at the first k with no lane expecting it
        want = 0
        while any(expect[i] == want for i in lanes):
            want += 1
        assert final[a] == want
        winners = [i for i in lanes if olds[i] == cmp_v[i]]
        assert sorted(expect[i] for i in winners) == list(range(want))
        assert all(0 <= olds[i] <= want for i in lanes)


@kd.jit
def ticket_kernel(counter_ptr, tickets_ptr, mx_ptr):
    pid = kd.program_id(0)
    t = kd.atomic_add(counter_ptr, 1, sem="relaxed")
    kd.store(tickets_ptr + pid, t)
    kd.atomic_max(mx_ptr, t, sem="release", scope="sys")
    kd.atomic_min(mx_ptr + 1, t, sem="acquire", scope="cta")


def test_scalar_atomics_once_per_program(backend):
    G = 40
    counter, tickets, mx = np.zeros(1, np.int32), np.full(G, -1, np.int32), np.array(
        [-1, 1 << 30], np.int32)
    ticket_kernel[(G,)](counter, tickets, mx, backend=backend)
    assert counter[0] == G and sorted(tickets) == list(range(G))
    assert mx.tolist() == [G - 1, 0]


# ----------------------------------------------------------------------------- spin lock

@kd.jit
def grouped_accumulate(x_ptr, acc_ptr, lock_ptr, rows, N: kd.constexpr, GROUPS: kd.constexpr):
    """Layer-norm-backward style: each row's partial sums go to one of GROUPS accumulators,
    each guarded by a spin lock; the first writer of a group stores instead of adding."""
    row = kd.program_id(0)
    cols = kd.arange(0, N)
    part = kd.load(x_ptr + row * N + cols) * 2.0
    g = row % GROUPS
    lock = lock_ptr + g
    count = lock_ptr + GROUPS + g
    while kd.atomic_cas(lock, 0, 1) == 1:
        pass
    if kd.load(count) == 0:
        kd.atomic_xchg(count, 1)
    else:
        part += kd.load(acc_ptr + g * N + cols)
    kd.store(acc_ptr + g * N + cols, part)
    kd.atomic_xchg(lock, 0)


@pytest.mark.parametrize("num_warps", [1, 4])
def test_spin_lock(backend, num_warps, monkeypatch):
    from kdsl.backends import llvm_runtime
    from kdsl.backends.llvm_runtime import workers

    rows, n, groups = 96, 32, 4
    assert rows >= 2 * workers()  # the llvm backend runs these programs on all its threads
    monkeypatch.setattr(llvm_runtime, "POOL_MIN_SECONDS", 0.0)  # even once measured as cheap
    x = RNG.integers(-50, 50, (rows, n)).astype(np.float32)  # every partial sum is exact
    acc = np.full((groups, n), np.nan, np.float32)
    locks = np.zeros(2 * groups, np.int32)
    for _ in range(3):
        acc[:] = np.nan
        locks[:] = 0
        grouped_accumulate[(rows,)](x, acc, locks, rows, N=n, GROUPS=groups,
                                    backend=backend, num_warps=num_warps)
        ref = np.stack([2 * x[g::groups].sum(0) for g in range(groups)])
        np.testing.assert_array_equal(acc, ref)
        assert locks.tolist() == [0] * groups + [1] * groups


# -------------------------------------------------------------------------------- errors

def _compile(tmp_path, body: str, dtype=np.float32):
    ns: dict = {}
    src = ("import kdsl as kd\n"
           "@kd.jit\n"
           "def bad(p_ptr):\n"
           f"    {body}\n")
    path = tmp_path / "bad_atomic.py"  # the frontend reads the kernel's source file
    path.write_text(src)
    exec(compile(src, str(path), "exec"), ns)  # noqa: S102 - test source written above
    ns["bad"].compile(np.zeros(4, dtype), backend="interp")


@pytest.mark.parametrize("body, dtype, message", [
    ("kd.atomic_add(p_ptr, 1)", np.int8, "atomic_add does not support int8"),
    ("kd.atomic_add(p_ptr, 1)", np.int16, "atomic_add does not support int16"),
    ("kd.atomic_max(p_ptr, 1.0)", np.float16, "atomic_max does not support float16"),
    ("kd.atomic_xchg(p_ptr, 1.0)", np.float16, "atomic_xchg does not support float16"),
    ("kd.atomic_and(p_ptr, 1)", np.float32, "atomic_and does not support float32"),
    ("kd.atomic_cas(p_ptr, 0, 1)", np.int8, "atomic_cas does not support int8"),
    ("kd.atomic_cas(p_ptr, 0, 1)", np.bool_, "atomic_cas does not support int1"),
    ("kd.atomic_add(p_ptr, 1, sem='seq_cst')", np.int32, "sem must be one of"),
    ("kd.atomic_xor(p_ptr, 1, scope='device')", np.int32, "scope must be one of"),
    ("kd.atomic_add(1, 1)", np.int32, "needs a pointer"),
])
def test_disallowed_atomics_name_the_line(tmp_path, body, dtype, message):
    with pytest.raises(kd.CompilationError) as info:
        _compile(tmp_path, body, dtype)
    text = str(info.value)
    assert message in text and "line 4" in text and body.split("(")[0] in text


def test_every_sem_and_scope_runs(backend):
    @kd.jit
    def k(p_ptr, SEM: kd.constexpr, SCOPE: kd.constexpr):
        offs = kd.arange(0, 8)
        kd.atomic_add(p_ptr + offs, 1, sem=SEM, scope=SCOPE)
        kd.atomic_cas(p_ptr + 8, 0, 5, sem=SEM, scope=SCOPE)

    for sem in ("relaxed", "acquire", "release", "acq_rel", None):
        for scope in ("cta", "gpu", "sys", None):
            p = np.zeros(9, np.int64)
            k[(3,)](p, SEM=sem, SCOPE=scope, backend=backend)
            assert p.tolist() == [3] * 8 + [5]


def test_pointer_method_form(backend):
    @kd.jit
    def k(p_ptr):
        (p_ptr + kd.arange(0, 4)).atomic_add(2)
        p_ptr.atomic_max(7)

    p = np.zeros(4, np.int32)
    k[(2,)](p, backend=backend)
    assert p.tolist() == [9, 4, 4, 4]  # 0 + 2 -> max 7 -> + 2
