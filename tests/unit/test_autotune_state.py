"""The autotuner with kernels that write their inputs: an accumulating kernel keeps every correct
config (the expected outputs are private copies), `reset_to_zero` / `restore_value` and Triton's
hooks, `configs_timings`, `KDSL_PRINT_AUTOTUNING`, and the full error of every failed config."""

import math

import numpy as np
import pytest

import kdsl as kd
from kdsl.runtime.binding import bfloat16_view


@kd.jit
def atomic_acc(x_ptr, out_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.atomic_add(out_ptr + offs % 16, kd.load(x_ptr + offs, mask=m), mask=m)


@kd.jit
def plus_equal(x_ptr, out_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(out_ptr + offs, kd.load(out_ptr + offs, mask=m) + kd.load(x_ptr + offs, mask=m),
             mask=m)


@kd.jit
def double_in_place(x_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    kd.store(x_ptr + offs, kd.load(x_ptr + offs, mask=m) * 2.0, mask=m)


BLOCKS = [kd.Config({"BLOCK": b}) for b in (32, 64, 128)]


def _grid(n):
    return lambda meta: (kd.cdiv(n, meta["BLOCK"]),)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))


@pytest.mark.parametrize("kernel", [atomic_acc, plus_equal], ids=["atomic_add", "out+="])
def test_accumulating_kernel_keeps_every_correct_config(kernel):
    n = 256
    x = np.ones(n, np.float32)
    tuned = kd.autotune(configs=BLOCKS, key=["n"], rep=2, warmup=1)(kernel)
    out = np.zeros(16 if kernel is atomic_acc else n, np.float32)
    tuned[_grid(n)](x, out, n, backend="llvm")
    assert all(isinstance(t, float) for t in tuned.timings.values()), tuned.timings
    assert (out == (n // 16 if kernel is atomic_acc else 1)).all()  # the caller's: one launch


def test_reset_to_zero_as_triton():
    n = 256
    x = np.arange(n, dtype=np.float32)
    seen = []
    cfgs = [kd.Config({"BLOCK": b}, pre_hook=lambda a: seen.append(float(a["out_ptr"][1])))
            for b in (64, 128)]
    tuned = kd.autotune(configs=cfgs, key=["n"], reset_to_zero=["out_ptr"], rep=2,
                        warmup=1)(plus_equal)
    out = np.full(n, 7.0, np.float32)
    tuned[_grid(n)](x, out, n, backend="llvm")
    # a config's pre_hook runs before the reset: it sees the caller's 7 (a fresh copy), then
    # what one run from zero left (x[1] = 1, never 2, 3, ...), then the caller's out zeroed
    # for the launch after the tuning: the caller's out is x, not 7 + x
    assert len(seen) > 4 and set(seen) == {7.0, 1.0, 0.0} and seen[-1] == 0.0
    np.testing.assert_array_equal(out, x)
    assert all(isinstance(t, float) for t in tuned.timings.values())
    tuned[_grid(n)](x, out, n, backend="llvm")  # tuned already: no reset, as in Triton
    np.testing.assert_array_equal(out, 2 * x)


def test_restore_value_restores_after_each_timed_run():
    n = 200
    seen = []
    cfgs = [kd.Config({"BLOCK": b}, pre_hook=lambda a: seen.append(float(a["x_ptr"][3])))
            for b in (64, 128)]
    x = np.full(n, 3.0, np.float32)
    tuned = kd.autotune(configs=cfgs, key=["n"], restore_value=["x_ptr"], rep=2,
                        warmup=1)(double_in_place)
    tuned[_grid(n)](x, n, backend="llvm")
    assert len(seen) > 4 and set(seen) == {3.0}  # no run saw another run's doubling
    assert all(isinstance(t, float) for t in tuned.timings.values())
    assert (x == 6.0).all()

    unrestored = []
    cfgs = [kd.Config({"BLOCK": 64}, pre_hook=lambda a: unrestored.append(float(a["x_ptr"][3])))]
    tuned = kd.autotune(configs=cfgs + BLOCKS[2:], key=["n"], rep=2, warmup=1)(double_in_place)
    tuned[_grid(n - 8)](np.full(n - 8, 3.0, np.float32), n - 8, backend="llvm")  # not cached
    assert len(set(unrestored)) > 1  # the control: without restore_value the runs compound


def test_user_hooks_replace_reset_and_restore():
    calls = []
    tuned = kd.autotune(configs=BLOCKS[:2], key=["n"], reset_to_zero=["out_ptr"],
                        pre_hook=lambda a, reset_only=False: calls.append(("pre", reset_only)),
                        post_hook=lambda a, exception: calls.append(("post", exception)),
                        rep=2, warmup=1)(plus_equal)
    x, out = np.ones(64, np.float32), np.full(64, 5.0, np.float32)
    tuned[_grid(64)](x, out, 64, backend="llvm")
    assert ("pre", False) in calls and ("post", None) in calls and calls[-1] == ("pre", True)
    assert (out >= 6).all()  # the given pre_hook replaced the reset


def test_configs_timings_and_print(capsys, monkeypatch):
    monkeypatch.setenv("KDSL_PRINT_AUTOTUNING", "1")
    from test_autotune import CONFIGS, buggy_scale
    tuned = kd.autotune(configs=CONFIGS, key=["n"], rep=2, warmup=1)(buggy_scale)
    x = np.ones(300, np.float32)
    tuned[_grid(300)](x, np.zeros_like(x), 300, backend="llvm")
    ct = tuned.configs_timings
    assert set(ct) == set(CONFIGS) and all(len(v) == 3 for v in ct.values())
    assert ct[CONFIGS[1]] == [math.inf] * 3  # the wrong one
    med, p20, p80 = ct[tuned.best_config]
    assert 0 < p20 <= med <= p80 and tuned.bench_time > 0
    out = capsys.readouterr().out
    assert f"Autotuning kernel buggy_scale with config {CONFIGS[1]}" in out
    assert "best config selected: " + repr(tuned.best_config) in out and "wrong:" in out


def test_bfloat16_outputs_are_checked():
    @kd.jit
    def halve_if_64(x_ptr, out_ptr, n, BLOCK: kd.constexpr):
        offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
        m = offs < n
        y = kd.load(x_ptr + offs, mask=m).to(kd.float32)
        kd.store(out_ptr + offs, y * (0.5 if BLOCK == 64 else 1.0), mask=m)

    x = bfloat16_view(np.full(128, 0x3F80, np.uint16))  # 1.0
    out = bfloat16_view(np.zeros(128, np.uint16))
    tuned = kd.autotune(configs=BLOCKS, key=["n"], rep=2, warmup=1)(halve_if_64)
    tuned[_grid(128)](x, out, 128, backend="llvm")
    assert tuned.timings[BLOCKS[1].key()].startswith("wrong")
    assert (out.array == 0x3F80).all()


@kd.jit
def too_wide(x_ptr, out_ptr, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    y = kd.load(x_ptr + offs) + kd.arange(0, 64)  # a shape error unless BLOCK == 64
    kd.store(out_ptr + offs, y)


def test_every_config_failing_shows_each_full_error():
    tuned = kd.autotune(configs=[BLOCKS[0], BLOCKS[2]], key=[])(too_wide)
    x = np.zeros(128, np.int32)
    with pytest.raises(RuntimeError) as info:
        tuned[(1,)](x, np.zeros_like(x), backend="llvm")
    text = str(info.value)
    assert "no correct config" in text
    for cfg in (BLOCKS[0], BLOCKS[2]):
        assert cfg.key() in text and cfg.key() in tuned.errors
    assert text.count("y = kd.load(x_ptr + offs) + kd.arange(0, 64)") == 2  # the kernel line
    assert text.count("line ") >= 2 and "shape" in text.lower()
    summary = tuned.timings[BLOCKS[0].key()]
    assert summary.startswith("failed: CompilationError: ") and "test_autotune_state.py:" in summary
