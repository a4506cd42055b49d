"""Mutation check: a few deliberate single-operator mutations of the emitters and of the
lowering, each applied in memory; the tests named for a mutation must then fail.  A mutation
that every named test survives shows tests that cannot fail.

    python scripts/mutations.py              # every mutation: exit 0 when each one is caught
    python scripts/mutations.py NAME ...     # some of them
    python scripts/mutations.py --list

Each mutation runs in a fresh process (no compiled kernel survives from another run) with the
disk cache off, through pytest on its tests; tests/unit/test_mutations.py runs this in CI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    what: str
    apply: Callable[[], None]
    tests: tuple[str, ...]
    backends: str = "interp"  # KDSL_TEST_BACKENDS for the run (the backend it needs first)


def _c_sub_is_add() -> None:
    from kdsl.backends import c_like

    c_like.FLOAT_BINARY["sub"] = "({a} + {b})"


def _llvm_sub_is_add() -> None:
    from kdsl.backends import llvm

    llvm._FBIN["sub"] = "fadd"


def _lowering_sub_is_add() -> None:
    from kdsl.lowering import elementwise

    elementwise.ELEMENTWISE["sub"] = elementwise.ELEMENTWISE["add"]


def _lowering_no_16_bit_rounding() -> None:
    from kdsl.lowering import elementwise

    original = elementwise.rounded

    def rounded(x, elem):
        return x if elem in elementwise.HALF else original(x, elem)

    elementwise.rounded = rounded  # the element-wise op table's per-op rounding


def _lowering_max_is_min() -> None:
    from kdsl.lowering import reduce

    original = reduce.combine

    def combine(L, kind, *args):
        return original(L, "min" if kind == "max" else kind, *args)

    reduce.combine = combine


def _warp_butterfly_short() -> None:
    from kdsl.lowering import reduce_warp

    original = reduce_warp._butterfly

    def butterfly(L, kind, acc, accs, G, out):
        original(L, kind, acc, accs, G // 2, out)  # the first step (offset G/2) is skipped

    reduce_warp._butterfly = butterfly


SEMANTICS = "tests/unit/test_lower_semantics.py"
MUTATIONS: dict[str, Mutation] = {
    "c-float-sub-is-add": Mutation(
        "the C emitter spells float `-` as `+`", _c_sub_is_add,
        ("tests/backend/test_ops.py::test_inlined_helper",), "opencl"),
    "llvm-float-sub-is-add": Mutation(
        "the LLVM emitter emits fadd for float sub", _llvm_sub_is_add,
        ("tests/backend/test_ops.py::test_inlined_helper",), "llvm"),
    "lowering-sub-is-add": Mutation(
        "the lowering's op table lowers `sub` as `add`", _lowering_sub_is_add,
        (f"{SEMANTICS}::test_loop_carried_tiles",)),
    "lowering-no-16-bit-rounding": Mutation(
        "the lowering drops the rounding after each float16/bfloat16 op",
        _lowering_no_16_bit_rounding, (f"{SEMANTICS}::test_16_bit_floats_round_after_every_op",)),
    "lowering-max-is-min": Mutation(
        "the lowering combines `max` reductions with `minimum`", _lowering_max_is_min,
        (f"{SEMANTICS}::test_reductions_scans_and_broadcasts_cross_threads",)),
    "warp-butterfly-short": Mutation(
        "the warp reduction's butterfly skips its first shuffle step", _warp_butterfly_short,
        ("tests/unit/test_lower_reduce_warp.py::test_whole_tile",)),
}


def run_one(name: str) -> int:
    """In this process: apply the mutation, run its tests; pytest's exit code."""
    import pytest

    m = MUTATIONS[name]
    m.apply()
    return pytest.main([*m.tests, "-x", "-q", "-p", "no:cacheprovider", "--no-header",
                        "-rN", "--tb=no"])


def check(name: str) -> tuple[bool, str]:
    """(caught, output) of one mutation, run in a fresh process."""
    m = MUTATIONS[name]
    env = {**os.environ, "KDSL_CACHE": "0", "KDSL_TEST_BACKENDS": m.backends}
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--run", name],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
                       check=False)
    # pytest: 1 = some test failed (caught); 0 = all passed (survived); else an error
    return p.returncode == 1, f"exit {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--run"]:
        return run_one(argv[1])
    if argv[:1] == ["--list"]:
        for name, m in MUTATIONS.items():
            print(f"{name}: {m.what}")
        return 0
    names = argv or list(MUTATIONS)
    survived = []
    for name in names:
        caught, out = check(name)
        print(f"{'caught  ' if caught else 'SURVIVED'} {name}: {MUTATIONS[name].what}")
        if not caught:
            survived.append(name)
            print(out)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
