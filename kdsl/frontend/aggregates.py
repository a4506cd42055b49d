"""Flattening of the values a variable may hold into IR values, so that runtime control flow
(loop-carried variables, `if` results, early-return values) only ever carries Tile IR values.

A variable holds a runtime value (a Tile IR `Value`, or a Python int/float/bool constant that
becomes one when it crosses control flow), a tuple of such things, an `Aggregate` (a block
pointer, a tensor descriptor), or a compile-time object (a dtype, a string, None, a function).
`flatten` splits it into *leaves* (the runtime values, in order) and a *spec* (its structure
plus every compile-time part); `unflatten(spec, leaves)` rebuilds it. Two values can be merged
by an `if` or carried by a loop when their specs match (`same_spec`): same structure, equal
compile-time parts; their leaves are then merged one by one.
"""

from __future__ import annotations

from typing import Any

from ..ir.tile import Value
from ..ir.types import TileType
from ..language import semantic
from ..language.type_objects import Aggregate

LEAF = "leaf"  # the spec of one runtime value


def flatten(x: Any) -> tuple[list[Any], Any]:
    """(leaves, spec) of `x`."""
    if semantic.is_value(x) or semantic.is_scalar_const(x):
        return [x], LEAF
    if isinstance(x, (tuple, list)):
        leaves: list[Any] = []
        specs = []
        for e in x:
            lv, sp = flatten(e)
            leaves += lv
            specs.append(sp)
        return leaves, ("tuple", tuple(specs))
    if isinstance(x, Aggregate):
        lv, static = x.kd_flatten()
        return list(lv), ("agg", type(x), static, len(lv))
    return [], ("static", x)


def unflatten(spec: Any, leaves: list[Any]) -> Any:
    out, rest = _unflatten(spec, list(leaves))
    assert not rest, "leaves left over"
    return out


def _unflatten(spec: Any, leaves: list[Any]) -> tuple[Any, list[Any]]:
    if spec == LEAF:
        return leaves[0], leaves[1:]
    kind = spec[0]
    if kind == "tuple":
        items = []
        for sp in spec[1]:
            v, leaves = _unflatten(sp, leaves)
            items.append(v)
        return tuple(items), leaves
    if kind == "agg":
        _, cls, static, n = spec
        return cls.kd_unflatten(static, leaves[:n]), leaves[n:]
    return spec[1], leaves


def _same_static(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001  (objects whose == is not a bool)
        return False


def same_spec(a: Any, b: Any) -> bool:
    """Whether values of specs `a` and `b` can be merged leaf by leaf."""
    if a == LEAF or b == LEAF:
        return a == b
    if a[0] != b[0]:
        return False
    if a[0] == "tuple":
        return len(a[1]) == len(b[1]) and all(same_spec(x, y) for x, y in zip(a[1], b[1]))
    if a[0] == "agg":
        return a[1] is b[1] and a[3] == b[3] and _same_static(a[2], b[2])
    return _same_static(a[1], b[1])


def has_runtime_leaves(x: Any) -> bool:
    return bool(flatten(x)[0])


def describe_spec(spec: Any) -> str:
    """How a value's structure reads in an error message."""
    if spec == LEAF:
        return "a value"
    if spec[0] == "tuple":
        return "(" + ", ".join(describe_spec(s) for s in spec[1]) + ")"
    if spec[0] == "agg":
        return spec[1].kd_describe(spec[2])
    return repr(spec[1])


def placeholder_leaf(b, t: TileType, ptr_sources: list[Value]) -> Value:
    """A value of type `t` for a path where it is never read: zeros, or for a pointer a
    pointer argument of the same element type."""
    if not t.is_ptr:
        if t.shape:
            return semantic.full(b, t.shape, 0, t.elem)
        return semantic.to_value(b, False if t.elem.is_bool else 0, t.elem)
    src = next((p for p in ptr_sources if p.type.elem == t.elem), None)
    if src is None:
        raise semantic.error(f"cannot return a {t} from inside runtime control flow here (no "
                             "pointer argument of that type to stand in for it on other paths)")
    return semantic.broadcast_to(b, src, t.shape) if t.shape else src


def placeholder(b, like: Any, ptr_sources: list[Value]) -> Any:
    """A value of the same spec and types as `like`, for a path where the variable is never
    read (the not-yet-returned path of an early-return value). Python constants are kept:
    the merge then keeps the constant on every path, which is what the reading path sees."""
    leaves, spec = flatten(like)
    return unflatten(spec, [placeholder_leaf(b, v.type, ptr_sources) if semantic.is_value(v)
                            else v for v in leaves])
