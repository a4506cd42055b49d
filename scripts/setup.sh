#!/usr/bin/env bash
# Idempotent development set-up: a virtual environment with kdsl installed in editable mode
# (all extras), and PoCL as the OpenCL device when no OpenCL ICD is installed (root only).
# KDSL_SETUP_TORCH=1 also installs PyTorch for the torch tests, pinned to the CPU wheel's exact
# version: an unpinned `torch` (or a range) would resolve to a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_PIN="torch==2.13.0"

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
# the build backend the package needs (pyproject.toml), in the environment itself: the
# distribution test builds the wheel and sdist without build isolation
.venv/bin/python -m pip install -q --disable-pip-version-check "setuptools>=77"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[all]"
if [ "${KDSL_SETUP_TORCH:-0}" = "1" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check "$TORCH_PIN"
fi

# An ICD is registered as a file in /etc/OpenCL/vendors; without one, pyopencl finds no device.
if ! ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pocl-opencl-icd ocl-icd-libopencl1
    else
        echo "setup: no OpenCL ICD found; install pocl-opencl-icd to test the OpenCL backend" >&2
    fi
fi
