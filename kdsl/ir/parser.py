"""Parser of the Tile IR text format: `parse_function(print_function(fn))` rebuilds `fn`.

The grammar is exactly what `kdsl.ir.tile.print_function` writes, one construct per line
(indentation and blank lines are not significant):

    func @NAME(PARAM, ...) {                      PARAM: %value: TYPE | NAME: constexpr = VALUE
      [%r, ... =] KIND(%operand, ...) [{key=VALUE, ...}] [: TYPE, ...] [{]  [# line N]
        ^regionI(%arg: TYPE, ...):                 (inside an op line ending in `{`)
          ...ops of region I...
      }                                            (closes the op's regions)
    }

    TYPE  = DTYPE | ptr<DTYPE> | tile<D0xD1x...xELEM>
    VALUE = int | float (inf, -inf, nan, -nan, nan(0xBITS), -0.0, 1e-05) | 'string' | True
            | False | None | (VALUE, ...) | [VALUE, ...] | TYPE (a dtype attribute)
            | np.float32(1.5) and other NumPy scalars

Every op is verified as soon as its regions are read (`tile._verify_op`), and any error -- bad
syntax, an undefined or redefined value, a type that does not fit the op -- raises `ParseError`
(a `ValueError`) whose message starts with `line N:` (the line in the text, 1-based).

Value names are kept: `%acc` becomes a value named `acc`; a number (`%12`) is an unnamed value;
`%acc.23` -- the printer's spelling of a second value named `acc` -- is named `acc` again, so
printing the parsed function gives back the same text.
"""

from __future__ import annotations

import ast
import re
import struct
from typing import Any

import numpy as np

from . import tile
from .types import ALL_DTYPES, DType, PointerType, TileType

__all__ = ["ParseError", "parse_function", "parse_type", "parse_value"]

_DTYPES: dict[str, DType] = {d.name: d for d in ALL_DTYPES}
_KEYWORDS: dict[str, Any] = {"True": True, "False": False, "None": None,
                             "inf": float("inf"), "nan": float("nan")}

# Tokens, matched at the cursor (after skipping spaces).
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VALUE_NAME = re.compile(r"%([A-Za-z_][A-Za-z0-9_.]*|[0-9]+)")
_FUNC_NAME = re.compile(r"@([^\s(]+)")
_NUMBER = re.compile(r"[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][-+]?[0-9]+)?")
_STRING = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")
_NAN_BITS = re.compile(r"nan\(0x([0-9a-fA-F]{1,16})\)")
_NP_SCALAR = re.compile(r"np\.(int|uint|float)(8|16|32|64)\(")
_NP_BOOL = re.compile(r"np\.(True|False)_")
_TILE = re.compile(r"tile<((?:[0-9]+x)+)")
_REGION = re.compile(r"\^region([0-9]+)")
_LOC = re.compile(r"#\s*line\s+([0-9]+)\s*$")


class ParseError(ValueError):
    """Malformed Tile IR text. `line` is the 1-based line of the text, `msg` the reason."""

    def __init__(self, msg: str, line: int):
        super().__init__(f"line {line}: {msg}")
        self.line = line
        self.msg = msg


# ------------------------------------------------------------------------------- one line


