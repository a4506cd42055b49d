"""The distributions: `pip wheel .` of a clean copy of the tree, and its sdist, hold what they
should (the package, its templates, py.typed and the license in the wheel; docs, tests and
examples in the sdist; metadata with the SPDX license, classifiers, URLs and the extras), and
the installed wheel works on its own: `kdsl --version`, `python -m kdsl --version` and
`python -m kdsl info` run from the install (not from this source tree)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import kdsl

ROOT = Path(__file__).resolve().parents[2]
NAME = f"kdsl-{kdsl.__version__}"
# folders of a checkout that are never part of a distribution
_SKIP = {".git", ".venv", "build", "dist", ".pytest_cache", "__pycache__", ".kdsl-cache", "repro"}


def _clean_copy(dest: Path) -> None:
    """The tracked and untracked-but-not-ignored files (what a fresh clone has)."""
    try:
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: walk the tree
        files = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()
                 and not _SKIP & set(p.relative_to(ROOT).parts) and ".egg-info" not in str(p)]
    for f in files:
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)


def _run(*cmd: str, cwd: Path, env: dict | None = None) -> str:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 0, f"{' '.join(cmd)}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def _setuptools_ok() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 77


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    if not _setuptools_ok():  # scripts/setup.sh installs it
        pytest.skip("building without isolation needs setuptools>=77 in this environment")
    base = tmp_path_factory.mktemp("dist")
    src, out = base / "src", base / "out"
    src.mkdir()
    out.mkdir()
    _clean_copy(src)
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "-q", "-w", str(out), str(src), cwd=base)
    _run(sys.executable, "-c", f"from setuptools import build_meta as b; "
         f"b.build_sdist({str(out)!r})", cwd=src)
    wheel = out / f"{NAME}-py3-none-any.whl"
    sdist = out / f"{NAME}.tar.gz"
    assert wheel.is_file() and sdist.is_file(), sorted(os.listdir(out))
    return base, wheel, sdist


def test_wheel_contents(dists):
    _, wheel, _ = dists
    names = set(zipfile.ZipFile(wheel).namelist())
    must = {"kdsl/__init__.py", "kdsl/__main__.py", "kdsl/py.typed", "kdsl/torch.py",
            "kdsl/cli.py", "kdsl/backends/llvm.py", "kdsl/kernels/softmax.py",
            "kdsl/kernels/attention_backward.py", f"{NAME}.dist-info/licenses/LICENSE"}
    assert must <= names, sorted(must - names)
    assert any(n.startswith("kdsl/backends/templates/") and n.endswith(".j2") for n in names)
    tops = {n.split("/")[0] for n in names}
    assert tops == {"kdsl", f"{NAME}.dist-info"}, tops  # no tests/, docs/, bare kernels/
    # every package folder of the tree is in the wheel
    for folder, dotted in (("kdsl", "kdsl"), ("backends", "kdsl/backends"),
                           ("kernels", "kdsl/kernels")):
        for py in (ROOT / folder).rglob("*.py"):
            if "__pycache__" not in py.parts:
                rel = py.relative_to(ROOT / folder).as_posix()
                assert f"{dotted}/{rel}" in names, rel


def test_wheel_metadata(dists):
    _, wheel, _ = dists
    z = zipfile.ZipFile(wheel)
    meta = Parser().parsestr(z.read(f"{NAME}.dist-info/METADATA").decode())
    assert meta["License-Expression"] == "Apache-2.0"
    assert not [c for c in meta.get_all("Classifier") if c.startswith("License ::")]
    assert "Typing :: Typed" in meta.get_all("Classifier")
    # no project URL until the project has a public home (none is invented)
    for u in meta.get_all("Project-URL") or ():
        assert u.split(", ", 1)[1].startswith("https://"), u
    assert meta["Version"] == kdsl.__version__
    requires = meta.get_all("Requires-Dist")
    torch_reqs = [r for r in requires if r.startswith("torch")]
    assert torch_reqs and all("extra ==" in r for r in torch_reqs), torch_reqs  # optional only
    assert {"torch", "plot", "opencl", "cuda", "test"} <= set(meta.get_all("Provides-Extra"))
    assert "kdsl = kdsl.cli:main" in z.read(f"{NAME}.dist-info/entry_points.txt").decode()
    license_text = z.read(f"{NAME}.dist-info/licenses/LICENSE").decode()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    # the README that becomes the PyPI page shows how to install and use the package
    body = meta.get_payload()
    assert "pip install kdsl" in body and "kdsl info" in body and "kdsl.torch" in body


def test_sdist_contents(dists):
    _, wheel, sdist = dists
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    must = {"LICENSE", "README.md", "pyproject.toml", "docs/torch.md", "docs/kernels.md",
            "tests/conftest.py", "tests/pytorch/test_torch_ops.py", "tests/kernels/kcases.py",
            "examples/torch_transformer.py", "kdsl/py.typed", "kernels/softmax.py",
            "backends/llvm.py"}
    assert must <= names, sorted(must - names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # every doc and example of the tree, and the package sources the wheel has
    for folder in ("docs", "examples"):
        for f in (ROOT / folder).iterdir():
            if f.is_file():
                assert f"{folder}/{f.name}" in names, f
    renamed = {"kdsl/backends/": "backends/", "kdsl/kernels/": "kernels/"}
    for n in zipfile.ZipFile(wheel).namelist():
        if n.endswith(".py"):
            for a, b in renamed.items():
                n = n.replace(a, b, 1) if n.startswith(a) else n
            assert n in names, n


def test_installed_wheel_runs(dists):
    base, wheel, _ = dists
    target = base / "site"
    _run(sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
         str(target), str(wheel), cwd=base)
    env = {**os.environ, "PYTHONPATH": str(target), "KDSL_CACHE_DIR": str(base / "cache")}
    where = _run(sys.executable, "-c", "import kdsl, kdsl.kernels; print(kdsl.__file__, "
                 "kdsl.kernels.__file__)", cwd=base, env=env)
    assert all(Path(p).is_relative_to(target) for p in where.split()), where
    assert _run(sys.executable, "-m", "kdsl", "--version", cwd=base, env=env).strip() == \
        f"kdsl {kdsl.__version__}"
    script = target / "bin" / "kdsl"
    assert _run(sys.executable, str(script), "--version", cwd=base, env=env).startswith("kdsl ")
    info = _run(sys.executable, "-m", "kdsl", "info", "--no-caps", cwd=base, env=env)
    assert "backends:" in info and "llvm" in info
