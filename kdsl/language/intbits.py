"""Integer bit functions of libdevice and `kd.math.umulhi`, as exact compositions of integer
Tile IR ops (shifts, masks, wrapping arithmetic) around the `clz`/`popc` primitives.

Each function takes `X` values of the dtype libdevice's signature names and returns an `X` of
the signature's result type.  Shifts of signed values are arithmetic, of unsigned ones logical
(as in C); arithmetic wraps.
"""

from __future__ import annotations

from ..ir.types import int32, int64, uint32, uint64
from .mathexpr import X, un, where

_UNSIGNED = {32: uint32, 64: uint64}
_SIGNED = {32: int32, 64: int64}


def _u(x: X) -> X:
    """The bit pattern of x as the unsigned type of its width."""
    u = _UNSIGNED[x.dtype.bits]
    return x if x.dtype == u else x.bits(u)


def clz(x: X) -> X:
    """Leading zero bits (int32 result; the width for 0)."""
    return un("clz", x).to(int32)


def popc(x: X) -> X:
    """Set bits (int32 result)."""
    return un("popc", x).to(int32)


def ffs(x: X) -> X:
    """1-based position of the least significant set bit, 0 for 0: x & -x isolates that bit,
    and width - clz(bit) is its position (width - width = 0 when x is 0)."""
    low = x & (-x)
    return (x.dtype.bits - un("clz", low)).to(int32)


_BREV_MASKS = [(1, 0x5555555555555555), (2, 0x3333333333333333), (4, 0x0F0F0F0F0F0F0F0F),
               (8, 0x00FF00FF00FF00FF), (16, 0x0000FFFF0000FFFF)]


def brev(x: X) -> X:
    """Bit reversal: swap adjacent bits, pairs, nibbles, bytes, ... (logical shifts)."""
    bits = x.dtype.bits
    u = _u(x)
    for s, m in _BREV_MASKS:
        if s >= bits // 2:
            break
        m &= (1 << bits) - 1
        u = ((u >> s) & m) | ((u & m) << s)
    u = (u >> (bits // 2)) | (u << (bits // 2))
    return u.bits(x.dtype) if u.dtype != x.dtype else u


def _umulhi64(a: X, c: X) -> X:
    """High 64 bits of the 128-bit product of two uint64, from 32-bit limbs (every partial
    product fits in 64 bits; the middle sum is below 3 * 2**32)."""
    m = 0xFFFFFFFF
    a_lo, a_hi, c_lo, c_hi = a & m, a >> 32, c & m, c >> 32
    p0, p1, p2, p3 = a_lo * c_lo, a_lo * c_hi, a_hi * c_lo, a_hi * c_hi
    mid = (p0 >> 32) + (p1 & m) + (p2 & m)
    return p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32)


def umulhi(x: X, y: X) -> X:
    """High half of the double-width product of the bit patterns read as unsigned (Triton's
    `umulhi`, for int32, uint32, int64 and uint64); the result has x's type."""
    bits = x.dtype.bits
    ux, uy = _u(x), _u(y)
    if bits == 32:
        hi = ((ux.to(uint64) * uy.to(uint64)) >> 32).to(uint32)
    else:
        hi = _umulhi64(ux, uy)
    return hi if hi.dtype == x.dtype else hi.bits(x.dtype)


def mulhi(x: X, y: X) -> X:
    """High half of the double-width product, signed for signed types (libdevice `mulhi`)."""
    t = x.dtype
    if t.bits == 32:
        wide = int64 if t.is_signed else uint64
        return ((x.to(wide) * y.to(wide)) >> 32).to(t)
    hi = _umulhi64(_u(x), _u(y))
    if not t.is_signed:
        return hi
    # signed high part = unsigned high part - (x < 0 ? y : 0) - (y < 0 ? x : 0)  (mod 2**64)
    zero = x.like(0, uint64)
    hi = hi - where(x < 0, _u(y), zero) - where(y < 0, _u(x), zero)
    return hi.bits(t)


def mul24(x: X, y: X) -> X:
    """Low 32 bits of the product of the low 24 bits of x and y (sign-extended for int32)."""
    if x.dtype.is_signed:
        return ((x << 8) >> 8) * ((y << 8) >> 8)
    return (x & 0xFFFFFF) * (y & 0xFFFFFF)


def hadd(x: X, y: X) -> X:
    """floor((x + y) / 2) without overflow."""
    return (x & y) + ((x ^ y) >> 1)


def rhadd(x: X, y: X) -> X:
    """ceil((x + y) / 2) without overflow."""
    return (x | y) - ((x ^ y) >> 1)


def sad(x: X, y: X, z: X) -> X:
    """|x - y| + z: the distance is exact in uint32 (it is below 2**32), the sum wraps; the
    result has x's type (libdevice: int32 for int32 x and y, uint32 for uint32)."""
    ux, uy = _u(x), _u(y)
    d = where(x > y, ux - uy, uy - ux)
    r = d + z
    return r if r.dtype == x.dtype else r.bits(x.dtype)


def byte_perm(x: X, y: X, s: X) -> X:
    """Byte i of the result is byte (s >> 4i) & 7 of the 8 bytes {y, x} (x the low word)."""
    v = (_u(y).to(uint64) << 32) | _u(x).to(uint64)
    r = None
    for i in range(4):
        sel = ((s >> (4 * i)) & 7).to(uint64)
        byte = (v >> (sel * 8)) & 0xFF
        byte = byte << (8 * i)
        r = byte if r is None else r | byte
    return r.to(uint32).bits(int32)