class _Cursor:
    """A position in one line of text, with the line number for errors."""

    def __init__(self, text: str, line: int):
        self.text = text
        self.line = line
        self.pos = 0

    def error(self, msg: str) -> ParseError:
        near = self.text[self.pos:self.pos + 30]
        return ParseError(f"{msg} (at {near!r})" if near else f"{msg} (at end of line)", self.line)

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def peek(self, s: str) -> bool:
        self.skip()
        return self.text.startswith(s, self.pos)

    def eat(self, s: str) -> bool:
        if self.peek(s):
            self.pos += len(s)
            return True
        return False

    def expect(self, s: str) -> None:
        if not self.eat(s):
            raise self.error(f"expected {s!r}")

    def match(self, rx: re.Pattern) -> re.Match | None:
        self.skip()
        m = rx.match(self.text, self.pos)
        if m:
            self.pos = m.end()
        return m

    def need(self, rx: re.Pattern, what: str) -> re.Match:
        m = self.match(rx)
        if m is None:
            raise self.error(f"expected {what}")
        return m

    def at_end(self) -> bool:
        self.skip()
        return self.pos == len(self.text) or self.text[self.pos] == "#"

    def finish(self) -> int:
        """Consume the rest of the line: nothing, or the location comment `# line N`;
        returns N (0 when absent)."""
        self.skip()
        if self.pos == len(self.text):
            return 0
        m = _LOC.match(self.text, self.pos)
        if m is None:
            raise self.error("expected the end of the line or '# line N'")
        self.pos = len(self.text)
        return int(m.group(1))

    # -- types and values ----------------------------------------------------------------

    def dtype(self) -> DType:
        m = self.need(_IDENT, "a dtype")
        if m.group(0) not in _DTYPES:
            self.pos = m.start()
            raise self.error(f"unknown dtype {m.group(0)!r}")
        return _DTYPES[m.group(0)]

    def elem(self) -> DType | PointerType:
        if self.eat("ptr<"):
            d = self.dtype()
            self.expect(">")
            return PointerType(d)
        return self.dtype()

    def type(self) -> TileType:
        m = self.match(_TILE)
        if m is None:
            return TileType((), self.elem())
        shape = tuple(int(d) for d in m.group(1)[:-1].split("x"))
        e = self.elem()
        self.expect(">")
        return TileType(shape, e)

    def value(self) -> Any:
        """One attribute / constexpr value (see the module docstring)."""
        self.skip()
        start = self.pos
        if self.eat("("):
            items, trailing = self._sequence(")")
            if len(items) == 1 and not trailing:  # Python writes a 1-tuple as (x,)
                self.pos = start
                raise self.error("a one-element tuple is written (x,)")
            return tuple(items)
        if self.eat("["):
            return self._sequence("]")[0]
        if m := self.match(_STRING):
            return ast.literal_eval(m.group(0))
        if m := self.match(_NAN_BITS):
            return struct.unpack("<d", struct.pack("<Q", int(m.group(1), 16)))[0]
        if self.eat("-nan"):
            return -float("nan")  # NaN with the sign bit set
        if self.eat("-inf"):
            return float("-inf")
        if m := self.match(_NP_SCALAR):
            inner = self.value()
            self.expect(")")
            try:
                return np.dtype(m.group(1) + m.group(2)).type(inner)
            except (TypeError, ValueError, OverflowError) as e:
                raise ParseError(f"bad NumPy scalar: {e}", self.line) from None
        if m := self.match(_NP_BOOL):
            return np.bool_(m.group(1) == "True")
        if m := self.match(_NUMBER):
            s = m.group(0)
            return float(s) if any(c in s for c in ".eE") else int(s)
        m = self.match(_IDENT)
        if m is not None:
            word = m.group(0)
            if word in _KEYWORDS:
                return _KEYWORDS[word]
            self.pos = m.start()
            if word in _DTYPES or word == "ptr":
                return self.elem()
            if word == "tile":
                return self.type()
        raise self.error("expected a value (number, string, tuple, True/False/None or dtype)")

    def _sequence(self, close: str) -> tuple[list[Any], bool]:
        """Items up to `close` (already past the opener); also whether a trailing comma ended
        the list."""
        items: list[Any] = []
        trailing = False
        while not self.eat(close):
            items.append(self.value())
            trailing = self.eat(",")
            if not trailing:
                self.expect(close)
                break
        return items, trailing


def parse_type(text: str) -> TileType:
    """A `TileType` from its printed form: `int32`, `ptr<float16>`, `tile<16x8xfloat32>`."""
    c = _Cursor(text, 1)
    t = c.type()
    if not c.at_end():
        raise c.error("unexpected text after the type")
    return t


def parse_value(text: str) -> Any:
    """An attribute or constexpr value from its printed form (`tile.format_attr`)."""
    c = _Cursor(text, 1)
    v = c.value()
    if not c.at_end():
        raise c.error("unexpected text after the value")
    return v


