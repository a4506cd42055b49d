#!/usr/bin/env bash
# Idempotent development set-up: a virtual environment with kdsl installed in editable mode
# (all extras), and PoCL as the OpenCL device when no OpenCL ICD is installed (root only).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[all]"

# An ICD is registered as a file in /etc/OpenCL/vendors; without one, pyopencl finds no device.
if ! ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pocl-opencl-icd ocl-icd-libopencl1
    else
        echo "setup: no OpenCL ICD found; install pocl-opencl-icd to test the OpenCL backend" >&2
    fi
fi
