"""Matrix multiplication with a fused epilogue: `matmul(a, b, bias=None, activation=None)`.

`a` [M, K] @ `b` [K, N] (+ bias [N]) then relu / gelu (erf form) / silu, in one kernel.
Tiled: each program computes a BLOCK_M x BLOCK_N tile of the output, walking K in BLOCK_K
steps with a float32 accumulator; programs are ordered in groups of GROUP_M tile rows so that
consecutive programs share B tiles (cache reuse).  Ragged edges are masked.  Batched: `a`
[B, M, K] with `b` [B, K, N] or a shared `b` [K, N]; the batch is grid axis 1.
Inputs float32 / float16 / bfloat16 (a and b alike); the output has their dtype.  a and b are
read in a BLAS layout, row-major with a row stride or column-major (a transposed view such as
torch's `w.t()`), chosen at compile time; other layouts are copied first.
"""

from __future__ import annotations

from typing import Any

import kdsl as kd
from kdsl.autotune import enabled as autotune_enabled
from kdsl.runtime.registry import reference_backend

from . import configs
from ._index import wide_offsets, widen
from ._validate import (
    FLOATS,
    Arg,
    as_arg,
    blas_layout,
    check_shape,
    empty,
    resolve_backend,
    result,
    same_dtype,
)

# activation name -> the constexpr code the kernel branches on at compile time
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "silu": 3}


@kd.jit
def apply_activation(x, ACT: kd.constexpr):
    """The epilogue activation of code ACT (see ACTIVATIONS) on a float32 tile."""
    if ACT == 1:
        x = kd.maximum(x, 0.0)
    elif ACT == 2:
        x = 0.5 * x * (1.0 + kd.erf(x * 0.7071067811865476))
    elif ACT == 3:
        x = x * kd.sigmoid(x)
    return x


@kd.jit
def grouped_tile(M, N, BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr, GROUP_M: kd.constexpr):
    """(pid_m, pid_n) of this program in grouped order: GROUP_M tile rows share each column
    sweep."""
    pid = kd.program_id(0)
    num_pid_m = kd.cdiv(M, BLOCK_M)
    num_pid_n = kd.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    size_m = kd.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    return pid_m, pid_n


