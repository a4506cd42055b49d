"""benchmarks/cpu_profile.py: loops from backward branches, samples to the innermost loop, the
disassembly of a live llvm kernel, and (where perf may sample) the whole run."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import kdsl as kd

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("cpu_profile",
                                               ROOT / "benchmarks" / "cpu_profile.py")
P = importlib.util.module_from_spec(_spec)
sys.modules["cpu_profile"] = P  # dataclasses look their module up
_spec.loader.exec_module(P)


def test_samples_go_to_the_innermost_loop():
    insns = [(0x0, "mov %rdi,%rax"), (0x4, "vfmadd231ps %zmm1,%zmm2,%zmm3"),
             (0x8, "jb 104 <k_grid+0x4>"), (0xc, "add $0x1,%rcx"), (0x10, "jne 100 <k_grid>"),
             (0x14, "ret")]
    code = P.Code("k", 0x7000, 0x18, insns, 0x100)  # the grid function at object offset 0x100
    assert P.loops(code) == [(0x4, 0x8), (0x0, 0x10)]
    got = P.by_loop(code, Counter({0x4: 5, 0x8: 2, 0xc: 3, 0x14: 1}))
    assert got[(0x4, 0x8)] == 7 and got[(0x0, 0x10)] == 3 and got[None] == 1


@kd.jit
def scale_rows(x_ptr, y_ptr, N, BLOCK: kd.constexpr):
    cols = kd.arange(0, BLOCK)
    for r in range(N):
        kd.store(y_ptr + r * BLOCK + cols, kd.load(x_ptr + r * BLOCK + cols) * 3.0)


@pytest.mark.skipif("llvm" not in kd.available_backends() or shutil.which("objdump") is None,
                    reason="needs the llvm backend and objdump")
def test_a_live_kernel_is_disassembled_with_its_loops():
    from kdsl.backends import llvm

    x = np.ones((4, 64), np.float32)
    y = np.empty_like(x)
    scale_rows[(1,)](x, y, 4, BLOCK=64, backend="llvm")
    live = [h for h in list(llvm.LIVE) if h.name == "scale_rows"]
    assert live and live[0].address
    with tempfile.TemporaryDirectory() as tmp:
        code = P.disassemble("scale_rows", live[0].address, llvm.object_code(live[0].opt_ir),
                             tmp)
    assert code.size > 0 and code.insns[0][0] == 0
    assert P.loops(code)  # the row loop
    assert any("mul" in t for _, t in code.insns)


@pytest.mark.skipif(shutil.which("perf") is None or shutil.which("objdump") is None
                    or "llvm" not in kd.available_backends(), reason="needs perf and objdump")
def test_the_whole_run_names_the_kernel():
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "cpu_profile.py"), "--secs", "1", "--threads",
         "1", "--setup", "x = rng.standard_normal((512, 1024), np.float32)",
         "--call", "K.softmax(x, backend='llvm')"], capture_output=True, text=True, timeout=300)
    if "perf record failed" in out.stderr + out.stdout:
        pytest.skip("perf may not sample here: " + (out.stderr or out.stdout).strip()[-200:])
    assert out.returncode == 0, out.stderr
    assert "softmax" in out.stdout and "% of" in out.stdout, out.stdout
