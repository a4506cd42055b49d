"""Philox random numbers on every backend, bit for bit against a NumPy Philox written here and
checked against Random123's published known-answer vectors (and, for 4x64, NumPy's own
Philox bit generator)."""

from __future__ import annotations

import numpy as np
import pytest

import kdsl as kd

# ----------------------------------------------------------------- the NumPy reference

M32 = (0xD2511F53, 0xCD9E8D57)  # round multipliers
W32 = (0x9E3779B9, 0xBB67AE85)  # Weyl key increments
M64 = (0xD2E7470EE14C6C93, 0xCA5A826395121157)
W64 = (0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B)
U32 = np.uint64(0xFFFFFFFF)


def philox4x32(ctr, key, rounds=10):
    """Philox4x32-`rounds` of counters (4 arrays) and key (2 values), as uint32 arrays; the
    products are exact in uint64."""
    c = [np.asarray(v, dtype=np.uint64) & U32 for v in ctr]
    k0, k1 = (np.uint64(int(v) & 0xFFFFFFFF) for v in key)
    for _ in range(rounds):
        lo_hi0 = np.uint64(M32[0]) * c[0]
        lo_hi1 = np.uint64(M32[1]) * c[2]
        c = [(lo_hi1 >> np.uint64(32)) ^ c[1] ^ k0, lo_hi1 & U32,
             (lo_hi0 >> np.uint64(32)) ^ c[3] ^ k1, lo_hi0 & U32]
        k0 = (k0 + np.uint64(W32[0])) & U32
        k1 = (k1 + np.uint64(W32[1])) & U32
    return [v.astype(np.uint32) for v in c]


def philox4x64(ctr, key, rounds=10):
    """Philox4x64-`rounds` with Python integers (128-bit products), element by element."""
    full = (1 << 64) - 1
    out = []
    for words in zip(*(np.asarray(v, dtype=np.uint64).tolist() for v in ctr)):
        c, k0, k1 = list(words), int(key[0]) & full, int(key[1]) & full
        for _ in range(rounds):
            p0, p1 = M64[0] * c[0], M64[1] * c[2]
            c = [(p1 >> 64) ^ c[1] ^ k0, p1 & full, (p0 >> 64) ^ c[3] ^ k1, p0 & full]
            k0, k1 = (k0 + W64[0]) & full, (k1 + W64[1]) & full
        out.append(c)
    return [np.array(col, dtype=np.uint64) for col in zip(*out)]


def triton_counters(offsets, wide: bool):
    """Triton's counter for an offset: (low 32 bits, high 32 bits of an int64 or 0, 0, 0)."""
    o = np.asarray(offsets, dtype=np.int64)
    lo = (o & 0xFFFFFFFF).astype(np.uint64)
    hi = ((o >> 32) & 0xFFFFFFFF).astype(np.uint64) if wide else np.zeros_like(lo)
    return [lo, hi, np.zeros_like(lo), np.zeros_like(lo)]


def triton_key(seed: int):
    s = seed % (1 << 64)  # the seed as a uint64 (a negative int sign-extends)
    return s & 0xFFFFFFFF, s >> 32


def uniform(bits: np.ndarray) -> np.ndarray:
    """Triton's uint_to_uniform_float of 32-bit words, in float32 arithmetic."""
    x = bits.view(np.int32).astype(np.int64)
    x = np.where(x < 0, -x - 1, x)
    return x.astype(np.float32) * np.float32(4.6566127342e-10)


