"""The autotuner: Triton's spelling, a correctness gate that discards wrong configs, a disk cache
of per-config timings shared across processes, pruning, KDSL_AUTOTUNE=0 and progress."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kdsl as kd

RNG = np.random.default_rng(0)


@kd.jit
def buggy_scale(x_ptr, out_ptr, n, BLOCK: kd.constexpr):
    # wrong for BLOCK=64: each program skips the second half of its block
    pid = kd.program_id(0)
    offs = pid * BLOCK + kd.arange(0, BLOCK)
    lim = BLOCK // 2 if BLOCK == 64 else BLOCK
    m = (offs < n) & (kd.arange(0, BLOCK) < lim)
    kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=m) * 3.0, mask=m)


CONFIGS = [kd.Config({"BLOCK": 128}, num_warps=4), kd.Config({"BLOCK": 64}, num_warps=4),
           kd.Config({"BLOCK": 256}, num_warps=2)]


def _tuned(**kw):
    return kd.autotune(configs=CONFIGS, key=["n"], **kw)(buggy_scale)


def _run(tuned, n=1000, backend="llvm"):
    x = RNG.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    tuned[lambda meta: (kd.cdiv(n, meta["BLOCK"]),)](x, out, n, backend=backend)
    return x, out


def test_discards_wrong_config_and_launches_best(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    tuned = _tuned()
    x, out = _run(tuned)
    np.testing.assert_allclose(out, x.astype(np.float64) * 3, rtol=1e-6)
    t = tuned.timings
    assert t["{BLOCK: 64} num_warps=4"].startswith("wrong")
    assert isinstance(t["{BLOCK: 128} num_warps=4"], float)
    assert tuned.best_config.kwargs["BLOCK"] in (128, 256)
    assert "autotune buggy_scale: 3/3" in capsys.readouterr().err  # progress (not a tty: lines)


def test_reference_gate(tmp_path, monkeypatch):
    """With a reference, even the first config is checked."""
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    tuned = kd.autotune(configs=[CONFIGS[1], CONFIGS[0]], key=["n"],
                        reference=lambda x, out, n: x.astype(np.float64) * 3)(buggy_scale)
    x, out = _run(tuned)
    assert tuned.best_config == CONFIGS[0]
    assert tuned.timings[CONFIGS[1].key()].startswith("wrong")


def test_no_correct_config_raises(tmp_path, monkeypatch):
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    tuned = kd.autotune(configs=[CONFIGS[1]], key=["n"],
                        reference=lambda x, out, n: x.astype(np.float64) * 3)(buggy_scale)
    with pytest.raises(RuntimeError, match="no correct config"):
        _run(tuned)


def test_autotune_off_uses_first(tmp_path, monkeypatch):
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KDSL_AUTOTUNE", "0")
    tuned = _tuned()
    _run(tuned)
    assert tuned.best_config == CONFIGS[0] and tuned.timings == {}


def test_prune(tmp_path, monkeypatch):
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    seen = []

    def early(configs, named, **kw):
        seen.append(named["n"])
        return [c for c in configs if c.kwargs["BLOCK"] != 64]

    tuned = _tuned(prune_configs_by={"early_config_prune": early,
                                     "perf_model": lambda **k: -k["BLOCK"], "top_k": 1})
    _run(tuned)
    assert seen == [1000] and list(tuned.timings) == [CONFIGS[2].key()]


def test_key_selects_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    tuned = _tuned()
    _run(tuned, 1000)
    _run(tuned, 1000)
    _run(tuned, 300)
    assert len(tuned.cache) == 2


SCRIPT = textwrap.dedent('''
    import sys
    import numpy as np
    import kdsl as kd
    sys.path.insert(0, {here!r})
    from test_autotune import buggy_scale
    configs = [kd.Config({{"BLOCK": b}}) for b in {blocks}]
    tuned = kd.autotune(configs=configs, key=["n"])(buggy_scale)
    x = np.ones(500, np.float32); out = np.zeros_like(x)
    tuned[lambda m: (kd.cdiv(500, m["BLOCK"]),)](x, out, 500, backend="llvm")
    assert (out == 3).all()
''')


def test_cached_timings_across_processes(tmp_path):
    env = dict(os.environ, KDSL_CACHE_DIR=str(tmp_path))
    here = os.path.dirname(__file__)

    def run(blocks):
        p = subprocess.run([sys.executable, "-c", SCRIPT.format(here=here, blocks=blocks)],
                           env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return p.stderr

    first = run([128, 64])
    assert "(cached)" not in first
    second = run([128, 64, 256])  # a new config is timed alone; the others come from disk
    assert second.count("(cached)") == 2 and "{BLOCK: 256} num_warps=4 0." in second
