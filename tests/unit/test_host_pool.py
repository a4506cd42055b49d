"""The host pool of large library results (kdsl/runtime/host_pool.py): a block is handed out
again only once nothing references the array made from it, page aligned, and the idle bytes it
keeps stay under `KDSL_HOST_POOL`."""

from __future__ import annotations

import threading

import kdsl.kernels as K
import numpy as np
import pytest

from kdsl.runtime import host_pool
from kdsl.runtime.host_pool import MIN_BYTES, HostPool

BIG = (MIN_BYTES // 4 // 1024, 1024)  # float32 rows of MIN_BYTES in all


def test_a_dropped_result_is_reused_page_aligned():
    pool = HostPool()
    a = pool.empty(BIG, np.float32)
    addr = a.ctypes.data
    assert addr % host_pool.PAGE == 0 and a.flags.c_contiguous and a.shape == BIG
    del a
    b = pool.empty(BIG, np.float32)
    assert b.ctypes.data == addr
    assert pool.stats() == {"blocks": 1, "idle_bytes": 0, "busy_bytes": MIN_BYTES}


@pytest.mark.parametrize("keep", ["view", "reshape", "memoryview", "list", "torch"])
def test_a_block_is_busy_while_anything_derived_from_it_lives(keep):
    pool = HostPool()
    a = pool.empty(BIG, np.float32)
    a[...] = 7.0
    addr = a.ctypes.data
    if keep == "torch":
        held = pytest.importorskip("torch").from_numpy(a)
    elif keep == "view":
        held = a[3:]
    elif keep == "reshape":
        held = a.reshape(-1)
    elif keep == "memoryview":
        held = memoryview(a)
    else:
        held = [a]
    del a
    b = pool.empty(BIG, np.float32)
    assert b.ctypes.data != addr
    b[...] = 1.0  # writing the new block leaves the held one alone
    first = np.asarray(held[0] if keep == "list" else held).reshape(-1)[:4]
    np.testing.assert_array_equal(np.asarray(first), 7.0)


def test_small_requests_and_a_zero_cap_are_plain_arrays(monkeypatch):
    pool = HostPool()
    small = pool.empty((MIN_BYTES // 8,), np.float32)
    assert small.nbytes < MIN_BYTES and small.base is None
    monkeypatch.setenv(host_pool.ENV, "0")
    big = pool.empty(BIG, np.float32)
    assert big.base is None and pool.stats()["blocks"] == 0


def test_idle_bytes_stay_under_the_cap(monkeypatch):
    monkeypatch.setenv(host_pool.ENV, f"{MIN_BYTES >> 20}M")
    pool = HostPool()
    held = [pool.empty(BIG, np.float32) for _ in range(3)]
    assert pool.stats()["busy_bytes"] == 3 * MIN_BYTES
    held.clear()
    pool.empty((8,), np.float32)  # small: no pool work
    assert pool.stats()["idle_bytes"] == 3 * MIN_BYTES  # nothing trims without a request
    x = pool.empty((2 * BIG[0], BIG[1]), np.float32)  # no idle block fits: a new one
    # the three idle blocks went before the new one was made: the peak stays bounded
    assert pool.stats() == {"blocks": 1, "idle_bytes": 0, "busy_bytes": 2 * MIN_BYTES}
    del x
    assert pool.release() == 2 * MIN_BYTES
    assert pool.stats() == {"blocks": 0, "idle_bytes": 0, "busy_bytes": 0}


def test_a_bad_cap_names_the_variable(monkeypatch):
    monkeypatch.setenv(host_pool.ENV, "lots")
    with pytest.raises(ValueError, match="KDSL_HOST_POOL"):
        HostPool().empty(BIG, np.float32)
    for text, want in (("1G", 1 << 30), ("512m", 512 << 20), ("64MiB", 64 << 20), ("4096", 4096)):
        monkeypatch.setenv(host_pool.ENV, text)
        assert host_pool.cap() == want


def test_threads_never_share_a_live_block():
    pool = HostPool()
    seen: list[tuple[int, int]] = []
    errors: list[str] = []
    lock = threading.Lock()

    def work(tag: int) -> None:
        for _ in range(6):
            a = pool.empty(BIG, np.float32)
            a[...] = tag
            with lock:
                seen.append((tag, a.ctypes.data))
            if not (a == tag).all():
                errors.append(f"thread {tag}: its block was written by another")
            del a

    threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(seen) == 18
    assert pool.stats()["blocks"] <= 3


def test_library_results_come_from_the_pool():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(BIG, dtype=np.float32)
    ref = np.exp(x - x.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    y = K.softmax(x, backend="llvm")
    addr = y.ctypes.data
    assert addr % host_pool.PAGE == 0
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-7)
    del y
    y2 = K.softmax(x, backend="llvm")
    assert y2.ctypes.data == addr
    np.testing.assert_allclose(y2, ref, rtol=1e-5, atol=1e-7)
    keep = y2
    y3 = K.softmax(x, backend="llvm")
    assert y3.ctypes.data != keep.ctypes.data
