"""CUDA code generation on a machine with no GPU: the CUDA C of a float16 matmul tile, its PTX
(tensor-core `mma.sync`), and the registers/spills ptxas reports, for sm_80 by default.

    python examples/cuda_codegen.py
"""

import numpy as np

import kdsl as kd


@kd.jit
def dot_tile(a_ptr, b_ptr, c_ptr, BM: kd.constexpr, BN: kd.constexpr, BK: kd.constexpr):
    rm, rn, rk = kd.arange(0, BM), kd.arange(0, BN), kd.arange(0, BK)
    a = kd.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = kd.load(b_ptr + rk[:, None] * BN + rn[None, :])
    kd.store(c_ptr + rm[:, None] * BN + rn[None, :], kd.dot(a, b))


def main() -> None:
    h, f = np.zeros(1, np.float16), np.zeros(1, np.float32)
    ck = dot_tile.compile(h, h, f, BM=64, BN=64, BK=32, backend="cuda", num_warps=4)
    print("\n".join(ck.source.splitlines()[:12]), "\n...")
    if "ptx" in ck.ir:  # needs NVRTC or nvcc, not a GPU
        mma = [ln.strip() for ln in ck.ir["ptx"].splitlines() if "mma.sync" in ln]
        print(f"\n{len(mma)} mma.sync instructions, e.g. {mma[0] if mma else None}")
        print("resources:", ck.ir["resources"])
    else:
        print("no CUDA compiler found: source only")


if __name__ == "__main__":
    main()