# --------------------------------------------------------------------------- whole function


class _Parser:
    def __init__(self, text: str, file: str, verify: bool):
        # (line number, text) of every non-blank line
        self.lines = [(i + 1, ln) for i, ln in enumerate(text.splitlines()) if ln.strip()]
        self.i = 0
        self.file = file
        self.verify = verify
        self.printed: set[str] = set()  # every %name met so far, in text order

    # -- lines ---------------------------------------------------------------------------

    def cursor(self) -> _Cursor:
        if self.i >= len(self.lines):
            last = self.lines[-1][0] if self.lines else 0
            raise ParseError("unexpected end of text (missing '}'?)", last + 1 if last else 1)
        line, text = self.lines[self.i]
        return _Cursor(text, line)

    def next_starts(self, s: str) -> bool:
        return self.i < len(self.lines) and self.lines[self.i][1].lstrip().startswith(s)

    # -- names ---------------------------------------------------------------------------

    def define(self, c: _Cursor, text_name: str, v: tile.Value, scope: dict[str, tile.Value],
               all_names: set[str]) -> None:
        if text_name in all_names:
            raise c.error(f"%{text_name} is defined twice")
        base, dot, suffix = text_name.rpartition(".")
        if text_name.isdigit():
            v.name = ""  # the printer numbers unnamed values in order of definition
        elif dot and suffix.isdigit() and "%" + base in self.printed:
            v.name = base  # the printer's `%acc.N` for a second value named `acc`
        else:
            v.name = text_name
        self.printed.add("%" + text_name)
        all_names.add(text_name)
        scope[text_name] = v

    def use(self, c: _Cursor, scope: dict[str, tile.Value]) -> tile.Value:
        m = c.need(_VALUE_NAME, "a value (%name)")
        v = scope.get(m.group(1))
        if v is None:
            c.pos = m.start()
            raise c.error(f"undefined value %{m.group(1)} (not defined above in an "
                          f"enclosing block)")
        return v

    # -- structure -----------------------------------------------------------------------

    def function(self) -> tile.Function:
        c = self.cursor()
        c.expect("func")
        name = c.need(_FUNC_NAME, "@name").group(1)
        c.expect("(")
        body = tile.Block()
        params: list[tile.Param] = []
        scope: dict[str, tile.Value] = {}
        self.all_names: set[str] = set()
        constexprs: set[str] = set()
        while not c.eat(")"):
            if c.peek("%"):
                vname = c.need(_VALUE_NAME, "a parameter").group(1)
                c.expect(":")
                v = body.add_arg(c.type())
                self.define(c, vname, v, scope, self.all_names)
                params.append(tile.Param(v.name or f"arg{len(params)}", v.type, v))
            else:
                pname = c.need(_IDENT, "a parameter (%value: type or NAME: constexpr = v)")
                if pname.group(0) in constexprs:
                    raise c.error(f"constexpr {pname.group(0)} is given twice")
                constexprs.add(pname.group(0))
                c.expect(":")
                c.expect("constexpr")
                c.expect("=")
                params.append(tile.Param(pname.group(0), None, None, c.value()))
            if not c.eat(","):
                c.expect(")")
                break
        c.expect("{")
        c.finish()
        self.i += 1
        fn = tile.Function(name, params, body, tile.Loc(self.file, 0), src_file=self.file)
        self.block(body, scope)
        c = self.cursor()
        c.expect("}")
        c.finish()
        self.i += 1
        if self.i < len(self.lines):
            raise ParseError("text after the end of the function", self.lines[self.i][0])
        return fn

    def block(self, block: tile.Block, scope: dict[str, tile.Value]) -> None:
        """Ops up to (not including) a line starting with '}' or '^region'."""
        while not (self.next_starts("}") or self.next_starts("^")):
            line = self.cursor().line
            if block.terminator is not None:
                raise ParseError(f"op after the terminator {block.ops[-1].kind}", line)
            self.op(block, scope)

    def op(self, block: tile.Block, scope: dict[str, tile.Value]) -> None:
        c = self.cursor()
        line = c.line
        results: list[str] = []
        if c.peek("%"):
            while True:
                results.append(c.need(_VALUE_NAME, "a result name").group(1))
                if not c.eat(","):
                    break
            c.expect("=")
        kind = c.need(_IDENT, "an op kind").group(0)
        c.expect("(")
        operands: list[tile.Value] = []
        while not c.eat(")"):
            operands.append(self.use(c, scope))
            if not c.eat(","):
                c.expect(")")
                break
        attrs: dict[str, Any] = {}
        c.skip()
        # `{` opens attributes when a `key=` follows, else the op's regions
        if re.match(r"\{\s*[A-Za-z_][A-Za-z0-9_]*\s*=", c.text[c.pos:]):
            c.expect("{")
            while True:
                key = c.need(_IDENT, "an attribute name").group(0)
                if key in attrs:
                    raise c.error(f"attribute {key!r} is given twice")
                c.expect("=")
                attrs[key] = c.value()
                if not c.eat(","):
                    break
            c.expect("}")
        types: list[TileType] = []
        if c.eat(":"):
            types.append(c.type())
            while c.eat(","):
                types.append(c.type())
        has_regions = c.eat("{")
        loc_line = c.finish()
        if len(types) != len(results):
            raise ParseError(f"{kind} names {len(results)} result(s) but gives "
                             f"{len(types)} type(s)", line)
        loc = tile.Loc(self.file, loc_line) if loc_line else tile.UNKNOWN_LOC
        op = tile.Op(kind, operands, types, attrs, [], loc)
        for name, r in zip(results, op.results):
            # numbered in text order (results before the regions), as the printer does
            self.define(c, name, r, {}, self.all_names)
        self.i += 1
        if has_regions:
            self.regions(op, scope)
        if self.verify:
            self.check(op, line)
        block.append(op)
        for name, r in zip(results, op.results):
            scope[name] = r  # visible after the op, not inside its own regions

    def regions(self, op: tile.Op, scope: dict[str, tile.Value]) -> None:
        while self.next_starts("^"):
            c = self.cursor()
            m = c.need(_REGION, "^regionN")
            if int(m.group(1)) != len(op.regions):
                raise c.error(f"expected ^region{len(op.regions)}")
            c.expect("(")
            region = tile.Block()
            inner = dict(scope)
            while not c.eat(")"):
                vname = c.need(_VALUE_NAME, "a block argument").group(1)
                c.expect(":")
                self.define(c, vname, region.add_arg(c.type()), inner, self.all_names)
                if not c.eat(","):
                    c.expect(")")
                    break
            c.expect(":")
            c.finish()
            self.i += 1
            self.block(region, inner)
            op.regions.append(region)
        c = self.cursor()
        if not op.regions:
            raise c.error(f"{op.kind}: expected ^region0 after '{{'")
        c.expect("}")
        c.finish()
        self.i += 1

    def check(self, op: tile.Op, line: int) -> None:
        if op.kind in tile.TERMINATORS and op.results:
            raise ParseError(f"{op.kind} has no results", line)
        try:
            # the verifier's per-op rules; operands are in scope by construction here
            tile._verify_op(op)
        except tile.VerifyError as e:
            raise ParseError(str(e), line) from None
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
            # a rule reading an attribute, operand, result or region that is not there
            raise ParseError(f"malformed {op.kind}: {type(e).__name__}: {e}", line) from None


def parse_function(text: str, *, file: str = "<text>", verify: bool = True) -> tile.Function:
    """The function printed as `text` by `tile.print_function`. Locations `# line N` become
    `Loc(file, N)`. With `verify` (the default) each op is checked as it is read and the result
    passes `tile.verify`; errors raise `ParseError` (a ValueError) naming the text's line."""
    p = _Parser(text, file, verify)
    if not p.lines:
        raise ParseError("empty text: expected 'func @name(...) {'", 1)
    fn = p.function()
    if verify:
        try:
            tile.verify(fn)
        except tile.VerifyError as e:  # pragma: no cover - the per-op checks catch it first
            raise ParseError(str(e), p.lines[0][0]) from None
    return fn