@kd.jit
def matmul_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, stride_ab, stride_bb, lda, ldb,
                  BLOCK_M: kd.constexpr, BLOCK_N: kd.constexpr, BLOCK_K: kd.constexpr,
                  GROUP_M: kd.constexpr, HAS_BIAS: kd.constexpr, ACT: kd.constexpr,
                  A_T: kd.constexpr = False, B_T: kd.constexpr = False,
                  WIDE: kd.constexpr = False):
    # BLAS layouts: a[m, k] at m * lda + k, or at m + k * lda when A_T (column-major, e.g. a
    # transposed view); b[k, n] likewise with ldb and B_T.  The unit stride is compile-time.
    # The batch bases are int64; the tile offsets are int64 only when WIDE (kernels/_index.py).
    pid_m, pid_n = grouped_tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    batch = kd.program_id(1).to(kd.int64)
    a_ptr += batch * stride_ab
    b_ptr += batch * stride_bb
    c_ptr += batch * M * N
    rm = widen(pid_m * BLOCK_M + kd.arange(0, BLOCK_M), WIDE)
    rn = widen(pid_n * BLOCK_N + kd.arange(0, BLOCK_N), WIDE)
    rk = widen(kd.arange(0, BLOCK_K), WIDE)
    acc = kd.zeros((BLOCK_M, BLOCK_N), dtype=kd.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + rk
        if A_T:
            a_offs = rm[:, None] + ks[None, :] * lda
        else:
            a_offs = rm[:, None] * lda + ks[None, :]
        if B_T:
            b_offs = ks[:, None] + rn[None, :] * ldb
        else:
            b_offs = ks[:, None] * ldb + rn[None, :]
        a = kd.load(a_ptr + a_offs, mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = kd.load(b_ptr + b_offs, mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = kd.dot(a, b, acc)
    if HAS_BIAS:
        acc += kd.load(bias_ptr + rn, mask=rn < N, other=0.0).to(kd.float32)[None, :]
    acc = apply_activation(acc, ACT)
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def check_activation(activation: Any) -> int:
    try:
        return ACTIVATIONS[activation]
    except (KeyError, TypeError):
        raise ValueError(f"activation: {activation!r} is not one of "
                         f"{', '.join(repr(k) for k in ACTIVATIONS)}") from None


def launch_matmul(a: Arg, b: Arg, bias: Arg | None, act: int, backend: str) -> Arg:
    """Run the kernel on checked arguments (a [.., M, K], b [.., K, N]); returns the output."""
    M, K = a.shape[-2:]
    N = b.shape[-1]
    batch = a.shape[0] if a.ndim == 3 else 1
    out_shape = (batch, M, N) if a.ndim == 3 else (M, N)
    out = empty(a, out_shape, a.dtype)
    if M == 0 or N == 0 or batch == 0:
        return out
    a, a_t, lda, stride_ab = blas_layout(a)
    b, b_t, ldb, stride_bb = blas_layout(b)
    if b.ndim == 2:
        stride_bb = 0  # one b shared by the batch
    args = (a.kernel_arg, b.kernel_arg,
            (bias if bias is not None else a).kernel_arg,  # unread when no bias
            out.kernel_arg, M, N, K, stride_ab, stride_bb, lda, ldb)
    flags = {"HAS_BIAS": bias is not None, "ACT": act}
    if a_t or b_t:  # the defaults stay out of the specialisation of the common case
        flags.update(A_T=a_t, B_T=b_t)
    if wide_offsets(a, b, out):
        flags["WIDE"] = True
    table = configs.table_for(configs.MATMUL, backend, a.dtype)
    if a.device is None and backend != reference_backend() and autotune_enabled():
        # host arrays: the autotuner picks the fastest configuration that agrees with the
        # table's (per backend, device and (M, N, K); cached on disk; KDSL_AUTOTUNE=0 skips it)
        def grid(meta):
            return (kd.cdiv(M, meta["BLOCK_M"]) * kd.cdiv(N, meta["BLOCK_N"]), batch)
        _tuner(backend, table, M * N, M)[grid](*args, backend=backend, **flags)
        return out
    meta = configs.fit_rows(configs.pick(table, backend, M * N), M, backend)
    grid = (kd.cdiv(M, meta["BLOCK_M"]) * kd.cdiv(N, meta["BLOCK_N"]), batch)
    matmul_kernel[grid](*args, backend=backend, **flags, **meta)
    return out


_TUNERS: dict[tuple[Any, ...], Any] = {}  # (backend, table, first config, row height)


def _tuner(backend: str, table: dict[str, Any], size: int, M: int) -> Any:
    """The autotuned matmul kernel for `backend`, its candidates ordered for this size class
    (the row of `table` covering `size` first: the reference the other candidates must
    match), each with BLOCK_M cut to M's height (`configs.search_space` with M).  The
    matrix-unit table's rows are its only candidates (the others' BLOCK_K is too short)."""
    first = configs.fit_rows(configs.pick(table, backend, size), M, backend)
    key = (backend, id(table), tuple(sorted(first.items())), configs.row_height(M, backend))
    tuner = _TUNERS.get(key)
    if tuner is None:
        search = configs.MATMUL_SEARCH if table is configs.MATMUL else {"default": []}
        space = configs.search_space(table, search, backend, size, M)
        cands = [kd.Config({k: v for k, v in m.items() if k != "num_warps"},
                           num_warps=m.get("num_warps", 4)) for m in space]
        tuner = _TUNERS[key] = kd.autotune(configs=cands, key=["M", "N", "K"])(matmul_kernel)
    return tuner


def matmul(a: Any, b: Any, bias: Any = None, activation: str | None = None,
           backend: str | None = None) -> Any:
    """act(a @ b + bias); a [M, K] or [B, M, K], b [K, N] or [B, K, N], bias [N]."""
    a_ = as_arg("a", a, FLOATS, ndim=(2, 3), strided=True)
    b_ = as_arg("b", b, FLOATS, ndim=(2, 3), strided=True)
    same_dtype(a_, b_)
    act = check_activation(activation)
    if b_.ndim == 3 and a_.ndim != 3:
        raise ValueError(f"b: a batched b {b_.shape} needs a batched a, got a {a_.shape}")
    K = a_.shape[-1]
    if b_.shape[-2] != K:
        raise ValueError(f"b: expected {K} rows (a's last dimension), got shape {b_.shape}")
    if b_.ndim == 3 and b_.shape[0] != a_.shape[0]:
        raise ValueError(f"b: batch {b_.shape[0]} differs from a's batch {a_.shape[0]}")
    bias_ = None
    if bias is not None:
        bias_ = as_arg("bias", bias, FLOATS, ndim=1)
        check_shape(bias_, (b_.shape[-1],), "b's last dimension")
    be = resolve_backend(backend, *(x for x in (a_, b_, bias_) if x is not None))
    return result(launch_matmul(a_, b_, bias_, act, be))
