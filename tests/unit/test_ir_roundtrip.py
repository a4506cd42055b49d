"""The Tile IR text format round-trips: `parse_function(print_function(fn))` prints back to the
same text and interprets to the same bits, for every kernel of tests/backend/test_ops.py and
test_tutorials.py (every pass stage), for hand-built IR with every op kind and attribute kind,
and malformed text raises a ValueError naming its line."""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import math
import os
import struct
import sys

import numpy as np
import pytest

import kdsl as kd
from kdsl.ir import interp, tile
from kdsl.ir import types as T
from kdsl.ir.parser import ParseError, parse_function, parse_type, parse_value
from kdsl.ir.types import PointerType, TileType

sys.path.insert(0, os.path.dirname(__file__))
from test_interp import KB

HERE = os.path.dirname(os.path.abspath(__file__))
BACKEND_TESTS = os.path.join(HERE, os.pardir, "backend")

OTHER_KINDS = {
    "const", "program_id", "num_programs", "iota", "splat", "broadcast", "reshape", "trans",
    "fma", "where", "cast", "bitcast", "addptr", "ptr_offset", "load", "store", "atomic_rmw",
    "atomic_cas", "barrier", "print", "assert", "breakpoint",
    "reduce", "scan", "dot", "hint", "for", "while", "if", "yield", "condition", "int_to_ptr",
    "ptr_to_int",
}
ALL_KINDS = tile.BINARY_OPS | tile.COMPARE_OPS | tile.UNARY_OPS | OTHER_KINDS


def roundtrip(text: str) -> tile.Function:
    """Parse `text`, check that it verifies and prints back identically."""
    fn = parse_function(text)
    tile.verify(fn)
    again = tile.print_function(fn)
    assert again == text, f"round trip changed the text:\n{text}\n---\n{again}"
    return fn


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def run_both(original: tile.Function, parsed: tile.Function, grid, args: list) -> None:
    """Interpret both functions on copies of `args`; every array must end bit-identical."""
    outs = []
    for fn in (original, parsed):
        copies = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
        interp.run(fn, grid, copies)
        outs.append([c for c in copies if isinstance(c, np.ndarray)])
    for i, (a, b) in enumerate(zip(*outs)):
        assert np.array_equal(bits(a), bits(b)), f"{original.name}: array {i} differs"


# --------------------------------------------------- every kernel of the backend test files


