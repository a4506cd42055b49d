"""Library attention: a causal grouped-query prefill (8 query heads, 2 kv heads, 16 new tokens
after a 48-token prefix), then one decode step over a paged KV cache, on every available
backend against the float64 references, naming the decode kernel each backend ran (on CPUs one
program per kv head serves its 4 query heads: each cache block is read once for the group).

    python examples/kernels_attention.py
"""

import kdsl.kernels as K
import numpy as np
from kdsl.kernels import reference as R

import kdsl as kd
from kdsl.runtime.launches import record_launches


def main() -> None:
    rng = np.random.default_rng(0)
    B, H, KVH, D = 2, 8, 2, 64
    q = rng.standard_normal((B, H, 16, D)).astype(np.float32)
    k, v = (rng.standard_normal((B, KVH, 64, D)).astype(np.float32) for _ in range(2))
    # paged cache: 20 blocks of 16 tokens; sequence 0 holds 37 tokens, sequence 1 holds 64
    kc, vc = (rng.standard_normal((20, 16, KVH, D)).astype(np.float32) for _ in range(2))
    table = np.array([[7, 2, 11, 0], [3, 19, 5, 8]], np.int32)
    lens = np.array([37, 64], np.int32)
    dq = rng.standard_normal((B, H, D)).astype(np.float32)
    for backend in kd.available_backends():
        o = K.attention(q, k, v, causal=True, backend=backend)
        with record_launches() as launches:
            d = K.decode_attention(dq, kc, vc, table, lens, backend=backend)
        print(f"{backend:7s} causal GQA prefill: max abs error "
              f"{np.abs(o - R.attention(q, k, v, causal=True)).max():.2e};  paged decode: "
              f"{np.abs(d - R.decode_attention(dq, kc, vc, table, lens)).max():.2e} "
              f"({launches[0].jit.fn.__name__})")
    bad = table.copy()
    bad[1, 3] = 20
    try:
        K.decode_attention(dq, kc, vc, bad, lens)
    except ValueError as e:
        print(f"checked before launch: {e}")


if __name__ == "__main__":
    main()
