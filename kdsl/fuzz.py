"""Differential fuzzing of the compiler: random well-typed `@kd.jit` kernels run on every backend.

A hypothesis strategy (`programs()`) writes the Python source of a random kernel: masked loads of
ragged 1-D and 2-D inputs, elementwise chains, casts, broadcasts, transposes, reductions, `dot`s,
loops with carried tiles and `if`s on scalars, then masked stores of a few values.  The source is
written to a temporary module and imported, so the real frontend parses it.  `check_program` runs
the kernel on the interpreter (the reference semantics) and on each backend asked for, and
compares every output buffer, including a guard region past the stored elements:

- integer outputs, and float outputs the generator knows to be *exact* (built only from loads and
  correctly rounded ops: + - * /, casts, max/min, where, ...), must be equal to the interpreter's;
- other float outputs must agree within `kdsl.testing.tolerance(dtype, k)`, where `k` is chosen so
  that the tolerance covers the error bound the generator tracked for the value (magnitudes and
  absolute error bounds are propagated through every op; inputs stay in [-2, 2]).

Discontinuous ops (comparisons, float -> int casts, floor, argmax, float // and %) are only applied
to exact values, so a last-bit difference of a math function can never flip them.

    python -m kdsl.fuzz --examples 2000 --backends llvm,opencl [--seed S]

runs that many programs, prints every mismatch, then shrinks one program per kind of mismatch to
a minimal kernel (hypothesis shrinking) and prints its source and a reproducer.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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


class _Gen:
    """Builds one program statement by statement, tracking the variables in scope."""

    def __init__(self, d: _Draw, allow: frozenset[str]):
        self.d = d
        self.allow = allow
        self.vals: list[Val] = []
        self.lines: list[str] = []
        self.indent = 1
        self.depth = 0
        self.count = 0
        self.inputs: list[tuple[tuple[str, ...], str]] = []

    # ---- helpers

    def fresh(self, prefix: str = "v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def emit(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def define(self, expr: str, shape, dtype: str, mag: float, err: float) -> Val:
        v = Val(self.fresh(), tuple(shape), dtype, mag, err)
        self.emit(f"{v.name} = {expr}")
        self.vals.append(v)
        return v

    def offsets(self, shape: tuple[str, ...]) -> tuple[str, str]:
        """Offset and mask expressions of a row-major ragged array of `shape`."""
        if len(shape) == 1:
            (a,) = shape
            return f"r{a}", f"r{a} < n{a}"
        a, b = shape
        return (f"r{a}[:, None] * n{b} + r{b}[None, :]",
                f"(r{a}[:, None] < n{a}) & (r{b}[None, :] < n{b})")

    def load(self, shape: tuple[str, ...] | None = None, dtype: str | None = None) -> Val:
        d = self.d
        if shape is None:
            shape = d.choice([("M",), ("M", "N"), ("N",), ("K",), ("M", "K"), ("K", "N"),
                              ("N", "M"), ("M", "M")])
        dtype = dtype or d.choice(INPUT_DTYPES)
        name = f"in{len(self.inputs)}"
        self.inputs.append((tuple(shape), dtype))
        off, mask = self.offsets(shape)
        other = d.choice(["0", "1"]) + ("" if dtype == "int32" else ".0")
        mag = 8.0 if dtype == "int32" else 2.0
        return self.define(f"kd.load({name} + {off}, mask={mask}, other={other})", shape, dtype,
                           mag, 0.0)

    def pick(self, pred: Callable[[Val], bool], shape=None, dtype=None) -> Val:
        """An in-scope value satisfying `pred`, or a new load (of `shape`/`dtype` if given)."""
        cands = [v for v in self.vals if pred(v)]
        if cands and not self.d.chance(20):
            return cands[-1 - self.d.int(0, len(cands) - 1)]  # shrinks to the most recent
        if shape is not None and ("1" in shape or not shape):
            shape = None  # loads are never of shape () or with a dim of size 1
        v = self.load(shape, dtype)
        return v if pred(v) else self.load(shape, dtype)

    # ---- statements

    def statement(self) -> None:
        kinds = ["binary", "unary", "literal", "compare", "where", "cast", "reduce", "expand",
                 "trans", "logic", "intdiv", "dot"]
        if self.depth == 0:
            kinds += ["loop", "if"]
        kinds = [k for k in kinds if k in self.allow]
        kind = self.d.choice(kinds)
        if getattr(self, f"s_{kind}")() is False:
            self.load()

    def s_binary(self):
        d = self.d
        a = self.pick(lambda v: v.dtype != "int1")
        b = self.pick(lambda v: v.dtype != "int1" and bcast(a.shape, v.shape) is not None,
                      shape=a.shape)
        shape = bcast(a.shape, b.shape)
        if shape is None:
            return False
        t = promote(a.dtype, b.dtype)
        op = d.choice(["+", "*", "-", "/", "maximum", "minimum"])
        if op in "+-":
            mag, prop = a.mag + b.mag, a.err + b.err
        elif op == "*":
            mag, prop = a.mag * b.mag, a.err * b.mag + b.err * a.mag + a.err * b.err
        elif op == "/":
            # The denominator is at least 1: the quotient's magnitude and error stay bounded.
            # the denominator `abs(b) + 1.0` is float32 when b is an integer
            bt = b.dtype if _is_float(b.dtype) else "float32"
            t = promote(a.dtype, bt)
            den_err = b.err + (_rnd(bt, b.mag + 1) if b.err else 0.0)
            mag, prop = a.mag, a.err + den_err * a.mag
        else:
            mag, prop = max(a.mag, b.mag), max(a.err, b.err)
        if mag > _MAG_LIMIT[t]:
            return False
        err = prop + (_rnd(t, mag) if prop else 0.0)
        if op == "/":
            expr = f"{a.name} / (kd.abs({b.name}) + 1.0)"
        elif op in ("maximum", "minimum"):
            expr = f"kd.{op}({a.name}, {b.name})"
        else:
            expr = f"{a.name} {op} {b.name}"
        self.define(expr, shape, t, mag, err)

    def s_intdiv(self):
        """Integer // and % (C semantics, x // 0 == 0) and float // and % on exact values."""
        a = self.pick(lambda v: v.dtype != "int1" and v.exact)
        b = self.pick(lambda v: v.dtype != "int1" and v.exact
                      and bcast(a.shape, v.shape) is not None, shape=a.shape)
        shape = bcast(a.shape, b.shape)
        if shape is None or not (a.exact and b.exact):
            return False
        op = self.d.choice(["//", "%"])
        t = promote(a.dtype, b.dtype)
        if _is_float(t):
            # the divisor `abs(b) + 1.0` is float32 when b is an integer
            t = promote(a.dtype, b.dtype if _is_float(b.dtype) else "float32")
            self.define(f"{a.name} {op} (kd.abs({b.name}) + 1.0)", shape, t, a.mag + 1, 0.0)
        else:
            self.define(f"{a.name} {op} {b.name}", shape, t, a.mag, 0.0)

    def s_literal(self):
        a = self.pick(lambda v: v.dtype != "int1")
        op, lit = self.d.choice([("*", "0.5"), ("+", "1"), ("*", "3"), ("-", "1.5"),
                                 ("<<", "2"), (">>", "1"), ("*", "-2")])
        if op in ("<<", ">>") and a.dtype != "int32":
            op, lit = "*", "2"
        t = a.dtype if (_is_float(a.dtype) or "." not in lit) else "float32"
        mag = {"*": a.mag * abs(float(lit)), "+": a.mag + 1, "-": a.mag + 1.5,
               "<<": a.mag * 4, ">>": a.mag}[op]
        if mag > _MAG_LIMIT[t]:
            return False
        err = a.err * (abs(float(lit)) if op == "*" else 1.0)
        err += _rnd(t, mag) if a.err else 0.0
        self.define(f"{a.name} {op} {lit}", a.shape, t, mag, err)

    def s_unary(self):
        a = self.pick(lambda v: v.dtype != "int1")
        forms = _UNARY_MATH + [("kd.abs({x})", None, None), ("-{x}", None, None),
                               ("kd.floor({x})", None, None), ("kd.ceil({x})", None, None)]
        tmpl, magf, derf = self.d.choice(forms)
        if magf is None:  # exact ops (floor/ceil only on exact values: they are discontinuous)
            if "floor" in tmpl or "ceil" in tmpl:
                if not a.exact:
                    return False
                t = a.dtype if _is_float(a.dtype) else "float32"
                self.define(tmpl.format(x=a.name), a.shape, t, a.mag + 1, 0.0)
                return
            self.define(tmpl.format(x=a.name), a.shape, a.dtype, a.mag, a.err)
            return
        if ("sin" in tmpl or "cos" in tmpl) and a.mag > 100:
            return False
        t = a.dtype if _is_float(a.dtype) else "float32"
        mag = magf(a.mag)
        self.define(tmpl.format(x=a.name), a.shape, t, mag,
                    a.err * derf(a.mag) + _ULPS * _rnd(t, mag))

    def s_compare(self):
        a = self.pick(lambda v: v.exact)
        b = self.pick(lambda v: v.exact and bcast(a.shape, v.shape) is not None, shape=a.shape)
        shape = bcast(a.shape, b.shape)
        if shape is None or not (a.exact and b.exact):
            return False
        op = self.d.choice(["<", ">=", "==", "!=", ">", "<="])
        self.define(f"{a.name} {op} {b.name}", shape, "int1", 1.0, 0.0)

    def s_logic(self):
        a = self.pick(lambda v: v.dtype == "int1")
        if a.dtype != "int1":
            return self.s_compare()
        op = self.d.choice(["&", "|", "^", "~"])
        if op == "~":
            self.define(f"~{a.name}", a.shape, "int1", 1.0, 0.0)
            return
        b = self.pick(lambda v: v.dtype == "int1" and bcast(a.shape, v.shape) is not None)
        shape = bcast(a.shape, b.shape)
        if shape is None or b.dtype != "int1":
            return False
        self.define(f"{a.name} {op} {b.name}", shape, "int1", 1.0, 0.0)

    def s_where(self):
        c = self.pick(lambda v: v.dtype == "int1")
        if c.dtype != "int1":
            return self.s_compare()
        a = self.pick(lambda v: bcast(c.shape, v.shape) is not None)
        b = self.pick(lambda v: bcast(c.shape, v.shape) is not None
                      and bcast(a.shape, v.shape) is not None)
        s1 = bcast(c.shape, a.shape)
        # () is a valid (scalar) shape: only None means "cannot broadcast"
        shape = None if s1 is None else bcast(s1, b.shape)
        if shape is None:
            return False
        t = promote(a.dtype, b.dtype)
        if (_is_float(t) and (a.dtype == "int32" or b.dtype == "int32")
                and max(a.mag, b.mag) > _MAG_LIMIT[t]):
            return False
        self.define(f"kd.where({c.name}, {a.name}, {b.name})", shape, t,
                    max(a.mag, b.mag), max(a.err, b.err))

    def s_cast(self):
        a = self.pick(lambda v: True)
        dst = self.d.choice(["float32", "float16", "int32", "bfloat16", "int1"])
        if dst == a.dtype or (dst == "bfloat16" and not a.shape
                              and "bf16_scalar" not in self.allow):
            return False
        if _is_float(dst):
            if a.mag > _MAG_LIMIT[dst]:
                return False
            err = a.err + (_rnd(dst, a.mag) if a.err else 0.0)
            self.define(f"{a.name}.to({_KD[dst]})", a.shape, dst, a.mag, err)
            return
        if not a.exact:  # float -> int truncates: discontinuous
            return False
        mag = 1.0 if dst == "int1" else a.mag
        self.define(f"{a.name}.to({_KD[dst]})", a.shape, dst, mag, 0.0)

    def s_reduce(self):
        a = self.pick(lambda v: len(v.shape) >= 1)
        if not a.shape:
            return False
        op = self.d.choice(["sum", "max", "min", "argmax", "argmin"])
        axis = self.d.int(0, len(a.shape) - 1)
        dim = a.shape[axis]
        n = 1 if dim == "1" else self.blocks[dim]
        shape = a.shape[:axis] + a.shape[axis + 1:]
        if op.startswith("arg"):
            if not a.exact:
                return False
            t, mag, err = "int32", float(n), 0.0
        elif op == "sum":
            t = {"float16": "float32", "bfloat16": "float32", "int1": "int32"}.get(a.dtype,
                                                                                    a.dtype)
            mag = n * a.mag
            if mag > _MAG_LIMIT[t]:
                return False
            # Any summation order: each of two backends is within n * eps * sum|x| of the
            # exact sum.
            err = n * a.err + (2 * n * _EPS[t] * mag if _is_float(t) else 0.0)
        else:
            # max/min widen types narrower than 32 bits first (Triton's rule)
            t = {"float16": "float32", "bfloat16": "float32", "int1": "int32"}.get(a.dtype,
                                                                                    a.dtype)
            mag, err = a.mag, a.err
        if t == "bfloat16" and not shape and "bf16_scalar" not in self.allow:
            return False
        self.define(f"kd.{op}({a.name}, axis={axis})", shape, t, mag, err)

    def s_expand(self):
        a = self.pick(lambda v: len(v.shape) == 1)
        if len(a.shape) != 1:
            return False
        if self.d.chance(50):
            self.define(f"{a.name}[None, :]", ("1",) + a.shape, a.dtype, a.mag, a.err)
        else:
            self.define(f"{a.name}[:, None]", a.shape + ("1",), a.dtype, a.mag, a.err)

    def s_trans(self):
        a = self.pick(lambda v: len(v.shape) == 2)
        if len(a.shape) != 2:
            return False
        self.define(f"kd.trans({a.name})", a.shape[::-1], a.dtype, a.mag, a.err)

    def s_dot(self):
        a = self.pick(lambda v: len(v.shape) == 2 and v.storable and _is_float(v.dtype),
                      dtype=self.d.choice(["float32", "float16"]))
        if not (len(a.shape) == 2 and a.storable and _is_float(a.dtype)):
            return False
        p, q = a.shape
        r = self.d.choice(_DIMS)
        b = self.pick(lambda v: v.shape == (q, r) and _is_float(v.dtype), shape=(q, r),
                      dtype=self.d.choice(["float32", "float16", "bfloat16"]))
        if not (b.shape == (q, r) and _is_float(b.dtype)):
            return False
        k = self.blocks[q]
        mag = k * a.mag * b.mag
        err = k * (a.err * b.mag + b.err * a.mag) + 2 * k * _EPS["float32"] * mag
        acc = ""
        if self.d.chance(40):
            c = self.pick(lambda v: v.shape == (p, r) and v.dtype == "float32", shape=(p, r),
                          dtype="float32")
            if c.shape == (p, r) and c.dtype == "float32":
                acc = f", {c.name}"
                mag += c.mag
                err += c.err + 2 * _rnd("float32", mag)
        if mag > _MAG_LIMIT["float32"]:
            return False
        self.define(f"kd.dot({a.name}, {b.name}{acc})", (p, r), "float32", mag, err)

    def s_loop(self):
        """A runtime `for` with a carried tile; the body sees the induction variable `i`."""
        d = self.d
        if d.chance(50):
            init = self.pick(lambda v: v.storable)
        else:
            shape = d.choice([("M",), ("M", "N"), ()])
            dtype = d.choice(["float32", "int32", "float16", "int1"])
            dims = ", ".join(_BLOCK_NAME[x] for x in shape)
            init = self.define(f"kd.zeros(({dims}{',' if len(shape) == 1 else ''}), "
                               f"{_KD[dtype]})", shape, dtype, 0.0, 0.0)
        acc = self.define(init.name, init.shape, init.dtype, init.mag, init.err)
        self.emit("for i in range(0, n_iter):")
        self.indent += 1
        self.depth += 1
        mark = len(self.vals)
        self.vals.append(Val("i", (), "int32", 4.0, 0.0))
        for _ in range(d.int(1, 3)):
            self.statement()
        ok = (lambda v: v is not acc and bcast(acc.shape, v.shape) == acc.shape
              and (v.dtype == "int1") == (acc.dtype == "int1"))
        t = self.pick(ok, shape=acc.shape, dtype="int32" if acc.dtype == "int1" else None)
        keep = acc.name if acc.dtype == "int1" else f"{acc.name} + 0"  # the type unchanged
        if not ok(t):
            update, mag, err = keep, acc.mag, acc.err
        elif acc.dtype == "int1":
            update, mag, err = f"{acc.name} ^ {t.name}", 1.0, 0.0
        elif _is_float(acc.dtype):
            mag = acc.mag + 2 * t.mag
            prop = acc.err + 2 * t.err
            err = prop + (4 * _rnd(promote(acc.dtype, t.dtype), mag) if prop else 0.0)
            update = f"({acc.name} * 0.5 + {t.name}).to({_KD[acc.dtype]})"
            if _is_float(t.dtype) and not _is_float(acc.dtype):
                update = None
        elif _is_float(t.dtype):  # int accumulator, float update: keep it integer and exact
            update, mag, err = None, 0.0, 0.0
        else:
            mag, err = acc.mag + 4 * t.mag, 0.0
            update = (f"{acc.name} + {t.name}" if d.chance(50)
                      else f"kd.maximum({acc.name}, {t.name})")
        if update is None or mag > _MAG_LIMIT[acc.dtype]:
            update, mag, err = keep, acc.mag, acc.err
        self.emit(f"{acc.name} = {update}")
        del self.vals[mark:]
        self.depth -= 1
        self.indent -= 1
        acc.mag, acc.err = mag, err

    def s_if(self):
        """`if` on a runtime scalar; both branches assign one new variable."""
        d = self.d
        scalars = [v for v in self.vals if v.shape == () and v.exact and v.dtype != "int1"]
        conds = ["sf > 0.0", "si > 0", "nM > 3", "si % 2 == 0"]
        conds += [f"{v.name} > 0" for v in scalars[-2:]]
        cond = d.choice(conds)
        name = self.fresh("b")
        self.emit(f"if {cond}:")
        self.indent += 1
        self.depth += 1
        mark = len(self.vals)
        self.statement()
        a = self.vals[-1] if len(self.vals) > mark else self.pick(lambda v: True)
        self.emit(f"{name} = {a.name}")
        del self.vals[mark:]
        self.indent -= 1
        self.emit("else:")
        self.indent += 1
        b = self.pick(lambda v: v.shape == a.shape, shape=a.shape, dtype=None)
        if b.shape == a.shape:
            expr = b.name if b.dtype == a.dtype else f"{b.name}.to({_KD[a.dtype]})"
            bad = (_is_float(a.dtype) and b.mag > _MAG_LIMIT[a.dtype]) or (
                not _is_float(a.dtype) and not b.exact)
            if bad:
                expr = None
        else:
            expr = None
        if expr is None:
            dims = ", ".join(_BLOCK_NAME[x] if x != "1" else "1" for x in a.shape)
            # A scalar: a Python constant takes the other branch's type.  `0` next to an int1
            # branch is typed int32 by the frontend (a bug, see docs/fuzzing.md): use False.
            expr = (f"kd.zeros(({dims}{',' if len(a.shape) == 1 else ''}), {_KD[a.dtype]})"
                    if a.shape else "False" if a.dtype == "int1" else "0")
            b = Val("", a.shape, a.dtype, 0.0, 0.0)
        self.emit(f"{name} = {expr}")
        del self.vals[mark:]
        self.indent -= 1
        self.depth -= 1
        mag = max(a.mag, b.mag)
        err = max(a.err, b.err + (_rnd(a.dtype, b.mag) if b.err else 0.0))
        self.vals.append(Val(name, a.shape, a.dtype, mag, err))


