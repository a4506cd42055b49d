"""`kdsl.cli:main`, the `kdsl` command's entry point (and `python -m kdsl.cli`): the command line
itself is `kdsl/tools/cli.py`."""

import sys

from kdsl.tools.cli import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
