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

from kdsl.backends import get_backend

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
# Tile of the online softmax (16-bit rows above FUSED_ROW_MAX on CPUs: its per-step rescale
# is an exp, which 2048-wide steps amortise: f16 rows of 16384-65536 on Emerald Rapids 6.2-6.5
# ms against 7.0-7.1 at 256).
ROW_LOOP_BLOCK: dict[str, int] = {"default": 2048, "cpu": 2048, "tile": 1024}
# The norms: a row longer than NORM_ROW_MAX (float32 rows; 16-bit ones up to FUSED_ROW_MAX) is
# walked in NORM_LOOP_BLOCK steps, each pass re-reading x from the cache, instead of being held
# in one tile (whose stack copy costs a load and a store per element).  8192 x 4096 in all,
# two threads, Emerald Rapids: float32 rows of 1024-4096 in 256-wide steps 13.1-14.2 ms
# (layer_norm 13.8-14.6) against 14.0-15.0 (14.6-15.7) for the row tile; rows of 16384-65536
# 15.5-16.2 (16.5-16.9) at 256 against 16.6-17.6 (19.6-19.7) at 2048; float16 rows of 4096
# and float32 rows of 300 are faster as one tile (6.7 against 7.2 ms, 10.7 against 11.1).
NORM_ROW_MAX: dict[str, int] = {"default": FUSED_ROW_MAX, "cpu": 1023}
NORM_LOOP_BLOCK: dict[str, int] = {"default": 2048, "cpu": 256, "tile": 1024}
# Step of the CPU float32 softmax's three passes (`softmax_scratch_kernel`), by row length;
# profiles without rows use the fused / online kernels.  Rows of 2**24 elements in all, two
# threads, Emerald Rapids: a 300-wide row 10.4 ms in steps of 64 against 20 in steps of 128
# (the masked last step does a whole step's work), 1000-1024 wide 6.4-8.2 ms at 128 against
# 6.5-10.0 at 64, 4096-8192 wide 7.5-8.2 ms at 256 against 7.8-8.7 at 128; the fused kernel
# 9.1-11.7 ms (38 at 300 wide), the online one 8.9-9.2 on rows of 16384 to 262144.
# Shorter rows keep the fused kernel: one tile, the cheapest program (a 4 x 8 softmax 1 us
# faster a call than in three passes).
SCRATCH_ROW_MIN = 64
SCRATCH_ROW: dict[str, list[Row]] = {
    "cpu": [(511, {"BLOCK": 64}), (2047, {"BLOCK": 128}), (INF, {"BLOCK": 256})],
    "default": [],
}

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
        (512 * 512, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8,
                     "num_warps": 1}),
        # 1024^2: 256x256 with BLOCK_K 64.  Each program copies its A and B tiles into
        # registers every step, a copy bound by L1 misses (12-17% of a 128^3 step even with
        # both matrices in L2); a tile used 256 times instead of 128 halves it.  On Emerald
        # Rapids, two threads, interleaved: 1.2-1.4x faster than 128x128x128 at 1024^3,
        # 1.18x at 2048^3, 1.14x at 4096^3 (benchmarks/RESULTS.md, 2026-12-03); the dot's
        # arrays take ~400 KiB of the thread's stack.
        (1024 * 1024, {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8,
                       "num_warps": 1}),
        # Above: 256x512, B's copy used by 256 rows and A's by 512 (two threads: 4096^3
        # 588-618 -> 554-561 ms, 2048^3 71 -> 69-71; 1024^3 17.1-17.7 -> 18.4-18.6, hence
        # the row above); ~700 KiB of stack.
        (INF, {"BLOCK_M": 256, "BLOCK_N": 512, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 1}),
    ],
    "tile": [(INF, {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4,
                    "num_warps": 1})],
}

