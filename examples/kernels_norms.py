"""Library softmax, layer_norm and rms_norm on every available backend, in float32, float16 and
bfloat16, against the float64 references; then `out=`: one buffer reused across calls (no
fresh output, none of its page faults); then the host pool, which gives a large result's
memory to the next call once the earlier result is dropped.

    python examples/kernels_norms.py
"""

import kdsl.kernels as K
import numpy as np
from kdsl.kernels import reference as R

import kdsl as kd
from kdsl.testing import scale_of, tolerance


def main() -> None:
    rng = np.random.default_rng(0)
    base = rng.standard_normal((16, 1000)) * 2 + 1
    w, b = (rng.standard_normal(1000).astype(np.float32) for _ in range(2))
    for backend in kd.available_backends():
        for dtype in ("float32", "float16", "bfloat16"):
            x = R.cast(base, dtype)  # bfloat16: a bfloat16_view of uint16 bits
            errs = {
                "softmax": (K.softmax(x, backend=backend), R.softmax(x)),
                "layer_norm": (K.layer_norm(x, w, b, backend=backend), R.layer_norm(x, w, b)),
                "rms_norm": (K.rms_norm(x, w, backend=backend), R.rms_norm(x, w)),
            }
            # the library's rule (docs/numerics.md): float32 sums of 1000, one rounding
            tol = tolerance(dtype, 1000, acc_dtype="float32")
            line = "  ".join(f"{n} {np.abs(R.to_float64(y) - ref).max() / scale_of(ref):.2e}"
                             for n, (y, ref) in errs.items())
            print(f"{backend:7s} {dtype:9s} max error / max|ref|: {line}  "
                  f"(tolerance {tol.atol:.1e})")
    x = base.astype(np.float32)
    buf = np.empty_like(x)  # written in place by each call, and returned
    for name, params in (("softmax", ()), ("layer_norm", (w, b)), ("rms_norm", (w,))):
        fn = getattr(K, name)
        into = fn(x, *params, out=buf) is buf
        same = np.array_equal(buf, fn(x, *params))
        print(f"out=: {name} wrote into the caller's buffer: {into}, "
              f"equal to the new-array call: {same}")
    from kdsl.runtime import host_pool

    big = rng.standard_normal((8192, 1024)).astype(np.float32)  # 32 MiB: pooled
    y = K.softmax(big)
    addr = y.ctypes.data
    del y  # nothing references the result any more: its block is idle
    again = K.softmax(big).ctypes.data == addr
    print(f"host pool: the second 32 MiB softmax reused the first one's block: {again}; "
          f"held now: {host_pool.stats()}")

if __name__ == "__main__":
    main()