KAT_4X32 = [  # Random123 kat_vectors, philox4x32 10 rounds: counter, key, result
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("ctr, key, want", KAT_4X32)
def test_reference_philox4x32_known_answers(ctr, key, want):
    got = philox4x32([np.array([v]) for v in ctr], key)
    assert [int(g[0]) for g in got] == list(want)


def test_reference_philox4x64_known_answer_and_numpy():
    got = philox4x64([np.array([0])] * 4, (0, 0))
    assert [int(g[0]) for g in got] == [0x16554D9ECA36314C, 0xDB20FE9D672D0FDC,
                                        0xD7E772CEE186176B, 0x7E68B68AEC7BA23B]
    # NumPy's Philox (4x64-10) increments its counter before each block
    ctr, key = [5, 77, 1 << 63, 123456789], [0xDEADBEEFCAFEBABE, 42]
    g = np.random.Philox(counter=np.array([ctr[0] - 1] + ctr[1:], np.uint64),
                         key=np.array(key, np.uint64))
    got = philox4x64([np.array([v], np.uint64) for v in ctr], key)
    assert [int(v[0]) for v in got] == [int(v) for v in g.random_raw(4)]


# ----------------------------------------------------------------------------- kernels


@kd.jit
def random_kernel(bits_ptr, u_ptr, seed, base, BLOCK: kd.constexpr):
    i = kd.arange(0, BLOCK)
    offs = base + i
    r0, r1, r2, r3 = kd.randint4x(seed, offs)
    kd.store(bits_ptr + i, r0)
    kd.store(bits_ptr + BLOCK + i, r1)
    kd.store(bits_ptr + 2 * BLOCK + i, r2)
    kd.store(bits_ptr + 3 * BLOCK + i, r3)
    kd.store(bits_ptr + 4 * BLOCK + i, kd.randint(seed, offs))
    kd.store(bits_ptr + 5 * BLOCK + i, kd.randint(seed, offs, n_rounds=7))
    kd.store(u_ptr + i, kd.rand(seed, offs))
    u0, _, _, u3 = kd.rand4x(seed, offs)
    kd.store(u_ptr + BLOCK + i, u0)
    kd.store(u_ptr + 2 * BLOCK + i, u3)
    kd.store(u_ptr + 3 * BLOCK + i, kd.uint_to_uniform_float(r1))
    # scalar offsets: a runtime one and a constant
    kd.store(bits_ptr + 6 * BLOCK, kd.randint(seed, base))
    kd.store(bits_ptr + 6 * BLOCK + 1, kd.randint(seed, 7))


# int32 and int64 seeds (negative ones sign-extend) with int32 and int64 offsets
SEED_BASE = [(0, 0), (12345, -100), (-1, 2**33 + 5), (2**40 + 7, -(2**33)), (-(2**40), 3)]


@pytest.mark.parametrize("seed, base", SEED_BASE)
def test_randint_rand_bit_exact(backend, seed, base):
    B = 64
    bits = np.zeros(6 * B + 2, np.uint32)
    u = np.zeros(4 * B, np.float32)
    random_kernel[(1,)](bits, u, seed, base, BLOCK=B, backend=backend)
    wide = not -2**31 <= base < 2**31
    offs = base + np.arange(B)
    key = triton_key(seed)
    want = philox4x32(triton_counters(offs, wide), key)
    for w in range(4):
        np.testing.assert_array_equal(bits[w * B:(w + 1) * B], want[w], err_msg=f"word {w}")
    np.testing.assert_array_equal(bits[4 * B:5 * B], want[0])
    np.testing.assert_array_equal(bits[5 * B:6 * B],
                                  philox4x32(triton_counters(offs, wide), key, rounds=7)[0])
    assert bits[6 * B] == philox4x32(triton_counters([base], wide), key)[0][0]
    assert bits[6 * B + 1] == philox4x32(triton_counters([7], False), key)[0][0]
    np.testing.assert_array_equal(u[:B].view(np.uint32), uniform(want[0]).view(np.uint32))
    np.testing.assert_array_equal(u[B:2 * B].view(np.uint32), uniform(want[0]).view(np.uint32))
    np.testing.assert_array_equal(u[2 * B:3 * B].view(np.uint32),
                                  uniform(want[3]).view(np.uint32))
    np.testing.assert_array_equal(u[3 * B:].view(np.uint32), uniform(want[1]).view(np.uint32))
    assert (u >= 0).all() and (u < 1).all()


@kd.jit
def rand2d_kernel(bits_ptr, u_ptr, seed, ROUNDS: kd.constexpr, M: kd.constexpr,
                  N: kd.constexpr):
    offs = kd.arange(0, M)[:, None] * N + kd.arange(0, N)[None, :]
    kd.store(u_ptr + offs, kd.rand(seed, offs, ROUNDS))
    _, _, r2, r3 = kd.randint4x(seed, offs, n_rounds=ROUNDS)
    kd.store(bits_ptr + offs, r2)
    kd.store(bits_ptr + M * N + offs, r3)


@pytest.mark.parametrize("rounds", [1, 6, 10])
def test_rand_2d_offsets_and_rounds(backend, rounds):
    M, N, seed = 4, 8, 99
    bits = np.zeros(2 * M * N, np.uint32)
    u = np.zeros(M * N, np.float32)
    rand2d_kernel[(1,)](bits, u, seed, ROUNDS=rounds, M=M, N=N, backend=backend)
    want = philox4x32(triton_counters(np.arange(M * N), False), triton_key(seed), rounds)
    np.testing.assert_array_equal(u.view(np.uint32), uniform(want[0]).view(np.uint32))
    np.testing.assert_array_equal(bits[:M * N], want[2])
    np.testing.assert_array_equal(bits[M * N:], want[3])


def test_uniform_extremes():
    # INT32_MAX and INT32_MIN (and the words around them) stay below 1.0
    words = np.array([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF], np.uint32)
    got = uniform(words)
    assert got.max() < 1.0 and got[0] == 0.0 and got[4] == 0.0


@kd.jit
def philox64_kernel(c_ptr, o_ptr, seed, BLOCK: kd.constexpr):
    i = kd.arange(0, BLOCK)
    c0 = kd.load(c_ptr + i)
    c1 = kd.load(c_ptr + BLOCK + i)
    c2 = kd.load(c_ptr + 2 * BLOCK + i)
    c3 = kd.load(c_ptr + 3 * BLOCK + i)
    r0, r1, r2, r3 = kd.philox(seed, c0, c1, c2, c3)
    kd.store(o_ptr + i, r0)
    kd.store(o_ptr + BLOCK + i, r1)
    kd.store(o_ptr + 2 * BLOCK + i, r2)
    kd.store(o_ptr + 3 * BLOCK + i, r3)


@pytest.mark.parametrize("seed", [0, -7, 2**31 + 3, 2**62 + 12345])
def test_philox4x64(backend, seed):
    B = 32
    rng = np.random.default_rng(7)
    c = rng.integers(0, 2**64, 4 * B, dtype=np.uint64)
    out = np.zeros(4 * B, np.uint64)
    philox64_kernel[(1,)](c, out, seed, BLOCK=B, backend=backend)
    want = philox4x64([c[w * B:(w + 1) * B] for w in range(4)], (seed, 0))
    for w in range(4):
        np.testing.assert_array_equal(out[w * B:(w + 1) * B], want[w], err_msg=f"word {w}")


@kd.jit
def randn_kernel(o_ptr, seed, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    kd.store(o_ptr + offs, kd.randn(seed, offs))
    _, n1, n2, _ = kd.randn4x(seed, offs)
    n = kd.num_programs(0) * BLOCK
    kd.store(o_ptr + n + offs, n1)
    kd.store(o_ptr + 2 * n + offs, n2)


def _box_muller(u1, u2):
    """Triton's pair_uniform_to_normal in float64 from float32 uniforms (the angle rounded to
    float32 as the kernel computes it); returns (z1, z2, a bound of the kernel's error)."""
    u1 = np.maximum(np.float32(1e-7), u1).astype(np.float64)
    th = (np.float32(6.283185307179586) * u2).astype(np.float64)
    r = np.sqrt(-2.0 * np.log(u1))
    eps = float(np.finfo(np.float32).eps)
    # log/sqrt/cos/sin within a few ulp: the angle's own ulp dominates near a zero of cos
    return r * np.cos(th), r * np.sin(th), 8 * eps * r * (1 + th)


def test_randn_statistics_and_box_muller(backend):
    B, G = 1024, 64
    seed = 2024
    out = np.zeros(3 * B * G, np.float32)
    randn_kernel[(G,)](out, seed, BLOCK=B, backend=backend)
    offs = np.arange(B * G)
    w = philox4x32(triton_counters(offs, False), triton_key(seed))
    z1, _, tol = _box_muller(uniform(w[0]), uniform(w[1]))
    assert np.all(np.abs(out[:B * G] - z1) <= tol)
    _, z2, tol = _box_muller(uniform(w[0]), uniform(w[1]))
    assert np.all(np.abs(out[B * G:2 * B * G] - z2) <= tol)
    z3, _, tol = _box_muller(uniform(w[2]), uniform(w[3]))
    assert np.all(np.abs(out[2 * B * G:] - z3) <= tol)
    for z in (out[:B * G], out[2 * B * G:]):  # 65536 samples: 5 standard errors
        assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02


def test_random_errors():
    @kd.jit
    def bad_seed(o_ptr):
        kd.store(o_ptr + kd.arange(0, 4), kd.rand(1.5, kd.arange(0, 4)))

    @kd.jit
    def bad_offsets(o_ptr):
        kd.store(o_ptr + kd.arange(0, 4), kd.rand(1, kd.arange(0, 4).to(kd.float32)))

    o = np.zeros(4, np.float32)
    with pytest.raises(kd.CompilationError, match="seed must be an integer") as e:
        bad_seed[(1,)](o, backend="interp")
    assert "kd.rand(1.5" in str(e.value)  # the kernel's line, not the library's
    with pytest.raises(kd.CompilationError, match="offsets must be integers"):
        bad_offsets[(1,)](o, backend="interp")
    with pytest.raises(RuntimeError, match="inside a @kd.jit kernel"):
        kd.randint(1, 2)
