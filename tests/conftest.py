"""Shared test set-up: a private cache folder, the `backend` fixtures, the `gpu` and `slow`
markers, and a fake pipeline + backend for testing the runtime without the compiler.

Environment:
  KDSL_TEST_BACKENDS=llvm,opencl   narrow the `backend` fixture to these backends
  KDSL_SLOW=1                      run tests marked `slow` (as does `-m slow`)
  KDSL_REQUIRE_BACKENDS=llvm,opencl,interp
                                   fail (not skip) when one of these is unavailable (CI sets it)
  KDSL_REQUIRE_TORCH=1             fail (not skip) the torch tests (tests/pytorch) when torch
                                   cannot be imported (CI sets it: a broken install must not pass
                                   as skipped tests)

One conftest for the whole tree: tests import helpers from it by name (`from conftest import
FakeDeviceArray`), which a second conftest.py in a sub-folder would shadow.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

# Before anything compiles: tests never read or write the user's cache.
_CACHE_DIR = tempfile.mkdtemp(prefix="kdsl-test-cache-")
os.environ["KDSL_CACHE_DIR"] = _CACHE_DIR
os.environ.pop("KDSL_BACKEND", None)
os.environ.pop("KDSL_CHECK", None)
os.environ.pop("KDSL_CACHE", None)

import pytest  # noqa: E402  (after the environment is set)

# tests/kernels holds kcases, the kernel cases several folders share
sys.path.insert(0, str(Path(__file__).resolve().parent / "kernels"))

from kdsl.backends import all_backend_names  # noqa: E402
from kdsl.backends.base import Backend  # noqa: E402
from kdsl.ir import tile  # noqa: E402
from kdsl.target import Target  # noqa: E402


# The GPU-style work-group lowering keeps running on a real device where OpenCL's is a CPU
# (PoCL), which itself gets the one-thread lowering: the variant "opencl_wg" (OpenCL with that
# lowering forced, backends/__init__.py `VARIANTS`) runs the language tests in WORKGROUP_DIRS.
WORKGROUP_VARIANT = "opencl_wg"
WORKGROUP_DIRS = ("backend",)


def _selected() -> list[str]:
    """Every registered backend (the registry's list, so a new backend is tested without a
    line here) and the work-group variant of OpenCL, narrowed by KDSL_TEST_BACKENDS."""
    every = all_backend_names()
    if "opencl" in every:
        every = [*every, WORKGROUP_VARIANT]
    env = os.environ.get("KDSL_TEST_BACKENDS", "").strip()
    if not env:
        return every
    wanted = [b.strip() for b in env.split(",") if b.strip()]
    return [b for b in wanted if b in every] or wanted


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)


def pytest_configure(config):
    config.addinivalue_line("markers", "autotune: lets library kernels autotune (off elsewhere)")
    config.addinivalue_line("markers", "slow: skipped unless KDSL_SLOW=1 or -m slow")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU")


def _gpu_reason() -> str | None:
    """None when a CUDA GPU is usable, else why not."""
    try:
        import cupy
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return f"no CUDA GPU ({type(e).__name__})"
    return None if n > 0 else "no CUDA GPU"


def _require_torch(items) -> None:
    if os.environ.get("KDSL_REQUIRE_TORCH", "") in ("", "0"):
        return
    if not any("pytorch" in Path(str(item.fspath)).parts for item in items):
        return
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise pytest.UsageError(f"KDSL_REQUIRE_TORCH is set but torch cannot be imported: {e}")


def _workgroup_variant_elsewhere(item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is None or not any(isinstance(v, str) and v == WORKGROUP_VARIANT
                                   for v in callspec.params.values()):
        return False
    return not any(d in Path(str(item.fspath)).parts for d in WORKGROUP_DIRS)


def pytest_collection_modifyitems(config, items):
    _require_torch(items)
    elsewhere = [item for item in items if _workgroup_variant_elsewhere(item)]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [item for item in items if not _workgroup_variant_elsewhere(item)]
    markexpr = config.getoption("-m", default="") or ""
    run_slow = os.environ.get("KDSL_SLOW", "") not in ("", "0") or "slow" in markexpr
    gpu_reason: list[str | None] = []
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(pytest.mark.skip(reason="slow: set KDSL_SLOW=1 or use -m slow"))
        if "gpu" in item.keywords:
            if not gpu_reason:
                gpu_reason.append(_gpu_reason())
            if gpu_reason[0]:
                item.add_marker(pytest.mark.skip(reason=gpu_reason[0]))


@pytest.fixture(params=_selected())
def backend(request) -> str:
    """Name of each backend that can run here; the others are skipped, saying why."""
    from kdsl.runtime.registry import backend_status

    name = request.param
    try:
        ok, why = backend_status(name)
    except ValueError as e:
        ok, why = False, str(e)
    if not ok:
        required = os.environ.get("KDSL_REQUIRE_BACKENDS", "")
        if name in [b.strip() for b in required.split(",")]:
            pytest.fail(f"{name} backend is required (KDSL_REQUIRE_BACKENDS) but unavailable: {why}")
        pytest.skip(f"{name} backend not available: {why}")
    return name


@pytest.fixture(params=_selected())
def codegen_backend(request) -> str:
    """Name of each backend whose code generator loads (no device needed)."""
    from kdsl.backends import get_backend

    try:
        get_backend(request.param)
    except Exception as e:
        pytest.skip(f"{request.param} backend cannot be loaded: {type(e).__name__}: {e}")
    return request.param



# ------------------------------------------------------------------ fake pipeline and backend

class FakeBackend(Backend):
    """A tile-level backend that records launches instead of running them."""

    name = "fake"
    level = "tile"
    builds = 0
    launches: list = []

    def is_available(self) -> bool:
        return True

    def target(self, num_warps: int) -> Target:
        return Target("fake")

    def hash(self) -> str:
        return "fake-1"

    def add_stages(self, kernel, stages):
        stages["fake-stage"] = f"stage of {kernel.name}"

    def codegen(self, kernel) -> str:
        FakePipeline.compiles += 1  # code generation is the expensive step the cache skips
        return f"// fake source\n{tile.print_function(kernel)}"

    def build(self, kernel, source):
        type(self).builds += 1
        return ("built", source)

    def serialize(self, handle) -> bytes:
        return handle[1].encode()

    def deserialize(self, kernel, data: bytes):
        return ("built", data.decode())

    def launch(self, handle, kernel, grid, args):
        assert handle[0] == "built"
        type(self).launches.append((grid, list(args)))

    def owns(self, array) -> bool:
        return type(array).__name__ == "FakeDeviceArray"


class FakeDeviceArray:
    """Stands for a device array of the fake backend (CuPy-like attributes)."""

    def __init__(self, n: int, dtype="float32"):
        import numpy as np

        self.dtype = np.dtype(dtype)
        self.size = n
        self.shape = (n,)


class FakePipeline:
    """Replaces the frontend and the tile passes; `compiles` counts code generations (the
    frontend always runs: its output is part of the disk-cache key)."""

    compiles = 0

    @classmethod
    def build_function(cls, pyfn, arg_types, constexprs, equal_to_1=()):
        params = []
        args = []
        for name in __import__("inspect").signature(pyfn).parameters:
            if name in equal_to_1:  # the launcher's `== 1` specialisation: a constant
                params.append(tile.Param(name, None, None, 1))
            elif name in arg_types:
                v = tile.Value(arg_types[name], name)
                args.append(v)
                params.append(tile.Param(name, arg_types[name], v))
            else:
                params.append(tile.Param(name, None, None, constexprs[name]))
        return tile.Function(pyfn.__name__, params, tile.Block(args))

    @staticmethod
    def run_tile_passes(fn):
        return fn, {"canonicalize": tile.print_function(fn)}


def install_fake(module_name: str = __name__) -> None:
    """Register the fake backend as "fake" and patch the pipeline (no undo: for subprocesses)."""
    from kdsl.backends import register_backend

    import kdsl.frontend
    import kdsl.passes
    from kdsl.runtime import registry

    kdsl.frontend.build_function = FakePipeline.build_function
    kdsl.passes.run_tile_passes = FakePipeline.run_tile_passes
    register_backend("fake", module_name, "FakeBackend")
    registry.clear_caches()


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """The fake pipeline and backend, undone after the test, with a fresh disk cache.
    Yields the FakeBackend class."""
    from kdsl.backends import register_backend, unregister_backend

    import kdsl.frontend
    import kdsl.passes
    from kdsl.runtime import registry

    monkeypatch.setattr(kdsl.frontend, "build_function", FakePipeline.build_function,
                        raising=False)
    monkeypatch.setattr(kdsl.passes, "run_tile_passes", FakePipeline.run_tile_passes,
                        raising=False)
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path / "cache"))
    register_backend("fake", __name__, "FakeBackend")
    registry.clear_caches()
    FakeBackend.builds = 0
    FakeBackend.launches = []
    FakePipeline.compiles = 0
    yield FakeBackend
    unregister_backend("fake")
    registry.clear_caches()


@pytest.fixture
def rng():
    """A seeded NumPy generator (fresh per test)."""
    import numpy as np

    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _no_library_autotuning(request, monkeypatch):
    """Library kernels autotune by default; the suite runs them on their table configuration
    (KDSL_AUTOTUNE=0) except in the autotuner's own tests and tests marked `autotune`."""
    if "autotune" in request.keywords or "test_autotune" in request.node.nodeid:
        return
    monkeypatch.setenv("KDSL_AUTOTUNE", "0")
