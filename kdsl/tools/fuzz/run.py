"""Running generated programs on the backends, comparing outputs, and the command line."""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kdsl.backends import REFERENCE
from kdsl.tools.fuzz.gen import ALL_FEATURES, programs
from kdsl.tools.fuzz.model import _EPS, Program, _is_float

# -------------------------------------------------------------------------------- running

_MODULE_DIR = tempfile.mkdtemp(prefix="kdsl-fuzz-")
_KERNELS: dict[str, Any] = {}


def load_kernel(source: str):
    """Import `source` as a module (written to a file, so the frontend can read it back)."""
    key = hashlib.sha1(source.encode()).hexdigest()[:16]
    if key not in _KERNELS:
        path = os.path.join(_MODULE_DIR, f"kdsl_fuzz_{key}.py")
        with open(path, "w") as f:
            f.write(source)
        spec = importlib.util.spec_from_file_location(f"kdsl_fuzz_{key}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _KERNELS[key] = mod.kern
    return _KERNELS[key]


_GUARD = 8  # elements past every output, which must keep their sentinel
_NP = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16, "int32": np.int32}


def _size(p: Program, shape: tuple[str, ...]) -> int:
    return int(np.prod([p.extents[x] for x in shape])) if shape else 1


def _data(rng: np.random.Generator, dtype: str, n: int, discrete: bool) -> np.ndarray:
    """n random values of `dtype`: ints in [-8, 8], floats in [-2, 2] (multiples of 0.25 when
    `discrete`); bfloat16 as its bits."""
    from kdsl.ir.interp import bf16_bits
    if dtype == "int32":
        return rng.integers(-8, 9, n).astype(np.int32)
    x = (rng.integers(-8, 9, n) / 4.0 if discrete else rng.uniform(-2, 2, n))
    return bf16_bits(x.astype(np.float32)) if dtype == "bfloat16" else x.astype(_NP[dtype])


def make_inputs(p: Program) -> list[np.ndarray]:
    rng = np.random.default_rng(p.data_seed)
    return [_data(rng, dtype, _size(p, shape), p.discrete) for shape, dtype in p.inputs]


def initial_outputs(p: Program) -> list[np.ndarray]:
    """The output buffers before the launch: the sentinel everywhere, or random data (outputs
    that atomics update) followed by the guard."""
    rng = np.random.default_rng(p.data_seed + 1)
    outs = []
    for j, (s, t) in enumerate(p.outputs):
        n = _size(p, s)
        o = np.full(n + _GUARD, _sentinel(t)[0])
        if j < len(p.out_data) and p.out_data[j]:
            o[:n] = _data(rng, t, n, p.discrete)
        outs.append(o)
    return outs


def _sentinel(dtype: str) -> np.ndarray:
    from kdsl.ir.interp import bf16_bits
    if dtype == "bfloat16":
        return bf16_bits(np.array([-77.0], np.float32))
    return np.array([-77], _NP[dtype])


