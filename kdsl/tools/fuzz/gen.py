"""The program generator: `_Gen` writes a kernel statement by statement (docs/fuzzing.md)."""

from __future__ import annotations

from collections.abc import Callable

from kdsl.tools.fuzz.model import (
    _BLOCK_NAME,
    _BLOCKS,
    _DIMS,
    _EPS,
    _KD,
    _MAG_LIMIT,
    _ULPS,
    _UNARY_MATH,
    INPUT_DTYPES,
    Program,
    Val,
    _Draw,
    _is_float,
    _rnd,
    bcast,
    promote,
)
from kdsl.tools.fuzz.triton import TRITON_FEATURES, TritonStatements


class _Gen(TritonStatements):
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
        # outputs written inside the body (atomics, stores before a `return`): out0, out1, ...
        self.outs: list[Val] = []
        self.out_data: list[bool] = []  # output j starts with random data (else the sentinel)
        self.helpers: dict[str, str] = {}  # @kd.jit functions the kernel calls, by name
        self.libdevice = False
        self.loop_vars: list[str] = []  # induction variables of the enclosing loops
        self.live_bps: list[str] = []  # block pointers made at the top level

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
        kinds += ["scan", "atomic", "block_ptr", "random", "return", "tuple_reduce",
                  "max_index", "shape", "fp8", "libdevice"]
        if self.depth == 0:
            kinds += ["loop", "if", "while"]
        kinds = [k for k in kinds if k in self.allow]
        if not kinds:  # (only loops and ifs allowed, inside a loop or if)
            self.load()
            return
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
        self._loop("for")

    def _loop(self, kind: str) -> None:
        """A runtime loop (`for` over `range(0, n_iter)`, or a `while` on a counter and, maybe,
        on the carried value) carrying one tile or scalar, with one to three body statements."""
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
        if kind == "for":
            ivar, trips, exact_acc = "i", 4, False
            self.emit("for i in range(0, n_iter):")
        else:
            ivar = self.fresh("w")
            cond, trips, exact_acc = self.while_cond(ivar, acc)
            self.emit(f"{ivar} = 0")
            self.emit(f"while {cond}:")
        self.indent += 1
        self.depth += 1
        self.loop_vars.append(ivar)
        mark = len(self.vals)
        self.vals.append(Val(ivar, (), "int32", float(trips), 0.0))
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
            mag, err = acc.mag + trips * t.mag, 0.0
            update = (f"{acc.name} + {t.name}" if d.chance(50)
                      else f"kd.maximum({acc.name}, {t.name})")
        if update is None or mag > _MAG_LIMIT[acc.dtype] or (exact_acc and err):
            # (a `while` condition on the carried value needs it exact)
            update, mag, err = keep, acc.mag, acc.err
        self.emit(f"{acc.name} = {update}")
        if kind == "while":
            self.emit(f"{ivar} += 1" if d.chance(50) else f"{ivar} = {ivar} + 1")
        del self.vals[mark:]
        self.loop_vars.pop()
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
                          "bf16_scalar"]) | TRITON_FEATURES


def _store(gen: _Gen, v: Val, j: int) -> None:
    if not v.shape:
        gen.emit(f"kd.store(out{j}, {v.name})")
        return
    if "block_ptr" in gen.allow and gen.d.chance(25):
        gen.store_block_ptr(v, j)
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
    base = len(gen.outs)  # outputs written in the body come first
    for j, v in enumerate(outs):
        _store(gen, v, base + j)
    outs = gen.outs + outs
    params = [f"in{i}" for i in range(len(gen.inputs))] + [f"out{j}" for j in range(len(outs))]
    params += ["nM", "nN", "nK", "n_iter", "sf", "si",
               "BM: kd.constexpr", "BN: kd.constexpr", "BK: kd.constexpr"]
    head = ["import kdsl as kd"]
    if gen.libdevice:
        head.append("from kdsl.language.extra import libdevice")
    head += ["", ""]
    for helper in gen.helpers.values():
        head += helper.split("\n") + ["", ""]
    head += ["@kd.jit", f"def kern({', '.join(params)}):",
             "    rM = kd.arange(0, BM)", "    rN = kd.arange(0, BN)", "    rK = kd.arange(0, BK)"]
    source = "\n".join(head + gen.lines) + "\n"
    out_types = [(v.shape, "int32" if v.dtype == "int1" else v.dtype) for v in outs]
    out_data = gen.out_data + [False] * (len(outs) - len(gen.out_data))
    return Program(source=source, blocks=gen.blocks, extents=extents, inputs=gen.inputs,
                   outputs=out_types, errs=[v.err for v in outs], n_iter=d.int(0, 4),
                   sf=d.int(-8, 8) / 4, si=d.int(-8, 8), data_seed=d.int(0, 2**31 - 1),
                   discrete=d.chance(40), num_warps=d.choice([4, 1, 2, 8]),
                   out_data=out_data if any(out_data) else [])


def programs(features: frozenset[str] = ALL_FEATURES, max_statements: int = 8):
    """Hypothesis strategy of random programs (shrinking gives fewer, simpler statements)."""
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw):
        return build_program(_Draw(draw), features, max_statements)
    return strategy()

