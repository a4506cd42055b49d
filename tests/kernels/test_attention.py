"""attention (flash forward) and decode_attention (paged KV cache): every dtype, ragged
sequence lengths and head dims, causal masking aligned to the end, grouped-query heads,
bad inputs (including a block table pointing past the cache)."""

import numpy as np
import pytest
from kcases import DTYPES, check, rand, skip_heavy
from kdsl.kernels import attention, configs, decode_attention
from kdsl.kernels import reference as R

from kdsl.runtime.launches import record_launches
from kdsl.testing import assert_close

# (batch, heads, kv_heads, seq_q, seq_k, dim, causal)
CASES = {
    "mha": (1, 2, 2, 19, 19, 16, False),
    "gqa_causal_prefix": (2, 4, 2, 7, 23, 24, True),
    "causal_square": (1, 2, 1, 33, 33, 32, True),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_attention(backend, rng, dtype, case):
    skip_heavy(backend, dtype)
    B, H, KVH, Sq, Sk, D, causal = CASES[case]
    q = rand(rng, (B, H, Sq, D), dtype)
    k, v = rand(rng, (B, KVH, Sk, D), dtype), rand(rng, (B, KVH, Sk, D), dtype)
    o = attention(q, k, v, causal=causal, backend=backend)
    check(o, R.attention(q, k, v, causal=causal), dtype, k=Sk, k_out=2)  # p is rounded


def test_attention_scale(backend, rng):
    q, k, v = (rand(rng, (1, 1, 5, 8), "float32") for _ in range(3))
    o = attention(q, k, v, scale=0.3, backend=backend)
    assert_close(o, R.attention(q, k, v, scale=0.3), k=5)


def test_attention_bad_inputs():
    q = np.zeros((1, 4, 8, 16), np.float32)
    kv3 = np.zeros((1, 3, 8, 16), np.float32)
    with pytest.raises(ValueError, match="3 kv heads do not divide 4"):
        attention(q, kv3, kv3)
    with pytest.raises(ValueError, match="k: expected shape"):
        attention(q, np.zeros((1, 4, 8, 12), np.float32), np.zeros((1, 4, 8, 12), np.float32))
    kv = np.zeros((1, 2, 8, 16), np.float32)
    with pytest.raises(ValueError, match="v: expected"):
        attention(q, kv, np.zeros((1, 2, 9, 16), np.float32))
    with pytest.raises(ValueError, match="causal: seq_q 8 > seq_k 4"):
        attention(q, kv[:, :, :4].copy(), kv[:, :, :4].copy(), causal=True)
    with pytest.raises(TypeError, match="k: dtype float16 differs"):
        attention(q, kv.astype(np.float16), kv)


def paged(rng, dtype, lens, block_size=16, kv_heads=2, dim=20, num_blocks=12):
    """A cache with the sequences' blocks scattered over it, and its block table."""
    max_blocks = max(1, max(-(-n // block_size) for n in lens))
    table = rng.permutation(num_blocks)[:len(lens) * max_blocks].reshape(len(lens), max_blocks)
    kc = rand(rng, (num_blocks, block_size, kv_heads, dim), dtype)
    vc = rand(rng, (num_blocks, block_size, kv_heads, dim), dtype)
    return kc, vc, table.astype(np.int32), np.array(lens, np.int32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_decode(backend, rng, dtype):
    skip_heavy(backend, dtype)
    kc, vc, table, lens = paged(rng, dtype, [5, 40, 0, 16])
    q = rand(rng, (4, 4, 20), dtype)
    o = decode_attention(q, kc, vc, table, lens, backend=backend)
    check(o, R.decode_attention(q, kc, vc, table, lens), dtype, k=40, k_out=2)
    assert (R.to_float64(o)[2] == 0).all()  # an empty sequence gives zeros


def test_decode_odd_block_size(backend, rng):
    kc, vc, table, lens = paged(rng, "float32", [7, 13], block_size=5, kv_heads=1, dim=8)
    q = rand(rng, (2, 3, 8), "float32")
    o = decode_attention(q, kc, vc, table, lens, scale=0.5, backend=backend)
    assert_close(o, R.decode_attention(q, kc, vc, table, lens, scale=0.5), k=13)


# (heads, kv_heads, block_size, dim): groups of 1, 2, 3 (padded to 4) and 8 query heads
GROUPS = [(4, 4, 16, 20), (4, 2, 16, 20), (6, 2, 5, 8), (8, 1, 16, 32)]


@pytest.mark.parametrize("heads,kv_heads,block_size,dim", GROUPS)
def test_decode_groups_follow_the_table(backend, rng, heads, kv_heads, block_size, dim):
    """A query-head group of at least configs.DECODE_GROUP_MIN runs one program per
    (sequence, kv head) (each cache block read once for the group); otherwise one per query
    head.  Ragged and empty sequences, odd block sizes and head dims."""
    kc, vc, table, lens = paged(rng, "float32", [5, 0, 40, 17], block_size=block_size,
                                kv_heads=kv_heads, dim=dim, num_blocks=40)
    q = rand(rng, (4, heads, dim), "float32")
    with record_launches() as launches:
        o = decode_attention(q, kc, vc, table, lens, scale=0.3, backend=backend)
    grouped = configs.decode_grouped(backend, heads // kv_heads)
    assert [ln.jit.fn.__name__ for ln in launches] == [
        "paged_decode_grouped_kernel" if grouped else "paged_decode_kernel"]
    assert_close(o, R.decode_attention(q, kc, vc, table, lens, scale=0.3), k=40)
    assert (o[1] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_grouped_kernel_on_every_backend(backend, rng, dtype, monkeypatch):
    """The grouped kernel itself (forced on every profile), in every dtype."""
    skip_heavy(backend, dtype)
    monkeypatch.setattr(configs, "DECODE_GROUP_MIN", {"default": 2})
    kc, vc, table, lens = paged(rng, dtype, [5, 40, 0, 16], kv_heads=2)
    q = rand(rng, (4, 6, 20), dtype)
    with record_launches() as launches:
        o = decode_attention(q, kc, vc, table, lens, backend=backend)
    assert [ln.jit.fn.__name__ for ln in launches] == ["paged_decode_grouped_kernel"]
    check(o, R.decode_attention(q, kc, vc, table, lens), dtype, k=40, k_out=2)
    assert (R.to_float64(o)[2] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_split_over_the_sequence(backend, rng, dtype, monkeypatch):
    """Flash-decoding (configs.decode_splits, the GPU profiles' few-program shapes), forced
    on every backend: runs of each sequence's blocks, combined by a second kernel; an empty
    sequence, runs that see no token (a short sequence split in 3) and a ragged last run."""
    skip_heavy(backend, dtype)
    monkeypatch.setattr(configs, "DECODE_SPLIT", {"default": {"PROGRAMS": 64, "MAX_SPLIT": 3,
                                                              "MIN_BLOCKS": 1}})
    monkeypatch.setattr(configs, "DECODE_GROUP_MIN", {})
    kc, vc, table, lens = paged(rng, dtype, [5, 40, 0, 33], kv_heads=2)
    q = rand(rng, (4, 4, 20), dtype)
    with record_launches() as launches:
        o = decode_attention(q, kc, vc, table, lens, backend=backend)
    assert [ln.jit.fn.__name__ for ln in launches] == ["paged_decode_kernel",
                                                       "decode_combine_kernel"]
    assert launches[0].kwargs["SPLIT"] == 3
    check(o, R.decode_attention(q, kc, vc, table, lens), dtype, k=40, k_out=2)
    assert (R.to_float64(o)[2] == 0).all()


def test_decode_bad_inputs(rng):
    kc, vc, table, lens = paged(rng, "float32", [5, 40])
    q = np.zeros((2, 4, 20), np.float32)
    bad = table.copy()
    bad[1, 2] = 12  # the cache has 12 blocks
    with pytest.raises(ValueError, match=r"block_table: entry \[1, 2\] = 12"):
        decode_attention(q, kc, vc, bad, lens)
    bad[1, 2] = -1
    with pytest.raises(ValueError, match="outside the cache"):
        decode_attention(q, kc, vc, bad, lens)
    unused = table.copy()
    unused[0, 2] = 99  # sequence 0 uses one block only: the entry is never read
    decode_attention(q, kc, vc, unused, lens)
    with pytest.raises(ValueError, match="seq_lens: sequence 1 has length 49"):
        decode_attention(q, kc, vc, table, np.array([5, 49], np.int32))
    with pytest.raises(TypeError, match="block_table: dtype int64"):
        decode_attention(q, kc, vc, table.astype(np.int64), lens)
    with pytest.raises(ValueError, match="seq_lens: expected shape"):
        decode_attention(q, kc, vc, table, np.array([5], np.int32))
    with pytest.raises(ValueError, match="head dim 20 differs from q's 16"):
        decode_attention(np.zeros((2, 4, 16), np.float32), kc, vc, table, lens)
