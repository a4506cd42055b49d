"""Checked mode: the Tile IR pass that bounds-checks every memory access and verifies hints.

`insert_checks(fn)` runs first in the tile pipeline when `fn.options.check` is set (a launch
with `check=True` or `KDSL_CHECK=1`); an unchecked specialisation never sees it and pays nothing.
It appends hidden runtime parameters after the user's ones:

  kd_extent_<p>  int64        one per pointer parameter p: the end (exclusive) of the element
                              offsets from p that its array's memory allows
  kd_lower_<p>   int64        and their start: 0 for an array, <= 0 for a view with negative
                              strides (its memory span starts before its first element)
  kd_errors      ptr<int64>   the error record (ERROR_WORDS words, zeroed by the runtime)

and, before every `load`/`store`/`atomic_rmw`/`atomic_cas` whose pointer derives from exactly one
pointer parameter p (through addptr, shape ops, casts, `where`, loop carries and branch results):

  off  = ptr_offset(ptr, p)                  # int64 element offset from p's start
  ok   = off >= kd_lower_<p> & off < kd_extent_<p>
  bad  = mask & !ok                          # masked-off lanes are never reported
  mask = mask & ok                           # so nothing is read or written out of range
  if any(bad): if atomic_add(kd_errors[0], 1) == 0: kd_errors[1:6] = site, pid0..2, off

The first violating lane (row-major) of the first program to claim the flag is recorded;
`kdsl/runtime/checked.py` reads the record after the launch and raises `OutOfBoundsError`.
`multiple_of`/`max_contiguous` hints on integer values are verified the same way (a broken
promise is a site of kind "multiple_of"/"max_contiguous"); the record's value is the offending
value (multiple_of) or the flat index of the first non-contiguous run (max_contiguous).

Debug mode (`fn.options.debug`) reuses the record for `assert` ops (`kd.device_assert`, `assert`
on a runtime value): each becomes `if any(!cond)` -> record (site of kind "assert", value = flat
index of the first failing lane), and the runtime raises `kd.DeviceAssertionError`.  Without
debug the pass deletes `assert` ops (DCE then removes their conditions), so a kernel pays
nothing for them; only a checked launch adds the `kd_extent_<p>` parameters.

Hint semantics checked (Triton's): with `c = max_contiguous` of the value (1 when absent),
elements come in runs of `c` consecutive integers along the last dimension, and the first
element of each run is a multiple of `multiple_of`.  Hints given per dimension (tuples) are not
checked.  A pointer whose origin is ambiguous (a `where` between two parameters) is not checked
by this pass; the `interp` backend still refuses such an access.

Checked mode also finds races between program instances: every checked plain `load`/`store`
of an argument the kernel stores to is recorded in a hidden shadow array `kd_shadow_<p>`
(after `kd_errors`), and the runtime reports two programs storing one element, or one loading
what another stores, as `kd.RaceError` (kdsl/passes/races.py).

A pointer made from an integer (`int_to_ptr`) has no array to be bounded by: only a null
pointer (plus an offset: an address below `NULL_PAGES`, never mapped) is caught, as site kind
"null", reported and masked off (checked mode's own masking of an out-of-bounds load from a
pointer table yields 0); any other address is the program's responsibility.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kdsl.ir import tile
from kdsl.ir.types import DType, PointerType, TileType, int1, int32, int64, uint64

from .provenance import pointer_roots
from .races import RaceRecorder

ERROR_PARAM = "kd_errors"
#: addresses below this are a null pointer plus an offset (Linux's default mmap_min_addr)
NULL_PAGES = 1 << 16
EXTENT_PREFIX = "kd_extent_"
LOWER_PREFIX = "kd_lower_"
#: words of the error record: flag (violations seen), site, pid0, pid1, pid2, value
ERROR_WORDS = 8
ACCESS_KINDS = ("load", "store", "atomic_rmw", "atomic_cas")
#: index of the mask operand of each access kind
_MASK_AT = {"load": 1, "store": 2, "atomic_rmw": 2, "atomic_cas": 3}


@dataclass(frozen=True)
class Site:
    """One checked place: an access ("load", "store", "atomic_add", "atomic_cas", ...: the
    builtin's name) through argument `arg`, a hint ("multiple_of", "max_contiguous") with its
    promised `amount`, or a device assertion ("assert") with its `msg` and condition `shape`."""

    kind: str
    file: str
    line: int
    text: str
    arg: str | None = None
    amount: int | None = None
    msg: str | None = None
    shape: tuple[int, ...] | None = None


# ------------------------------------------------------------------------------- building


class _Emit:
    """Appends new ops (all at one source location) to a list."""

    def __init__(self, ops: list[tile.Op], loc: tile.Loc):
        self.ops = ops
        self.loc = loc

    def op(self, kind: str, operands: list[tile.Value], t: TileType | None = None,
           regions: list[tile.Block] | None = None, **attrs: Any) -> tile.Value | None:
        o = tile.Op(kind, operands, [t] if t is not None else [], attrs, regions, self.loc)
        self.ops.append(o)
        return o.results[0] if o.results else None

    def const(self, value: Any, shape: tuple[int, ...], elem: DType) -> tile.Value:
        return self.op("const", [], TileType(shape, elem), value=value)

    def splat(self, x: tile.Value, shape: tuple[int, ...]) -> tile.Value:
        return x if not shape else self.op("splat", [x], TileType(shape, x.elem))

    def binary(self, kind: str, a: tile.Value, b: tile.Value) -> tile.Value:
        elem = int1 if kind in tile.COMPARE_OPS else a.elem
        return self.op(kind, [a, b], TileType(a.shape, elem))

    def flat(self, x: tile.Value) -> tile.Value:
        n = x.type.numel
        return x if x.shape == (n,) else self.op("reshape", [x], TileType((n,), x.elem))


class _Checker:
    def __init__(self, fn: tile.Function, bounds: bool = True):
        self.fn = fn
        self.roots = pointer_roots(fn)
        self.sites: list[Site] = []
        rparams = fn.runtime_params
        taken = {p.name for p in fn.params}

        def add(name: str, t: TileType) -> tile.Value:
            while name in taken:
                name = "_" + name
            taken.add(name)
            v = fn.body.add_arg(t, name)
            fn.params.append(tile.Param(name, t, value=v))
            return v

        self.params = rparams
        self.bounds = bounds
        self.extent_of: dict[int, tile.Value] = {}
        self.lower_of: dict[int, tile.Value] = {}
        for i, p in enumerate(rparams if bounds else ()):
            if p.type.is_ptr:  # in this order: the runtime appends (extent, lower) per pointer
                self.extent_of[i] = add(EXTENT_PREFIX + p.name, TileType((), int64))
                self.lower_of[i] = add(LOWER_PREFIX + p.name, TileType((), int64))
        self.errors = add(ERROR_PARAM, TileType((), PointerType(int64)))
        # races between programs: shadow arrays after the error record (races.py)
        self.races = RaceRecorder(fn, self.roots, rparams, add) if bounds else None
        self.hints = _hint_chains(fn)
        self.hints_done: set[int] = set()

    def site(self, op: tile.Op, kind: str, arg: str | None = None,
             amount: int | None = None, **extra: Any) -> int:
        loc = op.loc
        self.sites.append(Site(kind, loc.file, loc.line, loc.text.strip(), arg, amount, **extra))
        return len(self.sites) - 1

    # -- rewriting

    def block(self, block: tile.Block) -> None:
        out: list[tile.Op] = []
        for op in block.ops:
            for r in op.regions:
                self.block(r)
            if op.kind == "assert":
                self.assertion(op, out)
                continue
            if op.kind in ACCESS_KINDS and self.bounds:
                self.access(op, out)
            out.append(op)
            if op.kind == "hint" and self.bounds:
                self.hint(op, out)
        block.ops = out

    def access(self, op: tile.Op, out: list[tile.Op]) -> None:
        """Bound an access by the array its pointer came from.  Where control flow chose among
        several arrays (a runtime `if`, a loop carry), the check looks the pointer up at run
        time: the access is in bounds when it lies inside one of the arrays it may come from
        (as a memory sanitizer maps an address to its allocation)."""
        ptr = op.operands[0]
        roots = self.roots.get(ptr.id, frozenset())
        if not roots:
            self.null_check(op, out)
            return
        # a pointer bitcast to another pointee counts other elements: not bounded by offsets
        cands = [i for i in sorted(roots) if self.params[i].value.elem == ptr.elem]
        if not cands:
            return
        b = _Emit(out, op.loc)
        shape = ptr.shape
        ok = first = None
        lanes = []
        for i in cands:
            base = self.params[i].value
            off = b.op("ptr_offset", [ptr, b.splat(base, shape)], TileType(shape, int64))
            inside = b.binary("and", b.binary("ge", off, b.splat(self.lower_of[i], shape)),
                              b.binary("lt", off, b.splat(self.extent_of[i], shape)))
            ok = inside if ok is None else b.binary("or", ok, inside)
            first = off if first is None else first
            lanes.append((i, off, inside))
        kind = f"atomic_{op.attrs['op']}" if op.kind == "atomic_rmw" else op.kind
        arg = " or ".join(self.params[i].name for i in cands)
        at = _MASK_AT[op.kind]
        mask = op.operands[at] if len(op.operands) > at else None
        site = self.site(op, kind, arg)
        self.guard(op, b, ok, first, site)
        if self.races is not None and self.races.wants(op):
            self.races.record(b, op, lanes, mask, self.lower_of, self.extent_of, site)

    def null_check(self, op: tile.Op, out: list[tile.Op]) -> None:
        """A pointer made from an integer: report and mask off null addresses (below
        NULL_PAGES, compared as unsigned: a negative int64 is a high address)."""
        ptr = op.operands[0]
        b = _Emit(out, op.loc)
        shape = ptr.shape
        addr = b.op("ptr_to_int", [ptr], TileType(shape, uint64))
        ok = b.binary("ge", addr, b.const(NULL_PAGES, shape, uint64))
        addr = b.op("bitcast", [addr], TileType(shape, int64))
        self.guard(op, b, ok, addr, self.site(op, "null"))

    def guard(self, op: tile.Op, b: _Emit, ok: tile.Value, value: tile.Value,
              site: int) -> None:
        """Restrict `op` to the lanes where `ok`; record the first other lane under the mask."""
        ptr = op.operands[0]
        shape = ptr.shape
        at = _MASK_AT[op.kind]
        mask = op.operands[at] if len(op.operands) > at else None
        bad = b.op("not", [ok], ok.type)
        if mask is not None:
            bad = b.binary("and", mask, bad)
            op.operands[at] = b.binary("and", mask, ok)
        elif op.kind == "load":
            pointee = ptr.elem.pointee
            op.operands += [ok, b.const(False if pointee.is_bool else 0, shape, pointee)]
        else:
            op.operands.append(ok)
        self.record(b, bad, value, site)

    def assertion(self, op: tile.Op, out: list[tile.Op]) -> None:
        """An `assert` op becomes a record of its first failing lane (flat index)."""
        b = _Emit(out, op.loc)
        cond = op.operands[0]
        bad = b.op("not", [cond], cond.type)
        n = cond.type.numel
        if cond.shape:
            lane = b.op("iota", [], TileType((n,), int32), axis=0, start=0)
            value = b.op("cast", [lane], TileType((n,), int64))
        else:
            value = b.const(0, (), int64)
        self.record(b, bad, value, self.site(op, "assert", msg=op.attrs.get("msg", ""),
                                             shape=tuple(cond.shape)))

    def hint(self, op: tile.Op, out: list[tile.Op]) -> None:
        root = _hint_root(op.result)
        if root.id in self.hints_done or root.id not in self.hints:
            return
        self.hints_done.add(root.id)
        attrs = self.hints[root.id]
        x = root
        if not isinstance(x.elem, DType) or not x.elem.is_int or x.elem.is_bool:
            return
        b = _Emit(out, op.loc)
        mult, contig = attrs.get("multiple_of"), attrs.get("max_contiguous")
        last = x.shape[-1] if x.shape else 1
        c = min(contig, last) if isinstance(contig, int) and contig > 1 else 1
        if c > 1 and last % c:
            c = 1  # runs that do not tile the last dim are not checked
        start = x  # the first value of each element's run
        if c > 1:
            lane = b.op("iota", [], TileType(x.shape, int32), axis=x.type.rank - 1, start=0)
            pos = b.binary("mod", lane, b.const(c, x.shape, int32))
            pos = b.op("cast", [pos], TileType(x.shape, x.elem)) if x.elem != int32 else pos
            start = b.binary("sub", x, pos)
            # contiguity: x - position-in-run is constant over each run
            runs = b.op("reshape", [start], TileType((x.type.numel // c, c), x.elem))
            hi = b.op("reduce", [runs], TileType((x.type.numel // c,), x.elem), op="max",
                      axis=1)
            lo = b.op("reduce", [runs], TileType((x.type.numel // c,), x.elem), op="min",
                      axis=1)
            first = b.op("iota", [], TileType((x.type.numel // c,), int32), axis=0, start=0)
            index = b.binary("mul", first, b.const(c, first.shape, int32))
            self.record(b, b.binary("ne", hi, lo), b.op("cast", [index], TileType(
                first.shape, int64)), self.site(op, "max_contiguous", amount=contig))
        if isinstance(mult, int) and mult > 1:
            rem = b.binary("mod", start, b.const(mult, x.shape, x.elem))
            bad = b.binary("ne", rem, b.const(0, x.shape, x.elem))
            value = start if x.elem == int64 else b.op("cast", [start], TileType(x.shape, int64))
            self.record(b, bad, value, self.site(op, "multiple_of", amount=mult))

    # -- the error record

    def record(self, b: _Emit, bad: tile.Value, value: tile.Value, site: int) -> None:
        """if any(bad): the first program to claim the flag writes (site, pids, value of the
        first bad lane in row-major order)."""
        if bad.shape:
            n = bad.type.numel
            flat_bad, flat_val = b.flat(bad), b.flat(value)
            lane = b.op("iota", [], TileType((n,), int32), axis=0, start=0)
            first = b.op("reduce", [b.op("where", [flat_bad, lane, b.const(n, (n,), int32)],
                                         lane.type)], TileType((), int32), op="min", axis=0)
            anybad = b.binary("lt", first, b.const(n, (), int32))
            pick = b.binary("eq", lane, b.splat(first, (n,)))
            value = b.op("reduce", [b.op("where", [pick, flat_val, b.const(0, (n,), int64)],
                                         flat_val.type)], TileType((), int64), op="sum", axis=0)
        else:
            anybad = bad
        then = tile.Block()
        t = _Emit(then.ops, b.loc)
        old = t.op("atomic_rmw", [self.errors, t.const(1, (), int64)], TileType((), int64),
                   op="add", sem="relaxed", scope="gpu")
        claim = tile.Block()
        c = _Emit(claim.ops, b.loc)
        words = [c.const(site, (), int64)]
        for axis in range(3):
            pid = c.op("program_id", [], TileType((), int32), axis=axis)
            words.append(c.op("cast", [pid], TileType((), int64)))
        words.append(value)
        for k, w in enumerate(words, start=1):
            p = c.op("addptr", [self.errors, c.const(k, (), int32)], self.errors.type)
            c.op("store", [p, w])
        c.op("yield", [])
        t.op("if", [t.binary("eq", old, t.const(0, (), int64))], None,
             [claim, tile.Block(ops=[tile.Op("yield", [], loc=b.loc)])])
        t.op("yield", [])
        b.op("if", [anybad], None, [then, tile.Block(ops=[tile.Op("yield", [], loc=b.loc)])])


def _hint_root(v: tile.Value) -> tile.Value:
    while isinstance(v.owner, tile.Op) and v.owner.kind == "hint":
        v = v.owner.operands[0]
    return v


def _hint_chains(fn: tile.Function) -> dict[int, dict[str, Any]]:
    """Root value id -> the hints given on it through any chain of `hint` ops."""
    out: dict[int, dict[str, Any]] = {}
    for op in fn.walk():
        if op.kind == "hint":
            out.setdefault(_hint_root(op.result).id, {}).update(op.attrs)
    return out


def has_asserts(fn: tile.Function) -> bool:
    return any(op.kind == "assert" for op in fn.walk())


def _drop_asserts(block: tile.Block) -> None:
    block.ops = [op for op in block.ops if op.kind != "assert"]
    for op in block.ops:
        for r in op.regions:
            _drop_asserts(r)


def insert_checks(fn: tile.Function) -> tile.Function:
    """Add the bounds and hint checks (when `fn.options.check`) and turn `assert` ops into
    checks (when `fn.options.debug`; deleted otherwise); records the hidden parameters and
    the site table in `fn.attrs["checks"]` for the runtime.  A no-op on other kernels."""
    if "checks" in fn.attrs:
        return fn
    if not fn.options.debug:
        _drop_asserts(fn.body)
    check = fn.options.check
    if not check and not has_asserts(fn):
        return fn
    c = _Checker(fn, bounds=check)
    c.block(fn.body)
    fn.attrs["checks"] = {
        "sites": tuple(c.sites),
        # runtime param index (in the user's order) of each hidden (extent, lower) pair
        "extents": tuple(c.extent_of),
        # runtime param index of each hidden shadow array, after the error record (races.py)
        "shadows": tuple(c.races.shadowed) if c.races is not None else (),
        "kernel": fn.name,
        "nparams": len(c.params),
    }
    return fn


__all__ = ["ACCESS_KINDS", "ERROR_PARAM", "ERROR_WORDS", "EXTENT_PREFIX", "LOWER_PREFIX", "Site",
           "has_asserts", "insert_checks"]
