"""No CI script can install a torch that would resolve to a multi-GB CUDA build: every torch
that the scripts install is pinned to exactly the CPU wheel's version, and the extras the set-up
installs (`all`) do not pull torch in."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
PIN = "torch==2.13.0"


def _scripts() -> list[Path]:
    return sorted((ROOT / "scripts").glob("*.sh")) + [ROOT / ".ci" / "run"]


def test_every_scripted_torch_install_is_pinned():
    """Each `pip install` line naming torch (directly or through a variable) installs `PIN`."""
    pins, installs = [], []
    for script in _scripts():
        for line in script.read_text().splitlines():
            code = line.split("#", 1)[0]
            pins += re.findall(r"""\bTORCH_PIN=["']?([^"'\s]+)""", code)
            if "pip" in code and "install" in code:
                installs += [tok.strip("\"'") for tok in code.split() if "torch" in tok.lower()]
    assert installs, "the set-up installs torch for the torch tests"
    assert pins == [PIN], pins
    assert all(tok in (PIN, "$TORCH_PIN") for tok in installs), installs


def test_setup_installs_no_extra_with_torch():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]

    def expand(extra: str) -> list[str]:
        out = []
        for req in deps[extra]:
            m = re.fullmatch(r"kdsl\[(.*)\]", req)
            out += [r for e in m.group(1).split(",") for r in expand(e)] if m else [req]
        return out

    setup = (ROOT / "scripts" / "setup.sh").read_text()
    installed = re.findall(r'-e "\.\[([^\]]*)\]"', setup)
    assert installed == ["all"], installed
    assert not [r for r in expand("all") if r.startswith("torch")]
    assert deps["torch"] and all(r.startswith("torch") for r in deps["torch"])
