"""Canonicalisation of the Tile IR: a table of rewrite rules keyed by op kind, applied to a fixed
point.

Rules fold constants (evaluated by the interpreter, so folding always agrees with execution),
drop identities (`x + 0`, `x * 1`, casts to the same type, ...), simplify shape ops, and
*rematerialise broadcasts of cheap values*: a `broadcast`/`reshape`/`trans` of an `iota`, a
constant, a `splat` or an elementwise op of such values is rebuilt at the new shape instead of
moving data.  On a GPU a broadcast of data costs a round trip through shared memory, whereas an
`iota` of any shape is computed from the thread index in registers; after this pass the pointer
arithmetic of a matmul (`offs_m[:, None] * stride + offs_n[None, :]`) is elementwise arithmetic on
full-shape iotas and splats.

A rule takes `(op, builder)` and returns the value replacing `op.result`, or None.  New ops go to
the builder and are inserted before `op`; the replaced op is removed (rules only match pure ops).
Values left unused are removed by DCE.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kdsl.ir import interp, tile
from kdsl.ir.types import DType

from .manager import Builder, resolve

Rule = Callable[[tile.Op, Builder], "tile.Value | None"]

MAX_SWEEPS = 100

#: Elementwise ops with no side effect and no memory access: safe to recompute at another shape.
PURE_ELEMENTWISE = (
    tile.BINARY_OPS | tile.COMPARE_OPS | tile.UNARY_OPS
    | {"fma", "where", "cast", "bitcast", "addptr", "hint"}
)
#: Kinds whose value is cheap to produce at any shape (computed from indices and scalars).
CHEAP_LEAVES = frozenset({"iota", "const", "splat"})
SHAPE_OPS = frozenset({"broadcast", "reshape", "trans"})
FOLDABLE = (tile.BINARY_OPS | tile.COMPARE_OPS | tile.UNARY_OPS
            | {"fma", "where", "cast", "bitcast"})


# ---------------------------------------------------------------------------------- queries


def defining_op(v: tile.Value) -> tile.Op | None:
    return v.owner if isinstance(v.owner, tile.Op) else None


def const_value(v: tile.Value) -> Any:
    """The Python constant held by every element of `v` (a `const`, or a `splat` of one), or
    None when `v` is not a known constant."""
    op = defining_op(v)
    if op is None or not isinstance(v.type.elem, DType):
        return None
    if op.kind == "const":
        return op.attrs["value"]
    if op.kind == "splat":
        return const_value(op.operands[0])
    return None


def is_cheap(v: tile.Value, memo: dict[int, bool] | None = None) -> bool:
    """True when `v` is computed from indices, constants and scalars only (no loads, no block
    arguments): cheap enough to recompute at a larger shape."""
    memo = {} if memo is None else memo
    if v.id in memo:
        return memo[v.id]
    op = defining_op(v)
    if op is None:
        ok = False
    elif op.kind in CHEAP_LEAVES:
        ok = True
    elif op.kind in PURE_ELEMENTWISE or op.kind in SHAPE_OPS:
        ok = all(is_cheap(o, memo) for o in op.operands)
    else:
        ok = False
    memo[v.id] = ok
    return ok


def _is(v: tile.Value, value: Any) -> bool:
    c = const_value(v)
    return c is not None and not isinstance(c, bool) and c == value


# ---------------------------------------------------------------------------- fold and algebra


def fold(op: tile.Op, b: Builder) -> tile.Value | None:
    """Evaluate an op whose operands are all constants (in the op's own types)."""
    if len(op.results) != 1 or not isinstance(op.result.type.elem, DType):
        return None
    consts = [const_value(o) for o in op.operands]
    if any(c is None for c in consts):
        return None
    scalar_op = tile.Op(op.kind, [tile.Value(o.type.with_shape(())) for o in op.operands],
                        [op.result.type.with_shape(())], op.attrs)
    values = [interp.scalar_value(c, o.type.elem) for c, o in zip(consts, op.operands)]
    (res,) = interp.evaluate(scalar_op, values)
    return b.create("const", [], op.result.type, {"value": res.item()})


def _identity(side_values: dict[int, Any], when: Callable[[DType], bool]) -> Rule:
    """`op(x, k) -> x` (operand index -> neutral constant k), for element types where `when`."""
    def rule(op: tile.Op, b: Builder) -> tile.Value | None:
        elem = op.result.type.elem
        if not isinstance(elem, DType) or not when(elem):
            return None
        for idx, k in side_values.items():
            other = op.operands[1 - idx]
            if _is(op.operands[idx], k) and other.type == op.result.type:
                return other
        return None
    return rule


def _is_int(e: DType) -> bool:
    return e.is_int


def _is_float(e: DType) -> bool:
    return e.is_float


def where_const(op: tile.Op, b: Builder) -> tile.Value | None:
    c, x, y = op.operands
    if x is y:
        return x
    cv = const_value(c)
    return None if cv is None else (x if cv else y)


def same_type(op: tile.Op, b: Builder) -> tile.Value | None:
    x = op.operands[0]
    return x if x.type == op.result.type else None


def splat_const(op: tile.Op, b: Builder) -> tile.Value | None:
    c = const_value(op.operands[0])
    if c is None:
        return None
    return b.create("const", [], op.result.type, {"value": c})


# ------------------------------------------------------------------------------- shape ops


def _unit_dims_map(src: tuple[int, ...], dst: tuple[int, ...]) -> dict[int, int] | None:
    """For a reshape that only inserts or removes dims of size 1: source dim -> result dim for
    every dim larger than 1; None for any other reshape."""
    s = [i for i, d in enumerate(src) if d != 1]
    t = [i for i, d in enumerate(dst) if d != 1]
    if [src[i] for i in s] != [dst[i] for i in t]:
        return None
    return dict(zip(s, t))


def _iota_axis(kind: str, op: tile.Op, src_op: tile.Op) -> int | None | str:
    """Axis of the iota equal to `kind(iota)`, "const" when the result is constant, None when
    the result is not an iota."""
    src, dst = src_op.result.shape, op.result.shape
    axis = src_op.attrs.get("axis", 0)
    if src[axis] == 1:
        return "const"
    if kind == "broadcast":
        return axis
    if kind == "trans":
        return list(op.attrs["perm"]).index(axis)
    dims = _unit_dims_map(src, dst)
    return None if dims is None else dims[axis]


def _push_hint_attrs(attrs: dict, src: tuple[int, ...], dst: tuple[int, ...]) -> dict:
    # `multiple_of` is a property of each value and survives any shape change; contiguity is
    # along the last dim and survives only when the last dim keeps its size.
    out = dict(attrs)
    if "max_contiguous" in out and (not src or not dst or src[-1] != dst[-1]):
        del out["max_contiguous"]
    return out


def reshape_like(op: tile.Op, b: Builder) -> tile.Value | None:
    """Rules shared by broadcast, reshape and trans."""
    x = op.operands[0]
    t = op.result.type
    if x.type == t and op.kind != "trans":
        return x
    if op.kind == "trans" and list(op.attrs["perm"]) == sorted(op.attrs["perm"]):
        return x
    src = defining_op(x)
    if src is None:
        return None
    if src.kind == "const":
        return b.create("const", [], t, dict(src.attrs))
    if src.kind == "splat":
        return b.create("splat", src.operands, t)
    if src.kind == op.kind and op.kind in ("broadcast", "reshape"):
        return b.create(op.kind, src.operands, t)  # broadcast(broadcast(x)), reshape(reshape(x))
    if src.kind == "iota":
        axis = _iota_axis(op.kind, op, src)
        if axis == "const":
            return b.create("const", [], t, {"value": src.attrs.get("start", 0)})
        if axis is not None:
            return b.create("iota", [], t, {"axis": axis, "start": src.attrs.get("start", 0)})
        return None
    if src.kind in PURE_ELEMENTWISE and is_cheap(x):
        ops = [b.create(op.kind, [o], o.type.with_shape(t.shape), dict(op.attrs))
               for o in src.operands]
        attrs = dict(src.attrs)
        if src.kind == "hint":
            attrs = _push_hint_attrs(attrs, x.shape, t.shape)
        return b.create(src.kind, ops, t.with_elem(src.result.type.elem), attrs)
    return None


def slice_rule(op: tile.Op, b: Builder) -> tile.Value | None:
    """`slice` of a constant or splat is one of the new shape; slices compose; a slice of an
    iota taking every element along its axis is an iota; a slice of cheap elementwise math is
    pushed into its operands (as for the other shape ops)."""
    x, t = op.operands[0], op.result.type
    start, step = tuple(op.attrs["start"]), tuple(op.attrs["step"])
    if x.type == t and not any(start) and all(s == 1 for s in step):
        return x
    src = defining_op(x)
    if src is None:
        return None
    if src.kind == "const":
        return b.create("const", [], t, dict(src.attrs))
    if src.kind == "splat":
        return b.create("splat", src.operands, t)
    if src.kind == "slice":
        s1, t1 = src.attrs["start"], src.attrs["step"]
        return b.create("slice", src.operands, t, {
            "start": tuple(a + u * c for a, u, c in zip(s1, t1, start)),
            "step": tuple(u * c for u, c in zip(t1, step))})
    if src.kind == "iota":  # first + step * (coordinate along the iota's axis)
        ax = src.attrs.get("axis", 0)
        first, stride = src.attrs.get("start", 0) + start[ax], step[ax]
        if t.shape[ax] == 1 or stride == 0:
            return b.create("const", [], t, {"value": first})
        if stride == 1:
            return b.create("iota", [], t, {"axis": ax, "start": first})
        coord = b.create("iota", [], t, {"axis": ax, "start": 0})
        scaled = b.create("mul", [coord, b.create("const", [], t, {"value": stride})], t)
        return b.create("add", [scaled, b.create("const", [], t, {"value": first})], t)
    if src.kind in PURE_ELEMENTWISE and src.kind != "hint" and is_cheap(x):
        ops = [b.create("slice", [o], o.type.with_shape(t.shape), dict(op.attrs))
               for o in src.operands]
        return b.create(src.kind, ops, t.with_elem(src.result.type.elem), dict(src.attrs))
    return None


# ------------------------------------------------------------------------------- the table


RULES: dict[str, list[Rule]] = {k: [fold] for k in FOLDABLE}
RULES["add"].append(_identity({0: 0, 1: 0}, _is_int))
RULES["sub"].append(_identity({1: 0}, _is_int))
RULES["mul"].append(_identity({0: 1, 1: 1}, _is_int))
RULES["mul"].append(_identity({0: 1.0, 1: 1.0}, _is_float))
RULES["where"].append(where_const)
RULES["cast"].append(same_type)
RULES["bitcast"].append(same_type)
RULES["splat"] = [splat_const]
for _k in SHAPE_OPS:
    RULES[_k] = [reshape_like]
RULES["slice"] = [slice_rule]


# ------------------------------------------------------------------------------- the driver


def _sweep(fn: tile.Function) -> bool:
    """One walk in program order applying the first matching rule to each op; uses of a replaced
    value are rewritten as the walk reaches them (definitions dominate uses)."""
    mapping: dict[int, tile.Value] = {}
    changed = False

    def visit(block: tile.Block) -> None:
        nonlocal changed
        new_ops: list[tile.Op] = []
        for op in block.ops:
            op.operands = [resolve(mapping, o) for o in op.operands]
            for region in op.regions:
                visit(region)
            replacement = None
            if len(op.results) == 1 and not op.regions:
                for rule in RULES.get(op.kind, ()):
                    b = Builder(op.loc)
                    replacement = rule(op, b)
                    if replacement is not None:
                        break
            if replacement is None:
                new_ops.append(op)
                continue
            assert replacement.type == op.result.type, (op, replacement)
            new_ops.extend(b.ops)
            mapping[op.result.id] = replacement
            changed = True
        block.ops = new_ops

    visit(fn.body)
    return changed


def canonicalize(fn: tile.Function) -> tile.Function:
    """Apply `RULES` until nothing changes (in place); returns `fn`."""
    for _ in range(MAX_SWEEPS):
        if not _sweep(fn):
            break
    return fn


__all__ = ["PURE_ELEMENTWISE", "RULES", "canonicalize", "const_value", "is_cheap"]