ALL_FEATURES = frozenset(["binary", "unary", "literal", "compare", "where", "cast", "reduce",
                          "expand", "trans", "logic", "intdiv", "dot", "loop", "if",
                          # bfloat16 scalars (reductions to a scalar, casts of scalars)
                          "bf16_scalar"])


def _store(gen: _Gen, v: Val, j: int) -> None:
    if not v.shape:
        gen.emit(f"kd.store(out{j}, {v.name})")
        return
    off, mask = gen.offsets(v.shape)
    gen.emit(f"kd.store(out{j} + {off}, {v.name}, mask={mask})")


def build_program(d: _Draw, features: frozenset[str] = ALL_FEATURES,
                  max_statements: int = 8) -> Program:
    """One random program from the choices of `d`."""
    gen = _Gen(d, features)
    gen.blocks = {x: d.choice(_BLOCKS) for x in _DIMS}
    extents = {x: d.int(1, gen.blocks[x]) for x in _DIMS}
    gen.load()
    for _ in range(d.int(1, max_statements)):
        gen.statement()
    storable = [v for v in gen.vals if v.storable]
    outs = [storable[-1]] if storable else [gen.load()]
    for _ in range(d.int(0, 2)):
        v = d.choice(storable or outs)
        if v not in outs:
            outs.append(v)
    for j, v in enumerate(outs):
        _store(gen, v, j)
    params = [f"in{i}" for i in range(len(gen.inputs))] + [f"out{j}" for j in range(len(outs))]
    params += ["nM", "nN", "nK", "n_iter", "sf", "si",
               "BM: kd.constexpr", "BN: kd.constexpr", "BK: kd.constexpr"]
    head = ["import kdsl as kd", "", "", "@kd.jit", f"def kern({', '.join(params)}):",
            "    rM = kd.arange(0, BM)", "    rN = kd.arange(0, BN)", "    rK = kd.arange(0, BK)"]
    source = "\n".join(head + gen.lines) + "\n"
    out_types = [(v.shape, "int32" if v.dtype == "int1" else v.dtype) for v in outs]
    return Program(source=source, blocks=gen.blocks, extents=extents, inputs=gen.inputs,
                   outputs=out_types, errs=[v.err for v in outs], n_iter=d.int(0, 4),
                   sf=d.int(-8, 8) / 4, si=d.int(-8, 8), data_seed=d.int(0, 2**31 - 1),
                   discrete=d.chance(40), num_warps=d.choice([4, 1, 2, 8]))


