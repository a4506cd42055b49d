"""Counter-based random numbers: Philox4x32 (and 4x64) with Random123's constants, bit for bit
the numbers Triton's `tl.randint`/`tl.rand` give for the same seed and offsets.

`randint4x(seed, offset)` runs Philox on the counter (offset's low 32 bits, its high 32 bits or
0, 0, 0) with the key (seed's low 32 bits, its high 32 bits), the seed taken as a uint64 (a
negative int32 seed sign-extends).  Each round multiplies two counter words by the round
constants, keeping the high and low halves of the 64-bit products, and bumps the key by the Weyl
constants.  `uint_to_uniform_float` maps a 32-bit word to [0, 1) as Triton does: the bits read
as an int32, negative values folded onto non-negative ones (-x - 1), times a float32 scale just
below 2**-31.  Everything is integer arithmetic on Tile IR ops, exact on every backend; only
`randn`'s log, sqrt and cos/sin round as each backend's math library does.
"""

from __future__ import annotations

from . import core as kd
from . import semantic
from .core import builtin
from .library import kd_function

N_ROUNDS_DEFAULT = 10

# Philox constants (Random123): Weyl key increments, then the round multipliers M0, M1.
_PHILOX32 = (0x9E3779B9, 0xBB67AE85, 0xD2511F53, 0xCD9E8D57)
_PHILOX64 = (0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B, 0xD2E7470EE14C6C93, 0xCA5A826395121157)
_LOW32 = 0xFFFFFFFF


@kd_function
def _mulhi(m, x):
    """High half of the product of the constant m and x (uint32 or uint64), unsigned."""
    if x.dtype == kd.uint32:
        return ((x.to(kd.uint64) * m) >> 32).to(kd.uint32)
    # 64 x 64 -> 128 bits from 32-bit halves: every partial product fits in 64 bits.
    m_lo = m & _LOW32
    m_hi = m >> 32
    x_lo = x & _LOW32
    x_hi = x >> 32
    lh = x_hi * m_lo
    hl = x_lo * m_hi
    mid = ((x_lo * m_lo) >> 32) + (lh & _LOW32) + (hl & _LOW32)
    return x_hi * m_hi + (lh >> 32) + (hl >> 32) + (mid >> 32)


@kd_function
def philox_impl(c0, c1, c2, c3, k0, k1, n_rounds=N_ROUNDS_DEFAULT):
    """`n_rounds` Philox rounds of the counter (c0, c1, c2, c3) under the key (k0, k1), all
    uint32 (Philox4x32) or all uint64 (Philox4x64)."""
    if c0.dtype == kd.uint32:
        consts = _PHILOX32
    else:
        kd.static_assert(c0.dtype == kd.uint64, "philox_impl needs uint32 or uint64 counters")
        consts = _PHILOX64
    w0 = consts[0]
    w1 = consts[1]
    m0 = consts[2]
    m1 = consts[3]
    for _ in kd.static_range(n_rounds):
        p0 = c0
        p2 = c2
        c0 = _mulhi(m1, p2) ^ c1 ^ k0
        c2 = _mulhi(m0, p0) ^ c3 ^ k1
        c1 = p2 * m1
        c3 = p0 * m0
        k0 = k0 + w0
        k1 = k1 + w1
    return c0, c1, c2, c3


def _uint_of_width(b, x, bits: int):
    """Value `x` reinterpreted as the unsigned type of `bits` bits."""
    x = semantic.to_value(b, x)
    udt = kd.uint32 if bits == 32 else kd.uint64
    if x.type.is_ptr or x.type.elem.bits != bits:
        raise semantic.error(f"philox: the four counters must have one width (32 or 64 bits); "
                             f"got {x.type.elem} next to a {bits}-bit counter")
    return semantic.cast(b, x, udt, bitcast=True)


def _seed(b, seed):
    """The seed as a uint64 scalar (an integer; a signed one sign-extends, as in Triton)."""
    dt = semantic.elem(seed)
    if semantic.shape(seed) or not (semantic.is_value(seed) or isinstance(seed, int)) \
            or dt.is_float or semantic.is_ptr(seed):
        raise semantic.error(f"the random seed must be an integer scalar, got "
                             f"{semantic.describe(seed)}")
    return semantic.cast(b, seed, kd.uint64)


