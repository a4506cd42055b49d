"""Launch overhead of a cached kernel: what a call costs when nothing is compiled.

    python benchmarks/launch.py [--rounds 15] [--calls 2000] [--only NAME,...] [--json out.json]

Every case runs a tiny problem (16 elements, grid (1,)) so that the time is the launch path:
argument classification, the specialisation-cache lookup, argument packing and the native
call.  Cases are interleaved: each round times `--calls` back-to-back calls of every case in
turn (the per-call mean of that block), and the table gives the median and the minimum over
rounds of the wall time and of the process's CPU time (`time.process_time`: on a shared,
busy machine the wall time also counts the waits for a core, the CPU time does not); the
header prints the CPU model and the load average before and after.

Cases (llvm backend):
  kdsl plain            `add[(1,)](x, y, out, 16, BLOCK=16)`: NumPy arrays and ints by
                        position, constexprs by keyword (the direct-launcher path of jit.py)
  kdsl stride 1         the same with a stride argument equal to 1 (specialised as the
                        constant 1)
  kdsl stride 3         the same with a stride of 3 (a runtime int)
  kdsl options          `add[(1,)](..., backend="llvm", num_warps=4)`: launch options given
  kdsl grid callable    `add[lambda meta: (1,)](...)`
  kernels.softmax       the library call `kd.kernels.softmax(x)` on a 4 x 8 float32 array
                        (argument checks, output allocation, one launch)
Peers (when installed): a Numba `@njit` function adding two 16-element arrays into a third,
and `torch.add(a, b, out=c)` on 16-element CPU tensors.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import kdsl.kernels
from common import load_line, machine_header

import kdsl as kd


@kd.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    m = offs < n
    kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=m) + kd.load(y_ptr + offs, mask=m),
             mask=m)


@kd.jit
def gather_add(x_ptr, y_ptr, out_ptr, n, stride, BLOCK: kd.constexpr):
    offs = kd.arange(0, BLOCK)
    m = offs < n
    x = kd.load(x_ptr + offs * stride, mask=m)
    kd.store(out_ptr + offs, x + kd.load(y_ptr + offs, mask=m), mask=m)


def cases() -> dict[str, Callable[[], object]]:
    x = np.arange(64, dtype=np.float32)
    y = np.ones(16, np.float32)
    out = np.empty(16, np.float32)
    sm = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    out_cases: dict[str, Callable[[], object]] = {
        "kdsl plain": lambda: add[(1,)](x, y, out, 16, BLOCK=16),
        "kdsl stride 1": lambda: gather_add[(1,)](x, y, out, 16, 1, BLOCK=16),
        "kdsl stride 3": lambda: gather_add[(1,)](x, y, out, 16, 3, BLOCK=16),
        "kdsl options": lambda: add[(1,)](x, y, out, 16, BLOCK=16, backend="llvm",
                                         num_warps=4),
        "kdsl grid callable": lambda: add[lambda meta: (1,)](x, y, out, 16, BLOCK=16),
        "kernels.softmax": lambda: kd.kernels.softmax(sm),
    }
    try:
        import numba

        @numba.njit(cache=False)
        def nb_add(a, b, c):
            for i in range(a.shape[0]):
                c[i] = a[i] + b[i]

        xs = x[:16].copy()
        out_cases["numba njit add"] = lambda: nb_add(xs, y, out)
    except ImportError:
        pass
    try:
        import torch

        ta, tb, tc = torch.ones(16), torch.ones(16), torch.empty(16)
        out_cases["torch.add(out=)"] = lambda: torch.add(ta, tb, out=tc)
    except ImportError:
        pass
    return out_cases


def check() -> None:
    """The launches compute what they should (a benchmark of a wrong result is no benchmark)."""
    x = np.arange(64, dtype=np.float32)
    y = np.ones(16, np.float32)
    out = np.empty(16, np.float32)
    for s in (1, 3):
        gather_add[(1,)](x, y, out, 16, s, BLOCK=16)
        np.testing.assert_array_equal(out, x[: 16 * s : s] + 1)
    sm = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    e = np.exp(sm - sm.max(axis=1, keepdims=True))
    np.testing.assert_allclose(kd.kernels.softmax(sm), e / e.sum(axis=1, keepdims=True),
                               rtol=1e-5)


def run(rounds: int, calls: int, only: list[str] | None
        ) -> dict[str, dict[str, list[float]]]:
    """{case: {"wall": [us per call, per round], "cpu": [...]}}."""
    todo = {k: f for k, f in cases().items() if not only or any(o in k for o in only)}
    for f in todo.values():  # compile and warm every case first
        for _ in range(50):
            f()
    times: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in todo}
    for _ in range(rounds):
        for name, f in todo.items():
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(calls):
                f()
            c1, t1 = time.process_time(), time.perf_counter()
            times[name]["wall"].append((t1 - t0) / calls * 1e6)
            times[name]["cpu"].append((c1 - c0) / calls * 1e6)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--only", default="", help="comma-separated substrings of case names")
    ap.add_argument("--json", default=None, help="write the per-round figures here")
    o = ap.parse_args()
    print(machine_header())
    check()
    times = run(o.rounds, o.calls, [s for s in o.only.split(",") if s] or None)
    print(f"after: {load_line()}")
    print(f"\n{o.rounds} interleaved rounds of {o.calls} calls; microseconds per call\n")
    print("| case | wall median us | wall min us | CPU median us | CPU min us |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, ts in times.items():
        w, c = ts["wall"], ts["cpu"]
        print(f"| {name} | {statistics.median(w):.2f} | {min(w):.2f} | "
              f"{statistics.median(c):.2f} | {min(c):.2f} |")
    if o.json:
        with open(o.json, "w") as f:
            json.dump(times, f, indent=1)


if __name__ == "__main__":
    main()