def programs(features: frozenset[str] = ALL_FEATURES, max_statements: int = 8):
    """Hypothesis strategy of random programs (shrinking gives fewer, simpler statements)."""
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw):
        return build_program(_Draw(draw), features, max_statements)
    return strategy()


# -------------------------------------------------------------------------------- running

_MODULE_DIR = tempfile.mkdtemp(prefix="kdsl-fuzz-")
_KERNELS: dict[str, Any] = {}


def load_kernel(source: str):
    """Import `source` as a module (written to a file, so the frontend can read it back)."""
    key = hashlib.sha1(source.encode()).hexdigest()[:16]
    if key not in _KERNELS:
        path = os.path.join(_MODULE_DIR, f"kdsl_fuzz_{key}.py")
        with open(path, "w") as f:
            f.write(source)
        spec = importlib.util.spec_from_file_location(f"kdsl_fuzz_{key}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _KERNELS[key] = mod.kern
    return _KERNELS[key]


_GUARD = 8  # elements past every output, which must keep their sentinel
_NP = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16, "int32": np.int32}


def _size(p: Program, shape: tuple[str, ...]) -> int:
    return int(np.prod([p.extents[x] for x in shape])) if shape else 1


def make_inputs(p: Program) -> list[np.ndarray]:
    from kdsl.ir.interp import bf16_bits
    rng = np.random.default_rng(p.data_seed)
    arrays = []
    for shape, dtype in p.inputs:
        n = _size(p, shape)
        if dtype == "int32":
            arrays.append(rng.integers(-8, 9, n).astype(np.int32))
            continue
        x = (rng.integers(-8, 9, n) / 4.0 if p.discrete else rng.uniform(-2, 2, n))
        arrays.append(bf16_bits(x.astype(np.float32)) if dtype == "bfloat16"
                      else x.astype(_NP[dtype]))
    return arrays


