"""`kdsl.fuzz` (`import kdsl.fuzz as F`, `python -m kdsl.fuzz`): the differential fuzzer, whose
package is `kdsl/tools/fuzz/` (docs/fuzzing.md)."""

from kdsl.tools.fuzz import *
from kdsl.tools.fuzz import __all__  # noqa: F401
