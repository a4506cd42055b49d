"""The mutation check (scripts/mutations.py): each deliberate single-operator mutation of an
emitter or of the lowering makes the tests named for it fail.  A mutation that survives means
tests that could not fail."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "mutations.py"
_spec = importlib.util.spec_from_file_location("kdsl_mutations", SCRIPT)
mutations = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("kdsl_mutations", mutations)  # (its dataclasses look their module up)
_spec.loader.exec_module(mutations)


@pytest.mark.parametrize("name", sorted(mutations.MUTATIONS))
def test_mutation_is_caught(name):
    m = mutations.MUTATIONS[name]
    needed = m.backends.split(",")[0]
    if needed != "interp":
        from kdsl.runtime.registry import backend_status

        ok, why = backend_status(needed)
        if not ok:
            if needed in os.environ.get("KDSL_REQUIRE_BACKENDS", "").split(","):
                pytest.fail(f"needs the {needed} backend (KDSL_REQUIRE_BACKENDS): {why}")
            pytest.skip(f"needs the {needed} backend: {why}")
    caught, out = mutations.check(name)
    assert caught, f"mutation {name} ({m.what}) survived its tests:\n{out}"
