"""`kdsl compare` / `kd.testing.compare` cannot say "passed" when nothing was checked: exit
codes, the one tolerance rule (an all-zero or all-NaN output of every library kernel fails at
every dtype), bfloat16 from the command line, and the table's columns."""

import json

import kdsl.kernels as K
import numpy as np
import pytest
from kdsl.kernels import reference as R

from kdsl import cli
from kdsl.kernels.cases import CASES
from kdsl.tools import compare as C
from kdsl.tools import roofline
from kdsl.tools.report import fmt_ulp, measure
from kdsl.testing import MAX_TOL, assert_close, tolerance

DTYPES = ["float32", "float16", "bfloat16"]


def _fake(name, dtype, fill):
    """A stand-in for library kernel `name` whose output has the right shape and dtype and
    every element `fill` (integer outputs, such as sparsify_2_4's meta: 0, or -1 for NaN)."""
    ref = getattr(R, name)

    def garbage(want):
        if want.dtype.kind == "f":
            return R.cast(np.full(want.shape, fill), dtype)
        return np.full(want.shape, -1 if np.isnan(fill) else 0, want.dtype)

    def kernel(*args, backend=None, **kw):
        want = ref(*args, **kw)
        if isinstance(want, tuple):
            return tuple(garbage(w) for w in want)
        return garbage(want)
    kernel.__name__ = name
    return kernel


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("fill", [0.0, np.nan], ids=["zeros", "nan"])
def test_garbage_output_of_every_library_kernel_fails(monkeypatch, name, dtype, fill):
    monkeypatch.setattr(K, name, _fake(name, dtype, fill))
    rep = C.compare_case(name, dtype=dtype, backends=["interp"], bundle=False)
    assert rep.results and not rep.passed and rep.exit_status == 1
    assert all(r.status == "FAIL" and r.n_bad > 0 for r in rep.results), rep.table()


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_zero_softmax_of_long_rows_fails(monkeypatch, dtype):
    """The issue's case: outputs at most ~0.01 with k = 3000 (an unscaled atol of 0.43)."""
    rep = C.compare_case("softmax", (4, 3000), dtype, ["interp"], bundle=False)
    assert rep.passed, rep.table()
    (r,) = rep.results
    assert r.scale < 0.02 and r.atol < 0.1 * r.scale and r.k == 3000
    monkeypatch.setattr(K, "softmax", _fake("softmax", dtype, 0.0))
    assert not C.compare_case("softmax", (4, 3000), dtype, ["interp"], bundle=False).passed


@pytest.mark.parametrize("dtype", DTYPES + ["float64"])
@pytest.mark.parametrize("k", [1, 1000, 10**6, 10**12])
@pytest.mark.parametrize("acc", [None, "float32"])
def test_rule_never_lets_zeros_pass(dtype, k, acc):
    t = tolerance(dtype, k, acc)
    assert 0 < t.atol + t.rtol <= 2 * MAX_TOL < 1
    x = np.linspace(-3, 5, 50)
    with pytest.raises(AssertionError, match="elements differ"):
        assert_close(np.zeros_like(x), x, dtype="float64", k=k, acc_dtype=acc)


def test_scale_is_the_reference_magnitude():
    e = np.array([1e-3, -2e-3, 0.0])
    assert_close(e * (1 + 1e-6), e, dtype="float32", k=1000)  # 3e-5 relative: fine
    with pytest.raises(AssertionError, match=r"x scale 0.002"):
        assert_close(e + 1e-4, e, dtype="float32", k=1000)  # would pass an unscaled atol
    assert_close(e + 1e-4, e, atol=2e-4, rtol=0)  # explicit bounds are absolute


def test_ulps_only_away_from_zero():
    exp = np.array([1.0, 2.0, 1e-6])
    got = np.array([1.0, 2.0 + 2**-22, 1e-6 + 1e-9], np.float32)
    r, _ = measure("x", "out", got, exp, "float32", 1)
    assert r.passed and r.max_ulp == 1.0  # not the ~1e4 ulps of 1e-9 at 1e-6
    assert sum(r.ulp_hist.values()) == 2
    r, _ = measure("x", "out", np.zeros(3, np.float32), np.zeros(3), "float32", 1)
    assert r.passed and r.max_ulp is None  # no element away from zero: shown as "-"
    assert fmt_ulp(r.max_ulp) == "-"


def test_exit_codes(monkeypatch, capsys, tmp_path):
    small = ["--shape", "4,40", "--bundle-dir", str(tmp_path)]
    assert cli.main(["compare", "softmax", "--backends", "interp", *small]) == 0
    out = capsys.readouterr().out
    for col in ("dtype", " k ", "atol", "rtol", "float32", "   40 "):
        assert col in out, out
    assert cli.main(["compare", "softmax", "--backends", "nosuch", *small]) == 2
    assert "unknown backend 'nosuch'" in capsys.readouterr().err
    assert cli.main(["compare", "nosuch"]) == 2
    assert "not a library kernel" in capsys.readouterr().err
    assert cli.main(["compare", "softmax", "--dtype", "int8", *small]) == 2
    assert cli.main(["compare", "softmax", "--shape", "4,a", "--backends", "interp"]) == 2
    capsys.readouterr()

    import kdsl.runtime.registry as reg
    real = reg.backend_status
    monkeypatch.setattr(reg, "backend_status",
                        lambda b: (False, "no device here") if b == "cuda" else real(b))
    assert cli.main(["compare", "softmax", "--backends", "cuda", *small]) == 2
    o = capsys.readouterr()
    assert "nothing compared (cuda: no device here)" in o.err and "FAILED" in o.out
    assert cli.main(["compare", "softmax", "--backends", "cuda", "--json", *small]) == 2
    (d,) = json.loads(capsys.readouterr().out)
    assert d["passed"] is False and "nothing compared" in d["reason"]
    assert cli.main(["compare", "softmax", "--backends", "interp,cuda", *small]) == 0
    capsys.readouterr()

    monkeypatch.setattr(K, "softmax", _fake("softmax", "float32", 0.0))
    assert cli.main(["compare", "softmax", "--backends", "interp", *small]) == 1


def test_interp_alone_is_nothing_compared_without_reference(tmp_path):
    from test_compare_kernels import axpy_like
    x = np.ones(8, np.float32)
    rep = C.compare(axpy_like, (x, np.empty_like(x), 8), ["interp"], grid=(1,), BLOCK=8)
    assert not rep.passed and rep.exit_status == 2 and "it is the reference" in rep.reason
    with pytest.raises(ValueError, match="unknown backend 'lvm'"):
        C.compare(axpy_like, (x, np.empty_like(x), 8), ["lvm"], grid=(1,), BLOCK=8)


def test_bfloat16_from_the_command_line(tmp_path, monkeypatch, capsys):
    assert cli.main(["compare", "rms_norm", "--dtype", "bf16", "--shape", "3,50",
                     "--backends", "interp,llvm", "--bundle-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("bfloat16") == 2 and "FAIL" not in out
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(roofline, "_measure", lambda b: roofline.Roofline(b, "d", 10.0, 50.0))
    assert cli.main(["bench", "softmax", "--dtype", "bfloat16", "--sizes", "64",
                     "--backends", "llvm", "--rep", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[0]["bytes"] == 2 * 256 * 64 * 2  # 2-byte elements, read and written
    assert cli.main(["bench", "softmax", "--dtype", "int8", "--backends", "llvm"]) == 2
