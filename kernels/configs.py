"""Tuning tables of the kernel library: which tile sizes and warps each kernel launches with,
per backend and problem size.

One table per kernel family, keyed by execution profile (never by backend name: a new
backend gets the rows of its profile); each row holds a size bound and the meta-parameters
used up to it (first matching row wins).  `pick(table, backend, size)` reads one.  These are
sane starting points, not tuned figures; an autotuner takes the rows of a profile as its
candidate `kd.Config`s (`candidates`).

Profiles (`profiles(backend)`, from the backend's declared facts, `backends/base.py`):
- "tile": a tile-level backend (the NumPy interpreter), where the cost is per op, not per
  element: the CPU's tiles or smaller (tests keep its shapes tiny).
- "cpu": one CPU thread per program (`is_cpu`); tiles become loops that LLVM vectorises, so a
  row kernel holds a whole row (<= 8192) and matmul blocks are 64x64x32, which keeps the three
  tiles (16 KiB + 8 KiB + 8 KiB in fp32) in L1/L2.
- "simt-cpu", "simt-gpu": a tile spread over num_warps * 32 work-items, on a CPU device (PoCL)
  or a GPU; without a row of its own, "default" (the GPU's).
"""

from __future__ import annotations

from typing import Any

Row = tuple[int, dict[str, Any]]
INF = 1 << 62

# Largest row held in one tile by the fused softmax / norms; longer rows loop (online softmax).
FUSED_ROW_MAX = 8192

ROW: dict[str, list[Row]] = {
    # size = row length (already a power of two: the tile)
    "default": [(1024, {"num_warps": 4}), (INF, {"num_warps": 8})],
    "cpu": [(INF, {"num_warps": 1})],
    "tile": [(INF, {"num_warps": 1})],
    # PoCL runs a work-group's work-items as loops split at every barrier: the fewest
    # work-items (one warp) cost least (measured 4-8x faster than 8 warps on softmax)
    "simt-cpu": [(INF, {"num_warps": 1})],
}
# Tile of the looping row kernels (online softmax, long-row norms).
ROW_LOOP_BLOCK: dict[str, int] = {"default": 2048, "cpu": 2048, "tile": 1024}

MATMUL: dict[str, list[Row]] = {
    # size = M * N of the output
    "default": [
        (64 * 64, {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4}),
        (INF, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4}),
    ],
    "cpu": [
        (32 * 32, {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 1}),
        (256 * 256, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8,
                     "num_warps": 1}),
        # 1024^2 and up: 128x128 with BLOCK_K 128.  With packed operands (lower_dot_cpu.py)
        # it beat 64x128x128 and 128x256x64 at 1024^3 and 2048^3 (benchmarks/RESULTS.md,
        # fifth round); the dot's arrays take ~320 KiB of the thread's stack.
        (INF, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 1}),
    ],
    "tile": [(INF, {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4,
                    "num_warps": 1})],
}

# Same shapes for the fused gate/up kernel and the dequantising matmul (two B tiles / one
# integer tile per step).
MLP = MATMUL
QUANT: dict[str, list[Row]] = {
    "default": [(INF, {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8,
                       "num_warps": 4})],
    "cpu": [(INF, {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8,
                   "num_warps": 1})],
    "tile": [(INF, {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4,
                    "num_warps": 1})],
}

QUANT["simt-cpu"] = [(bound, {**meta, "num_warps": 1}) for bound, meta in QUANT["default"]]

ATTENTION: dict[str, list[Row]] = {
    # size = seq_q
    "default": [(INF, {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4})],
    "cpu": [(16, {"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 1}),
            (INF, {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 1})],
    "tile": [(INF, {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 1})],
}

ATTENTION["simt-cpu"] = [(INF, {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 1})]

DECODE: dict[str, list[Row]] = {
    # size = head dim; the token tile is the cache block size
    "default": [(INF, {"num_warps": 2})],
    "cpu": [(INF, {"num_warps": 1})],
    "tile": [(INF, {"num_warps": 1})],
}


DECODE["simt-cpu"] = [(INF, {"num_warps": 1})]


def profiles(backend: str) -> tuple[str, ...]:
    """The table keys that apply to `backend`, most specific first ("default" last)."""
    from kdsl.backends import get_backend

    be = get_backend(backend)
    if be.level == "tile":
        return ("tile", "default")
    if be.is_cpu:
        return ("cpu", "default")
    return (f"simt-{be.device_kind()}", "default")


def _row(table: dict[str, Any], backend: str) -> Any:
    for key in profiles(backend):
        if key in table:
            return table[key]
    return table["default"]


def _rows(table: dict[str, list[Row]], backend: str) -> list[Row]:
    """The rows of `backend`'s profile on this machine's device, else the default."""
    return _row(table, backend)


def pick(table: dict[str, list[Row]], backend: str, size: int) -> dict[str, Any]:
    """Meta-parameters of the first row of `table[backend]` (else "default") covering `size`."""
    rows = _rows(table, backend)
    for bound, meta in rows:
        if size <= bound:
            return dict(meta)
    return dict(rows[-1][1])


def candidates(table: dict[str, list[Row]], backend: str) -> list[dict[str, Any]]:
    """Every distinct configuration listed for `backend` (an autotuner's search space)."""
    seen: list[dict[str, Any]] = []
    for _, meta in _rows(table, backend):
        if meta not in seen:
            seen.append(dict(meta))
    return seen


def row_loop_block(backend: str) -> int:
    return _row(ROW_LOOP_BLOCK, backend)


# Extra candidates the matmul autotuner tries beside the table rows (docs/kernels.md): the
# table's row for the problem size is always tried first and is the correctness reference.
MATMUL_SEARCH: dict[str, list[dict[str, Any]]] = {
    "default": [
        {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4},
        {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 8},
        {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4},
        {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4},
    ],
    "cpu": [
        {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 1},
        {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 1},
        {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 1},
        {"BLOCK_M": 32, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 1},
        {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 1},
    ],
    "tile": [],
}


def search_space(table: dict[str, list[Row]], search: dict[str, list[dict[str, Any]]],
                 backend: str, size: int) -> list[dict[str, Any]]:
    """The autotuner's candidates for a problem of `size`: the table's pick first (it is the
    reference the others must agree with), then the other rows and the extra candidates."""
    out = [pick(table, backend, size)]
    for meta in candidates(table, backend) + [dict(m) for m in _row(search, backend)]:
        if meta not in out:
            out.append(meta)
    return out