# bfloat16 matmul where the backend computes bfloat16 dots on a matrix unit (the llvm backend
# on a CPU with AMX: kdsl/lowering/dot_tile.py): BLOCK_K 256 (a multiple of the unit's 32), so
# that each output block's accumulator tiles stay in the unit for 8 of its K steps before the
# dot's output array is read and written again.  Emerald Rapids, two threads, the library
# kernel alone (2026-12-07): 512^3 128 x 128 613 GFLOP/s (256 x 256 402), 1024^3 256 x 128
# 1020 (128 x 128 834), 2048^3 256 x 256 1288, 4096^3 256 x 512 1369 (256 x 256 1308; BLOCK_K
# 512 1220).  Profiles without a row use MATMUL.
MATMUL_TILE: dict[str, list[Row]] = {
    "default": [],
    "cpu": [
        (256 * 256, {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 256, "GROUP_M": 8,
                     "num_warps": 1}),
        (512 * 512, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 256, "GROUP_M": 8,
                     "num_warps": 1}),
        (1024 * 1024, {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 256, "GROUP_M": 8,
                       "num_warps": 1}),
        (2048 * 2048, {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 256, "GROUP_M": 8,
                       "num_warps": 1}),
        (INF, {"BLOCK_M": 256, "BLOCK_N": 512, "BLOCK_K": 256, "GROUP_M": 8,
               "num_warps": 1}),
    ],
}
# The fused gate/up kernel (two B tiles and two accumulators per step): 256x128x64 above
# 256^2 outputs.  SwiGLU 512x2048x5504, Emerald Rapids, two threads, interleaved with torch:
# 145-153 ms against 155-170 for 128x128x128; 128x256x64 158-160, 256x256x64 177-181, 64x256x128
# 174 (2026-12-03).  ~380 KiB of the thread's stack.
MLP: dict[str, list[Row]] = {
    **MATMUL,
    "cpu": [row for row in MATMUL["cpu"] if row[0] <= 256 * 256] + [
        (INF, {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 1})],
}
# bfloat16 gate/up on a matrix unit (two accumulators, see MATMUL_TILE): SwiGLU 512 x 2048 x
# 5504, Emerald Rapids, two threads, the kernel alone: 256 x 256 x 256 23.3 ms (256 x 128 x 256
# 24.1, 128 x 128 x 256 26.1, the float32 row's 256 x 128 x 64 32.1; torch 26.0 ms).
MLP_TILE: dict[str, list[Row]] = {
    "default": [],
    "cpu": [row for row in MATMUL_TILE["cpu"] if row[0] <= 512 * 512] + [
        (INF, {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 256, "GROUP_M": 8,
               "num_warps": 1})],
}
# the dot kinds of a matrix unit: input dtype -> the target capability (kdsl/lowering/dot_tile.py)
MATRIX_UNIT_CAPS = {"bfloat16": "tile_dot_bf16", "int8": "tile_dot_int8"}
# table -> the table that replaces it for dtypes a matrix unit computes
MATRIX_TABLES: tuple[tuple[dict[str, list[Row]], dict[str, list[Row]]], ...] = (
    (MATMUL, MATMUL_TILE), (MLP, MLP_TILE))
_MATRIX: dict[tuple[Any, str], bool] = {}


def matrix_unit(backend: str, dtype: str) -> bool:
    """Whether `backend` computes dots of `dtype` inputs on a matrix unit (decided once per
    process and backend: KDSL_LLVM_MATRIX is read when kernels compile)."""
    be = get_backend(backend)
    got = _MATRIX.get((be, dtype))
    if got is None:
        cap = MATRIX_UNIT_CAPS.get(dtype)
        got = _MATRIX[(be, dtype)] = cap is not None and be.target(1).has(cap)
    return got


def table_for(table: dict[str, list[Row]], backend: str, dtype: str) -> dict[str, list[Row]]:
    """`table`, or its matrix-unit table (MATRIX_TABLES) where `backend` computes dots of
    `dtype` on a matrix unit and that table has a row for the backend's profile."""
    for plain, tile in MATRIX_TABLES:
        if plain is table and matrix_unit(backend, dtype) and _rows(tile, backend):
            return tile
    return table


QUANT: dict[str, list[Row]] = {
    "default": [(INF, {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8,
                       "num_warps": 4})],
    # 64x128x64 (was 32x64x32): faster at M = 1, 16 and 256 (int4, K = N = 4096) in
    # interleaved runs on an Emerald Rapids host; `fit_rows` cuts BLOCK_M for small M
    # (benchmarks/RESULTS.md, 2026-12-01).
    "cpu": [(INF, {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8,
                    "num_warps": 1})],
}

