#!/usr/bin/env bash
# GPU checks for a machine with an NVIDIA GPU and CuPy (and optionally torch) already installed.
# Installs nothing: kdsl is imported from a symlinked package tree. Runs the CUDA backend over the
# backend-parametrised tests (and the `gpu`-marked ones), then the GPU benchmark; logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kdsl-gpu-out}
mkdir -p "$OUT"
PKG=$(mktemp -d)/site
mkdir -p "$PKG/kdsl"
for f in kdsl/*; do ln -s "$PWD/$f" "$PKG/kdsl/$(basename "$f")"; done
ln -s "$PWD/backends" "$PKG/kdsl/backends"
ln -s "$PWD/kernels" "$PKG/kdsl/kernels"
export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    $PY -c "import cupy, kdsl; print('cupy', cupy.__version__, 'kdsl', kdsl.__version__, kdsl.available_backends())"
} 2>&1 | tee "$OUT/env.txt"
KDSL_TEST_BACKENDS=cuda timeout 300 $PY -m pytest -q -p no:cacheprovider tests/backend tests/codegen \
    -rs 2>&1 | tee "$OUT/tests.txt"
timeout 200 $PY benchmarks/gpu_bench.py 2>&1 | tee "$OUT/bench.txt"
