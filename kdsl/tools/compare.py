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
  parameter order) or a dict (parameter name -> array).  Without a reference, the reference
  backend's result (the interpreter's, `kdsl.backends.REFERENCE`) is the reference (and the
  report says so).

Each output on each backend gets max abs / rel error, the error in ULPs of the output dtype (with
a histogram; over the elements whose |reference| is at least 1/16 of the largest, since near zero
an error of a few ULPs of the scale is thousands of ULPs of the element), NaN/Inf counts,
pass/fail against the rule of `kdsl.testing.tolerance(dtype, k, acc_dtype, k_out)` (`k` =
`reduction_size`; library kernels accumulate in float32), and the worst elements.  A comparison
that compared nothing (every backend skipped, or only the reference backend) has failed, and
says why (`reason`); an unknown backend name is a ValueError.  For `@kd.jit` kernels (and library kernels that make
one launch writing their result) the worst elements name the program that wrote them, or whose
masked-off store lanes addressed them: the kernel is re-run on the interpreter with a store that
records the writing program id of every element (`program_map.py`).

On a mismatch a repro bundle is written (`bundle.py`): inputs.npz, meta.json, a copy of the
kernel's source file, every IR stage and the generated source, and repro.sh / repro.py, whose
run reproduces the comparison on the failing backend (`repro.py`; exit 1 while it still fails).
The numbers of one comparison are `report.py`'s; the library's default inputs are
`kdsl.kernels.cases`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kdsl.backends import REFERENCE, VARIANTS, all_backend_names, is_backend_name
from kdsl.runtime import registry
from kdsl.runtime.launches import Launch, record_launches

from .arrays import copy_array, host_array, out_dtype, outputs_of
from .report import CompareReport, Result, measure
from .tolerance import as_float64

# Imported where used: the library (`kdsl.kernels.cases`, which imports every kernel) and the
# failure paths (program maps, bundles) stay out of `import kdsl` (kd.testing is this module).


def _is_jit(fn: Any) -> bool:
    return hasattr(fn, "signature") and hasattr(fn, "compile") and hasattr(fn, "fn")


def check_backend_names(backends: Sequence[str]) -> None:
    """ValueError naming the unknown ones (a typo must not become "nothing to compare")."""
    unknown = [b for b in backends if not is_backend_name(b)]
    if unknown:
        raise ValueError(f"unknown backend{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(map(repr, unknown))}; known backends: "
                         f"{', '.join(all_backend_names())} (variants: {', '.join(VARIANTS)})")


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
        backends = registry.available_backends()
    args = tuple(args)
    if isinstance(fn, str):
        from kdsl.kernels.cases import library_function
        fn, ref = library_function(fn)
        reference = reference or ref
    jit = _is_jit(fn)
    name = getattr(fn, "__name__", str(fn))
    if not jit:  # the library computes in float32 (docs/numerics.md)
        from kdsl.kernels.cases import LIBRARY_K_OUT
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
        ck = fn.compile(*args, backend=REFERENCE, num_warps=num_warps, **kwargs)
        rt = ck.kernel.runtime_params
        out_names = [rt[i].name for i in sorted(stored_params(ck.kernel))]

    def run(backend: str) -> tuple[dict[str, Any], list[Launch]]:
        cargs = tuple(copy_array(a) for a in args)
        with record_launches() as launches:
            if jit:
                fn[grid](*cargs, backend=backend, num_warps=num_warps, **kwargs)
                sig = fn.signature
                values = dict(zip(sig.names, sig.bind(cargs, dict(kwargs))))
                return {n: values[n] for n in out_names}, launches
            return outputs_of(fn(*cargs, backend=backend, **kwargs), out_names), launches

    skipped: dict[str, str] = {}
    if reference is not None:
        ref_kind = f"{getattr(reference, '__module__', '')}.{getattr(reference, '__name__', '')}"
        with np.errstate(all="ignore"):
            # a jit kernel's kwargs are its constexprs: the reference takes the arrays only
            rkw = {} if jit else kwargs
            expected = outputs_of(reference(*(copy_array(a) for a in args), **rkw),
                                   out_names or ["out"])
        if not out_names:
            out_names = list(expected)
        expected = {k: as_float64(v) for k, v in expected.items()}
    else:
        ref_kind = f"the {REFERENCE} backend (no float64 reference given)"
        outs, _ = run(REFERENCE)
        expected = {k: as_float64(host_array(v), out_dtype(v)) for k, v in outs.items()}
        if REFERENCE in backends:
            skipped[REFERENCE] = "it is the reference (no float64 reference given)"
        backends = [b for b in backends if b != REFERENCE]

    results: list[Result] = []
    failing: dict[str, tuple[dict[str, Any], list[Launch]]] = {}
    for b in backends:
        try:
            ok, why = registry.backend_status(b)
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
            r, _ = measure(b, oname, host_array(got), exp, out_dtype(got), reduction_size,
                           n_worst, acc_dtype, k_out)
            r.seconds = dt
            results.append(r)
            if not r.passed:
                failing[b] = (outs, launches)

    report = CompareReport(name, results, ref_kind, reduction_size, skipped=skipped,
                           acc_dtype=acc_dtype, k_out=k_out)
    if failing:
        from .bundle import write_bundle
        from .program_map import localise
        localise(report, fn, jit, args, kwargs, grid, num_warps)
        if bundle:
            b = next(iter(failing))
            report.bundle = write_bundle(report, fn, jit, args, kwargs, grid, b, expected,
                                         failing[b][1], num_warps, bundle_dir, repro_command)
    return report


def compare_case(name: str, shape: tuple | None = None, dtype: str = "float32",
                 backends: Sequence[str] | None = None, seed: int = 0,
                 **opts: Any) -> CompareReport:
    """`compare` a library kernel on its default (or given) shape (`kdsl.kernels.cases`)."""
    from kdsl.kernels.cases import CASES, library_dtype
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


__all__ = ["CompareReport", "Result", "check_backend_names", "compare", "compare_case"]
