"""`kd.testing`: checking and timing kernels.

The tolerance rule and float64 comparisons (`tolerance`, `assert_close`, ...:
kdsl/tools/tolerance.py, the rule of docs/numerics.md), every backend against a float64
reference (`compare`, kdsl/tools/compare.py) and timings (`do_bench`, kdsl/tools/bench.py).
"""

from kdsl.tools.bench import Timings, do_bench
from kdsl.tools.compare import compare
from kdsl.tools.report import CompareReport
from kdsl.tools.tolerance import (
    MAX_TOL,
    Tolerance,
    as_float64,
    assert_close,
    elementwise_errors,
    scale_of,
    tolerance,
)

__all__ = ["MAX_TOL", "CompareReport", "Timings", "Tolerance", "as_float64", "assert_close",
           "compare", "do_bench", "elementwise_errors", "scale_of", "tolerance"]
