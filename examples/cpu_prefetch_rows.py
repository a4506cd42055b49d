"""`kd.prefetch`: a row kernel asking for the next row while it computes this one.  Each
program normalises one row by its largest magnitude (two passes over the row); with
`AHEAD=True` the second pass also hints the next row's input and output lines, which the
next program on this thread reads and writes.  Equal results on every backend, and the time
of each variant on the llvm backend (where the hints become `prefetcht1`; elsewhere they are
dropped).

    python examples/cpu_prefetch_rows.py
"""

import time

import numpy as np

import kdsl as kd


@kd.jit
def scale_rows(x_ptr, y_ptr, n_cols, BLOCK: kd.constexpr, AHEAD: kd.constexpr):
    row = kd.program_id(0).to(kd.int64)
    x_ptr += row * n_cols
    y_ptr += row * n_cols
    top = kd.zeros((BLOCK,), kd.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        top = kd.maximum(top, kd.abs(kd.load(x_ptr + cols, mask=cols < n_cols, other=0.0)))
    inv = 1.0 / kd.max(top, axis=0)
    for off in range(0, n_cols, BLOCK):
        cols = off + kd.arange(0, BLOCK)
        if AHEAD:  # the next program's row (past the last row: a hint never faults)
            kd.prefetch(x_ptr + n_cols + cols)
            kd.prefetch(y_ptr + n_cols + cols)
        x = kd.load(x_ptr + cols, mask=cols < n_cols, other=0.0)
        kd.store(y_ptr + cols, x * inv, mask=cols < n_cols)


def main() -> None:
    rng = np.random.default_rng(0)
    small = rng.standard_normal((48, 1000)).astype(np.float32)  # a ragged last step
    for backend in kd.available_backends():
        outs = [np.empty_like(small) for _ in range(2)]
        for out, ahead in zip(outs, (False, True)):
            scale_rows[(48,)](small, out, 1000, BLOCK=256, AHEAD=ahead, backend=backend)
        print(f"{backend:7s} results equal with and without kd.prefetch: "
              f"{bool(np.array_equal(outs[0], outs[1]))}")
    if "llvm" in kd.available_backends():
        rows, cols = 4096, 4096
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        y = np.empty_like(x)
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(7):  # interleaved, medians: the machine may be shared
            for ahead in (False, True):
                t0 = time.perf_counter()
                scale_rows[(rows,)](x, y, cols, BLOCK=256, AHEAD=ahead, backend="llvm")
                times[ahead].append(time.perf_counter() - t0)
        for ahead in (False, True):
            print(f"llvm AHEAD={ahead}: median {np.median(times[ahead]) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
