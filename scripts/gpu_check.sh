#!/usr/bin/env bash
# GPU checks for a machine with an NVIDIA GPU and CuPy (and optionally torch) already installed.
# Installs nothing: kdsl is imported from a symlinked package tree. Runs the CUDA backend over the
# backend-parametrised tests (and the `gpu`-marked ones, the tensor-core and CUDA codegen tests),
# then the GPU benchmark; logs go to $OUT (env.txt, tests.txt, tests.xml, bench.txt, status.txt).
#   OUT=/tmp/out TEST_TIMEOUT=300 BENCH_TIMEOUT=200 PYTHON=python3 scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kdsl-gpu-out}
mkdir -p "$OUT"
PKG=$(mktemp -d)/site
mkdir -p "$PKG/kdsl"
for f in kdsl/*; do ln -s "$PWD/$f" "$PKG/kdsl/$(basename "$f")"; done
ln -s "$PWD/backends" "$PKG/kdsl/backends"
ln -s "$PWD/kernels" "$PKG/kdsl/kernels"
# The on-disk kernel cache goes to a fresh temporary folder, never into the user's home.
export KDSL_CACHE_DIR=${KDSL_CACHE_DIR:-$(mktemp -d)}
export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv || true
    $PY -c "import cupy, kdsl; print('cupy', cupy.__version__, 'kdsl', kdsl.__version__, kdsl.available_backends())"
    $PY -c "from kdsl.backends.cuda import CUDABackend as B; b = B(); print('arch', b.arch(), 'caps', sorted(b.target(4).caps))"
} 2>&1 | tee "$OUT/env.txt"
KDSL_TEST_BACKENDS=cuda KDSL_REQUIRE_BACKENDS=cuda timeout "${TEST_TIMEOUT:-300}" \
    $PY -m pytest -q -p no:cacheprovider tests/backend tests/codegen -rs \
    --junitxml="$OUT/tests.xml" 2>&1 | tee "$OUT/tests.txt"
tests=${PIPESTATUS[0]}
timeout "${BENCH_TIMEOUT:-200}" $PY benchmarks/gpu_bench.py 2>&1 | tee "$OUT/bench.txt"
bench=${PIPESTATUS[0]}
echo "tests rc=$tests bench rc=$bench" | tee "$OUT/status.txt"
exit $(( tests || bench ))
