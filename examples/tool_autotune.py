"""`@kd.autotune`: the fastest correct BLOCK for a row sum; a config that drops columns is
discarded by the correctness gate.  Timings are cached on disk: run it twice.

    python examples/tool_autotune.py
"""

import numpy as np

import kdsl as kd


@kd.autotune(configs=[kd.Config({"BLOCK": 256}), kd.Config({"BLOCK": 512}),
                      kd.Config({"BLOCK": 1024}), kd.Config({"BLOCK": 128})],
             key=["n_cols"])
@kd.jit
def row_sum(x_ptr, out_ptr, n_cols, BLOCK: kd.constexpr):
    row = kd.program_id(0)
    acc = kd.zeros((BLOCK,), kd.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + kd.arange(0, BLOCK)
        acc += kd.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    kd.store(out_ptr + row, kd.sum(acc, axis=0) if BLOCK != 128 else kd.sum(acc, axis=0) * 0.5)


if __name__ == "__main__":
    x = np.random.default_rng(0).standard_normal((256, 3000)).astype(np.float32)
    out = np.empty(256, np.float32)
    row_sum[(256,)](x, out, x.shape[1], backend="llvm")
    print("best:", row_sum.best_config)
    for cfg, t in row_sum.timings.items():
        print(f"  {cfg:<28} {t if isinstance(t, str) else f'{t:.3f} ms'}")
    np.testing.assert_allclose(out, x.astype(np.float64).sum(1), rtol=1e-4, atol=1e-3)
