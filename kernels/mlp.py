"""SwiGLU feed-forward block: `mlp(x, w_gate, w_up, w_down)` =
`(silu(x @ w_gate) * (x @ w_up)) @ w_down`.

Two kernels.  The first walks K once and feeds each loaded x tile to two dots (gate and up:
two float32 accumulators), then applies silu(gate) * up in its epilogue and stores the hidden
activation h [M, F] in x's dtype (as an inference engine keeps it).  The second is the library
matmul, h @ w_down.  Tiles and program order as in `matmul.py`.
"""

from __future__ import annotations

from typing import Any

import kdsl as kd

from . import configs
from ._index import wide_offsets, widen
from ._validate import FLOATS, as_arg, empty, resolve_backend, result, same_dtype
from .matmul import grouped_tile, launch_matmul


@kd.jit
def gate_up_kernel(x_ptr, wg_ptr, wu_ptr, h_ptr, M, F, K, BLOCK_M: kd.constexpr,
                   BLOCK_N: kd.constexpr, BLOCK_K: kd.constexpr, GROUP_M: kd.constexpr,
                   WIDE: kd.constexpr = False):
    # tile offsets in int64 only when WIDE (kernels/_index.py)
    pid_m, pid_n = grouped_tile(M, F, BLOCK_M, BLOCK_N, GROUP_M)
    rm = widen(pid_m * BLOCK_M + kd.arange(0, BLOCK_M), WIDE)
    rn = widen(pid_n * BLOCK_N + kd.arange(0, BLOCK_N), WIDE)
    rk = widen(kd.arange(0, BLOCK_K), WIDE)
    gate = kd.zeros((BLOCK_M, BLOCK_N), dtype=kd.float32)
    up = kd.zeros((BLOCK_M, BLOCK_N), dtype=kd.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + rk
        x = kd.load(x_ptr + rm[:, None] * K + ks[None, :],
                    mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        w_mask = (ks[:, None] < K) & (rn[None, :] < F)
        w_offs = ks[:, None] * F + rn[None, :]
        gate = kd.dot(x, kd.load(wg_ptr + w_offs, mask=w_mask, other=0.0), gate)
        up = kd.dot(x, kd.load(wu_ptr + w_offs, mask=w_mask, other=0.0), up)
    h = gate * kd.sigmoid(gate) * up
    kd.store(h_ptr + rm[:, None] * F + rn[None, :], h, mask=(rm[:, None] < M) & (rn[None, :] < F))


def mlp(x: Any, w_gate: Any, w_up: Any, w_down: Any, backend: str | None = None) -> Any:
    """SwiGLU MLP: x [M, D], w_gate and w_up [D, F], w_down [F, D_out] -> [M, D_out]."""
    x_ = as_arg("x", x, FLOATS, ndim=2)
    wg = as_arg("w_gate", w_gate, FLOATS, ndim=2)
    wu = as_arg("w_up", w_up, FLOATS, ndim=2)
    wd = as_arg("w_down", w_down, FLOATS, ndim=2, strided=True)  # matmul takes its layout
    same_dtype(x_, wg, wu, wd)
    M, K = x_.shape
    if wg.shape[0] != K:
        raise ValueError(f"w_gate: expected {K} rows (x's last dimension), got shape {wg.shape}")
    if wu.shape != wg.shape:
        raise ValueError(f"w_up: expected shape {wg.shape} (w_gate's), got {wu.shape}")
    F = wg.shape[1]
    if wd.shape[0] != F:
        raise ValueError(f"w_down: expected {F} rows (w_gate's columns), got shape {wd.shape}")
    be = resolve_backend(backend, x_, wg, wu, wd)
    h = empty(x_, (M, F), x_.dtype, "h")
    if M and F:
        # fewer rows than the tile: a tile of M's height (not below the backend's floor), not
        # masked rows computed and dropped (CPU, M = 128, F = 1024: 3.7 ms with 256 rows), as
        # quant_matmul does
        table = configs.table_for(configs.MLP, be, x_.dtype)
        meta = configs.fit_rows(configs.pick(table, be, M * F), M, be)
        grid = (kd.cdiv(M, meta["BLOCK_M"]) * kd.cdiv(F, meta["BLOCK_N"]),)
        wide = {"WIDE": True} if wide_offsets(x_, wg, wu, h) else {}
        gate_up_kernel[grid](x_.kernel_arg, wg.kernel_arg, wu.kernel_arg, h.kernel_arg, M, F, K,
                             backend=be, **wide, **meta)
    return result(launch_matmul(h, wd, None, 0, be))