@builtin
def philox(seed, c0, c1, c2, c3, n_rounds=N_ROUNDS_DEFAULT, _builder=None):
    """Philox of the counter (c0, c1, c2, c3) keyed by `seed`: 4x32 for 32-bit counters (key =
    the seed's low and high 32 bits), 4x64 for 64-bit ones (key = the seed and 0)."""
    b = _builder
    n_rounds = semantic._constexpr_int(n_rounds, "philox n_rounds")
    if n_rounds < 0:
        raise semantic.error(f"philox n_rounds must be >= 0, got {n_rounds}")
    s = _seed(b, seed)
    first = semantic.to_value(b, c0)
    bits = 0 if first.type.is_ptr else first.type.elem.bits
    if bits == 32:
        hi = semantic.cast(b, semantic.binary(b, "shr", s, 32), kd.uint32)
        lo = semantic.cast(b, s, kd.uint32)  # the low 32 bits
    elif bits == 64:
        # As Triton: the high key word is a tile of one element (results get at least [1]).
        hi, lo = semantic.full(b, (1,), 0, kd.uint64), s
    else:
        raise semantic.error(f"philox counters must be 32- or 64-bit integers, got "
                             f"{first.type.elem}")
    cs = [_uint_of_width(b, c, bits) for c in (first, c1, c2, c3)]
    return philox_impl(*cs, lo, hi, n_rounds, _builder=b)


@builtin
def _offsets(offset, _builder=None):
    """Random offsets: an integer tile or scalar."""
    x = semantic.to_value(_builder, offset)
    if x.type.is_ptr or x.type.elem.is_float:
        raise semantic.error(f"random offsets must be integers, got {semantic.describe(x)}")
    return x


@kd_function
def randint4x(seed, offset, n_rounds=N_ROUNDS_DEFAULT):
    """Four uint32 tiles of random bits for each offset (an integer tile or scalar)."""
    offset = _offsets(offset)
    lo = offset.to(kd.uint32)
    zero = lo * 0
    if offset.dtype.bits > 32:
        hi = (offset >> 32).to(kd.uint32)
    else:
        hi = zero
    return philox(seed, lo, hi, zero, zero, n_rounds)


@kd_function
def randint(seed, offset, n_rounds=N_ROUNDS_DEFAULT):
    """A uint32 tile of random bits for each offset (the first word of `randint4x`)."""
    r, _, _, _ = randint4x(seed, offset, n_rounds)
    return r


@kd_function
def uint_to_uniform_float(x):
    """A 32- or 64-bit random word -> float32 uniform in [0, 1)."""
    if x.dtype == kd.uint32 or x.dtype == kd.int32:
        x = x.to(kd.int32, bitcast=True)
        scale = 4.6566127342e-10  # the largest float32 with INT32_MAX * scale < 1
    else:
        kd.static_assert(x.dtype == kd.uint64 or x.dtype == kd.int64,
                         "uint_to_uniform_float needs 32- or 64-bit integers")
        x = x.to(kd.int64, bitcast=True)
        scale = 1.0842020432385337e-19
    x = kd.where(x < 0, -x - 1, x)
    return x * scale


@kd_function
def rand(seed, offset, n_rounds=N_ROUNDS_DEFAULT):
    """A float32 tile uniform in [0, 1) for each offset."""
    return uint_to_uniform_float(randint(seed, offset, n_rounds))


@kd_function
def rand4x(seed, offsets, n_rounds=N_ROUNDS_DEFAULT):
    """Four float32 tiles uniform in [0, 1) for each offset."""
    i1, i2, i3, i4 = randint4x(seed, offsets, n_rounds)
    return (uint_to_uniform_float(i1), uint_to_uniform_float(i2), uint_to_uniform_float(i3),
            uint_to_uniform_float(i4))


@kd_function
def pair_uniform_to_normal(u1, u2):
    """Box-Muller: two independent standard normals from two uniforms in [0, 1)."""
    u1 = kd.maximum(1.0e-7, u1)
    theta = 6.283185307179586 * u2
    radius = kd.sqrt(-2.0 * kd.log(u1))
    return radius * kd.cos(theta), radius * kd.sin(theta)


@kd_function
def randn(seed, offset, n_rounds=N_ROUNDS_DEFAULT):
    """A float32 tile of standard normals for each offset."""
    i1, i2, _, _ = randint4x(seed, offset, n_rounds)
    n1, _ = pair_uniform_to_normal(uint_to_uniform_float(i1), uint_to_uniform_float(i2))
    return n1


@kd_function
def randn4x(seed, offset, n_rounds=N_ROUNDS_DEFAULT):
    """Four float32 tiles of standard normals for each offset."""
    u1, u2, u3, u4 = rand4x(seed, offset, n_rounds)
    n1, n2 = pair_uniform_to_normal(u1, u2)
    n3, n4 = pair_uniform_to_normal(u3, u4)
    return n1, n2, n3, n4
