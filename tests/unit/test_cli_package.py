"""The command line as a package feature: `kdsl --version`, `python -m kdsl`, `kdsl cache`
(folder from KDSL_CACHE_DIR / XDG_CACHE_HOME, size, clear, the size cap), missing extras named
before long work starts, and the llvm thread count from the CPU affinity / KDSL_NUM_THREADS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kdsl
from kdsl import cli, extras
from kdsl.runtime import cache, cache_limit


def _py(*args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, check=False)


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"kdsl {kdsl.__version__}"


def test_python_dash_m():
    out = _py("-m", "kdsl", "--version")
    assert out.returncode == 0 and out.stdout.strip() == f"kdsl {kdsl.__version__}"
    out = _py("-m", "kdsl")  # no command: the help, exit 2
    assert out.returncode == 2 and "cache" in out.stdout


def test_version_single_source():
    import tomllib

    cfg = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert "version" in cfg["project"]["dynamic"]
    assert cfg["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kdsl.__version__"}


def test_cache_dir_order(monkeypatch, tmp_path):
    monkeypatch.delenv("KDSL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "kdsl"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # ignored, as the XDG spec says
    assert cache.cache_dir() == Path.home() / ".cache" / "kdsl"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.cache_dir() == Path.home() / ".cache" / "kdsl"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine"


def _compile_something(tag: int) -> None:
    import kdsl as kd

    @kd.jit
    def fill(out_ptr, n, BLOCK: kd.constexpr):
        offs = kd.arange(0, BLOCK)
        kd.store(out_ptr + offs, offs * 0 + n, mask=offs < n)

    out = np.zeros(16, np.int32)
    fill[(1,)](out, tag, BLOCK=16, backend="interp")
    assert out[0] == tag


def test_cache_info_and_clear(monkeypatch, tmp_path, capsys):
    folder = tmp_path / "c"
    monkeypatch.setenv("KDSL_CACHE_DIR", str(folder))
    _compile_something(3)
    (folder / "autotune").mkdir()
    (folder / "autotune" / "x.json").write_text("{}")
    keep = folder / "notes.txt"  # not kdsl's: never counted, never removed
    keep.write_text("mine")
    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(folder) in out
    kernels = next(ln for ln in out.splitlines() if ln.startswith("kernels"))
    assert kernels.endswith(" 1 entries"), kernels
    assert cache_limit.usage(folder).parts["autotune"][0] == 1
    assert cli.main(["cache", "clear"]) == 0
    assert "removed" in capsys.readouterr().out
    assert cache_limit.usage(folder).total == 0
    assert keep.read_text() == "mine" and not list(folder.glob("??"))


@pytest.mark.parametrize("text, size", [("", cache_limit.DEFAULT_MAX_SIZE), ("0", 0),
                                        ("1234", 1234), ("500M", 500 << 20), ("2G", 2 << 30),
                                        ("1.5k", 1536), ("3 GiB", 3 << 30)])
def test_max_size(monkeypatch, text, size):
    monkeypatch.setenv("KDSL_CACHE_MAX_SIZE", text)
    assert cache_limit.max_size() == size


def test_bad_max_size(monkeypatch, capsys):
    monkeypatch.setenv("KDSL_CACHE_MAX_SIZE", "lots")
    with pytest.raises(ValueError, match="KDSL_CACHE_MAX_SIZE='lots'"):
        cache_limit.max_size()
    assert cli.main(["cache", "info"]) == 2


def test_size_cap_evicts_least_recently_used(monkeypatch, tmp_path):
    folder = tmp_path / "c"
    monkeypatch.setenv("KDSL_CACHE_DIR", str(folder))
    monkeypatch.setenv("KDSL_CACHE_MAX_SIZE", "0")
    payload = {"format": cache.FORMAT, "blob": b"x" * 4000}
    keys = [f"{i:02x}" + "0" * 62 for i in range(10)]
    for i, k in enumerate(keys):
        assert cache.store(k, {**payload, "key": k})
        os.utime(cache.entry_path(k), (1000 + i, 1000 + i))  # oldest first
    assert cache.load(keys[0]) is not None  # a hit: now the most recently used
    size = cache.entry_path(keys[1]).stat().st_size
    monkeypatch.setenv("KDSL_CACHE_MAX_SIZE", str(6 * size))
    cache_limit._STATE.pop(str(folder), None)
    k = "ff" + "0" * 62
    assert cache.store(k, {**payload, "key": k})
    left = {key for key in keys + [k] if cache.entry_path(key).exists()}
    assert cache_limit.usage(folder).parts["kernels"][1] <= 6 * size
    # the newest entries and the one just hit survive; the oldest unhit ones went
    assert {keys[0], k, keys[9]} <= left and keys[1] not in left
    assert len(left) == 4  # 80% of the cap: 4.8 entries


def test_missing_extra_is_named_before_work(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    ran = []
    monkeypatch.setattr("kdsl.tools.sweep.bench_cli", lambda *a, **k: ran.append(1))
    assert cli.main(["bench", "softmax", "--plot", "out.png"]) == 2
    assert not ran  # refused before benchmarking
    err = capsys.readouterr().err
    assert "needs matplotlib" in err and "pip install 'kdsl[plot]'" in err


def test_messages_name_the_extra(monkeypatch):
    assert extras.message("torch", "kdsl.torch") == \
        "kdsl.torch needs torch, which is not installed: pip install 'kdsl[torch]'"
    assert "pip install 'kdsl[opencl]'" in extras.message("pyopencl", "the opencl backend")
    with pytest.raises(extras.MissingExtra, match="pip install no_such_module_xyz"):
        extras.require("no_such_module_xyz", "a feature")
    with pytest.raises(ImportError, match="a feature needs no_such_module_xyz"):
        extras.check("no_such_module_xyz", "a feature")
    extras.check("numpy", "anything")  # installed: no error


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_threads_follow_affinity_and_env():
    code = ("import os\n{pre}\nfrom kdsl.backends import llvm_runtime as r\n"
            "print(r.workers())")
    one_cpu = "os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})"
    out = _py("-c", code.format(pre=one_cpu), env={"KDSL_NUM_THREADS": ""})
    assert out.returncode == 0 and out.stdout.strip() == "1", out.stderr  # taskset -c 0
    out = _py("-c", code.format(pre=""), env={"KDSL_NUM_THREADS": "3"})
    assert out.stdout.strip() == "3", out.stderr
    out = _py("-W", "error::UserWarning", "-c", code.format(pre=""),
              env={"KDSL_NUM_THREADS": "many"})
    assert out.returncode != 0 and "KDSL_NUM_THREADS='many'" in out.stderr
