"""`python -m kdsl ...`: the `kdsl` command line."""

import sys

from kdsl.cli import main

sys.exit(main())