def _load(name: str):
    """A fresh copy of a backend test module (own kernels, so nothing is cached yet)."""
    spec = importlib.util.spec_from_file_location(
        f"_roundtrip_{name}", os.path.join(BACKEND_TESTS, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _param_sets(test) -> list[dict]:
    """Every combination of the test's `pytest.mark.parametrize` values."""
    axes = []
    for mark in getattr(test, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names, values = mark.args[0], mark.args[1]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        rows = []
        for v in values:
            v = v.values if hasattr(v, "values") and hasattr(v, "marks") else v
            rows.append(dict(zip(names, v if len(names) > 1 else (v,))))
        axes.append(rows)
    return [dict(kv for d in combo for kv in d.items()) for combo in itertools.product(*axes)]


class Recorder:
    """Hooks the compile pipeline (every stage's text) and the interpreter (every launch)."""

    def __init__(self, monkeypatch):
        from kdsl.runtime import cache

        self.stages: dict[str, dict[str, str]] = {}  # final text -> all stage texts
        self.checked: set[str] = set()
        self.texts = 0
        build_tile, run = cache.build_tile, interp.run

        def build_hook(*a, **k):
            fn, ir = build_tile(*a, **k)
            for text in ir.values():
                roundtrip(text)  # every stage of every kernel
                self.texts += 1
            self.stages[list(ir.values())[-1]] = dict(ir)
            return fn, ir

        def run_hook(fn, grid, args):
            text = tile.print_function(fn)
            if text in self.checked:  # one launch of each compiled kernel is enough
                return run(fn, grid, args)
            self.checked.add(text)
            saved = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
            run(fn, grid, args)
            arrays = [a for a in args if isinstance(a, np.ndarray)]
            # the parsed optimised function, and the parsed frontend output (no passes)
            for t in {text, self.stages.get(text, {}).get("tile", text)}:
                copies = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a
                          for a in saved]
                run(parse_function(t), grid, copies)
                got = [c for c in copies if isinstance(c, np.ndarray)]
                for i, (want, have) in enumerate(zip(arrays, got)):
                    assert np.array_equal(bits(want), bits(have)), \
                        f"{fn.name}: parsed IR gives other results in array {i}:\n{t}"

        monkeypatch.setattr(cache, "build_tile", build_hook)
        monkeypatch.setattr(interp, "run", run_hook)
        monkeypatch.setenv("KDSL_CACHE", "0")


@pytest.mark.parametrize("module", ["test_ops", "test_tutorials", "test_shapes", "test_random"])
def test_every_backend_test_kernel_roundtrips(monkeypatch, module):
    rec = Recorder(monkeypatch)
    mod = _load(module)
    calls = 0
    for name, test in vars(mod).items():
        if not name.startswith("test_") or not callable(test):
            continue
        sig = inspect.signature(test)
        for params in _param_sets(test):
            if set(sig.parameters) - set(params) != {"backend"}:
                continue  # needs another fixture
            try:
                test(backend="interp", **params)
            except pytest.skip.Exception:
                continue
            calls += 1
    assert calls >= 10
    assert len(rec.checked) >= 10 and rec.texts >= 4 * len(rec.checked)


@kd.jit
def masked_scale(x_ptr, out_ptr, n, alpha, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    v = kd.load(x_ptr + offs, mask=m, other=float("nan"))
    kd.store(out_ptr + offs, kd.where(v > 0, v * alpha, -v), mask=m)


@pytest.mark.parametrize("check", [False, True])
def test_compile_ir_stages_roundtrip(check):
    x = np.linspace(-2, 2, 100).astype(np.float32)
    out = np.zeros_like(x)
    ck = masked_scale.compile(x, out, x.size, 1.5, BLOCK=32, backend="interp", check=check)
    texts = [t for t in ck.ir.values() if t.startswith("func @")]
    assert len(texts) >= 5  # tile, each pass, and the interp backend's source
    for text in texts:
        roundtrip(text)
    if check:
        assert "ptr_offset" in texts[-1]


# ------------------------------------------------------------- hand-built IR, every op kind


CONSTEXPRS = {
    "BLOCK": 8, "NEG": -3, "BIG": 2**70, "F": -1.5, "TINY": 1e-300, "NZ": -0.0,
    "INF": float("-inf"), "NAN": float("nan"), "FLAG": True, "OFF": None,
    "S": "it's \"quoted\" # {x}: line 3\n", "DT": T.bfloat16, "PT": PointerType(T.int8),
    "SHAPE": (16, 4), "ONE": (1,), "EMPTY": (), "NESTED": ((1, 2.5), [3, -4]),
    "NP": np.float32(0.1), "NPI": np.int64(-7),
}

NEG_NAN = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000000))[0]
PAYLOAD_NAN = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000123))[0]

B = 8
F32, I32 = TileType((B,), T.float32), TileType((B,), T.int32)


