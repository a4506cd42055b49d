"""examples/torch_transformer.py: the transformer block made of kdsl operators matches the
pure-torch block on every backend (output and every gradient, eager and compiled)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import torch_transformer
from kcases import slow_on_opencl


def test_transformer_block_matches_torch(backend):
    slow_on_opencl(backend, "about 20 kernel variants")
    errors = torch_transformer.run(backend, batch=1, seq=12)
    assert set(errors) == {"output", "compiled", "gradients", "compiled gradients"}
    for what, err in errors.items():
        assert err < 2e-5, f"{what}: relative error {err:.2e}"
