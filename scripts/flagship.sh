#!/usr/bin/env bash
# The flagship job: set up, list the backends found, then run every example on every available
# backend (each prints its error against a float64 NumPy reference).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/kdsl info
for ex in examples/*.py; do
    echo "== $ex"
    .venv/bin/python "$ex"
done
