#!/usr/bin/env bash
# The PyTorch job: set up with the CPU wheel of torch (torch==2.13.0, scripts/setup.sh), then
# run the torch tests and the distribution checks; extra arguments go to pytest.  Without
# torch these tests are skipped (visibly) by the default suite; here they must run.
set -euo pipefail
cd "$(dirname "$0")/.."
KDSL_SETUP_TORCH=1 bash scripts/setup.sh
KDSL_REQUIRE_TORCH=1 .venv/bin/python -m pytest -q tests/pytorch tests/unit/test_distribution.py "$@"
