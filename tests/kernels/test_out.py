"""`out=` of the row kernels (softmax, layer_norm, rms_norm): the result is written into the
caller's array and that array is returned; wrong shapes, dtypes, layouts and overlaps are
refused by name."""

import numpy as np
import pytest
from kcases import check, rand
from kdsl.kernels import layer_norm, rms_norm, softmax
from kdsl.kernels import reference as R


def _host(backend):
    if backend not in ("llvm", "opencl", "interp"):
        pytest.skip(f"{backend}: out= is tested with host arrays")


@pytest.mark.parametrize("n", [300, 4096, 9000])  # ragged, one tile, the long-row kernels
def test_out_receives_the_result(backend, rng, n):
    _host(backend)
    x = rand(rng, (3, n), "float32")
    w, b = rand(rng, n, "float32"), rand(rng, n, "float32")
    for fn, args, want in ((softmax, (x,), R.softmax(x)),
                           (layer_norm, (x, w, b), R.layer_norm(x, w, b)),
                           (rms_norm, (x, w), R.rms_norm(x, w))):
        out = np.full_like(x, np.nan)
        got = fn(*args, backend=backend, out=out)
        assert got is out
        check(out, want, "float32", k=n)


def test_out_16_bit(rng):
    x = rand(rng, (4, 256), "float16")
    out = np.empty_like(x)
    assert softmax(x, out=out) is out
    check(out, R.softmax(x), "float16", k=256)


def test_out_refused(rng):
    x = rand(rng, (4, 64), "float32")
    w = rand(rng, 64, "float32")
    with pytest.raises(ValueError, match=r"out: expected shape \(4, 64\)"):
        softmax(x, out=np.empty((4, 65), np.float32))
    with pytest.raises(TypeError, match="out: dtype float16"):
        rms_norm(x, w, out=np.empty((4, 64), np.float16))
    with pytest.raises(ValueError, match="out: expected a contiguous array"):
        softmax(x, out=np.empty((64, 4), np.float32).T)
    with pytest.raises(ValueError, match="out: must not share memory with x"):
        softmax(x, out=x)
    with pytest.raises(ValueError, match="out: must not share memory with weight"):
        rms_norm(np.tile(w, (1, 1)), w, out=w.reshape(1, 64))
    with pytest.raises(ValueError, match="out: only supported along the last axis"):
        softmax(x, axis=0, out=np.empty_like(x))


def test_example_runs(capsys):
    import runpy
    from pathlib import Path
    path = Path(__file__).parents[2] / "examples" / "kernels_norms.py"
    runpy.run_path(str(path), run_name="__main__")
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("out=:")]
    assert len(lines) == 3 and all(ln.endswith("buffer: True, equal to the new-array call: True")
                                   for ln in lines), lines
