"""Block pointers (`kd.make_block_ptr`, `kd.advance`) and tensor descriptors
(`kd.make_tensor_descriptor`, `desc.load`, `desc.store`), decomposed into ordinary pointer
arithmetic and masks, so every backend supports them with no IR op of their own.

A block pointer describes a `block_shape` window at `offsets` into a parent tensor of `shape`
and `strides` (in elements) starting at `base`. Element `r` of the block (a coordinate tuple)
lives at `base + sum_d (offsets[d] + r[d]) * strides[d]`; it is in bounds along dim `d` when
`0 <= offsets[d] + r[d] < shape[d]`. As in Triton, `shape` and `strides` are int64 and `offsets`
int32; the address arithmetic is done in int64. A `load` with `boundary_check=(d, ...)` masks
the dims listed (padding the rest with 0, or NaN for `padding_option="nan"`); a `store` with
`boundary_check` writes only the in-bounds elements. Dims not listed are not checked (an access
outside the array is then an error of the kernel, as with any pointer).

A tensor descriptor is the same window with every dim checked: out-of-bounds elements read as
0 (`padding_option="zero"`, or NaN) and are not written (Triton's semantics of TMA). Both are
`Aggregate`s: the frontend carries their leaves (base, shape, strides, offsets) through loops
and branches as plain IR values, and `kd.advance` in a loop carries only the offsets it
changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..ir.tile import Value
from ..ir.types import DType, PointerType, int1, int32, int64
from . import semantic
from .semantic import error, is_value
from .type_objects import Aggregate, block_type, pointer_type

_PADDINGS = ("", "zero", "nan")


def _seq(x: Any, what: str) -> tuple:
    if isinstance(x, (tuple, list)):
        return tuple(x)
    return (x,)


def _index_value(b, x: Any, dt: DType, what: str) -> Value:
    """A shape/stride (int64) or offset (int32) scalar: a compile-time int or an integer
    scalar. As in Triton, an int64 offset is rejected (offsets are 32-bit)."""
    if isinstance(x, bool) or not (isinstance(x, int) or is_value(x)):
        raise error(f"{what} must be integers, got {semantic.describe(x)}")
    if isinstance(x, int):
        lo, hi = (-2**63, 2**63) if dt == int64 else (-2**31, 2**31)
        if not lo <= x < hi:
            raise error(f"{what}: {x} does not fit in {dt}")
        return semantic.to_value(b, x, dt)
    e = x.type.elem
    if x.shape or not isinstance(e, DType) or not (e.is_int or e.is_bool):
        raise error(f"{what} must be integer scalars, got {semantic.describe(x)}")
    if dt == int32 and e == int64:
        raise error(f"{what}: block pointers and descriptors take 32-bit offsets, got an int64 "
                    "value (add .to(kd.int32) or index with plain pointers)")
    return semantic.cast(b, x, dt)


def _static_ints(x: Any, what: str) -> tuple[int, ...]:
    out = []
    for v in _seq(x, what):
        if isinstance(v, bool) or not isinstance(v, int):
            raise error(f"{what} must be compile-time ints, got {semantic.describe(v)}")
        out.append(v)
    return tuple(out)


def _base_arg(base: Any, what: str) -> Value:
    if isinstance(base, BlockPointer):
        raise error(f"{what}: base must be a plain pointer, got a block pointer")
    if not semantic.is_ptr(base) or base.shape:
        raise error(f"{what}: base must be a scalar pointer (a pointer argument, possibly plus "
                    f"an offset), got {semantic.describe(base)}")
    return base


class BlockPointer(Aggregate):
    """The value of `kd.make_block_ptr(...)`: Triton's `pointer_type(block_type(...))`."""

    kd_is_tensor = True

    def __init__(self, base: Value, shape: tuple[Value, ...], strides: tuple[Value, ...],
                 offsets: tuple[Value, ...], block_shape: tuple[int, ...],
                 order: tuple[int, ...]):
        self.base, self.shape_values, self.strides = base, shape, strides
        self.offsets, self.block_shape, self.order = offsets, block_shape, order

    @property
    def elem(self) -> DType:
        return self.base.type.elem.pointee

    @property
    def type(self) -> PointerType:
        return pointer_type(block_type(self.elem, self.block_shape))

    def kd_flatten(self) -> tuple[list[Value], Any]:
        return ([self.base, *self.shape_values, *self.strides, *self.offsets],
                (self.block_shape, self.order))

    @classmethod
    def kd_unflatten(cls, static: Any, leaves: list[Value]) -> BlockPointer:
        block_shape, order = static
        n = len(block_shape)
        return cls(leaves[0], tuple(leaves[1:1 + n]), tuple(leaves[1 + n:1 + 2 * n]),
                   tuple(leaves[1 + 2 * n:1 + 3 * n]), block_shape, order)

    def kd_attr(self, name: str) -> Any:
        table = {"type": self.type, "dtype": self.type, "shape": (), "numel": 1,
                 "block_shape": self.block_shape, "order": self.order}
        if name not in table:
            raise error(f"block pointers have no attribute {name!r}")
        return table[name]

    @classmethod
    def kd_describe(cls, static: Any) -> str:
        return f"a block pointer of block shape {list(static[0])}, order {static[1]}"

    def __repr__(self) -> str:
        return f"block_ptr<{list(self.block_shape)}x{self.elem}>"


