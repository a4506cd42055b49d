"""`python -m kdsl.fuzz`: the differential fuzzer's command (docs/fuzzing.md)."""

import sys

from kdsl.tools.fuzz.run import main

sys.exit(main())
