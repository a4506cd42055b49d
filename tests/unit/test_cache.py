"""The on-disk cache: round trip, corruption (recompiled, never trusted), settings read at use
time, and two processes compiling the same kernel at once."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from kdsl.runtime import cache
from kdsl.runtime.jit import jit

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def add(x_ptr, y_ptr, out_ptr, n, BLOCK: "kd.constexpr"):  # noqa: F821, UP037
    pass


def launch(k=None):
    k = k or jit(add)
    x = np.zeros(8, np.float32)
    return k[(1,)](x, x, np.empty_like(x), 8, BLOCK=4, backend="fake")


def entries(root: Path) -> list[Path]:
    return sorted(root.rglob("*.kc"))


def test_key_parts():
    k1 = cache.make_key("0.1", "src", ("spec",), "llvm", "h")
    assert k1 == cache.make_key("0.1", "src", ("spec",), "llvm", "h") and len(k1) == 64
    others = [cache.make_key("0.2", "src", ("spec",), "llvm", "h"),
              cache.make_key("0.1", "src2", ("spec",), "llvm", "h"),
              cache.make_key("0.1", "src", ("spec2",), "llvm", "h"),
              cache.make_key("0.1", "src", ("spec",), "cuda", "h"),
              cache.make_key("0.1", "src", ("spec",), "llvm", "h2")]
    assert len(set(others) | {k1}) == 6
    assert cache.make_key("0.1", "src", (object(),), "llvm", "h") is None  # unstable repr


def test_store_load_roundtrip(tmp_path, monkeypatch):
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    key = "ab" * 32
    payload = {"format": cache.FORMAT, "key": key, "x": [1, 2, 3]}
    assert cache.store(key, payload)
    assert cache.entry_path(key).parent.parent == tmp_path  # read at use time
    assert cache.load(key) == payload
    assert cache.load("cd" * 32) is None
    assert not list(tmp_path.rglob("*.tmp"))  # no temporary files left behind


@pytest.mark.parametrize("damage", ["truncate", "random", "flip", "empty", "wrong-key",
                                    "unpickleable"])
def test_corrupt_entries_are_deleted(tmp_path, monkeypatch, damage):
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    key = "ef" * 32
    assert cache.store(key, {"format": cache.FORMAT, "key": key, "data": b"x" * 100})
    path = cache.entry_path(key)
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "random":
        path.write_bytes(os.urandom(len(raw)))
    elif damage == "flip":
        path.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        import hashlib
        data = (pickle.dumps({"format": cache.FORMAT, "key": "00" * 32})
                if damage == "wrong-key" else b"\x80\x05not a pickle.")
        path.write_bytes(cache.MAGIC + hashlib.sha256(data).digest() + data)
    assert cache.load(key) is None
    assert not path.exists()


def test_disk_hit_skips_compile_and_build(fake):
    launch()
    assert (fake.builds, len(entries(Path(os.environ["KDSL_CACHE_DIR"])))) == (1, 1)
    from conftest import FakePipeline
    compiles = FakePipeline.compiles
    ck = launch()  # a fresh JITFunction: memory cache empty, disk cache warm
    assert FakePipeline.compiles == compiles and fake.builds == 1 and ck.is_built
    assert list(ck.ir)[0] == "tile" and ck.source.startswith("// fake source")


@pytest.mark.parametrize("damage", ["truncate", "random"])
def test_corrupt_entry_recompiled(fake, damage):
    from conftest import FakePipeline
    launch()
    (path,) = entries(Path(os.environ["KDSL_CACHE_DIR"]))
    raw = path.read_bytes()
    path.write_bytes(raw[:10] if damage == "truncate" else os.urandom(len(raw)))
    compiles = FakePipeline.compiles
    ck = launch()
    assert FakePipeline.compiles == compiles + 1 and ck.is_built
    assert len(fake.launches) == 2
    assert cache.load(path.stem) is not None  # rewritten whole


def test_bad_binary_recompiled(fake, monkeypatch):
    from conftest import FakePipeline
    launch()

    def broken(self, kernel, data):
        raise RuntimeError("stale binary")
    monkeypatch.setattr(fake, "deserialize", broken)
    compiles = FakePipeline.compiles
    launch()
    assert FakePipeline.compiles == compiles + 1


def test_compile_then_binary_stored_on_first_build(fake):
    k = jit(add)
    x = np.zeros(8, np.float32)
    ck = k.compile(x, x, x, 8, BLOCK=4, backend="fake")
    (path,) = entries(Path(os.environ["KDSL_CACHE_DIR"]))
    assert cache.load(path.stem)["binary"] is None
    k[(1,)](x, x, np.empty_like(x), 8, BLOCK=4, backend="fake")
    assert ck.is_built and cache.load(path.stem)["binary"] is not None


def test_cache_disabled(fake, monkeypatch):
    monkeypatch.setenv("KDSL_CACHE", "0")
    launch()
    launch()
    assert entries(Path(os.environ["KDSL_CACHE_DIR"])) == [] and fake.builds == 2


def test_helper_source_in_key(fake, tmp_path):
    """Editing a helper kernel changes the key of the kernels calling it."""
    src = textwrap.dedent("""
        import kdsl as kd
        SCALE = {scale}

        @kd.jit
        def helper(x):
            return x * SCALE

        @kd.jit
        def kern(x_ptr, BLOCK: kd.constexpr):
            helper(x_ptr)
    """)
    idents = []
    for i, scale in enumerate((2, 3)):
        p = tmp_path / f"mod{i}.py"
        p.write_text(src.format(scale=scale))
        ns: dict = {"__name__": f"mod{i}"}
        exec(compile(p.read_text(), str(p), "exec"), ns)
        idents.append(ns["kern"].identity())
    assert "def helper" in idents[0] and "SCALE=2" in idents[0]
    assert idents[0].replace("mod0", "mod1") != idents[1].replace("mod0", "mod1")


_WORKER = textwrap.dedent("""
    import importlib.util, os, shutil, sys, time
    spec = importlib.util.spec_from_file_location("kdsl_test_conftest", sys.argv[1])
    ct = importlib.util.module_from_spec(spec)
    sys.modules["kdsl_test_conftest"] = ct
    spec.loader.exec_module(ct)
    shutil.rmtree(ct._CACHE_DIR, ignore_errors=True)
    os.environ["KDSL_CACHE_DIR"] = sys.argv[2]
    ct.install_fake("kdsl_test_conftest")
    slow = ct.FakeBackend.codegen
    def codegen(self, kernel):
        time.sleep(0.3)  # widen the window in which both processes compile
        return slow(self, kernel)
    ct.FakeBackend.codegen = codegen
    import numpy as np
    sys.path.insert(0, sys.argv[3])
    import kern_mod
    x = np.zeros(8, np.float32)
    ck = kern_mod.k[(1,)](x, x, np.empty_like(x), 8, BLOCK=4, backend="fake")
    print("compiles", ct.FakePipeline.compiles, "built", ck.is_built)
