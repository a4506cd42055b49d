"""`kd.dot_scaled`: the matrix product of operands in OCP microscaling (MX) formats.

It is Triton's software emulation of `tl.dot_scaled` (the one Triton compiles for GPUs without
native block-scaled MMA), written as a decomposition into ordinary Tile IR ops, so every
backend runs it and computes the same numbers:

1. The compute type is float16 when either operand's format is `fp16`, else bfloat16.
2. Each operand is upcast to it: `e2m1` (two 4-bit codes per byte, the first element in the
   low nibble) is decoded from its codes, `e4m3`/`e5m2` (bytes or kdsl's float8e4nv/float8e5)
   and `bf16`/`fp16` are converted (exact, except a bf16 operand beside an fp16 one, which is
   rounded to float16).
3. With a scale, the operand is multiplied, in the compute type (one rounding), by its scale
   broadcast along K over groups of 32 elements. An e8m0 scale byte `s` becomes the compute
   type as Triton builds it: the bits `s << 7` of a bfloat16 (`2**(s-127)`, except `s == 0`,
   which gives 0.0 and `s == 255`, infinity), or for float16 the float32 of bits `s << 23`
   rounded to float16 (so `2**(s-127)` saturates to infinity above 2**15 and flushes to 0
   below 2**-24). Unless `fast_math`, the elements whose scale byte is 255 (the e8m0 NaN)
   become NaN. Triton also accepts float8e4nv scales, for groups of 16: they are converted.
4. An ordinary `dot` of the two compute-type tiles accumulates in float32 onto `acc`.
"""

from __future__ import annotations

from typing import Any

from ..ir.types import bfloat16, float8e4nv, float8e5, float16, float32, uint8, uint16
from . import core as kd
from . import semantic
from .core import builtin
from .library import kd_function

# format -> (the dtype it converts from, the integer dtype its codes may come as instead)
_FORMATS: dict[str, tuple[Any, Any]] = {
    "e2m1": (None, uint8),
    "e4m3": (float8e4nv, uint8),
    "e5m2": (float8e5, uint8),
    "bf16": (bfloat16, uint16),
    "fp16": (float16, uint16),
}
# scale dtype -> the number of consecutive K elements one scale covers (Triton's rule)
_SCALE_GROUP = {uint8: 32, float8e4nv: 16}


def _static(x: Any, what: str, kinds: tuple[type, ...]) -> Any:
    if isinstance(x, kd.constexpr):
        x = x.value
    if semantic.is_value(x) or not isinstance(x, kinds):
        raise semantic.error(f"dot_scaled: {what} must be a compile-time "
                             f"{' or '.join(k.__name__ for k in kinds)}, got "
                             f"{semantic.describe(x)}")
    return x


def _operand(b: Any, x: Any, fmt: str, side: str) -> Any:
    """The operand as a tile of its format's dtype (e2m1: its uint8 bytes)."""
    if not semantic.is_value(x) or x.type.is_ptr:
        raise semantic.error(f"dot_scaled: {side} must be a tile, got {semantic.describe(x)}")
    if x.type.rank != 2:
        raise semantic.error(f"dot_scaled: {side} must be a 2-D tile (kdsl has no batched "
                             f"dot), got shape {list(x.shape)}")
    dt, codes = _FORMATS[fmt]
    if x.type.elem == dt:
        return x
    if x.type.elem != codes:
        want = f"{dt} or {codes}" if dt is not None else f"{codes} (two codes per byte)"
        raise semantic.error(f"dot_scaled: {side} in format {fmt!r} must be {want}, got "
                             f"{x.type.elem}")
    return x if dt is None else semantic.cast(b, x, dt, bitcast=True)


def _format(f: Any, side: str) -> str:
    f = _static(f, f"{side}_format", (str,))
    if f not in _FORMATS:
        raise semantic.error(f"dot_scaled: {side}_format must be one of "
                             f"{', '.join(map(repr, _FORMATS))}, got {f!r}")
    return f