def every_op_kernel() -> tuple[tile.Function, int, int]:
    """A kernel using every op kind, storing each result to `o` (floats) or `oi` (ints)."""
    kb = KB("every_op")
    x, xi = kb.param("x", T.float32, True), kb.param("xi", T.int32, True)
    o, oi = kb.param("o", T.float32, True), kb.param("oi", T.int32, True)
    n = kb.param("n", T.int32)
    for k, v in CONSTEXPRS.items():
        kb.fn.params.append(tile.Param(k, None, None, v))
    slots = {"f": 0, "i": 0}

    def out(v: tile.Value) -> None:
        elem = v.type.elem
        kind = "f" if elem.is_float else "i"
        if v.type.is_scalar:
            v = kb.splat(v, (B,))
        if elem not in (T.float32, T.int32):
            v = kb.op("cast", v, type=TileType((B,), T.float32 if kind == "f" else T.int32))
        base = o if kind == "f" else oi
        off = kb.op("add", kb.iota(B), kb.const(slots[kind] * B, T.int32, (B,)))
        kb.op("store", kb.ptrs(base, off), v)
        slots[kind] += 1

    pid = kb.op("program_id", type=TileType((), T.int32), attrs={"axis": 0})
    nprog = kb.op("num_programs", type=pid.type, attrs={"axis": 1})
    offs = kb.op("add", kb.splat(kb.op("mul", pid, kb.const(B, T.int32)), (B,)),
                 kb.iota(B, start=0))
    out(kb.op("add", offs, kb.splat(nprog, (B,))))
    out(kb.iota(B, start=-5))
    xv = kb.op("load", kb.ptrs(x, offs))
    iv = kb.op("load", kb.ptrs(xi, offs), attrs={"volatile": True})
    mask = kb.op("lt", offs, kb.splat(n, (B,)))
    xm = kb.op("load", kb.ptrs(x, offs), mask, kb.const(float("-inf"), T.float32, (B,)))
    out(xm)
    yv = kb.op("add", xv, kb.const(0.5, T.float32, (B,)))
    for k in sorted(tile.BINARY_OPS - {"and", "or", "xor", "shl", "shr"}
                    - tile.FLOAT_INT_BINARY):
        out(kb.op(k, xv, yv))
        if k not in tile.FLOAT_BINARY:
            out(kb.op(k, iv, kb.op("add", iv, kb.const(3, T.int32, (B,)))))
    for k in sorted(tile.FLOAT_INT_BINARY):
        out(kb.op(k, xv, kb.op("and", iv, kb.const(7, T.int32, (B,))), type=xv.type))
    for k in ("and", "or", "xor", "shl", "shr"):
        out(kb.op(k, iv, kb.const(3, T.int32, (B,))))
    for k in sorted(tile.COMPARE_OPS):
        out(kb.op(k, xv, kb.const(0.0, T.float32, (B,))))
    for k in sorted(tile.UNARY_OPS - {"not"} - tile.INT_ONLY_UNARY):
        out(kb.op(k, xv))
    for k in sorted(tile.INT_ONLY_UNARY):
        out(kb.op(k, iv))
    out(kb.op("not", iv))
    out(kb.op("neg", iv))
    out(kb.op("fma", xv, yv, xm))
    out(kb.op("where", mask, xv, yv))
    out(kb.op("cast", xv, type=I32))
    out(kb.op("cast", xv, type=TileType((B,), T.float16)))
    out(kb.op("bitcast", xv, type=I32))
    out(kb.op("ptr_offset", kb.ptrs(x, offs), kb.splat(x, (B,)), type=TileType((B,), T.int64)))
    # pointers and addresses (differences of addresses: the arrays move between runs), fp8
    i64 = TileType((B,), T.int64)
    addr = kb.op("ptr_to_int", kb.ptrs(x, offs), type=i64)
    raw = kb.op("int_to_ptr", addr, type=TileType((B,), PointerType(T.float32)))
    out(kb.op("sub", kb.op("ptr_to_int", raw, type=i64),
              kb.op("ptr_to_int", kb.splat(x, (B,)), type=i64)))
    out(kb.op("load", raw))
    out(kb.op("load", kb.op("bitcast", kb.ptrs(x, offs), type=TileType((B,), PointerType(
        T.int32)))))
    out(kb.op("cast", xv, type=TileType((B,), T.float8e4nv)))
    out(kb.const(1e9, T.float8e5, (B,)))
    # special float and integer constants
    for v in (float("inf"), float("-inf"), float("nan"), NEG_NAN, PAYLOAD_NAN, -0.0, 1e-05,
              3.4e38, 0.1):
        out(kb.op("bitcast", kb.const(v, T.float32, (B,)), type=I32))
    out(kb.const(1e300, T.float64, (B,)))
    out(kb.const(4294967295, T.uint32, (B,)))
    out(kb.const(-2**63, T.int64, (B,)))
    out(kb.const(True, T.int1, (B,)))
    # shapes, dot, reductions, hints
    m2 = kb.op("reshape", xv, type=TileType((2, 4), T.float32))
    t2 = kb.op("trans", m2, type=TileType((4, 2), T.float32), attrs={"perm": (1, 0)})
    acc = kb.const(1.0, T.float32, (2, 2))
    d = kb.op("dot", m2, t2, acc, type=acc.type, attrs={"precision": "ieee"})
    row = kb.op("reshape", kb.op("reduce", d, type=TileType((2,), T.float32),
                                 attrs={"op": "sum", "axis": 0}),
                type=TileType((1, 2), T.float32))
    wide = kb.op("broadcast", row, type=TileType((4, 2), T.float32))
    out(kb.op("reshape", wide, type=F32))
    for r in sorted(tile.REDUCE_OPS):
        rt = T.int32 if r.startswith("arg") else T.float32
        out(kb.op("reduce", xv, type=TileType((), rt), attrs={"op": r, "axis": 0}))
    for sk in sorted(tile.SCAN_OPS):
        out(kb.op("scan", xv, attrs={"op": sk, "axis": 0, "reverse": sk == "prod"}))
    # combine regions over two operands: a (value, index) scan and reduce
    S32, SI = TileType((), T.float32), TileType((), T.int32)
    for kind, types in (("scan", [F32, I32]), ("reduce", [S32, SI])):
        attrs = {"op": "custom", "axis": 0} | ({"reverse": True} if kind == "scan" else {})
        combo = tile.Op(kind, [xv, iv], types, attrs, [tile.Block()], tile.Loc("kern.py", 93))
        kb.blocks[-1].append(combo)
        reg = combo.regions[0]
        a0, a1, b0, b1 = (reg.add_arg(t, nm) for t, nm in
                          ((S32, "v"), (SI, "i"), (S32, "v"), (SI, "i")))
        kb.blocks.append(reg)
        take = kb.op("gt", a0, b0)
        kb.op("yield", kb.op("where", take, a0, b0), kb.op("where", take, a1, b1))
        kb.blocks.pop()
        for r in combo.results:
            out(r)
    out(kb.op("hint", offs, attrs={"multiple_of": 8}))
    out(kb.op("hint", offs, attrs={"max_contiguous": (8,), "multiple_of": (4, 2)}))
    # odd attribute values on an op that ignores them
    out(kb.op("splat", kb.const(2.0, T.float32), type=F32,
              attrs={"note": CONSTEXPRS["S"], "dt": T.float16, "p": PointerType(T.int8),
                     "none": None, "flag": False, "empty": (), "one": (1,),
                     "nested": CONSTEXPRS["NESTED"], "np": np.float32(1.5),
                     "t": TileType((2, 3), PointerType(T.float16)), "big": -2**80}))
    old = kb.op("atomic_rmw", kb.ptrs(oi, kb.iota(B)), iv, mask,
                attrs={"op": "max", "sem": "relaxed", "scope": "cta"})
    out(old)
    out(kb.op("atomic_cas", kb.ptrs(oi, kb.iota(B)), iv, old,
              attrs={"sem": "acquire", "scope": "sys"}))
    kb.op("barrier")
    kb.op("print", iv, old, attrs={"prefix": " x {y} %d: ", "hex": True})
    kb.op("print", attrs={"prefix": " hello", "hex": False})
    kb.op("assert", kb.op("or", mask, kb.op("not", mask)), attrs={"msg": "it's \"odd\""})
    kb.op("breakpoint", iv, attrs={"names": ("iv",), "consts": (("S", 3), ("w", "x"))})
    # control flow: for with a carried tile, while, if with results
    zero, one = kb.const(0, T.int32), kb.const(1, T.int32)
    loop = tile.Op("for", [zero, n, one, xv], [F32], regions=[tile.Block()],
                   loc=tile.Loc("kern.py", 90))
    kb.blocks[-1].append(loop)
    body = loop.regions[0]
    i = body.add_arg(TileType((), T.int32), "i")
    carried = body.add_arg(F32, "acc")
    kb.blocks.append(body)
    step = kb.op("add", carried, kb.splat(kb.op("cast", i, type=TileType((), T.float32)), (B,)))
    kb.op("yield", step)
    kb.blocks.pop()
    out(loop.result)
    w = tile.Op("while", [zero], [TileType((), T.int32)], regions=[tile.Block(), tile.Block()],
                loc=tile.Loc("kern.py", 91))
    kb.blocks[-1].append(w)
    cond, wbody = w.regions
    c_i = cond.add_arg(TileType((), T.int32), "i")
    kb.blocks.append(cond)
    kb.op("condition", kb.op("lt", c_i, n), c_i)
    kb.blocks[-1] = wbody
    b_i = wbody.add_arg(TileType((), T.int32), "i")
    kb.op("yield", kb.op("add", b_i, kb.const(2, T.int32)))
    kb.blocks.pop()
    out(w.result)
    branch = tile.Op("if", [kb.op("gt", n, kb.const(3, T.int32))], [F32],
                     regions=[tile.Block(), tile.Block()], loc=tile.Loc("kern.py", 92))
    kb.blocks[-1].append(branch)
    kb.blocks.append(branch.regions[0])
    kb.op("yield", kb.op("neg", xv))
    kb.blocks[-1] = branch.regions[1]
    kb.op("yield", xv, line=0)  # no location: no `# line` comment
    kb.blocks.pop()
    out(branch.result)
    return kb.done(), slots["f"], slots["i"]