class tensor_descriptor(Aggregate):  # Triton's name: kd.tensor_descriptor
    """The value of `kd.make_tensor_descriptor(...)`: loads and stores `block_shape` tiles at
    any offsets, reading 0 (or NaN) out of bounds and never writing there."""

    def __init__(self, base: Value, shape: tuple[Value, ...], strides: tuple[Value, ...],
                 block_shape: tuple[int, ...], padding: str):
        self.base, self.shape, self.strides = base, shape, strides
        self.block_shape, self.padding = block_shape, padding

    @property
    def dtype(self) -> DType:
        return self.base.type.elem.pointee

    @property
    def block_type(self) -> block_type:
        return block_type(self.dtype, self.block_shape)

    def kd_flatten(self) -> tuple[list[Value], Any]:
        return [self.base, *self.shape, *self.strides], (self.block_shape, self.padding)

    @classmethod
    def kd_unflatten(cls, static: Any, leaves: list[Value]) -> tensor_descriptor:
        block_shape, padding = static
        n = len(block_shape)
        return cls(leaves[0], tuple(leaves[1:1 + n]), tuple(leaves[1 + n:1 + 2 * n]),
                   block_shape, padding)

    def kd_attr(self, name: str) -> Any:
        table = {"dtype": self.dtype, "block_type": self.block_type,
                 "block_shape": self.block_shape, "shape": self.shape, "strides": self.strides}
        if name not in table:
            raise error(f"tensor descriptors have no attribute {name!r}")
        return table[name]

    @classmethod
    def kd_describe(cls, static: Any) -> str:
        return f"a tensor descriptor of block shape {list(static[0])}, padding {static[1]!r}"

    def __repr__(self) -> str:
        return f"tensor_descriptor<{list(self.block_shape)}x{self.dtype}>"


# --------------------------------------------------------------------------- construction


def make_block_ptr(b, base: Any, shape: Any, strides: Any, offsets: Any, block_shape: Any,
                   order: Any) -> BlockPointer:
    base = _base_arg(base, "make_block_ptr")
    block = _static_ints(block_shape, "make_block_ptr block_shape")
    order = _static_ints(order, "make_block_ptr order")
    shape, strides, offsets = (_seq(x, "") for x in (shape, strides, offsets))
    n = len(block)
    if not all(len(x) == n for x in (shape, strides, offsets, order)):
        raise error(f"make_block_ptr: shape, strides, offsets, block_shape and order must have "
                    f"the same length, got {len(shape)}, {len(strides)}, {len(offsets)}, {n}, "
                    f"{len(order)}")
    if sorted(order) != list(range(n)):
        raise error(f"make_block_ptr: order must be a permutation of 0..{n - 1}, got {order}")
    semantic._static_shape(block)
    return BlockPointer(
        base,
        tuple(_index_value(b, s, int64, "make_block_ptr shape") for s in shape),
        tuple(_index_value(b, s, int64, "make_block_ptr strides") for s in strides),
        tuple(_index_value(b, o, int32, "make_block_ptr offsets") for o in offsets),
        block, order)