""")


def test_two_processes_same_kernel(tmp_path):
    mod = tmp_path / "mods"
    mod.mkdir()
    (mod / "kern_mod.py").write_text(textwrap.dedent("""
        import kdsl as kd

        @kd.jit
        def k(x_ptr, y_ptr, out_ptr, n, BLOCK: kd.constexpr):
            pass
    """))
    worker = tmp_path / "worker.py"
    worker.write_text(_WORKER)
    cdir = tmp_path / "cache"
    cmd = [sys.executable, str(worker), str(CONFTEST), str(cdir), str(mod)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "built True" in out
    compiles = sorted(int(out.split()[1]) for out, _ in outs)
    assert compiles == [0, 1]  # the lock made the second process load the first one's entry
    assert len(entries(cdir)) == 1


def test_a_held_lock_times_out_and_the_waiter_goes_on(tmp_path, monkeypatch):
    import fcntl
    import time

    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    key = "ab" * 32
    lock = cache.entry_path(key).with_suffix(".lock")
    lock.parent.mkdir(parents=True)
    holder = open(lock, "a+b")  # another open file description: flock blocks us on it
    fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
    try:
        t = time.monotonic()
        with cache.locked(key, timeout=0.3) as held:
            waited = time.monotonic() - t
        assert held is False and 0.25 < waited < 5
        monkeypatch.setenv("KDSL_CACHE_LOCK_TIMEOUT", "0.1")
        with cache.locked(key) as held:
            assert held is False
    finally:
        fcntl.flock(holder.fileno(), fcntl.LOCK_UN)
        holder.close()
    with cache.locked(key, timeout=0.3) as held:
        assert held is True


def test_orphaned_temporary_files_are_removed(tmp_path, monkeypatch):
    import time

    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    key = "cd" * 32
    folder = cache.entry_path(key).parent
    folder.mkdir(parents=True)
    old, young = folder / f".{key[:16]}.x1.tmp", folder / f".{key[:16]}.x2.tmp"
    old.write_bytes(b"partial")
    young.write_bytes(b"being written")
    hour_ago = time.time() - 2 * cache.ORPHAN_AGE
    os.utime(old, (hour_ago, hour_ago))
    assert cache.store(key, {"format": cache.FORMAT, "key": key})
    assert not old.exists() and young.exists()
    assert cache.load(key) is not None
