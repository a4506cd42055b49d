"""The tools' pieces: error measures (ULPs, histogram, NaN counts), do_bench, the progress bar,
the roofline cache, `kdsl bench --json` and `kdsl info`."""

import io
import json

import numpy as np
import pytest

import kdsl as kd
from kdsl import cli, term
from kdsl.tools import probe_kernels, roofline
from kdsl.tools.report import measure, ulp_of


def test_ulp_of_dtypes():
    assert ulp_of(np.array([1.0]), "float32")[0] == 2.0**-23
    assert ulp_of(np.array([1.0]), "float16")[0] == 2.0**-10
    assert ulp_of(np.array([3.0]), "bfloat16")[0] == 2.0**-6
    assert ulp_of(np.array([7.0]), "int32")[0] == 1


def test_measure_counts_and_worst():
    exp = np.array([1.0, 2.0, np.nan, 4.0, np.inf])
    got = np.array([1.0, 2.0 + 2**-22, 0.0, 4.5, np.inf], dtype=np.float32)
    r, badness = measure("x", "out", got, exp, "float32", 1)
    assert r.nan == (0, 1) and r.inf == (1, 1)
    assert r.n_bad == 2 and not r.passed
    assert {w.index for w in r.worst} == {(2,), (3,)}
    assert r.ulp_hist["1-2"] + r.ulp_hist["2-4"] == 1  # the 1-ulp-ish error at index 1
    assert badness[0] == 0


def test_do_bench_cpu_clock():
    t = kd.testing.do_bench(lambda: sum(range(1000)), warmup=1, rep=5)
    assert t.clock == "cpu clock" and 0 < t.min <= t.median <= t.max and t.n >= 5


def test_do_bench_backend_and_overhead(backend):
    if backend == "interp":
        pytest.skip("timing the interpreter is not useful")
    x = np.ones(4096, np.float32)
    y = np.empty_like(x)
    t = kd.testing.do_bench(
        lambda: probe_kernels.copy[(4,)](x, y, x.size, BLOCK=1024, backend=backend),
        backend=backend, warmup=1, rep=5)
    assert t.median > 0 and t.launch_overhead is not None and t.launch_overhead > 0
    assert t.clock == {"opencl": "opencl events", "cuda": "cuda events"}.get(backend,
                                                                             "cpu clock")
    assert (y == 1).all()


def test_progress_bar():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    s = Tty()  # a bar on a terminal; plain lines elsewhere (tests/unit/test_terminal.py)
    with term.Progress(2, "work", stream=s) as p:
        p.step("a")
        p.step("b")
    assert "work [" in s.getvalue() and "2/2" in s.getvalue()


def test_roofline_cached_per_device(tmp_path, monkeypatch):
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    calls = []

    def fake(backend):
        calls.append(backend)
        return roofline.Roofline(backend, roofline._device_key(backend), 10.0, 100.0, {})

    monkeypatch.setattr(roofline, "_measure", fake)
    r1 = roofline.measure("interp")
    r2 = roofline.measure("interp")
    assert calls == ["interp"] and r1 == r2 and r1.attainable(1.0) == 10.0
    assert "interp:" in json.loads((tmp_path / "roofline.json").read_text()).popitem()[0]


def test_cli_bench_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(roofline, "_measure", lambda b: roofline.Roofline(b, "d", 10.0, 50.0))
    from pathlib import Path
    example = Path(__file__).parents[2] / "examples" / "tool_bench.py"
    rc = cli.main(["bench", f"{example}:add", "--sizes", "1024,4096", "--backends", "llvm",
                   "--rep", "2", "--json", "--plot", str(tmp_path / "p.png")])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and [r["size"] for r in out["rows"]] == ["1024", "4096"]
    assert out["rows"][0]["gbs"] > 0 and 0 < out["rows"][1]["roofline_fraction"]
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_cli_info_versions(capsys):
    assert cli.main(["info", "--no-caps"]) == 0
    assert "backends:" in capsys.readouterr().out


def test_capability_ops_come_from_the_language():
    ops = __import__('kdsl.tools.capabilities', fromlist=['x']).cap_ops()
    assert {"exp", "sum", "max", "argmin", "cumsum", "dot", "maximum", "fma", "add"} <= set(ops)
