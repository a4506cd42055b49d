"""The torch tests: skipped, visibly, where torch is not installed (`pip install
'kdsl[torch]'`; CI installs the CPU wheel `torch==2.13.0`).  KDSL_REQUIRE_TORCH=1 turns the skip
into a failure (CI sets it, so that a broken install cannot pass as skipped tests)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))  # kcases


def pytest_collection_modifyitems(config, items):
    if os.environ.get("KDSL_REQUIRE_TORCH", "") in ("", "0"):
        return
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise pytest.UsageError(f"KDSL_REQUIRE_TORCH is set but torch cannot be imported: {e}")