def run_on(p: Program, backend: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Launch the program on one backend; returns the output buffers (guards included)."""
    from kdsl.runtime.dtype_views import bfloat16_view
    kern = load_kernel(p.source)
    outs = initial_outputs(p)
    wrap = (lambda a, t: bfloat16_view(a) if t == "bfloat16" else a)
    args = [wrap(a.copy(), t) for a, (_, t) in zip(inputs, p.inputs)]
    args += [wrap(o, t) for o, (_, t) in zip(outs, p.outputs)]
    e = p.extents
    kern[(1,)](*args, e["M"], e["N"], e["K"], p.n_iter, float(p.sf), int(p.si),
               BM=p.blocks["M"], BN=p.blocks["N"], BK=p.blocks["K"], num_warps=p.num_warps,
               backend=backend)
    return outs


@dataclass
class Mismatch:
    backend: str
    what: str      # "output 0", or "error" for an exception
    message: str

    def kind(self) -> str:
        """Coarse class of the mismatch, used to shrink one example of each."""
        head = self.message.split(":")[0] if self.what == "error" else self.what.split()[0]
        return f"{self.backend}:{self.what.split()[0]}:{head}"


@dataclass
class Report:
    program: Program
    backends: list[str]
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def text(self) -> str:
        if self.ok:
            return f"ok on {', '.join(self.backends)}"
        lines = [f"{len(self.mismatches)} mismatch(es):"]
        lines += [f"  [{m.backend}] {m.what}: {m.message}" for m in self.mismatches]
        lines += ["kernel source:", self.program.source,
                  (f"extents={self.program.extents} blocks={self.program.blocks} "
                   f"n_iter={self.program.n_iter} sf={self.program.sf} si={self.program.si} "
                   f"num_warps={self.program.num_warps}"),
                  "reproducer:", self.program.reproducer(self.backends)]
        return "\n".join(lines)


def _values(a: np.ndarray, dtype: str) -> np.ndarray:
    from kdsl.ir.interp import bf16_from_bits
    return (bf16_from_bits(a) if dtype == "bfloat16" else a).astype(np.float64)


def compare(p: Program, j: int, got: np.ndarray, ref: np.ndarray) -> str | None:
    """None when output `j` agrees with the reference, else a description."""
    from kdsl.tools.tolerance import assert_close
    dtype = p.outputs[j][1]
    n = got.size - _GUARD
    g, r = _values(got, dtype), _values(ref, dtype)
    if not np.array_equal(g[n:], r[n:], equal_nan=True):
        return f"guard elements past the output were written: {g[n:].tolist()}"
    err = p.errs[j]
    if not _is_float(dtype) or err == 0.0:
        bad = ~((g[:n] == r[:n]) | (np.isnan(g[:n]) & np.isnan(r[:n])))
        if bad.any():
            idx = np.flatnonzero(bad)[:5]
            return (f"{int(bad.sum())} of {n} elements differ ({dtype}, exact expected); "
                    f"first (index, got, expected): "
                    f"{[(int(i), g[i].item(), r[i].item()) for i in idx]}")
        return None
    # the tracked bound is absolute: the rule's c * eps * sqrt(k) covering it, not scaled
    k = max(1, math.ceil((err / (8 * _EPS[dtype])) ** 2))
    t = 8 * _EPS[dtype] * math.sqrt(k)
    try:
        assert_close(g[:n], r[:n], dtype=dtype, k=k, atol=t, rtol=t)
    except AssertionError as e:
        return f"{e} [tolerance {t:.3g} from error bound {err:.3g}]"
    return None


def check_program(p: Program, backends: Sequence[str]) -> Report:
    """Run `p` on the interpreter and on `backends`; every difference is a Mismatch."""
    rep = Report(p, list(backends))
    inputs = make_inputs(p)
    try:
        ref = run_on(p, REFERENCE, inputs)
    except Exception as e:  # noqa: BLE001  (the reference itself fails: a frontend bug or a generator bug)
        rep.mismatches.append(Mismatch(REFERENCE, "error", f"{type(e).__name__}: {e}"))
        return rep
    for b in backends:
        if b == REFERENCE:
            continue
        try:
            outs = run_on(p, b, inputs)
        except Exception as e:  # noqa: BLE001  (any failure of a backend is a finding)
            rep.mismatches.append(Mismatch(b, "error", f"{type(e).__name__}: {e}"))
            continue
        for j, (o, r) in enumerate(zip(outs, ref)):
            msg = compare(p, j, o, r)
            if msg:
                rep.mismatches.append(Mismatch(b, f"output {j}", msg))
    return rep


def default_backends() -> list[str]:
    """Every available backend but the reference."""
    from kdsl.runtime.registry import available_backends
    return [b for b in available_backends() if b != REFERENCE]


# ------------------------------------------------------------------------------ the command

class FuzzFailure(AssertionError):
    def __init__(self, report: Report):
        super().__init__(report.text())
        self.report = report


def sweep(examples: int, backends: Sequence[str], seed: int, features=ALL_FEATURES,
          on_report: Callable[[Report], None] | None = None) -> tuple[int, list[Report]]:
    """Run `examples` programs without shrinking; returns (programs run, failing reports)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    failures: list[Report] = []
    count = [0]

    @hseed(seed)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(programs(features))
    def run(p):
        count[0] += 1
        rep = check_program(p, backends)
        if not rep.ok:
            failures.append(rep)
        if on_report:
            on_report(rep)
    run()
    return count[0], failures


def shrink(kind: str, backends: Sequence[str], seed: int, examples: int,
           features=ALL_FEATURES) -> Report | None:
    """Replay the sweep until a program fails with mismatch `kind`, then let hypothesis shrink
    it; returns the minimal failing report."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    @hseed(seed)
    @settings(max_examples=examples, deadline=None, database=None,
              phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck),
              report_multiple_bugs=False, verbosity=0)
    @given(programs(features))
    def run(p):
        rep = check_program(p, backends)
        if any(m.kind() == kind for m in rep.mismatches):
            raise FuzzFailure(rep)
    try:
        run()
    except FuzzFailure as e:
        return e.report
    return None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kdsl.fuzz", description="Differential fuzzing of the compiler: random kernels on every backend.")
    ap.add_argument("--examples", type=int, default=200, help="programs to run")
    ap.add_argument("--backends", default=None,
                    help="comma-separated backends compared with interp (default: available)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-shrink", action="store_true", help="do not minimise mismatches")
    ap.add_argument("--without", default="",
                    help=f"comma-separated features not to generate: {sorted(ALL_FEATURES)}")
    args = ap.parse_args(argv)
    os.environ.setdefault("KDSL_CACHE_DIR", tempfile.mkdtemp(prefix="kdsl-fuzz-cache-"))
    backends = args.backends.split(",") if args.backends else default_backends()
    features = ALL_FEATURES - {f.strip() for f in args.without.split(",") if f.strip()}
    t0 = time.time()

    def progress(rep: Report) -> None:
        if not rep.ok:
            print(f"--- MISMATCH\n{rep.text()}", flush=True)

    n, failures = sweep(args.examples, backends, args.seed, features, progress)
    print(f"ran {n} programs on interp + {','.join(backends)} in {time.time() - t0:.0f} s: "
          f"{len(failures)} with mismatches", flush=True)
    if failures and not args.no_shrink:
        kinds = sorted({m.kind() for r in failures for m in r.mismatches})
        for kind in kinds:
            rep = shrink(kind, backends, args.seed, args.examples, features)
            print(f"=== minimal program for {kind}:")
            print(rep.text() if rep else "(did not reproduce)", flush=True)
    return 1 if failures else 0

