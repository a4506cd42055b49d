"""One kernel launched from several Python threads at once: the first (compiling) launches race,
then cached launches run concurrently; every result must be right on every backend."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np

import kdsl as kd


def make_kernel():
    # a fresh JITFunction per test, so the threads race on its first compilation
    @kd.jit
    def scale_add(x_ptr, out_ptr, a, n, BLOCK: kd.constexpr):
        offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
        m = offs < n
        kd.store(out_ptr + offs, kd.load(x_ptr + offs, mask=m) * a + 1.0, mask=m)
    return scale_add


def test_concurrent_launches(backend):
    kernel = make_kernel()
    n = 5000

    def work(i: int) -> bool:
        x = np.random.default_rng(i).standard_normal(n).astype(np.float32)
        ok = True
        for rep in range(3):
            out = np.empty_like(x)
            kernel[(kd.cdiv(n, 512),)](x, out, float(i + rep), n, BLOCK=512, backend=backend)
            ok &= bool(np.allclose(out, x * np.float32(i + rep) + 1, rtol=1e-6, atol=1e-6))
        return ok

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(work, range(12)))
    assert all(results)
    assert len(kernel.cache) == 1  # one specialisation, compiled once and shared
