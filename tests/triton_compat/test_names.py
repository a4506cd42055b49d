"""Every public name of Triton 3.6's `triton.language` (the list in triton_language_all.txt,
taken once from Triton 3.6.0) and every public member of its `tensor` class exists in kdsl, or
is documented as not supported; docs/language.md's "Triton names" table covers every name with
the status the code has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import kdsl as kd
from kdsl.frontend.codegen import tile_method

HERE = Path(__file__).parent
DOCS = HERE.parents[1] / "docs" / "language.md"
TILE_ATTRIBUTES = {"dtype", "shape", "type", "numel", "T"}  # read by the frontend itself


def _names(file: str) -> list[str]:
    return [line.strip() for line in (HERE / file).read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def _doc_table() -> dict[str, str]:
    text = DOCS.read_text()
    section = text[text.index("## Triton names"):]
    rows = re.findall(r"^\| `([A-Za-z0-9_]+)` \| (supported|differs|not supported) \|", section,
                      re.M)
    return dict(rows)


def test_the_list_is_triton_3_6():
    names = _names("triton_language_all.txt")
    assert len(names) == 140 and len(set(names)) == 140
    assert {"load", "dot", "make_block_ptr", "randint4x", "dot_scaled"} <= set(names)


@pytest.mark.parametrize("name", _names("triton_language_all.txt"))
def test_every_triton_name(name):
    status = _doc_table().get(name)
    assert status is not None, f"docs/language.md has no row for {name!r}"
    if status == "not supported":
        # present only to raise a CompilationError naming the kernel line
        fn = getattr(kd, name, None)
        assert fn is None or getattr(fn, "__kdsl_builtin__", False)
    else:
        assert hasattr(kd, name), f"kd.{name} is missing but documented as {status}"


@pytest.mark.parametrize("name", _names("triton_tensor_members.txt"))
def test_every_tensor_member(name):
    assert name in TILE_ATTRIBUTES or tile_method(name) is not None, f"x.{name} is missing"


def test_the_table_has_no_other_names():
    assert set(_doc_table()) == set(_names("triton_language_all.txt"))


def test_unsupported_names_name_the_line(tmp_path):
    import importlib.util

    path = tmp_path / "k.py"
    path.write_text("import kdsl as kd\n\n@kd.jit\ndef k(o):\n"
                    "    x = kd.inline_asm_elementwise('mov.b32 $0, $1;', '=r,r', [1], "
                    "dtype=kd.int32, is_pure=True, pack=1)\n    kd.store(o, x)\n")
    spec = importlib.util.spec_from_file_location("k_unsupported", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import numpy as np

    with pytest.raises(kd.CompilationError) as e:
        mod.k[(1,)](np.zeros(1, np.int32), backend="interp")
    assert "line 5" in str(e.value) and "inline_asm_elementwise" in str(e.value)


def test_port_command_and_host_helpers(tmp_path):
    import subprocess
    import sys

    from kdsl.porting import port_source

    src = ("import triton\nimport triton.language as tl\n"
           "from triton.language.extra import libdevice\n\n@triton.jit\n"
           "def k(x, BLOCK: tl.constexpr):\n    tl.store(x, libdevice.rint(tl.load(x)))\n\n"
           "grid = (triton.cdiv(10, 4), triton.next_power_of_2(10))\n")
    out = port_source(src)
    assert "import kdsl as kd" in out and "from kdsl.language.extra import libdevice" in out
    assert "@kd.jit" in out and "kd.constexpr" in out and "tl." not in out and "triton" not in out
    ns: dict = {}
    f = tmp_path / "ported.py"
    f.write_text(out)
    exec(compile(out, str(f), "exec"), ns)
    assert ns["grid"] == (3, 16)
    r = subprocess.run([sys.executable, "-m", "kdsl.cli", "port", str(tmp_path / "none.py")],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "No such file" in r.stderr
