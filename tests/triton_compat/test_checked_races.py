"""The Triton-form kernels run clean in checked mode: no race between program instances is
reported (nor any bounds violation) for the kernels that store through atomics, share buffers
under a spin lock (layer-norm backward), scatter by computed indices or exit early (pointers
loaded from tables, as in the grouped GEMM, are not recorded: they come from no argument).  Each case
runs a test of test_ported_kernels.py with `KDSL_CHECK=1`, so its results are checked too."""

from __future__ import annotations

import os

import pytest

from kdsl.runtime import races

from . import test_ported_kernels as ported_tests

CASES = [
    ("test_layer_norm_forward_backward", {}),   # plain loads/stores under atomic_cas/xchg
    ("test_moe_routing", {}),                   # atomic_add counts, scatter by index
    ("test_every_atomic", {}),                  # every atomic next to plain stores
    ("test_cross_entropy", {}),
    ("test_cumsum", {"reverse": True}),
    ("test_persistent_softmax", {"shape": (7, 100)}),  # programs loop over rows
    ("test_swizzled_matmul_early_exit", {}),
    ("test_flash_attention_block_pointers", {"causal": True}),
]


# PoCL builds the instrumented kernels slowly (minutes for the larger ones on two cores): the
# default run checks the atomics cases there, KDSL_SLOW=1 all of them.
OPENCL_DEFAULT = {"test_moe_routing", "test_every_atomic"}


@pytest.mark.parametrize("name,params", CASES, ids=[c[0][5:] for c in CASES])
def test_no_race_reported(ported, backend, monkeypatch, name, params):
    if (backend == "opencl" and name not in OPENCL_DEFAULT
            and os.environ.get("KDSL_SLOW", "") in ("", "0")):
        pytest.skip("slow on PoCL (instrumented build): set KDSL_SLOW=1")
    scanned = []

    def find_race(info, shadows, args, grid):
        scanned.append(len(shadows))
        return real(info, shadows, args, grid)

    real = races.find_race
    monkeypatch.setattr(races, "find_race", find_race)
    monkeypatch.setenv("KDSL_CHECK", "1")
    getattr(ported_tests, name)(ported, backend, **params)
    assert scanned, "no checked launch recorded any access"
