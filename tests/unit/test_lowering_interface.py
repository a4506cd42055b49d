"""The lowering's written interface (kdsl/lowering/context.py) is the one its helpers use: every
attribute a helper module reads of its `L` is declared in `LoweringContext`, the driver
provides each declared name, and no module branches on a thread count (the Target names what
the count means)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import kdsl.lowering
from kdsl.lowering.context import LoweringContext
from kdsl.lowering.lowerer import Lowerer
from kdsl.target import Target

LOWERING = Path(kdsl.lowering.__file__).parent
DRIVER = {"lowerer.py", "context.py", "__init__.py"}
HELPERS = sorted(p for p in LOWERING.glob("*.py") if p.name not in DRIVER)


def _declared() -> set[str]:
    names = set(getattr(LoweringContext, "__annotations__", {}))
    names |= {n for n, v in vars(LoweringContext).items()
              if callable(v) and not n.startswith("__")}
    return names


def _context_reads(path: Path) -> dict[str, int]:
    """Attributes read of a value called `L` (or `self.L`, `s.L`) in a module: name -> line."""
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        if (isinstance(base, ast.Name) and base.id == "L") or (
                isinstance(base, ast.Attribute) and base.attr == "L"):
            out.setdefault(node.attr, node.lineno)
    return out


@pytest.mark.parametrize("path", HELPERS, ids=lambda p: p.name)
def test_helpers_use_only_the_written_interface(path):
    declared = _declared()
    extra = {n: line for n, line in _context_reads(path).items() if n not in declared}
    assert not extra, (f"{path.name} uses {sorted(extra)} of the lowering context (lines "
                       f"{sorted(extra.values())}), which LoweringContext does not declare")


def test_the_driver_provides_the_interface():
    fn_target = Target("t", threads=4)
    from kdsl.ir import tile

    fn = tile.Function("k", [], tile.Block())
    L = Lowerer(fn, fn_target)
    missing = sorted(n for n in _declared() if not hasattr(L, n))
    assert not missing, f"Lowerer lacks {missing}"


def test_the_interface_is_used():
    """Every declared name is used by some helper (a stale entry is an unwritten promise)."""
    used = set().union(*(_context_reads(p) for p in HELPERS))
    unused = sorted(_declared() - used)
    assert not unused, f"LoweringContext declares {unused}, which no helper uses"


_THREAD_BRANCH = re.compile(r"\b(T|threads)\s*(==|!=|>|<=)\s*1\b|\bT\s*>=\s*2\b")


@pytest.mark.parametrize("path", sorted(LOWERING.glob("*.py")), ids=lambda p: p.name)
def test_no_thread_count_branches(path):
    code = [line.split("#")[0] for line in path.read_text().splitlines()]
    in_doc = False
    hits = []
    for i, line in enumerate(code, 1):
        if line.count('"""') % 2:
            in_doc = not in_doc
            continue
        if not in_doc and _THREAD_BRANCH.search(line):
            hits.append(i)
    assert not hits, f"{path.name} lines {hits}: use a Target capability (kdsl/target.py)"


def test_target_capabilities_follow_the_thread_count():
    cpu, gpu = Target("cpu"), Target("gpu", threads=128, warp_size=32)
    assert cpu.one_thread_per_program and cpu.registers_addressable and cpu.tile_loops
    assert not cpu.needs_barriers
    assert not (gpu.one_thread_per_program or gpu.registers_addressable or gpu.tile_loops)
    assert gpu.needs_barriers
    # the cache key text is stable (sets sorted) and tells targets apart
    a = Target("x", caps=frozenset({"b", "a", "c"}))
    assert a.key() == Target("x", caps=frozenset({"c", "a", "b"})).key()
    assert a.key() != Target("x", threads=2, caps=a.caps).key()
