"""The PyTorch snippets of README.md and docs/torch.md run as written (torch.compile on the
aot_eager backend here: inductor's C++ build is a slow case of test_torch_ops.py)."""

from __future__ import annotations

import functools
import re
import runpy
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


def _blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.DOTALL)


@pytest.fixture
def eager_compile(monkeypatch):
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))


def _run(code: str, tmp_path: Path, name: str) -> dict:
    """Run `code` as a file (@kd.jit reads its kernels' source from the file)."""
    path = tmp_path / f"{name}.py"
    path.write_text(code)
    return runpy.run_path(str(path))


def test_readme_pytorch_snippet(eager_compile, tmp_path):
    (block,) = [b for b in _blocks(ROOT / "README.md") if "kdsl.torch" in b]
    ns = _run(block, tmp_path, "readme")
    assert ns["y"].dtype == torch.bfloat16 and ns["x"].grad.shape == ns["x"].shape
    t = torch.randn(3, 5)
    torch.testing.assert_close(ns["f"](t), torch.softmax(t * 2, -1))


def test_torch_doc_snippets(eager_compile, tmp_path):
    blocks = _blocks(ROOT / "docs" / "torch.md")
    raw, custom = blocks[0], next(b for b in blocks if "custom_op(" in b)
    ns = _run(raw, tmp_path, "raw")
    torch.testing.assert_close(ns["out"], ns["x"] + ns["y"])
    ns = _run(custom.replace("mylib::", "kdsl_doc::"), tmp_path, "custom")
    assert ns["y"].shape == (100,)
