"""The on-disk cache of compiled kernels, and compilation through it.

Layout: `$KDSL_CACHE_DIR/<k[:2]>/<k>.kc` (entry) and `<k>.lock` (flock), where `k` is the
sha256 of (kdsl version, the kernel's source and its helpers', the specialisation, the
`CompileOptions` and the lowering's `Target` (their `key()` texts), the backend's name and
`backend.hash()` (toolchain and device)).

An entry is `MAGIC + sha256(payload) + payload`; the payload is a pickled dict with the
source, the IR stages, the lowered kernel and, once built, `backend.serialize(handle)`.
Entries are written to a temporary file in the same folder and renamed into place (readers
never see a partial file); a reader verifies the hash and unpickles, and on any failure deletes
the entry and recompiles.  A per-key `flock` around compile+store keeps concurrent processes
from compiling the same kernel twice; a waiter gives up after `KDSL_CACHE_LOCK_TIMEOUT`
seconds (default 30: a stalled or stopped process must not block others) and compiles
privately.  A temporary file left by a process killed between write and rename is removed by
the next store into its folder once it is an hour old.  `KDSL_CACHE_DIR` (else
`$XDG_CACHE_HOME/kdsl`, else `~/.cache/kdsl`) and `KDSL_CACHE` (0 disables the disk cache) are
read at each use; `KDSL_CACHE_MAX_SIZE` caps the entries' total size (`cache_limit.py`,
least recently used first out).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kdsl.backends.base import Backend
from kdsl.compile_options import CompileOptions
from kdsl.target import Target

from .cache_folder import cache_dir
from .compiler import CompiledKernel, build_tile, finish_kernel

MAGIC = b"KDSLC1\n"
FORMAT = 1
_DIGEST = 32
LOCK_TIMEOUT = 30.0  # seconds a compile waits for another process's lock (see `locked`)
ORPHAN_AGE = 3600.0  # seconds after which a leftover temporary file is removed

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: renames alone keep entries whole
    fcntl = None


def enabled() -> bool:
    return os.environ.get("KDSL_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


_FINGERPRINT: list[str] = []


def compiler_fingerprint() -> str:
    """sha256 of the compiler's own code (kdsl's and the backends' sources and templates), once
    per process: an entry compiled by a different kdsl build, even at the same version number,
    is never reused."""
    if not _FINGERPRINT:
        import kdsl
        from kdsl import backends

        h = hashlib.sha256()
        for root in (Path(kdsl.__file__).parent, Path(backends.__file__).parent):
            for path in sorted(root.rglob("*")):
                if path.suffix in (".py", ".j2") and path.is_file():
                    h.update(str(path.relative_to(root)).encode())
                    h.update(path.read_bytes())
        _FINGERPRINT.append(h.hexdigest())
    return _FINGERPRINT[0]


def make_key(version: str, sources: str, spec: Any, backend: str, backend_hash: str,
             options: CompileOptions | None = None, target: Target | None = None
             ) -> str | None:
    """sha256 hex of the key parts, or None when the specialisation has no stable text (a
    constexpr whose repr is an object address would never hit again)."""
    spec_text = repr(spec)
    if " at 0x" in spec_text:
        return None
    h = hashlib.sha256()
    opts = options.key() if options is not None else ""
    tgt = target.key() if target is not None else ""
    for part in (version, compiler_fingerprint(), sources, spec_text, opts, tgt, backend,
                 backend_hash):
        b = part.encode()
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def entry_path(key: str) -> Path:
    return cache_dir() / key[:2] / f"{key}.kc"


# ------------------------------------------------------------------------------ entries

def store(key: str, payload: dict[str, Any]) -> bool:
    """Write an entry atomically; False (and nothing written) when it cannot be pickled or
    the folder is not writable."""
    try:
        data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return False
    path = entry_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_orphans(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + hashlib.sha256(data).digest() + data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError:
        return False
    from .cache_limit import note_stored

    note_stored(cache_dir(), len(MAGIC) + _DIGEST + len(data))
    return True


def remove_orphans(folder: Path, age: float = ORPHAN_AGE) -> int:
    """Delete temporary files older than `age` seconds in `folder` (left by a process killed
    between writing and renaming an entry); returns how many went."""
    removed = 0
    now = time.time()
    with contextlib.suppress(OSError):
        for p in folder.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                if now - p.stat().st_mtime > age:
                    p.unlink()
                    removed += 1
    return removed


def load(key: str) -> dict[str, Any] | None:
    """The payload stored under `key`, or None; a corrupt entry is deleted."""
    path = entry_path(key)
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    try:
        head = len(MAGIC)
        if raw[:head] != MAGIC or len(raw) < head + _DIGEST:
            raise ValueError("bad header")
        data = raw[head + _DIGEST:]
        if hashlib.sha256(data).digest() != raw[head:head + _DIGEST]:
            raise ValueError("content hash mismatch")
        payload = pickle.loads(data)
        if not isinstance(payload, dict) or payload.get("format") != FORMAT \
                or payload.get("key") != key:
            raise ValueError("unexpected payload")
        with contextlib.suppress(OSError):
            os.utime(path)  # last use: the size cap evicts the least recently used entries
        return payload
    except Exception:
        discard(key)
        return None


def discard(key: str) -> None:
    with contextlib.suppress(OSError):
        entry_path(key).unlink()


@contextlib.contextmanager
def locked(key: str, timeout: float | None = None) -> Iterator[bool]:
    """Exclusive lock for `key` across processes; yields whether it is held.  Correctness rests
    on atomic renames, the lock only saves duplicate work, so where flock or the folder is
    unavailable, or another process keeps the lock for more than `timeout` seconds
    (`KDSL_CACHE_LOCK_TIMEOUT`, default `LOCK_TIMEOUT`), the caller goes on without it."""
    if timeout is None:
        try:
            timeout = float(os.environ.get("KDSL_CACHE_LOCK_TIMEOUT", LOCK_TIMEOUT))
        except ValueError:
            timeout = LOCK_TIMEOUT
    f = None
    if fcntl is not None:
        try:
            lock = entry_path(key).with_suffix(".lock")
            lock.parent.mkdir(parents=True, exist_ok=True)
            f = open(lock, "a+b")
            if not _flock(f, timeout):
                f.close()
                f = None
        except OSError:
            if f is not None:
                f.close()
            f = None
    try:
        yield f is not None
    finally:
        if f is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
            f.close()


def _flock(f: Any, timeout: float) -> bool:
    """Take an exclusive flock on `f` within `timeout` seconds (polling, with backoff)."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.2)


