#!/usr/bin/env bash
# The GPU checks, in ONE call of about 7 minutes on a machine with an NVIDIA GPU, CuPy, torch,
# Triton, pytest and pytest-timeout already installed (this script installs nothing: kdsl is
# imported from a symlinked package tree of this checkout).  Files written under $OUT:
#   summary.md   one screen, appended to as each step ends (a timeout keeps what ran)
#   env.txt      nvidia-smi, clocks, versions
#   checks.txt   smoke and library checks (scripts/gpu_check.py)
#   sanitizer.txt compute-sanitizer memcheck and racecheck of small library calls
#   tests.txt, tests.xml   the cuda-parametrised tests (junit)
#   bench.txt, bench.json  benchmarks/gpu_bench.py (device arrays, CUDA-event medians)
# Each step has its own timeout (seconds, overridable): T_SMOKE, T_LIBRARY, T_SANITIZE (per
# run), T_TESTS, T_BENCH.  `--dry-run` runs every step's logic with the device work skipped
# (tests/unit/test_gpu_check.py runs it in CI).
#   OUT=/tmp/out PYTHON=python3 bash scripts/gpu_check.sh [--dry-run]
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=""
[ "${1:-}" = "--dry-run" ] && DRY="--dry-run"
OUT=${OUT:-/tmp/kdsl-gpu-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
START=$(date +%s)

PKG=$(mktemp -d)/site
mkdir -p "$PKG/kdsl"
for f in kdsl/*; do ln -s "$PWD/$f" "$PKG/kdsl/$(basename "$f")"; done
ln -s "$PWD/backends" "$PKG/kdsl/backends"
ln -s "$PWD/kernels" "$PKG/kdsl/kernels"
export KDSL_CACHE_DIR=${KDSL_CACHE_DIR:-$(mktemp -d)}  # never the user's cache
export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

summary() { printf '%s\n' "$@" >> "$OUT/summary.md"; }
elapsed() { echo $(( $(date +%s) - START )); }
# run NAME TIMEOUT LOG CMD...: SIGINT at the timeout (pytest then still writes its report),
# SIGKILL 10 s later; the exit status goes into the summary
run() {
    local name=$1 limit=$2 log=$3; shift 3
    timeout -s INT -k 10 "$limit" "$@" >> "$log" 2>&1
    local rc=$?
    local what="ok"
    [ $rc -ne 0 ] && what="rc=$rc"
    [ $rc -eq 124 ] && what="TIMEOUT after ${limit}s"
    summary "- step $name: $what (t=$(elapsed)s)"
    return $rc
}

: > "$OUT/summary.md"
summary "# kdsl GPU check $(date -u +%Y-%m-%dT%H:%MZ)${DRY:+ (dry run)}" ""
{
    if [ -z "$DRY" ]; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv
        nvidia-smi -q -d CLOCK | head -40
    fi
    $PY -V
} > "$OUT/env.txt" 2>&1
[ -z "$DRY" ] && summary '```' "$(head -2 "$OUT/env.txt")" '```'
run env 60 "$OUT/env.txt" $PY scripts/gpu_check.py env --out "$OUT" $DRY
status=0
run smoke "${T_SMOKE:-60}" "$OUT/checks.txt" $PY scripts/gpu_check.py smoke --out "$OUT" $DRY || status=1
run library "${T_LIBRARY:-90}" "$OUT/checks.txt" $PY scripts/gpu_check.py library --out "$OUT" $DRY || status=1

# compute-sanitizer: each small library call under memcheck and racecheck, each with a timeout
: > "$OUT/sanitizer.txt"
if [ -n "$DRY" ] || command -v compute-sanitizer >/dev/null 2>&1; then
    SAN=compute-sanitizer
    [ -n "$DRY" ] && SAN=""
    for case in softmax layer_norm matmul attention; do
        for tool in memcheck racecheck; do
            echo "== $tool $case" >> "$OUT/sanitizer.txt"
            if [ -n "$SAN" ]; then
                cmd=($SAN --tool "$tool" --error-exitcode 3 $PY scripts/gpu_check.py sanitize-case "$case")
            else
                cmd=($PY scripts/gpu_check.py sanitize-case "$case" --dry-run)
            fi
            run "sanitizer-$tool-$case" "${T_SANITIZE:-25}" "$OUT/sanitizer.txt" "${cmd[@]}" || status=1
        done
    done
    errors=$(grep -c "ERROR SUMMARY: [1-9]" "$OUT/sanitizer.txt")
    summary "- compute-sanitizer: $errors runs reported errors (details in sanitizer.txt)"
else
    summary "- compute-sanitizer: not on the PATH, skipped"
fi

# the cuda-parametrised tests only; SIGINT lets pytest write its summary and junit file
if [ -z "$DRY" ]; then
    run tests "${T_TESTS:-120}" "$OUT/tests.txt" \
        env KDSL_TEST_BACKENDS=cuda KDSL_REQUIRE_BACKENDS=cuda $PY -m pytest -q -p no:cacheprovider tests/backend tests/kernels -k cuda -rfs \
        --timeout=60 --junitxml="$OUT/tests.xml" || status=1
else
    run tests 120 "$OUT/tests.txt" $PY -m pytest -q -p no:cacheprovider --collect-only \
        tests/backend -k cuda || status=1
fi
summary "- tests: $(grep -E '(passed|failed|error|collected)' "$OUT/tests.txt" | tail -1)"

run bench "${T_BENCH:-150}" "$OUT/bench.txt" $PY benchmarks/gpu_bench.py --json "$OUT/bench.json" $DRY || status=1
summary "" "### performance (device arrays, CUDA-event medians)" ""
sed -n '/^| case/,$p' "$OUT/bench.txt" >> "$OUT/summary.md"
summary "" "total $(elapsed)s, status $status"
cat "$OUT/summary.md"
exit $status
