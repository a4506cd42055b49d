"""A backend is one module plus a registry line: the fake device backend of `fake_device.py`,
registered from outside `backends/`, is picked up by `kd.available_backends()`, `kdsl info`,
the tests' `backend` fixture, `kdsl compare`, the fuzzer and the library, and its kernels run
through the runtime's copy-in / launch / copy-back (kdsl/runtime/device.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fake_device
import numpy as np
import pytest

import kdsl as kd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NAME = fake_device.NAME


@pytest.fixture
def fakedev():
    from kdsl.backends import register_backend, unregister_backend

    from kdsl.runtime import registry

    register_backend(NAME, "fake_device", "FakeDeviceBackend")
    registry.clear_caches()
    fake_device.FakeDeviceBackend.calls = {}
    yield fake_device.FakeDeviceBackend
    unregister_backend(NAME)
    registry.clear_caches()


@kd.jit
def axpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    x = kd.load(x_ptr + offs, mask=m)
    kd.store(out_ptr + offs, a * x + kd.load(y_ptr + offs, mask=m), mask=m)


def test_registry_and_info(fakedev, capsys):
    assert NAME in kd.available_backends()
    from kdsl import cli

    assert cli.main(["info", "--no-caps"]) == 0
    out = capsys.readouterr().out
    assert f"  {NAME} available" in out and "device: the Loop IR simulator" in out


def test_kernels_run_through_the_runtimes_copies(fakedev):
    x = np.arange(40, dtype=np.float32)
    y = np.ones(40, np.float32)
    out = np.zeros_like(x)
    axpy[(3,)](x, y, out, 2.0, 40, BLOCK=16, backend=NAME)
    np.testing.assert_array_equal(out, 2 * x + 1)
    # three host arrays in, the one the kernel stores back out; one launch, then synchronised
    assert fakedev.calls == {"allocate": 3, "copy_in": 3, "enqueue": 1, "copy_out": 1,
                             "synchronize": 1}
    # its own device arrays pick the backend and are used in place
    from kdsl.backends import get_backend

    be = get_backend(NAME)
    dx, dy, dout = be.to_device(x), be.to_device(y), be.empty((40,), np.float32)
    fakedev.calls = {}
    assert axpy[(3,)](dx, dy, dout, 3.0, 40, BLOCK=16).backend == NAME
    np.testing.assert_array_equal(be.to_host(dout), 3 * x + 1)
    assert "copy_in" not in fakedev.calls and fakedev.calls["enqueue"] == 1


def test_library_and_fuzzer_ask_the_registry(fakedev):
    from kdsl.backends import get_backend
    from kdsl.kernels import reference

    from kdsl.tools.fuzz.run import default_backends

    assert NAME in default_backends()
    be = get_backend(NAME)
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    import kdsl.kernels as K

    got = K.softmax(be.to_device(x))  # the device array's owner is the backend
    assert isinstance(got, fake_device.FakeDeviceArray)
    np.testing.assert_allclose(be.to_host(got), reference.softmax(x), rtol=1e-5, atol=1e-6)


def test_kdsl_compare(fakedev, tmp_path, capsys):
    src = tmp_path / "kfile.py"
    src.write_text(
        "import numpy as np\nimport kdsl as kd\n\n"
        "@kd.jit\ndef scale(x_ptr, out_ptr, n, BLOCK: kd.constexpr):\n"
        "    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)\n"
        "    m = offs < n\n"
        "    kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=m) * 3.0, mask=m)\n\n"
        "def scale_example_args():\n"
        "    x = np.linspace(-1, 1, 40).astype(np.float32)\n"
        "    return (x, np.zeros_like(x), 40), {'BLOCK': 16}, (3,)\n\n"
        "def scale_reference(x, out, n):\n    return x.astype(np.float64) * 3\n")
    from kdsl import cli

    assert cli.main(["compare", f"{src}:scale", "--backends", NAME, "--json",
                     "--bundle-dir", str(tmp_path)]) == 0
    (rep,) = json.loads(capsys.readouterr().out)
    assert rep["passed"] and [r["backend"] for r in rep["results"]] == [NAME]


def test_backend_fixture_collects_it(tmp_path):
    """In a fresh pytest whose plugin registers the module, the suite's `backend` fixture
    parametrises over it and a real launch passes on it."""
    (tmp_path / "register_fakedev.py").write_text(
        "from kdsl.backends import register_backend\n"
        f"register_backend({NAME!r}, 'fake_device', 'FakeDeviceBackend')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(HERE)]),
               KDSL_TEST_BACKENDS="")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "register_fakedev",
                        "-p", "no:cacheprovider", "-k", NAME, "-rA",
                        str(HERE / "test_runtime.py") + "::test_real_launch"],
                       check=False, cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"PASSED tests/unit/test_runtime.py::test_real_launch[{NAME}]" in r.stdout, r.stdout