def _block_ptr_arg(ptr: Any, what: str) -> BlockPointer:
    if not isinstance(ptr, BlockPointer):
        raise error(f"{what} needs a block pointer (from kd.make_block_ptr), got "
                    f"{semantic.describe(ptr)}")
    return ptr


def _offset_sum(b, off: Value, delta: Any) -> Value:
    if isinstance(delta, int) and not isinstance(delta, bool) and delta == 0:
        return off  # unchanged: a loop carrying the block pointer then carries only the rest
    return semantic.binary(b, "add", off, _index_value(b, delta, int32, "advance offsets"))


def advance(b, ptr: Any, offsets: Any) -> BlockPointer:
    """The block pointer moved by `offsets` (one per dim, in elements)."""
    ptr = _block_ptr_arg(ptr, "advance")
    deltas = _seq(offsets, "advance offsets")
    if len(deltas) != len(ptr.block_shape):
        raise error(f"advance: {len(deltas)} offsets for a {len(ptr.block_shape)}-d block "
                    "pointer")
    new = tuple(_offset_sum(b, o, d) for o, d in zip(ptr.offsets, deltas))
    return BlockPointer(ptr.base, ptr.shape_values, ptr.strides, new, ptr.block_shape,
                        ptr.order)


def make_tensor_descriptor(b, base: Any, shape: Any, strides: Any, block_shape: Any,
                           padding_option: str = "zero") -> tensor_descriptor:
    base = _base_arg(base, "make_tensor_descriptor")
    shape, strides = _seq(shape, ""), _seq(strides, "")
    block = _static_ints(block_shape, "make_tensor_descriptor block_shape")
    n = len(shape)
    if not 1 <= n <= 5:
        raise error(f"make_tensor_descriptor: 1 to 5 dims are supported, got {n}")
    if len(strides) != n or len(block) != n:
        raise error(f"make_tensor_descriptor: {n} dims in shape but {len(strides)} strides and "
                    f"{len(block)} block dims")
    last = strides[-1]
    if not is_value(last) and last != 1:
        raise error(f"make_tensor_descriptor: the last dim must be contiguous (stride 1), got "
                    f"stride {last}")
    semantic._static_shape(block)
    padding = _padding_arg(padding_option, base.type.elem.pointee, "make_tensor_descriptor")
    return tensor_descriptor(
        base, tuple(_index_value(b, s, int32, "make_tensor_descriptor shape") for s in shape),
        tuple(_index_value(b, s, int64, "make_tensor_descriptor strides") for s in strides),
        block, padding or "zero")


# ------------------------------------------------------------------------------ addressing


def _padding_arg(padding: Any, elem: DType, what: str) -> str:
    if padding is None:
        padding = ""
    if padding not in _PADDINGS:
        raise error(f"{what}: padding_option must be one of {_PADDINGS}, got {padding!r}")
    if padding == "nan" and not elem.is_float:
        raise error(f"{what}: padding_option 'nan' needs a float element type, got {elem}")
    return padding


def _check_dims(boundary_check: Any, n: int, what: str) -> tuple[int, ...]:
    if boundary_check is None:
        return ()
    dims = _static_ints(boundary_check, f"{what} boundary_check")
    for d in dims:
        if not 0 <= d < n:
            raise error(f"{what}: boundary_check dim {d} is out of range for a {n}-d block")
    if len(set(dims)) != len(dims):
        raise error(f"{what}: duplicate dim in boundary_check {dims}")
    return tuple(sorted(dims))


def _address(b, base: Value, shape: Sequence[Value], strides: Sequence[Value],
             offsets: Sequence[Value], block: tuple[int, ...],
             checked: tuple[int, ...]) -> tuple[Value, Value | None]:
    """The pointer tile of the window and the in-bounds mask of the `checked` dims."""
    n = len(block)
    total, mask = None, None
    for d in range(n):
        r = semantic.arange(b, 0, block[d])
        if n > 1:
            r = semantic.reshape(b, r, tuple(block[d] if i == d else 1 for i in range(n)))
        idx = semantic.binary(b, "add", semantic.cast(b, offsets[d], int64),
                              semantic.cast(b, r, int64))
        term = semantic.binary(b, "mul", idx, strides[d])
        total = term if total is None else semantic.binary(b, "add", total, term)
        if d in checked:
            ok = semantic.binary(b, "and", semantic.compare(b, "ge", idx, 0),
                                 semantic.compare(b, "lt", idx, shape[d]))
            mask = ok if mask is None else semantic.binary(b, "and", mask, ok)
    total = semantic.broadcast_to(b, total, block)
    ptr = semantic.binary(b, "add", base, total)
    if mask is not None:
        mask = semantic.broadcast_to(b, mask, block)
    return ptr, mask


