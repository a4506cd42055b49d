"""kd.testing.compare across backends: a planted off-by-one mask is caught, localised to the
program that masked the element off, and leaves a repro bundle whose command reproduces it."""

import json
import subprocess
import sys
import textwrap

import numpy as np

import kdsl as kd
from kdsl.testing import compare

PLANTED = textwrap.dedent('''
    import numpy as np
    import kdsl as kd

    @kd.jit
    def scale(x_ptr, out_ptr, n, BLOCK: kd.constexpr):
        pid = kd.program_id(0)
        offs = pid * BLOCK + kd.arange(0, BLOCK)
        m = offs < n - 1  # planted bug: the last element is never written
        kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=m) * 2.0, mask=m)

    def scale_example_args():
        x = np.arange(1000, dtype=np.float32)
        return (x, np.zeros_like(x), x.size), {"BLOCK": 128}, (8,)

    def scale_reference(x, out, n):
        return x.astype(np.float64) * 2
''')


def _load(tmp_path):
    path = tmp_path / "planted.py"
    path.write_text(PLANTED)
    from kdsl.tools.loader import load_module
    return path, load_module(path, "planted_kernels")


def test_planted_bug_caught_localised_and_reproduced(tmp_path, backend):
    path, mod = _load(tmp_path)
    args, kwargs, grid = mod.scale_example_args()
    rep = compare(mod.scale, args, [backend], mod.scale_reference, grid=grid,
                  bundle_dir=tmp_path / "bundles", **kwargs)
    assert not rep.passed
    (r,) = rep.results
    assert r.n_bad == 1 and r.worst[0].index == (999,)
    assert r.worst[0].program == (7,) and r.worst[0].how == "masked it off"
    assert "pid=(7)" in rep.table()
    b = rep.bundle
    assert (b / "inputs.npz").is_file() and (b / "kernel_source.py").is_file()
    assert any(p.name.endswith("tile.txt") for p in (b / "ir").iterdir())
    meta = json.loads((b / "meta.json").read_text())
    assert meta["backend"] == backend and meta["grid"] == [8]
    p = subprocess.run(["sh", str(b / "repro.sh")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    assert "pid=(7) masked it off" in p.stdout


def test_cli_compare_file_kernel(tmp_path):
    path, _ = _load(tmp_path)
    p = subprocess.run([sys.executable, "-m", "kdsl.cli", "compare", f"{path}:scale",
                        "--backends", "llvm,interp", "--bundle-dir", str(tmp_path / "b")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    assert "FAIL" in p.stdout and "repro bundle" in p.stdout


@kd.jit
def axpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(out_ptr + offs, a * kd.load(x_ptr + offs, mask=m) + kd.load(y_ptr + offs, mask=m),
             mask=m)


def test_correct_kernel_passes_everywhere(tmp_path):
    x = np.random.default_rng(1).standard_normal(300).astype(np.float32)
    y = np.ones_like(x)
    rep = compare(axpy, (x, y, np.empty_like(x), 0.5, x.size),
                  reference=lambda x, y, o, a, n: a * x.astype(np.float64) + y,
                  grid=lambda m: (kd.cdiv(x.size, m["BLOCK"]),), BLOCK=64,
                  bundle_dir=tmp_path)
    assert rep.passed, rep.table()
    assert {r.backend for r in rep.results} >= {"interp"}
    assert rep.bundle is None and not list(tmp_path.iterdir())
    hist = rep.results[0].ulp_hist  # elements away from zero: within 2 ulps
    assert hist["0-1"] + hist["1-2"] == sum(hist.values()) > 200


def test_interp_is_the_default_reference():
    x = np.arange(10, dtype=np.float32)
    rep = compare(axpy, (x, x, np.empty_like(x), 2.0, 10), ["llvm"], grid=(1,), BLOCK=16)
    assert rep.passed and "interp" in rep.reference