# M = 1 (quant.py `quant_matvec_kernel`, per-column fused multiply-adds over each scale
# group's rows): on one-thread CPU targets only.  Weights cold (a 64 MiB write between calls,
# as when decoding streams a model larger than the cache), the longer each row's strip the
# better the hardware prefetchers follow it.  No prefetch hints: they slowed every matvec
# shape (a tile of next-step hints 2.2x, the loop rewrite's 1.4x, int4 4096^2, 2026-12-03).
# Elsewhere (a GPU, a work-group OpenCL device) M = 1 takes the dot path ({}: no matvec).
QUANT_MATVEC: dict[str, list[Row]] = {
    "default": [(INF, {})],
    # strips of at most 2048 columns: each program's rows are 2 KiB runs of their 4 KiB
    # pages, which the L2 streamer follows (Emerald Rapids, int4, two threads, cold: 2048 x 64
    # 0.96-1.00 ms, 1024 x 128 1.06-1.33, 512 x 64 1.67-2.00; 2026-12-03), narrowed to the
    # device's parallelism by `matvec_meta`
    "cpu": [(INF, {"BLOCK_N": 2048, "num_warps": 1, "num_stages": 1})],
}

QUANT["simt-cpu"] = [(bound, {**meta, "num_warps": 1}) for bound, meta in QUANT["default"]]

# 2 <= M <= 16 rows (decoding a batch, speculative verification) on one-thread CPU targets,
# keyed by M: the CPU dot evaluates the dequantised weights where its FMA loop reads them
# (kdsl/lowering/dot_cpu.py `row_shape`), so the tile holds no dequantised copy and may span
# long strips of each weight row, as the M = 1 matvec's do: 2048 columns (narrowed to the
# device's parallelism by `_strips`), 32 rows of k per step, each scale group's sum scaled
# once (kernels/quant.py `quant_rows_kernel`).  int8, K = N = 4096, two threads, cold,
# Emerald Rapids (2026-12-07): M = 2 / 4 / 8 / 16 in 0.97 / 1.08 / 1.71 / 3.08 ms, against
# 1.99 / 2.16 / 2.90 / 4.75 with the 64 x 128 x 64 tiles of `QUANT` (benchmarks/RESULTS.md).
QUANT_FEW_ROWS: dict[str, list[Row]] = {
    "default": [(INF, {})],
    "cpu": [(16, {"BLOCK_N": 2048, "BLOCK_K": 32, "num_warps": 1}), (INF, {})],
}

#: The narrowest matvec strip `matvec_meta` cuts to (a row of 128 bytes of int8 weights).
MATVEC_MIN_BLOCK = 128


def matvec_meta(backend: str, N: int) -> dict[str, Any]:
    """The M = 1 quant kernel's meta for N columns ({}: no matvec on `backend`): the table
    row's BLOCK_N is the widest strip; it is narrowed so that the strips are no fewer than
    the programs the device runs at once (`Backend.parallelism`).  The fused multiply-add
    matvec, int4, K = 4096, two threads, cold (Emerald Rapids, 2026-12-03): N = 1024 in
    512-wide strips 0.33 ms against 0.47 in 128-wide ones, N = 2048 in 1024-wide 0.40 against
    0.56 in 256-wide; N = 11008 in 2048-wide strips 2.0 ms against 2.5 in 4096-wide (three
    strips for two threads)."""
    return _strips(pick(QUANT_MATVEC, backend, N), backend, N)