def _sentinel(dtype: str) -> np.ndarray:
    from kdsl.ir.interp import bf16_bits
    if dtype == "bfloat16":
        return bf16_bits(np.array([-77.0], np.float32))
    return np.array([-77], _NP[dtype])


def run_on(p: Program, backend: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Launch the program on one backend; returns the output buffers (guards included)."""
    from kdsl.runtime.binding import bfloat16_view
    kern = load_kernel(p.source)
    outs = [np.full(_size(p, s) + _GUARD, _sentinel(t)[0]) for s, t in p.outputs]
    wrap = (lambda a, t: bfloat16_view(a) if t == "bfloat16" else a)
    args = [wrap(a.copy(), t) for a, (_, t) in zip(inputs, p.inputs)]
    args += [wrap(o, t) for o, (_, t) in zip(outs, p.outputs)]
    e = p.extents
    kern[(1,)](*args, e["M"], e["N"], e["K"], p.n_iter, float(p.sf), int(p.si),
               BM=p.blocks["M"], BN=p.blocks["N"], BK=p.blocks["K"], num_warps=p.num_warps,
               backend=backend)
    return outs


@dataclass
class Mismatch:
    backend: str
    what: str      # "output 0", or "error" for an exception
    message: str

    def kind(self) -> str:
        """Coarse class of the mismatch, used to shrink one example of each."""
        head = self.message.split(":")[0] if self.what == "error" else self.what.split()[0]
        return f"{self.backend}:{self.what.split()[0]}:{head}"


@dataclass
class Report:
    program: Program
    backends: list[str]
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def text(self) -> str:
        if self.ok:
            return f"ok on {', '.join(self.backends)}"
        lines = [f"{len(self.mismatches)} mismatch(es):"]
        lines += [f"  [{m.backend}] {m.what}: {m.message}" for m in self.mismatches]
        lines += ["kernel source:", self.program.source,
                  (f"extents={self.program.extents} blocks={self.program.blocks} "
                   f"n_iter={self.program.n_iter} sf={self.program.sf} si={self.program.si} "
                   f"num_warps={self.program.num_warps}"),
                  "reproducer:", self.program.reproducer(self.backends)]
        return "\n".join(lines)


def _values(a: np.ndarray, dtype: str) -> np.ndarray:
    from kdsl.ir.interp import bf16_from_bits
    return (bf16_from_bits(a) if dtype == "bfloat16" else a).astype(np.float64)


def compare(p: Program, j: int, got: np.ndarray, ref: np.ndarray) -> str | None:
    """None when output `j` agrees with the reference, else a description."""
    from kdsl.testing import assert_close
    dtype = p.outputs[j][1]
    n = got.size - _GUARD
    g, r = _values(got, dtype), _values(ref, dtype)
    if not np.array_equal(g[n:], r[n:], equal_nan=True):
        return f"guard elements past the output were written: {g[n:].tolist()}"
    err = p.errs[j]
    if not _is_float(dtype) or err == 0.0:
        bad = ~((g[:n] == r[:n]) | (np.isnan(g[:n]) & np.isnan(r[:n])))
        if bad.any():
            idx = np.flatnonzero(bad)[:5]
            return (f"{int(bad.sum())} of {n} elements differ ({dtype}, exact expected); "
                    f"first (index, got, expected): "
                    f"{[(int(i), g[i].item(), r[i].item()) for i in idx]}")
        return None
    # the tracked bound is absolute: the rule's c * eps * sqrt(k) covering it, not scaled
    k = max(1, math.ceil((err / (8 * _EPS[dtype])) ** 2))
    t = 8 * _EPS[dtype] * math.sqrt(k)
    try:
        assert_close(g[:n], r[:n], dtype=dtype, k=k, atol=t, rtol=t)
    except AssertionError as e:
        return f"{e} [tolerance {t:.3g} from error bound {err:.3g}]"
    return None


def check_program(p: Program, backends: Sequence[str]) -> Report:
    """Run `p` on the interpreter and on `backends`; every difference is a Mismatch."""
    rep = Report(p, list(backends))
    inputs = make_inputs(p)
    try:
        ref = run_on(p, "interp", inputs)
    except Exception as e:  # noqa: BLE001  (the reference itself fails: a frontend bug or a generator bug)
        rep.mismatches.append(Mismatch("interp", "error", f"{type(e).__name__}: {e}"))
        return rep
    for b in backends:
        if b == "interp":
            continue
        try:
            outs = run_on(p, b, inputs)
        except Exception as e:  # noqa: BLE001  (any failure of a backend is a finding)
            rep.mismatches.append(Mismatch(b, "error", f"{type(e).__name__}: {e}"))
            continue
        for j, (o, r) in enumerate(zip(outs, ref)):
            msg = compare(p, j, o, r)
            if msg:
                rep.mismatches.append(Mismatch(b, f"output {j}", msg))
    return rep


def default_backends() -> list[str]:
    import kdsl as kd
    return [b for b in ("llvm", "opencl", "cuda") if b in kd.available_backends()]


# ------------------------------------------------------------------------------ the command

class FuzzFailure(AssertionError):
    def __init__(self, report: Report):
        super().__init__(report.text())
        self.report = report


def sweep(examples: int, backends: Sequence[str], seed: int, features=ALL_FEATURES,
          on_report: Callable[[Report], None] | None = None) -> tuple[int, list[Report]]:
    """Run `examples` programs without shrinking; returns (programs run, failing reports)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    failures: list[Report] = []
    count = [0]

    @hseed(seed)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(programs(features))
    def run(p):
        count[0] += 1
        rep = check_program(p, backends)
        if not rep.ok:
            failures.append(rep)
        if on_report:
            on_report(rep)
    run()
    return count[0], failures


def shrink(kind: str, backends: Sequence[str], seed: int, examples: int,
           features=ALL_FEATURES) -> Report | None:
    """Replay the sweep until a program fails with mismatch `kind`, then let hypothesis shrink
    it; returns the minimal failing report."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    @hseed(seed)
    @settings(max_examples=examples, deadline=None, database=None,
              phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck),
              report_multiple_bugs=False, verbosity=0)
    @given(programs(features))
    def run(p):
        rep = check_program(p, backends)
        if any(m.kind() == kind for m in rep.mismatches):
            raise FuzzFailure(rep)
    try:
        run()
    except FuzzFailure as e:
        return e.report
    return None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kdsl.fuzz", description=__doc__.split("\n")[0])
    ap.add_argument("--examples", type=int, default=200, help="programs to run")
    ap.add_argument("--backends", default=None,
                    help="comma-separated backends compared with interp (default: available)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-shrink", action="store_true", help="do not minimise mismatches")
    ap.add_argument("--without", default="",
                    help=f"comma-separated features not to generate: {sorted(ALL_FEATURES)}")
    args = ap.parse_args(argv)
    os.environ.setdefault("KDSL_CACHE_DIR", tempfile.mkdtemp(prefix="kdsl-fuzz-cache-"))
    backends = args.backends.split(",") if args.backends else default_backends()
    features = ALL_FEATURES - {f.strip() for f in args.without.split(",") if f.strip()}
    t0 = time.time()

    def progress(rep: Report) -> None:
        if not rep.ok:
            print(f"--- MISMATCH\n{rep.text()}", flush=True)

    n, failures = sweep(args.examples, backends, args.seed, features, progress)
    print(f"ran {n} programs on interp + {','.join(backends)} in {time.time() - t0:.0f} s: "
          f"{len(failures)} with mismatches", flush=True)
    if failures and not args.no_shrink:
        kinds = sorted({m.kind() for r in failures for m in r.mismatches})
        for kind in kinds:
            rep = shrink(kind, backends, args.seed, args.examples, features)
            print(f"=== minimal program for {kind}:")
            print(rep.text() if rep else "(did not reproduce)", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
