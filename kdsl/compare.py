"""Cross-backend comparison of a kernel against a float64 reference (`kd.testing.compare`).

    report = kd.testing.compare(kernel, args, grid=grid, reference=ref, BLOCK=128)
    report = kd.testing.compare("softmax", (x,))          # a library kernel by name
    print(report); report.passed; report.bundle

Two kinds of `fn`:

- a library kernel (`kdsl.kernels.<name>`, by name or as the function): it is called as
  `fn(*args, backend=b, **kwargs)` on each backend and its returned array(s) are compared with
  `kdsl.kernels.reference.<name>(*args, **kwargs)`;
- a `@kd.jit` kernel: it is launched as `fn[grid](*args, backend=b, **kwargs)` on fresh copies of
  `args` per backend; its outputs are the arrays it stores to (found by the compiler), and
  `reference(*args, **kwargs)` returns their expected values: one array (one output), a tuple (in
  parameter order) or a dict (parameter name -> array).  Without a reference, the `interp`
  backend's result is the reference (and the report says so).

Each output on each backend gets max abs / rel error, the error in ULPs of the output dtype (with
a histogram; over the elements whose |reference| is at least 1/16 of the largest, since near zero
an error of a few ULPs of the scale is thousands of ULPs of the element), NaN/Inf counts,
pass/fail against the rule of `kdsl.testing.tolerance(dtype, k, acc_dtype, k_out)` (`k` =
`reduction_size`; library kernels accumulate in float32), and the worst elements.  A comparison
that compared nothing (every backend skipped, or only the reference backend) has failed, and
says why (`reason`); an unknown backend name is a ValueError.  For `@kd.jit` kernels (and library kernels that make
one launch writing their result) the worst elements name the program that wrote them, or whose
masked-off store lanes addressed them: the kernel is re-run on the interpreter with a store that
records the writing program id of every element (`program_map`).

On a mismatch a repro bundle is written (`write_bundle`): inputs.npz, meta.json, a copy of the
kernel's source file, every IR stage and the generated source, and repro.sh / repro.py, whose
run reproduces the comparison on the failing backend (exit 1 while it still fails).
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import json
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .testing import _dtype_name, as_float64, elementwise_errors, tolerance

#: ULP histogram bins: [lo, hi) in ULPs of the output dtype
ULP_BINS: tuple[tuple[float, float], ...] = (
    (0, 1), (1, 2), (2, 4), (4, 16), (16, 256), (256, math.inf),
)
#: ULPs are measured where |reference| >= this fraction of its largest |value|
ULP_MIN_FRACTION = 1.0 / 16
#: the library kernels whose output carries roundings of an intermediate to the input dtype
#: (docs/numerics.md): the `k_out` of their tolerance
LIBRARY_K_OUT = {"mlp": 2, "attention": 2, "decode_attention": 2, "quant_matmul": 2}


# ------------------------------------------------------------------------------ results

@dataclass
class Worst:
    """One badly wrong element: its index, values, errors and the program that wrote it."""

    index: tuple[int, ...]
    got: float
    expected: float
    abs_err: float
    ulps: float | None  # None: too near zero for ULPs to mean anything
    program: tuple[int, ...] | None = None
    how: str = ""  # "wrote", "masked off" (addressed under a false mask) or "" (unknown)

    def where(self) -> str:
        if self.program is None:
            return ""
        pid = ", ".join(str(p) for p in self.program)
        return f"pid=({pid}) {self.how}" if self.how else f"pid=({pid})"


@dataclass
class Result:
    """One output of one backend compared with the reference."""

    backend: str
    output: str
    dtype: str = ""
    size: int = 0
    passed: bool = False
    error: str | None = None  # the run raised: its message
    k: int = 1  # the reduction length of the tolerance
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: float | None = 0.0  # None: no element far enough from zero to count ULPs
    ulp_hist: dict[str, int] = field(default_factory=dict)
    nan: tuple[int, int] = (0, 0)  # (NaNs in the output, NaNs in the reference)
    inf: tuple[int, int] = (0, 0)
    n_bad: int = 0
    atol: float = 0.0  # absolute: the rule's atol times `scale`
    rtol: float = 0.0
    scale: float = 1.0  # the reference's largest finite |value| (1 if none)
    worst: list[Worst] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def status(self) -> str:
        if self.error is not None:
            return "ERROR"
        return "ok" if self.passed else "FAIL"


@dataclass
class CompareReport:
    """Per-backend results of `compare`; `str()` is a printable table."""

    name: str
    results: list[Result]
    reference: str  # what the outputs were compared against
    reduction_size: int = 1
    bundle: Path | None = None
    skipped: dict[str, str] = field(default_factory=dict)  # backend -> why
    acc_dtype: str | None = None  # of the tolerance rule
    k_out: int = 1

    @property
    def passed(self) -> bool:
        """True when something was compared and everything compared agreed."""
        return bool(self.results) and all(r.passed for r in self.results)

    @property
    def reason(self) -> str | None:
        """Why nothing was compared (then the comparison has failed), else None."""
        if self.results:
            return None
        why = "; ".join(f"{b}: {w}" for b, w in self.skipped.items())
        return "nothing compared" + (f" ({why})" if why else " (no backend given)")

    @property
    def exit_status(self) -> int:
        """`kdsl compare`'s exit status: 0 passed, 1 a mismatch (or a crash), 2 nothing
        compared."""
        return 0 if self.passed else 2 if not self.results else 1

    def failures(self) -> list[Result]:
        return [r for r in self.results if not r.passed]

    def table(self, worst: bool = True) -> str:
        head = (f"{'backend':<8} {'output':<10} {'dtype':<9} {'k':>6} {'max abs':>9} "
                f"{'max rel':>9} {'max ulp':>8} {'nan o/r':>8} {'bad':>7} {'atol':>8} "
                f"{'rtol':>8}  status")
        title = (f"{self.name}: reference {self.reference}; an element fails when "
                 "|err| > atol + rtol*|ref| (atol = rtol * max|ref|)")
        lines = [title, head, "-" * len(head)]
        for r in self.results:
            if r.error is not None:
                lines.append(f"{r.backend:<8} {r.output:<10} {r.dtype:<9} {r.k:>6}  "
                             f"ERROR: {r.error.splitlines()[0][:80]}")
                continue
            lines.append(
                f"{r.backend:<8} {r.output:<10} {r.dtype:<9} {r.k:>6} {r.max_abs:9.2e} "
                f"{r.max_rel:9.2e} {_fmt_ulp(r.max_ulp):>8} {f'{r.nan[0]}/{r.nan[1]}':>8} "
                f"{r.n_bad:>7} {r.atol:8.1e} {r.rtol:8.1e}  {r.status}")
        for b, why in self.skipped.items():
            lines.append(f"{b:<8} skipped: {why}")
        if self.reason:
            lines.append(f"FAILED: {self.reason}")
        if worst:
            for r in self.failures():
                if r.error is not None or not r.worst:
                    continue
                hist = " ".join(f"{k}:{v}" for k, v in r.ulp_hist.items() if v)
                lines.append(f"  {r.backend}/{r.output}: {r.n_bad} of {r.size} elements bad; "
                             f"ulp histogram {hist}")
                for w in r.worst:
                    ulp = f", {_fmt_ulp(w.ulps)} ulp" if w.ulps is not None else ""
                    lines.append(f"    at {w.index}: got {w.got:.7g} expected {w.expected:.7g}"
                                 f" (err {w.abs_err:.2e}{ulp}) {w.where()}")
        if self.bundle is not None:
            lines.append(f"repro bundle: {self.bundle} (run: sh {self.bundle / 'repro.sh'})")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def to_dict(self) -> dict[str, Any]:
        def res(r: Result) -> dict[str, Any]:
            d = {k: getattr(r, k) for k in ("backend", "output", "dtype", "size", "passed",
                                              "error", "k", "max_abs", "max_rel", "max_ulp",
                                              "ulp_hist", "nan", "inf", "n_bad", "atol",
                                              "rtol", "scale")}
            d["worst"] = [{"index": w.index, "got": w.got, "expected": w.expected,
                           "program": w.program, "how": w.how} for w in r.worst]
            return _jsonable(d)
        return {"name": self.name, "reference": self.reference, "passed": self.passed,
                "reason": self.reason, "skipped": dict(self.skipped),
                "results": [res(r) for r in self.results],
                "bundle": str(self.bundle) if self.bundle else None}


def _fmt_ulp(u: float | None) -> str:
    if u is None:
        return "-"
    if not math.isfinite(u):
        return "inf"
    return f"{u:.0f}" if u < 1e6 else f"{u:.1e}"


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        v = float(x)
        return v if math.isfinite(v) else str(v)
    if isinstance(x, np.integer):
        return int(x)
    return x


# ------------------------------------------------------------------------------ errors

def _as_f64(a: Any, dtype: str) -> np.ndarray:
    return as_float64(a, dtype)


def ulp_of(expected: np.ndarray, dtype: str) -> np.ndarray:
    """One unit in the last place of `dtype` at each |expected| (1 for integers).  Near zero the
    spacing is that of the smallest normal number: ULPs there measure noise, the absolute
    tolerance governs pass/fail."""
    e = np.abs(expected)
    if dtype in ("float16", "float32", "float64"):
        f = np.finfo(dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            v = np.maximum(np.nan_to_num(e, posinf=float(f.max)), float(f.tiny)).astype(dtype)
        return np.spacing(v).astype(np.float64)
    if dtype == "bfloat16":  # 8 significant bits, float32's exponent range
        e = np.maximum(np.nan_to_num(e, posinf=3e38), 2.0**-126)
        return np.exp2(np.floor(np.log2(e)) - 7)
    return np.ones_like(e)


def measure(backend: str, output: str, got: Any, expected: Any, dtype: str, k: int,
            n_worst: int = 5, acc_dtype: str | None = None,
            k_out: int = 1) -> tuple[Result, np.ndarray]:
    """Compare one output with its reference under `tolerance(dtype, k, acc_dtype, k_out)`:
    (Result, per-element badness) where badness is the error over the allowed error (>1 fails;
    inf for NaN / Inf mismatches)."""
    a = _as_f64(got, dtype)
    e = np.asarray(expected, dtype=np.float64)
    r = Result(backend, output, dtype, int(a.size), k=k)
    if a.shape != e.shape:
        if a.size == e.size:
            a = a.reshape(e.shape)
        else:
            r.error = f"shape {a.shape} != reference shape {e.shape}"
            return r, np.zeros(0)
    tol = tolerance(dtype, k, acc_dtype, k_out)
    r.scale = tol.scale(e)
    r.atol, r.rtol = tol.atol * r.scale, tol.rtol
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    r.nan = (int(nan_a.sum()), int(nan_e.sum()))
    r.inf = (int(np.isinf(a).sum()), int(np.isinf(e).sum()))
    err, allowed = elementwise_errors(a, e, tol, r.scale)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        badness = np.where(err == 0, 0.0, np.where(allowed > 0, err / allowed, np.inf))
        rel = np.where(err == 0, 0.0, err / np.maximum(np.abs(e), np.finfo(np.float64).tiny))
        ulps = err / ulp_of(e, dtype)
    # ULPs of an element near zero measure the scale's rounding, not the element's precision
    counted = np.isnan(e) | ~np.isfinite(err) | (np.abs(np.nan_to_num(e))
                                                  >= ULP_MIN_FRACTION * r.scale)
    finite = np.isfinite(err)
    r.max_abs = float(err.max()) if err.size else 0.0
    r.max_rel = float(rel.max()) if err.size else 0.0
    r.max_ulp = float(ulps[counted].max()) if counted.any() else None
    r.ulp_hist = {}
    for lo, hi in ULP_BINS:
        label = f">={lo:g}" if hi == math.inf else f"{lo:g}-{hi:g}"
        inside = (ulps >= lo) & (ulps < hi) | (~finite & (hi == math.inf))
        r.ulp_hist[label] = int((inside & counted).sum())
    bad = badness > 1
    r.n_bad = int(bad.sum())
    r.passed = r.n_bad == 0
    if r.n_bad:
        flat = np.argsort(-badness, axis=None, kind="stable")[:min(n_worst, r.n_bad)]
        for f in flat:
            i = np.unravel_index(int(f), e.shape)
            r.worst.append(Worst(tuple(int(x) for x in i), float(a[i]), float(e[i]),
                                 float(err[i]), float(ulps[i]) if counted[i] else None))
    return r, badness


# ------------------------------------------------------------------------------ launches

@dataclass
class Launch:
    """One `kernel[grid](...)` call seen by `record_launches`."""

    jit: Any
    grid: Any
    args: tuple
    kwargs: dict
    backend: str | None
    num_warps: int | None


@contextlib.contextmanager
def record_launches(dry: bool = False) -> Iterator[list[Launch]]:
    """Record every @kd.jit launch made inside the block (a library function's kernels).  With
    `dry`, launches are compiled, never run (code generation for a backend with no device)."""
    from kdsl.runtime.jit import JITFunction

    orig = JITFunction._run
    launches: list[Launch] = []

    # extra launch options (added to `_run` over time) pass through untouched
    def _run(self, grid, args, kwargs, backend, num_warps, check, *more, **more_kw):
        launches.append(Launch(self, grid, tuple(args), dict(kwargs), backend, num_warps))
        if dry:
            return self.compile(*args, backend=backend, num_warps=num_warps, check=check,
                                **kwargs)
        return orig(self, grid, args, kwargs, backend, num_warps, check, *more, **more_kw)

    JITFunction._run = _run
    try:
        yield launches
    finally:
        JITFunction._run = orig


def _grid_tuple(kernel: Any, grid: Any, args: Sequence, kwargs: dict) -> tuple[int, ...]:
    if callable(grid):
        sig = kernel.signature
        values = sig.bind(tuple(args), {k: v for k, v in kwargs.items() if k in sig.index})
        grid = grid(dict(zip(sig.names, values)))
    if isinstance(grid, int):
        grid = (grid,)
    return tuple(int(g) for g in grid)


def program_map(kernel: Any, grid: Any, args: Sequence, kwargs: dict,
                num_warps: int | None = None) -> dict[str, tuple[np.ndarray, np.ndarray, tuple]]:
    """Which program wrote each element of each array the kernel stores to: parameter name ->
    (writer, masked, grid) where `writer[i]` is the linear id of the last program that stored
    element i (-1: none) and `masked[i]` the last program whose store addressed i with a false
    mask.  Runs the kernel once on the interpreter, on copies of `args`."""
    from kdsl.ir import interp
    from kdsl.passes.provenance import stored_params

    grid3 = (_grid_tuple(kernel, grid, args, kwargs) + (1, 1, 1))[:3]
    args = tuple(_copy(a) for a in args)
    ck = kernel.compile(*args, backend="interp", num_warps=num_warps, **kwargs)
    fn = ck.kernel
    sig = kernel.signature
    values = sig.bind(args, {k: v for k, v in kwargs.items() if k in sig.index})
    # a runtime argument given None (or a constexpr) is a compile-time constant, no parameter
    runtime = [v for v, c in zip(values, sig.is_constexpr)
               if not c and v is not None and type(v).__name__ != "constexpr"]
    params = fn.runtime_params
    buffers, vals = [], []
    for i, (p, a) in enumerate(zip(params, runtime)):
        if p.type.is_ptr:
            a = getattr(a, "array", a)  # a DTypeView's bits
            buffers.append(interp._buffer(np.ascontiguousarray(a)))
            vals.append(interp.Ptr(i, np.asarray(0, dtype=np.int64)))
        else:
            buffers.append(None)
            vals.append(interp.scalar_value(a, p.type.elem))
    stored = sorted(stored_params(fn))
    writer = {i: np.full(buffers[i].shape[0], -1, np.int64) for i in stored}
    masked = {i: np.full(buffers[i].shape[0], -1, np.int64) for i in stored}

    class Recorder(interp._Machine):
        def _record(self, op, ins: list, mask_at: int) -> None:
            ptr = ins[0]
            if ptr.buf not in writer:
                return
            lin = self.pid[0] + grid3[0] * (self.pid[1] + grid3[1] * self.pid[2])
            # element offsets (a pointer's offsets count bytes)
            off = np.asarray(ptr.off).ravel() // op.operands[0].type.elem.pointee.np.itemsize
            n = writer[ptr.buf].shape[0]
            if len(ins) > mask_at:
                sel = np.broadcast_to(np.asarray(ins[mask_at], bool),
                                      np.shape(ptr.off)).ravel()
                off_m = off[~sel]
                masked[ptr.buf][off_m[(off_m >= 0) & (off_m < n)]] = lin
                off = off[sel]
            writer[ptr.buf][off[(off >= 0) & (off < n)]] = lin

        def store(self, op, ins):
            super().store(op, ins)
            self._record(op, ins, 2)

        def atomic(self, op, ins):
            out = super().atomic(op, ins)
            self._record(op, ins, 3 if op.kind == "atomic_cas" else 2)
            return out

    m = Recorder(fn, grid3, buffers)
    with np.errstate(all="ignore"):
        for z in range(grid3[2]):
            for y in range(grid3[1]):
                for x in range(grid3[0]):
                    m.pid = (x, y, z)
                    m.env = {}
                    m.run_block(fn.body, vals)
    return {params[i].name: (writer[i], masked[i], grid3) for i in stored}


def _pid_tuple(lin: int, grid3: tuple) -> tuple[int, ...]:
    x = lin % grid3[0]
    y = (lin // grid3[0]) % grid3[1]
    z = lin // (grid3[0] * grid3[1])
    dims = 3 if grid3[2] > 1 else 2 if grid3[1] > 1 else 1
    return (x, y, z)[:dims]


def _locate(result: Result, pmap: tuple[np.ndarray, np.ndarray, tuple], shape: tuple) -> None:
    writer, masked, grid3 = pmap
    for w in result.worst:
        flat = int(np.ravel_multi_index(w.index, shape)) if shape else 0
        if flat < writer.shape[0] and writer[flat] >= 0:
            w.program, w.how = _pid_tuple(int(writer[flat]), grid3), "wrote it"
        elif flat < masked.shape[0] and masked[flat] >= 0:
            w.program, w.how = _pid_tuple(int(masked[flat]), grid3), "masked it off"
        else:
            w.how = "no program addressed it"


# ------------------------------------------------------------------------------ compare

def _copy(a: Any) -> Any:
    from kdsl.runtime.binding import DTypeView
    if isinstance(a, DTypeView):  # bfloat16 / fp8 bits: copy the bits, keep the reading
        return DTypeView(_copy(a.array), a.dtype)
    if isinstance(a, np.ndarray) or type(a).__module__.startswith("torch"):
        from kdsl.runtime.views import copy_like  # same strides: the kernel's are the original's
        return copy_like(a)
    if hasattr(a, "copy") and hasattr(a, "shape") and not np.isscalar(a):
        return a.copy()
    return a


def _host(a: Any) -> np.ndarray:
    from kdsl.runtime.binding import DTypeView
    if isinstance(a, DTypeView):  # the bits; `_out_dtype` says how to read them
        return _host(a.array)
    if hasattr(a, "get") and not isinstance(a, np.ndarray):
        return np.asarray(a.get())
    return np.asarray(a)


def _is_jit(fn: Any) -> bool:
    return hasattr(fn, "signature") and hasattr(fn, "compile") and hasattr(fn, "fn")


def library_function(name: str) -> tuple[Callable, Callable]:
    """(kernel, reference) of library kernel `name` from `kdsl.kernels`."""
    import kdsl.kernels as K
    fn = getattr(K, name, None)
    if fn is None or not callable(fn):
        raise ValueError(f"kdsl.kernels has no kernel {name!r}")
    from kdsl.kernels import reference as R
    ref = getattr(R, name, None)
    if ref is None:
        raise ValueError(f"kdsl.kernels.reference has no reference {name!r}")
    return fn, ref


def _default_backends() -> list[str]:
    from kdsl.runtime.registry import available_backends
    return available_backends()


def check_backend_names(backends: Sequence[str]) -> None:
    """ValueError naming the unknown ones (a typo must not become "nothing to compare")."""
    from kdsl.backends import all_backend_names
    known = all_backend_names()
    unknown = [b for b in backends if b not in known]
    if unknown:
        raise ValueError(f"unknown backend{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(map(repr, unknown))}; known backends: {', '.join(known)}")


def _outputs_of(value: Any, names: Sequence[str]) -> dict[str, Any]:
    """A reference's or library function's return value as {output name: array}."""
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return dict(zip(names, value)) if len(names) == len(value) else \
            {f"out{i}": v for i, v in enumerate(value)}
    return {names[0] if names else "out": value}


def compare(fn: Any, args: Sequence, backends: Sequence[str] | None = None,
            reference: Callable | None = None, *, grid: Any = None, reduction_size: int = 1,
            num_warps: int | None = None, bundle_dir: str | os.PathLike | None = None,
            bundle: bool = True, repro_command: str | None = None, n_worst: int = 5,
            acc_dtype: str | None = None, k_out: int | None = None,
            **kwargs: Any) -> CompareReport:
    """Run `fn` on every backend in `backends` (default: every available one, interp included)
    and compare each output with the float64 reference; see the module docstring for the
    argument conventions.  The tolerance is `kdsl.testing.tolerance(dtype, reduction_size,
    acc_dtype, k_out)`; library kernels default to `acc_dtype="float32"` and their `k_out`
    (`LIBRARY_K_OUT`).  On a mismatch (and with `bundle`), writes a repro bundle under
    `bundle_dir` (default `$KDSL_REPRO_DIR` or `./kdsl-repro`)."""
    if backends:
        backends = list(backends)
        check_backend_names(backends)
    else:
        backends = _default_backends()
    args = tuple(args)
    if isinstance(fn, str):
        fn, ref = library_function(fn)
        reference = reference or ref
    jit = _is_jit(fn)
    name = getattr(fn, "__name__", str(fn))
    if not jit:  # the library computes in float32 (docs/numerics.md)
        acc_dtype = acc_dtype or "float32"
        k_out = k_out if k_out is not None else LIBRARY_K_OUT.get(name, 1)
    k_out = 1 if k_out is None else k_out
    if jit and grid is None:
        raise TypeError(f"compare({name}): a @kd.jit kernel needs grid=")
    if not jit and reference is None:
        import kdsl.kernels.reference as R
        reference = getattr(R, name, None)
        if reference is None:
            raise ValueError(f"compare({name}): no reference given and none in "
                             "kdsl.kernels.reference")

    out_names: list[str] = []
    if jit:
        from kdsl.passes.provenance import stored_params
        ck = fn.compile(*args, backend="interp", num_warps=num_warps, **kwargs)
        rt = ck.kernel.runtime_params
        out_names = [rt[i].name for i in sorted(stored_params(ck.kernel))]

    def run(backend: str) -> tuple[dict[str, Any], list[Launch]]:
        cargs = tuple(_copy(a) for a in args)
        with record_launches() as launches:
            if jit:
                fn[grid](*cargs, backend=backend, num_warps=num_warps, **kwargs)
                sig = fn.signature
                values = dict(zip(sig.names, sig.bind(cargs, dict(kwargs))))
                return {n: values[n] for n in out_names}, launches
            return _outputs_of(fn(*cargs, backend=backend, **kwargs), out_names), launches

    skipped: dict[str, str] = {}
    if reference is not None:
        ref_kind = f"{getattr(reference, '__module__', '')}.{getattr(reference, '__name__', '')}"
        with np.errstate(all="ignore"):
            # a jit kernel's kwargs are its constexprs: the reference takes the arrays only
            rkw = {} if jit else kwargs
            expected = _outputs_of(reference(*(_copy(a) for a in args), **rkw),
                                   out_names or ["out"])
        if not out_names:
            out_names = list(expected)
        expected = {k: as_float64(v) for k, v in expected.items()}
    else:
        ref_kind = "the interp backend (no float64 reference given)"
        outs, _ = run("interp")
        expected = {k: _as_f64(_host(v), _out_dtype(v)) for k, v in outs.items()}
        if "interp" in backends:
            skipped["interp"] = "it is the reference (no float64 reference given)"
        backends = [b for b in backends if b != "interp"]

    from kdsl.runtime.registry import backend_status
    results: list[Result] = []
    failing: dict[str, tuple[dict[str, Any], list[Launch]]] = {}
    for b in backends:
        try:
            ok, why = backend_status(b)
        except ValueError as e:
            ok, why = False, str(e)
        if not ok:
            skipped[b] = why
            continue
        t0 = time.perf_counter()
        try:
            outs, launches = run(b)
        except Exception as e:  # a crash is a result, not the end of the comparison
            results.append(Result(b, "*", error=f"{type(e).__name__}: {e}"))
            failing[b] = ({}, [])
            continue
        dt = time.perf_counter() - t0
        for oname, exp in expected.items():
            got = outs.get(oname)
            if got is None:
                results.append(Result(b, oname, error="output missing"))
                continue
            r, _ = measure(b, oname, _host(got), exp, _out_dtype(got), reduction_size,
                           n_worst, acc_dtype, k_out)
            r.seconds = dt
            results.append(r)
            if not r.passed:
                failing[b] = (outs, launches)

    report = CompareReport(name, results, ref_kind, reduction_size, skipped=skipped,
                           acc_dtype=acc_dtype, k_out=k_out)
    if failing:
        _localise(report, fn, jit, args, kwargs, grid, num_warps)
        if bundle:
            b = next(iter(failing))
            report.bundle = write_bundle(report, fn, jit, args, kwargs, grid, b, expected,
                                         failing[b][1], num_warps, bundle_dir, repro_command)
    return report


def _out_dtype(a: Any) -> str:
    dt = getattr(a, "dtype", None)
    return _dtype_name(dt) if dt is not None else "float64"


def _localise(report: CompareReport, fn: Any, jit: bool, args: tuple, kwargs: dict,
              grid: Any, num_warps: int | None) -> None:
    """Name the programs behind the worst elements (best effort: never fails the report)."""
    try:
        if jit:
            pmaps = program_map(fn, grid, args, kwargs, num_warps)
            shapes = {n: getattr(v, "array", v).shape for n, v in zip(
                fn.signature.names, fn.signature.bind(args, dict(kwargs)))
                if hasattr(getattr(v, "array", v), "shape")}  # a DTypeView's: its bits'
        else:  # a library kernel: the one launch whose stored array is the returned output
            cargs = tuple(_copy(a) for a in args)
            with record_launches() as launches:
                out = fn(*cargs, backend="interp", **kwargs)
            outs = _outputs_of(out, [r.output for r in report.results][:1])
            pmaps, shapes = {}, {}
            for oname, arr in outs.items():
                arr = getattr(arr, "array", arr)  # a DTypeView's bits
                for ln in launches:
                    names = ln.jit.signature.names
                    vals = ln.jit.signature.bind(ln.args, ln.kwargs)
                    for n, v in zip(names, vals):
                        v = getattr(v, "array", v)
                        if isinstance(v, np.ndarray) and isinstance(arr, np.ndarray) \
                                and np.shares_memory(v, arr):
                            pm = program_map(ln.jit, ln.grid, ln.args, ln.kwargs, ln.num_warps)
                            if n in pm:
                                pmaps[oname], shapes[oname] = pm[n], arr.shape
        for r in report.failures():
            if r.output in pmaps and r.worst:
                _locate(r, pmaps[r.output], shapes.get(r.output, ()))
    except Exception:  # localisation is a diagnostic; the comparison stands without it
        pass


# ------------------------------------------------------------------------------ bundles

def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)


_SOURCE_EXT = {"llvm": "ll", "opencl": "cl", "cuda": "cu", "interp": "tile"}


def write_bundle(report: CompareReport, fn: Any, jit: bool, args: tuple, kwargs: dict,
                 grid: Any, backend: str, expected: dict[str, np.ndarray],
                 launches: list[Launch], num_warps: int | None,
                 bundle_dir: str | os.PathLike | None, repro_command: str | None) -> Path:
    """Write the repro bundle of a failed comparison on `backend`; returns its folder."""
    root = Path(bundle_dir or os.environ.get("KDSL_REPRO_DIR") or "kdsl-repro")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = root / f"{_safe(report.name)}-{backend}-{stamp}"
    n = 1
    while out.exists():
        n += 1
        out = root / f"{_safe(report.name)}-{backend}-{stamp}-{n}"
    (out / "ir").mkdir(parents=True)

    views = {str(i): a.dtype.name for i, a in enumerate(args) if hasattr(a, "array")}
    arrays = {f"arg{i}": _host(a) for i, a in enumerate(args)}
    arrays.update({f"expected_{k}": v for k, v in expected.items()})
    np.savez(out / "inputs.npz", **arrays)

    src_file = inspect.getsourcefile(getattr(fn, "fn", fn))
    if src_file and Path(src_file).is_file():
        shutil.copy(src_file, out / "kernel_source.py")

    # every IR stage and the generated source of each kernel the failing run launched
    kernels = [(fn, args, kwargs)] if jit else [(ln.jit, ln.args, ln.kwargs) for ln in launches]
    seen = set()
    for j, (kern, kargs, kkw) in enumerate(kernels):
        try:
            ck = kern.compile(*kargs, backend=backend, num_warps=num_warps, **kkw)
        except Exception as e:
            (out / "ir" / f"{j}_compile_error.txt").write_text(f"{type(e).__name__}: {e}\n")
            continue
        if id(ck) in seen:
            continue
        seen.add(id(ck))
        prefix = f"{j}_{_safe(kern.__name__)}" if len(kernels) > 1 else _safe(kern.__name__)
        for s, (stage, text) in enumerate(ck.ir.items()):
            (out / "ir" / f"{prefix}.{s:02d}.{_safe(stage)}.txt").write_text(text)
        ext = _SOURCE_EXT.get(backend, "txt")
        (out / f"{prefix}.{ext}").write_text(ck.source)

    meta = {
        "kind": "jit" if jit else "library",
        "name": report.name,
        "module_file": str(Path(src_file).resolve()) if src_file else None,
        "backend": backend,
        "kwargs": {k: _meta_value(v) for k, v in kwargs.items()},
        "grid": list(_grid_tuple(fn, grid, args, kwargs)) if jit else None,
        "n_args": len(args),
        "outputs": list(expected),
        "reduction_size": report.reduction_size,
        "acc_dtype": report.acc_dtype,
        "k_out": report.k_out,
        "views": views,
        "num_warps": num_warps,
        "command": repro_command,
        "report": report.to_dict(),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    (out / "repro.py").write_text(
        '"""Reproduces a failed kdsl comparison: exit 1 while the backend still disagrees."""\n'
        "import sys\nfrom pathlib import Path\n\nfrom kdsl.compare import run_bundle\n\n"
        "sys.exit(run_bundle(Path(__file__).resolve().parent))\n")
    lines = ["#!/bin/sh", "# Reproduces the mismatch; exits 1 while it persists.",
             'cd "$(dirname "$0")" || exit 2']
    if repro_command:
        lines.append(f"# the original command: {repro_command}")
    lines.append(f'exec "{sys.executable}" repro.py "$@"')
    (out / "repro.sh").write_text("\n".join(lines) + "\n")
    (out / "repro.sh").chmod(0o755)
    (out / "report.txt").write_text(report.table() + "\n")
    return out


def _meta_value(v: Any) -> Any:
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if hasattr(v, "kind") and hasattr(v, "bits"):
        return {"dtype": v.name}
    return {"repr": repr(v)}


def _meta_decode(v: Any) -> Any:
    if isinstance(v, dict) and "dtype" in v:
        from kdsl.ir import types as T
        return T.BY_NAME[v["dtype"]]
    if isinstance(v, dict):
        raise ValueError(f"cannot rebuild keyword argument {v['repr']}")
    return v


def load_module(path: str | os.PathLike, name: str | None = None) -> Any:
    """Import a Python file as a module (its folder goes on sys.path for its own imports)."""
    file = Path(path)
    spec = importlib.util.spec_from_file_location(name or file.stem, file)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.parent.resolve()))
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def run_bundle(folder: str | os.PathLike, backends: Sequence[str] | None = None) -> int:
    """Re-run the comparison a bundle recorded; prints the report, returns its exit status
    (1 on a mismatch, 2 when nothing could be compared)."""
    from kdsl.ir import types as T
    from kdsl.runtime.binding import DTypeView
    folder = Path(folder)
    meta = json.loads((folder / "meta.json").read_text())
    data = np.load(folder / "inputs.npz")
    views = meta.get("views", {})
    args = tuple(DTypeView(data[f"arg{i}"], T.BY_NAME[views[str(i)]]) if str(i) in views
                 else data[f"arg{i}"][()] if data[f"arg{i}"].ndim == 0 else data[f"arg{i}"]
                 for i in range(meta["n_args"]))
    tol = {"acc_dtype": meta.get("acc_dtype"), "k_out": meta.get("k_out", 1)}
    expected = {k: data[f"expected_{k}"] for k in meta["outputs"]}
    kwargs = {k: _meta_decode(v) for k, v in meta["kwargs"].items()}
    backends = list(backends or [meta["backend"]])

    def reference(*_a, **_k):
        return dict(expected)

    reference.__module__, reference.__name__ = "bundle", "inputs.npz"

    if meta["kind"] == "jit":
        file = meta["module_file"]
        if not file or not Path(file).is_file():
            file = folder / "kernel_source.py"
        kernel = getattr(load_module(file, f"kdsl_repro_{_safe(meta['name'])}"), meta["name"])
        report = compare(kernel, args, backends, reference, grid=tuple(meta["grid"]),
                         reduction_size=meta["reduction_size"], num_warps=meta["num_warps"],
                         bundle=False, **tol, **kwargs)
    else:
        fn, _ = library_function(meta["name"])
        report = compare(fn, args, backends, reference, reduction_size=meta["reduction_size"],
                         bundle=False, **tol, **kwargs)
    print(report.table())
    return report.exit_status


# ------------------------------------------------------------------------------ library cases

@dataclass(frozen=True)
class Case:
    """Default inputs and costs of one library kernel (for `kdsl compare` and `kdsl bench`).

    `make(shape, dtype name, rng) -> (args, kwargs)`; `k(shape)` is the reduction length behind
    each output (the tolerance's k); `flops(shape)` and `bytes(shape, itemsize)` the work and
    the minimum memory traffic; `sweep(size) -> shape` the shapes of a size sweep."""

    make: Callable[[tuple, Any, Any], tuple[tuple, dict]]
    shape: tuple[int, ...]
    k: Callable[[tuple], int]
    flops: Callable[[tuple], float]
    bytes: Callable[[tuple, int], float]
    sweep: Callable[[int], tuple]


def _r(rng: Any, shape: tuple, dtype: str, scale: float = 1.0) -> Any:
    """Standard normal values * scale rounded to `dtype` in the library's spelling (bfloat16:
    a `bfloat16_view`)."""
    from kdsl.kernels.reference import cast
    return cast(rng.standard_normal(shape) * scale, dtype)


def _make_decode(s: tuple, dt: Any, rng: Any) -> tuple[tuple, dict]:
    batch, heads, dim, seq, block = s
    nblk = -(-seq // block)
    table = rng.permutation(batch * nblk).reshape(batch, nblk).astype(np.int32)
    kc = _r(rng, (batch * nblk, block, heads, dim), dt)
    vc = _r(rng, (batch * nblk, block, heads, dim), dt)
    lens = np.full(batch, seq, np.int32)
    return (_r(rng, (batch, heads, dim), dt), kc, vc, table, lens), {}


def _make_quant(s: tuple, dt: Any, rng: Any) -> tuple[tuple, dict]:
    m, n, k, group = s
    wq = rng.integers(-127, 128, (k, n)).astype(np.int8)
    scales = (rng.random((k // group, n)) * 0.02).astype(np.float32)
    return (_r(rng, (m, k), dt), wq, scales, group, 8), {}


def _make_block_sparse(s: tuple, dt: Any, rng: Any) -> tuple[tuple, dict]:
    m, n, k, block, _ = s
    nb = (k // block) * (n // block)
    layout = np.zeros(nb, bool)
    layout[rng.permutation(nb)[:_nnz(s)]] = True   # exactly _nnz(s) blocks (see flops)
    layout = layout.reshape(k // block, n // block)
    return (_r(rng, (m, k), dt), _r(rng, (_nnz(s), block, block), dt), layout, block), {}


def _nnz(s: tuple) -> int:
    """Nonzero blocks of a block_sparse_matmul case (M, N, K, block, percent dense)."""
    _, n, k, block, pct = s
    return round((k // block) * (n // block) * pct / 100)


def _make_24(s: tuple, dt: Any, rng: Any) -> tuple[tuple, dict]:
    from kdsl.kernels.reference import cast, sparsify_2_4
    m, n, k = s
    values, meta = sparsify_2_4(_r(rng, (k, n), dt))
    return (_r(rng, (m, k), dt), cast(values, dt), meta), {}


#: library kernel name -> its case; shapes: softmax/norms (rows, cols), matmul (M, N, K),
#: mlp (tokens, d, hidden), attention (batch, heads, seq, dim), decode_attention
#: (batch, heads, dim, seq, block), quant_matmul (M, N, K, group), block_sparse_matmul
#: (M, N, K, block, percent of blocks present), sparsify_2_4 (K, N),
#: semi_structured_matmul (M, N, K)
CASES: dict[str, Case] = {
    "softmax": Case(lambda s, dt, g: ((_r(g, s, dt),), {}), (64, 1000), lambda s: s[-1],
                    lambda s: 5.0 * s[0] * s[1], lambda s, b: 2.0 * s[0] * s[1] * b,
                    lambda n: (256, n)),
    "layer_norm": Case(lambda s, dt, g: ((_r(g, s, dt), _r(g, s[-1:], dt), _r(g, s[-1:], dt)),
                                         {}), (64, 1000), lambda s: s[-1],
                       lambda s: 8.0 * s[0] * s[1], lambda s, b: 2.0 * s[0] * s[1] * b,
                       lambda n: (256, n)),
    "rms_norm": Case(lambda s, dt, g: ((_r(g, s, dt), _r(g, s[-1:], dt)), {}), (64, 1000),
                     lambda s: s[-1], lambda s: 4.0 * s[0] * s[1],
                     lambda s, b: 2.0 * s[0] * s[1] * b, lambda n: (256, n)),
    "matmul": Case(lambda s, dt, g: ((_r(g, (s[0], s[2]), dt), _r(g, (s[2], s[1]), dt)), {}),
                   (128, 96, 160), lambda s: s[2], lambda s: 2.0 * s[0] * s[1] * s[2],
                   lambda s, b: (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]) * b,
                   lambda n: (n, n, n)),
    "mlp": Case(lambda s, dt, g: ((_r(g, (s[0], s[1]), dt), _r(g, (s[1], s[2]), dt, 0.1),
                                   _r(g, (s[1], s[2]), dt, 0.1),
                                   _r(g, (s[2], s[1]), dt, 0.1)), {}),
                (32, 64, 128), lambda s: s[1] + s[2], lambda s: 6.0 * s[0] * s[1] * s[2],
                lambda s, b: (2 * s[0] * s[1] + 3 * s[1] * s[2]) * b,
                lambda n: (n, n, 2 * n)),
    "attention": Case(lambda s, dt, g: ((_r(g, s, dt), _r(g, s, dt), _r(g, s, dt)), {}),
                      (1, 2, 64, 32), lambda s: s[2] + s[3],
                      lambda s: 4.0 * s[0] * s[1] * s[2] * s[2] * s[3],
                      lambda s, b: 4.0 * s[0] * s[1] * s[2] * s[3] * b,
                      lambda n: (1, 4, n, 64)),
    "decode_attention": Case(_make_decode, (2, 2, 32, 40, 16), lambda s: s[3] + s[2],
                             lambda s: 4.0 * s[0] * s[1] * s[3] * s[2],
                             lambda s, b: 2.0 * s[0] * s[1] * s[3] * s[2] * b,
                             lambda n: (4, 8, 64, n, 16)),
    "quant_matmul": Case(_make_quant, (16, 64, 128, 32), lambda s: s[2],
                         lambda s: 2.0 * s[0] * s[1] * s[2],
                         lambda s, b: s[0] * s[2] * b + s[2] * s[1] + s[0] * s[1] * b,
                         lambda n: (16, n, n, 32)),
    "block_sparse_matmul": Case(_make_block_sparse, (48, 128, 128, 32, 50), lambda s: s[2],
                                lambda s: 2.0 * s[0] * _nnz(s) * s[3] * s[3],
                                lambda s, b: (s[0] * s[2] + _nnz(s) * s[3] * s[3]
                                              + s[0] * s[1]) * b,
                                lambda n: (n, n, n, 64, 10)),
    "sparsify_2_4": Case(lambda s, dt, g: ((_r(g, s, dt),), {}), (256, 96), lambda s: 1,
                         lambda s: 0.0, lambda s, b: s[0] * s[1] * b + s[0] // 2 * s[1] * (b + 1),
                         lambda n: (n, n)),
    "semi_structured_matmul": Case(_make_24, (48, 96, 128), lambda s: s[2] // 2,
                                   lambda s: 1.0 * s[0] * s[1] * s[2],
                                   lambda s, b: (s[0] * s[2] + s[2] // 2 * s[1] + s[0] * s[1])
                                   * b + s[2] // 2 * s[1], lambda n: (n, n, n)),
}


def library_kernels() -> list[str]:
    """Names of the library kernels present in `kdsl.kernels` (the library grows meanwhile)."""
    try:
        import kdsl.kernels as K
    except Exception:
        return []
    return [n for n in CASES if callable(getattr(K, n, None))]


#: the dtypes the library kernels take (`--dtype` of `kdsl compare` and `kdsl bench`)
LIBRARY_DTYPES = ("float32", "float16", "bfloat16")
_DTYPE_ALIASES = {"f32": "float32", "fp32": "float32", "float": "float32", "f16": "float16",
                  "fp16": "float16", "half": "float16", "bf16": "bfloat16"}


def library_dtype(dtype: Any) -> str:
    """The library's name of `dtype` (a name, alias such as "bf16", NumPy or kdsl dtype);
    ValueError for a dtype the library kernels do not take."""
    name = _DTYPE_ALIASES.get(str(dtype), _dtype_name(dtype))
    if name not in LIBRARY_DTYPES:
        raise ValueError(f"dtype {dtype!r}: the library kernels take "
                         f"{', '.join(LIBRARY_DTYPES)}")
    return name


def itemsize(dtype: str) -> int:
    """Bytes per element of a library dtype."""
    return 2 if dtype in ("float16", "bfloat16") else np.dtype(dtype).itemsize


def compare_case(name: str, shape: tuple | None = None, dtype: str = "float32",
                 backends: Sequence[str] | None = None, seed: int = 0,
                 **opts: Any) -> CompareReport:
    """`compare` a library kernel on its default (or given) shape."""
    if name not in CASES:
        raise ValueError(f"{name!r} is not a library kernel ({', '.join(CASES)})")
    case = CASES[name]
    dtype = library_dtype(dtype)
    shape = tuple(shape or case.shape)
    args, kwargs = case.make(shape, dtype, np.random.default_rng(seed))
    cmd = (f"kdsl compare {name} --shape {','.join(map(str, shape))} --dtype {dtype}"
           + (f" --backends {','.join(backends)}" if backends else ""))
    return compare(name, args, backends, reduction_size=case.k(shape), repro_command=cmd,
                   **opts, **kwargs)
