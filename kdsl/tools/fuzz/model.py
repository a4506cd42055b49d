"""The fuzzer's model of kernel values: types, promotion, broadcasting, error bounds, programs."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# --------------------------------------------------------------------------------- types

FLOATS = ("float32", "float16", "bfloat16")
INPUT_DTYPES = ("float32", "int32", "float16", "bfloat16")
_EPS = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
# Largest magnitude a value of each type may reach: float16 must never overflow, integers stay
# below 2**24 so that every int -> float32 conversion is exact and nothing overflows int32.
_MAG_LIMIT = {"float32": 1e6, "bfloat16": 1e6, "float16": 1e4, "int32": 2.0**24, "int1": 1.0}
_ULPS = 16.0  # allowance of a math function (exp, sin, ...) against another implementation
_DIMS = ("M", "N", "K")
_BLOCKS = (8, 16, 4, 32, 2, 1)  # block sizes, simplest first (hypothesis shrinks to the first)


def _is_float(d: str) -> bool:
    return d in FLOATS


def promote(a: str, b: str) -> str:
    """Result type of a binary op (docs/language.md, "Promotion"), for the types generated."""
    if a == b:
        return a
    if _is_float(a) and _is_float(b):
        return "float32"  # float16 with bfloat16, or either with float32
    if _is_float(a) or _is_float(b):
        return a if _is_float(a) else b
    return "int32"  # int32 with int1


def bcast(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...] | None:
    """NumPy broadcasting on named dims ("1" is a dim of size 1); None when incompatible."""
    if len(a) < len(b):
        a = ("1",) * (len(b) - len(a)) + a
    if len(b) < len(a):
        b = ("1",) * (len(a) - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x == y or y == "1":
            out.append(x)
        elif x == "1":
            out.append(y)
        else:
            return None
    return tuple(out)


@dataclass
class Val:
    """A kernel variable as the generator sees it: shape (dim names), dtype, a bound on its
    magnitude and a bound on its absolute difference between two correct backends (0: exact)."""

    name: str
    shape: tuple[str, ...]
    dtype: str
    mag: float
    err: float = 0.0

    @property
    def exact(self) -> bool:
        return self.err == 0.0

    @property
    def storable(self) -> bool:
        return "1" not in self.shape


def _rnd(d: str, mag: float) -> float:
    """One rounding of a value of magnitude `mag` to `d` (0 for integers)."""
    return _EPS.get(d, 0.0) * max(mag, 1.0)


# ------------------------------------------------------------------------------ programs

@dataclass
class Program:
    """A generated kernel and everything needed to run it: `source` defines `kern`; inputs and
    outputs are (shape, dtype) pairs in parameter order; `errs` is each output's error bound."""

    source: str
    blocks: dict[str, int]
    extents: dict[str, int]
    inputs: list[tuple[tuple[str, ...], str]]
    outputs: list[tuple[tuple[str, ...], str]]
    errs: list[float]
    n_iter: int
    sf: float
    si: int
    data_seed: int
    discrete: bool
    num_warps: int = 4
    out_data: list[bool] = field(default_factory=list)  # outputs that start with random data

    def __repr__(self) -> str:  # hypothesis prints this for a falsifying example
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__dataclass_fields__)
        return f"Program({fields})"

    def reproducer(self, backends: Sequence[str]) -> str:
        return ("import kdsl.fuzz as F\n"
                f"print(F.check_program(F.{self!r}, {list(backends)!r}).text())\n")


class _Draw:
    """Choices, through hypothesis' `draw` (so shrinking simplifies programs) or a Random."""

    def __init__(self, draw: Callable):
        self._draw = draw

    def int(self, lo: int, hi: int) -> int:
        from hypothesis import strategies as st
        return self._draw(st.integers(lo, hi))

    def choice(self, seq: Sequence) -> Any:
        return seq[self.int(0, len(seq) - 1)]

    def chance(self, percent: int) -> bool:
        """True with about `percent`% probability; shrinks to False."""
        return self.int(0, 99) >= 100 - percent


_KD = {"float32": "kd.float32", "float16": "kd.float16", "bfloat16": "kd.bfloat16",
       "int32": "kd.int32", "int1": "kd.int1"}
_BLOCK_NAME = {"M": "BM", "N": "BN", "K": "BK"}
_UNARY_MATH = [
    # template, magnitude of the result given the operand's, derivative bound given magnitude
    ("kd.exp(kd.minimum({x}, 2.0))", lambda m: math.exp(min(m, 2.0)), lambda m: math.exp(2.0)),
    ("kd.sin({x})", lambda m: 1.0, lambda m: 1.0),
    ("kd.tanh({x})", lambda m: 1.0, lambda m: 1.0),
    ("kd.log(kd.abs({x}) + 1.0)", lambda m: math.log(m + 1), lambda m: 1.0),
    ("kd.sqrt(kd.abs({x}) + 0.25)", lambda m: math.sqrt(m + 0.25), lambda m: 1.0),
    ("kd.cos({x})", lambda m: 1.0, lambda m: 1.0),
    ("kd.sigmoid({x})", lambda m: 1.0, lambda m: 0.25),
    ("kd.erf({x})", lambda m: 1.0, lambda m: 1.2),
    ("kd.exp2(kd.minimum({x}, 3.0))", lambda m: 2.0 ** min(m, 3.0), lambda m: 6.0),
    ("kd.log2(kd.abs({x}) + 1.0)", lambda m: math.log2(m + 1), lambda m: 1.5),
    ("kd.rsqrt(kd.abs({x}) + 1.0)", lambda m: 1.0, lambda m: 0.5),
]