def _payload(key: str, ck: CompiledKernel) -> dict[str, Any]:
    binary = None
    if ck.is_built:
        try:
            binary = ck.backend_obj.serialize(ck.handle)
        except Exception:  # the entry stays useful without it: rebuilt from source
            binary = None
    return {"format": FORMAT, "key": key, "name": ck.name, "backend": ck.backend,
            "num_warps": ck.num_warps, "source": ck.source, "ir": ck.ir, "kernel": ck.kernel,
            "binary": binary}


def _from_payload(p: dict[str, Any], be: Backend) -> CompiledKernel:
    handle = None
    if p.get("binary") is not None:
        handle = be.deserialize(p["kernel"], p["binary"])
    return CompiledKernel(p["name"], be, p["kernel"], p["source"], p["ir"], p["num_warps"],
                          handle)


def _store_binary_later(key: str, ck: CompiledKernel) -> None:
    """After a lazy build, rewrite the entry with the serialised handle."""
    def on_built(c: CompiledKernel) -> None:
        if enabled():
            store(key, _payload(key, c))
    ck.on_built = on_built


# ------------------------------------------------------------------------------ compile

def cached_compile(jitfn: Any, arg_types: dict[str, Any], constexprs: dict[str, Any],
                   backend: Backend, options: CompileOptions, *, sources: str,
                   spec: Any, version: str, build: bool) -> CompiledKernel:
    """`compile_kernel` through the disk cache.  `sources` is the text identifying the
    kernel's code, `spec` its specialisation; with `build` the handle is built (and stored)."""
    # The frontend and tile passes always run (milliseconds): the optimised tile IR, which
    # has every global, closure value and inlined helper resolved, is part of the key, so two
    # kernels with the same source text but different captured values never share an entry.
    from kdsl.language import target_info

    with target_info.compiling(backend):  # `kd.target_info.is_cuda()` and friends
        fn, ir = build_tile(jitfn, arg_types, constexprs, options=options)
    target = backend.target(options.num_warps)

    def compile_() -> CompiledKernel:
        return finish_kernel(fn, ir, backend, build=build, target=target)

    if not enabled():
        return compile_()
    try:
        bhash = str(backend.hash())
    except Exception:  # a backend that cannot identify itself here is not cached
        return compile_()
    tile_text = f"{getattr(fn, 'src_file', '')}\n{list(ir.values())[-1]}"
    key = make_key(version, sources + tile_text, spec, backend.name, bhash, options, target)
    if key is None:
        return compile_()

    def from_disk() -> CompiledKernel | None:
        p = load(key)
        if p is None:
            return None
        try:
            ck = _from_payload(p, backend)
            if not ck.is_built:
                _store_binary_later(key, ck)
            if build:
                _ = ck.handle
        except Exception:  # unusable binary or kernel: recompile, never trust it
            discard(key)
            return None
        return ck

    ck = from_disk()
    if ck is not None:
        return ck
    with locked(key):
        ck = from_disk()  # another process may have finished while we waited
        if ck is not None:
            return ck
        ck = compile_()
        store(key, _payload(key, ck))
    if not ck.is_built:
        _store_binary_later(key, ck)
    return ck
