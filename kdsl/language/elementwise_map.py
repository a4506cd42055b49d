"""`kd.map_elementwise(scalar_fn, *args, pack=1)`: a scalar function applied per element.

The arguments broadcast to one shape, as in Triton; `scalar_fn` (a @kd.jit function of one
scalar per argument, returning a value or a tuple of values) is compiled over those tiles by
`kdsl/frontend/elementwise.py`, where a runtime `if` on an element's value selects per element.
With `pack = p`, Triton hands `scalar_fn` p consecutive elements of each argument at once
(`x_0 .. x_{p-1}, y_0 .. y_{p-1}, ...`) and takes back p values of each result
(`r_0 .. r_{p-1}, s_0 .. s_{p-1}, ...`): kdsl groups the elements in row-major order, so the
k-th call sees elements p*k .. p*k + p - 1 of the flattened tiles.
"""

from __future__ import annotations

import functools
from typing import Any

from ..ir.tile import Value
from ..ir.types import TileType, int32
from . import semantic, semantic_shape
from .core import builtin, constexpr


def _arg(b: Any, x: Any) -> Value:
    if isinstance(x, constexpr):
        x = x.value
    if semantic.is_scalar_const(x):
        return semantic.to_value(b, x)
    if not semantic.is_value(x):
        raise semantic.error(f"map_elementwise: the arguments must be tiles or scalars, got "
                             f"{semantic.describe(x)}")
    return x


def _results(b: Any, out: Any, shape: tuple[int, ...]) -> list[Value]:
    """The function's results at the map's shape (a Python constant takes its literal type)."""
    items = list(out) if isinstance(out, tuple) else [out]
    res = []
    for r in items:
        if isinstance(r, constexpr):
            r = r.value
        if not (semantic.is_value(r) or semantic.is_scalar_const(r)):
            raise semantic.error("map_elementwise: scalar_fn must return a value or a tuple of "
                                 f"values, got {semantic.describe(r)}")
        res.append(semantic.broadcast_to(b, semantic.to_value(b, r), shape))
    return res


@builtin
def map_elementwise(scalar_fn, *args, pack=1, _builder=None):
    """`scalar_fn` applied to each element of the broadcast `args` (module docstring); one
    tile, or a tuple of tiles when scalar_fn returns a tuple (always with pack > 1)."""
    b = _builder
    if isinstance(pack, constexpr):
        pack = pack.value
    if isinstance(pack, bool) or not isinstance(pack, int) or pack < 1:
        raise semantic.error(f"map_elementwise: pack must be a compile-time int >= 1, got "
                             f"{semantic.describe(pack)}")
    if not args:
        raise semantic.error("map_elementwise needs at least one argument tile")
    vals = [_arg(b, a) for a in args]
    shape = functools.reduce(semantic.broadcast_shapes, (v.shape for v in vals))
    vals = [semantic.broadcast_to(b, v, shape) for v in vals]
    if pack == 1:
        out = scalar_fn(*vals, map_shape=shape)
        res = _results(b, out, shape)
        return res[0] if not isinstance(out, tuple) else tuple(res)
    n = TileType(shape, int32).numel
    if n % pack:
        raise semantic.error(f"map_elementwise: pack={pack} does not divide the {n} elements "
                             f"of shape {list(shape)}")
    m = n // pack
    parts = [semantic_shape.slice_tile(b, semantic.reshape(b, v, (n,)), (j,), (pack,), (m,))
             for v in vals for j in range(pack)]
    res = _results(b, scalar_fn(*parts, map_shape=(m,)), (m,))
    if len(res) % pack:
        raise semantic.error(f"map_elementwise: with pack={pack}, scalar_fn must return "
                             f"{pack} values per result, got {len(res)} values")
    outs = []
    lane = b.op("iota", [], TileType((m, pack), int32), axis=1, start=0)
    for r in range(0, len(res), pack):
        group = res[r:r + pack]
        if any(g.type.elem != group[0].type.elem for g in group):
            raise semantic.error("map_elementwise: the packed values of one result have "
                                 f"different types: {', '.join(str(g.type.elem) for g in group)}")
        # element p*k + j of the result is value j of call k
        cols = [semantic.reshape(b, g, (m, 1)) for g in group]
        acc = semantic.broadcast_to(b, cols[-1], (m, pack))
        for j in range(pack - 2, -1, -1):
            acc = semantic.where(b, semantic.compare(b, "eq", lane, j), cols[j], acc)
        outs.append(semantic.reshape(b, acc, shape))  # row-major: element p*k + j
    return tuple(outs)


map_elementwise.__kdsl_fn_params__ = ("scalar_fn",)
