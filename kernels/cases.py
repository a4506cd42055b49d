"""The catalogue of library-kernel inputs: default shapes, input makers, costs and size sweeps
of every kernel in `kdsl.kernels` (for `kdsl compare`, `kdsl bench`, `kdsl dump NAME` and
`kd.testing.compare("softmax", ...)`).

    case = CASES["matmul"]
    args, kwargs = case.make(case.shape, "float32", np.random.default_rng(0))
    fn, ref = library_function("matmul")      # the kernel and its float64 reference

Shapes: softmax/norms (rows, cols), matmul (M, N, K), mlp (tokens, d, hidden), attention
(batch, heads, seq, dim), decode_attention (batch, heads, dim, seq, block), quant_matmul
(M, N, K, group).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

#: the library kernels whose output carries roundings of an intermediate to the input dtype
#: (docs/numerics.md): the `k_out` of their tolerance
LIBRARY_K_OUT = {"mlp": 2, "attention": 2, "decode_attention": 2, "quant_matmul": 2}


@dataclass(frozen=True)
class Case:
    """Default inputs and costs of one library kernel.

    `make(shape, dtype name, rng) -> (args, kwargs)`; `k(shape)` is the reduction length behind
    each output (the tolerance's k); `flops(shape)` and `bytes(shape, itemsize)` the work and
    the minimum memory traffic; `sweep(size) -> shape` the shapes of a size sweep."""

    make: Callable[[tuple, Any, Any], tuple[tuple, dict]]
    shape: tuple[int, ...]
    k: Callable[[tuple], int]
    flops: Callable[[tuple], float]
    bytes: Callable[[tuple, int], float]
    sweep: Callable[[int], tuple]


def _r(rng: Any, shape: tuple, dtype: str, scale: float = 1.0) -> Any:
    """Standard normal values * scale rounded to `dtype` in the library's spelling (bfloat16:
    a `bfloat16_view`)."""
    from .reference import cast
    return cast(rng.standard_normal(shape) * scale, dtype)


def _make_decode(s: tuple, dt: Any, rng: Any) -> tuple[tuple, dict]:
    batch, heads, dim, seq, block = s
    nblk = -(-seq // block)
    table = rng.permutation(batch * nblk).reshape(batch, nblk).astype(np.int32)
    kc = _r(rng, (batch * nblk, block, heads, dim), dt)
    vc = _r(rng, (batch * nblk, block, heads, dim), dt)
    lens = np.full(batch, seq, np.int32)
    return (_r(rng, (batch, heads, dim), dt), kc, vc, table, lens), {}


def _make_quant(s: tuple, dt: Any, rng: Any) -> tuple[tuple, dict]:
    m, n, k, group = s
    wq = rng.integers(-127, 128, (k, n)).astype(np.int8)
    scales = (rng.random((k // group, n)) * 0.02).astype(np.float32)
    return (_r(rng, (m, k), dt), wq, scales, group, 8), {}


def _make_block_sparse(s: tuple, dt: Any, rng: Any) -> tuple[tuple, dict]:
    m, n, k, block, _ = s
    nb = (k // block) * (n // block)
    layout = np.zeros(nb, bool)
    layout[rng.permutation(nb)[:_nnz(s)]] = True   # exactly _nnz(s) blocks (see flops)
    layout = layout.reshape(k // block, n // block)
    return (_r(rng, (m, k), dt), _r(rng, (_nnz(s), block, block), dt), layout, block), {}


def _nnz(s: tuple) -> int:
    """Nonzero blocks of a block_sparse_matmul case (M, N, K, block, percent dense)."""
    _, n, k, block, pct = s
    return round((k // block) * (n // block) * pct / 100)


def _make_24(s: tuple, dt: Any, rng: Any) -> tuple[tuple, dict]:
    from kdsl.kernels.reference import cast, sparsify_2_4
    m, n, k = s
    values, meta = sparsify_2_4(_r(rng, (k, n), dt))
    return (_r(rng, (m, k), dt), cast(values, dt), meta), {}


#: library kernel name -> its case (block_sparse_matmul: (M, N, K, block, percent of blocks
#: present), sparsify_2_4: (K, N), semi_structured_matmul: (M, N, K))
CASES: dict[str, Case] = {
    "softmax": Case(lambda s, dt, g: ((_r(g, s, dt),), {}), (64, 1000), lambda s: s[-1],
                    lambda s: 5.0 * s[0] * s[1], lambda s, b: 2.0 * s[0] * s[1] * b,
                    lambda n: (256, n)),
    "layer_norm": Case(lambda s, dt, g: ((_r(g, s, dt), _r(g, s[-1:], dt), _r(g, s[-1:], dt)),
                                         {}), (64, 1000), lambda s: s[-1],
                       lambda s: 8.0 * s[0] * s[1], lambda s, b: 2.0 * s[0] * s[1] * b,
                       lambda n: (256, n)),
    "rms_norm": Case(lambda s, dt, g: ((_r(g, s, dt), _r(g, s[-1:], dt)), {}), (64, 1000),
                     lambda s: s[-1], lambda s: 4.0 * s[0] * s[1],
                     lambda s, b: 2.0 * s[0] * s[1] * b, lambda n: (256, n)),
    "matmul": Case(lambda s, dt, g: ((_r(g, (s[0], s[2]), dt), _r(g, (s[2], s[1]), dt)), {}),
                   (128, 96, 160), lambda s: s[2], lambda s: 2.0 * s[0] * s[1] * s[2],
                   lambda s, b: (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]) * b,
                   lambda n: (n, n, n)),
    "mlp": Case(lambda s, dt, g: ((_r(g, (s[0], s[1]), dt), _r(g, (s[1], s[2]), dt, 0.1),
                                   _r(g, (s[1], s[2]), dt, 0.1),
                                   _r(g, (s[2], s[1]), dt, 0.1)), {}),
                (32, 64, 128), lambda s: s[1] + s[2], lambda s: 6.0 * s[0] * s[1] * s[2],
                lambda s, b: (2 * s[0] * s[1] + 3 * s[1] * s[2]) * b,
                lambda n: (n, n, 2 * n)),
    "attention": Case(lambda s, dt, g: ((_r(g, s, dt), _r(g, s, dt), _r(g, s, dt)), {}),
                      (1, 2, 64, 32), lambda s: s[2] + s[3],
                      lambda s: 4.0 * s[0] * s[1] * s[2] * s[2] * s[3],
                      lambda s, b: 4.0 * s[0] * s[1] * s[2] * s[3] * b,
                      lambda n: (1, 4, n, 64)),
    "decode_attention": Case(_make_decode, (2, 2, 32, 40, 16), lambda s: s[3] + s[2],
                             lambda s: 4.0 * s[0] * s[1] * s[3] * s[2],
                             lambda s, b: 2.0 * s[0] * s[1] * s[3] * s[2] * b,
                             lambda n: (4, 8, 64, n, 16)),
    "quant_matmul": Case(_make_quant, (16, 64, 128, 32), lambda s: s[2],
                         lambda s: 2.0 * s[0] * s[1] * s[2],
                         lambda s, b: s[0] * s[2] * b + s[2] * s[1] + s[0] * s[1] * b,
                         lambda n: (16, n, n, 32)),
    "block_sparse_matmul": Case(_make_block_sparse, (48, 128, 128, 32, 50), lambda s: s[2],
                                lambda s: 2.0 * s[0] * _nnz(s) * s[3] * s[3],
                                lambda s, b: (s[0] * s[2] + _nnz(s) * s[3] * s[3]
                                              + s[0] * s[1]) * b,
                                lambda n: (n, n, n, 64, 10)),
    "sparsify_2_4": Case(lambda s, dt, g: ((_r(g, s, dt),), {}), (256, 96), lambda s: 1,
                         lambda s: 0.0, lambda s, b: s[0] * s[1] * b + s[0] // 2 * s[1] * (b + 1),
                         lambda n: (n, n)),
    "semi_structured_matmul": Case(_make_24, (48, 96, 128), lambda s: s[2] // 2,
                                   lambda s: 1.0 * s[0] * s[1] * s[2],
                                   lambda s, b: (s[0] * s[2] + s[2] // 2 * s[1] + s[0] * s[1])
                                   * b + s[2] // 2 * s[1], lambda n: (n, n, n)),
}

#: `kdsl bench NAME` without --sizes sweeps these values of each case's size parameter (its
#: `sweep(n)`: row length, matrix size, sequence length, ...), small to large
DEFAULT_SWEEPS: dict[str, list[int]] = {
    "softmax": [256, 1024, 4096, 16384], "layer_norm": [256, 1024, 4096, 16384],
    "rms_norm": [256, 1024, 4096, 16384], "matmul": [128, 256, 512, 1024],
    "mlp": [64, 128, 256, 512], "attention": [128, 256, 512, 1024],
    "decode_attention": [64, 256, 1024], "quant_matmul": [256, 512, 1024, 2048],
    "block_sparse_matmul": [512, 1024, 2048], "sparsify_2_4": [1024, 4096],
    "semi_structured_matmul": [256, 512, 1024],
}


def library_kernels() -> list[str]:
    """Names of the cases whose kernel is present in `kdsl.kernels`."""
    try:
        import kdsl.kernels as K
    except Exception:
        return []
    return [n for n in CASES if callable(getattr(K, n, None))]


def library_function(name: str) -> tuple[Callable, Callable]:
    """(kernel, reference) of library kernel `name` from `kdsl.kernels`."""
    import kdsl.kernels as K
    fn = getattr(K, name, None)
    if fn is None or not callable(fn):
        raise ValueError(f"kdsl.kernels has no kernel {name!r}")
    from . import reference as R
    ref = getattr(R, name, None)
    if ref is None:
        raise ValueError(f"kdsl.kernels.reference has no reference {name!r}")
    return fn, ref


#: the dtypes the library kernels take (`--dtype` of `kdsl compare` and `kdsl bench`)
LIBRARY_DTYPES = ("float32", "float16", "bfloat16")
_DTYPE_ALIASES = {"f32": "float32", "fp32": "float32", "float": "float32", "f16": "float16",
                  "fp16": "float16", "half": "float16", "bf16": "bfloat16"}


def _name(dtype: Any) -> str:
    if isinstance(dtype, str):
        return dtype
    if hasattr(dtype, "kind") and hasattr(dtype, "bits"):  # kdsl DType
        return dtype.name
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)


def library_dtype(dtype: Any) -> str:
    """The library's name of `dtype` (a name, alias such as "bf16", NumPy or kdsl dtype);
    ValueError for a dtype the library kernels do not take."""
    name = _DTYPE_ALIASES.get(str(dtype), _name(dtype))
    if name not in LIBRARY_DTYPES:
        raise ValueError(f"dtype {dtype!r}: the library kernels take "
                         f"{', '.join(LIBRARY_DTYPES)}")
    return name


def itemsize(dtype: str) -> int:
    """Bytes per element of a library dtype."""
    return 2 if dtype in ("float16", "bfloat16") else np.dtype(dtype).itemsize


__all__ = ["CASES", "DEFAULT_SWEEPS", "LIBRARY_DTYPES", "LIBRARY_K_OUT", "Case", "itemsize",
           "library_dtype", "library_function", "library_kernels"]