def _scale(s: Any, rows: int, k: int, side: str, what: str) -> tuple[Any, int]:
    """The scale tile (or None) and its group size, after checking its type and shape."""
    if isinstance(s, kd.constexpr):
        s = s.value
    if s is None:
        return None, 0
    if not semantic.is_value(s) or s.type.elem not in _SCALE_GROUP:
        got = s.type.elem if semantic.is_value(s) else semantic.describe(s)
        raise semantic.error(f"dot_scaled: {side}_scale must be a uint8 (e8m0) or float8e4nv "
                             f"tile, or None, got {got}")
    group = _SCALE_GROUP[s.type.elem]
    if k % group:
        raise semantic.error(f"dot_scaled: K = {k} is not a multiple of the scale group "
                             f"size {group}")
    want = [rows, k // group]
    if list(s.shape) != want:
        raise semantic.error(f"dot_scaled: {side}_scale must have shape {want} ([{what}, "
                             f"K // {group}], not transposed), got {list(s.shape)}")
    return s, group


@builtin
def dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, acc=None,
               fast_math=False, lhs_k_pack=True, rhs_k_pack=True, out_dtype=float32,
               _builder=None):
    """lhs [M, K] @ rhs [K, N] in microscaling formats (+ acc), accumulated in float32; see
    the module docstring for the formats, scales and arithmetic."""
    fmts = _format(lhs_format, "lhs"), _format(rhs_format, "rhs")
    packs = (_static(lhs_k_pack, "lhs_k_pack", (bool,)),
             _static(rhs_k_pack, "rhs_k_pack", (bool,)))
    fast_math = _static(fast_math, "fast_math", (bool,))
    if isinstance(out_dtype, kd.constexpr):
        out_dtype = out_dtype.value
    if out_dtype != float32:
        raise semantic.error(f"dot_scaled: out_dtype must be float32 (as in Triton), got "
                             f"{semantic.describe(out_dtype)}")
    a = _operand(_builder, lhs, fmts[0], "lhs")
    b = _operand(_builder, rhs, fmts[1], "rhs")
    for side, fmt, pack in zip(("lhs", "rhs"), fmts, packs):
        if not pack and fmt != "e2m1":
            raise semantic.error(f"dot_scaled: {side}_k_pack=False needs format 'e2m1' (only "
                                 f"fp4 codes can be packed along {'M' if side == 'lhs' else 'N'})")
    (m, ka), (kb, n) = a.shape, b.shape
    # unpacked sizes: an e2m1 byte holds two elements along K (k_pack) or along M / N
    if fmts[0] == "e2m1":
        ka, m = (2 * ka, m) if packs[0] else (ka, 2 * m)
    if fmts[1] == "e2m1":
        kb, n = (2 * kb, n) if packs[1] else (kb, 2 * n)
    if ka != kb:
        raise semantic.error(f"dot_scaled: lhs {list(lhs.shape)} and rhs {list(rhs.shape)} "
                             f"hold different K ({ka} and {kb} elements)")
    sa, ga = _scale(lhs_scale, m, ka, "lhs", "M")
    sb, gb = _scale(rhs_scale, n, kb, "rhs", "N")
    if acc is not None and not (semantic.is_value(acc) and acc.shape == (m, n)
                                and acc.type.elem == float32):
        got = acc.type if semantic.is_value(acc) else semantic.describe(acc)
        raise semantic.error(f"dot_scaled: acc must be a float32 tile of shape [{m}, {n}], "
                             f"got {got}")
    compute = float16 if "fp16" in fmts else bfloat16
    x = _scaled_operand(a, fmts[0] == "e2m1", packs[0], False, sa, ga, compute, fast_math,
                        _builder=_builder)
    y = _scaled_operand(b, fmts[1] == "e2m1", packs[1], True, sb, gb, compute, fast_math,
                        _builder=_builder)
    return semantic.dot(_builder, x, y, acc, "ieee", float32)


# --------------------------------------------------------------- kd-language decomposition


@kd_function
def _e2m1(codes, dtype):
    """The values of 4-bit e2m1 codes (uint8 tile of 0..15): sign, 2 exponent bits (bias 1),
    1 mantissa bit; magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6, all exact in `dtype`."""
    c = codes.to(kd.int32)
    e = (c >> 1) & 3
    m = c & 1
    twice = kd.where(e == 0, m, (4 + 2 * m) << e >> 2)  # 2 * magnitude, an integer
    mag = twice.to(kd.float32) * 0.5
    return kd.where((c & 8) != 0, -mag, mag).to(dtype)


@kd_function
def _unpack_e2m1(packed, along_rows, dtype):
    """Bytes [R, C] of two e2m1 codes each (the first in the low nibble) as values: [2R, C]
    when packed along dim 0 (`along_rows`), else [R, 2C]."""
    r = packed.shape[0]
    c = packed.shape[1]
    pair = kd.join(packed & 15, packed >> 4)  # [R, C, 2]
    if along_rows:
        codes = kd.reshape(kd.permute(pair, 0, 2, 1), (2 * r, c))
    else:
        codes = kd.reshape(pair, (r, 2 * c))
    return _e2m1(codes, dtype)


@kd_function
def _per_element(scale, group):
    """A scale tile [R, G] repeated over groups of `group` columns: [R, G * group]."""
    r = scale.shape[0]
    g = scale.shape[1]
    return kd.reshape(kd.broadcast_to(scale[:, :, None], (r, g, group)), (r, g * group))


@kd_function
def _scale_value(s, dtype):
    """An e8m0 scale byte in the compute type, built from its bits as Triton's emulation does
    (bfloat16: the bits s << 7; float16: the float32 of bits s << 23, rounded)."""
    if dtype == kd.bfloat16:
        return (s.to(kd.uint16) << 7).to(kd.bfloat16, bitcast=True)
    return (s.to(kd.uint32) << 23).to(kd.float32, bitcast=True).to(kd.float16)


@kd_function
def _scaled_operand(v, fp4, k_pack, is_rhs, scale, group, dtype, fast_math):
    """One operand in the compute type `dtype`, multiplied by its scale (a [rows, K // group]
    tile or None; the rhs's is [N, K // group], applied transposed); where an e8m0 scale is
    255 the value is NaN unless `fast_math`."""
    if fp4:
        # the bytes pack along K (dim 1 of lhs, dim 0 of rhs) with k_pack, else along M / N
        x = _unpack_e2m1(v, k_pack == is_rhs, dtype)
    else:
        x = v.to(dtype)
    if scale is not None:
        s = _per_element(scale, group)
        if is_rhs:
            s = kd.trans(s)
        if scale.dtype == kd.uint8:
            x = x * _scale_value(s, dtype)
            if not fast_math:
                x = kd.where(s == 255, float("nan"), x)
        else:
            x = x * s.to(dtype)
            if not fast_math:  # the e4m3 NaN codes are S.1111.111
                x = kd.where((s.to(kd.uint8, bitcast=True) & 0x7F) == 0x7F, float("nan"), x)
    return x
