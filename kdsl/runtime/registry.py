"""Runtime access to the backend registry: availability, the reason a backend cannot run,
which backend owns a device array (or views a DLPack device), the default and the reference
backend.  Code outside `backends/` asks these questions instead of naming a backend.

The table of backends itself lives in `backends/__init__.py`; this module adds the runtime's
questions about it, with their answers cached (probing OpenCL platforms or CUDA devices is
slow, and the answers do not change while a process runs).
"""

from __future__ import annotations

from typing import Any

from kdsl import backends as _reg

from .env import getenv

_status: dict[str, tuple[bool, str]] = {}
_owner_by_type: dict[type, str | None] = {}


def clear_caches() -> None:
    """Forget cached availability and ownership answers (tests registering backends use it)."""
    _status.clear()
    _owner_by_type.clear()


def backend_status(name: str) -> tuple[bool, str]:
    """(available, reason) for backend `name`; `reason` is empty when it is available.

    Raises ValueError for an unknown name."""
    st = _status.get(name)
    if st is not None:
        return st
    if name not in _reg.REGISTRY and name not in _reg.VARIANTS:
        _reg.get_backend(name)  # raises the ValueError listing the known backends
    try:
        be = _reg.get_backend(name)
    except Exception as e:  # a broken or missing module: report it, never crash
        st = (False, f"its module could not be loaded ({type(e).__name__}: {e})")
    else:
        try:
            ok = bool(be.is_available())
        except Exception as e:
            ok, why = False, f"{type(e).__name__}: {e}"
        else:
            why = ""
        if not ok and not why:
            try:
                why = be.unavailable_reason()
            except Exception as e:
                why = f"{type(e).__name__}: {e}"
            why = why or "is_available() returned False"
        st = (ok, why)
    _status[name] = st
    return st


def available_backends() -> list[str]:
    """Names of the backends that can run on this machine, in registry order (interp last)."""
    return [n for n in _reg.all_backend_names() if backend_status(n)[0]]


def require_backend(name: str):
    """The backend `name`, checked to be runnable here.

    ValueError for an unknown name (listing the known ones); RuntimeError saying why for a
    known backend that cannot run."""
    ok, why = backend_status(name)
    if not ok:
        raise RuntimeError(f"backend {name!r} is not available: {why}")
    return _reg.get_backend(name)


def owner_of(obj: Any) -> str | None:
    """Name of the backend whose device array `obj` is, or None.  Cached per type: ownership
    is a property of the array class (a CuPy ndarray, a PyOpenCL Array)."""
    t = type(obj)
    try:
        return _owner_by_type[t]
    except KeyError:
        pass
    owner = None
    for name in _reg.all_backend_names():
        try:
            if _reg.get_backend(name).owns(obj):
                owner = name
                break
        except Exception:  # a backend that cannot load owns nothing
            continue
    _owner_by_type[t] = owner
    return owner


def dlpack_owner(device_type: int) -> str | None:
    """Name of the backend that views DLPack arrays of `device_type` (`Backend.dlpack_devices`),
    or None."""
    for name in _reg.all_backend_names():
        try:
            if device_type in _reg.get_backend(name).dlpack_devices:
                return name
        except Exception:  # a backend that cannot load views nothing
            continue
    return None


def default_backend() -> str:
    """Backend used when neither `backend=` nor the arrays decide: `KDSL_BACKEND`, else the
    registry's default."""
    return getenv("KDSL_BACKEND") or _reg.DEFAULT


def reference_backend() -> str:
    """The reference backend (the NumPy interpreter of the Tile IR)."""
    return _reg.REFERENCE


def measured_backends() -> list[str]:
    """The available backends but the reference (too slow to time; `kdsl bench`, the
    fuzzer), else the reference alone."""
    avail = available_backends()
    return [n for n in avail if n != _reg.REFERENCE] or avail
