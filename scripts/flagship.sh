#!/usr/bin/env bash
# The flagship job: set up, list the backends and devices found, then run every library kernel on
# every available backend and compare each output with its float64 NumPy reference
# (exit status 1 on any mismatch, with a repro bundle written for it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/kdsl info --no-caps
.venv/bin/kdsl compare all "$@"