def test_hand_built_ir_with_every_op_kind(monkeypatch):
    stops = []
    monkeypatch.setattr(sys, "breakpointhook", lambda: stops.append(1))
    fn, nf, ni = every_op_kernel()
    assert {op.kind for op in fn.walk()} == ALL_KINDS
    text = tile.print_function(fn)
    assert "-nan" in text and "nan(0x7ff8000000000123)" in text and "-0.0" in text
    parsed = roundtrip(text)
    assert [p.name for p in parsed.params] == [p.name for p in fn.params]
    for p, q in zip(fn.params, parsed.params):
        if p.is_constexpr:
            assert q.is_constexpr and type(q.constexpr) is type(p.constexpr)
            assert repr(q.constexpr) == repr(p.constexpr)
            if isinstance(p.constexpr, float):
                assert struct.pack("<d", q.constexpr) == struct.pack("<d", p.constexpr)
        else:
            assert q.type == p.type
    # attributes and locations come back with the same values (and NaN bits)
    for a, b in zip(fn.walk(), parsed.walk()):
        assert a.kind == b.kind and a.loc.line == b.loc.line
        assert [r.type for r in a.results] == [r.type for r in b.results]
        assert a.attrs.keys() == b.attrs.keys()
        for k, v in a.attrs.items():
            w = b.attrs[k]
            assert type(w) is type(v) and repr(w) == repr(v), (k, v, w)
            if isinstance(v, float):
                assert struct.pack("<d", v) == struct.pack("<d", w)
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, 2 * B).astype(np.float32)
    xi = rng.integers(-50, 50, 2 * B).astype(np.int32)
    for n in (2, 6):
        run_both(fn, parsed, (2, 1, 1),
                 [x, xi, np.zeros(nf * B, np.float32), np.zeros(max(ni, 1) * B, np.int32), n])


