"""Statements of the Triton-compatible features: scans, atomics, block pointers, random numbers,
`while` loops, early `return`, tuple reductions, max/min with indices, shape ops, fp8 casts
and libdevice functions (docs/fuzzing.md has the error model of each).

`TritonStatements` is a mixin of `kdsl.tools.fuzz.gen._Gen`: each `s_<feature>` method writes one
statement through the generator's helpers (`pick`, `define`, `emit`, ...) and records the new
values with their magnitude and error bounds; returning False means "not applicable here" (the
generator then emits a load instead).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from kdsl.tools.fuzz.libdevice_fns import FNS
from kdsl.tools.fuzz.model import (
    _BLOCK_NAME,
    _DIMS,
    _EPS,
    _KD,
    _MAG_LIMIT,
    INPUT_DTYPES,
    Val,
    _is_float,
    _rnd,
    bcast,
    promote,
)

if TYPE_CHECKING:
    from kdsl.tools.fuzz.gen import _Gen

TRITON_FEATURES = frozenset(["scan", "atomic", "block_ptr", "random", "while", "return",
                             "tuple_reduce", "max_index", "shape", "fp8", "libdevice",
                             # an early return (a runtime `if`) in a loop while a block pointer
                             # made before the loop is live (a frontend bug once: docs/fuzzing.md,
                             # "Findings")
                             "bp_loop_if",
                             # `while (w < n_iter) | (w < si)`: PoCL 3.1 miscompiles some
                             # kernels with it (docs/fuzzing.md, "Findings")
                             "while_or"])

# `@kd.jit` helpers, written into the program's module when a statement uses them
HELPERS = {
    "comb_add": "@kd.jit\ndef comb_add(a, b):\n    return a + b",
    "comb_max": "@kd.jit\ndef comb_max(a, b):\n    return kd.maximum(a, b)",
    "comb_min": "@kd.jit\ndef comb_min(a, b):\n    return kd.minimum(a, b)",
    "comb_maxc": "@kd.jit\ndef comb_maxc(a, b):\n    return a if a > b else b",
    # composition of affine maps x -> a x + b: the scan solves y[i] = a[i] y[i-1] + b[i]
    "comb_affine": "@kd.jit\ndef comb_affine(a1, b1, a2, b2):\n    return a1 * a2, b1 * a2 + b2",
    "comb_sum_max": ("@kd.jit\ndef comb_sum_max(a0, a1, b0, b1):\n"
                     "    return a0 + b0, kd.maximum(a1, b1)"),
    "comb_argmax": ("@kd.jit\ndef comb_argmax(v1, i1, v2, i2):\n"
                    "    take = (v1 > v2) | ((v1 == v2) & (i1 < i2))\n"
                    "    return kd.where(take, v1, v2), kd.where(take, i1, i2)"),
}

_WIDEN = {"float16": "float32", "bfloat16": "float32", "int1": "int32"}  # max/min, Triton's rule

# atomics: the ops each pointee type has (docs/language.md, "Atomics")
_ATOMIC_OPS = {"int32": ("add", "max", "min", "and", "or", "xor", "xchg", "cas"),
               "float32": ("add", "max", "min", "xchg", "cas"),
               "float16": ("add", "cas"), "bfloat16": ("add", "cas")}
# index patterns along one dim of an atomic's target (r: the lane, n: the extent), and whether
# they are one-to-one on the unmasked lanes; the others make lanes share addresses
_ATOMIC_IDX = (("{r}", True), ("{n} - 1 - {r}", True), ("{r} // 2", False), ("{r} % 2", False),
               ("{r} * 0", False), ("({r} * 3) % {n}", False))
_SEMS = ("", ', sem="relaxed"', ', sem="acquire"', ', sem="release"', ', sem="acq_rel"',
         ', scope="cta"', ', scope="gpu"', ', sem="relaxed", scope="sys"')

# 8-bit floats: (largest finite value, mantissa bits)
_FP8 = {"float8e4nv": (448.0, 3), "float8e5": (57344.0, 2), "float8e4b15": (1.875, 3),
        "float8e4b8": (240.0, 3), "float8e5b16": (57344.0, 2)}

_OFFSET_CHOICES = ("0", "1", "-1", "si % 3")


def _tuple(items: list[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


class TritonStatements:
    """Statements of the Triton-compatibility features (mixed into `_Gen`)."""

    # ---- helpers

    def _n(self: _Gen, dim: str) -> int:
        return 1 if dim == "1" else self.blocks[dim]

    def _dims(self: _Gen, shape: tuple[str, ...]) -> str:
        return _tuple([_BLOCK_NAME.get(x, "1") for x in shape])

    def use(self: _Gen, helper: str) -> str:
        self.helpers[helper] = HELPERS[helper]
        return helper

    def add_output(self: _Gen, shape: tuple[str, ...], dtype: str, mag: float, err: float,
                   data: bool) -> Val:
        """A new output buffer `out<j>` written in the body; `data`: it starts with random
        values (else the sentinel)."""
        o = Val(f"out{len(self.outs)}", tuple(shape), dtype, mag, err)
        self.outs.append(o)
        self.out_data.append(data)
        return o

    def unpack(self: _Gen, expr: str, vals: list[tuple]) -> list[Val]:
        """`a, b = expr` with a Val per (shape, dtype, mag, err)."""
        out = [Val(self.fresh(), tuple(s), t, m, e) for s, t, m, e in vals]
        self.emit(f"{', '.join(v.name for v in out)} = {expr}")
        self.vals.extend(out)
        return out

    def method_or_call(self: _Gen, fn: str, a: Val, rest: str) -> str:
        """`kd.fn(a, rest)` or the method form `a.fn(rest)`."""
        if self.d.chance(30):
            return f"{a.name}.{fn}({rest})"
        return f"kd.{fn}({a.name}{', ' if rest else ''}{rest})"

    def _reduced(self: _Gen, shape: tuple[str, ...], axis: int | None,
                 keep: bool) -> tuple[str, ...]:
        if axis is None:
            return ("1",) * len(shape) if keep else ()
        if keep:
            return shape[:axis] + ("1",) + shape[axis + 1:]
        return shape[:axis] + shape[axis + 1:]

    def _lanes(self: _Gen, shape: tuple[str, ...], axis: int | None) -> int:
        dims = shape if axis is None else (shape[axis],)
        return math.prod(self._n(x) for x in dims)

    # ---- scans

    def s_scan(self: _Gen):
        d = self.d
        a = self.pick(lambda v: len(v.shape) >= 1)
        if not a.shape:
            return False
        axis = d.int(0, len(a.shape) - 1)
        n = self._n(a.shape[axis])
        rev = ", reverse=True" if d.chance(30) else ""
        form = d.choice(["cumsum", "cumprod", "scan", "affine"])
        if form == "cumsum":
            # Triton's promotion: bfloat16 -> float32; int1 would give uint32, so cast it first
            t, extra = ("int32", ", dtype=kd.int32") if a.dtype == "int1" else (
                {"bfloat16": "float32"}.get(a.dtype, a.dtype), "")
            mag = n * a.mag
            if mag > _MAG_LIMIT[t]:
                return False
            # the association is unspecified: each sum is within n eps of the exact one
            err = n * a.err + (2 * n * _EPS[t] * mag if _is_float(t) else 0.0)
            self.define(self.method_or_call("cumsum", a, f"axis={axis}{rev}{extra}"), a.shape,
                        t, mag, err)
        elif form == "cumprod":
            if a.dtype == "int1":
                return False
            t = {"bfloat16": "float32"}.get(a.dtype, a.dtype)
            x, m = a.name, a.mag
            if max(m, 1.0) ** n > min(_MAG_LIMIT[t], 1e4):
                c = "1.25" if _is_float(a.dtype) else "1"
                x, m = f"kd.minimum(kd.maximum({a.name}, -{c}), {c})", min(m, float(c))
            mag = m if m <= 1 else m ** n
            if mag > _MAG_LIMIT[t]:
                return False
            err = 0.0
            if _is_float(t):
                err = n * a.err * max(m, 1.0) ** (n - 1) + 2 * n * _EPS[t] * max(mag, 1.0)
            self.define(f"kd.cumprod({x}, axis={axis}{rev})", a.shape, t, mag, err)
        elif form == "scan":
            fn = d.choice(["comb_max", "comb_add", "comb_min", "comb_maxc", "kd.maximum"])
            if fn == "comb_add":
                if a.dtype == "int1":
                    return False  # int1 + int1 is int32: not a combination of int1
                mag = n * a.mag
                err = n * a.err + (2 * n * _EPS[a.dtype] * mag if _is_float(a.dtype) else 0.0)
            else:
                mag, err = a.mag, a.err
            if mag > _MAG_LIMIT[a.dtype]:
                return False
            if not fn.startswith("kd."):
                self.use(fn)
            self.define(f"kd.associative_scan({a.name}, {axis}, {fn}{rev})", a.shape, a.dtype,
                        mag, err)
        else:
            b = self.pick(lambda v: v.shape == a.shape and v is not a, shape=a.shape)
            if b.shape != a.shape:
                return False
            t = "float32" if _is_float(a.dtype) or _is_float(b.dtype) else "int32"
            one = "1.0" if t == "float32" else "1"
            xa = a.name if a.dtype == t else f"{a.name}.to({_KD[t]})"
            xb = b.name if b.dtype == t else f"{b.name}.to({_KD[t]})"
            if t == "float32" and b.dtype == "int32" and b.mag > 2.0**24:
                return False
            xa = f"kd.minimum(kd.maximum({xa}, -{one}), {one})"  # |a| <= 1: bounded results
            mb = n * b.mag
            if mb > _MAG_LIMIT[t]:
                return False
            ea = eb = 0.0
            if t == "float32":
                ea = n * a.err + 2 * n * _EPS[t]
                eb = n * b.err + n * mb * a.err + 4 * n * n * _EPS[t] * max(b.mag, 1.0)
            self.use("comb_affine")
            self.unpack(f"kd.associative_scan(({xa}, {xb}), {axis}, comb_affine{rev})",
                        [(a.shape, t, min(a.mag, 1.0), ea), (a.shape, t, mb, eb)])

    # ---- reductions with indices, and of tuples

    def s_max_index(self: _Gen):
        d = self.d
        a = self.pick(lambda v: v.exact and len(v.shape) >= 1)
        if not (a.exact and a.shape):
            return False
        axis = None if d.chance(20) else d.int(0, len(a.shape) - 1)
        keep = d.chance(15)
        kw = ", return_indices=True"
        if d.chance(15):
            kw += ", return_indices_tie_break_left=False"  # kdsl returns the first index too
        if keep:
            kw += ", keep_dims=True"
        shape = self._reduced(a.shape, axis, keep)
        vt = "float32" if a.dtype == "bfloat16" else a.dtype
        fn = d.choice(["max", "min"])
        self.unpack(f"kd.{fn}({a.name}, axis={axis}{kw})",
                    [(shape, vt, a.mag, 0.0),
                     (shape, "int32", float(self._lanes(a.shape, None)), 0.0)])

    def s_tuple_reduce(self: _Gen):
        d = self.d
        a = self.pick(lambda v: v.storable and len(v.shape) >= 1)
        if not (a.storable and a.shape):
            return False
        axis = None if d.chance(20) else d.int(0, len(a.shape) - 1)
        keep = ", keep_dims=True" if d.chance(15) else ""
        shape = self._reduced(a.shape, axis, bool(keep))
        n = self._lanes(a.shape, axis)
        if d.chance(50):
            # (sum, max) of two tiles: the sum keeps the element type (no promotion)
            b = self.pick(lambda v: v.shape == a.shape, shape=a.shape)
            if b.shape != a.shape or a.dtype == "int1":
                return False
            mag = n * a.mag
            if mag > _MAG_LIMIT[a.dtype]:
                return False
            err = n * a.err + (2 * n * _EPS[a.dtype] * mag if _is_float(a.dtype) else 0.0)
            self.use("comb_sum_max")
            self.unpack(f"kd.reduce(({a.name}, {b.name}), {axis}, comb_sum_max{keep})",
                        [(shape, a.dtype, mag, err), (shape, b.dtype, b.mag, b.err)])
            return
        # (value, index): the first maximum, by a user combination
        if not a.exact:
            return False
        dims = [f"r{x}" for x in a.shape]
        if len(a.shape) == 1:
            idx = dims[0]
        elif axis is None:
            idx = f"{dims[0]}[:, None] * {_BLOCK_NAME[a.shape[1]]} + {dims[1]}[None, :]"
        else:
            one = f"{dims[0]}[:, None]" if axis == 0 else f"{dims[1]}[None, :]"
            idx = f"kd.broadcast_to({one}, {self._dims(a.shape)})"
        self.use("comb_argmax")
        self.unpack(f"kd.reduce(({a.name}, {idx}), {axis}, comb_argmax{keep})",
                    [(shape, a.dtype, a.mag, 0.0),
                     (shape, "int32", float(self._lanes(a.shape, None)), 0.0)])

    # ---- shape ops

    def s_shape(self: _Gen):
        d = self.d
        form = d.choice(["flip", "join_split", "sort", "gather", "interleave", "mix"])
        a = self.pick(lambda v: len(v.shape) >= 1 or form == "join_split")
        if form == "flip":
            if not a.shape:
                return False
            dim = d.choice([None, -1] + list(range(len(a.shape))))
            rest = "" if dim is None and d.chance(50) else f"{dim}"
            expr = (f"kd.flip({a.name}{', ' + rest if rest else ''})" if d.chance(70)
                    else f"{a.name}.flip({rest})")
            self.define(expr, a.shape, a.dtype, a.mag, a.err)
            return
        if form == "sort":
            if not a.shape:
                return False
            kw = d.choice(["", "descending=True", "dim=-1", f"dim={len(a.shape) - 1}"])
            # sorting is 1-Lipschitz in the largest difference: errors carry over
            self.define(self.method_or_call("sort", a, kw), a.shape, a.dtype, a.mag, a.err)
            return
        if form == "gather":
            if not (a.shape and a.storable):
                return False
            axis = d.int(0, len(a.shape) - 1)
            ishape = list(a.shape)
            ishape[axis] = d.choice(_DIMS)
            ishape = tuple(ishape)
            size = _BLOCK_NAME[a.shape[axis]]
            cand = [v for v in self.vals if v.shape == ishape and v.dtype == "int32" and v.exact]
            if cand and d.chance(60):
                v = cand[-1]
                # out-of-range indices are clamped (kdsl's definition; Triton: undefined)
                idx = f"kd.abs({v.name}) % {size}" if d.chance(70) else v.name
            elif len(ishape) == 1:
                idx = f"(r{ishape[0]} * 3 + si) % {size}"
            else:
                idx = f"(r{ishape[0]}[:, None] * 3 + r{ishape[1]}[None, :] + si) % {size}"
            expr = (f"kd.gather({a.name}, {idx}, {axis})" if d.chance(70)
                    else f"{a.name}.gather({idx}, {axis})")
            self.define(expr, ishape, a.dtype, a.mag, a.err)
            return
        b = self.pick(lambda v: bcast(a.shape, v.shape) is not None and v is not a,
                      shape=a.shape)
        shape = bcast(a.shape, b.shape)
        if shape is None:
            return False
        t = promote(a.dtype, b.dtype)
        if _is_float(t) and max(a.mag, b.mag) > _MAG_LIMIT[t]:
            return False
        if form == "join_split":
            j = f"kd.join({a.name}, {b.name})"
            expr = f"kd.split({j})" if d.chance(70) else f"{j}.split()"
            self.unpack(expr, [(shape, t, a.mag, a.err), (shape, t, b.mag, b.err)])
            return
        if a.shape != b.shape or not a.shape:
            return False
        il = f"kd.interleave({a.name}, {b.name})"
        blocks = [_BLOCK_NAME.get(x, "1") for x in a.shape]
        if form == "interleave":
            # [.., 2n] -> [.., n, 2]: the pairs (a, b) again
            self.unpack(f"kd.split(kd.reshape({il}, {_tuple(blocks + ['2'])}))",
                        [(shape, t, a.mag, a.err), (shape, t, b.mag, b.err)])
            return
        # [.., 2n] -> [.., 2, n] and the max over the 2: mixes elements of a and b
        tm = _WIDEN.get(t, t)
        self.define(f"kd.max(kd.reshape({il}, {_tuple(blocks[:-1] + ['2', blocks[-1]])}), "
                    f"axis={len(a.shape) - 1})", shape, tm, max(a.mag, b.mag),
                    max(a.err, b.err))

    # ---- fp8

    def s_fp8(self: _Gen):
        d = self.d
        f8 = d.choice(list(_FP8))
        fmax, bits = _FP8[f8]
        eps8 = 2.0 ** -bits
        a = self.pick(lambda v: True)
        back = d.choice(["float32", "bfloat16", "float16"])
        if back == "float16" and fmax > _MAG_LIMIT["float16"]:
            back = "float32"
        if d.chance(70):
            # round to nearest even and saturate: within one fp8 step of the other rounding
            mag = min(a.mag, fmax)
            err = a.err + (eps8 * max(mag, 1.0) if a.err else 0.0)
            self.define(f"{a.name}.to(kd.{f8}).to({_KD[back]})", a.shape, back, mag, err)
            return
        b = self.pick(lambda v: bcast(a.shape, v.shape) is not None, shape=a.shape)
        shape = bcast(a.shape, b.shape)
        if shape is None:
            return False
        op = d.choice(["+", "*", "-"])
        ma, mb = min(a.mag, fmax), min(b.mag, fmax)
        mag = ma * mb if op == "*" else ma + mb
        if mag > fmax:
            return False  # no overflow: fp8 arithmetic stays finite
        prop = (a.err * mb + b.err * ma) if op == "*" else a.err + b.err
        err = prop + (2 * eps8 * max(mag, 1.0) if prop else 0.0)
        self.define(f"({a.name}.to(kd.{f8}) {op} {b.name}.to(kd.{f8})).to(kd.float32)", shape,
                    "float32", mag, err)

    # ---- random numbers (bit for bit Triton's Philox on every backend)

    def s_random(self: _Gen):
        d = self.d
        seeds = ["si", "12345", "si * 7 + 3", "123456789012"]
        seeds += [v.name for v in self.vals if v.shape == () and v.dtype == "int32"
                  and v.exact][-1:]
        seed = d.choice(seeds)
        kind = d.int(0, 3)
        ints = [v for v in self.vals if v.dtype == "int32" and v.exact]
        if kind == 3 and ints:
            v = ints[-1 - d.int(0, len(ints) - 1)]
            off, shape = v.name, v.shape  # any int32 values, negative ones included
        else:
            shape = d.choice([("M",), ("M", "N"), ("N",), ("K", "M")])
            if len(shape) == 1:
                off = f"r{shape[0]}" if kind != 1 else f"r{shape[0]} + si"
            else:
                off = f"r{shape[0]}[:, None] * {_BLOCK_NAME[shape[1]]} + r{shape[1]}[None, :]"
        rounds = ", n_rounds=7" if d.chance(20) else ""
        fn = d.choice(["rand", "randint", "randn", "rand4x", "randint4x"])
        args = f"({seed}, {off}{rounds})"
        if fn == "rand":
            self.define(f"kd.rand{args}", shape, "float32", 1.0, 0.0)
        elif fn == "randint":
            k = d.choice([24, 20, 28])  # uint32 bits, shifted into int32's exact range
            self.define(f"(kd.randint{args} >> {k}).to(kd.int32)", shape, "int32",
                        2.0 ** (32 - k), 0.0)
        elif fn == "randn":
            # Box-Muller: log, sqrt, cos, sin are each backend's (a few ulps of values <= 6)
            self.define(f"kd.randn{args}", shape, "float32", 6.0, 64 * _EPS["float32"] * 6.0)
        elif fn == "rand4x":
            self.unpack(f"kd.rand4x{args}", [(shape, "float32", 1.0, 0.0)] * 4)
        else:
            words = [self.fresh("u") for _ in range(4)]
            self.emit(f"{', '.join(words)} = kd.randint4x{args}")
            for w in words[::3]:
                self.define(f"({w} >> 24).to(kd.int32)", shape, "int32", 256.0, 0.0)

    # ---- libdevice

    def s_libdevice(self: _Gen):
        d = self.d
        fn = d.choice(FNS)
        ders = None
        args: list[Val] = []
        shape: tuple[str, ...] = ()
        for kind in fn.args:
            if kind == "f":
                v = self.pick(lambda v, s=shape: bcast(s, v.shape) is not None)
            else:
                v = self.pick(lambda v, s=shape: v.dtype in ("int32", "int1")
                              and bcast(s, v.shape) is not None, dtype="int32")
            s = bcast(shape, v.shape)
            if s is None or v.mag > fn.max_arg:
                return False
            shape = s
            args.append(v)
        ders = fn.der([v.mag for v in args])
        names, prop = [], 0.0
        for kind, v, der in zip(fn.args, args, ders):
            if kind == "f":
                names.append(v.name if _is_float(v.dtype) else f"{v.name}.to(kd.float32)")
            elif v.dtype == "int32":
                names.append(v.name)
            else:
                names.append(f"{v.name}.to(kd.int32)")  # int1
            # a 16-bit float argument is shifted or clamped in its own type first
            err = v.err + (_rnd(v.dtype, v.mag + 2) if v.err else 0.0)
            if der is None:
                if err:
                    return False  # discontinuous: the argument must be the same everywhere
            else:
                prop += der * err
        mag = fn.mag([v.mag for v in args])
        if mag > _MAG_LIMIT[fn.out]:
            return False
        allowance = fn.ulps if fn.ulps else (2.0 if prop else 0.0)
        self.libdevice = True
        self.define(fn.tmpl.format(*names), shape, fn.out, mag,
                    prop + allowance * _rnd(fn.out, mag))

    # ---- atomics

    def s_atomic(self: _Gen):
        """An atomic on a buffer that starts with random data; lanes may share addresses.
        Compared: the final buffer (every op here is order-independent on it, or is only used
        with one lane per address), and the old values where lanes do not share addresses."""
        d = self.d
        if self.loop_vars:
            return False  # (the error model counts one execution)
        t = d.choice(list(_ATOMIC_OPS))
        op = d.choice(_ATOMIC_OPS[t])
        v = self.pick(lambda v: True)
        if op in ("and", "or", "xor") and _is_float(v.dtype):
            return False
        if not _is_float(t) and _is_float(v.dtype) and not v.exact:
            return False  # float -> int truncates: discontinuous
        if _is_float(t) and v.mag > _MAG_LIMIT[t] / 64:
            return False
        if v.shape:
            shape = tuple(x if x != "1" else d.choice(_DIMS) for x in v.shape)
        else:
            shape = d.choice([("M",), ("N",), ("M", "N")])
        reuse = [o for o, data in zip(self.outs, self.out_data) if data and o.shape == shape
                 and o.dtype == t and o.mag < _MAG_LIMIT[t] / 64]
        if reuse and d.chance(40):
            buf = reuse[-1]
        else:
            buf = self.add_output(shape, t, 2.0 if _is_float(t) else 8.0, 0.0, data=True)
        sem = d.choice(_SEMS)
        _, base_mask = self.offsets(shape)
        if op == "cas":
            # clamped addresses: lanes past the extent share the last one, and their compare
            # value never matches, so only the unmasked lanes (one per address) can swap
            idx = [f"kd.minimum(r{x}, n{x} - 1)" for x in shape]
            off = idx[0] if len(shape) == 1 else (f"{idx[0]}[:, None] * n{shape[1]} + "
                                                  f"{idx[1]}[None, :]")
            val = v.name if v.dtype == t else f"{v.name}.to({_KD[t]})"
            cmp = (f"kd.where({base_mask}, kd.load({buf.name} + {off}, mask={base_mask}, "
                   f"other=0), -12345)")
            self.emit(f"kd.atomic_cas({buf.name} + {off}, {cmp}, {val}{sem})")
            buf.mag = max(buf.mag, v.mag)
            buf.err = max(buf.err, v.err + (_rnd(t, v.mag) if v.err else 0.0))
            return
        scalar = not v.shape and d.chance(30)
        unique = True
        if scalar:
            ptr, mask = buf.name, ""
        else:
            pats = [p for p in _ATOMIC_IDX if p[1] or op != "xchg"]
            idx = []
            for x in shape:
                tmpl, one_to_one = d.choice(pats)
                idx.append(tmpl.format(r=f"r{x}", n=f"n{x}"))
                unique = unique and one_to_one
            ptr = f"{buf.name} + " + (idx[0] if len(shape) == 1 else
                                      f"({idx[0]})[:, None] * n{shape[1]} + ({idx[1]})[None, :]")
            mask = base_mask
            conds = [c for c in self.vals if c.dtype == "int1" and c.exact
                     and bcast(shape, c.shape) == shape]
            if conds and d.chance(30):
                mask = f"({mask}) & {conds[-1].name}"
            mask = f", mask={mask}"
        old = (buf.mag, buf.err)
        lanes = 1 if unique else math.prod(self._n(x) for x in shape)
        if op == "add":
            mag = buf.mag + lanes * v.mag
            if not _is_float(t):
                err = 0.0
            elif unique:
                prop = buf.err + v.err
                err = prop + (_rnd(t, mag) if prop else 0.0)
            else:  # the additions to one address happen in any order
                err = buf.err + lanes * v.err + 2 * lanes * _EPS[t] * max(mag, 1.0)
        elif op in ("and", "or", "xor"):
            mag, err = 2.0 ** math.ceil(math.log2(max(buf.mag, v.mag) + 1)), 0.0
        else:  # max, min, xchg
            mag, err = max(buf.mag, v.mag), max(buf.err, v.err)
        if _is_float(t) and mag > _MAG_LIMIT[t] / 64:
            return False
        call = (f"({ptr}).atomic_{op}({v.name}{mask}{sem})" if d.chance(20)
                else f"kd.atomic_{op}({ptr}, {v.name}{mask}{sem})")
        buf.mag, buf.err = mag, err
        if unique and old[0] <= _MAG_LIMIT[t] and d.chance(60):
            # one lane per address: each gets the buffer's previous value (0 where masked off)
            self.define(call, () if scalar else shape, t, old[0], old[1])
        else:
            self.emit(call)

    # ---- block pointers

    def _make_block_ptr(self: _Gen) -> tuple[str, tuple[str, ...], str]:
        """A block pointer on a new input; returns (name, block shape as dims, element type)."""
        d = self.d
        dtype = d.choice(INPUT_DTYPES)
        view = d.choice(["2d", "1d", "2dT"])
        a, b = d.choice([("M", "N"), ("N", "K"), ("K", "M")])
        name = f"in{len(self.inputs)}"
        if view == "1d":
            self.inputs.append(((a,), dtype))
            shape, strides, block, order, dims = [f"n{a}"], ["1"], [f"B{a}"], ["0"], (a,)
        elif view == "2d":
            self.inputs.append(((a, b), dtype))
            shape, strides = [f"n{a}", f"n{b}"], [f"n{b}", "1"]
            block, order, dims = [f"B{a}", f"B{b}"], ["1", "0"], (a, b)
        else:  # the transposed view of a row-major array: strides (1, n)
            self.inputs.append(((a, b), dtype))
            shape, strides = [f"n{b}", f"n{a}"], ["1", f"n{b}"]
            block, order, dims = [f"B{b}", f"B{a}"], ["0", "1"], (b, a)
        offs = [d.choice(_OFFSET_CHOICES) for _ in dims]
        bp = self.fresh("bp")
        if not self.depth:
            self.live_bps.append(bp)
        if d.chance(30):
            args = ", ".join(_tuple(x) for x in (shape, strides, offs, block, order))
            self.emit(f"{bp} = kd.make_block_ptr({name}, {args})")
        else:
            self.emit(f"{bp} = kd.make_block_ptr({name}, shape={_tuple(shape)}, "
                      f"strides={_tuple(strides)}, offsets={_tuple(offs)}, "
                      f"block_shape={_tuple(block)}, order={_tuple(order)})")
        return bp, dims, dtype

    def _load_block_ptr(self: _Gen, bp: str, ndim: int, dtype: str) -> str:
        d = self.d
        check = "(0,)" if ndim == 1 else d.choice(["(0, 1)", "(1, 0)"])
        pads = ["", ', padding_option="zero"', ', padding_option=""']
        if _is_float(dtype):
            pads.append(', padding_option="nan"')
        pad = d.choice(pads)
        expr = f"kd.load({bp}, boundary_check={check}{pad})"
        if "nan" in pad:  # NaN outside the tensor, replaced by 0 before anything else
            tmp = self.fresh("t")
            self.emit(f"{tmp} = {expr}")
            expr = f"kd.where({tmp} != {tmp}, 0.0, {tmp})"
        return expr

    def s_block_ptr(self: _Gen):
        d = self.d
        in_loop = bool(self.loop_vars)
        if in_loop or self.depth or d.chance(50):
            bp, dims, dtype = self._make_block_ptr()
            self.define(self._load_block_ptr(bp, len(dims), dtype), dims, dtype,
                        8.0 if dtype == "int32" else 2.0, 0.0)
            return
        # a block pointer carried by a loop, advanced each iteration; the loads are summed
        bp, dims, dtype = self._make_block_ptr()
        at = "int32" if dtype == "int32" else "float32"
        acc = self.define(f"kd.zeros({self._dims(dims)}, {_KD[at]})", dims, at, 0.0, 0.0)
        if d.chance(50):
            ivar = "i"
            self.emit("for i in range(0, n_iter):")
        else:
            ivar = self.fresh("w")
            self.emit(f"{ivar} = 0")
            self.emit(f"while {ivar} < n_iter:")
        self.indent += 1
        steps = [d.choice(["1", "0", "-1", ivar, "2"]) for _ in dims]
        adv = (f"{bp} = kd.advance({bp}, {_tuple(steps)})" if d.chance(60)
               else f"{bp} = {bp}.advance({_tuple(steps)})")
        first = d.chance(50)
        if first:
            self.emit(adv)
        ld = self._load_block_ptr(bp, len(dims), dtype)
        if d.chance(70):
            self.emit(f"{acc.name} = {acc.name} + {ld}")
        else:
            self.emit(f"{acc.name} = kd.maximum({acc.name}, {ld})")
        if not first:
            self.emit(adv)
        if ivar != "i":
            self.emit(f"{ivar} += 1")
        self.indent -= 1
        # sums in iteration order: exact (the same operations everywhere)
        acc.mag = 4 * (8.0 if dtype == "int32" else 2.0)

    def store_block_ptr(self: _Gen, v: Val, j: int) -> None:
        """Store `v` into output j through a block pointer (maybe shifted: the elements moved
        outside the output are dropped by the boundary check)."""
        d = self.d
        offs = [d.choice(["0", "0", "1", "-1"]) for _ in v.shape]
        if len(v.shape) == 1:
            (a,) = v.shape
            bp = (f"kd.make_block_ptr(out{j}, shape=(n{a},), strides=(1,), offsets=({offs[0]},),"
                  f" block_shape=(B{a},), order=(0,))")
            check = "(0,)"
        else:
            a, b = v.shape
            bp = (f"kd.make_block_ptr(out{j}, shape=(n{a}, n{b}), strides=(n{b}, 1), "
                  f"offsets=({offs[0]}, {offs[1]}), block_shape=(B{a}, B{b}), order=(1, 0))")
            check = "(0, 1)"
        self.emit(f"kd.store({bp}, {v.name}, boundary_check={check})")

    # ---- control flow: while, early return

    def s_while(self: _Gen):
        """A `while` loop on a counter, maybe also on the carried value."""
        self._loop("while")

    def while_cond(self: _Gen, w: str, acc: Val) -> tuple[str, int, bool]:
        """(condition, most iterations, whether it needs `acc` exact)."""
        d = self.d
        form = d.int(0, 3)
        if form == 1 and "while_or" in self.allow:
            return (f"({w} < n_iter) | ({w} < si)" if d.chance(50)
                    else f"{w} < n_iter or {w} < si"), 8, False
        if form == 2:
            return f"{w} * {w} < n_iter + si", 4, False
        if form == 3 and acc.exact and acc.dtype != "int1":
            x = acc.name if not acc.shape else f"kd.max({acc.name})"
            c = d.choice(["2.0", "si", "sf * 4.0"])
            return (f"({w} < n_iter + 1) & ({x} < {c})" if d.chance(50)
                    else f"{w} < n_iter + 1 and {x} < {c}"), 5, True
        return f"{w} < n_iter", 4, False

    def s_return(self: _Gen):
        """`if <runtime condition>: [store a value to a new output]; return`."""
        d = self.d
        conds = ["sf > 0.0", "si > 0", "nM > 3", "si % 2 == 0"]
        conds += [f"{v.name} > 0" for v in self.vals
                  if v.shape == () and v.exact and v.dtype != "int1"][-2:]
        for iv in self.loop_vars:
            conds += [f"{iv} == si % 3", f"{iv} >= 1"]
        cond = d.choice(conds)
        if self.loop_vars and self.live_bps and "bp_loop_if" not in self.allow:
            return False
        v = self.pick(lambda v: v.storable) if d.chance(70) else None
        self.emit(f"if {cond}:")
        self.indent += 1
        if v is not None and v.storable:
            o = self.add_output(v.shape, v.dtype, v.mag, v.err, data=False)
            if v.shape:
                off, mask = self.offsets(v.shape)
                self.emit(f"kd.store({o.name} + {off}, {v.name}, mask={mask})")
            else:
                self.emit(f"kd.store({o.name}, {v.name})")
        self.emit("return")
        self.indent -= 1
