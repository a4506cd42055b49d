"""One comparison's numbers: per output and backend, max abs / rel error, ULPs with a
histogram, NaN/Inf counts, pass/fail under the tolerance rule, the worst elements; the report
of a whole comparison and its printed table (`kd.testing.compare` returns a `CompareReport`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .tolerance import as_float64, elementwise_errors, tolerance

#: ULP histogram bins: [lo, hi) in ULPs of the output dtype
ULP_BINS: tuple[tuple[float, float], ...] = (
    (0, 1), (1, 2), (2, 4), (4, 16), (16, 256), (256, math.inf),
)
#: ULPs are measured where |reference| >= this fraction of its largest |value|
ULP_MIN_FRACTION = 1.0 / 16


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
                f"{r.max_rel:9.2e} {fmt_ulp(r.max_ulp):>8} {f'{r.nan[0]}/{r.nan[1]}':>8} "
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
                    ulp = f", {fmt_ulp(w.ulps)} ulp" if w.ulps is not None else ""
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


def fmt_ulp(u: float | None) -> str:
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
    a = as_float64(got, dtype)
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


__all__ = ["ULP_BINS", "ULP_MIN_FRACTION", "CompareReport", "Result", "Worst", "fmt_ulp",
           "measure", "ulp_of"]