def test_locations_names_and_file():
    fn, _, _ = every_op_kernel()
    parsed = parse_function(tile.print_function(fn), file="kern.ir")
    lines = [op.loc.line for op in parsed.walk()]
    assert lines == [op.loc.line for op in fn.walk()] and 0 in lines and 90 in lines
    assert all(op.loc.file == "kern.ir" for op in parsed.walk() if op.loc.line)
    loop = next(op for op in parsed.walk() if op.kind == "for")
    assert [a.name for a in loop.regions[0].args] == ["i", "acc"]
    assert [p.value.name for p in parsed.runtime_params] == ["x", "xi", "o", "oi", "n"]


def test_stages_of_passes_roundtrip():
    from test_passes import matmul_tile_kernel, run_matmul_tile

    from kdsl.passes import run_tile_passes

    fn, stages = run_tile_passes(matmul_tile_kernel())
    for text in stages.values():
        parsed = roundtrip(text)
        np.testing.assert_array_equal(run_matmul_tile(parsed), run_matmul_tile(fn))


@pytest.mark.parametrize("text, want", [
    ("int32", TileType((), T.int32)),
    ("ptr<float16>", TileType((), PointerType(T.float16))),
    ("tile<16x8xfloat32>", TileType((16, 8), T.float32)),
    ("tile<4x1x2xptr<bfloat16>>", TileType((4, 1, 2), PointerType(T.bfloat16))),
])
def test_parse_type(text, want):
    assert parse_type(text) == want and str(want) == text


@pytest.mark.parametrize("value", [
    0, -7, 2**100, 1.5, -0.0, 1e-05, 1e300, float("inf"), float("-inf"), float("nan"), NEG_NAN,
    PAYLOAD_NAN, True, False, None, "", "a'b\"c\\\n\t\x00é", (), (1,), (1, (2, "x")), [1, 2.0],
    T.int1, T.uint64, PointerType(T.float32), np.float32(-2.5), np.int8(-3), np.bool_(True),
    np.float64("nan"),
])
def test_parse_value_inverts_format_attr(value):
    text = tile.format_attr(value)
    got = parse_value(text)
    assert type(got) is type(value) and tile.format_attr(got) == text
    if isinstance(value, float):
        assert struct.pack("<d", got) == struct.pack("<d", value)
    if isinstance(value, float) and not math.isnan(value):
        assert got == value


def test_format_attr_is_repr_except_signed_nans():
    for v in (1, 1.5, float("nan"), float("-inf"), -0.0, "s", (1,), T.float32, None):
        assert tile.format_attr(v) == repr(v)
    assert tile.format_attr(NEG_NAN) == "-nan"
    assert tile.format_attr((NEG_NAN, 1)) == "(-nan, 1)"


