"""Software pipelining of a K loop for CUDA, on a machine with no GPU: with `num_stages` N the
operand copies (`cp.async`) run in a ring of N shared-memory slots, N - 1 iterations ahead of
the tensor cores.  The example prints the K loop's copy, commit and wait statements for
N = 1 and N = 3, runs both in the Loop IR simulator (race detector on) against float64, and
counts `cp.async.wait_group` in the PTX when NVRTC or nvcc is there.

    python examples/cuda_pipeline.py
"""

import re
from collections import Counter

import numpy as np

import kdsl as kd
from kdsl.ir import loop
from kdsl.ir.loop_interp import run_kernel


@kd.jit
def k_loop(a_ptr, b_ptr, c_ptr, K, BM: kd.constexpr, BN: kd.constexpr, BK: kd.constexpr):
    rm, rn, rk = kd.arange(0, BM), kd.arange(0, BN), kd.arange(0, BK)
    a_tile = a_ptr + rm[:, None] * K + rk[None, :]
    b_tile = b_ptr + rk[:, None] * BN + rn[None, :]
    acc = kd.zeros((BM, BN), kd.float32)
    for kk in range(0, kd.cdiv(K, BK)):
        left = K - kk * BK
        a = kd.load(a_tile, mask=rk[None, :] < left, other=0.0)
        b = kd.load(b_tile, mask=rk[:, None] < left, other=0.0)
        acc = kd.dot(a, b, acc)
        a_tile += BK
        b_tile += BK * BN
    kd.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def _statements(stmts):
    for s in stmts:
        yield s
        for f in ("body", "then", "orelse", "cond_body"):
            yield from _statements(getattr(s, f, None) or [])


def main() -> None:
    rng = np.random.default_rng(0)
    K = 112  # three whole steps of 32 and a ragged one
    a = rng.standard_normal((32, K)).astype(np.float16)
    b = rng.standard_normal((K, 32)).astype(np.float16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    for stages in (1, 3):
        c = np.zeros((32, 32), np.float32)
        ck = k_loop.compile(a, b, c, K, BM=32, BN=32, BK=32, backend="cuda", num_warps=4,
                            num_stages=stages)
        body = list(_statements(ck.kernel.body))
        waits = sorted({s.pending for s in body if isinstance(s, loop.AsyncWait)})
        commits = sum(isinstance(s, loop.AsyncCommit) for s in body)
        copies = sum(isinstance(s, loop.AsyncCopy) for s in body)
        run_kernel(ck.kernel, (1,), [a, b, c, K])
        err = float(np.abs(c - ref).max())
        print(f"num_stages={stages}: {copies} copy statements, {commits} commits, waits for "
              f"{waits} pending groups; simulated, max error {err:.1e}")
        if "ptx" in ck.ir:  # needs NVRTC or nvcc, not a GPU
            groups = Counter(re.findall(r"cp\.async\.wait_group (\d+)", ck.ir["ptx"]))
            print("   PTX cp.async.wait_group N, by N:", dict(sorted(groups.items())))


if __name__ == "__main__":
    main()
