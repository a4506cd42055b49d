"""Differential fuzzing of the compiler: random well-typed `@kd.jit` kernels run on every backend.

A hypothesis strategy (`programs()`) writes the Python source of a random kernel: masked loads of
ragged 1-D and 2-D inputs, elementwise chains, casts, broadcasts, transposes, reductions, `dot`s,
loops with carried tiles and `if`s on scalars, then masked stores of a few values.  The source is
written to a temporary module and imported, so the real frontend parses it.  `check_program` runs
the kernel on the interpreter (the reference semantics) and on each backend asked for, and
compares every output buffer, including a guard region past the stored elements:

- integer outputs, and float outputs the generator knows to be *exact* (built only from loads and
  correctly rounded ops: + - * /, casts, max/min, where, ...), must be equal to the interpreter's;
- other float outputs must agree within `kd.testing.tolerance(dtype, k)`, where `k` is chosen so
  that the tolerance covers the error bound the generator tracked for the value (magnitudes and
  absolute error bounds are propagated through every op; inputs stay in [-2, 2]).

Discontinuous ops (comparisons, float -> int casts, floor, argmax, float // and %) are only applied
to exact values, so a last-bit difference of a math function can never flip them.

    python -m kdsl.fuzz --examples 2000 --backends llvm,opencl [--seed S]

runs that many programs, prints every mismatch, then shrinks one program per kind of mismatch to
a minimal kernel (hypothesis shrinking) and prints its source and a reproducer.

The package: `model` (types, values, error bounds, `Program`), `gen` (the core statements and
`build_program`), `triton` (the statements of the Triton-compatible features: scans, atomics,
block pointers, random numbers, `while`, early `return`, shape ops, fp8, libdevice), `run`
(running, comparing, the command).  Public as `kdsl.fuzz` (`python -m kdsl.fuzz`).
"""

from kdsl.tools.fuzz.gen import ALL_FEATURES, _Gen, _store, build_program, programs
from kdsl.tools.fuzz.model import (
    _BLOCKS,
    _DIMS,
    _EPS,
    _MAG_LIMIT,
    _ULPS,
    FLOATS,
    INPUT_DTYPES,
    Program,
    Val,
    _Draw,
    _is_float,
    _rnd,
    bcast,
    promote,
)
from kdsl.tools.fuzz.run import (
    _GUARD,
    FuzzFailure,
    Mismatch,
    Report,
    check_program,
    compare,
    default_backends,
    load_kernel,
    main,
    make_inputs,
    run_on,
    shrink,
    sweep,
)

__all__ = [  # noqa: RUF022  (public names first, then the internals the tests use)
    "ALL_FEATURES", "FLOATS", "INPUT_DTYPES", "FuzzFailure", "Mismatch", "Program", "Report",
    "Val", "bcast", "build_program", "check_program", "compare", "default_backends",
    "load_kernel", "main", "make_inputs", "programs", "promote", "run_on", "shrink", "sweep",
    "_BLOCKS", "_DIMS", "_EPS", "_GUARD", "_MAG_LIMIT", "_ULPS", "_Draw", "_Gen", "_is_float",
    "_rnd", "_store",
]
