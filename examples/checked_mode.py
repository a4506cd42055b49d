"""Checked mode and NaN poison: an off-by-one kernel caught on every available backend.

    python examples/checked_mode.py
"""

import numpy as np

import kdsl as kd


@kd.jit
def shift_copy(x_ptr, y_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    # bug: reads x[i + 1], one past the end for the last element
    kd.store(y_ptr + offs, kd.load(x_ptr + offs + 1, mask=m), mask=m)


@kd.jit
def half_write(y_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    kd.store(y_ptr + offs, offs.to(kd.float32), mask=offs < n // 2)  # bug: half the outputs


def main() -> None:
    x = np.arange(100, dtype=np.float32)
    for backend in kd.available_backends():
        y = np.empty_like(x)
        try:
            shift_copy[(kd.cdiv(100, 32),)](x, y, 100, BLOCK=32, backend=backend, check=True)
        except kd.OutOfBoundsError as e:
            print(f"--- {backend}: caught\n{e}\n")
        # NaN poison fills every output first: elements the kernel never writes stay NaN
        y = np.zeros_like(x)
        half_write[(kd.cdiv(100, 32),)](y, 100, BLOCK=32, backend=backend, poison=True)
        print(f"{backend}: {int(np.isnan(y).sum())} of {y.size} outputs never written\n")


if __name__ == "__main__":
    main()
