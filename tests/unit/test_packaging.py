"""pyproject.toml lists exactly the package folders on disk, and maps the renamed ones."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
# top-level folders installed under another name (both bare names are taken on PyPI)
RENAMED = {"kdsl": "kdsl", "backends": "kdsl.backends", "kernels": "kdsl.kernels"}


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _packages_on_disk() -> set[str]:
    found = set()
    for folder, dotted in RENAMED.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            if "__pycache__" in rel.parts:
                continue
            found.add(".".join((dotted, *rel.parts)) if rel.parts else dotted)
    return found


def test_package_list_matches_folders():
    listed = set(_config()["packages"])
    on_disk = _packages_on_disk()
    assert listed == on_disk, (f"missing from pyproject: {sorted(on_disk - listed)}; "
                               f"listed but absent: {sorted(listed - on_disk)}")


def test_package_dir_maps_renamed_folders():
    package_dir = _config()["package-dir"]
    for folder, dotted in RENAMED.items():
        if dotted != folder:
            assert package_dir.get(dotted) == folder


def test_no_duplicates_in_package_list():
    packages = _config()["packages"]
    assert len(packages) == len(set(packages))


def test_installed_names_resolve():
    import kdsl.backends
    import kdsl.kernels

    assert Path(kdsl.backends.__file__).parent == ROOT / "backends"
    assert Path(kdsl.kernels.__file__).parent == ROOT / "kernels"