# ------------------------------------------------------------------------------- errors

GOOD = """\
func @k(%x: ptr<float32>, %n: int32, B: constexpr = 4) {
  %2 = iota() {axis=0, start=0} : tile<4xint32>  # line 3
  %3 = splat(%x) : tile<4xptr<float32>>  # line 3
  %4 = addptr(%3, %2) : tile<4xptr<float32>>  # line 3
  %5 = load(%4) : tile<4xfloat32>  # line 4
  %6 = const() {value=0} : int32
  %7 = const() {value=1} : int32
  %8 = for(%6, %n, %7, %5) : tile<4xfloat32> {  # line 5
    ^region0(%i: int32, %acc: tile<4xfloat32>):
      %acc.12 = add(%acc, %acc) : tile<4xfloat32>  # line 6
      yield(%acc.12)  # line 5
  }
  store(%4, %8)  # line 7
}"""


def test_good_text_roundtrips():
    fn = roundtrip(GOOD)
    x = np.arange(4, dtype=np.float32)
    interp.run(fn, (1,), [x, 3])
    np.testing.assert_array_equal(x, np.arange(4) * 8.0)


def _edit(line: int, old: str, new: str) -> str:
    lines = GOOD.split("\n")
    assert old in lines[line - 1], (old, lines[line - 1])
    lines[line - 1] = lines[line - 1].replace(old, new)
    return "\n".join(lines)


@pytest.mark.parametrize("text, line, words", [
    ("", 1, "empty"),
    ("\n\n  \n", 1, "empty"),
    (_edit(1, "func @k", "fn @k"), 1, "expected 'func'"),
    (_edit(1, "%n: int32", "%n: int33"), 1, "unknown dtype 'int33'"),
    (_edit(1, "B: constexpr = 4", "B: constexpr = @"), 1, "expected a value"),
    (_edit(1, "B: constexpr = 4", "B: constexpr = (4)"), 1, "one-element tuple"),
    (_edit(2, "iota()", "frob()"), 2, "unknown op kind 'frob'"),
    (_edit(2, "start=0}", "start='0}"), 2, "expected a value"),
    (_edit(2, "{axis=0, start=0}", "{axis=0, axis=1}"), 2, "'axis' is given twice"),
    (_edit(3, "splat(%x)", "splat(%y)"), 3, "undefined value %y"),
    (_edit(3, "splat(%x)", "splat(x)"), 3, "expected a value (%name)"),
    (_edit(4, "tile<4xptr<float32>>", "tile<4xptr<float32>"), 4, "expected '>'"),
    (_edit(4, "tile<4xptr<float32>>", "tile<8xptr<float32>>"), 4, "addptr shapes"),
    (_edit(5, "%5 = ", "%2 = "), 5, "%2 is defined twice"),
    (_edit(5, "# line 4", "# a comment"), 5, "'# line N'"),
    (_edit(5, " : tile<4xfloat32>", ""), 5, "1 result(s) but gives 0 type(s)"),
    (_edit(6, ": int32", ": tile<4xint32>"), 8, "scalar bounds"),
    (_edit(9, "^region0", "^region1"), 9, "expected ^region0"),
    (_edit(10, "add(%acc, %acc)", "add(%acc, %n)"), 10, "add"),
    (_edit(11, "yield(%acc.12)", "yield(%acc.12)\n      yield(%acc.12)"), 12, "terminator"),
    (_edit(13, "%8)", "%acc.12)"), 13, "undefined value %acc.12"),
    (_edit(12, "  }", "  "), 13, "after the terminator yield"),
    (GOOD[:GOOD.rindex("}")], 14, "unexpected end"),
    (GOOD + "\n}", 15, "after the end"),
])
def test_malformed_text_names_the_line(text, line, words):
    with pytest.raises(ValueError, match=r"^line \d+: ") as info:
        parse_function(text)
    assert isinstance(info.value, ParseError)
    assert info.value.line == line, str(info.value)
    assert words in str(info.value), str(info.value)


def test_verify_false_reads_ir_the_verifier_rejects():
    text = _edit(2, "iota()", "frob()")
    fn = parse_function(text, verify=False)
    assert fn.body.ops[0].kind == "frob"
    assert tile.print_function(fn) == text
    with pytest.raises(tile.VerifyError):
        tile.verify(fn)