def _strips(meta: dict[str, Any], backend: str, N: int) -> dict[str, Any]:
    """`meta` with its BLOCK_N (the widest strip of columns) narrowed so that the strips are
    no fewer than the programs the device runs at once (`Backend.parallelism`)."""
    par = get_backend(backend).parallelism() if meta else 0
    if par:
        share = _pow2(-(-N // par))
        meta["BLOCK_N"] = max(MATVEC_MIN_BLOCK, min(meta["BLOCK_N"], share))
    return meta


def quant_rows_meta(backend: str, M: int, N: int, group_size: int) -> dict[str, Any]:
    """The meta of `quant_rows_kernel` (a few rows on one-thread CPU targets, scaled once per
    group) for M x N outputs, or {}: no `QUANT_FEW_ROWS` row for M, or a group size that is
    not a multiple of the table's BLOCK_K.  16-bit activations too, where a matrix unit
    would take the dequantising kernel's dot (its tiles are 16 rows: 4 rows of bfloat16 x
    ran the FMA fallback with the dequantised tile, 2.5 ms against 1.0 here)."""
    few = pick(QUANT_FEW_ROWS, backend, M)
    if not few or group_size % few["BLOCK_K"]:
        return {}
    return {**_strips(few, backend, N), "BLOCK_M": row_height(M, backend)}


# Split-K of the dequantising quant kernel (a few rows on a device that runs many programs at
# once: a decode step's M = 1..16 with N / BLOCK_N tiles leaves most of a GPU's SMs idle while
# each tile walks all of K): the profile's least number of programs to reach, the most runs
# of K, and the fewest BLOCK_K steps a run keeps; {} or absent: no split (the CPU profiles,
# whose threads the tiles already outnumber or whose few-rows kernels take those shapes).
QUANT_SPLIT_K: dict[str, dict[str, int]] = {
    "default": {"PROGRAMS": 256, "MAX_SPLIT": 8, "MIN_STEPS": 2},
    "cpu": {},
    "tile": {},
    "simt-cpu": {},
}


def quant_split_k(backend: str, tiles: int, K: int, block_k: int) -> int:
    """Runs of K for `tiles` output tiles of the dequantising quant kernel (1: no split)."""
    row = _row(QUANT_SPLIT_K, backend)
    if not row or tiles >= row["PROGRAMS"]:
        return 1
    steps = -(-K // block_k)
    return max(1, min(row["MAX_SPLIT"], -(-row["PROGRAMS"] // tiles),
                      steps // row["MIN_STEPS"]))


def quant_meta(backend: str, M: int, N: int, dtype: str) -> dict[str, Any]:
    """The tile of `quant_matmul_kernel` for M x N outputs from x of `dtype`: `QUANT`'s, cut
    to M rows (`fit_rows`), with `QUANT_FEW_ROWS`' strips for a few rows where the dot is the
    CPU's FMA micro-kernel (not a matrix unit, whose packed copies want `QUANT`'s tiles)."""
    meta = fit_rows(pick(QUANT, backend, M * N), M, backend)
    few = {} if matrix_unit(backend, dtype) else pick(QUANT_FEW_ROWS, backend, M)
    return {**meta, **_strips(few, backend, N)} if few else meta


ATTENTION: dict[str, list[Row]] = {
    # size = seq_q
    "default": [(INF, {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4})],
    # 64x64 from seq_q 33 up: 1.27x (1.29x causal) faster than 32x32 with the 512-bit
    # micro-kernel (8 heads x 1024 x 64, Emerald Rapids, interleaved; benchmarks/RESULTS.md,
    # 2026-12-01); BLOCK_N changes the online-softmax rescaling steps (results within an ulp).
    # 128x64 from seq_q 128 up (2026-12-02, block-transposed k, two threads): 1.23x faster
    # than 64x64 at 8 x 1024 x 64 (1.24x causal, 1.06x causal at seq 4096, equal at 256):
    # each k/v tile loaded and transposed once per 128 queries.
    "cpu": [(16, {"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 1}),
            (32, {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 1}),
            (127, {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 1}),
            (INF, {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 1})],
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

#: The smallest query-head group (heads // kv_heads) that decode_attention serves with one
#: program per (sequence, kv head) (`paged_decode_grouped_kernel`: a cache block read once
#: per group, not once per query head) on each profile; absent: one program per query head.
DECODE_GROUP_MIN: dict[str, int] = {"cpu": 2}


# Flash-decoding: where the (sequence, head) programs of a decode step are fewer than the
# profile's PROGRAMS (a GPU's SMs with room to spare: batch 1 x 32 heads on 132 SMs), each
# sequence's cache blocks are walked in runs of at least MIN_BLOCKS blocks by up to MAX_SPLIT
# programs and combined by a second kernel; {}: no split (the CPU profiles, whose threads the
# heads already outnumber).
DECODE_SPLIT: dict[str, dict[str, int]] = {
    "default": {"PROGRAMS": 264, "MAX_SPLIT": 16, "MIN_BLOCKS": 4},
    "cpu": {},
    "tile": {},
    "simt-cpu": {},
}


def decode_splits(backend: str, programs: int, max_blocks: int) -> int:
    """Runs of a sequence's cache blocks for `programs` (sequence, head) programs whose block
    tables hold `max_blocks` blocks (1: no split)."""
    row = _row(DECODE_SPLIT, backend)
    if not row or programs >= row["PROGRAMS"]:
        return 1
    return max(1, min(row["MAX_SPLIT"], -(-row["PROGRAMS"] // programs),
                      max_blocks // row["MIN_BLOCKS"]))


def decode_grouped(backend: str, group: int) -> bool:
    """Whether decode_attention on `backend` runs the grouped kernel for `group` query heads
    per kv head."""
    least = next((DECODE_GROUP_MIN[k] for k in profiles(backend) if k in DECODE_GROUP_MIN),
                 None)
    return least is not None and group >= least


#: backend instance -> its `profiles` (asked on every library call: kept per instance)
_PROFILES: dict[Any, tuple[str, ...]] = {}


def profiles(backend: str) -> tuple[str, ...]:
    """The table keys that apply to `backend`, most specific first ("default" last)."""
    be = get_backend(backend)
    try:
        return _PROFILES[be]
    except KeyError:
        pass
    if be.level == "tile":
        keys = ("tile", "default")
    elif be.is_cpu:
        keys = ("cpu", "default")
    else:
        keys = (f"simt-{be.device_kind()}", "default")
    _PROFILES[be] = keys
    return keys


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
    return dict(_covering(_rows(table, backend), size))


def _covering(rows: list[Row], size: int) -> dict[str, Any]:
    """The meta of the first of `rows` whose bound covers `size` (else the last row's)."""
    return next((meta for bound, meta in rows if size <= bound), rows[-1][1])


def _pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(n - 1, 0).bit_length()


def candidates(table: dict[str, list[Row]], backend: str) -> list[dict[str, Any]]:
    """Every distinct configuration listed for `backend` (an autotuner's search space)."""
    seen: list[dict[str, Any]] = []
    for _, meta in _rows(table, backend):
        if meta not in seen:
            seen.append(dict(meta))
    return seen


# Smallest BLOCK_M `fit_rows` cuts to, per backend: the CPU dot has no minimum (a one-row tile
# is a GEMV: no padding rows computed and thrown away); GPU dots keep 16 rows (tensor-core mma
# tiles are 16 rows high).
MIN_BLOCK_M: dict[str, int] = {"default": 16, "cpu": 1, "tile": 1}


def row_height(M: int, backend: str) -> int:
    """The tallest BLOCK_M a problem of M rows needs: the smallest power of two >= M, not below
    the backend's MIN_BLOCK_M."""
    floor = next(MIN_BLOCK_M[k] for k in profiles(backend) if k in MIN_BLOCK_M)
    return max(floor, _pow2(M))


def fit_rows(meta: dict[str, Any], M: int, backend: str) -> dict[str, Any]:
    """`meta` with BLOCK_M cut to `row_height(M)`: a problem of few rows, such as decoding
    with M = 1, gets a tile of its height instead of 16-64 masked rows."""
    rows = row_height(M, backend)
    if "BLOCK_M" in meta and rows < meta["BLOCK_M"]:
        meta = {**meta, "BLOCK_M": rows}
    return meta


def row_loop_block(backend: str) -> int:
    return _row(ROW_LOOP_BLOCK, backend)


def norm_block(backend: str, n: int, dtype: str) -> tuple[int, bool]:
    """(BLOCK, whether the row is walked in steps of it) for a norm over rows of `n`."""
    whole = _row(NORM_ROW_MAX, backend) if dtype == "float32" else FUSED_ROW_MAX
    if n <= whole:
        return _pow2(n), False
    return _row(NORM_LOOP_BLOCK, backend), True


def scratch_row_block(backend: str, n: int) -> int | None:
    """The step of the three-pass softmax for rows of `n` elements, None where `backend`'s
    profile has no such rows or the row is shorter than SCRATCH_ROW_MIN."""
    rows = _rows(SCRATCH_ROW, backend)
    if not rows or n < SCRATCH_ROW_MIN:
        return None
    return _covering(rows, n)["BLOCK"]


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
        {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 1},
    ],
    "tile": [],
}


def search_space(table: dict[str, list[Row]], search: dict[str, list[dict[str, Any]]],
                 backend: str, size: int, M: int | None = None) -> list[dict[str, Any]]:
    """The autotuner's candidates for a problem of `size`: the table's pick first (it is the
    reference the others must agree with), then the other rows and the extra candidates;
    with `M`, each cut to M's height (`fit_rows`), duplicates dropped."""
    fit = (lambda m: m) if M is None else (lambda m: fit_rows(m, M, backend))
    out = [fit(pick(table, backend, size))]
    for meta in candidates(table, backend) + [dict(m) for m in _row(search, backend)]:
        meta = fit(meta)
        if meta not in out:
            out.append(meta)
    return out


# ------------------------------------------------------------------------------ sparse
# Tables of kernels/sparse.py (a block of their own).

# block_sparse_matmul, size = M.  BLOCK_N and BLOCK_K are caps: the kernel uses the largest
# power of two dividing the block up to them (a tile never straddles two blocks).
BLOCK_SPARSE: dict[str, list[Row]] = {
    "default": [(INF, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8,
                       "num_warps": 4})],
    # 64 rows: at 2048^3, 10% dense, as fast as 128 for blocks of 64 and 128 and faster for
    # 32 (17.8 vs 14.0 GFLOP/s) and 16 (with row-pointer tile reads, kernels/sparse.py)
    "cpu": [(INF, {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8,
                    "num_warps": 1})],
    "tile": [(INF, {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4,
                      "num_warps": 1})],
    "simt-cpu": [(INF, {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8,
                          "num_warps": 1})],
}

# semi_structured_matmul, size = M * N.  A row with BLOCK_K runs the panel kernel
# (kd.sparse_dot, BLOCK_K of K per step); one with GROUPS the portable gather-FMA kernel
# (GROUPS groups of 4 rows of K per step: 1, 2 or 4).
SEMI_STRUCTURED: dict[str, list[Row]] = {
    "default": [(INF, {"BLOCK_M": 64, "BLOCK_N": 32, "GROUP_M": 8, "GROUPS": 2,
                       "num_warps": 4})],
    # panel kernel, 128 x 64 tiles (2 x 128 micro-kernel blocks on AVX-512), 32 of K a step,
    # tiles in row order (GROUP_M 1: a panel of x^T stays in L2 across its row of tiles):
    # at 2048^3 (2 threads, interleaved, CPU-time medians) ahead of 64 x 64, 128 x 128,
    # 128 x 32, BLOCK_K 16 and GROUP_M 8 by 6-10% (BLOCK_K 64 by 15%)
    "cpu": [(INF, {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 1,
                    "num_warps": 1})],
    "tile": [(INF, {"BLOCK_M": 16, "BLOCK_N": 16, "GROUP_M": 4, "GROUPS": 2,
                      "num_warps": 1})],
    "simt-cpu": [(INF, {"BLOCK_M": 32, "BLOCK_N": 32, "GROUP_M": 8, "GROUPS": 2,
                          "num_warps": 1})],
}

# semi_structured_matmul on CUDA with float16/bfloat16 (kd.sparse_dot, mma.sp): BLOCK_N is
# the sparse operand's rows (multiple of 16), BLOCK_M the dense one's columns (of 8), BLOCK_K
# the logical K step (of 32); the whole BLOCK_N x BLOCK_M accumulator is one exchange.
SEMI_STRUCTURED_MMA: dict[str, list[Row]] = {
    "default": [(INF, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8,
                       "num_warps": 4})],
}

# sparsify_2_4, size = K * N
SPARSIFY: dict[str, list[Row]] = {
    "default": [(INF, {"BLOCK_G": 8, "BLOCK_N": 64, "num_warps": 4})],
    "cpu": [(INF, {"BLOCK_G": 16, "BLOCK_N": 128, "num_warps": 1})],
    "tile": [(INF, {"BLOCK_G": 16, "BLOCK_N": 64, "num_warps": 1})],
    "simt-cpu": [(INF, {"BLOCK_G": 8, "BLOCK_N": 64, "num_warps": 1})],
}