def _other(padding: str, elem: DType) -> Any:
    return float("nan") if padding == "nan" else (False if elem == int1 else 0)


def _masked_load(b, ptr: Value, mask: Value | None, padding: str, elem: DType,
                 volatile: bool) -> Value:
    if mask is None:
        return semantic.load(b, ptr, None, None, volatile)
    return semantic.load(b, ptr, mask, _other(padding, elem), volatile)


def _value_for(b, value: Any, elem: DType, block: tuple[int, ...], what: str) -> Value:
    if isinstance(value, Aggregate):
        raise error(f"{what}: cannot store a {value!r}")
    semantic._check_operand(value)
    if semantic.broadcast_shapes(semantic.shape(value), block) != block:
        raise error(f"{what}: value of shape {list(semantic.shape(value))} does not match the "
                    f"block shape {list(block)}")
    return semantic.coerce(b, value, elem, block)


def load(b, ptr: BlockPointer, boundary_check: Any, padding_option: Any,
         volatile: bool = False) -> Value:
    """`kd.load(block_ptr, boundary_check=..., padding_option=...)`."""
    padding = _padding_arg(padding_option, ptr.elem, "load")
    checked = _check_dims(boundary_check, len(ptr.block_shape), "load")
    p, mask = _address(b, ptr.base, ptr.shape_values, ptr.strides, ptr.offsets,
                       ptr.block_shape, checked)
    return _masked_load(b, p, mask, padding, ptr.elem, volatile)


def store(b, ptr: BlockPointer, value: Any, boundary_check: Any) -> None:
    """`kd.store(block_ptr, value, boundary_check=...)`: value broadcast and cast to the
    element type (Triton requires the element type already)."""
    checked = _check_dims(boundary_check, len(ptr.block_shape), "store")
    v = _value_for(b, value, ptr.elem, ptr.block_shape, "store")
    p, mask = _address(b, ptr.base, ptr.shape_values, ptr.strides, ptr.offsets,
                       ptr.block_shape, checked)
    semantic.store(b, p, v, mask)


def _desc_window(b, desc: Any, offsets: Any, what: str) -> tuple[Value, Value]:
    if not isinstance(desc, tensor_descriptor):
        raise error(f"{what} needs a tensor descriptor (from kd.make_tensor_descriptor), got "
                    f"{semantic.describe(desc)}")
    offs = _seq(offsets, what)
    n = len(desc.block_shape)
    if len(offs) != n:
        raise error(f"{what}: expected {n} offsets, got {len(offs)}")
    offs = tuple(_index_value(b, o, int32, f"{what} offsets") for o in offs)
    return _address(b, desc.base, desc.shape, desc.strides, offs, desc.block_shape,
                    tuple(range(n)))


def descriptor_load(b, desc: Any, offsets: Any) -> Value:
    p, mask = _desc_window(b, desc, offsets, "tensor descriptor load")
    return _masked_load(b, p, mask, desc.padding, desc.dtype, False)


def descriptor_store(b, desc: Any, offsets: Any, value: Any) -> None:
    p, mask = _desc_window(b, desc, offsets, "tensor descriptor store")
    semantic.store(b, p, _value_for(b, value, desc.dtype, desc.block_shape,
                                    "tensor descriptor store"), mask)


def descriptor_window(b, desc: Any, offsets: Any, value: Any,
                      what: str) -> tuple[Value, Value, Value]:
    """Pointer, value and mask of a descriptor update (`desc.atomic_add(offsets, value)`)."""
    p, mask = _desc_window(b, desc, offsets, what)
    return p, _value_for(b, value, desc.dtype, desc.block_shape, what), mask


def is_block_ptr(x: Any) -> bool:
    return isinstance(x, BlockPointer)


__all__ = ["BlockPointer", "advance", "descriptor_load", "descriptor_store", "is_block_ptr",
           "load", "make_block_ptr", "make_tensor_descriptor", "store", "tensor_descriptor"]
